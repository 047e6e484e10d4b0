"""Predicted latency and throughput against concurrency, one row per (configuration, load)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from tui.data.estimate import PredictionRow


def _ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v / 1000:.1f} s" if v >= 10_000 else f"{v:.0f} ms"


def _num(v: float | None, fmt: str = "{:.1f}") -> str:
    return "–" if v is None else fmt.format(v)


# The latencies are p99s (what SLOs are written against); say so, or an ITL p99 of a step
# that carries prefill reads as the typical gap.
HEADERS = ("config", "conc.", "TTFT p99", "ITL p99", "E2E p99", "req/s", "tok/s", "SLO")


class PredictionTable(DataTable):
    DEFAULT_CSS = """
    PredictionTable { height: auto; max-height: 14; }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for h in HEADERS:
            self.add_column(h, key=h)

    def show(self, rows: tuple[PredictionRow, ...]) -> None:
        cells = [_cells(r) for r in rows]
        # Each column at its widest cell, set with the columns: a DataTable that sizes them
        # itself does so on its next idle, and a frame drawn before that showed the header
        # at the old widths over the new rows (a flaky snapshot, 1 capture in about 8).
        self.clear(columns=True)
        for j, h in enumerate(HEADERS):
            self.add_column(h, width=max([len(h)] + [c[j].cell_len for c in cells]), key=h)
        for i, c in enumerate(cells):
            self.add_row(*c, key=str(i))


def _cells(r: PredictionRow) -> tuple[Text, ...]:
    slo = Text("–") if r.meets_slo is None else Text("pass", "green") if r.meets_slo else Text("fail", "red")
    conc = Text(f"{r.concurrency} ◆", style="bold") if r.is_knee else Text(str(r.concurrency))
    return (
        Text(r.config),
        conc,
        Text(_ms(r.ttft_ms)),
        Text(_ms(r.itl_ms)),
        Text(_ms(r.e2e_ms)),
        Text(_num(r.request_throughput, "{:.2f}")),
        Text(_num(r.output_throughput, "{:.0f}")),
        slo,
    )
