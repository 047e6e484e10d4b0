"""The Pareto chart's widgets: the plotext canvas, its axis titles (``ParetoPlot``) and its
key (``ParetoLegend``), printed below the chart rather than inside it, where it would
cover points. The drawing itself, without Textual, is :mod:`tui.data.pareto_canvas`;
this module adds the theme (``Palette``: Textual style strings resolved to RGB when the
chart is drawn, so it follows a light/dark switch) and the Textual rows around plotext.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.color import Color
from textual.content import Content
from textual.geometry import Size
from textual.markup import parse_style
from textual.theme import BUILTIN_THEMES
from textual.widget import Widget
from textual.widgets import Static
from textual_plotext.plot import Plot

# The drawing's names, re-exported: the table, the Recommend chart and the tests have
# always taken them from here.
from tui.data.pareto_canvas import (  # noqa: F401 - re-exported
    DIM,
    DRAW_ORDER,
    LINE_CHARS,
    LINE_STYLE,
    MARKERS,
    SELECTED,
    SLO_STYLE,
    TICK_STYLE,
    Chart,
    Ink,
    draw_chart,
)
from tui.data.pareto_view import CLASS_GLYPHS, Axis, ParetoView
from tui.widgets.safe_plot import SafePlot


class Palette:
    """Resolves the module's Textual style strings ("bold $text-error", "$foreground 55%",
    "... on $block-cursor-background") to RGB for plotext, which knows no theme variables
    and no transparency: a colour with alpha is blended onto the background it sits on."""

    def __init__(self, variables: dict[str, str], background: Color) -> None:
        self.variables = variables
        self.background = background

    def __call__(self, style: str) -> Ink:
        st = parse_style(style, self.variables)
        bg = self.background + st.background if st.background is not None else self.background
        # "auto" (the cursor's foreground) is a contrast colour, picked against what it is on.
        fg = bg + st.foreground if st.foreground is not None else None
        return Ink(fg.rgb if fg is not None else None, bg.rgb if st.background is not None else None, "bold" if st.bold else None)


def default_palette(theme: str = "textual-dark") -> Palette:
    """A theme's palette without an app (tests and scripts), on its screen background."""
    variables = BUILTIN_THEMES[theme].to_color_system().generate()
    return Palette(variables, Color.parse(variables["background"]))


def draw(view: ParetoView, selected: str | None, width: int, height: int, palette: Palette | None = None, plt: Plot | None = None) -> Chart:
    """:func:`tui.data.pareto_canvas.draw_chart` with the default theme's palette and a
    fresh plotext figure where none is given (tests and scripts)."""
    return draw_chart(view, selected, width, height, palette or default_palette(), plt if plt is not None else Plot())


