"""A live, incremental view of a study for displays (the TUI's sweep screen, ``knee attach``).

    view = StudyView(store, "my-study")     # replays what is stored, then follows
    while True:
        new = view.poll()                   # events appended since the last poll (cheap)
        render(view)                        # view.trials, view.points, view.live, view.counts
        sleep(0.1)

One ``SELECT ... WHERE seq > last`` per poll; nothing else is re-read, so a display can poll
at 10 Hz under a 1,000-trial study. The view is rebuilt from events alone, so it works the
same for a runner in this process, in another process, or on another machine sharing the
store.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from core.spec.study import Event


@dataclass
class TrialState:
    trial_id: int
    server_args: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"  # pending | starting | running | ok | failed | skipped
    reason: str | None = None
    start_s: float | None = None
    log_path: str | None = None
    gpus: list[int] | None = None
    points_done: int = 0


class StudyView:
    def __init__(self, store, study: str, from_seq: int = 0):
        self.store = store
        self.study = study
        self.after = from_seq
        self.trials: dict[int, TrialState] = {}
        self.points: dict[str, dict[str, Any]] = {}  # point_id -> point_done data
        self.live: dict[str, Any] | None = None  # the running point's latest progress
        self.status = "unknown"  # running | done | interrupted
        self.started: dict[str, Any] = {}
        self.counts: dict[str, Any] = {}
        self.skipped: list[dict[str, Any]] = []
        self.last_event_time: float | None = None

    def poll(self, limit: int = 5000) -> list[Event]:
        new = self.store.events(self.study, after=self.after, limit=limit)
        for ev in new:
            self.apply(ev)
        return new

    def apply(self, ev: Event) -> None:
        self.after = max(self.after, ev.seq)
        self.last_event_time = ev.time
        d = ev.data
        k = ev.kind
        if k == "study_started":
            self.status, self.started, self.live = "running", d, None
        elif k == "trial_started":
            t = self.trials.setdefault(d["trial_id"], TrialState(d["trial_id"]))
            t.server_args, t.status, t.log_path, t.gpus, t.reason = d.get("server_args") or {}, "starting", d.get("log_path"), d.get("gpus"), None
        elif k == "server_ready":
            t = self.trials.setdefault(d["trial_id"], TrialState(d["trial_id"]))
            t.status, t.start_s = "running", d.get("start_s")
        elif k == "progress":
            self.live = d
        elif k == "point_done":
            self.points[d["point_id"]] = d
            t = self.trials.setdefault(d["trial_id"], TrialState(d["trial_id"]))
            t.points_done += 1
            if self.live and self.live.get("point_id") == d["point_id"]:
                self.live = None
        elif k == "point_skipped":
            self.skipped.append(d)
            t = self.trials.setdefault(d["trial_id"], TrialState(d["trial_id"]))
            t.server_args, t.status, t.reason = d.get("server_args") or {}, "skipped", d.get("reason")
        elif k == "trial_failed":
            t = self.trials.setdefault(d["trial_id"], TrialState(d["trial_id"]))
            t.status, t.reason = "failed", d.get("reason")
            self.live = None
        elif k == "trial_done":
            t = self.trials.setdefault(d["trial_id"], TrialState(d["trial_id"]))
            if t.status != "failed":
                t.status = d.get("status", "ok")
        elif k in ("study_done", "study_interrupted"):
            self.status = "done" if k == "study_done" else "interrupted"
            self.counts = d
            self.live = None

    @property
    def finished(self) -> bool:
        return self.status in ("done", "interrupted")

    def runner_alive(self) -> bool:
        from core.sweep import runner_alive

        row = self.store.study(self.study) or {}
        return runner_alive(row)

    def state(self) -> str:
        """The status to show: the events' one, except that a study whose runner died
        without a word (SIGKILL: no ``study_interrupted`` event) is ``interrupted``."""
        if self.status in ("done", "interrupted"):
            return self.status
        from core.results.store import study_status

        row = self.store.study(self.study) or {}
        stored = study_status(row) if row else self.status
        return "interrupted" if stored == "interrupted" else self.status

    def idle_s(self) -> float:
        return time.time() - self.last_event_time if self.last_event_time else float("inf")
