"""The catalog-wide recommendation (see the package docstring).

A layout is TP × copies on one instance: ``copies = GPUs // TP`` replicas of the model (as
inference components, or data parallel in one server), each on TP GPUs. Its capacity is the
request rate the whole instance sustains at the highest concurrency that still meets the
SLOs (the estimate's knee), with a low and a high from the error bands; the instance count
for a target rate is sized on the low edge, so an optimistic estimate does not
under-provision the endpoint.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from dataclasses import dataclass, field
from typing import Literal

from core.errors import BadInput
from core.spec.model import ModelArch

Goal = Literal["cost", "throughput", "latency"]


@dataclass(frozen=True)
class RecommendRequest:
    model: str
    input_len: float = 1024
    output_len: float = 512
    constraints: str = ""
    goal: Goal = "cost"
    target_rps: float | None = None
    instances: str = "all"  # all | comma list | glob such as ml.g6*
    allow_quantization: bool = False
    engine: str = "vllm"
    region: str | None = None  # prices of this region (None: the bundled us-east-1 ones)
    # The requests' shape (core.spec.lengths.request_lengths): fixed or uniform lengths about
    # input_len / output_len, or ShareGPT's bundled shape about them; ignore_eos False lets
    # the model stop (ShareGPT answers end at EOS).
    dataset: Literal["random", "sharegpt"] = "random"
    range_ratio: float = 0.0
    ignore_eos: bool = True
    # A file of served requests' token counts (core.spec.length_log): their lengths replace
    # the shape above; recommend() puts the file's means in input_len / output_len.
    lengths_from: str | None = None

    def workload(self, num_prompts: int = 1000):
        """The :class:`Workload` ranked and measured; a lengths file's as it reads
        (:meth:`core.spec.length_log.LengthLog.workload`: its answers held to their lengths,
        its cached prompt tokens a shared prefix)."""
        from core.spec.workload import Workload

        if self.lengths_from:
            from core.spec.length_log import read_lengths

            return read_lengths(self.lengths_from).workload(num_prompts)
        inp, out = self.lengths()
        return Workload(input=inp, output=out, dataset=self.dataset, ignore_eos=self.ignore_eos, num_prompts=num_prompts)

    def lengths(self):
        """(prompt, output) :class:`LengthDist` of the requests, where no lengths file is given."""
        from core.spec.lengths import request_lengths

        for name, v in (("--input-len", self.input_len), ("--output-len", self.output_len)):
            if not v > 0:
                raise BadInput(f"{name} must be positive, got {v:g}")
        if not 0.0 <= self.range_ratio <= 1.0:
            raise BadInput(f"--range-ratio must be in [0, 1], got {self.range_ratio:g}")
        return request_lengths(self.dataset, self.input_len, self.output_len, self.range_ratio, self.ignore_eos)

    @property
    def workload_label(self) -> str:
        """The requests in words, for a report's first line."""
        from core.spec.lengths import describe

        return describe(self.dataset, self.input_len, self.output_len, self.range_ratio, self.ignore_eos, source=self.lengths_from)


@dataclass(frozen=True)
class Candidate:
    instance: str
    gpu: str
    num_gpus: int
    tp: int
    copies: int
    precision: str
    kv_cache_dtype: str
    capacity_rps: float  # whole instance, at the SLO knee
    capacity_rps_low: float
    capacity_rps_high: float
    output_tok_per_s: float
    concurrency: int  # per instance, at the knee
    ttft_ms: float
    e2e_s: float
    instances_needed: int | None
    usd_per_hour: float | None  # one instance
    usd_per_hour_total: float | None  # all instances needed (one without a target)
    usd_per_1m_output_tokens: float | None  # at the knee's throughput (pessimistic edge)
    bottleneck: str
    knobs: dict[str, object]
    price_note: str | None = None

    def as_dict(self) -> dict[str, object]:
        r = lambda v, d=4: None if v is None else round(v, d)  # noqa: E731
        return {
            "instance": self.instance,
            "gpu": self.gpu,
            "num_gpus": self.num_gpus,
            "layout": {"tp": self.tp, "copies": self.copies},
            "precision": self.precision,
            "kv_cache_dtype": self.kv_cache_dtype,
            "capacity_rps": {"value": r(self.capacity_rps), "low": r(self.capacity_rps_low), "high": r(self.capacity_rps_high)},
            "output_tok_per_s": r(self.output_tok_per_s, 1),
            "concurrency_at_knee": self.concurrency,
            "ttft_ms": r(self.ttft_ms, 1),
            "e2e_s": r(self.e2e_s, 3),
            "instances_needed": self.instances_needed,
            "usd_per_hour": r(self.usd_per_hour),
            "usd_per_hour_total": r(self.usd_per_hour_total),
            "usd_per_1m_output_tokens": r(self.usd_per_1m_output_tokens),
            "bottleneck": self.bottleneck,
            "knobs": self.knobs,
            "price_note": self.price_note,
        }


