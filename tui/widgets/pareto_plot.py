"""The Pareto scatter: measured points, points that missed an SLO, imported runs,
predictions, the frontier as a line, the knee and the selected point marked, SLO bounds."""

from __future__ import annotations

from tui.data.pareto_view import LABELS, Dot, ParetoView
from tui.widgets.safe_plot import SafePlot


class ParetoPlot(SafePlot):
    DEFAULT_CSS = """
    ParetoPlot { height: 1fr; min-height: 12; }
    """

    def show(self, view: ParetoView | None, selected: str | None = None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        if view is None or view.empty:
            plt.title("no measured points yet")
            self.refresh()
            return

        def xy(dots: tuple[Dot, ...] | list[Dot]) -> tuple[list[float], list[float]]:
            return [d.x for d in dots], [d.y for d in dots]

        if view.predicted:
            plt.scatter(*xy(view.predicted), marker="·", color="gray", label="predicted")
        if view.failed_slo:
            plt.scatter(*xy(view.failed_slo), marker="x", color="red", label="misses SLO")
        if view.measured:
            plt.scatter(*xy(view.measured), marker="●", color="cyan", label="measured")
        if view.imported:
            plt.scatter(*xy(view.imported), marker="◇", color="magenta", label="imported")
        if len(view.frontier) > 1:
            plt.plot(*xy(view.frontier), marker="braille", color="green", label="frontier")
        if view.knee is not None:
            plt.scatter([view.knee.x], [view.knee.y], marker="◆", color="yellow", label="knee")
        sel = next((d for d in (*view.measured, *view.failed_slo, *view.imported) if d.key == selected), None)
        if sel is not None:
            plt.scatter([sel.x], [sel.y], marker="▣", color="white", label="selected")
        if view.x_bound is not None:
            plt.vline(view.x_bound, "red")
        if view.y_bound is not None:
            plt.hline(view.y_bound, "red")
        plt.xlabel(LABELS.get(view.x, view.x))
        plt.ylabel(LABELS.get(view.y, view.y))
        self.refresh()
