"""The whole estimate for a plan: memory per TP, predictions, limits, bottlenecks, suggestion.

``estimate(plan_or_args...) -> EstimateReport`` is what ``knee estimate``, the TUI's
Estimate screen and the sweep's adaptive strategy call. Explicit keyword arguments override
the plan's fields; with neither, the demo plan's values apply. ``EstimateReport.as_dict()``
is the ``--json`` form. UI-free: nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.errors import BadInput
from core.estimate.bands import kind_of, unseen_check
from core.estimate.costmodel import STREAMING
from core.estimate.fit_advice import fit_advice, valid_tp
from core.estimate.params import engine_profile
from core.estimate.limits import Limits, compute_limits
from core.estimate.memory import MemoryPlan
from core.estimate.predict import Prediction, Predictor
from core.estimate.track_record import TrackRecord
from core.estimate.track_record import lookup as track_record_of
from core.estimate.suggest import Suggestion, batched_tokens_values, concurrency_values, render, seqs_values
from core.spec.engine_defaults import checked_release
from core.spec.hardware import Hardware
from core.spec.model import ModelArch
from core.estimate.requests import plan_workload
from core.spec.plan import Plan
from core.spec.serving import ServerConfig
from core.spec.slo import SLO, parse_constraints
from core.spec.workload import Workload

DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Engines a plan may name that knee predicts as a vLLM server (the simulator plays vLLM).
_AS_VLLM = {"sim", "custom", "external", "sagemaker", "vllm"}


@dataclass(frozen=True)
class ConfigEstimate:
    config: ServerConfig
    memory: MemoryPlan
    predictions: list[Prediction]
    limits: Limits
    at_knee: Prediction  # at the SLO-limited concurrency, else at saturation
    price_per_hour: float | None = None

    @property
    def label(self) -> str:
        return f"TP{self.config.tp} x DP{self.config.dp}"

    @property
    def cost_per_1m_output_tokens(self) -> float | None:
        if not self.price_per_hour or self.at_knee.output_tok_per_s <= 0:
            return None
        return self.price_per_hour / (self.at_knee.output_tok_per_s * 3600) * 1e6

    def as_dict(self) -> dict[str, object]:
        c = self.config
        cost = self.cost_per_1m_output_tokens
        return {
            "tp": c.tp,
            "dp": c.dp,
            "max_num_batched_tokens": c.max_num_batched_tokens,
            "max_num_seqs": c.max_num_seqs,
            "max_model_len": c.max_model_len,
            "gpu_memory_utilization": c.gpu_memory_utilization,
            "memory": self.memory.as_dict(),
            "limits": self.limits.as_dict(),
            "at_knee": self.at_knee.as_dict(),
            "cost_per_1m_output_tokens": round(cost, 4) if cost is not None else None,
            "predictions": [p.as_dict() for p in self.predictions],
        }


@dataclass(frozen=True)
class EstimateReport:
    model: dict[str, object]
    hardware: str
    gpu: str
    num_gpus: int
    instance: str | None
    price_per_hour: float | None
    workload: dict[str, object]
    engine: str
    engine_version: str | None
    constraints: str
    concurrency: list[int]
    memory: list[MemoryPlan]  # one per TP degree considered, fitting or not
    configs: list[ConfigEstimate]  # fitting configurations, best first
    suggestion: Suggestion | None
    notes: list[str] = field(default_factory=list)
    # When no TP degree fits: the nearest miss and what would fit (core/estimate/fit_advice.py).
    nothing_fits: str | None = None
    # The held-out error on published runs most like this one (core/estimate/track_record.py).
    track_record: TrackRecord | None = None

    @property
    def best(self) -> ConfigEstimate | None:
        return self.configs[0] if self.configs else None

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "hardware": {
                "label": self.hardware,
                "gpu": self.gpu,
                "num_gpus": self.num_gpus,
                "instance": self.instance,
                "price_per_hour": self.price_per_hour,
            },
            "workload": self.workload,
            "engine": {"name": self.engine, "version": self.engine_version},
            "constraints": self.constraints,
            "concurrency": self.concurrency,
            "memory": [m.as_dict() for m in self.memory],
            "configs": [c.as_dict() for c in self.configs],
            "best": self.best.label if self.best else None,
            "suggestion": self.suggestion.as_dict() if self.suggestion else None,
            "track_record": self.track_record.as_dict() if self.track_record else None,
            "bands_on_unseen_runs": unseen_check(self.best.at_knee.kind, self.best.at_knee.engine) if self.best else unseen_check(),
            "nothing_fits": self.nothing_fits,
            "notes": self.notes,
        }


def _unversioned(engine: str) -> str:
    """What an estimate without --engine-version assumes, said where it matters (vLLM)."""
    return " (the current release, which schedules a step ahead; --engine-version for an older one)" if engine in ("vllm", "sim") else ""


def _tp_candidates(arch: ModelArch, num_gpus: int) -> list[int]:
    out, t = [], 1
    while t <= num_gpus:
        if num_gpus % t == 0 and valid_tp(arch, t) is None:
            out.append(t)
        t *= 2
    return out


def estimate(
    plan: Plan | None = None,
    *,
    model: str | None = None,
    arch: ModelArch | None = None,
    hardware: Hardware | None = None,
    gpu: str | None = None,
    num_gpus: int | None = None,
    instance: str | None = None,
    gpu_p2p: bool | None = None,
    tp: int | list[int] | None = None,
    precision: str | None = None,
    kv_cache_dtype: str | None = None,
    input_len: float | None = None,
    output_len: float | None = None,
    range_ratio: float | None = None,
    dataset: str | None = None,
    workload: Workload | None = None,
    lengths_from: str | None = None,
    concurrency: list[int] | None = None,
    constraints: str | SLO | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    engine: str | None = None,
    engine_version: str | None = None,
    stream_interval: int | None = None,
    ignore_eos: bool | None = None,
) -> EstimateReport:
    """Estimate every TP x DP configuration of a plan (or of the arguments); ``gpu_p2p``
    False: the GPUs cannot reach each other peer-to-peer (the plan's setting when None);
    ``stream_interval``: tokens per streamed message (the engine's ``--stream-interval``);
    ``ignore_eos`` False: the client lets the model stop, so ShareGPT answers end at EOS (None:
    the plan's setting); ``lengths_from``: a file of served requests' token counts
    (:mod:`core.spec.length_log`) whose lengths replace every other length setting."""
    from core.catalog import load_model, resolve_hardware

    # The plan's goals and hardware apply when a plan is given, or when nothing is (the demo
    # plan); arguments alone carry no constraints and need hardware of their own.
    from_plan = plan is not None or not (model or arch)
    plan = plan or Plan(model=model or (arch.name if arch else "Qwen/Qwen3-4B"))
    if not from_plan:
        plan = plan.model_copy(update={"constraints": "", "instance": None, "engine": "vllm"})
    model = model or plan.model
    precision = precision if precision is not None else plan.precision
    kv_dtype = kv_cache_dtype or plan.kv_cache_dtype or "auto"
    if input_len is not None and input_len <= 0:
        raise BadInput(f"--input-len must be positive, got {input_len:g}")
    if output_len is not None and output_len <= 0:
        raise BadInput(f"--output-len must be positive, got {output_len:g}")
    if not 0 < gpu_memory_utilization <= 1:
        raise BadInput(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization:g}")
    for name, v in (("--max-num-batched-tokens", max_num_batched_tokens), ("--max-num-seqs", max_num_seqs), ("--max-model-len", max_model_len)):
        if v is not None and v < 1:
            raise BadInput(f"{name} must be at least 1, got {v}")
    if arch is None:
        arch = load_model(model, precision=precision)
    if hardware is None:
        p2p = plan.gpu_p2p if gpu_p2p is None else gpu_p2p
        if gpu or instance:
            hardware = resolve_hardware(gpu=gpu, num_gpus=num_gpus, instance=instance, gpu_p2p=p2p)
        elif num_gpus is not None and plan.gpu:
            hardware = resolve_hardware(gpu=plan.gpu, num_gpus=num_gpus, gpu_p2p=p2p)
        else:
            hardware = resolve_hardware(gpu=plan.gpu, num_gpus=plan.num_gpus, instance=plan.instance, gpu_p2p=p2p)
    workload, log = plan_workload(plan, workload, input_len, output_len, range_ratio, dataset, ignore_eos, lengths_from)
    slo = constraints if isinstance(constraints, SLO) else parse_constraints(constraints if constraints is not None else plan.constraints)
    try:  # the plan's field is checked when the plan is made; the flag the same way here
        engine_version = checked_release(engine_version) or plan.engine_version
    except ValueError as e:
        raise BadInput(f"--engine-version {e}, got {engine_version!r}") from None
    eng = (engine or plan.engine or "vllm").lower()
    eng = "vllm" if eng in _AS_VLLM else eng
    engine_profile(eng, engine_version)  # unknown engine -> BadInput before any work
    concurrency = sorted(set(concurrency or DEFAULT_CONCURRENCY))
    if any(c < 1 for c in concurrency):
        raise BadInput("--concurrency must list positive integers")

    need = workload.max_total_len
    if max_model_len is not None and need > max_model_len:
        raise BadInput(f"requests of up to {need} tokens exceed --max-model-len {max_model_len}", "raise it or shorten the workload")
    if need > arch.max_position_embeddings:
        raise BadInput(
            f"requests of up to {need} tokens exceed {arch.name}'s context of {arch.max_position_embeddings} tokens",
            "shorten --input-len/--output-len",
        )
    predictor_args: dict[str, Any] = {
        "kv_dtype": kv_dtype,
        "engine": eng,
        "engine_version": engine_version,
        "gpu_memory_utilization": gpu_memory_utilization,
        "max_model_len": max_model_len,
    }
    p = Predictor(arch, hardware.gpu, workload, **predictor_args)
    n = hardware.num_gpus
    if tp is None:
        tps = _tp_candidates(arch, n)
    else:
        tps = [tp] if isinstance(tp, int) else sorted(set(tp))
        for t in tps:
            if t < 1 or t > n:
                raise BadInput(f"TP{t} needs {t} GPUs but {hardware.label} has {n}")
            why = valid_tp(arch, t)
            if why:
                raise BadInput(f"TP{t} is not possible for {arch.name}: {why}")
    knobs: dict[str, Any] = {}
    if max_num_batched_tokens:
        knobs["max_num_batched_tokens"] = max_num_batched_tokens
    if max_num_seqs:
        knobs["max_num_seqs"] = max_num_seqs
    if stream_interval is not None:
        if stream_interval < 1:
            raise BadInput(f"--stream-interval must be at least 1, got {stream_interval}", "tokens per streamed message; 1 streams every token")
        knobs["extra_args"] = {"stream_interval": stream_interval}

    memory: list[MemoryPlan] = []
    configs: list[ConfigEstimate] = []
    price = hardware.instance.price_per_hour if hardware.instance else None
    for t in tps:
        cfg = p.config(t, max(1, n // t), **knobs)
        mem = p.memory(cfg)
        memory.append(mem)
        if not mem.fits:
            continue
        preds = p.curve(cfg, concurrency)
        lim = compute_limits(p, cfg, slo)
        knee_c = lim.slo_concurrency if lim.slo_concurrency is not None and slo.constraints else lim.saturation
        knee_c = max(1, min(knee_c, 4 * lim.running_cap))
        configs.append(ConfigEstimate(cfg, mem, preds, lim, p.predict(cfg, concurrency=knee_c), price))

    # Best first: configurations meeting the SLOs, by throughput at their knee.
    configs.sort(key=lambda ce: (not ce.limits.slo_feasible, -ce.at_knee.req_per_s))
    notes = [
        "percentiles are approximations from an analytic model: a steady state, or lock-step waves when lengths are fixed (see core/estimate/predict.py)",
        f"engine profile: {eng}{' ' + engine_version if engine_version else _unversioned(eng)}; max_model_len {p.max_model_len}",
    ]
    if arch.is_mla and eng == "vllm":
        # A known gap, said rather than folded into the numbers: no physical term explains it yet.
        notes.append(
            "published vLLM runs of latent-attention models (DeepSeek-R1/V3.2 on 8x H200, vLLM 0.7-0.13) measured "
            "1.5-2.5x less throughput than this estimate (bench/data/published.jsonl gpustack, dstackr1); size from the band's low edge"
        )
    if not hardware.gpu.p2p and hardware.num_gpus > 1:
        where = "a host path the instance's GPUs share (2/TP of it each)" if hardware.gpu.host_link_shared else "each GPU's own PCIe slot"
        notes.append(f"no GPU peer-to-peer: tensor-parallel all-reduces go through host memory, over {where}")
    nothing_fits = None
    if not configs and memory:

        def plan_for(a: ModelArch, t: int) -> MemoryPlan:
            q = p if a is arch else Predictor(a, hardware.gpu, workload, **predictor_args)
            return q.memory(q.config(t, 1, **knobs))

        advice = fit_advice(arch, hardware.gpu.name, memory, plan_for)
        nothing_fits = advice.line(arch.name, hardware.gpu.name, n)
    suggestion = None
    if configs:
        suggestion = _suggest(
            p, configs, slo, model, hardware, workload, range_ratio if range_ratio is not None else plan.range_ratio, knobs, log.path if log else None
        )
        notes.extend(suggestion.why)
    return EstimateReport(
        model={
            **arch.summary(),
            "params_total_b": round(arch.params_total / 1e9, 3),
            "params_active_b": round(arch.params_active / 1e9, 3),
            "weights_gb": round(arch.weight_bytes / 1e9, 2),
        },
        hardware=hardware.label,
        gpu=hardware.gpu.name,
        num_gpus=n,
        instance=hardware.instance.name if hardware.instance else None,
        price_per_hour=price,
        workload={
            "input_len": p.input_len,
            "output_len": p.output_len,
            "range_ratio": range_ratio if range_ratio is not None else plan.range_ratio,
            "num_prompts": workload.num_prompts,
            "dataset": workload.dataset,
            "ignore_eos": workload.ignore_eos,
            "lengths_from": {"path": log.path, "requests": log.requests, "cached_tokens": round(log.cached, 1)} if log else None,
        },
        engine=eng,
        engine_version=engine_version,
        constraints=str(slo),
        concurrency=concurrency,
        memory=memory,
        configs=configs,
        suggestion=suggestion,
        notes=notes,
        nothing_fits=nothing_fits,
        track_record=track_record_of(hardware.gpu.name, eng, kind_of(arch.is_moe)),
    )


def _suggest(
    p: Predictor,
    configs: list[ConfigEstimate],
    slo: SLO,
    model: str,
    hw: Hardware,
    wl: Workload,
    range_ratio: float,
    knobs: dict,
    lengths_from: str | None = None,
) -> Suggestion:
    feasible = [c for c in configs if c.limits.slo_feasible] or configs
    best = feasible[0]
    # Keep the pairs within reach of the best (a sweep need not measure hopeless ones).
    pairs = [(c.config.tp, c.config.dp) for c in feasible if c.at_knee.req_per_s >= 0.5 * best.at_knee.req_per_s][:4]
    knee = best.at_knee.concurrency or best.limits.saturation
    chunked = p.chunked(best.config)
    budgets = (
        [knobs["max_num_batched_tokens"]]
        if "max_num_batched_tokens" in knobs
        else batched_tokens_values(p.default_budget(chunked), p.input_len, chunked)
    )
    cap, _ = p.running_cap(best.config)
    seqs = [knobs["max_num_seqs"]] if "max_num_seqs" in knobs else seqs_values(best.at_knee.running, max(cap, 8))
    levels = concurrency_values(int(knee))
    why = [
        f"best predicted: {best.label} at concurrency {knee} "
        f"({best.at_knee.req_per_s:.2f} req/s, {best.at_knee.output_tok_per_s:.0f} output tok/s"
        + (", meets the SLOs)" if slo.constraints and best.limits.slo_feasible else ")"),
    ]
    if slo.constraints and not best.limits.slo_feasible:
        why.append("no configuration is predicted to meet every constraint; the suggestion brackets saturation instead")
    intervals = None
    if best.at_knee.decode_bottleneck == STREAMING and best.config.engine_arg("stream_interval") is None:
        intervals = [1, 4, 8]
        why.append(
            "at the knee the API server's token streaming paces the decode steps: measure stream_interval "
            "(tokens per streamed message) 4 and 8 beside 1; ITL per token stays, clients get tokens in bursts"
        )
    flags = f"--instance {hw.instance.name}" if hw.instance else f"--gpu {hw.gpu.name} --num-gpus {hw.num_gpus}"
    return render(
        model=model,
        hardware_flags=flags,
        num_gpus=hw.num_gpus,
        tp_dp=pairs,
        budgets=budgets,
        seqs=seqs,
        concurrency=levels,
        input_len=int(round(p.input_len)),
        output_len=int(round(p.output_len)),
        range_ratio=range_ratio,
        constraints=str(slo),
        why=why,
        dataset=wl.dataset,
        stream_intervals=intervals,
        ignore_eos=wl.ignore_eos,
        lengths_from=lengths_from,
    )
