"""What the Estimate screen shows for one plan, computed off the UI thread.

The numbers come from the estimator's report (``core.estimate.estimate``), with the plan's
server args that the estimator models (``core.sweep.plan_estimate``): memory per TP degree, predictions against concurrency, limits, bottlenecks and the suggested search
space. The roofline comes from :mod:`tui.data.roofline`. This module only reshapes them
into rows, so a change in the report's shape is a change here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path

from dataclasses import dataclass, field
from typing import Any

from core.estimate import EstimateReport, estimate
from core.estimate.memory import MemoryPlan
from core.spec.plan import Plan
from core.sweep.plan_estimate import estimate_args
from tui.data.roofline import Roofline, roofline


@dataclass(frozen=True)
class MemoryRow:
    tp: int
    replicas: int  # copies of the model the hardware holds at this TP
    plan: MemoryPlan
    max_seqs: int  # full-length sequences of the workload the KV cache holds


@dataclass(frozen=True)
class PredictionRow:
    config: str  # "TP2 x DP2"; empty on the rows that continue a configuration's curve
    concurrency: int
    ttft_ms: float | None  # p99
    itl_ms: float | None  # p99
    e2e_ms: float | None  # p99
    request_throughput: float | None  # req/s for the whole hardware
    output_throughput: float | None  # tok/s for the whole hardware
    meets_slo: bool | None
    is_knee: bool = False


@dataclass(frozen=True)
class EstimateView:
    title: str  # "Qwen/Qwen3-4B on ml.g6.12xlarge (4x L4) · 1024/512 tok"
    model_summary: str
    memory: tuple[MemoryRow, ...]
    roofline: Roofline
    predictions: tuple[PredictionRow, ...] = ()
    limits: tuple[str, ...] = ()
    bottleneck: str = ""
    suggested_server_args: str = ""
    suggested_client_args: str = ""
    notes: tuple[str, ...] = ()
    report: Any = field(default=None, compare=False)  # the estimator's report, for exports


def model_summary(arch) -> str:
    s = f"{arch.params_total / 1e9:.1f}B params"
    if arch.is_moe:
        s += f" ({arch.params_active / 1e9:.1f}B active, {arch.experts_per_token}/{arch.num_experts} experts)"
    s += f" · {arch.num_layers} layers · {arch.num_heads}q/{arch.num_kv_heads}kv heads · {arch.quantization.method}"
    return s + f" · {arch.weight_bytes / 1e9:.1f} GB weights"


def _prediction_rows(report: EstimateReport, plan: Plan) -> list[PredictionRow]:
    slo = plan.slo
    rows: list[PredictionRow] = []
    for ce in report.configs:
        knee_c = ce.at_knee.concurrency
        preds = sorted([*ce.predictions, ce.at_knee], key=lambda p: p.concurrency or 0)
        seen: set[float | None] = set()
        for p in preds:
            if p.concurrency in seen:
                continue
            rows.append(
                PredictionRow(
                    config="" if seen else ce.label,
                    concurrency=int(p.concurrency or 0),
                    ttft_ms=p.ttft_ms.p99,
                    itl_ms=p.itl_ms.p99,
                    e2e_ms=p.e2e_s.p99 * 1000.0,
                    request_throughput=p.req_per_s,
                    output_throughput=p.output_tok_per_s,
                    meets_slo=slo.holds(p.metrics()) if slo.constraints else None,
                    is_knee=p.concurrency == knee_c,
                )
            )
            seen.add(p.concurrency)
    return rows


def _limit_lines(report: EstimateReport) -> list[str]:
    best = report.best
    if best is None:
        # What would fit (core.estimate.fit_advice), where the per-degree reasons only say
        # by how much each misses.
        advice = [f"[$text-error]{report.nothing_fits}[/]"] if report.nothing_fits else []
        return ["no configuration fits this hardware", *advice]
    lim = best.limits
    lines = [
        f"best: [b]{best.label}[/b]",
        f"KV cache: {lim.kv_full_length} full-length sequences",
        f"running batch cap: {lim.running_cap} ({lim.running_cap_reason.replace('_', ' ')})",
        f"saturates at c={lim.saturation}: {lim.max_req_per_s:.2f} req/s, {lim.max_output_tok_per_s:,.0f} tok/s",
    ]
    lines += _band_lines(best.at_knee)
    tr = report.track_record
    if tr is not None and {"output_tok_per_s", "ttft_ms"} <= tr.median_ape.keys():
        # How far off knee was on published runs like this one: the band says how wide, this how often.
        # Two short lines: a line wider than the panel's others widens it and narrows the table.
        lines.append(f"  median error: tok/s {tr.median_ape['output_tok_per_s']:.0%} · TTFT {tr.median_ape['ttft_ms']:.0%}")
        lines.append(f"  on {tr.rows} published runs" if tr.scope == "all" else f"  on {tr.rows} {tr.scope} runs")
    if lim.slo:
        if lim.slo_feasible and lim.slo_concurrency is not None:
            lines.append(f"SLOs met up to c={lim.slo_concurrency}")
        else:
            lines.append("[$text-error]no concurrency meets the SLOs[/]")
    cost = best.cost_per_1m_output_tokens
    if cost is not None:
        lines.append(f"${cost:.3f} per 1M output tokens at the knee")
    return lines


def _band_lines(k) -> list[str]:
    """The knee's error band: where measured/predicted fell for held-out runs (core/estimate/bands.py)."""
    from core.estimate.bands import band, provenance

    tok, rps, ttft = (
        band("output_tok_per_s", k.output_tok_per_s, k.engine, k.kind),
        band("req_per_s", k.req_per_s, k.engine, k.kind),
        band("ttft_ms", k.ttft_ms.mean, k.engine, k.kind),
    )
    if tok is None or rps is None or ttft is None:
        return []
    return [
        f"knee's band ({provenance()}):",
        f"  {rps['low']:.2f}-{rps['high']:.2f} req/s · {tok['low']:,.0f}-{tok['high']:,.0f} tok/s",
        f"  mean TTFT {ttft['low']:,.0f}-{ttft['high']:,.0f} ms",
    ]


