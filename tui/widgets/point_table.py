"""The points of a study on the Pareto screen: frontier first (the knee marked), then the
best of the rest by the x metric, with the two plotted metrics.

The table is rebuilt when the axes or the study change, so it holds at most
``MAX_ROWS`` rows: measuring a thousand rows' cells stalls the UI for a third of a second,
and the frontier plus the best few dozen others is what a decision needs."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from core.results.analysis import direction
from tui.data.pareto_view import LABELS, ParetoView
from tui.data.sweep_state import _args, _load


MAX_ROWS = 60


def _fmt(v: float | None) -> str:
    if v is None:
        return ""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"


class PointTable(DataTable):
    DEFAULT_CSS = """
    PointTable { height: 1fr; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self._shown: tuple | None = None

    def show(self, view: ParetoView | None) -> None:
        keep = self.selected_key()
        if view is None:
            self.clear(columns=True)
            self._shown = None
            return
        front = [d.key for d in view.frontier]
        sign = -1.0 if direction(view.x) == "max" else 1.0
        rest = sorted((d for d in (*view.measured, *view.failed_slo, *view.imported) if d.key not in front),
                      key=lambda d: sign * d.x)[: max(0, MAX_ROWS - len(front))]
        dots = {d.key: d for d in (*view.measured, *view.failed_slo, *view.imported)}
        keys = [*front, *[d.key for d in rest]]
        shown = (view.x, view.y, view.knee, tuple((k, dots.get(k)) for k in keys))
        if shown == self._shown:
            return  # a reload that changed nothing on the table: keep it (and its scroll)
        self._shown = shown
        self.clear(columns=True)
        self.add_columns("", "#", "server args", "load", LABELS.get(view.x, view.x), LABELS.get(view.y, view.y), "SLO")
        for key in keys:
            p, d = view.points[key], dots.get(key)
            mark = Text("◆", "dark_orange") if view.knee and key == view.knee.key else Text("●", "green") if key in front else Text("")
            slo = Text("") if p.meets_slo is None else Text("pass", "green") if p.meets_slo else Text("fail", "red")
            self.add_row(mark, str(p.trial_id), _args(p.server_args), _load(p.client_args),
                         _fmt(d.x if d else None), _fmt(d.y if d else None), slo, key=key)
        if keep is not None and keep in keys:
            self.move_cursor(row=self.get_row_index(keep))
        elif view.knee is not None:
            self.move_cursor(row=self.get_row_index(view.knee.key))

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
