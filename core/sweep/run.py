"""The sweep runner: launches servers, measures load points, stores every result at once.

Everything a viewer needs is in the study store: trials, points, per-request records, and an
append-only event stream that the TUI and ``knee attach`` follow (:meth:`StudyStore.follow`).
Closing a viewer never touches the runner.

Guarantees:
- a load point is stored (summary, telemetry, per-request records) the moment it finishes,
  in one transaction; killing the runner loses at most the point in flight;
- the server restarts only when server args change;
- a server that fails to start, dies mid-point, or makes too many requests fail ends as a
  stored failed trial/point with its reason, and the sweep goes on with the next trial;
- on SIGINT, SIGTERM and SIGHUP the running server's whole process group is torn down, the
  study is marked interrupted, and ``--resume`` runs only what is missing;
- pause, continue and stop work through the store from any process or machine.

:class:`Runner` is the study's lifecycle; its parts are mixins, one responsibility each:
:mod:`~core.sweep.control` (pause, stop, heartbeat, signals), :mod:`~core.sweep.trial_loop`
(one server configuration), :mod:`~core.sweep.point` (one supervised load point) and
:mod:`~core.sweep.coordinator` (parallel trials on disjoint GPUs). The process entry point
(``python -m core.sweep.runner``) is :mod:`core.sweep.runner`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

from core.errors import BadInput, KneeError
from core.results.liveness import runner_alive
from core.results.store import StudyStore
from core.serve.engines import Server
from core.spec.events import check_emitted
from core.spec.slo import parse_constraints
from core.spec.study import PointRow, SweepSpec
from core.sweep.calibration import CalibratedPredictor
from core.sweep.calibration_learner import StudyLearner
from core.sweep.control import RunControl, _Interrupted
from core.sweep.coordinator import ParallelCoordinator
from core.sweep.measure import HttpMeasurer, SimMeasurer
from core.sweep.point import PointMeasure
from core.sweep.predict import SurrogatePredictor
from core.sweep.space import PointPlan, TrialPlan
from core.sweep.strategies import make_strategy
from core.sweep.strategy_base import Strategy
from core.sweep.summary import RunSummary, summary_dict
from core.sweep.trial_loop import TrialLoop

log = logging.getLogger(__name__)


def _hardware(spec: SweepSpec):
    from core.catalog import plan_hardware

    if spec.instance or spec.gpu:
        return plan_hardware(spec)
    return None


def _arch(spec: SweepSpec):
    from core.catalog import load_model

    return load_model(spec.model)


def default_measurer(spec: SweepSpec):
    if spec.engine.kind == "sim":
        hw = _hardware(spec)
        if hw is None:
            raise BadInput("the sim engine needs hardware", "pass --instance ml.g6.12xlarge or --gpu L4 --num-gpus 4")
        return SimMeasurer(_arch(spec), hw, spec.engine.version)
    return HttpMeasurer()


def default_predictor(spec: SweepSpec):
    """The estimator-backed predictor, or None where the model or hardware is unknown."""
    try:
        hw = _hardware(spec)
        if hw is None:
            return None
        return SurrogatePredictor.for_spec(spec, _arch(spec), hw)
    except KneeError:
        return None  # an unknown model or hardware: the strategies search without predictions
    except Exception as e:  # noqa: BLE001 - a model config the estimator cannot read must not stop a sweep; say so
        log.warning("no predictions for %s (the estimator failed: %s: %s); searching without them", spec.model, type(e).__name__, e)
        return None


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


class Runner(RunControl, ParallelCoordinator, TrialLoop, PointMeasure):
    """Runs (or resumes) one study to its end, in this process (``run()`` blocks)."""

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
        self.store = store
        self.study = study
        self.spec = spec if spec is not None else store.spec(study)  # spec: a --join worker's (workers.py)
        self.slo = parse_constraints(self.spec.constraints)
        self.measurer = measurer if measurer is not None else default_measurer(self.spec)
        self.learner = None
        self._surrogate = None  # the estimator-backed predictor, whose hardware a launch may correct
        if predictor == "auto":
            base = self._surrogate = default_predictor(self.spec)
            # A real sweep learns its machine as it measures (core/sweep/calibration.py): the
            # strategies then rank and bracket with calibrated predictions.
            self.learner = StudyLearner.for_runner(store, study, self.spec, base)
            if self.learner is not None:
                base = CalibratedPredictor(base, self.learner.calibration)
            predictor = base if self.spec.strategy in ("adaptive", "sla") else None
        self.predictor = predictor
        self.on_event = on_event
        self.workspace = workspace
        root = Path(workspace) if workspace else (store.path.parent if store.path else Path(".knee"))
        self.log_dir = root / "logs" / _safe(study)
        self.install_signals = install_signals
        self.summary = RunSummary(study)
        self._init_control()
        self._init_parallel()
        self._init_trials()

    # ---- events -----------------------------------------------------------------------------
    def emit(self, kind: str, /, **data: Any) -> None:
        # Checked against its model first: a misspelt field or a wrong type raises in the
        # tests (KNEE_STRICT_EVENTS=1, set by tests/conftest.py), not silently in a viewer. A
        # live sweep logs it and goes on: an event's shape must never stop a paid GPU run.
        # Stored as emitted either way, so its JSON keeps its shape.
        try:
            check_emitted(kind, data)
        except ValueError as e:
            if os.environ.get("KNEE_STRICT_EVENTS") == "1":
                raise
            log.error("sweep event %s does not match core/spec/events.py: %s", kind, e)
        self.store.emit(self.study, kind, **data)
        self._beat()
        if self.on_event is not None and not self._events_via_store:
            try:
                self.on_event(kind, data)
            except Exception:  # noqa: BLE001 - a display must never break a sweep (debug: the TUI owns stderr)
                log.debug("the event display failed on %s", kind, exc_info=True)

    def _emit_started(self, strategy: Strategy, resumed_points: int, **extra: Any) -> None:
        """``study_started``, from the single runner and from each --join worker (which adds its host)."""
        self.emit(
            "study_started",
            model=self.spec.model,
            engine=self.spec.engine.kind,
            strategy=self.spec.strategy,
            planned_trials=len(strategy.plans),
            planned_points=sum(len(t.points) for t in strategy.plans),
            resumed_points=resumed_points,
            simulated=self.spec.engine.kind == "sim",
            **extra,
        )

    # ---- hooks a --join worker overrides (core/sweep/workers.py) -------------------------------
    @property
    def worker_id(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()}"

    def _point_begin(self, tid: int, point: PointPlan) -> None:
        """A load point is about to be measured."""

    def _save_point(self, row: PointRow, records: Any = None, keep_chunks: bool = True) -> None:
        who = {"worker": self.worker_id, "host": socket.gethostname(), "pid": os.getpid(), "rerun": False}
        self.store.save_point(row, records, keep_chunks=keep_chunks, worker=who)

    def _record_host(self, tid: int, trial: TrialPlan, server: Server | None, reported: str | None = None) -> None:
        """Where this launch runs: host, GPU type and count, engine version (never fails a sweep)."""
        try:
            from core.sweep.hosts import trial_host

            self.store.record_trial_host(self.study, tid, self.worker_id, **trial_host(self, trial, server, reported))
        except Exception:  # noqa: BLE001 - bookkeeping only: a sweep must not fail on it
            log.warning("could not record where trial %s of %s runs", tid, self.study, exc_info=True)

    def _adopt_no_gpu_p2p(self) -> None:
        """The engine said its GPUs cannot reach each other peer-to-peer: the study is stored
        with ``gpu_p2p = false`` (as ``knee sweep --no-gpu-p2p`` would have set it) and every
        prediction from here on (the strategy's, the learner's uncalibrated reference, the
        Pareto view's) prices all-reduces through host memory."""
        if not self.spec.gpu_p2p:
            return
        self.spec = self.spec.model_copy(update={"gpu_p2p": False})
        self.store.set_study(self.study, spec=self.spec.model_dump_json())
        log.warning("study %s: the engine reports no GPU peer-to-peer; predicting with all-reduces through host memory", self.study)
        hw = _hardware(self.spec)
        if hw is None:
            return
        for p in self._predictors():
            p.use_hardware(hw)
        if self.learner is not None:
            self.learner.calibration.hardware = hw

    def _adopt_engine_version(self, version: str) -> None:
        """A launch reported the engine's release: the study is stored with it (a resume, the
        Pareto view and ``--calibrate-from`` read it) and every prediction from here on uses
        that release's profile instead of the current one."""
        self.spec = self.spec.model_copy(update={"engine": self.spec.engine.model_copy(update={"version": version})})
        self.store.set_study(self.study, spec=self.spec.model_dump_json())
        log.info("study %s: %s %s; predicting with its profile", self.study, self.spec.engine.kind, version)
        for p in self._predictors():
            p.use_engine_version(version)

    def _predictors(self) -> set[SurrogatePredictor]:
        """The strategy's predictor and the learner's uncalibrated reference where it built its own."""
        cal = self.learner.calibration if self.learner is not None else None
        found = {self._surrogate, getattr(cal.base, "__self__", None) if cal else None}
        return {p for p in found if isinstance(p, SurrogatePredictor)}

    # ---- the run ----------------------------------------------------------------------------
    def run(self) -> RunSummary:
        if self.worker_trial is not None:
            return self._run_worker()
        t0 = time.monotonic()
        old = self._install()
        try:
            row = self.store.study(self.study) or {}
            if runner_alive(row) and row.get("runner_pid") != os.getpid():
                # One runner per study: a second would measure the same points again.
                raise BadInput(
                    f"study {self.study!r} is being run by pid {row['runner_pid']} on {row.get('runner_host')}", "follow it with knee attach"
                )
            self._cleanup_stale()
            self.store.claim_runner(self.study)
            self._start_watch()
            strategy = make_strategy(self.spec, self.predictor)
            done = {p.point_id: p for p in self.store.points(self.study) if p.status in ("ok", "failed")}
            self._emit_started(strategy, resumed_points=len(done))
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
            self.emit("study_done", **summary_dict(self.summary))
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
            self.emit("study_interrupted", signal=name, **summary_dict(self.summary))
            return self.summary
        finally:
            self._watch_done.set()
            self._stop_workers()
            self._stop_server()
            self._restore(old)
