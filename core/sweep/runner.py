"""The sweep runner: launches servers, measures load points, stores every result at once.

The runner is its own process (``python -m core.sweep.runner --study NAME``, the store URL in ``$KNEE_STORAGE_URL``,
or in-process for the headless ``knee sweep``). Everything a viewer needs is in the study
store: trials, points, per-request records, and an append-only event stream that the TUI and
``knee attach`` follow (:meth:`StudyStore.follow`). Closing a viewer never touches the runner.

Guarantees:
- a load point is stored (summary, telemetry, per-request records) the moment it finishes,
  in one transaction; killing the runner loses at most the point in flight;
- the server restarts only when server args change;
- a server that fails to start, dies mid-point, or makes too many requests fail ends as a
  stored failed trial/point with its reason, and the sweep goes on with the next trial;
- on SIGINT, SIGTERM and SIGHUP the running server's whole process group is torn down, the
  study is marked interrupted, and ``--resume`` runs only what is missing;
- a runner killed with SIGKILL leaves its server pid in the store; the next run kills that
  process group (checked against its command line) before starting.

Pause, continue and stop go through the store (:meth:`StudyStore.request_state`), so any
process or machine that shares it can ask: the runner reads the request before each load
point (and before each server launch), and while paused every ``CONTROL_POLL_S``. A pause
lets the point in flight finish and be stored, emits ``paused``, keeps the trial's server up
and waits; ``run`` emits ``continued`` and goes on with the next point. A stop is also
watched for on a thread while a point runs or a server starts, and ends the run as a signal
does (server torn down, study interrupted, ``--resume`` runs what is missing).
"""

from __future__ import annotations

import math
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from core.errors import BadInput
from core.results.store import StudyStore
from core.serve import process as proc_mod
from core.serve.engines import Server, launch
from core.serve.process import CRASHED, ServerFailed
from core.serve.telemetry import TelemetrySampler, format_gpu, gpu_live
from core.spec.slo import parse_constraints
from core.spec.study import PointRow, SweepSpec
from core.sweep.calibration import CalibratedPredictor, StudyLearner
from core.sweep.measure import HttpMeasurer, Measurement, PointContext, SimMeasurer
from core.sweep.space import PointPlan, TrialPlan
from core.sweep.strategies import Strategy, make_strategy

TOO_MANY_ERRORS = "too_many_errors"
INTERRUPTED = "interrupted"
INFEASIBLE = "infeasible"
PROGRESS_HZ = 4.0
CONTROL_POLL_S = 0.5  # how often a pause/continue/stop request is read from the store
BEAT_S = 2.0  # heartbeat spacing (remote viewers call a runner dead after store.RUNNER_STALE_S without one)


# Environment variable that carries the storage URL to a runner process (see main()).
STORAGE_ENV = "KNEE_STORAGE_URL"


class _Interrupted(Exception):
    pass


@dataclass
class RunSummary:
    study: str
    points_run: int = 0
    points_failed: int = 0
    points_resumed: int = 0
    launches: int = 0
    trials_failed: int = 0
    trials_skipped: int = 0
    gpu_seconds: float = 0.0
    wall_s: float = 0.0
    interrupted: bool = False
    sla: dict[str, Any] = field(default_factory=dict)


def _hardware(spec: SweepSpec):
    from core.catalog import resolve_hardware

    if spec.instance or spec.gpu:
        return resolve_hardware(gpu=spec.gpu, num_gpus=spec.num_gpus, instance=spec.instance)
    return None


def _arch(spec: SweepSpec):
    from core.catalog import load_model

    return load_model(spec.model)


def default_measurer(spec: SweepSpec):
    if spec.engine.kind == "sim":
        hw = _hardware(spec)
        if hw is None:
            raise BadInput("the sim engine needs hardware", "pass --instance ml.g6.12xlarge or --gpu L4 --num-gpus 4")
        return SimMeasurer(_arch(spec), hw)
    return HttpMeasurer()


def default_predictor(spec: SweepSpec):
    """The estimator-backed predictor, or None where the model or hardware is unknown."""
    from core.sweep.predict import Predictor

    try:
        hw = _hardware(spec)
        if hw is None:
            return None
        return Predictor(_arch(spec), hw)
    except Exception:
        return None


