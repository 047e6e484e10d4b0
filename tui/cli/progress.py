"""The headless sweep display on stderr that `knee sweep` and `knee attach` share: one
line per event that matters, a live line for progress on a terminal."""

from __future__ import annotations

import sys
import time
from typing import Any


class ProgressPrinter:
    """The headless display: one line per event that matters, a live line for progress."""

    def __init__(self, stream=None, store=None, study: str | None = None):
        self.out = stream or sys.stderr
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.store = store
        self.study = study
        self.trials: dict[int, dict[str, Any]] = {}
        self.n_trials = 0
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
        if kind == "study_started":
            self.sim = bool(d.get("simulated"))
            self.n_trials = d.get("planned_trials", 0)
            tag = " [SIMULATED]" if self.sim else ""
            resumed = f", {d['resumed_points']} already stored" if d.get("resumed_points") else ""
            self._print(
                f"sweep {self.study or ''}: {d.get('model')} on {d.get('engine')}{tag}, {d.get('strategy')} search, {d.get('planned_trials')} configs / {d.get('planned_points')} load points{resumed}"
            )
        elif kind == "trial_started":
            args = " ".join(f"{k}={v}" for k, v in (d.get("server_args") or {}).items()) or "(defaults)"
            gpus = f" gpus={','.join(map(str, d['gpus']))}" if d.get("gpus") else ""
            on = f" on {_worker_name(d['worker'])}" if self.show_workers and d.get("worker") else ""
            self._print(f"[trial {d.get('trial_id')}] {args}{gpus}{on}")
        elif kind == "server_ready":
            how = "simulated launch" if d.get("simulated") else f"server ready in {d.get('start_s', 0):.1f} s (pid {d.get('pid')})"
            self._print(f"  {how}")
        elif kind == "progress":
            if d.get("phase") != "run":
                return
            now = time.monotonic()
            line = f"  {d.get('load', '')}: {d.get('completed', 0)}/{d.get('total') or '?'} done, {d.get('running', 0)} in flight, {d.get('failed', 0)} failed, {d.get('output_tokens_per_s') or 0:.0f} tok/s, {d.get('elapsed_s', 0):.0f} s"
            if d.get("server_running") is not None:
                line += f" | server running {d['server_running']:.0f} waiting {d.get('server_waiting') or 0:.0f}"
            if d.get("gpu_memory"):
                line += f" | GPU {d['gpu_memory']}"
            if self.tty:
                self.out.write("\r\033[K" + line[:200])
                self.out.flush()
                self._live = True
            elif now - self._last_line >= 5.0:
                self._last_line = now
                self._print(line)
        elif kind == "point_done":
            if d.get("status") == "ok":
                slo = "meets SLOs" if d.get("meets_slo") else ("misses " + ", ".join(d.get("violations") or []) if d.get("violations") else "")
                e2e = d.get("p99_e2el_ms")
                ttft = d.get("mean_ttft_ms")
                self._print(
                    f"  {d.get('load', ''):>10}  {d.get('output_throughput') or 0:9.1f} tok/s  {d.get('request_throughput') or 0:6.2f} req/s  "
                    f"TTFT {ttft / 1000 if ttft else float('nan'):6.2f} s  p99 E2E {e2e / 1000 if e2e else float('nan'):6.1f} s  {slo}"
                )
            else:
                self._print(f"  {d.get('load', ''):>10}  FAILED: {(d.get('reason') or '').splitlines()[0]}")
        elif kind == "calibration":
            from core.sweep.calibration import calibration_line

            self._print("  " + calibration_line(d))
        elif kind == "paused":
            server = ", its server stays up" if d.get("server_up") else ""
            study = f" --study {self.study}" if self.study else ""
            self._print(f"paused after {d.get('points_run', 0)} load points{server}; go on with: knee sweep --continue{study}")
        elif kind == "continued":
            self._print(f"continued after {d.get('paused_s', 0):.0f} s paused")
        elif kind == "point_skipped":
            args = " ".join(f"{k}={v}" for k, v in (d.get("server_args") or {}).items())
            self._print(f"[skip] {args}: {d.get('reason')}")
        elif kind == "trial_failed":
            reason = d.get("reason") or ""
            first, _, rest = reason.partition("\n")
            self._print(f"  FAILED: {first}")
            for ln in rest.splitlines()[-5:]:
                self._print(f"    | {ln}")
        elif kind == "lease_taken_over":
            rerun = f"; point {d['rerun_point']} runs again (re-run)" if d.get("rerun_point") else ""
            self._print(f"[trial {d.get('trial_id')}] taken over from {_worker_name(d.get('from_worker'))} (its lease expired){rerun}")
        elif kind == "lease_lost":
            self._print(
                f"[trial {d.get('trial_id')}] lease lost{' by ' + _worker_name(d['worker']) if d.get('worker') else ''}: another worker took it over"
            )
        elif kind in ("worker_done", "worker_interrupted") and self.show_workers:
            word = "finished" if kind == "worker_done" else f"interrupted ({d.get('signal')})"
            self._print(f"worker {_worker_name(d.get('worker'))} {word}: {d.get('points_run', 0)} load points run")
        elif kind in ("study_done", "study_interrupted"):
            word = "done" if kind == "study_done" else f"interrupted ({d.get('signal')})"
            self._print(
                f"sweep {word}: {d.get('points_run', 0)} load points run, {d.get('points_failed', 0)} failed, "
                f"{d.get('points_resumed', 0)} resumed, {d.get('launches', 0)} server launches, "
                f"{d.get('trials_skipped', 0)} configs skipped, GPU time {d.get('gpu_seconds', 0) / 3600:.2f} h"
                + (" (simulated)" if self.sim else "")
                + f", wall {d.get('wall_s', 0):.1f} s"
            )


def _worker_name(worker_id: str | None) -> str:
    """host pid from a worker id (host:pid:nonce)."""
    host, _, rest = (worker_id or "?").partition(":")
    return f"{host} pid {rest.split(':')[0]}" if rest else host
