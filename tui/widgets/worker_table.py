"""The Sweep screen's worker table (a study several ``knee sweep --join`` workers share): one
row per worker, updated in place by worker id; and the host column the trial table gains for
such a study. A study run by one runner shows neither."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from tui.data.workers import WorkerView

STATE_STYLE = {"running": "green", "finished": "dim", "waiting": "dark_orange", "stopped": "dim", "silent": "red", "presumed dead": "bold red"}
COLUMNS = (("name", "worker"), ("state", "state"), ("held", "holds"), ("beat", "beat s"), ("done", "done"))
HOST_COLUMN = "host"


def _cells(w: WorkerView) -> tuple[object, ...]:
    return (
        w.name,
        Text(w.state, STATE_STYLE.get(w.state, "")),
        w.held,
        Text("" if w.heartbeat_s is None else str(w.heartbeat_s), justify="right"),
        Text(str(w.done), justify="right"),
    )


class WorkerTable(DataTable):
    # Read, not navigated: focus (and the keys) stay with the trial table.
    can_focus = False
    DEFAULT_CSS = """
    WorkerTable { height: auto; max-height: 6; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="none", show_cursor=False, **kw)
        self._rows: dict[str, WorkerView] = {}

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def sync(self, workers: tuple[WorkerView, ...]) -> None:
        wanted = {w.key: w for w in workers}
        for key in [k for k in self._rows if k not in wanted]:
            self.remove_row(key)
            del self._rows[key]
        for w in workers:
            old = self._rows.get(w.key)
            if old == w:
                continue
            if old is None:
                self.add_row(*_cells(w), key=w.key)
            else:
                for (col, _), new, prev in zip(COLUMNS, _cells(w), _cells(old)):
                    if new != prev:
                        self.update_cell(w.key, col, new)
            self._rows[w.key] = w


def sync_hosts(table: DataTable, hosts: dict[str, str]) -> None:
    """Fill the trial table's host column (added on the first call) from ``hosts`` (point id
    -> host), touching only cells that changed. The trial table itself knows nothing of
    workers: it stays as it is for the one-runner studies that are most of them."""
    if HOST_COLUMN not in table.columns:
        table.add_column(HOST_COLUMN, key=HOST_COLUMN)
    for key in list(table.rows):
        value = hosts.get(key.value or "", "")
        try:
            same = table.get_cell(key, HOST_COLUMN) == value
        except CellDoesNotExist:  # a row added before the column, or by the table's sync since
            same = False
        if not same:
            table.update_cell(key, HOST_COLUMN, value)