class Runner:
    def __init__(
        self,
        store: StudyStore,
        study: str,
        measurer=None,
        predictor: Any = "auto",
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        workspace: str | os.PathLike | None = None,
        install_signals: bool = True,
        worker_trial: str | None = None,
        worker_gpus: list[int] | None = None,
        spec: SweepSpec | None = None,
    ):
        # worker_trial/worker_gpus: this process is one of the parallel workers a coordinator
        # started (``--parallel``); it runs that one trial on those GPUs and nothing else.
        self.worker_trial = worker_trial
        self.worker_gpus = worker_gpus
        self._events_via_store = False  # the coordinator relays events by reading the store
        self.store = store
        self.study = study
        self.spec = spec if spec is not None else store.spec(study)  # spec: a --join worker's (workers.py)
        self.slo = parse_constraints(self.spec.constraints)
        self.measurer = measurer if measurer is not None else default_measurer(self.spec)
        self.learner = None
        if predictor == "auto":
            base = default_predictor(self.spec)
            # A real sweep learns its machine as it measures (core/sweep/calibration.py): the
            # strategies then rank and bracket with calibrated predictions.
            self.learner = StudyLearner.for_runner(store, study, self.spec, base)
            if self.learner is not None:
                base = CalibratedPredictor(base, self.learner.calibration)
            predictor = base if self.spec.strategy in ("adaptive", "sla") else None
        self.predictor = predictor
        self.on_event = on_event
        self.workspace = workspace
        base = Path(workspace) if workspace else (store.path.parent if store.path else Path(".knee"))
        self.log_dir = base / "logs" / _safe(study)
        self.install_signals = install_signals
        self.cancel = threading.Event()
        self.summary = RunSummary(study)
        self._server: Server | None = None
        self._last_beat = 0.0
        self._interrupt_signal: int | None = None
        self._stop_requested = False  # a "stop" read from the store (set by the watcher thread)
        self._watch_done = threading.Event()
        self.price_per_gpu_hour = None
        self._available_gpus: list[int] | None = None
        self._trial_gpus: list[int] | None = None

    # ---- events -----------------------------------------------------------------------------
    def emit(self, kind: str, /, **data: Any) -> None:
        self.store.emit(self.study, kind, **data)
        self._beat()
        if self.on_event is not None and not self._events_via_store:
            try:
                self.on_event(kind, data)
            except Exception:
                pass  # a display must never break a sweep

    def _beat(self) -> None:
        now = time.time()
        if now - self._last_beat > BEAT_S:
            self.store.heartbeat(self.study)
            self._last_beat = now

    # ---- hooks a --join worker overrides (core/sweep/workers.py) -------------------------------
    @property
    def worker_id(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()}"

    def _point_begin(self, tid: int, point: PointPlan) -> None:
        """A load point is about to be measured."""

    def _save_point(self, row: PointRow, records: Any = None, keep_chunks: bool = True) -> None:
        who = {"worker": self.worker_id, "host": socket.gethostname(), "pid": os.getpid(), "rerun": False}
        self.store.save_point(row, records, keep_chunks=keep_chunks, worker=who)

    def _record_host(self, tid: int, trial: TrialPlan, server: Server | None) -> None:
        """Where this launch runs: host, GPU type and count, engine version (never fails a sweep)."""
        try:
            from core.sweep.workers import trial_host

            self.store.record_trial_host(self.study, tid, self.worker_id, **trial_host(self, trial, server))
        except Exception:
            pass

    # ---- pause / continue / stop through the store --------------------------------------------
    def _watch_control(self) -> None:
        # A stop must reach a runner that is launching a server or measuring a long point,
        # and a runner on another machine cannot be signalled: this thread reads the request
        # and sets the cancel event every wait in the runner already honours (the launch's
        # readiness poll, the load client, the rest between launches).
        # It also keeps the heartbeat fresh while no event is emitted (a server loading a
        # large model for minutes): a viewer on another host calls a silent runner dead.
        while not self._watch_done.wait(min(CONTROL_POLL_S, BEAT_S)):
            try:
                if self.worker_trial is None:
                    self._beat()
                if self._requested() == "stop":
                    return
            except Exception:
                continue  # a busy store must not end the sweep

    def _start_watch(self) -> None:
        threading.Thread(target=self._watch_control, name="knee-control", daemon=True).start()

    def _requested(self) -> str:
        if self._stop_requested:
            return "stop"
        state = self.store.requested_state(self.study)
        if state == "stop":
            self._stop_requested = True
            self.cancel.set()
        return state

    def _checkpoint(self, trial_id: int | None = None, server_up: bool = False) -> None:
        """Before a load point or a launch: stop, or wait out a pause, if the store asks."""
        state = self._requested()
        if state == "stop":
            raise _Interrupted("stop")
        if state != "pause":
            return
        # A parallel coordinator announces the pause once for all of its workers.
        announce = self.worker_trial is None
        t0 = time.monotonic()
        if announce:
            self.emit("paused", trial_id=trial_id, server_up=server_up, points_run=self.summary.points_run)
        while state == "pause":
            time.sleep(CONTROL_POLL_S)  # a signal still interrupts the wait
            self._beat()  # paused is alive: viewers on other machines go by the heartbeat
            state = self._requested()
        if state == "stop":
            raise _Interrupted("stop")
        if announce:
            self.emit("continued", trial_id=trial_id, paused_s=time.monotonic() - t0)

    # ---- signals ----------------------------------------------------------------------------
    def _handler(self, signum, frame):  # noqa: ANN001
        if self._interrupt_signal is not None:
            return  # already stopping: a second Ctrl-C must not cut the teardown short
        self._interrupt_signal = signum
        self.cancel.set()
        raise _Interrupted(signal.Signals(signum).name)

    def _install(self):
        if not self.install_signals or threading.current_thread() is not threading.main_thread():
            return {}
        old = {}
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[s] = signal.signal(s, self._handler)
        return old

    # ---- the run ----------------------------------------------------------------------------
    def run(self) -> RunSummary:
        if self.worker_trial is not None:
            return self._run_worker()
        t0 = time.monotonic()
        old = self._install()
        try:
            from core.sweep import runner_alive

            row = self.store.study(self.study) or {}
            if runner_alive(row) and row.get("runner_pid") != os.getpid():
                # One runner per study: a second would measure the same points again.
                raise BadInput(f"study {self.study!r} is being run by pid {row['runner_pid']} on {row.get('runner_host')}", "follow it with knee attach")
            self._cleanup_stale()
            self.store.claim_runner(self.study)
            self._start_watch()
            strategy = make_strategy(self.spec, self.predictor)
            done = {p.point_id: p for p in self.store.points(self.study) if p.status in ("ok", "failed")}
            self.emit(
                "study_started",
                model=self.spec.model,
                engine=self.spec.engine.kind,
                strategy=self.spec.strategy,
                planned_trials=len(strategy.plans),
                planned_points=sum(len(t.points) for t in strategy.plans),
                resumed_points=len(done),
                simulated=self.spec.engine.kind == "sim",
            )
            for t, reason in list(strategy.skipped):
                self._store_skipped(t, reason)
            n_skipped_seen = len(strategy.skipped)
            if self._parallel_gpus(strategy):
                self._run_parallel(strategy, done)
            while True:
                trial = strategy.next_trial()
                for t, reason in strategy.skipped[n_skipped_seen:]:
                    self._store_skipped(t, reason)
                n_skipped_seen = len(strategy.skipped)
                if trial is None:
                    break
                self._checkpoint()
                self._run_trial(strategy, trial, done)
            self._finish_control()
            self.store.set_study(self.study, status="done", runner_pid=None)
            self.summary.wall_s = time.monotonic() - t0
            if hasattr(strategy, "sla_result"):
                self.summary.sla = {t.trial_key: strategy.sla_result(t) for t in strategy.plans}
            self.summary.trials_skipped = len(strategy.skipped)
            self.emit("study_done", **_summary_dict(self.summary))
            return self.summary
        except BadInput:
            # e.g. a port in use: nothing was measured for this trial; the study can resume.
            row = self.store.study(self.study) or {}
            if row.get("runner_pid") == os.getpid():
                self.store.set_study(self.study, status="interrupted", runner_pid=None)
            raise
        except (_Interrupted, KeyboardInterrupt):
            self.cancel.set()
            self._events_via_store = False  # the coordinator's own last words go out directly
            self._stop_workers()
            self._stop_server()
            self.summary.interrupted = True
            self.summary.wall_s = time.monotonic() - t0
            stopped = self._stop_requested and not self._interrupt_signal
            self._finish_control()
            self.store.set_study(self.study, status="interrupted", runner_pid=None)
            name = self._interrupt_name(stopped)
            self.emit("study_interrupted", signal=name, **_summary_dict(self.summary))
            return self.summary
        finally:
            self._watch_done.set()
            self._stop_workers()
            self._stop_server()
            for s, h in old.items():
                signal.signal(s, h)

    def _interrupt_name(self, stopped: bool) -> str:
        """What ended the run, for the interrupted event: a stop request, or the signal."""
        if stopped:
            return "stop request"
        return signal.Signals(self._interrupt_signal).name if self._interrupt_signal else "SIGINT"

    def _finish_control(self) -> None:
        """The request was for this run: a later --resume starts running, not paused or stopped."""
        self._watch_done.set()
        try:
            if self.store.requested_state(self.study) != "run":
                self.store.request_state(self.study, "run")
        except Exception:
            pass  # the study is over either way

    # ---- parallel trials on disjoint GPUs ---------------------------------------------------
    # Each trial runs in its own worker process (its own load client and GIL, so two
    # measurements never share an event loop), pinned to GPUs no other running trial holds.
    # The coordinator (this runner) packs trials onto free GPUs, relays the workers' events
    # from the store to its display, and on a signal stops every worker (each tears down its
    # own server). Only the grid runs in parallel: adaptive and SLA search decide each step
    # on the previous result.
    def _parallel_gpus(self, strategy: Strategy) -> list[int] | None:
        if not self.spec.parallel or strategy.name != "grid" or self.spec.engine.kind not in ("vllm", "sglang", "custom"):
            return None
        if self._available_gpus is None:
            from core.serve.engines import detect_gpus

            self._available_gpus = self.spec.engine.gpus if self.spec.engine.gpus is not None else detect_gpus()
        return self._available_gpus if len(self._available_gpus or []) > 1 else None

    def _need(self, trial: TrialPlan) -> int:
        return trial.config.num_gpus * int(trial.server_args.get("pipeline_parallel_size", 1) or 1)

    def _run_parallel(self, strategy: Strategy, done: dict[str, PointRow]) -> None:
        import json
        import subprocess
        import sys

        gpus = list(self._available_gpus or [])
        # Trial ids are assigned here, in grid order, so workers never race for them.
        for t in strategy.plans:
            self.store.upsert_trial(self.study, t.trial_key, t.server_args, predicted=t.predicted)
        pending = [t for t in strategy.plans if not all(p.point_id in done for p in t.points)]
        for t in strategy.plans:
            if t not in pending:  # fully stored already: replay in-process (no launch)
                self._run_trial(strategy, t, done)
        self._workers: dict[Any, tuple[TrialPlan, list[int], Any]] = {}
        free = list(gpus)
        self._events_via_store = self.on_event is not None
        seen = self.store.last_event_seq(self.study)  # what came before was shown directly
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        log_dir = self.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
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
            for t in ([] if hold else list(pending)):
                need = self._need(t)
                if need > len(gpus):
                    pending.remove(t)
                    self._run_trial(strategy, t, done)  # fails at once as infeasible
                elif need <= len(free):
                    take, free = free[:need], free[need:]
                    # The storage URL (it may hold a database password) travels in the environment,
                    # never in argv, where any user's `ps` would show it.
                    env[STORAGE_ENV] = self.store.url
                    argv = [sys.executable, "-m", "core.sweep.runner", "--study", self.study,
                            "--worker-trial", t.trial_key, "--worker-gpus", ",".join(map(str, take))]
                    if self.workspace:
                        argv += ["--workspace", str(self.workspace)]
                    err = open(log_dir / f"worker-{len(self._workers)}-{os.getpid()}.log", "ab")
                    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env, text=True)
                    err.close()
                    self._workers[proc] = (t, take, None)
                    pending.remove(t)
            for proc in [p for p in self._workers if p.poll() is not None]:
                t, take, _ = self._workers.pop(proc)
                free = sorted(free + take)
                out = proc.stdout.read() if proc.stdout else ""
                try:
                    ws = json.loads(out.strip().splitlines()[-1])
                    for k in ("points_run", "points_failed", "points_resumed", "launches", "trials_failed"):
                        setattr(self.summary, k, getattr(self.summary, k) + int(ws.get(k, 0)))
                    self.summary.gpu_seconds += float(ws.get("gpu_seconds", 0.0))
                except (ValueError, IndexError):
                    pass
            if self._events_via_store:
                for ev in self.store.events(self.study, after=seen):
                    seen = ev.seq
                    try:
                        self.on_event(ev.kind, ev.data)
                    except Exception:
                        pass
            time.sleep(0.1)
        self.store.heartbeat(self.study)
        self._events_via_store = False
        # What the workers stored; the sequential pass that follows replays it (no launch)
        # and runs whatever a worker left undone.
        done.update({p.point_id: p for p in self.store.points(self.study) if p.status in ("ok", "failed")})

    def _stop_workers(self) -> None:
        workers = getattr(self, "_workers", {}) or {}
        for proc in workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the worker tears down its server, then exits
        deadline = time.monotonic() + self.spec.engine.stop_timeout_s + 10
        for proc in workers:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except Exception:
                proc.kill()
        self._workers = {}

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
            for s_, h in old.items():
                signal.signal(s_, h)
        self.summary.wall_s = time.monotonic() - t0
        return self.summary

    def _cleanup_stale(self) -> None:
        """Servers a killed runner left behind, and trials it left 'running'."""
        for trial_id, pid in self.store.server_pids(self.study):
            proc_mod.kill_stale_group(pid, tag=self._tag(trial_id))
            self.store.update_trial(self.study, trial_id, server_pid=None)
        for t in self.store.trials(self.study):
            if t.status == "running":
                self.store.update_trial(self.study, t.trial_id, status="interrupted", reason="interrupted: the runner stopped")

    def _tag(self, tid: int) -> str:
        """Put in the server's environment; identifies its group after a runner crash."""
        return f"{self.study}/{tid}"

    def _store_skipped(self, t: TrialPlan, reason: str) -> None:
        tid = self.store.upsert_trial(self.study, t.trial_key, t.server_args, status="skipped", reason=reason, predicted=t.predicted)
        self.emit("point_skipped", trial_id=tid, server_args=t.server_args, reason=reason, points=len(t.points))

    def _gpus_for(self, trial: TrialPlan) -> list[int] | None:
        if self.spec.engine.kind in ("sim", "external"):
            return None
        if self.worker_gpus is not None:
            return self.worker_gpus
        if self._available_gpus is None:
            from core.serve.engines import detect_gpus

            self._available_gpus = self.spec.engine.gpus if self.spec.engine.gpus is not None else detect_gpus()
        if not self._available_gpus:
            return None  # no NVIDIA GPUs (CPU vLLM): nothing to pin
        need = trial.config.num_gpus * int(trial.server_args.get("pipeline_parallel_size", 1) or 1)
        if need > len(self._available_gpus):
            raise ServerFailed(INFEASIBLE, f"needs {need} GPUs, {len(self._available_gpus)} available ({self._available_gpus})")
        return self._available_gpus[:need]

    def _run_trial(self, strategy: Strategy, trial: TrialPlan, done: dict[str, PointRow]) -> None:
        tid = self.store.upsert_trial(self.study, trial.trial_key, trial.server_args, predicted=trial.predicted)
        # Replay stored points first (resume): the strategy sees them and moves on.
        while True:
            point = strategy.next_point(trial)
            if point is None:
                self._finish_trial(tid, trial, launched=False)
                strategy.trial_done(trial)
                return
            if point.point_id in done:
                strategy.observe(trial, point, done[point.point_id])
                self.summary.points_resumed += 1
                continue
            break
        kind = self.spec.engine.kind
        server: Server | None = None
        started = time.time()
        try:
            log_path = self.log_dir / f"trial-{tid:03d}" / "server.log" if kind not in ("sim", "external") else None
            if log_path is not None:
                log_path.parent.mkdir(parents=True, exist_ok=True)
            self.store.update_trial(self.study, tid, status="running", started_at=started, reason=None, log_path=str(log_path) if log_path else None)
            gpus = self._gpus_for(trial)
            self._trial_gpus = gpus
            self.emit("trial_started", trial_id=tid, server_args=trial.server_args, engine=kind, log_path=str(log_path) if log_path else None, gpus=gpus)
            if kind == "sim":
                if hasattr(self.measurer, "check"):
                    self.measurer.check(trial.config)  # where vLLM would refuse to start
                start_s = self.spec.engine.sim_launch_s
                server = None
                cmd = f"sim {self.spec.model}"
            else:
                if self.spec.rest_s and self.summary.launches:
                    # llm-optimizer's --rest: let the GPUs settle between servers.
                    if self.cancel.wait(self.spec.rest_s):
                        raise _Interrupted("signal")
                t_launch = time.monotonic()
                server = launch(self.spec.engine, self.spec.framework, self.spec.model, trial.server_args, log_path, gpus=gpus, cancel=self.cancel, tag=self._tag(tid))
                self._server = server
                start_s = time.monotonic() - t_launch
                cmd = server.cmd
                self.store.update_trial(self.study, tid, server_pid=server.pid)
            launches = (self._trial_launches(tid) or 0) + 1
            self.summary.launches += 1
            self.summary.gpu_seconds += start_s * trial.config.num_gpus
            self.store.update_trial(self.study, tid, cmd=cmd, log_path=str(log_path) if log_path else None, launches=launches, start_s=start_s, gpus=gpus)
            self.emit("server_ready", trial_id=tid, start_s=start_s, base_url=server.base_url if server else None, pid=server.pid if server else None, simulated=kind == "sim")
            self._record_host(tid, trial, server)
        except ServerFailed as e:
            self._fail_trial(strategy, trial, tid, e.kind, e.detail, started)
            self._stop_server()
            return
        try:
            while point is not None:
                if point.point_id in done:
                    strategy.observe(trial, point, done[point.point_id])
                    self.summary.points_resumed += 1
                else:
                    self._checkpoint(tid, server_up=server is not None)
                    row = self._measure(trial, tid, point, server, cmd)
                    if self.learner is not None and (learned := self.learner.after_point(trial.config, point.workload, point.load, row)):
                        self.emit("calibration", trial_id=tid, **learned)
                    strategy.observe(trial, point, row)
                    if row.status == "failed" and row.reason and row.reason.startswith(CRASHED):
                        self._fail_trial(strategy, trial, tid, CRASHED, row.reason.split(": ", 1)[-1], started, stored_point=point.point_id)
                        return
                point = strategy.next_point(trial)
        finally:
            self._stop_server()
        self._finish_trial(tid, trial, launched=True, started=started)
        strategy.trial_done(trial)

    def _trial_launches(self, tid: int) -> int:
        for t in self.store.trials(self.study):
            if t.trial_id == tid:
                return t.launches
        return 0

    def _finish_trial(self, tid: int, trial: TrialPlan, launched: bool, started: float | None = None) -> None:
        pts = [p for p in self.store.points(self.study) if p.trial_id == tid]
        status = "ok" if any(p.status == "ok" for p in pts) or not pts else "failed"
        reason = None if status == "ok" else next((p.reason for p in pts if p.reason), None)
        self.store.update_trial(self.study, tid, status=status, reason=reason, ended_at=time.time() if launched else None, server_pid=None)
        if launched:
            self.emit("trial_done", trial_id=tid, status=status, points=len(pts))

    def _fail_trial(self, strategy: Strategy, trial: TrialPlan, tid: int, kind: str, detail: str, started: float, stored_point: str | None = None) -> None:
        reason = f"{kind}: {detail}"
        self.summary.trials_failed += 1
        self.store.update_trial(self.study, tid, status="failed", reason=reason, ended_at=time.time(), server_pid=None)
        # Every point the trial still owed is stored as failed with the same reason
        # (llm-optimizer drops them silently), so a resume does not retry a broken config.
        for p in strategy.points_left(trial):
            if p.point_id == stored_point:
                continue
            row = self._row(trial, tid, p, status="failed", reason=reason)
            self._save_point(row)
            strategy.observe(trial, p, row)
            self.summary.points_failed += 1
        strategy.trial_failed(trial)
        self.emit("trial_failed", trial_id=tid, failure=kind, reason=reason, server_args=trial.server_args)

    def _row(self, trial: TrialPlan, tid: int, p: PointPlan, **kw: Any) -> PointRow:
        return PointRow(
            study=self.study,
            point_id=p.point_id,
            trial_id=tid,
            trial_key=trial.trial_key,
            server_args=trial.server_args,
            client_args=p.client_args,
            search=p.search,
            **{"simulated": self.spec.engine.kind == "sim", **kw},
        )

    def _stop_server(self) -> None:
        s, self._server = self._server, None
        if s is not None:
            s.stop()

    # ---- one load point ---------------------------------------------------------------------
    def _measure(self, trial: TrialPlan, tid: int, point: PointPlan, server: Server | None, cmd: str) -> PointRow:
        from core.load.metrics import summarize

        ctx = PointContext(
            model=self.spec.model,
            config=trial.config,
            workload=point.workload,
            load=point.load,
            base_url=server.base_url if server else None,
            api_key=server.api_key if server else None,
            api=self.spec.engine.api,
            request_timeout_s=self.spec.engine.request_timeout_s,
            cancel=self.cancel,
            early_stop=self.spec.early_stop,
            tokenizer=point.client_args.get("tokenizer"),
        )
        self._point_begin(tid, point)
        if hasattr(self.measurer, "prepare"):
            self.measurer.prepare(ctx)  # tokenizer and prompts: not part of the point's time
        latest: dict[str, Any] = {}
        label = {"trial_id": tid, "point_id": point.point_id, "load": point.load.label, "client_args": point.client_args}
        self.emit("progress", phase="start", total=point.workload.num_prompts, **label)
        period = 1.0 / PROGRESS_HZ
        next_progress = time.monotonic() + period

        def on_progress(d: dict[str, Any]) -> None:
            latest.update(d)

        started = time.time()
        t0 = time.monotonic()
        box: dict[str, Any] = {}

        def work():
            try:
                box["m"] = self.measurer.measure(ctx, on_progress)
            except BaseException as e:  # noqa: BLE001 - reported through the box
                box["e"] = e

        telemetry = TelemetrySampler(server.base_url, gpus=self._trial_gpus, api_key=server.api_key) if server else None
        th = threading.Thread(target=work, name="knee-measure", daemon=True)
        died: int | None = None
        if telemetry:
            telemetry.__enter__()
        try:
            th.start()
            # Supervise: progress at PROGRESS_HZ, and a server death noticed within 0.25 s.
            while th.is_alive():
                th.join(max(0.0, next_progress - time.monotonic()))
                if self._stop_requested:
                    raise _Interrupted("stop")  # as a signal: the point in flight is dropped
                if server is not None and server.process is not None and died is None:
                    code = server.process.exit_code()
                    if code is not None:
                        died = code
                        ctx.cancel.set()  # the load client stops sending
                        th.join(min(10.0, self.spec.engine.request_timeout_s))
                        break
                now = time.monotonic()
                # Ticks on a deadline: with "time since the last tick >= period", a join that
                # came back a hair early skipped a whole period (seen in CI: 2 Hz, not 4).
                if now >= next_progress:
                    next_progress = max(next_progress + period, now + period / 2)  # no burst after a stall
                    data = {**latest, **label, "phase": "run", "elapsed_s": now - t0}
                    data.update(_server_fields(telemetry.latest if telemetry else {}))
                    data.update(_gpu_fields(gpu_live(telemetry.latest_gpus) if telemetry else None))
                    self.emit("progress", **data)
        finally:
            if telemetry:
                telemetry.__exit__(None, None, None)
        if died is None and server is not None and server.process is not None:
            # A server that died so early that every request failed before the first check.
            died = server.process.exit_code()
        wall = time.monotonic() - t0
        if died is not None:
            why = server.process.exit_reason(died, "during the load point")[1] if server and server.process else f"server exited with code {died} during the load point"
            # The cancel was for this point only; the study goes on.
            if not self._interrupt_signal and not self._stop_requested:
                self.cancel.clear()
            row = self._row(trial, tid, point, status="failed", reason=f"{CRASHED}: {why}", started_at=started, ended_at=time.time(), gpu_seconds=wall * trial.config.num_gpus, cmd=cmd, telemetry=telemetry.summary() if telemetry else {})
            self._save_point(row)
            self.summary.points_failed += 1
            self.emit("point_done", status="failed", reason=row.reason, **label)
            return row
        if "e" in box:
            e = box["e"]
            if isinstance(e, (KeyboardInterrupt, _Interrupted)):
                raise _Interrupted("SIGINT")
            if isinstance(e, (BadInput,)):
                raise e
            row = self._row(trial, tid, point, status="failed", reason=f"error: {type(e).__name__}: {e}", started_at=started, ended_at=time.time(), cmd=cmd)
            self._save_point(row)
            self.summary.points_failed += 1
            self.emit("point_done", status="failed", reason=row.reason, **label)
            return row
        m: Measurement = box["m"]
        if self.cancel.is_set() and (self._interrupt_signal or self._stop_requested):
            raise _Interrupted("signal")
        # The point's last live numbers: what a viewer keeps showing until the next point. A
        # simulated point ends before the first 4 Hz tick, so this is its only progress event.
        gpu = m.gpu or (gpu_live(telemetry.latest_gpus) if telemetry else None)
        end = {**latest, **label, "phase": "end", "elapsed_s": wall, **_gpu_fields(gpu)}
        if telemetry and telemetry.latest:
            end.update(_server_fields(telemetry.latest))
        elif gpu and gpu.get("kv_usage") is not None:
            end["kv_cache_usage"] = gpu["kv_usage"]  # simulated: the peak, as in the GPU memory
        self.emit("progress", **end)
        summary = summarize(m.records, m.duration_s, slo=self.slo)
        summary.update({k: v for k, v in m.extra.items() if isinstance(v, (int, float, bool, str))})
        n = len(m.records)
        failed = sum(1 for r in m.records if not r.ok)
        status, reason = "ok", None
        if n == 0 or failed / max(n, 1) > self.spec.max_error_fraction:
            first = next((r.error for r in m.records if r.error), None)
            status, reason = "failed", f"{TOO_MANY_ERRORS}: {failed} of {n} requests failed" + (f" (first: {first})" if first else "")
        meets = self.slo.holds(summary) if status == "ok" else False
        duration = m.duration_s if m.simulated else wall
        row = self._row(
            trial, tid, point,
            status=status, reason=reason, summary=summary,
            telemetry=telemetry.summary() if telemetry else {},
            simulated=m.simulated, started_at=started, ended_at=time.time(),
            gpu_seconds=duration * trial.config.num_gpus, cmd=cmd,
            meets_slo=meets, violations=self.slo.violations(summary) if status == "ok" else [],
        )
        self._save_point(row, m.records, keep_chunks=not m.simulated)
        self.summary.points_run += 1
        self.summary.points_failed += status == "failed"
        self.summary.gpu_seconds += row.gpu_seconds
        self.emit(
            "point_done",
            status=status,
            reason=reason,
            meets_slo=meets,
            violations=row.violations,
            simulated=m.simulated,
            output_throughput=_f(summary.get("output_throughput")),
            request_throughput=_f(summary.get("request_throughput")),
            p99_e2el_ms=_f(summary.get("p99_e2el_ms")),
            mean_ttft_ms=_f(summary.get("mean_ttft_ms")),
            completed=summary.get("completed"),
            failed=summary.get("failed"),
            duration_s=duration,
            **label,
        )
        return row


