"""The Pareto scatter: measured points, points that missed an SLO, imported runs,
predictions, the frontier as a staircase through its points, the knee and the selected
point marked, SLO bounds; its axis titles; and its key (``ParetoLegend``), printed below
the chart rather than inside it, where it would cover points.

What plotext draws (``draw``): the axes, the ticks and their labels, and every mark, as
plotext series in call order, lowest first, since plotext has no z-order and a later
series covers an earlier one in the same cell: the SLO lines (dashed), the frontier
staircase, predictions, measured points, imported runs, misses, frontier points, the
knee, then the SLO lines' labels and the selected point (plotext texts, drawn after every
series; the selection as its glyph on the table cursor's colours).

What this module adds around plotext:
- the staircase's vertices (``ParetoView.steps``), drawn as one plotext line series per
  horizontal run (marker "─") and per vertical run ("│"), with its corners as box-drawing
  markers, so it reads as a line where plotext's braille would blur it;
- round ticks (``nice_ticks``: plotext splits a range evenly, into 15.5, 39.8, 64.1), no two
  y labels on adjacent rows, and the limits fixed, so the ticks, the data and the cell
  arithmetic the SLO labels and the tests rely on (``Chart.cell_of``) all agree;
- the axis titles as Textual rows outside plotext (``ParetoPlot``): plotext puts the y
  title at the bottom left beside the x title, where it reads as the x axis's;
- colours: theme variables resolved to RGB when the chart is drawn (``Palette``), so the
  chart follows a light/dark switch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

from rich.ansi import AnsiDecoder
from rich.style import Style
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

from tui.data.pareto_view import Axis, Dot, ParetoView
from tui.widgets.safe_plot import SafePlot, nice_ticks, si

# kind -> (glyph, style). The same glyphs head the table's rows (PointTable).
MARKERS: dict[str, tuple[str, str]] = {
    # Hollow and dimmed: an estimate, not a measurement, but a ring is still a mark where
    # a grey dot read as noise.
    "predicted": ("○", "$foreground 55%"),
    "measured": ("●", "$text-primary"),
    "imported": ("◇", "#a070d0"),
    "failed": ("×", "bold $text-error"),
    "frontier": ("●", "$text-success"),
    "knee": ("◆", "bold $text-warning"),
}
# Lowest first: a later kind covers an earlier one in the same cell; the selected point
# then goes over everything.
DRAW_ORDER = ("measured", "imported", "failed", "frontier", "knee")
LINE_STYLE = "$text-success"
SLO_STYLE = "$text-error 80%"
# plotext draws the axes and the tick labels in one colour: between the old axis (45%) and
# tick (70%) shades, so the labels read and the frame stays quiet.
TICK_STYLE = "$foreground 60%"
DIM = "$foreground 60%"
# The selected point keeps its glyph and takes the table cursor's colours, so it reads as
# the highlighted row's point (its own colour on the cursor's blue vanishes in light themes).
SELECTED = "bold $block-cursor-foreground on $block-cursor-background"
SLO_DASH, SLO_VDASH = "╌", "╎"

_BOX = {  # the directions a line cell joins -> its character
    frozenset("lr"): "─", frozenset("ud"): "│", frozenset("dr"): "┌", frozenset("dl"): "┐",
    frozenset("ur"): "└", frozenset("ul"): "┘", frozenset("udr"): "├", frozenset("udl"): "┤",
    frozenset("dlr"): "┬", frozenset("ulr"): "┴", frozenset("udlr"): "┼",
    frozenset("l"): "─", frozenset("r"): "─", frozenset("u"): "│", frozenset("d"): "│",
}
LINE_CHARS = frozenset(_BOX.values())

RGB = tuple[int, int, int]


@dataclass(frozen=True)
class Ink:
    """A style resolved for plotext: foreground, background (None: the widget's own shows
    through) and plotext's style name."""

    fg: RGB | None
    bg: RGB | None
    style: str | None  # "bold" or None


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
        return Ink(fg.rgb if fg is not None else None, bg.rgb if st.background is not None else None,
                   "bold" if st.bold else None)


