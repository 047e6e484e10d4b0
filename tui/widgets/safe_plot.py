"""A PlotextPlot that cannot take the app down.

plotext builds its text inside ``render()``; a corner case in its layout code (a degenerate
range, an odd terminal size) raises there, and an exception in ``render`` ends a Textual
app. This base shows the reason in place of the chart instead.
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.app import RenderResult
from textual_plotext import PlotextPlot


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Ticks at the powers of ten between ``lo`` and ``hi`` (positive), for axes plotted in
    log10 space (plotext's own log scale re-applies the log on every redraw)."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks = list(range(a, b + 1))
    return [float(t) for t in ticks], [si(10.0**t) for t in ticks]


def nice_ticks(lo: float, hi: float, most: int) -> tuple[list[float], int]:
    """At most ``most`` (at least 2) ticks at round values (1, 2, 2.5 or 5 times a power of
    ten) inside ``[lo, hi]``, and the decimals their labels need. plotext's own ticks
    split the range evenly, so they land on values like 15.5, 39.8, 64.1."""
    most = max(2, most)
    span = hi - lo
    if not (span > 0 and math.isfinite(span)):
        return [lo], _decimals(abs(lo) or 1.0)
    for step in _steps(span / (2 * most)):  # the smallest round step that gives few enough
        first = math.ceil(lo / step - 1e-9)
        ticks = [(first + i) * step for i in range(math.floor(hi / step + 1e-9) - first + 1)]
        if len(ticks) <= most:
            return [0.0 if abs(t) < step * 1e-9 else t for t in ticks], _decimals(step)
    return [lo, hi], _decimals(span)


def _steps(rough: float):
    power = 10.0 ** math.floor(math.log10(rough))
    while True:
        for m in (1.0, 2.0, 2.5, 5.0):
            if m * power >= rough:
                yield m * power
        power *= 10


def _decimals(step: float) -> int:
    """Enough decimals to tell ticks ``step`` apart (2.5 needs one, 0.25 two)."""
    for d in range(7):
        if abs(round(step, d) - step) < step * 1e-6:
            return d
    return 6


def si(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


class SafePlot(PlotextPlot):
    def render(self) -> RenderResult:
        if self.size.width < 10 or self.size.height < 4:
            return Text("(too small for a chart)", style="dim")
        try:
            return self.render_plot()
        except Exception as e:  # plotext's layout code fails on some degenerate inputs
            return Text(f"chart unavailable: {type(e).__name__}: {e}", style="dim")

    def render_plot(self) -> RenderResult:
        """The chart, under ``render``'s guard. A chart laid out for its size (ticks that fit
        it) overrides this to configure ``self.plt`` here, where the size is known."""
        return super().render()
