"""Reading the Pareto chart's ANSI back into cells (character, colours, bold), so a test
asks what is on top at a point's cell. Test-only: the app shows the ANSI as it is."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rich.ansi import AnsiDecoder
from rich.style import Style

from tui.data.pareto_canvas import RGB, Chart
from tui.widgets import pareto_plot


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


class ReadChart(Chart):
    """A :class:`Chart` whose cells can be read: ``cells``, ``at(x, y)``, ``char(x, y)``."""

    @classmethod
    def of(cls, chart: Chart) -> ReadChart:
        return cls(**{f: getattr(chart, f) for f in chart.__dataclass_fields__})

    @cached_property
    def cells(self) -> list[list[Cell]]:
        return parse_ansi(self.ansi)

    def at(self, x: float, y: float) -> Cell:
        c, r = self.cell_of(x, y)
        return self.cells[r][c]

    def char(self, x: float, y: float) -> str:
        return self.at(x, y).char


def draw(*args, **kw) -> ReadChart:
    """:func:`tui.widgets.pareto_plot.draw`, its result readable."""
    return ReadChart.of(pareto_plot.draw(*args, **kw))