def default_palette(theme: str = "textual-dark") -> Palette:
    """A theme's palette without an app (tests and scripts), on its screen background."""
    variables = BUILTIN_THEMES[theme].to_color_system().generate()
    return Palette(variables, Color.parse(variables["background"]))


@dataclass(frozen=True)
class Cell:
    char: str
    fg: RGB | None
    bg: RGB | None
    bold: bool


def parse_ansi(ansi: str) -> list[list[Cell]]:
    """plotext's output as a grid of cells: what a test (or the caller) finds where."""
    rows: list[list[Cell]] = []
    for line in AnsiDecoder().decode(ansi):
        styles = [Style()] * len(line.plain)
        for span in line.spans:  # in order: a later span's attributes win
            for i in range(span.start, min(span.end, len(styles))):
                styles[i] = styles[i] + span.style
        rows.append([Cell(ch, _rgb(st.color), _rgb(st.bgcolor), bool(st.bold)) for ch, st in zip(line.plain, styles)])
    return rows


def _rgb(color) -> RGB | None:  # noqa: ANN001 - rich.color.Color | None
    return None if color is None or color.is_default else tuple(color.get_truecolor())


def _bin(v: float, lo: float, hi: float, n: int) -> int:
    """plotext's cell of a value: ``_utility.get_matrix_data`` (the centre of cell i is at
    i, the limits at the centres of the first and last cells)."""
    return math.floor(round(0.5 + (n - 1) * (v - lo) / (hi - lo), 8))


def _at(i: int, lo: float, hi: float, n: int) -> float:
    """A value plotext puts in cell ``i`` (the inverse of ``_bin``)."""
    return lo + i * (hi - lo) / (n - 1)


@dataclass
class Chart:
    """The drawn chart: plotext's output and where things landed, so tests can ask what is
    on top at a point's cell."""

    ansi: str
    canvas: tuple[int, int, int, int]  # left, top, width, height of the plotting area
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    ax: Axis
    ay: Axis
    xlabels: list[str]  # the tick labels asked for, left to right
    ylabels: list[str]  # bottom to top

    @cached_property
    def cells(self) -> list[list[Cell]]:
        # Parsed on first use (tests, tools): the app only shows ``ansi``.
        return parse_ansi(self.ansi)

    def cell_of(self, x: float, y: float) -> tuple[int, int]:
        """(column, row) of a point given in raw metric units."""
        left, top, w, h = self.canvas
        c = _bin(self.ax.shown(x), *self.xlim, w)
        r = _bin(self.ay.shown(y), *self.ylim, h)
        return left + c, top + h - 1 - r

    def at(self, x: float, y: float) -> Cell:
        c, r = self.cell_of(x, y)
        return self.cells[r][c]

    def char(self, x: float, y: float) -> str:
        return self.at(x, y).char

    @property
    def lines(self) -> list[str]:
        return ["".join(c.char for c in row) for row in self.cells]


def _range(values: list[float], bounds: list[float], cells: int) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    span = hi - lo
    # An SLO bound widens the range when it is near the data, so its line shows; one far
    # off would squash every point against an edge, and the legend names it anyway.
    for b in bounds:
        if lo - max(span, abs(lo) * 0.5) <= b <= hi + max(span, abs(hi) * 0.5):
            lo, hi = min(lo, b), max(hi, b)
    if 0 <= lo < 0.2 * hi and cells >= 10:
        # Near zero, start at zero: a latency axis cut at 8 s overstates the spread, and
        # the zero tick is a reference the lower points would otherwise lack. Not on a
        # chart of a few rows, where the stretch below the lowest point would cost the
        # row that tells two points (or a point and the SLO line) apart.
        return 0.0, hi + (hi - 0.0) * 0.05
    span = hi - lo
    pad = span * 0.05 if span > 0 else (abs(hi) * 0.1 or 1.0)
    return lo - pad, hi + pad


def _tick_label(v: float, decimals: int) -> str:
    if abs(v) >= 10_000:
        return si(v)
    return f"{v:,.{decimals}f}"


