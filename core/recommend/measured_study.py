"""Storing a SageMaker measurement as one study in the sweep's schema, and ranking by it.

One trial per finalist (instance type + layout): its ``server_args`` are the vLLM knobs
deployed, exactly what ``knee deploy --trial`` turns back into a configuration, so the
instance type is kept out of them (a knob vLLM does not know would be passed to the
container). Where it ran rides instead in the trial key, the trial's ``predicted`` dict and
each point's summary (``instance``, ``measured_on: sagemaker``, ``endpoint``); every point has
``source = "sagemaker"``. The study carries a SweepSpec (external engine, SLA strategy) so
``knee results``, Pareto and ``knee deploy --trial`` read it like any sweep.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

MEASURED_ON = "sagemaker"


def server_args_of(cand) -> dict[str, Any]:
    """The vLLM knobs a candidate deploys with. Copies run as inference components (one
    server each), so data parallelism is left out."""
    k = {key: v for key, v in cand.knobs.items() if key != "data_parallel_size" and v is not None}
    return k


def create_study(store, name: str, req, region: str, finalists: list) -> None:
    from core.spec.study import EngineSpec, SweepSpec

    spec = SweepSpec(
        model=req.model,
        engine=EngineSpec(kind="external", url=f"sagemaker://{region}"),
        constraints=req.constraints,
        input_len=int(req.input_len),
        output_len=int(req.output_len),
        strategy="sla",
        objective="throughput" if req.goal == "cost" else req.goal,
    )
    store.create_study(
        name,
        spec,
        req.model,
        source=MEASURED_ON,
        info={
            "measured_on": MEASURED_ON,
            "region": region,
            "constraints": req.constraints,
            "goal": req.goal,
            "target_rps": req.target_rps,
            "finalists": [f"{c.instance} TP{c.tp}x{c.copies}" for c in finalists],
        },
    )
    store.set_study(name, status="running")


def store_finalist(store, study: str, cand, endpoint: str, bench, failed: str | None = None) -> int:
    """One trial and its probes as points; returns the trial id."""
    from core.spec.study import PointRow, canonical_json, make_point_id

    sargs = server_args_of(cand)
    key = canonical_json({"instance": cand.instance, "copies": cand.copies, "server_args": sargs})
    predicted = {
        "instance": cand.instance,
        "measured_on": MEASURED_ON,
        "endpoint": endpoint,
        "copies": cand.copies,
        "capacity_rps": cand.capacity_rps,
        "capacity_rps_low": cand.capacity_rps_low,
        "capacity_rps_high": cand.capacity_rps_high,
        "concurrency_at_knee": cand.concurrency,
    }
    tid = store.upsert_trial(
        study,
        key,
        sargs,
        status="failed" if failed else "ok",
        reason=failed,
        cmd=f"SageMaker endpoint {endpoint} on {cand.instance}",
        predicted=predicted,
        ended_at=time.time(),
    )
    for p in bench.probes if bench else []:
        summary = {**p.summary, "instance": cand.instance, "measured_on": MEASURED_ON, "endpoint": endpoint}
        row = PointRow(
            study=study,
            point_id=make_point_id({"instance": cand.instance, **sargs}, p.client_args),
            trial_id=tid,
            trial_key=key,
            server_args=sargs,
            client_args=p.client_args,
            status="ok" if p.ok else "failed",
            reason=p.reason,
            summary=summary,
            simulated=False,
            source=MEASURED_ON,
            search="sla",
            started_at=p.started_at,
            ended_at=p.ended_at,
            gpu_seconds=(p.ended_at - p.started_at) * cand.num_gpus,
            cmd=f"SageMaker endpoint {endpoint}",
            meets_slo=p.meets_slo,
            violations=p.violations,
        )
        store.save_point(row, p.records)
    return tid


@dataclass
class MeasuredRow:
    """A finalist ranked by what SageMaker measured (per instance, at the SLO edge)."""

    cand: Any
    trial_id: int | None
    max_concurrency: int | None  # highest that met the SLOs; None: none did
    request_rps: float | None
    output_tok_per_s: float | None
    p99_e2e_s: float | None
    instances_needed: int | None
    usd_per_hour_total: float | None
    usd_per_1m_output_tokens: float | None
    target: dict[str, Any] | None  # the target-rate probe: req/s, p99 E2E, meets
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        c = self.cand
        return {
            "instance": c.instance,
            "layout": {"tp": c.tp, "copies": c.copies},
            "trial_id": self.trial_id,
            "measured_on": MEASURED_ON,
            "max_concurrency_meeting_slo": self.max_concurrency,
            "capacity_rps": self.request_rps,
            "predicted_capacity_rps": c.capacity_rps,
            "output_tok_per_s": self.output_tok_per_s,
            "p99_e2e_s": self.p99_e2e_s,
            "instances_needed": self.instances_needed,
            "usd_per_hour": c.usd_per_hour,
            "usd_per_hour_total": self.usd_per_hour_total,
            "usd_per_1m_output_tokens": self.usd_per_1m_output_tokens,
            "at_target_rate": self.target,
            "note": self.note,
        }


def measured_row(cand, trial_id: int | None, bench, target_rps: float | None, note: str = "") -> MeasuredRow:
    best = None
    if bench is not None:
        good = [p for p in bench.probes if p.meets_slo and "max_concurrency" in p.client_args]
        best = max(good, key=lambda p: p.client_args["max_concurrency"], default=None)
    rps = out = e2e = needed = total = per_m = None
    if best is not None:
        s = best.summary
        rps, out = s.get("request_throughput"), s.get("output_throughput")
        e2e = (s.get("p99_e2el_ms") or 0) / 1000
        price = cand.usd_per_hour
        if target_rps and rps:
            needed = math.ceil(target_rps / rps - 1e-9)
        if price is not None:
            total = price * (needed or 1)
            per_m = price / (out * 3600) * 1e6 if out else None
    elif not note:
        note = "no load met the SLOs"
    tgt = None
    if bench is not None and bench.at_target is not None:
        s = bench.at_target.summary
        tgt = {
            "request_rate": bench.at_target.client_args["request_rate"],
            "request_throughput": s.get("request_throughput"),
            "p99_e2e_s": (s.get("p99_e2el_ms") or 0) / 1000,
            "meets_slo": bench.at_target.meets_slo,
        }
    return MeasuredRow(cand, trial_id, best.client_args["max_concurrency"] if best else None, rps, out, e2e, needed, total, per_m, tgt, note)


def rank_measured(rows: list[MeasuredRow], goal: str, target_rps: float | None) -> list[MeasuredRow]:
    """The recommendation's own ordering (core/recommend/rank.py), on measured numbers; a
    finalist whose measurement met no SLO goes last."""
    inf = math.inf

    def key(r: MeasuredRow):
        if r.request_rps is None:
            return (1, inf, inf)
        if goal == "throughput":
            return (0, -r.request_rps, r.cand.usd_per_hour or inf)
        if goal == "latency":
            return (0, r.p99_e2e_s or inf, r.cand.usd_per_hour or inf)
        if target_rps:
            return (0, r.usd_per_hour_total if r.usd_per_hour_total is not None else inf, r.usd_per_1m_output_tokens or inf)
        return (0, r.usd_per_1m_output_tokens if r.usd_per_1m_output_tokens is not None else inf, r.cand.usd_per_hour or inf)

    return sorted(rows, key=key)
