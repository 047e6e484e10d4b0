"""Parallel trials on disjoint GPUs (``--parallel``): the coordinator and its workers' side.

Each trial runs in its own worker process (its own load client and GIL, so two measurements
never share an event loop), pinned to GPUs no other running trial holds. The coordinator (the
study's runner) packs trials onto free GPUs, relays the workers' events from the store to its
display, and on a signal stops every worker (each tears down its own server). Only the grid
runs in parallel: adaptive and SLA search decide each step on the previous result.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.serve.process import ServerFailed
from core.spec.study import PointRow
from core.sweep.control import _Interrupted
from core.sweep.space import TrialPlan
from core.sweep.strategies import Strategy, make_strategy
from core.sweep.summary import WORKER_COUNTS, RunSummary

# Environment variable that carries the storage URL to a runner process (core.sweep.runner.main).
STORAGE_ENV = "KNEE_STORAGE_URL"
RUNNER_MODULE = "core.sweep.runner"  # what ``python -m`` runs for a detached runner or a worker
INFEASIBLE = "infeasible"

log = logging.getLogger(__name__)


def child_env(storage_url: str) -> dict[str, str]:
    """The environment of a runner process: this checkout importable, and the storage URL,
    which may hold a database password, in the environment, never in argv (``ps`` shows argv)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[STORAGE_ENV] = str(storage_url)
    return env


