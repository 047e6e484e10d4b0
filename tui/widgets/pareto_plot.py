"""The Pareto scatter: measured points, points that missed an SLO, imported runs,
predictions, the frontier as a staircase through its points, the knee and the selected
point marked, SLO bounds; and its key (``ParetoLegend``), printed below the chart rather
than inside it, where it would cover points.

Drawn on a character grid here rather than with plotext: the frontier is a staircase of
horizontal and vertical runs, which box-drawing characters draw exactly where plotext's
braille only approximates; plotext draws every series in call order with no way to keep a
marker above a line it crosses later, puts the y title at the bottom left beside the x
title, and splits ranges into ticks like 15.5, 39.8, 64.1. Colours are theme variables,
resolved when the chart is drawn, so the chart follows a light/dark switch.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from textual.app import RenderResult
from textual.content import Content
from textual.geometry import Size
from textual.widget import Widget

from tui.data.pareto_view import Axis, Dot, ParetoView
from tui.widgets.safe_plot import nice_ticks, si

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
AXIS_STYLE = "$foreground 45%"
TICK_STYLE = "$foreground 70%"
DIM = "$foreground 60%"
# The selected point keeps its glyph and takes the table cursor's colours, so it reads as
# the highlighted row's point (its own colour on the cursor's blue vanishes in light themes).
SELECTED = "bold $block-cursor-foreground on $block-cursor-background"

_BOX = {  # the directions a line cell joins -> its character
    frozenset("lr"): "─", frozenset("ud"): "│", frozenset("dr"): "┌", frozenset("dl"): "┐",
    frozenset("ur"): "└", frozenset("ul"): "┘", frozenset("udr"): "├", frozenset("udl"): "┤",
    frozenset("dlr"): "┬", frozenset("ulr"): "┴", frozenset("udlr"): "┼",
    frozenset("l"): "─", frozenset("r"): "─", frozenset("u"): "│", frozenset("d"): "│",
}


@dataclass
class Chart:
    """The drawn chart: a grid of (character, style) and where things landed, so tests can
    ask what is on top at a point's cell."""

    cells: list[list[tuple[str, str]]]
    canvas: tuple[int, int, int, int]  # left, top, width, height of the plotting area
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    ax: Axis
    ay: Axis

    def cell_of(self, x: float, y: float) -> tuple[int, int]:
        """(column, row) of a point given in raw metric units."""
        left, top, w, h = self.canvas
        (x0, x1), (y0, y1) = self.xlim, self.ylim
        c = left + round((self.ax.shown(x) - x0) / (x1 - x0) * (w - 1))
        r = top + round((y1 - self.ay.shown(y)) / (y1 - y0) * (h - 1))
        return c, r

    def char(self, x: float, y: float) -> str:
        c, r = self.cell_of(x, y)
        return self.cells[r][c][0]

    def style(self, x: float, y: float) -> str:
        c, r = self.cell_of(x, y)
        return self.cells[r][c][1]

    @property
    def lines(self) -> list[str]:
        return ["".join(ch for ch, _ in row) for row in self.cells]

    def content(self) -> Content:
        parts: list[Content | tuple[str, str] | str] = []
        for i, row in enumerate(self.cells):
            if i:
                parts.append("\n")
            run, style = "", None
            for ch, st in row:
                if st != style and run:
                    parts.append((run, style or ""))
                    run = ""
                run, style = run + ch, st
            if run:
                parts.append((run, style or ""))
        return Content.assemble(*parts)


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