def _server_fields(srv: dict[str, Any]) -> dict[str, Any]:
    """Progress-event fields from vLLM's /metrics (the sampler's latest scrape)."""
    return {"server_running": srv.get("running"), "server_waiting": srv.get("waiting"), "kv_cache_usage": srv.get("kv_cache_usage")}


def _gpu_fields(gpu: dict[str, Any] | None) -> dict[str, Any]:
    """Progress-event fields for GPU memory: the numbers, and the line viewers show."""
    return {"gpu": gpu, "gpu_memory": format_gpu(gpu)} if gpu else {}


def _f(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _summary_dict(s: RunSummary) -> dict[str, Any]:
    return {
        "points_run": s.points_run,
        "points_failed": s.points_failed,
        "points_resumed": s.points_resumed,
        "launches": s.launches,
        "trials_failed": s.trials_failed,
        "trials_skipped": s.trials_skipped,
        "gpu_seconds": s.gpu_seconds,
        "wall_s": s.wall_s,
    }


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def run_study(storage: str, study: str, **kw: Any) -> RunSummary:
    """Run (or resume) ``study`` in this process."""
    store = StudyStore(storage, create=False)
    try:
        return Runner(store, study, **kw).run()
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m core.sweep.runner --storage URL --study NAME``: the detached runner."""
    import argparse
    import sys

    from core.errors import KneeError

    ap = argparse.ArgumentParser(prog="knee-runner")
    ap.add_argument("--storage", default=os.environ.get(STORAGE_ENV),
                    help=f"study store path or URL (default ${STORAGE_ENV}: how knee passes it, out of sight of ps)")
    ap.add_argument("--study", required=True)
    ap.add_argument("--workspace")
    ap.add_argument("--worker-trial", help="(internal) run only this trial, for a parallel coordinator")
    ap.add_argument("--worker-gpus", help="(internal) the GPUs the worker's trial gets, e.g. 0,1")
    a = ap.parse_args(argv)
    if not a.storage:
        ap.error(f"--storage or ${STORAGE_ENV} is required")
    kw: dict[str, Any] = {"workspace": a.workspace}
    if a.worker_trial is not None:
        kw["worker_trial"] = a.worker_trial
        kw["worker_gpus"] = [int(g) for g in a.worker_gpus.split(",")] if a.worker_gpus else None
    try:
        s = run_study(a.storage, a.study, **kw)
    except KneeError as e:
        print(f"knee runner: error: {e}", file=sys.stderr)
        return e.exit_code
    if a.worker_trial is not None:
        import json

        print(json.dumps(_summary_dict(s)), flush=True)  # read by the coordinator
    return 130 if s.interrupted else 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
