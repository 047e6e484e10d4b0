"""The top line of every mode: the six screens (clickable) and what the app is working on."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

MODES = (("plan", "Plan"), ("estimate", "Estimate"), ("sweep", "Sweep"), ("pareto", "Pareto"), ("deploy", "Deploy"), ("recommend", "Recommend"))


class ModeBar(Horizontal):
    """``1 Plan  2 Estimate  3 Sweep  4 Pareto  5 Deploy  6 Recommend`` with the current mode highlighted.

    Each name is a link to its mode, so the mouse works as well as the number keys."""

    DEFAULT_CSS = """
    ModeBar {
        height: 1;
        dock: top;
        background: $panel;
        #modes { width: auto; }
        #status { width: 1fr; text-align: right; color: $text-muted; padding-right: 1; }
    }
    """

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def compose(self) -> ComposeResult:
        parts = [" [b]knee[/b] "]
        for n, (mode, title) in enumerate(MODES, 1):
            if mode == self.mode:
                parts.append(f"[reverse] {n} {title} [/]")
            else:
                parts.append(f" [@click=app.switch_mode('{mode}')]{n} {title}[/] ")
        yield Static("".join(parts), id="modes", markup=True)
        yield Static("", id="status")

    def set_status(self, text: str) -> None:
        self.query_one("#status", Static).update(text)
