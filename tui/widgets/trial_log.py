"""The server log of the selected trial (its tail), or the trial's events when it has no
log file (simulated trials, external servers)."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Log

TAIL_BYTES = 32_768


def read_tail(path: str, max_lines: int = 200) -> list[str]:
    """The last lines of a log file; reads only its end (server logs grow large)."""
    p = Path(path)
    with p.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        data = f.read().decode("utf-8", errors="replace")
    lines = data.splitlines()
    if size > TAIL_BYTES:
        lines = lines[1:]  # the first line is probably cut
    return lines[-max_lines:]


class TrialLog(Log):
    DEFAULT_CSS = """
    TrialLog { border: round $primary-muted; border-title-color: $text-accent; height: 1fr; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(max_lines=500, auto_scroll=True, **kw)
        self._shown: tuple[str, ...] = ()

    def on_mount(self) -> None:
        self.border_title = "log"

    def show(self, title: str, lines: list[str] | tuple[str, ...]) -> None:
        self.border_title = title
        new = tuple(lines)
        if new == self._shown:
            return
        if self._shown and new[: len(self._shown)] == self._shown:
            self.write_lines(new[len(self._shown) :])  # appended: keep the scroll position
        else:
            self.clear()
            self.write_lines(new)
        self._shown = new
