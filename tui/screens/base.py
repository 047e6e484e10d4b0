"""What every mode has: the mode bar on top, the footer with its keys, the body between."""

from __future__ import annotations

from typing import ClassVar, cast

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer

from tui.app_state import KneeAppState
from tui.widgets.mode_bar import ModeBar


class KneeScreen(Screen):
    MODE: ClassVar[str] = ""

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
