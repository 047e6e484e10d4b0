"""What every mode has: the mode bar on top, the footer with its keys, the body between."""

from __future__ import annotations

from typing import ClassVar, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, OptionList

from tui.app_state import KneeAppState
from tui.widgets.mode_bar import ModeBar


# Escape leaves a field, so the number keys switch modes again. A priority binding runs when
# the key arrives, before the keys after it are handed to the focused field: bound the usual
# way, Escape bubbles up first, and a "2" typed right after it (a fast typist, a slow SSH link)
# landed in the field instead of switching to the Estimate screen.
LEAVE_FIELD = Binding("escape", "leave_field", "Leave field", show=False, priority=True)


class KneeScreen(Screen):
    MODE: ClassVar[str] = ""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "leave_field":
            # An open dropdown (a Select's list) closes on Escape itself.
            return not isinstance(self.focused, OptionList)
        return True

    @property
    def knee(self) -> KneeAppState:
        """The app, typed (screens call its state and actions)."""
        return cast(KneeAppState, self.app)

    @property
    def mode_bar(self) -> ModeBar:
        return self.query_one(ModeBar)

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        yield from self.compose_body()
        yield Footer()

    def compose_body(self) -> ComposeResult:
        raise NotImplementedError
