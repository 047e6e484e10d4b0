"""A text input whose editing keys apply in the order they were typed.

Textual's ``Input`` inserts a printable key as soon as it arrives, but an editing key bound on
the input (ctrl+u, backspace, the arrows, ...) first bubbles up to the app, which then runs its
action. When keys arrive together (typing over a slow SSH link, a loaded machine, a tmux
``send-keys``), the characters after an editing key are inserted before it acts: ctrl+u then
``Qwen/Qwen3-8B`` left an empty field (the clear ran last). Upstream: Textualize/textual#6605,
with the same fix proposed in #6631. Until that lands, this input runs its own bindings inline.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class OrderedInput(Input):
    async def _on_key(self, event: events.Key) -> None:
        if not event.is_printable:
            for binding in self._bindings.key_to_bindings.get(event.key, ()):
                # Priority bindings ran before the key reached the input; the ones bound higher
                # up (the screen's, the app's) keep running when the key bubbles to the app.
                if not binding.priority and await self.app.run_action(binding.action, self):
                    event.stop()
                    event.prevent_default()
                    return
        await super()._on_key(event)
