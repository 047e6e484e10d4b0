"""Following a sweep through its study store: what the Sweep screen shows, UI-free.

:class:`SweepFollower` reads the study's event stream after the last sequence number it
has seen and, only when something happened, re-reads the stored trials and points. It
returns an immutable :class:`SweepSnapshot`; rows are frozen dataclasses keyed by a stable
id, so the screen updates only the rows whose values changed (in place, by row key).

It never writes: closing the app, or losing the terminal, leaves the runner alone. A pause
shows twice: the request read from the store with the study row (``requested``: the runner
finishes its point first) and the runner's ``paused``/``continued`` events (``paused``).
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from core.results.follow import StudyFollower
from core.results.store import StudyStore
from core.spec.events import (
    Calibration,
    PointDone,
    PointSkipped,
    Progress,
    ServerReady,
    StoredEvent,
    StudyStarted,
    TrialDone,
    TrialFailed,
    TrialStarted,
)
from core.spec.study import PointRow, TrialRow
from tui.data.sweep_rows import RowView, args_text, load_text, point_row, trial_row
from tui.data.workers import WorkerView, point_host_names, read_workers

SPARK_LEN = 60  # samples of tokens/s kept for the sparkline (15 s at the runner's 4 Hz)
ROW_EVERY_S = 0.5  # how often the study row (status, runner pid, heartbeat) is re-read
WORKERS_EVERY_S = 1.0  # how often the leases of joined workers are re-read (ages are in whole seconds)


@dataclass(frozen=True)
class LiveView:
    """The point being measured now."""

    trial_id: int | None = None
    load: str = ""
    completed: int = 0
    total: int = 0
    failed: int = 0
    running: int | None = None  # requests in flight (client side, or the server's count)
    waiting: int | None = None  # requests queued in the server
    kv_usage: float | None = None  # 0..1
    gpu_memory: str = ""  # "41.2/44.4 GiB (sim)", or NVML's used/total · util · power
    tokens_per_s: tuple[float, ...] = ()


@dataclass(frozen=True)
class SweepSnapshot:
    study: str
    status: str  # created, running, done, interrupted (also a runner that died without a word)
    runner_alive: bool
    model: str = ""
    engine: str = ""
    simulated: bool = False
    planned_trials: int = 0
    planned_points: int = 0
    rows: tuple[RowView, ...] = ()
    live: LiveView = LiveView()
    last_seq: int = 0
    paused: bool = False  # the runner said "paused" and has not said "continued" since
    requested: str = "run"  # what the store asks the runner to do: run, pause or stop
    note: str = ""  # why a study the store calls running is interrupted ("runner pid 7 on h is gone")
    workers: tuple[WorkerView, ...] = ()  # joined workers (knee sweep --join); () for one runner
    point_hosts: dict[str, str] = field(default_factory=dict, compare=False)  # point id -> host, with workers
    log_paths: dict[int, str] = field(default_factory=dict, compare=False)
    events_per_trial: dict[int, tuple[str, ...]] = field(default_factory=dict, compare=False)

    @property
    def done_points(self) -> int:
        return sum(1 for r in self.rows if r.status in ("ok", "failed") and not r.key.startswith("trial-"))

    @property
    def running(self) -> bool:
        return self.status == "running" and self.runner_alive

    @property
    def state(self) -> str:
        """One word for the sweep: running, pausing, paused, stopping, or the study status."""
        if not self.running:
            return self.status
        if self.requested == "stop":
            return "stopping"
        if self.paused:
            return "paused" if self.requested == "pause" else "continuing"
        return "pausing" if self.requested == "pause" else "running"


class SweepFollower:
    """Reads one study's progress from its store. Call :meth:`poll` from a worker thread.

    Rows arrive from the event stream as they happen (a finished point's event carries its
    throughput, p99 E2E and SLO verdict); a full re-read of the stored trials and points,
    which fills in the other percentiles, runs at most every ``full_read_s`` because it
    costs time proportional to the whole study (a third of a second for 1,000 points), and
    runs on a thread of its own so the event-driven updates keep flowing meanwhile.
    """

    def __init__(self, store: StudyStore, study: str, full_read_s: float = 2.0) -> None:
        self.store = store
        self.study = study
        self.full_read_s = full_read_s
        self._seq = 0
        self._tok_s: deque[float] = deque(maxlen=SPARK_LEN)
        self._live = LiveView()
        self._started: StudyStarted | None = None  # the latest study_started event
        self._events: dict[int, deque[str]] = {}
        self._rows: dict[str, RowView] = {}
        self._trial_args: dict[int, str] = {}
        self._trial_points: dict[int, int] = {}
        self._finished: set[int] = set()  # trials whose trial_done event was seen
        self._log_paths: dict[int, str] = {}
        self._stale = True  # the stored rows hold more than the events told
        self._last_full = -1e9
        self._reading: Future | None = None
        self._requested = "run"
        self._paused = False
        # The study's events and its row (status, runner liveness): the row twice a second,
        # not every tick: each store call hands the GIL back and forth with the UI thread,
        # and a poll with fewer calls keeps its cadence under load.
        self._follow = StudyFollower(store, study, row_every_s=ROW_EVERY_S)
        self._pool: ThreadPoolExecutor | None = None
        self._snapshot: SweepSnapshot | None = None
        self._workers: tuple[WorkerView, ...] = ()
        self._workers_at = -1e9
        self._point_hosts: dict[str, str] = {}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def poll(self) -> SweepSnapshot | None:
        """A new snapshot when something changed since the last call, else None."""
        now = time.monotonic()
        events = self._follow.poll()
        state = self._follow.state
        # A runner killed with SIGKILL leaves "running" in the store: shown as interrupted.
        study, alive, status, note = state.row, state.alive, state.status, state.note
        self._requested = state.requested
        for e in events:
            self._seq = e.seq
            self._apply(e)
        if now - self._workers_at >= WORKERS_EVERY_S:
            self._workers_at = now
            self._workers = read_workers(self.store, self.study)
        prev = self._snapshot
        ended = status != "running" or not alive
        merged = False
        if prev is None:
            self._merge(self._read_stored())  # the first view is complete
            self._stale = False
            self._last_full = now
            merged = True
        elif self._reading is not None and self._reading.done():
            self._merge(self._reading.result())
            self._reading = None
            merged = True
        elif self._stale and self._reading is None and (ended or now - self._last_full >= self.full_read_s):
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="knee-store-read")
            self._stale = False  # events arriving from now on set it again
            self._reading = self._pool.submit(self._read_stored)
            self._last_full = now
        if (
            not events
            and not merged
            and prev is not None
            and prev.status == status
            and prev.runner_alive == alive
            and prev.requested == self._requested
            and prev.workers == self._workers
        ):
            return None
        info = study.get("info", {})
        started = self._started or StudyStarted()
        self._snapshot = SweepSnapshot(
            study=self.study,
            status=status,
            runner_alive=alive,
            model=study.get("model", ""),
            engine=started.engine if started.engine is not None else info.get("engine", ""),
            simulated=bool(started.simulated if started.simulated is not None else info.get("engine") == "sim"),
            planned_trials=started.planned_trials or 0,
            planned_points=started.planned_points or 0,
            rows=tuple(self._rows.values()),
            live=self._live,
            last_seq=self._seq,
            workers=self._workers,
            point_hosts=dict(self._point_hosts),
            log_paths=dict(self._log_paths),
            events_per_trial={k: tuple(v) for k, v in self._events.items()},
            paused=self._paused and alive,
            requested=self._requested,
            note=note,
        )
        return self._snapshot

    def _read_stored(self) -> tuple[list[RowView], list[TrialRow], dict[int, int]]:
        trials = self.store.trials(self.study)
        points = self.store.points(self.study)
        if self._workers:  # who stored each point: only a joined study has more than one host
            self._point_hosts = point_host_names(self.store.point_hosts(self.study))
        counts: dict[int, int] = {}
        for p in points:
            counts[p.trial_id] = counts.get(p.trial_id, 0) + 1
        return self._stored_rows(trials, points), trials, counts

    def _merge(self, stored: tuple[list[RowView], list[TrialRow], dict[int, int]]) -> None:
        """Stored rows win for points (they carry every percentile); rows the events added
        after the read started are kept, and so are newer trial lines."""
        rows, trials, counts = stored
        # A read that started before a trial finished still has its "running" line.
        new = {r.key: r for r in rows if not (r.key.startswith("trial-") and r.trial_id in self._finished and r.status == "running")}
        for key, row in self._rows.items():
            if key.startswith("trial-"):
                finished_with_points = counts.get(row.trial_id) and row.status in ("ok", "running") and key not in new
                if key in new or not finished_with_points:
                    new[key] = row
            elif key not in new:
                new[key] = row
        self._rows = new
        self._log_paths.update({t.trial_id: t.log_path for t in trials if t.log_path})
        self._trial_args.update({t.trial_id: args_text(t.server_args) for t in trials})
        for tid, n in counts.items():
            self._trial_points[tid] = max(n, self._trial_points.get(tid, 0))

    @staticmethod
    def _stored_rows(trials: list[TrialRow], points: list[PointRow]) -> list[RowView]:
        by_trial: dict[int, list[PointRow]] = {}
        for p in points:
            by_trial.setdefault(p.trial_id, []).append(p)
        rows: list[RowView] = []
        for t in sorted(trials, key=lambda t: t.trial_id):
            pts = by_trial.get(t.trial_id, [])
            rows.extend(point_row(p) for p in pts)
            # A trial shows its own line until it has a point, and again while it is still
            # running (the next load point is being measured) or when it ended badly.
            if not pts or t.status in ("running", "failed", "skipped", "interrupted"):
                rows.append(trial_row(t))
        return rows

    def _trial_line(self, tid: int, status: str, reason: str = "") -> None:
        key = f"trial-{tid}"
        self._rows[key] = RowView(
            key=key, trial_id=tid, status=status, server_args=self._trial_args.get(tid, ""), load="", reason=reason.split("\n")[0]
        )

    def _apply(self, e: StoredEvent) -> None:
        ev, kind = e.event, e.kind
        # getattr: any kind of one trial carries its id, a kind this version does not know too.
        tid: Any = getattr(ev, "trial_id", None)
        if isinstance(ev, StudyStarted):
            self._started = ev
        if kind == "paused":
            self._paused = True
        elif kind in ("continued", "study_started", "study_done", "study_interrupted"):
            self._paused = False
        if tid is not None and isinstance(ev, Calibration):
            from core.sweep.calibration_learner import calibration_line

            self._events.setdefault(tid, deque(maxlen=200)).append(calibration_line(e.data))
        elif tid is not None and kind != "progress":
            line = kind.replace("_", " ")
            reason, load = getattr(ev, "reason", None), getattr(ev, "load", None)
            if reason:
                line += f": {str(reason).splitlines()[0]}"
            elif load:
                line += f" {load}"
            elif isinstance(ev, ServerReady):
                facts = [f"version {ev.engine_version}"] if ev.engine_version else []
                if ev.gpu_p2p is False:
                    facts.append("no GPU peer-to-peer, all-reduces through host memory")
                line += f": {', '.join(facts)} (predictions assume it)" if facts else ""
            self._events.setdefault(tid, deque(maxlen=200)).append(line)
        if isinstance(ev, TrialStarted):
            self._trial_args[tid] = args_text(ev.server_args or {})
            if ev.log_path:
                self._log_paths[tid] = ev.log_path
            self._trial_line(tid, "running")
        elif isinstance(ev, (TrialFailed, PointSkipped)):
            if ev.server_args is not None:
                self._trial_args.setdefault(tid, args_text(ev.server_args))
            self._trial_line(tid, "failed" if isinstance(ev, TrialFailed) else "skipped", str(ev.reason or ""))
            self._stale = True
        elif isinstance(ev, TrialDone):
            self._finished.add(tid)
            if self._trial_points.get(tid):
                self._rows.pop(f"trial-{tid}", None)
            else:
                self._trial_line(tid, str(ev.status or "ok"))
            self._stale = True
        elif isinstance(ev, PointDone):
            self._point_done(tid, ev)
        elif isinstance(ev, Progress):
            self._progress(tid, ev)

    def _point_done(self, tid: int, ev: PointDone) -> None:
        key = ev.point_id or f"point-{self._seq}"
        status = str(ev.status or "ok")
        violations = ev.violations or []
        self._rows[key] = RowView(
            key=key,
            trial_id=tid,
            status=status,
            server_args=self._trial_args.get(tid, ""),
            load=load_text(ev.client_args or {}) or (ev.load or ""),
            e2e_p99=ev.p99_e2el_ms,
            req_s=ev.request_throughput,
            tok_s=ev.output_throughput,
            slo=ev.meets_slo if status == "ok" else None,
            reason=str(ev.reason or "; ".join(violations)).split("\n")[0],
            simulated=bool(ev.simulated),
        )
        self._trial_points[tid] = self._trial_points.get(tid, 0) + 1
        self._stale = True  # the stored point has the TTFT and ITL percentiles too
        if ev.output_throughput is not None:
            self._tok_s.append(ev.output_throughput)
        done = int(ev.completed or 0)
        failed = int(ev.failed or 0)
        # The GPU memory of the point's last progress stays: it is the trial's until the next.
        gpu = self._live.gpu_memory if self._live.trial_id == tid else ""
        self._live = LiveView(
            trial_id=tid, load=ev.load or "", completed=done, total=done + failed, failed=failed, gpu_memory=gpu, tokens_per_s=tuple(self._tok_s)
        )

    def _progress(self, tid: int | None, ev: Progress) -> None:
        if ev.output_tokens_per_s is not None:
            self._tok_s.append(ev.output_tokens_per_s)
        running = int(ev.server_running) if ev.server_running is not None else ev.running
        self._live = LiveView(
            trial_id=tid,
            load=ev.load if ev.load is not None else self._live.load,
            completed=ev.completed or 0,
            total=ev.total or self._live.total,
            failed=ev.failed or 0,
            running=running,
            waiting=int(ev.server_waiting) if ev.server_waiting is not None else None,
            kv_usage=ev.kv_cache_usage,
            # A point's start has no sample yet: the trial's last one stands until it does.
            gpu_memory=ev.gpu_memory or (self._live.gpu_memory if self._live.trial_id == tid else ""),
            tokens_per_s=tuple(self._tok_s),
        )
