"""The headless sweep display on stderr that `knee sweep` and `knee attach` share: one
line per event that matters, a live line for progress on a terminal."""

from __future__ import annotations

import sys
import time
from typing import Any

from core.spec.events import (
    Calibration,
    Continued,
    LeaseLost,
    LeaseTakenOver,
    Paused,
    PointDone,
    PointSkipped,
    Progress,
    ServerReady,
    StudyDone,
    StudyInterrupted,
    StudyStarted,
    TrialFailed,
    TrialStarted,
    WorkerDone,
    WorkerInterrupted,
    parse_event,
)


class ProgressPrinter:
    """The headless display: one line per event that matters, a live line for progress."""

    def __init__(self, stream=None, store=None, study: str | None = None):
        self.out = stream or sys.stderr
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.store = store
        self.study = study
        self.trials: dict[int, dict[str, Any]] = {}
        self.sim = False
        self._live = False
        self._last_line = 0.0
        self.show_workers = False  # following a study several workers share: say which ran what

    def _print(self, text: str) -> None:
        if self._live:
            self.out.write("\r\033[K")
            self._live = False
        self.out.write(text + "\n")
        self.out.flush()

    def handle(self, kind: str, d: dict[str, Any]) -> None:
        """Show one event as the runner emitted it (``kind``, its data): read through the typed
        models of :mod:`core.spec.events`, like the TUI."""
        ev = parse_event(kind, d)
        if isinstance(ev, StudyStarted):
            self.sim = bool(ev.simulated)
            tag = " [SIMULATED]" if self.sim else ""
            resumed = f", {ev.resumed_points} already stored" if ev.resumed_points else ""
            self._print(
                f"sweep {self.study or ''}: {ev.model} on {ev.engine}{tag}, {ev.strategy} search, {ev.planned_trials} configs / {ev.planned_points} load points{resumed}"
            )
        elif isinstance(ev, TrialStarted):
            args = _args_text(ev.server_args) or "(defaults)"
            gpus = f" gpus={','.join(map(str, ev.gpus))}" if ev.gpus else ""
            on = f" on {_worker_name(ev.worker)}" if self.show_workers and ev.worker else ""
            self._print(f"[trial {ev.trial_id}] {args}{gpus}{on}")
        elif isinstance(ev, ServerReady):
            how = "simulated launch" if ev.simulated else f"server ready in {ev.start_s or 0:.1f} s (pid {ev.pid})"
            if ev.engine_version:
                how += f", version {ev.engine_version} (predictions use its profile)"
            self._print(f"  {how}")
            if ev.gpu_p2p is False:
                self._print("  the engine reports no GPU peer-to-peer: all-reduces go through host memory; predictions now assume it")
        elif isinstance(ev, Progress):
            if ev.phase == "run":
                self._progress(ev)
        elif isinstance(ev, PointDone):
            if ev.status == "ok":
                slo = "meets SLOs" if ev.meets_slo else ("misses " + ", ".join(ev.violations) if ev.violations else "")
                e2e, ttft = ev.p99_e2el_ms, ev.mean_ttft_ms
                self._print(
                    f"  {ev.load or '':>10}  {ev.output_throughput or 0:9.1f} tok/s  {ev.request_throughput or 0:6.2f} req/s  "
                    f"TTFT {ttft / 1000 if ttft else float('nan'):6.2f} s  p99 E2E {e2e / 1000 if e2e else float('nan'):6.1f} s  {slo}"
                )
            else:
                self._print(f"  {ev.load or '':>10}  FAILED: {(ev.reason or '').splitlines()[0]}")
        elif isinstance(ev, Calibration):
            from core.sweep.calibration_learner import calibration_line

            self._print("  " + calibration_line(d))  # the stored data, as the TUI's log shows it
        elif isinstance(ev, Paused):
            server = ", its server stays up" if ev.server_up else ""
            study = f" --study {self.study}" if self.study else ""
            self._print(f"paused after {ev.points_run or 0} load points{server}; go on with: knee sweep --continue{study}")
        elif isinstance(ev, Continued):
            self._print(f"continued after {ev.paused_s or 0:.0f} s paused")
        elif isinstance(ev, PointSkipped):
            self._print(f"[skip] {_args_text(ev.server_args)}: {ev.reason}")
        elif isinstance(ev, TrialFailed):
            first, _, rest = (ev.reason or "").partition("\n")
            self._print(f"  FAILED: {first}")
            for ln in rest.splitlines()[-5:]:
                self._print(f"    | {ln}")
        elif isinstance(ev, LeaseTakenOver):
            rerun = f"; point {ev.rerun_point} runs again (re-run)" if ev.rerun_point else ""
            self._print(f"[trial {ev.trial_id}] taken over from {_worker_name(ev.from_worker)} (its lease expired){rerun}")
        elif isinstance(ev, LeaseLost):
            self._print(f"[trial {ev.trial_id}] lease lost{' by ' + _worker_name(ev.worker) if ev.worker else ''}: another worker took it over")
        elif isinstance(ev, (WorkerDone, WorkerInterrupted)) and self.show_workers:
            word = f"interrupted ({ev.signal})" if isinstance(ev, WorkerInterrupted) else "finished"
            self._print(f"worker {_worker_name(ev.worker)} {word}: {ev.points_run or 0} load points run")
        elif isinstance(ev, (StudyDone, StudyInterrupted)):
            word = f"interrupted ({ev.signal})" if isinstance(ev, StudyInterrupted) else "done"
            self._print(
                f"sweep {word}: {ev.points_run or 0} load points run, {ev.points_failed or 0} failed, "
                f"{ev.points_resumed or 0} resumed, {ev.launches or 0} server launches, "
                f"{ev.trials_skipped or 0} configs skipped, GPU time {(ev.gpu_seconds or 0) / 3600:.2f} h"
                + (" (simulated)" if self.sim else "")
                + f", wall {ev.wall_s or 0:.1f} s"
            )

    def _progress(self, ev: Progress) -> None:
        """The live line on a terminal; elsewhere, a line every 5 s at most."""
        line = f"  {ev.load or ''}: {ev.completed or 0}/{ev.total or '?'} done, {ev.running or 0} in flight, {ev.failed or 0} failed, {ev.output_tokens_per_s or 0:.0f} tok/s, {ev.elapsed_s or 0:.0f} s"
        if ev.server_running is not None:
            line += f" | server running {ev.server_running:.0f} waiting {ev.server_waiting or 0:.0f}"
        if ev.gpu_memory:
            line += f" | GPU {ev.gpu_memory}"
        if self.tty:
            self.out.write("\r\033[K" + line[:200])
            self.out.flush()
            self._live = True
        elif (now := time.monotonic()) - self._last_line >= 5.0:
            self._last_line = now
            self._print(line)


def _args_text(server_args: dict[str, Any] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (server_args or {}).items())


def _worker_name(worker_id: str | None) -> str:
    """host pid from a worker id (host:pid:nonce)."""
    host, _, rest = (worker_id or "?").partition(":")
    return f"{host} pid {rest.split(':')[0]}" if rest else host
