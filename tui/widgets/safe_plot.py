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
    return [float(t) for t in ticks], [_si(10.0**t) for t in ticks]


def _si(v: float) -> str:
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
            return super().render()
        except Exception as e:  # plotext's layout code fails on some degenerate inputs
            return Text(f"chart unavailable: {type(e).__name__}: {e}", style="dim")
