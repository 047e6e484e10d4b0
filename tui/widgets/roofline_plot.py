"""The roofline chart: the hardware roof (bandwidth slope, compute ceiling) and where the
model's prefill and decode phases sit on it, on log-log axes."""

from __future__ import annotations

import math

from tui.data.roofline import Roofline
from tui.data.ticks import log_ticks
from tui.widgets.safe_plot import SafePlot


class RooflinePlot(SafePlot):
    DEFAULT_CSS = """
    RooflinePlot { height: 1fr; min-height: 10; }
    """

    def show(self, roof: Roofline | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if roof is None:
            self.refresh()
            return
        lo = min(min(p.intensity for p in roof.points) / 2, 0.5)
        hi = max(max(p.intensity for p in roof.points) * 2, roof.ridge * 4)
        n = 64
        xs = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
        ys = [min(roof.peak_tflops, x * roof.bandwidth_gbps / 1000) for x in xs]
        lg = math.log10
        plt.plot([lg(x) for x in xs], [lg(y) for y in ys], marker="braille", label=f"{roof.gpu} roof")
        plt.vline(lg(roof.ridge))
        for phase, marker, label in (("prefill", "P", "prefill"), ("decode", "D", "decode b=1..128")):
            pts = [p for p in roof.points if p.phase == phase]
            if pts:
                plt.scatter([lg(p.intensity) for p in pts], [lg(p.attainable_tflops) for p in pts], marker=marker, label=label)
        plt.xticks(*log_ticks(lo, hi))
        plt.yticks(*log_ticks(min(ys), roof.peak_tflops * 1.01))
        plt.xlabel(f"FLOP/byte · ridge {roof.ridge:.0f}")
        plt.ylabel("TFLOPS")
        self.refresh()