class ParallelCoordinator:
    """The parallel half of :class:`core.sweep.run.Runner` (a mixin)."""

    store: Any
    study: str
    spec: Any
    summary: RunSummary
    workspace: Any
    log_dir: Path
    on_event: Callable[[str, dict[str, Any]], None] | None
    worker_trial: str | None
    worker_gpus: list[int] | None
    emit: Callable[..., None]
    # What the coordinator uses of its sibling mixins (declared for the type checker only):
    # RunControl's (core/sweep/control.py) ...
    _stop_requested: bool
    _watch_done: threading.Event
    _requested: Callable[[], str]
    _beat: Callable[[], None]
    _install: Callable[[], dict[Any, Any]]
    _restore: Callable[[dict[Any, Any]], None]
    _start_watch: Callable[[], None]
    # ... and TrialLoop's (core/sweep/trial_loop.py).
    _run_trial: Callable[[Strategy, TrialPlan, dict[str, PointRow]], None]
    _stop_server: Callable[[], None]

    def _init_parallel(self) -> None:
        self._available_gpus: list[int] | None = None
        self._workers: dict[subprocess.Popen, tuple[TrialPlan, list[int]]] = {}
        self._events_via_store = False  # the coordinator relays events by reading the store

    def _detected_gpus(self) -> list[int]:
        if self._available_gpus is None:
            from core.serve.engines import detect_gpus

            self._available_gpus = self.spec.engine.gpus if self.spec.engine.gpus is not None else detect_gpus()
        return self._available_gpus or []

    def _parallel_gpus(self, strategy: Strategy) -> list[int] | None:
        if not self.spec.parallel or strategy.name != "grid" or self.spec.engine.kind not in ("vllm", "sglang", "custom"):
            return None
        gpus = self._detected_gpus()
        return gpus if len(gpus) > 1 else None

    @staticmethod
    def _need(trial: TrialPlan) -> int:
        return trial.config.num_gpus * int(trial.server_args.get("pipeline_parallel_size", 1) or 1)

    def _gpus_for(self, trial: TrialPlan) -> list[int] | None:
        """The GPUs a trial's server is pinned to (None: nothing to pin)."""
        if self.spec.engine.kind in ("sim", "external"):
            return None
        if self.worker_gpus is not None:
            return self.worker_gpus
        gpus = self._detected_gpus()
        if not gpus:
            return None  # no NVIDIA GPUs (CPU vLLM): nothing to pin
        need = self._need(trial)
        if need > len(gpus):
            raise ServerFailed(INFEASIBLE, f"needs {need} GPUs, {len(gpus)} available ({gpus})")
        return gpus[:need]

    # ---- the coordinator ----------------------------------------------------------------------
    def _run_parallel(self, strategy: Strategy, done: dict[str, PointRow]) -> None:
        gpus = list(self._available_gpus or [])
        # Trial ids are assigned here, in grid order, so workers never race for them.
        for t in strategy.plans:
            self.store.upsert_trial(self.study, t.trial_key, t.server_args, predicted=t.predicted)
        pending = [t for t in strategy.plans if not all(p.point_id in done for p in t.points)]
        for t in strategy.plans:
            if t not in pending:  # fully stored already: replay in-process (no launch)
                self._run_trial(strategy, t, done)
        self._workers = {}
        free = list(gpus)
        self._events_via_store = self.on_event is not None
        seen = self.store.last_event_seq(self.study)  # what came before was shown directly
        env = child_env(self.store.url)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        held = False  # a pause holds back new workers; running ones pause between points
        while pending or self._workers:
            if self._stop_requested:
                raise _Interrupted("stop")
            hold = self._requested() == "pause"
            if hold != held:
                held = hold
                self.emit("paused" if hold else "continued", trial_id=None, server_up=bool(self._workers), points_run=self.summary.points_run)
            if hold:
                self._beat()
            for t in [] if hold else list(pending):
                need = self._need(t)
                if need > len(gpus):
                    pending.remove(t)
                    self._run_trial(strategy, t, done)  # fails at once as infeasible
                elif need <= len(free):
                    take, free = free[:need], free[need:]
                    self._workers[self._spawn(t, take, env)] = (t, take)
                    pending.remove(t)
            for proc in [p for p in self._workers if p.poll() is not None]:
                _, take = self._workers.pop(proc)
                free = sorted(free + take)
                self._add_worker_summary(proc)
            if self._events_via_store:
                seen = self._relay_events(seen)
            time.sleep(0.1)
        self.store.heartbeat(self.study)
        self._events_via_store = False
        # What the workers stored; the sequential pass that follows replays it (no launch)
        # and runs whatever a worker left undone.
        done.update({p.point_id: p for p in self.store.points(self.study) if p.status in ("ok", "failed")})

    def _spawn(self, trial: TrialPlan, gpus: list[int], env: dict[str, str]) -> subprocess.Popen:
        argv = [
            sys.executable,
            "-m",
            RUNNER_MODULE,
            "--study",
            self.study,
            "--worker-trial",
            trial.trial_key,
            "--worker-gpus",
            ",".join(map(str, gpus)),
        ]
        if self.workspace:
            argv += ["--workspace", str(self.workspace)]
        with open(self.log_dir / f"worker-{len(self._workers)}-{os.getpid()}.log", "ab") as err:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env, text=True)

    def _add_worker_summary(self, proc: subprocess.Popen) -> None:
        """A finished worker's counts (the JSON line its main() prints last) into ours."""
        out = proc.stdout.read() if proc.stdout else ""
        try:
            ws = json.loads(out.strip().splitlines()[-1])
            for k in WORKER_COUNTS:
                setattr(self.summary, k, getattr(self.summary, k) + int(ws.get(k, 0)))
            self.summary.gpu_seconds += float(ws.get("gpu_seconds", 0.0))
        except (ValueError, IndexError):
            log.warning("a parallel worker of %s ended without its summary (exit code %s)", self.study, proc.returncode)

    def _relay_events(self, seen: int) -> int:
        for ev in self.store.events(self.study, after=seen):
            seen = ev.seq
            try:
                self.on_event(ev.kind, ev.data)  # type: ignore[misc]
            except Exception:  # noqa: BLE001 - a display must never break a sweep (debug: the TUI owns stderr)
                log.debug("the event display failed on %s", ev.kind, exc_info=True)
        return seen

    def _stop_workers(self) -> None:
        workers = self._workers
        for proc in workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the worker tears down its server, then exits
        deadline = time.monotonic() + self.spec.engine.stop_timeout_s + 10
        for proc in workers:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
        self._workers = {}

    # ---- a worker -----------------------------------------------------------------------------
    def _run_worker(self) -> RunSummary:
        """One trial on its GPUs, for a coordinator; no study-level bookkeeping."""
        t0 = time.monotonic()
        old = self._install()
        try:
            strategy = make_strategy(self.spec, None)
            trial = next((t for t in strategy.plans if t.trial_key == self.worker_trial), None)
            if trial is None:
                raise BadInput(f"no trial {self.worker_trial!r} in study {self.study!r}")
            done = {p.point_id: p for p in self.store.points(self.study) if p.status in ("ok", "failed")}
            self._start_watch()
            self._run_trial(strategy, trial, done)
        except (_Interrupted, KeyboardInterrupt):
            self.summary.interrupted = True
        finally:
            self._watch_done.set()
            self._stop_server()
            self._restore(old)
        self.summary.wall_s = time.monotonic() - t0
        return self.summary