def _workload(report) -> str:
    from core.spec.lengths import describe

    w = report.workload
    source = Path(w["lengths_from"]["path"]).name if w.get("lengths_from") else None
    return describe(w["dataset"], w["input_len"], w["output_len"], w["range_ratio"], w["ignore_eos"], short=True, source=source)


def build_estimate(plan: Plan) -> EstimateView:
    """Everything the Estimate screen shows. Raises ``KneeError`` for a plan that cannot be
    estimated (unknown model, hardware); the screen shows the message."""
    from core.catalog import plan_arch, plan_hardware

    # The server args typed in the Plan screen that the estimator models (TP degrees, one-valued
    # knobs, the weights' quantization).
    fixed = estimate_args(plan.server_args)
    arch = plan_arch(plan.model_copy(update={"precision": fixed.kwargs["precision"]}) if "precision" in fixed.kwargs else plan)
    hw = plan_hardware(plan)
    report = estimate(plan, arch=arch, hardware=hw, **fixed.kwargs)
    kv_seqs = {ce.config.tp: ce.limits.kv_full_length for ce in report.configs}
    memory = tuple(MemoryRow(m.tp, hw.num_gpus // m.tp, m, kv_seqs.get(m.tp, 0)) for m in report.memory)
    best = report.best
    bottleneck = ""
    if best is not None:
        k = best.at_knee
        bottleneck = f"prefill: {k.prefill_bottleneck}; decode: {k.decode_bottleneck} (batch limited by {k.limited_by.replace('_', ' ')})"
    sug = report.suggestion
    return EstimateView(
        title=f"{plan.model} on {hw.label} · {_workload(report)}",
        model_summary=model_summary(arch),
        memory=memory,
        # The requests' means, as estimated (a ShareGPT plan's are the bundled shape's).
        roofline=roofline(arch, hw.gpu, round(report.workload["input_len"]), round(report.workload["output_len"]), kv_dtype=plan.kv_cache_dtype),
        predictions=tuple(_prediction_rows(report, plan)),
        limits=tuple(_limit_lines(report)),
        bottleneck=bottleneck,
        suggested_server_args=sug.server_args if sug else "",
        suggested_client_args=sug.client_args if sug else "",
        notes=(*fixed.notes(), *report.notes),
        report=report,
    )