@dataclass(frozen=True)
class Excluded:
    instance: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"instance": self.instance, "excluded": self.reason}


@dataclass
class Recommendation:
    request: RecommendRequest
    ranked: list[Candidate] = field(default_factory=list)  # best first, every layout
    excluded: list[Excluded] = field(default_factory=list)
    band_source: str = ""

    @property
    def best_per_instance(self) -> list[Candidate]:
        seen: set[str] = set()
        out = []
        for c in self.ranked:
            if c.instance not in seen:
                seen.add(c.instance)
                out.append(c)
        return out

    def as_dict(self) -> dict[str, object]:
        q = self.request
        return {
            "model": q.model,
            "input_len": q.input_len,
            "output_len": q.output_len,
            "dataset": q.dataset,
            "range_ratio": q.range_ratio,
            "ignore_eos": q.ignore_eos,
            "lengths_from": q.lengths_from,
            "constraints": q.constraints,
            "goal": q.goal,
            "target_rps": q.target_rps,
            "sizing": "instances_needed on the low edge of capacity_rps (" + self.band_source + ")",
            "rows": [c.as_dict() for c in self.ranked],
            "excluded": [e.as_dict() for e in self.excluded],
        }


def select_instances(spec: str) -> list[str]:
    """Instance names for ``all``, a comma list, or globs (``ml.g6*``); BadInput naming an unknown one."""
    from core.catalog import instances

    known = sorted(instances())
    if spec.strip() in ("", "all"):
        return known
    out: list[str] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        name = part if part.startswith("ml.") else f"ml.{part}"
        hits = fnmatch.filter(known, name) if any(ch in name for ch in "*?[") else [n for n in known if n == name]
        if not hits:
            raise BadInput(f"no instance type matches {part!r}", "see knee catalog instances")
        out += [h for h in hits if h not in out]
    return out


def _precisions(arch, gpu, allow: bool) -> list[tuple[str | None, str]]:
    """(weights precision, KV dtype) variants: the checkpoint's, plus FP8 where allowed and the
    GPU has FP8 tensor cores."""
    out: list[tuple[str | None, str]] = [(None, "auto")]
    if allow and "fp8" in (gpu.tflops or {}):
        out += [("fp8", "auto"), ("fp8", "fp8")]
    return out


def recommend(req: RecommendRequest) -> Recommendation:
    """Every instance and layout that fits, ranked by ``req.goal`` (see the module docstring)."""
    from core.catalog import load_model, resolve_hardware
    from core.estimate.bands import band, kind_of, source
    from core.estimate.fit_advice import nearest_miss
    from core.estimate.report import estimate

    if req.target_rps is not None and req.target_rps <= 0:
        raise BadInput(f"--target-rps must be positive, got {req.target_rps:g}")
    # Read (a file) and checked once, before any instance is estimated; a file's means are
    # what the reports print (the request's own lengths stand for nothing then).
    workload = req.workload()
    if req.lengths_from:
        req = dataclasses.replace(req, input_len=workload.input.mean + workload.prepended_len, output_len=workload.output.mean)
    names = select_instances(req.instances)
    from core.catalog.hardware import instances_in, regions

    if req.region is not None and req.region not in regions():
        raise BadInput(
            f"no prices for region {req.region!r} in the catalog",
            f'use one of {", ".join(regions())}, or add [instances."ml.x".regions.{req.region}] prices to ~/.config/knee/catalog.toml',
        )
    regional = instances_in(req.region) if req.region is not None else None
    rec = Recommendation(req, band_source=source(req.engine, "req_per_s"))
    archs: dict[str | None, ModelArch] = {}
    for name in names:
        hw = resolve_hardware(instance=name)
        inst = regional[name] if regional is not None else hw.instance  # the region's price, or none
        reasons: list[str] = []
        found = False
        for precision, kv in _precisions(None, hw.gpu, req.allow_quantization):
            if precision not in archs:
                archs[precision] = load_model(req.model, precision=precision)
            arch = archs[precision]
            rep = estimate(
                model=req.model,
                arch=arch,
                hardware=hw,
                workload=workload,
                constraints=req.constraints,
                concurrency=[1],
                engine=req.engine,
                kv_cache_dtype=kv,
            )
            if not rep.configs:
                reasons.append("does not fit: " + (nearest_miss(rep.memory).reason or "no memory plan"))
                continue
            for ce in rep.configs:
                if not ce.limits.slo_feasible:
                    reasons.append(
                        f"SLO unreachable at any load on TP{ce.config.tp} x {ce.config.dp}: "
                        + "; ".join(f"{c.constraint}" for c in ce.limits.slo if c.concurrency is None)
                    )
                    continue
                found = True
                rec.ranked.append(_candidate(req, inst, hw, ce, arch, kv, band))
        if not found:
            rec.excluded.append(Excluded(name, _reason(reasons)))
    if archs:  # a model's kind may have its own band (MoE or dense; core/estimate/bands.py)
        rec.band_source = source(req.engine, "req_per_s", kind_of(next(iter(archs.values())).is_moe))
    priced = [c for c in rec.ranked if c.usd_per_hour is not None]
    if req.goal == "cost":
        for c in [c for c in rec.ranked if c.usd_per_hour is None]:
            if all(x.instance != c.instance for x in priced) and all(e.instance != c.instance for e in rec.excluded):
                where = f" in {req.region}" if req.region else ""
                rec.excluded.append(
                    Excluded(
                        c.instance, f"price unknown{where} (capacity {c.capacity_rps:.2f} req/s): set price_per_hour in ~/.config/knee/catalog.toml"
                    )
                )
        rec.ranked = priced
    rec.ranked.sort(key=_rank_key(req))
    rec.excluded.sort(key=lambda e: e.instance)
    return rec


