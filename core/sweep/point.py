"""One load point: measure it under supervision, then store it as a row, whatever happened.

The measurement runs on its own thread while the runner's thread supervises it: progress
events at ``PROGRESS_HZ``, a stop request or a signal honoured at once, and a server that dies
mid-point noticed within a tick (the load client is cancelled and the point stored as
crashed). A point is stored the moment it ends, in one transaction, before the next starts.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent import futures
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from core.errors import BadInput
from core.serve.engines import Server
from core.serve.process import CRASHED
from core.serve.telemetry import TelemetrySampler, format_gpu, gpu_live
from core.spec.study import PointRow
from core.sweep.control import _Interrupted
from core.sweep.measure import Measurement, PointContext
from core.sweep.space import PointPlan, TrialPlan
from core.sweep.summary import RunSummary

TOO_MANY_ERRORS = "too_many_errors"
PROGRESS_HZ = 4.0


def in_daemon_thread(fn: Callable[..., Any], *args: Any) -> futures.Future:
    """``fn(*args)`` on a daemon thread, its result or exception in the returned future.

    Not a ThreadPoolExecutor: its threads are joined at interpreter exit, so a runner stopped
    mid-point would wait out the measurement it dropped; a daemon thread is simply abandoned."""
    fut: futures.Future = futures.Future()

    def work() -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - every outcome goes back through the future
            fut.set_exception(e)

    threading.Thread(target=work, name="knee-measure", daemon=True).start()
    return fut


@dataclass
class _Supervised:
    """How a measurement ended, as its supervisor saw it."""

    future: futures.Future
    died: int | None  # the server's exit code, when it died during the point
    t0: float  # monotonic start
    latest: dict[str, Any] = field(default_factory=dict)  # the load client's last progress


class PointMeasure:
    """The load-point half of :class:`core.sweep.run.Runner` (a mixin)."""

    spec: Any
    slo: Any
    measurer: Any
    cancel: threading.Event
    summary: RunSummary
    _trial_gpus: list[int] | None
    _stop_requested: bool
    _interrupt_signal: int | None
    emit: Callable[..., None]
    # What it uses of the host and the sibling mixins (declared for the type checker only):
    # Runner's hooks (core/sweep/run.py; a --join worker overrides them) ...
    _point_begin: Callable[[int, PointPlan], None]
    _save_point: Callable[..., None]  # (row, records=None, keep_chunks=True)
    # ... and TrialLoop's row builder (core/sweep/trial_loop.py): (trial, tid, point, **fields).
    _row: Callable[..., PointRow]

    def _measure(self, trial: TrialPlan, tid: int, point: PointPlan, server: Server | None, cmd: str) -> PointRow:
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
        label = {"trial_id": tid, "point_id": point.point_id, "load": point.load.label, "client_args": point.client_args}
        self.emit("progress", phase="start", total=point.workload.num_prompts, **label)
        started = time.time()
        telemetry = TelemetrySampler(server.base_url, gpus=self._trial_gpus, api_key=server.api_key) if server else None
        with telemetry or nullcontext():
            run = self._supervise(ctx, server, label, telemetry)
        wall = time.monotonic() - run.t0  # the telemetry's teardown included, as the point's GPU time
        if run.died is None and server is not None and server.process is not None:
            # A server that died so early that every request failed before the first check.
            run.died = server.process.exit_code()
        base = dict(started_at=started, cmd=cmd)
        if run.died is not None:
            return self._crashed(trial, tid, point, server, run.died, wall, label, telemetry, base)
        e = run.future.exception()
        if e is not None:
            if isinstance(e, (KeyboardInterrupt, _Interrupted)):
                raise _Interrupted("SIGINT")
            if isinstance(e, BadInput):
                raise e
            row = self._row(trial, tid, point, status="failed", reason=f"error: {type(e).__name__}: {e}", ended_at=time.time(), **base)
            return self._store_failed(row, label)
        if self.cancel.is_set() and (self._interrupt_signal or self._stop_requested):
            raise _Interrupted("signal")
        return self._measured(trial, tid, point, run.future.result(), wall, run.latest, label, telemetry, base)

    def _supervise(self, ctx: PointContext, server: Server | None, label: dict[str, Any], telemetry: TelemetrySampler | None) -> _Supervised:
        """Run the measurement; meanwhile progress at PROGRESS_HZ, and a server death noticed
        within a tick."""
        latest: dict[str, Any] = {}
        period = 1.0 / PROGRESS_HZ
        t0 = time.monotonic()
        next_progress = t0 + period
        fut = in_daemon_thread(self.measurer.measure, ctx, latest.update)
        died: int | None = None
        while not fut.done():
            futures.wait([fut], timeout=max(0.0, next_progress - time.monotonic()))
            if self._stop_requested:
                raise _Interrupted("stop")  # as a signal: the point in flight is dropped
            if server is not None and server.process is not None and died is None:
                code = server.process.exit_code()
                if code is not None:
                    died = code
                    ctx.cancel.set()  # the load client stops sending
                    futures.wait([fut], timeout=min(10.0, self.spec.engine.request_timeout_s))
                    break
            now = time.monotonic()
            # Ticks on a deadline: with "time since the last tick >= period", a wait that
            # came back a hair early skipped a whole period (seen in CI: 2 Hz, not 4).
            if now >= next_progress:
                next_progress = max(next_progress + period, now + period / 2)  # no burst after a stall
                data = {**latest, **label, "phase": "run", "elapsed_s": now - t0}
                data.update(_server_fields(telemetry.latest if telemetry else {}))
                data.update(_gpu_fields(gpu_live(telemetry.latest_gpus) if telemetry else None))
                self.emit("progress", **data)
        return _Supervised(fut, died, t0, latest)

    def _crashed(
        self,
        trial: TrialPlan,
        tid: int,
        point: PointPlan,
        server: Server | None,
        died: int,
        wall: float,
        label: dict[str, Any],
        telemetry: TelemetrySampler | None,
        base: dict[str, Any],
    ) -> PointRow:
        why = (
            server.process.exit_reason(died, "during the load point")[1]
            if server and server.process
            else f"server exited with code {died} during the load point"
        )
        # The cancel was for this point only; the study goes on.
        if not self._interrupt_signal and not self._stop_requested:
            self.cancel.clear()
        row = self._row(
            trial,
            tid,
            point,
            status="failed",
            reason=f"{CRASHED}: {why}",
            ended_at=time.time(),
            gpu_seconds=wall * trial.config.num_gpus,
            telemetry=telemetry.summary() if telemetry else {},
            **base,
        )
        return self._store_failed(row, label)

    def _store_failed(self, row: PointRow, label: dict[str, Any]) -> PointRow:
        self._save_point(row)
        self.summary.points_failed += 1
        self.emit("point_done", status="failed", reason=row.reason, **label)
        return row

    def _measured(
        self,
        trial: TrialPlan,
        tid: int,
        point: PointPlan,
        m: Measurement,
        wall: float,
        latest: dict[str, Any],
        label: dict[str, Any],
        telemetry: TelemetrySampler | None,
        base: dict[str, Any],
    ) -> PointRow:
        from core.load.metrics import summarize

        # The point's last live numbers: what a viewer keeps showing until the next point. A
        # simulated point ends before the first 4 Hz tick, so this is its only progress event.
        gpu = m.gpu or (gpu_live(telemetry.latest_gpus) if telemetry else None)
        end = {**latest, **label, "phase": "end", "elapsed_s": wall, **_gpu_fields(gpu)}
        if telemetry and telemetry.latest:
            end.update(_server_fields(telemetry.latest))
        elif gpu and gpu.get("kv_usage") is not None:
            end["kv_cache_usage"] = gpu["kv_usage"]  # simulated: the peak, as in the GPU memory
        self.emit("progress", **end)
        summary: dict[str, Any] = summarize(m.records, m.duration_s, slo=self.slo)  # floats, then the extras (str, bool too)
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
            trial,
            tid,
            point,
            status=status,
            reason=reason,
            summary=summary,
            telemetry=telemetry.summary() if telemetry else {},
            simulated=m.simulated,
            ended_at=time.time(),
            gpu_seconds=duration * trial.config.num_gpus,
            meets_slo=meets,
            violations=self.slo.violations(summary) if status == "ok" else [],
            **base,
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
