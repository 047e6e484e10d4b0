"""Asked when quitting while a sweep runs: leave it running (the default), stop it, or stay."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class QuitDialog(ModalScreen[str | None]):
    """Dismisses with ``"leave"``, ``"stop"`` or None (stay in the app)."""

    DEFAULT_CSS = """
    QuitDialog {
        align: center middle;
        #dialog { width: 60; height: auto; border: thick $warning; background: $panel; padding: 1 2; }
        #buttons { height: auto; margin-top: 1; align-horizontal: right; }
        Button { margin-left: 1; }
    }
    """
    BINDINGS = [
        Binding("escape", "dismiss(None)", "Stay"),
        Binding("l", "dismiss('leave')", "Leave running"),
        Binding("s", "dismiss('stop')", "Stop sweep"),
    ]

    def __init__(self, study: str) -> None:
        super().__init__()
        self.study = study

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(f"Sweep [b]{self.study}[/b] is still running.")
            yield Label("It runs in its own process: leave it running and come back with [b]knee attach[/b], or stop it now (it can be resumed).")
            with Horizontal(id="buttons"):
                yield Button("Stay", id="stay")
                yield Button("Stop sweep", variant="error", id="stop")
                yield Button("Leave running", variant="primary", id="leave")

    def on_mount(self) -> None:
        self.query_one("#leave", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "stay" else event.button.id)
