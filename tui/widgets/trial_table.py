"""The sweep's trial table: one row per measured load point (or per trial before its first
point), updated in place by row key so a live sweep never rebuilds the table."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.message import Message
from textual.widgets import DataTable

from tui.data.sweep_rows import RowView

STATUS_STYLE = {"ok": "green", "failed": "red", "running": "dark_orange", "pending": "dim", "skipped": "dim", "interrupted": "magenta"}
# The verdict and throughput come first, so they stay on screen at 80 columns.
COLUMNS = (
    ("trial", "#"),
    ("status", "status"),
    ("slo", "SLO"),
    ("server", "server args"),
    ("load", "load"),
    ("rps", "req/s"),
    ("tps", "tok/s"),
    ("e2e", "E2E p99 s"),
    ("ttft", "TTFT p99 ms"),
    ("itl", "ITL p99 ms"),
    ("reason", "reason"),
)


# One unit per column, named in its header, numbers right-aligned: a column that mixed
# "1946ms" with "16.4s" could not be scanned down by eye (units as the Pareto table's).
def _num(v: float | None, scale: float = 1.0) -> Text:
    if v is None:
        return Text("")
    x = v / scale
    return Text(f"{x:.2f}" if x < 10 else f"{x:,.1f}" if x < 1000 else f"{x:,.0f}", justify="right")


def _cells(r: RowView) -> tuple[object, ...]:
    slo = Text("") if r.slo is None else Text("pass", "green") if r.slo else Text("fail", "red")
    return (
        str(r.trial_id),
        Text(r.status, STATUS_STYLE.get(r.status, "")),
        slo,
        r.server_args,
        r.load,
        Text("" if r.req_s is None else f"{r.req_s:.2f}", justify="right"),
        Text("" if r.tok_s is None else f"{r.tok_s:,.0f}", justify="right"),
        _num(r.e2e_p99, 1000.0),
        _num(r.ttft_p99),
        _num(r.itl_p99),
        r.reason,
    )


class TrialTable(DataTable):
    DEFAULT_CSS = """
    TrialTable { height: 1fr; }
    """

    class UserMoved(Message):
        """The user moved the cursor (keys or mouse), as opposed to the screen following
        the newest row; the Sweep screen stops following then."""

    def _user_moved(self) -> None:
        self.post_message(self.UserMoved())

    def action_cursor_up(self) -> None:
        super().action_cursor_up()
        self._user_moved()

    def action_cursor_down(self) -> None:
        super().action_cursor_down()
        self._user_moved()

    def action_page_up(self) -> None:
        super().action_page_up()
        self._user_moved()

    def action_page_down(self) -> None:
        super().action_page_down()
        self._user_moved()

    def action_scroll_home(self) -> None:
        super().action_scroll_home()
        self._user_moved()

    def action_scroll_top(self) -> None:
        super().action_scroll_top()
        self._user_moved()

    async def _on_click(self, event: events.Click) -> None:
        await super()._on_click(event)
        self._user_moved()

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self._rows: dict[str, RowView] = {}

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def sync(self, rows: tuple[RowView, ...]) -> list[str]:
        """Make the table show ``rows``: add new rows, update changed cells, drop rows that
        went away (a trial's own line once its first point lands). Returns the added keys."""
        wanted = {r.key: r for r in rows}
        for key in [k for k in self._rows if k not in wanted]:
            self.remove_row(key)
            del self._rows[key]
        added = []
        for r in rows:
            old = self._rows.get(r.key)
            if old == r:
                continue
            if old is None:
                self.add_row(*_cells(r), key=r.key)
                added.append(r.key)
            else:
                for (col, _), new, prev in zip(COLUMNS, _cells(r), _cells(old)):
                    if new != prev:
                        self.update_cell(r.key, col, new)
            self._rows[r.key] = r
        return added

    def selected(self) -> RowView | None:
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        return self._rows.get(key or "")