def draw(view: ParetoView, selected: str | None, width: int, height: int) -> Chart:
    ax, ay = view.ax, view.ay
    cells = [[(" ", "")] * width for _ in range(height)]

    def put(c: int, r: int, ch: str, style: str) -> None:
        if 0 <= r < height and 0 <= c < width:
            cells[r][c] = (ch, style)

    def text(c: int, r: int, s: str, style: str) -> None:
        for i, ch in enumerate(s):
            put(c + i, r, ch, style)

    points = (*view.measured, *view.failed_slo, *view.imported)
    everything = (*points, *view.predicted)
    xb = [ax.shown(view.x_bound)] if view.x_bound is not None else []
    yb = [ay.shown(view.y_bound)] if view.y_bound is not None else []
    # Rows: y title, canvas, x axis, x tick labels, x title.
    top, ch = 1, height - 4
    x0, x1 = _range([ax.shown(d.x) for d in everything], xb, width)
    y0, y1 = _range([ay.shown(d.y) for d in everything], yb, ch)

    def row(v: float) -> int:
        return top + round((y1 - v) / (y1 - y0) * (ch - 1))

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
    yticks = kept
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
    chart = Chart(cells, (left, top, cw, ch), (x0, x1), (y0, y1), ax, ay)

    def col(v: float) -> int:
        return left + round((v - x0) / (x1 - x0) * (cw - 1))

    # Axes and ticks.
    axis_row = top + ch
    for r in range(top, axis_row):
        put(gutter, r, "│", AXIS_STYLE)
    put(gutter, axis_row, "└", AXIS_STYLE)
    for c in range(left, width):
        put(c, axis_row, "─", AXIS_STYLE)
    for t, s in zip(yticks, ylabels):
        r = row(t)
        put(gutter, r, "┤", AXIS_STYLE)
        text(gutter - len(s), r, s, TICK_STYLE)
    end = -1
    for t, s in zip(xticks, xlabels):
        c = col(t)
        put(c, axis_row, "┬", AXIS_STYLE)
        start = min(max(c - len(s) // 2, 0), width - len(s))
        if start > end:
            text(start, axis_row + 1, s, TICK_STYLE)
            end = start + len(s)

    # Titles: the y title heads the y axis, the x title ends the x axis.
    ytitle = [(ay.label, "bold"), (f" · {ay.better_label}", DIM)]
    _place(cells, 0, 0, ytitle)
    if view.frontier:  # a count to the right of the y title, where it fits
        note = f"{len(view.frontier)} on the frontier"
        if sum(len(t) for t, _ in ytitle) + 2 + len(note) <= width:
            _place(cells, 0, width - len(note), [(note, DIM)])
    xtitle = [(ax.label, "bold"), (f" · {ax.better_label}", DIM)]
    _place(cells, height - 1, max(0, width - sum(len(t) for t, _ in xtitle)), xtitle)

    # SLO bounds, dashed, under everything else.
    slo_notes: list[tuple[int, list[int], str]] = []  # (row, starts to try in order, text)
    for b in yb:
        if y0 <= b <= y1:
            for c in range(left, width):
                put(c, row(b), "╌", SLO_STYLE)
            note = f" SLO {b:g} {ay.unit}".rstrip() + " "
            slo_notes.append((row(b), list(range(width - len(note), left - 1, -1)), note))
    for b in xb:
        if x0 <= b <= x1:
            for r in range(top, axis_row):
                put(col(b), r, "╎", SLO_STYLE)
            note = f" SLO {b:g} {ax.unit}".rstrip()
            right, before = range(col(b) + 1, width - len(note) + 1), range(col(b) - len(note), left - 1, -1)
            slo_notes.append((top, [*right, *before], note))

    # The frontier staircase, under the markers.
    joins: dict[tuple[int, int], set[str]] = {}
    verts = [(col(ax.shown(x)), row(ay.shown(y))) for x, y in view.steps]
    for (c0, r0), (c1, r1) in pairwise(verts):
        if r0 == r1:
            for c in range(min(c0, c1), max(c0, c1)):
                joins.setdefault((c, r0), set()).add("r")
                joins.setdefault((c + 1, r0), set()).add("l")
        elif c0 == c1:
            for r in range(min(r0, r1), max(r0, r1)):
                joins.setdefault((c0, r), set()).add("d")
                joins.setdefault((c0, r + 1), set()).add("u")
    for (c, r), dirs in joins.items():
        put(c, r, _BOX[frozenset(dirs)], LINE_STYLE)

    # Markers, most important last.
    glyph, style = MARKERS["predicted"]
    for d in view.predicted:
        put(col(ax.shown(d.x)), row(ay.shown(d.y)), glyph, style)
    kinds: dict[str, list[Dot]] = {k: [] for k in DRAW_ORDER}
    for d in points:
        kinds[view.marker(d.key)].append(d)
    for kind in DRAW_ORDER:
        glyph, style = MARKERS[kind]
        for d in kinds[kind]:
            put(col(ax.shown(d.x)), row(ay.shown(d.y)), glyph, style)
    # Each SLO line is labelled with its bound (at a few rows' resolution it can share a
    # row with a tick of another value), in the rightmost stretch that covers no mark.
    for r, starts, note in slo_notes:
        for start in starts:
            if all(cells[r][c][0] in " ╌╎" for c in range(start, start + len(note))):
                text(start, r, note, SLO_STYLE)
                break
    sel = next((d for d in points if d.key == selected), None)
    if sel is not None:
        glyph, _ = MARKERS[view.marker(sel.key)]
        put(col(ax.shown(sel.x)), row(ay.shown(sel.y)), glyph, SELECTED)
    return chart


def _place(cells: list[list[tuple[str, str]]], r: int, c: int, parts: list[tuple[str, str]]) -> None:
    """Write (text, style) runs into the grid, clipped at the right edge."""
    width = len(cells[r])
    for s, style in parts:
        for ch in s:
            if c >= width:
                return
            cells[r][c] = (ch, style)
            c += 1


class ParetoPlot(Widget):
    DEFAULT_CSS = """
    ParetoPlot { height: 1fr; min-height: 8; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._view: ParetoView | None = None
        self._selected: str | None = None
        self.chart: Chart | None = None

    def show(self, view: ParetoView | None, selected: str | None = None) -> None:
        self._view, self._selected = view, selected
        self.refresh()

    def render(self) -> RenderResult:
        w, h = self.content_region.size
        view = self._view
        self.chart = None
        if view is None or view.empty:
            return Content.styled("no measured points yet", DIM)
        if w < 24 or h < 6:
            return Content.styled("(too small for a chart)", DIM)
        try:
            self.chart = draw(view, self._selected, w, h)
        except Exception as e:  # a bug here must not end the app mid-demo  # noqa: BLE001
            return Content.styled(f"chart unavailable: {type(e).__name__}: {e}", DIM)
        return self.chart.content()


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
