"""A yes/no question that must be answered before anything irreversible (deploy, teardown).

Cancel is focused first, so Enter alone never creates or deletes cloud resources."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class ConfirmDialog(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmDialog {
        align: center middle;
        #dialog { width: 70; max-width: 95%; height: auto; max-height: 90%; border: thick $warning; background: $panel; padding: 1 2; }
        #title { text-style: bold; }
        #body { height: auto; max-height: 14; overflow-y: auto; margin-top: 1; }
        #buttons { height: auto; margin-top: 1; align-horizontal: right; }
        Button { margin-left: 1; }
    }
    """
    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel")]

    def __init__(self, title: str, body: str, confirm: str = "Confirm", danger: bool = False) -> None:
        super().__init__()
        self._title, self._body, self._confirm, self._danger = title, body, confirm, danger

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self._title, id="title")
            yield Static(self._body, id="body", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button(self._confirm, variant="error" if self._danger else "primary", id="confirm")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    @on(Button.Pressed, "#confirm")
    def _confirm_pressed(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self) -> None:
        self.dismiss(False)
