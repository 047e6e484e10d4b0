"""Following a study from its store: its new events, and whether its runner is still at work.

The one follower every viewer uses: the TUI's Sweep screen (``tui.data.sweep_state``),
``knee attach`` and :meth:`StudyStore.follow`; each event it yields carries its typed payload
as ``.event`` (:class:`core.spec.events.StoredEvent`). It never writes, so closing a viewer, or
losing its terminal, leaves the runner alone; a viewer on another machine that shares the
store follows the same way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from core.results.liveness import runner_alive, runner_gone, study_status
from core.spec.events import StoredEvent

ENDED = ("study_done", "study_interrupted")
# Events after which the study row (status, runner) has changed: it is re-read at once.
LIFECYCLE = ("study_started", *ENDED, "paused", "continued")
STARTING_S = 60.0  # a detached runner this young that has not claimed its study yet is starting
# A runner that ends in order stores the study's status, then writes its last event: a viewer
# that read the status first waits this long for that event before it stops waiting.
LAST_EVENT_GRACE_S = 2.0


@dataclass(frozen=True)
class StudyState:
    """A study's row as a viewer judges it."""

    row: dict[str, Any] = field(default_factory=dict)  # the stored row ({} when there is none)
    status: str = "unknown"  # stored, except that a running study whose runner died is "interrupted"
    alive: bool = False  # the runner looks alive (its pid on its host; its heartbeat elsewhere)
    note: str = ""  # why a study stored as running has no live runner
    requested: str = "run"  # what its runner is asked to do: run, pause or stop

    @property
    def starting(self) -> bool:
        """Created moments ago by ``knee sweep --detach``: its runner has not claimed it yet."""
        return self.row.get("status") == "created" and time.time() - (self.row.get("created_at") or 0) < STARTING_S

    @property
    def unattended(self) -> bool:
        """No runner is working on it (finished, interrupted, or its runner died)."""
        return bool(self.row) and not self.starting and (self.row.get("status") != "running" or not self.alive)


def judge(row: dict[str, Any] | None, requested: str = "run") -> StudyState:
    if not row:
        return StudyState(requested=requested)
    alive = runner_alive(row)
    note = (runner_gone(row) or "") if row.get("status") == "running" and not alive else ""
    return StudyState(row=row, status=study_status(row), alive=alive, note=note, requested=requested)


class StudyFollower:
    """Reads one study's events after the last one seen, and its row at most every
    ``row_every_s`` (each store call costs a viewer's UI thread time under load) and at once
    after an event that changes it. Not thread-safe: one poller."""

    def __init__(self, store: Any, study: str, after: int = 0, row_every_s: float = 0.5) -> None:
        self.store = store
        self.study = study
        self.after = after  # sequence number of the last event seen
        self.row_every_s = row_every_s
        self.state = StudyState()  # read by the first poll
        self._row_at: float | None = None
        self._over_since: float | None = None

    def poll(self) -> list[StoredEvent]:
        """The events appended since the last call (the state re-read when due).

        The row is read before the events, so a "done" status comes with every event the
        runner wrote before it; a lifecycle event among them re-reads it after."""
        now = time.monotonic()
        due = self._row_at is None or now - self._row_at >= self.row_every_s
        if due:
            self.refresh(now)
        events = self.store.events(self.study, after=self.after)
        if events:
            self.after = events[-1].seq
            if not due and any(e.kind in LIFECYCLE for e in events):
                self.refresh(now)
        return events

    def refresh(self, now: float | None = None) -> StudyState:
        row = self.store.study(self.study) or {}
        requested = self.store.requested_state(self.study) if row else "run"
        self.state = judge(row, requested)
        self._row_at = time.monotonic() if now is None else now
        return self.state

    def ends_run(self, ev: StoredEvent) -> bool:
        """Whether ``ev`` ended the study's last run (not one that a resume has restarted)."""
        return ev.kind in ENDED and not self.store.events(self.study, after=ev.seq, kinds=["study_started"])

    def events(self, poll_s: float = 0.1, stop_when_done: bool = True) -> Iterator[StoredEvent]:
        """Yield events as they are appended (tail -f on the study). With ``stop_when_done``
        it ends after the event that ends the last run, or when no runner is working on it
        and every event is read (a runner killed without a word writes no last event)."""
        while True:
            batch = self.poll()
            for ev in batch:
                yield ev
                if stop_when_done and self.ends_run(ev):
                    return
            if not batch:
                if stop_when_done and self._nothing_more():
                    return
                time.sleep(poll_s)

    def _nothing_more(self) -> bool:
        """No runner works on the study and every event it will write has been read."""
        st = self.state
        if not st.unattended:
            self._over_since = None
            return False
        if st.row.get("status") in ("done", "interrupted", "failed") and not st.note:
            # Ended in order: its last event may be a moment behind the status.
            self._over_since = self._over_since or time.monotonic()
            return time.monotonic() - self._over_since >= LAST_EVENT_GRACE_S
        return True  # died without a word, or never had a runner: no event is coming
