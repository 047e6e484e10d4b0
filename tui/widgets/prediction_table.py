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


class PredictionTable(DataTable):
    DEFAULT_CSS = """
    PredictionTable { height: auto; max-height: 14; }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        # The latencies are p99s (what SLOs are written against); say so, or an ITL p99 of a
        # step that carries prefill reads as the typical gap.
        self.add_columns("config", "conc.", "TTFT p99", "ITL p99", "E2E p99", "req/s", "tok/s", "SLO")

    def show(self, rows: tuple[PredictionRow, ...]) -> None:
        self.clear()
        for i, r in enumerate(rows):
            slo = Text("–") if r.meets_slo is None else Text("pass", "green") if r.meets_slo else Text("fail", "red")
            conc = Text(f"{r.concurrency} ◆", style="bold") if r.is_knee else Text(str(r.concurrency))
            self.add_row(
                r.config,
                conc,
                _ms(r.ttft_ms),
                _ms(r.itl_ms),
                _ms(r.e2e_ms),
                _num(r.request_throughput, "{:.2f}"),
                _num(r.output_throughput, "{:.0f}"),
                slo,
                key=str(i),
            )
