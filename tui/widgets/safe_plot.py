"""A PlotextPlot that cannot take the app down.

plotext builds its text inside ``render()``; a corner case in its layout code (a degenerate
range, an odd terminal size) raises there, and an exception in ``render`` ends a Textual
app. This base shows the reason in place of the chart instead.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import RenderResult
from textual_plotext import PlotextPlot


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
