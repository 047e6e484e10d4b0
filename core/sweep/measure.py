"""Measuring one load point: the pluggable step between a server and a stored summary.

- :class:`HttpMeasurer` drives a real server with the load client (``core.load``).
- :class:`SimMeasurer` calls the simulator directly in virtual time (no HTTP, no sleeping),
  which is why a 27-point sweep on the ``sim`` engine finishes in seconds.

Both return a :class:`Measurement`; the runner summarizes, checks the SLOs and stores it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from core.spec.records import RequestRecord
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.workload import Workload

ProgressFn = Callable[[dict[str, Any]], None]


@dataclass
class Measurement:
    records: list[RequestRecord]
    duration_s: float
    simulated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    gpu: dict[str, Any] | None = None  # GPU memory for the live panel (core.serve.telemetry.gpu_live's keys)


@dataclass
class PointContext:
    """What a measurer gets for one point."""

    model: str
    config: ServerConfig
    workload: Workload
    load: LoadPoint
    base_url: str | None = None
    api_key: str | None = None
    api: str = "completions"
    request_timeout_s: float = 600.0
    tokenizer: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    early_stop: bool = False  # end the point once its metrics converge (core.sweep.converge)


class Measurer(Protocol):
    simulated: bool

    def measure(self, ctx: PointContext, on_progress: ProgressFn) -> Measurement: ...


class SimMeasurer:
    """The ``sim`` engine: ``core.simulate.simulate`` on the plan's hardware."""

    simulated = True

    def __init__(self, arch, hardware, engine_version: str | None = None):
        self.arch = arch
        self.hardware = hardware
        self.engine_version = engine_version  # the vLLM release played (None: the current one)

    def check(self, config: ServerConfig) -> None:
        """What a launch would find: raises ``ServerFailed`` where vLLM would not start."""
        from core.serve.process import OOM, ServerFailed
        from core.simulate.sim import InfeasibleConfig, check_config

        if config.num_gpus > self.hardware.num_gpus:
            raise ServerFailed(
                "infeasible", f"needs {config.num_gpus} GPUs (TP{config.tp} x DP{config.dp}), {self.hardware.label} has {self.hardware.num_gpus}"
            )
        try:
            check_config(self.arch, self.hardware, config)
        except InfeasibleConfig as e:
            raise ServerFailed(OOM if "memory" in e.kind else "infeasible", e.reason) from None

    def measure(self, ctx: PointContext, on_progress: ProgressFn) -> Measurement:
        from core.simulate.sim import simulate

        res = simulate(self.arch, self.hardware, ctx.config, ctx.workload, ctx.load, seed=ctx.workload.seed, engine_version=self.engine_version)
        records = list(res.records)
        duration = float(res.duration_s)
        ok = sum(1 for r in records if r.ok)
        on_progress({"completed": ok, "failed": len(records) - ok, "running": 0, "total": len(records), "elapsed_s": duration})
        extra = {
            "sim_preemptions": getattr(res, "preemptions", None),
            "sim_peak_kv_usage": getattr(res, "peak_kv_usage", None),
            "sim_busy_fraction": getattr(res, "busy_fraction", None),
        }
        return Measurement(
            records=records,
            duration_s=duration,
            simulated=True,
            extra={k: v for k, v in extra.items() if v is not None},
            gpu=sim_gpu_memory(getattr(res, "memory", None), ctx.config.num_gpus, getattr(res, "peak_kv_usage", None)),
        )


def sim_gpu_memory(memory, num_gpus: int, kv_usage: float | None) -> dict[str, Any] | None:
    """Simulated GPU memory of a trial at the point's peak KV use, summed over its GPUs.

    ``memory`` is the simulator's per-GPU plan (``core.estimate.memory.MemoryPlan``): what
    vLLM holds outside the KV cache (weights, activation peak, runtime) plus the part of the
    KV cache in use, out of each GPU's usable memory. A real vLLM allocates its whole KV
    cache at start, so NVML would show more; this shows how full the cache got.
    """
    from core.serve.telemetry import GIB

    if memory is None or not getattr(memory, "visible_bytes", 0):
        return None
    usage = min(max(float(kv_usage or 0.0), 0.0), 1.0)
    fixed = memory.weight_bytes + memory.activation_bytes + memory.runtime_bytes
    used = fixed + max(memory.kv_bytes, 0.0) * usage
    return {
        "used_gib": used * num_gpus / GIB,
        "total_gib": memory.visible_bytes * num_gpus / GIB,
        "kv_usage": usage,
        "gpus": num_gpus,
        "simulated": True,
    }


