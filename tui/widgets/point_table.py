"""The points of a study on the Pareto screen: frontier first (the knee marked), then the
best of the rest by the x metric, with the two plotted metrics.

The two metrics come first, right after the point's mark, in the units the chart's axes
use: they are what a choice is made on, and they stay in sight when a narrow terminal
scrolls the configuration columns off to the right. Each row starts with the glyph that
marks the point on the chart, so a row and its marker are found from each other.

The table is rebuilt when the axes or the study change, so it holds at most
``MAX_ROWS`` rows: measuring a thousand rows' cells stalls the UI for a third of a second,
and the frontier plus the best few dozen others is what a decision needs."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from core.results.analysis import direction
from tui.data.pareto_view import ParetoView
from tui.data.sweep_rows import args_text, load_text
from tui.widgets.pareto_plot import MARKERS

MAX_ROWS = 60


def rich_style(style: str, variables: dict[str, str]) -> str:
    """A chart style ("bold $text-error") with the theme's variables filled in, for a
    DataTable cell (Rich text, which knows nothing of Textual's variables)."""
    return " ".join(variables.get(t[1:], "") if t.startswith("$") else t for t in style.split())


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
        dots = {d.key: d for d in (*view.measured, *view.failed_slo, *view.imported)}
        # The recommended point is always a row, even off the frontier of these axes.
        first = [*front, *([view.recommended] if view.recommended in dots and view.recommended not in front else [])]
        sign = -1.0 if direction(view.x) == "max" else 1.0
        rest = sorted((d for d in (*view.measured, *view.failed_slo, *view.imported) if d.key not in first), key=lambda d: sign * d.x)[
            : max(0, MAX_ROWS - len(first))
        ]
        keys = [*first, *[d.key for d in rest]]
        theme = self.app.theme
        shown = (theme, view.ax, view.ay, view.knee, view.recommended, tuple((k, dots.get(k)) for k in keys))
        if shown == self._shown:
            return  # a reload that changed nothing on the table: keep it (and its scroll)
        self._shown = shown
        variables = self.app.theme_variables
        with_slo = any(view.points[k].meets_slo is not None for k in keys)
        self.clear(columns=True)
        self.add_column("", key="mark")
        self.add_column(Text(view.ax.label, justify="right"), key="x")
        self.add_column(Text(view.ay.label, justify="right"), key="y")
        if with_slo:
            self.add_column("SLO", key="slo")
        self.add_column(Text("#", justify="right"), key="trial")
        self.add_column("server", key="server")
        self.add_column("load", key="load")
        ok, bad = rich_style("$text-success", variables), rich_style("$text-error", variables)
        for key in keys:
            p, d = view.points[key], dots.get(key)
            kind = view.marker(key)
            glyph, style = MARKERS[kind]
            if kind in ("measured", "frontier"):  # on mixed hardware, the class's shape, as on the chart
                glyph = view.class_glyph(key) or glyph
            cells = [
                Text(glyph, rich_style(style, variables)),
                Text(view.ax.fmt(d.x if d else None), justify="right"),
                Text(view.ay.fmt(d.y if d else None), justify="right"),
            ]
            if with_slo:
                cells.append(Text("") if p.meets_slo is None else Text("pass", ok) if p.meets_slo else Text("fail", bad))
            cells += [Text(str(p.trial_id), justify="right"), Text(args_text(p.server_args)), Text(load_text(p.client_args))]
            self.add_row(*cells, key=key)
        # First the best point that meets the SLOs (what "Deploy this" should ship), not the
        # knee, which may miss them; the knee keeps its mark.
        default = view.recommended if view.recommended in keys else view.knee.key if view.knee is not None else None
        if keep is not None and keep in keys:
            self.move_cursor(row=self.get_row_index(keep))
        elif default is not None:
            self.move_cursor(row=self.get_row_index(default))

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
