"""The trial loop: one server configuration at a time, launched once, its load points measured
in the order the strategy asks, and stored as a finished, failed or skipped trial.

- Points already stored (a resume) are replayed to the strategy first; a trial with nothing
  left to measure is never launched.
- A server that fails to start, or dies mid-point, ends as a failed trial with its reason, and
  every point it still owed is stored as failed with that reason (llm-optimizer drops them
  silently), so a resume does not retry a broken configuration.
- A runner killed with SIGKILL leaves its server pid in the store; the next run kills that
  process group (checked against its tag) before starting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.serve import process as proc_mod
from core.serve.engines import Server, launch
from core.serve.process import CRASHED, ServerFailed
from core.serve.startup_log import log_lacks_gpu_p2p
from core.spec.study import PointRow
from core.sweep.control import _Interrupted
from core.sweep.hosts import names_release, reported_version
from core.sweep.space import PointPlan, TrialPlan
from core.sweep.strategies import Strategy
from core.sweep.summary import RunSummary


class TrialLoop:
    """The trial half of :class:`core.sweep.run.Runner` (a mixin)."""

    store: Any
    study: str
    spec: Any
    measurer: Any
    learner: Any
    log_dir: Path
    cancel: threading.Event
    summary: RunSummary
    emit: Callable[..., None]
    # From the sibling mixins the Runner combines (annotations only; nothing at runtime).
    _checkpoint: Callable[..., None]  # (trial_id=None, server_up=False)
    _measure: Callable[..., PointRow]  # (trial, tid, point, server, cmd)
    _gpus_for: Callable[[TrialPlan], list[int] | None]
    _record_host: Callable[..., None]
    _save_point: Callable[..., None]  # (row, records=None, keep_chunks=True)
    _adopt_no_gpu_p2p: Callable[[], None]
    _adopt_engine_version: Callable[[str], None]

    def _init_trials(self) -> None:
        self._server: Server | None = None
        self._trial_gpus: list[int] | None = None

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
        started = time.time()
        try:
            server, cmd = self._launch(trial, tid, started)
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
        self._finish_trial(tid, trial, launched=True)
        strategy.trial_done(trial)

    def _launch(self, trial: TrialPlan, tid: int, started: float) -> tuple[Server | None, str]:
        """Start the trial's server (the sim engine has none); (server, command line).
        Raises ServerFailed when it cannot start."""
        kind = self.spec.engine.kind
        log_path = self.log_dir / f"trial-{tid:03d}" / "server.log" if kind not in ("sim", "external") else None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        self.store.update_trial(self.study, tid, status="running", started_at=started, reason=None, log_path=str(log_path) if log_path else None)
        gpus = self._gpus_for(trial)
        self._trial_gpus = gpus
        self.emit("trial_started", trial_id=tid, server_args=trial.server_args, engine=kind, log_path=str(log_path) if log_path else None, gpus=gpus)
        server: Server | None = None
        if kind == "sim":
            if hasattr(self.measurer, "check"):
                self.measurer.check(trial.config)  # where vLLM would refuse to start
            start_s = self.spec.engine.sim_launch_s
            cmd = f"sim {self.spec.model}"
        else:
            if self.spec.rest_s and self.summary.launches:
                # llm-optimizer's --rest: let the GPUs settle between servers.
                if self.cancel.wait(self.spec.rest_s):
                    raise _Interrupted("signal")
            t_launch = time.monotonic()
            assert log_path is not None  # a real engine logs to the trial's folder
            server = launch(
                self.spec.engine, self.spec.framework, self.spec.model, trial.server_args, log_path, gpus=gpus, cancel=self.cancel, tag=self._tag(tid)
            )
            self._server = server
            start_s = time.monotonic() - t_launch
            cmd = server.cmd
            self.store.update_trial(self.study, tid, server_pid=server.pid)
        launches = (self._trial_launches(tid) or 0) + 1
        self.summary.launches += 1
        self.summary.gpu_seconds += start_s * trial.config.num_gpus
        self.store.update_trial(self.study, tid, cmd=cmd, log_path=str(log_path) if log_path else None, launches=launches, start_s=start_s, gpus=gpus)
        # A multi-GPU trial's engine may say at start that its GPUs cannot reach each other
        # peer-to-peer: the rest of the study is predicted for that machine.
        no_p2p = server is not None and trial.config.tp > 1 and log_lacks_gpu_p2p(server.log_path)
        # The engine's release sets its step costs and scheduler (vLLM schedules a step ahead
        # from 0.14): the first launch's GET /version answer prices the rest of the study. Asked
        # once per launch; the launch's record keeps the answer even where it names no release.
        reported = reported_version(server) if kind != "sim" else None
        version = reported if kind in ("vllm", "sglang") and self.spec.engine.version is None and names_release(reported) else None
        self.emit(
            "server_ready",
            trial_id=tid,
            start_s=start_s,
            base_url=server.base_url if server else None,
            pid=server.pid if server else None,
            simulated=kind == "sim",
            **({"gpu_p2p": False} if no_p2p else {}),
            **({"engine_version": version} if version else {}),
        )
        if no_p2p:
            self._adopt_no_gpu_p2p()
        if version:
            self._adopt_engine_version(version)
        self._record_host(tid, trial, server, reported)
        return server, cmd

    def _trial_launches(self, tid: int) -> int:
        for t in self.store.trials(self.study):
            if t.trial_id == tid:
                return t.launches
        return 0

    def _finish_trial(self, tid: int, trial: TrialPlan, launched: bool) -> None:
        pts = [p for p in self.store.points(self.study) if p.trial_id == tid]
        status = "ok" if any(p.status == "ok" for p in pts) or not pts else "failed"
        reason = None if status == "ok" else next((p.reason for p in pts if p.reason), None)
        self.store.update_trial(self.study, tid, status=status, reason=reason, ended_at=time.time() if launched else None, server_pid=None)
        if launched:
            self.emit("trial_done", trial_id=tid, status=status, points=len(pts))

    def _fail_trial(
        self, strategy: Strategy, trial: TrialPlan, tid: int, kind: str, detail: str, started: float, stored_point: str | None = None
    ) -> None:
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

    def _store_skipped(self, t: TrialPlan, reason: str) -> None:
        tid = self.store.upsert_trial(self.study, t.trial_key, t.server_args, status="skipped", reason=reason, predicted=t.predicted)
        self.emit("point_skipped", trial_id=tid, server_args=t.server_args, reason=reason, points=len(t.points))

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