def draw(view: ParetoView, selected: str | None, width: int, height: int,
         palette: Palette | None = None, plt: Plot | None = None) -> Chart:
    """Draw the chart with plotext at ``width`` x ``height`` cells (the axes and tick
    labels included, the titles not) and return what it drew."""
    pal = palette or default_palette()
    plt = plt if plt is not None else Plot()
    ax, ay = view.ax, view.ay
    points = (*view.measured, *view.failed_slo, *view.imported)
    everything = (*points, *view.predicted)
    xb = [ax.shown(view.x_bound)] if view.x_bound is not None else []
    yb = [ay.shown(view.y_bound)] if view.y_bound is not None else []

    # plotext's layout with a left y axis, a bottom x axis and no titles: the canvas fills
    # the rows above the x axis and its tick labels, right of the y labels and the axis.
    top, ch = 0, height - 2
    x0, x1 = _range([ax.shown(d.x) for d in everything], xb, width)
    y0, y1 = _range([ay.shown(d.y) for d in everything], yb, ch)

    def row(v: float) -> int:
        return top + ch - 1 - _bin(v, y0, y1, ch)

    for most in range(max(2, min(6, (ch + 2) // 3)), 1, -1):
        # Labels on adjacent rows read as one number: fewer ticks, or none too close.
        yticks, yd = nice_ticks(y0, y1, most)
        rows = [row(t) for t in yticks]
        if len(yticks) >= 2 and all(b - a >= 2 for a, b in zip(rows[1:], rows)):
            break
    # A tick label on the row of an SLO line would read as the bound (the line has its own).
    slo_rows = {row(b) for b in yb if y0 <= b <= y1}
    kept: list[float] = []
    for t in sorted(yticks, reverse=True):
        if (not kept or row(t) - row(kept[-1]) >= 2) and (row(t) not in slo_rows or t in yb):
            kept.append(t)
    yticks = sorted(kept)
    ylabels = [_tick_label(t, yd) for t in yticks]
    gutter = max((len(s) for s in ylabels), default=1)
    left = gutter + 1
    cw = width - left
    xmost = max(2, cw // 9)
    while True:  # as many x ticks as fit with their labels apart
        xticks, xd = nice_ticks(x0, x1, xmost)
        xlabels = [_tick_label(t, xd) for t in xticks]
        if xmost == 2 or all(cw * (b - a) / (x1 - x0) >= max(len(s) for s in xlabels) + 3
                             for a, b in pairwise(xticks)):
            break
        xmost -= 1

    def col(v: float) -> int:
        return left + _bin(v, x0, x1, cw)

    def x_at(c: int) -> float:  # a value plotext puts in canvas column c (absolute)
        return _at(c - left, x0, x1, cw)

    plt.clear_figure()
    plt.plotsize(width, height)
    plt._set_size(width, height)  # as textual-plotext does: plotsize alone leaves stale sizes
    # No backgrounds of plotext's own: the widget's shows through, as around the chart.
    plt.theme("clear")
    plt.xaxes(True, False)
    plt.yaxes(True, False)
    plt.ticks_color(pal(TICK_STYLE).fg)
    # Fixed limits: plotext would otherwise widen them to the SLO labels' anchors, and the
    # cell arithmetic below (label placement, Chart.cell_of) assumes these. They are the
    # padded data range, the ticks inside it: widening to the outer round ticks would
    # spend up to a tick step of each axis on empty space.
    plt.xlim(x0, x1)
    plt.ylim(y0, y1)
    plt.xticks(xticks, xlabels)
    plt.yticks(yticks, ylabels)

    # 1. SLO bounds, dashed (plotext's hline/vline are solid, the frontier's glyph), lowest.
    slo = pal(SLO_STYLE)
    slo_notes: list[tuple[float, list[int], str]] = []  # (y, starts to try in order, text)
    for b in yb:
        if y0 <= b <= y1:
            plt.plot([x0, x1], [b, b], marker=SLO_DASH, color=slo.fg)
            note = f" SLO {b:g} {ay.unit}".rstrip() + " "
            slo_notes.append((b, list(range(width - len(note), left - 1, -1)), note))
    for b in xb:
        if x0 <= b <= x1:
            plt.plot([b, b], [y0, y1], marker=SLO_VDASH, color=slo.fg)
            note = f" SLO {b:g} {ax.unit}".rstrip()
            right, before = range(col(b) + 1, width - len(note) + 1), range(col(b) - len(note), left - 1, -1)
            slo_notes.append((_at(ch - 1, y0, y1, ch), [*right, *before], note))

    # 2. The frontier staircase: a series per horizontal and per vertical run, with box
    # characters as markers, then its corners (found in cells: two vertices a cell apart
    # may share one) over the runs' ends.
    line = pal(LINE_STYLE)
    steps = [(ax.shown(x), ay.shown(y)) for x, y in view.steps]
    for (xa, ya), (xb_, yb_) in pairwise(steps):
        plt.plot([xa, xb_], [ya, yb_], marker="─" if ya == yb_ else "│", color=line.fg)
    verts: list[tuple[int, int]] = []
    at_cell: dict[tuple[int, int], tuple[float, float]] = {}
    for x, y in steps:
        cell = (col(x), row(y))
        at_cell.setdefault(cell, (x, y))
        if not verts or verts[-1] != cell:
            verts.append(cell)
    joins: dict[tuple[int, int], set[str]] = {}
    for (c0, r0), (c1, r1) in pairwise(verts):
        if r0 == r1:
            for c in range(min(c0, c1), max(c0, c1)):
                joins.setdefault((c, r0), set()).add("r")
                joins.setdefault((c + 1, r0), set()).add("l")
        else:
            for r in range(min(r0, r1), max(r0, r1)):
                joins.setdefault((c0, r), set()).add("d")
                joins.setdefault((c0, r + 1), set()).add("u")
    corners: dict[str, list[tuple[float, float]]] = {}
    for cell in dict.fromkeys(verts):
        glyph = _BOX[frozenset(joins.get(cell, "lr"))]
        if glyph not in "─│":
            corners.setdefault(glyph, []).append(at_cell[cell])
    for glyph, xy in corners.items():
        plt.scatter([x for x, _ in xy], [y for _, y in xy], marker=glyph, color=line.fg)

    # 3. Markers, most important last.
    def scatter(dots: list[Dot] | tuple[Dot, ...], kind: str) -> None:
        if dots:
            glyph, style = MARKERS[kind]
            ink = pal(style)
            plt.scatter([ax.shown(d.x) for d in dots], [ay.shown(d.y) for d in dots],
                        marker=glyph, color=ink.fg, style=ink.style)

    scatter(view.predicted, "predicted")
    kinds: dict[str, list[Dot]] = {k: [] for k in DRAW_ORDER}
    for d in points:
        kinds[view.marker(d.key)].append(d)
    for kind in DRAW_ORDER:
        scatter(kinds[kind], kind)

    # 4. Each SLO line's label, its bound (at a few rows' resolution the line can share a
    # row with a tick of another value), in the rightmost stretch that covers no mark and
    # no stretch of the frontier. plotext draws texts after every series.
    taken = set(joins) | {(col(ax.shown(d.x)), row(ay.shown(d.y))) for d in everything}
    for y, starts, note in slo_notes:
        r = row(y)
        for start in starts:
            if start + len(note) <= width and not any((c, r) in taken for c in range(start, start + len(note))):
                plt.text(note, x_at(start), y, color=slo.fg, alignment="left")
                break

    # 5. The selected point, last: its glyph on the table cursor's colours.
    sel = next((d for d in points if d.key == selected), None)
    if sel is not None:
        ink = pal(SELECTED)
        plt.text(MARKERS[view.marker(sel.key)][0], ax.shown(sel.x), ay.shown(sel.y),
                 color=ink.fg, background=ink.bg, style=ink.style, alignment="left")

    ansi = plt.build().removesuffix("\n")  # plotext ends its last row with a newline
    return Chart(ansi, (left, top, cw, ch), (x0, x1), (y0, y1), ax, ay, xlabels, ylabels)


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
    if selected is not None and selected in view.points and any(
            d.key == selected for d in (*view.measured, *view.failed_slo, *view.imported)):
        glyph, _ = MARKERS[view.marker(selected)]
        items.append(Content.assemble((glyph, SELECTED), " selected"))
    if view.x_bound is not None or view.y_bound is not None:
        items.append(Content.assemble(("╌", SLO_STYLE), " SLO"))
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

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(wrap_items(self.items, width)))

    def render(self) -> RenderResult:
        return Content("\n").join(wrap_items(self.items, self.content_region.width))
