"""The Recommend chart: $ per 1M output tokens against the capacity of one instance, one
point per instance and layout, the frontier as a staircase through its points, the target
rate as a dashed vertical line and the highlighted row's point on the cursor's colours.

Capacity spans two decades across the catalog (a g6.xlarge to a p5en), so the x axis is
log10 with ticks at 1-2-5 values, and so is cost per token, which spans one or two.
Colours and marks follow the Pareto chart (``tui.widgets.pareto_plot``): the same palette
resolution, frontier colour and selection style, so the two charts read alike.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.content import Content
from textual.widget import Widget
from textual_plotext.plot import Plot

from tui.data.recommend import ChartData
from tui.widgets.pareto_plot import DIM, LINE_STYLE, SELECTED, TICK_STYLE, ChartTitle, Palette, default_palette
from tui.widgets.safe_plot import SafePlot

POINT = ("○", "$text-primary")
FRONTIER = ("●", "bold $text-success")
TARGET_STYLE = "$text-warning 80%"
TARGET_DASH = "╎"


def log_ticks_125(lo: float, hi: float) -> list[float]:
    """1-2-5 values (1, 2, 5, 10, 20, …) within [lo, hi], positive."""
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**e
            if lo <= v <= hi:
                out.append(v)
    return out


def _label(v: float) -> str:
    # Two significant digits, never in exponent form: 0.5, 2, 100, 0.71, 2k.
    return f"{float(f'{v:.2g}'):g}" if v < 1000 else f"{float(f'{v / 1000:.2g}'):g}k"


def _fitting(ticks: list[float], apart) -> list[float]:
    """The most ticks whose labels stay ``apart(a, b)``: every 1-2-5 value, then 1 and 5,
    then the powers of ten; at least one tick, so an axis is never bare."""
    for keep in ((1, 2, 5), (1, 5), (1,)):
        kept = [t for t in ticks if round(t / 10 ** math.floor(math.log10(t) + 1e-9)) in keep]
        if kept and all(apart(a, b) for a, b in zip(kept, kept[1:])):
            return kept
    return kept or ticks[:1]  # empty only when no 1-2-5 value is in range


def _span(lo: float, hi: float, pad: float = 0.06) -> tuple[float, float]:
    span = hi - lo
    p = span * pad if span > 0 else (abs(hi) * 0.1 or 0.5)
    return lo - p, hi + p


def draw(data: ChartData, selected: str | None, width: int, height: int, palette: Palette | None = None, plt: Plot | None = None) -> str:
    """plotext's drawing of ``data`` at ``width`` x ``height`` cells, as ANSI text."""
    pal = palette or default_palette()
    plt = plt if plt is not None else Plot()
    lg = math.log10
    caps = [p.capacity for p in data.points]
    if data.target_rps:
        caps.append(data.target_rps)
    x0, x1 = _span(lg(min(caps)), lg(max(caps)))
    # Cost per token spans a decade too (a p5en against a TP8 on g6e): log as well, or the
    # dearest layout would squeeze the rest into the bottom rows.
    costs = [p.cost for p in data.points]
    y0, y1 = _span(lg(min(costs)), lg(max(costs)), 0.08)
    ch = height - 2  # plotext keeps a row for the x axis and one for its labels
    ys = _fitting(log_ticks_125(10**y0, 10**y1), lambda a, b: (ch - 1) * (lg(b) - lg(a)) / (y1 - y0) >= 2)
    ys = ys or [10 ** ((y0 + y1) / 2)]  # a range between two 1-2-5 values: its middle
    ylabels = [_label(t) for t in ys]
    left = max(len(s) for s in ylabels) + 1
    cw = width - left
    xs = _fitting(log_ticks_125(10**x0, 10**x1), lambda a, b: cw * (lg(b) - lg(a)) / (x1 - x0) >= len(_label(b)) + 2) or [10 ** ((x0 + x1) / 2)]

    plt.clear_figure()
    plt.plotsize(width, height)
    plt._set_size(width, height)  # as the Pareto chart does: plotsize alone leaves stale sizes
    plt.theme("clear")
    plt.xaxes(True, False)
    plt.yaxes(True, False)
    plt.ticks_color(pal(TICK_STYLE).fg)
    plt.xlim(x0, x1)
    plt.ylim(y0, y1)
    plt.xticks([lg(t) for t in xs], [_label(t) for t in xs])
    plt.yticks([lg(t) for t in ys], ylabels)

    # Lowest first (plotext has no z-order; a later series covers an earlier one).
    if data.target_rps:
        t = lg(data.target_rps)
        plt.plot([t, t], [y0, y1], marker=TARGET_DASH, color=pal(TARGET_STYLE).fg)
    line = pal(LINE_STYLE).fg
    steps = [(lg(x), lg(y)) for x, y in data.steps]
    for (xa, ya), (xb, yb) in zip(steps, steps[1:]):
        plt.plot([xa, xb], [ya, yb], marker="─" if ya == yb else "│", color=line)
    on_frontier = data.frontier_keys
    for (glyph, style), pts in ((POINT, [p for p in data.points if p.key not in on_frontier]), (FRONTIER, list(data.frontier))):
        if pts:
            ink = pal(style)
            plt.scatter([lg(p.capacity) for p in pts], [lg(p.cost) for p in pts], marker=glyph, color=ink.fg, style=ink.style)
    sel = next((p for p in data.points if p.key == selected), None)
    if sel is not None:
        ink = pal(SELECTED)
        glyph = FRONTIER[0] if sel.key in on_frontier else POINT[0]
        plt.text(glyph, lg(sel.capacity), lg(sel.cost), color=ink.fg, background=ink.bg, style=ink.style, alignment="left")
    return plt.build().removesuffix("\n")


