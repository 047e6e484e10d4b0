"""The trial table's rows, UI-free: a measured load point or a trial without one yet, as a
frozen :class:`RowView` keyed by a stable id (the Sweep screen updates only changed rows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.spec.study import PointRow, TrialRow


def args_text(d: dict[str, Any]) -> str:
    """Server arguments in a table cell's few words (tp=2 seqs=64)."""
    short = {
        "tensor_parallel_size": "tp",
        "data_parallel_size": "dp",
        "max_num_seqs": "seqs",
        "max_num_batched_tokens": "mnbt",
        "gpu_memory_utilization": "gmu",
        "max_model_len": "mml",
    }
    return " ".join(f"{short.get(k, k)}={v}" for k, v in d.items()) or "(defaults)"


def load_text(client_args: dict[str, Any]) -> str:
    """A load point's load in a cell: "4 req/s" or "c=8"."""
    if "request_rate" in client_args:
        return f"{client_args['request_rate']:g} req/s"
    if "max_concurrency" in client_args:
        return f"c={client_args['max_concurrency']}"
    return ""


@dataclass(frozen=True)
class RowView:
    """One line of the trial table: a measured load point, or a trial without one yet."""

    key: str  # point id, or "trial-<id>" before the trial's first point
    trial_id: int
    status: str  # pending, running, ok, failed, skipped, interrupted
    server_args: str
    load: str
    ttft_p99: float | None = None  # ms
    itl_p99: float | None = None  # ms
    e2e_p99: float | None = None  # ms
    req_s: float | None = None
    tok_s: float | None = None
    slo: bool | None = None
    reason: str = ""
    simulated: bool = False


def point_row(p: PointRow) -> RowView:
    s = p.summary
    return RowView(
        key=p.point_id,
        trial_id=p.trial_id,
        status=p.status,
        server_args=args_text(p.server_args),
        load=load_text(p.client_args),
        ttft_p99=s.get("p99_ttft_ms"),
        itl_p99=s.get("p99_itl_ms"),
        e2e_p99=s.get("p99_e2el_ms"),
        req_s=s.get("request_throughput"),
        tok_s=s.get("output_throughput"),
        slo=p.meets_slo if p.status == "ok" else None,
        reason=(p.reason or ("; ".join(p.violations) if p.violations else "")).split("\n")[0],
        simulated=p.simulated,
    )


def trial_row(t: TrialRow) -> RowView:
    return RowView(
        key=f"trial-{t.trial_id}",
        trial_id=t.trial_id,
        status=t.status,
        server_args=args_text(t.server_args),
        load="",
        reason=(t.reason or "").split("\n")[0],
    )