def _reason(reasons: list[str]) -> str:
    fits = [r for r in reasons if not r.startswith("does not fit")]
    return fits[0] if fits else (reasons[0] if reasons else "no layout")


def _candidate(req: RecommendRequest, inst, hw, ce, arch, kv: str, band) -> Candidate:
    k = ce.at_knee
    b = band("req_per_s", k.req_per_s, k.engine, k.kind) or {"low": k.req_per_s, "high": k.req_per_s}
    tb = band("output_tok_per_s", k.output_tok_per_s, k.engine, k.kind) or {"low": k.output_tok_per_s}
    needed = math.ceil(req.target_rps / b["low"] - 1e-9) if req.target_rps and b["low"] > 0 else None
    price = inst.price_per_hour
    total = price * (needed or 1) if price is not None else None
    per_m = price / (tb["low"] * 3600) * 1e6 if price is not None and tb["low"] > 0 else None
    cfg = ce.config
    knobs = {
        "tensor_parallel_size": cfg.tp,
        "data_parallel_size": cfg.dp,
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "max_model_len": cfg.max_model_len,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
    }
    precision = arch.quantization.method if arch.quantization.method not in ("bf16", "fp16") else arch.dtype
    if arch.quantization.method not in ("bf16", "fp16"):
        knobs["quantization"] = arch.quantization.method
    if kv != "auto":
        knobs["kv_cache_dtype"] = kv
    bottleneck = k.decode_bottleneck if k.limited_by in ("load", "max_num_seqs") else k.limited_by
    return Candidate(
        instance=inst.name,
        gpu=hw.gpu.name,
        num_gpus=hw.num_gpus,
        tp=cfg.tp,
        copies=cfg.dp,
        precision=precision,
        kv_cache_dtype=kv,
        capacity_rps=k.req_per_s,
        capacity_rps_low=b["low"],
        capacity_rps_high=b["high"],
        output_tok_per_s=k.output_tok_per_s,
        concurrency=int(k.concurrency or 0),
        ttft_ms=k.ttft_ms.mean,
        e2e_s=k.e2e_s.mean,
        instances_needed=needed,
        usd_per_hour=price,
        usd_per_hour_total=total,
        usd_per_1m_output_tokens=per_m,
        bottleneck=f"decode: {k.decode_bottleneck}; prefill: {k.prefill_bottleneck}; batch limited by {k.limited_by}" if bottleneck else k.limited_by,
        knobs=knobs,
        price_note=None
        if price is None
        else f"{inst.price_region or 'us-east-1'} {inst.price_date or 'undated'}" + (", uncertain" if "price_per_hour" in inst.uncertain else ""),
    )


def _rank_key(req: RecommendRequest):
    if req.goal == "throughput":
        return lambda c: (-c.capacity_rps_low, c.usd_per_hour or math.inf)
    if req.goal == "latency":
        return lambda c: (c.e2e_s, c.ttft_ms, c.usd_per_hour or math.inf)
    if req.target_rps:
        return lambda c: (c.usd_per_hour_total, c.usd_per_1m_output_tokens or math.inf)
    return lambda c: (c.usd_per_1m_output_tokens or math.inf, c.usd_per_hour)