class RecommendCanvas(SafePlot):
    """The plotext part, drawn at render time: the ticks depend on the size."""

    DEFAULT_CSS = """
    RecommendCanvas { height: 1fr; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.data: ChartData | None = None
        self.selected: str | None = None

    def show(self, data: ChartData | None, selected: str | None) -> None:
        self.data, self.selected = data, selected
        self.refresh()

    def render_plot(self) -> RenderResult:
        w, h = self.size
        if self.data is None:
            return Content("")
        if self.data.empty:
            return Content.styled("no priced layout to plot", DIM)
        if w < 24 or h < 5:
            return Content.styled("(too small for a chart)", DIM)
        pal = Palette(self.app.theme_variables, self.background_colors[1])
        return Text.from_ansi(draw(self.data, self.selected, w, h, pal, self.plt))


class RecommendPlot(Widget):
    """The chart with its titles: the y title (and the frontier's size) above, the key and
    the x title below, where plotext would put them over the points."""

    DEFAULT_CSS = """
    RecommendPlot { height: 1fr; min-height: 7; layout: vertical; }
    """

    def compose(self) -> ComposeResult:
        yield ChartTitle(id="rec-ytitle")
        yield RecommendCanvas(id="rec-canvas")
        yield ChartTitle(id="rec-xtitle")

    def show(self, data: ChartData | None, selected: str | None = None) -> None:
        self.query_one(RecommendCanvas).show(data, selected)
        ytitle, xtitle = self.query_one("#rec-ytitle", ChartTitle), self.query_one("#rec-xtitle", ChartTitle)
        if data is None or data.empty:
            ytitle.show(Content(""), Content(""))
            xtitle.show(Content(""), Content(""))
            return
        note = f"{len(data.frontier)} on the frontier"
        if data.unpriced:
            note += f" · {data.unpriced} unpriced not shown"
        ytitle.show(Content.assemble(("$/1M out tok", "bold"), (" (log) · lower is better", DIM)), Content.styled(note, DIM))
        key = [Content.assemble((FRONTIER[0], FRONTIER[1]), " frontier "), Content.assemble((POINT[0], POINT[1]), " layout ")]
        if data.target_rps:
            key.append(Content.assemble((TARGET_DASH, TARGET_STYLE), f" target {data.target_rps:g} "))
        xtitle.show(Content.assemble(*key), Content.assemble(("req/s per instance", "bold"), (" (log) →", DIM)))
