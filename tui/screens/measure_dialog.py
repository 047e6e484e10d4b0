"""Asked before measuring the top N on SageMaker: how many, with which execution role, where.

The answers are checked by core (``tui.data.recommend_measure.measure_options``) before the
dialog closes, so a wrong role or region is named in the dialog, one line, and nothing is
planned. It dismisses with the MeasureOptions, or None (Escape, Cancel). Nothing is created
here: the confirmation with the estimated cost comes next. Fits 80x24.
"""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from core.recommend.measure import MeasureOptions
from tui.data.recommend_measure import DEFAULT_N, DEFAULT_REGION, measure_options
from tui.widgets.ordered_input import OrderedInput


class MeasureDialog(ModalScreen[MeasureOptions | None]):
    DEFAULT_CSS = """
    MeasureDialog {
        align: center middle;
        #dialog { width: 72; max-width: 95%; height: auto; max-height: 95%; border: thick $warning;
                  background: $panel; padding: 0 1; }
        #title { text-style: bold; }
        #why { color: $text-muted; }
        .row { height: 1; margin-top: 1; }
        .row Label { width: 8; color: $text-muted; }
        .row Input { width: 1fr; }
        #m-n { width: 6; }
        #m-error { height: auto; color: $text-error; }
        #buttons { height: auto; margin-top: 1; align-horizontal: right; }
        Button { margin-left: 1; }
    }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(
        self,
        *,
        storage: str,
        poll_interval_s: float | None = None,
        overrides: dict[str, Any] | None = None,
        role: str = "",
        region: str = DEFAULT_REGION,
        n: int = DEFAULT_N,
    ) -> None:
        super().__init__()
        self._storage, self._poll, self._overrides = storage, poll_interval_s, overrides
        self._role, self._region, self._n = role, region, n

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Measure the top N on SageMaker", id="title")
            yield Static(
                "Deploys them as real endpoints (billed), benchmarks each, then deletes them all. "
                "The estimated cost is shown before anything is created.",
                id="why",
            )
            with Horizontal(classes="row"):
                yield Label("N")
                yield OrderedInput(str(self._n), compact=True, id="m-n", restrict=r"[0-9]*")
            with Horizontal(classes="row"):
                yield Label("role")
                yield OrderedInput(self._role, placeholder="arn:aws:iam::<account>:role/<name>", compact=True, id="m-role")
            with Horizontal(classes="row"):
                yield Label("region")
                yield OrderedInput(self._region, compact=True, id="m-region")
            yield Static("", id="m-error", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Next: cost", variant="warning", id="next")

    def on_mount(self) -> None:
        # The role is what is missing the first time; N and the region have defaults.
        self.query_one("#m-role" if not self._role else "#m-n", Input).focus()

    def value(self, key: str) -> str:
        return self.query_one(f"#m-{key}", Input).value

    @on(Input.Submitted)
    @on(Button.Pressed, "#next")
    def _next(self) -> None:
        opts, why = measure_options(
            self.value("n"), self.value("role"), self.value("region"), storage=self._storage, poll_interval_s=self._poll, overrides=self._overrides
        )
        self.query_one("#m-error", Static).update(f"✗ {why}" if why else "")
        if opts is not None:
            self.dismiss(opts)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)