class HttpMeasurer:
    """Real servers: the load client of ``core.load`` over HTTP on 127.0.0.1."""

    simulated = False

    def __init__(self, tokenizer: str | None = None):
        self.tokenizer_ref = tokenizer
        self._tok = None
        self._prompts: dict[str, list] = {}

    def _tokenizer(self, ref: str):
        # One tokenizer per reference; "words" is the load client's word-count fallback,
        # for servers whose tokens do not matter (fakes, smoke tests) — it skips loading
        # transformers entirely.
        cache = self.__dict__.setdefault("_toks", {})
        if ref not in cache:
            from core.load.datasets import load_tokenizer, word_tokenizer

            cache[ref] = word_tokenizer("tokenizer=words: counting words instead of tokens") if ref == "words" else load_tokenizer(ref)
        return cache[ref]

    def prepare(self, ctx: PointContext):
        """Tokenizer and prompts, before the point's clock starts (loading transformers can
        take seconds that are no part of the measurement)."""
        from core.load.datasets import make_prompts

        tok = self._tokenizer(ctx.tokenizer or self.tokenizer_ref or ctx.model)
        key = ctx.workload.model_dump_json() + "|" + (ctx.tokenizer or "")
        if key not in self._prompts:
            self._prompts[key] = make_prompts(ctx.workload, tok)
        return tok, self._prompts[key]

    def measure(self, ctx: PointContext, on_progress: ProgressFn) -> Measurement:
        from core.load.openai import OpenAITarget
        from core.load.runner import run_load_sync

        tok, prompts = self.prepare(ctx)
        assert ctx.base_url is not None, "an HTTP measurement needs the running server's base_url"
        from core.sweep.converge import NOT_SENT, Convergence, EarlyStopTarget

        inner = OpenAITarget(
            ctx.base_url, ctx.model, api=ctx.api, api_key=ctx.api_key, timeout_s=ctx.request_timeout_s, ignore_eos=ctx.workload.ignore_eos
        )
        conv = Convergence(ctx.load.concurrency) if ctx.early_stop else None
        target = EarlyStopTarget(inner, conv, ctx.cancel)

        def progress(p) -> None:
            on_progress(
                {
                    "running": p.running,
                    "completed": p.completed,
                    "failed": p.failed,
                    "total": p.total,
                    "client_elapsed_s": p.elapsed_s,
                    "output_tokens": p.output_tokens,
                    "output_tokens_per_s": p.output_tokens_per_s,
                    "warmup": p.warmup,
                }
            )

        res = run_load_sync(
            target, prompts, ctx.load, warmup=ctx.workload.warmup, on_progress=progress, tokenizer=tok if tok.exact else None, seed=ctx.workload.seed
        )
        records = [r for r in res.records if not (r.error and NOT_SENT in r.error)]
        duration = float(res.duration_s)
        extra: dict[str, Any] = {}
        if target.stopped:
            # The point ended early: its duration is up to the last real request's end.
            ends = [r.end_time for r in records if r.end_time is not None]
            duration = max(ends) if ends else duration
            extra.update(early_stopped=True, requests_not_sent=target.not_sent)
        try:
            h = res.health.as_dict()
            extra.update({f"client_{k}": v for k, v in h.items() if isinstance(v, (int, float))})
            if h.get("warning"):
                extra["client_warning"] = h["warning"]
        except Exception:
            pass
        if res.notes:
            extra["notes"] = "; ".join(res.notes)
        return Measurement(records=records, duration_s=duration, simulated=False, extra=extra)


def _span(records: list[RequestRecord]) -> float:
    ends = [r.end_time for r in records if r.end_time is not None]
    starts = [r.send_time for r in records]
    return (max(ends) - min(starts)) if ends and starts else 0.0