class ParetoCanvas(SafePlot):
    """The plotext part of the chart, drawn at render time: the ticks depend on the size."""

    DEFAULT_CSS = """
    ParetoCanvas { height: 1fr; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._view: ParetoView | None = None
        self._selected: str | None = None
        self.chart: Chart | None = None

    def show(self, view: ParetoView | None, selected: str | None = None) -> None:
        self._view, self._selected = view, selected
        self.refresh()

    def palette(self) -> Palette:
        # The background the chart sits on, for colours given with an alpha.
        return Palette(self.app.theme_variables, self.background_colors[1])

    def render_plot(self) -> RenderResult:
        w, h = self.size
        view = self._view
        self.chart = None
        if view is None or view.empty:
            return Content.styled("no measured points yet", DIM)
        if w < 24 or h < 4:
            return Content.styled("(too small for a chart)", DIM)
        self.chart = draw(view, self._selected, w, h, self.palette(), self.plt)
        return Text.from_ansi(self.chart.ansi)


class ChartTitle(Widget):
    """One row: a title at the left and, where both fit, a note at the right."""

    DEFAULT_CSS = """
    ChartTitle { height: 1; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.left, self.right = Content(""), Content("")

    def show(self, left: Content, right: Content) -> None:
        self.left, self.right = left, right
        self.refresh()

    def render(self) -> Content:
        w = self.content_region.width
        room = w - self.left.cell_length - self.right.cell_length
        if self.right.cell_length and room >= 2:
            return Content.assemble(self.left, " " * room, self.right)
        return self.left


class ParetoPlot(Widget):
    """The chart with its axis titles, which plotext cannot place where they read: the y
    title heads the y axis (with the frontier's size at its right), the x title ends the x
    axis, under its tick labels."""

    DEFAULT_CSS = """
    ParetoPlot { height: 1fr; min-height: 8; layout: vertical; }
    ParetoPlot > #pareto-xtitle { height: 1; width: 1fr; text-align: right; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._view: ParetoView | None = None
        self._selected: str | None = None

    def compose(self) -> ComposeResult:
        yield ChartTitle(id="pareto-ytitle")
        yield ParetoCanvas(id="pareto-canvas")
        yield Static("", id="pareto-xtitle")

    def on_mount(self) -> None:
        self._apply()

    def show(self, view: ParetoView | None, selected: str | None = None) -> None:
        self._view, self._selected = view, selected
        if self.is_mounted:
            self._apply()

    @property
    def canvas(self) -> ParetoCanvas:
        return self.query_one(ParetoCanvas)

    @property
    def chart(self) -> Chart | None:
        return self.canvas.chart

    @property
    def titles(self) -> tuple[str, str]:
        """The y title row and the x title row, as last drawn (aligned, full width)."""
        rows = (self.query_one(ChartTitle), self.query_one("#pareto-xtitle", Static))
        return tuple(w.render_line(0).text for w in rows)  # type: ignore[return-value]

    def _apply(self) -> None:
        view = self._view
        self.canvas.show(view, self._selected)
        ytitle, xtitle = self.query_one(ChartTitle), self.query_one("#pareto-xtitle", Static)
        if view is None or view.empty:
            ytitle.show(Content(""), Content(""))
            xtitle.update("")
            return
        note = Content.styled(f"{len(view.frontier)} on the frontier", DIM) if view.frontier else Content("")
        ytitle.show(_title(view.ay), note)
        xtitle.update(_title(view.ax))


def _title(a: Axis) -> Content:
    return Content.assemble((a.label, "bold"), (f" · {a.better_label}", DIM))


def legend_items(view: ParetoView | None, selected: str | None) -> list[Content]:
    """One entry per kind of mark the chart shows now: a key to marks that are absent
    would only push the rest onto another line."""
    if view is None or view.empty:
        return []
    kinds = {view.marker(d.key) for d in (*view.measured, *view.failed_slo, *view.imported)}
    items: list[Content] = []
    if view.frontier:
        items.append(Content.assemble(("●─", LINE_STYLE), " frontier"))
    for kind, label in (("measured", "measured"), ("failed", "misses SLO"), ("imported", "imported")):
        if kind in kinds:
            glyph, style = MARKERS[kind]
            items.append(Content.assemble((glyph, style), f" {label}"))
    if view.predicted:
        glyph, style = MARKERS["predicted"]
        items.append(Content.assemble((glyph, style), " predicted"))
    if view.knee is not None:
        glyph, style = MARKERS["knee"]
        items.append(Content.assemble((glyph, style), " knee"))
    if selected is not None and selected in view.points and any(d.key == selected for d in (*view.measured, *view.failed_slo, *view.imported)):
        glyph, _ = MARKERS[view.marker(selected)]
        items.append(Content.assemble((glyph, SELECTED), " selected"))
    if view.x_bound is not None or view.y_bound is not None:
        items.append(Content.assemble(("╌", SLO_STYLE), " SLO"))
    # Mixed hardware: which shape is which GPU box, last so the marks' key stays first.
    for label in view.classes:
        glyph = CLASS_GLYPHS[view.classes.index(label) % len(CLASS_GLYPHS)]
        items.append(Content.assemble((glyph, MARKERS["measured"][1]), f" {label}"))
    return items


def wrap_items(items: list[Content], width: int, gap: int = 2) -> list[Content]:
    """Lines of items, broken between items and never inside one."""
    lines: list[list[Content]] = []
    used = 0
    for item in items:
        n = item.cell_length
        if lines and used + gap + n <= width:
            lines[-1].append(item)
            used += gap + n
        else:
            lines.append([item])
            used = n
    return [Content(" " * gap).join(line) for line in lines]


class ParetoLegend(Widget):
    """The chart's key, wrapped to the width it has."""

    DEFAULT_CSS = """
    ParetoLegend { height: auto; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.items: list[Content] = []

    def show(self, items: list[Content]) -> None:
        self.items = items
        self.refresh(layout=True)

    def get_content_height(self, _container: Size, _viewport: Size, width: int) -> int:
        return max(1, len(wrap_items(self.items, width)))

    def render(self) -> RenderResult:
        return Content("\n").join(wrap_items(self.items, self.content_region.width))
