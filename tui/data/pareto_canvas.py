"""The Pareto scatter drawn with plotext, without Textual: what goes where, in which
order and colour, and what landed where (:class:`Chart`). The widget
(:mod:`tui.widgets.pareto_plot`) hands in its plotext figure and a palette that resolves
Textual style strings; tests and scripts read the result's ANSI back with
``tests/support/pareto_ansi.py``.

What plotext draws (``draw_chart``): the axes, the ticks and their labels, and every mark, as
plotext series in call order, lowest first, since plotext has no z-order and a later
series covers an earlier one in the same cell: the selected point's predicted band, the
SLO lines (dashed), the frontier staircase, predictions, measured points, imported runs,
misses, frontier points, the knee, then the SLO lines' labels and the selected point
(plotext texts, drawn after every series; the selection as its glyph on the table cursor's
colours). The band is a dotted cross through the selected point's prediction ring: its
error band on both axes.

What this module adds around plotext:
- the staircase's vertices (``ParetoView.steps``), drawn as one plotext line series per
  horizontal run (marker "─") and per vertical run ("│"), with its corners as box-drawing
  markers, so it reads as a line where plotext's braille would blur it;
- round ticks (``nice_ticks``: plotext splits a range evenly, into 15.5, 39.8, 64.1), no two
  y labels on adjacent rows, and the limits fixed, so the ticks, the data and the cell
  arithmetic the SLO labels and the tests rely on (``Chart.cell_of``) all agree;
- colours: theme variables resolved to RGB when the chart is drawn (the widget's
  ``Palette``), so the chart follows a light/dark switch.

The axis titles are Textual rows outside plotext (the widget's ``ParetoPlot``): plotext
puts the y title at the bottom left beside the x title, where it reads as the x axis's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from tui.data.ticks import nice_ticks, si
from tui.data.pareto_view import Axis, Dot, ParetoView

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
# The selected point's predicted band (across, up), dotted in the prediction's colour:
# box-drawing glyphs fill a cell in any font, where a middle dot rendered narrower in PNGs.
BAND_MARKS = ("┈", "┊")
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
    frozenset("lr"): "─",
    frozenset("ud"): "│",
    frozenset("dr"): "┌",
    frozenset("dl"): "┐",
    frozenset("ur"): "└",
    frozenset("ul"): "┘",
    frozenset("udr"): "├",
    frozenset("udl"): "┤",
    frozenset("dlr"): "┬",
    frozenset("ulr"): "┴",
    frozenset("udlr"): "┼",
    frozenset("l"): "─",
    frozenset("r"): "─",
    frozenset("u"): "│",
    frozenset("d"): "│",
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


# A style string ("bold $text-error") to its ink: the widget's Palette, which knows the theme.
Resolve = Callable[[str], Ink]
_SGR = re.compile(r"\x1b\[[0-9;]*m")


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

    def cell_of(self, x: float, y: float) -> tuple[int, int]:
        """(column, row) of a point given in raw metric units."""
        left, top, w, h = self.canvas
        c = _bin(self.ax.shown(x), *self.xlim, w)
        r = _bin(self.ay.shown(y), *self.ylim, h)
        return left + c, top + h - 1 - r

    @property
    def lines(self) -> list[str]:
        """The chart's text without its colours (plotext writes only SGR codes). Colours
        per cell: ``tests/support/pareto_ansi.py``."""
        return _SGR.sub("", self.ansi).split("\n")


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


def draw_chart(view: ParetoView, selected: str | None, width: int, height: int, pal: Resolve, plt: Any) -> Chart:
    """Draw the chart with ``plt`` (a plotext figure, e.g. textual-plotext's ``Plot``) at
    ``width`` x ``height`` cells (the axes and tick labels included, the titles not) and
    return what it drew. ``pal`` resolves the module's style strings to RGB."""
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
        if xmost == 2 or all(cw * (b - a) / (x1 - x0) >= max(len(s) for s in xlabels) + 3 for a, b in pairwise(xticks)):
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

    # 0. The selected point's prediction with its error band: a dotted cross through the
    # ring, lowest of all, so it hides no line and no mark (its ends clipped to the canvas).
    guess = view.prediction(selected)
    if guess is not None:
        ink = pal(MARKERS["predicted"][1])
        gx, gy = ax.shown(guess.x), ay.shown(guess.y)
        if guess.x_band:
            lo, hi = (min(max(ax.shown(v), x0), x1) for v in guess.x_band)
            plt.plot([lo, hi], [gy, gy], marker=BAND_MARKS[0], color=ink.fg)
        if guess.y_band:
            lo, hi = (min(max(ay.shown(v), y0), y1) for v in guess.y_band)
            plt.plot([gx, gx], [lo, hi], marker=BAND_MARKS[1], color=ink.fg)

    # 1. SLO bounds, dashed (plotext's hline/vline are solid, the frontier's glyph).
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
        glyph, style = MARKERS[kind]
        ink = pal(style)
        by_glyph: dict[str, list[Dot]] = {}
        for d in dots:  # mixed hardware: a plain point's shape is its hardware class
            g = view.class_glyph(d.key) if kind in ("measured", "frontier") else None
            by_glyph.setdefault(g or glyph, []).append(d)
        for g, ds in by_glyph.items():
            plt.scatter([ax.shown(d.x) for d in ds], [ay.shown(d.y) for d in ds], marker=g, color=ink.fg, style=ink.style)

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
        kind = view.marker(sel.key)
        glyph = (view.class_glyph(sel.key) if kind in ("measured", "frontier") else None) or MARKERS[kind][0]
        plt.text(glyph, ax.shown(sel.x), ay.shown(sel.y), color=ink.fg, background=ink.bg, style=ink.style, alignment="left")

    ansi = plt.build().removesuffix("\n")  # plotext ends its last row with a newline
    return Chart(ansi, (left, top, cw, ch), (x0, x1), (y0, y1), ax, ay, xlabels, ylabels)
