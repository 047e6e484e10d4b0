"""One row of a form: a label, an input (or a choice) and a line below it that says what is
wrong with the value, or what a good value resolved to."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.suggester import Suggester
from textual.widgets import Label, Select, Static

from tui.widgets.ordered_input import OrderedInput


class FormField(Vertical):
    DEFAULT_CSS = """
    FormField {
        height: auto;
        Horizontal { height: 1; }
        .label { width: 14; color: $text-muted; }
        Input, Select { width: 1fr; }
        .note { height: auto; padding-left: 14; color: $text-muted; display: none; }
        &.-has-note .note { display: block; }
        &.-invalid .note { color: $text-error; }
        &.-invalid .label { color: $text-error; }
    }
    """

    def __init__(
        self,
        field_id: str,
        label: str,
        value: str = "",
        *,
        placeholder: str = "",
        choices: Sequence[str] | None = None,
        suggester: Suggester | None = None,
        tooltip: str | None = None,
    ) -> None:
        super().__init__(id=f"field-{field_id}")
        self.field_id = field_id
        self._label = label
        self._value = value
        self._placeholder = placeholder
        self._choices = choices
        self._suggester = suggester
        self._tooltip = tooltip

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Label(self._label, classes="label")
            if self._choices is not None:
                yield Select([(c, c) for c in self._choices], value=self._value, allow_blank=False, compact=True, id=self.field_id)
            else:
                yield OrderedInput(
                    self._value,
                    placeholder=self._placeholder,
                    suggester=self._suggester,
                    compact=True,
                    id=self.field_id,
                    tooltip=self._tooltip,
                )
        yield Static("", classes="note", markup=False)

    @property
    def value(self) -> str:
        w = self.query_one(f"#{self.field_id}")
        if isinstance(w, Select):
            return str(w.value)
        return w.value  # type: ignore[attr-defined]

    @value.setter
    def value(self, text: str) -> None:
        w = self.query_one(f"#{self.field_id}")
        w.value = text  # type: ignore[attr-defined]

    def show(self, error: str | None, hint: str | None = None) -> None:
        """Show ``error`` (the field is invalid) or else ``hint`` (or nothing)."""
        text = error or hint or ""
        self.query_one(".note", Static).update(("✗ " + error) if error else text)
        self.set_class(bool(error), "-invalid")
        self.set_class(bool(text), "-has-note")
