"""The Pareto scatter: measured points, points that missed an SLO, imported runs,
predictions, the frontier as a line, the knee and the selected point marked, SLO bounds.

The key to the markers is printed beside the chart (``LEGEND``), not inside it: plotext's
legend covers the top-left corner, which at 80 columns is a third of the points."""

from __future__ import annotations

from tui.data.pareto_view import LABELS, Dot, ParetoView
from tui.widgets.safe_plot import SafePlot


LEGEND = ("[cyan]●[/] measured  [red]x[/] misses SLO  [magenta]◇[/] imported  [dim]·[/] predicted  "
          "[green]⠒[/] frontier  [$warning]◆[/] knee  ▣ selected  [red]│─[/] SLO")


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

        # Latencies of many seconds read better in seconds than as six-digit milliseconds.
        sx = _seconds(view.x, [d.x for d in view.measured + view.failed_slo + view.imported])
        sy = _seconds(view.y, [d.y for d in view.measured + view.failed_slo + view.imported])
        kx, ky = (1000.0 if sx else 1.0), (1000.0 if sy else 1.0)

        def xy(dots: tuple[Dot, ...] | list[Dot]) -> tuple[list[float], list[float]]:
            return [d.x / kx for d in dots], [d.y / ky for d in dots]

        if view.predicted:
            plt.scatter(*xy(view.predicted), marker="·", color="gray")
        if view.failed_slo:
            plt.scatter(*xy(view.failed_slo), marker="x", color="red")
        if view.measured:
            plt.scatter(*xy(view.measured), marker="●", color="cyan")
        if view.imported:
            plt.scatter(*xy(view.imported), marker="◇", color="magenta")
        if len(view.frontier) > 1:
            plt.plot(*xy(view.frontier), marker="braille", color="green")
        if view.x_bound is not None:
            plt.vline(view.x_bound / kx, "red")
        if view.y_bound is not None:
            plt.hline(view.y_bound / ky, "red")
        # Drawn last so nothing covers them; the knee wins when it is the selected point.
        sel = next((d for d in (*view.measured, *view.failed_slo, *view.imported) if d.key == selected), None)
        if sel is not None:
            plt.scatter(*xy([sel]), marker="▣")
        if view.knee is not None:
            plt.scatter(*xy([view.knee]), marker="◆", color="orange")
        plt.xlabel(_label(view.x, sx))
        plt.ylabel(_label(view.y, sy))
        self.refresh()


def _seconds(metric: str, values: list[float]) -> bool:
    return metric.endswith("_ms") and bool(values) and max(values) >= 10_000


def _label(metric: str, seconds: bool) -> str:
    label = LABELS.get(metric, metric)
    return label.replace("(ms)", "(s)") if seconds else label
