"""The Recommend screen's measurement panel: one line per finalist with its stage (planned,
deploying, ready, benchmarking, deleting, deleted) and, under them, the last progress lines
core.recommend.measure says (load points, teardown, anything left behind).

Hidden until a measurement starts; it stays after the end so what happened can be read.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log, Static

from tui.data.recommend_measure import Progress


class MeasureProgress(Vertical):
    DEFAULT_CSS = """
    MeasureProgress {
        display: none; height: auto; max-height: 10; background: $panel; padding: 0 1;
        &.-shown { display: block; }
        #mp-title { text-style: bold; height: 1; }
        #mp-stages { height: auto; }
        #mp-log { height: 3; background: $panel; scrollbar-size-vertical: 1; }
    }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.progress: Progress | None = None
        self.lines: list[str] = []  # every line said, for tests and for reading back

    def compose(self) -> ComposeResult:
        yield Static("", id="mp-title", markup=False)
        yield Static("", id="mp-stages", markup=False)
        yield Log(id="mp-log", max_lines=500)

    def start(self, progress: Progress, title: str) -> None:
        self.progress = progress
        self.lines = []
        self.query_one("#mp-log", Log).clear()
        self.add_class("-shown")
        self.title(title)
        self._stages()

    def title(self, text: str) -> None:
        self.query_one("#mp-title", Static).update(text)

    def say(self, line: str) -> None:
        self.lines.append(line)
        self.query_one("#mp-log", Log).write_line(line)
        if self.progress is not None:
            self.progress.read(line.strip())
            self._stages()

    def _stages(self) -> None:
        if self.progress is not None:
            self.query_one("#mp-stages", Static).update("\n".join(self.progress.lines()))
