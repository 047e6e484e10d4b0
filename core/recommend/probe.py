"""Benchmarking one SageMaker endpoint: a short SLA search over concurrency, plus the target rate.

The search is the sweep's SLA method cut short (core/sweep/strategies.py ``SLAStrategy``:
bracket by doubling or halving, then bisect), written here because core.recommend sits beside
core.deploy, below core.sweep, and a measurement on a paid endpoint needs a hard cap on
probes rather than a tolerance alone. It starts at the estimator's knee, so a good estimate
costs two or three probes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Probe:
    """One load point measured on an endpoint."""

    client_args: dict[str, Any]  # max_concurrency or request_rate, num_prompts (the sweep's names)
    summary: dict[str, Any]
    ok: bool  # enough requests succeeded
    meets_slo: bool
    violations: list[str]
    reason: str | None
    records: list = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float = 0.0


def sla_search(meets: Callable[[int], bool], seed: int, cap: int, max_probes: int = 6) -> tuple[int | None, int | None]:
    """(highest concurrency that met the SLOs, lowest that failed), probing ``meets(c)`` at most
    ``max_probes`` times between 1 and ``cap``. None for a side never seen."""
    lo: int | None = None
    hi: int | None = None
    c = max(1, min(int(seed), cap))
    for _ in range(max_probes):
        if meets(c):
            lo = c
        else:
            hi = c
        if hi is None:  # bracket upward
            if c >= cap:
                break
            c = min(cap, c * 2)
        elif lo is None:  # bracket downward
            if c <= 1:
                break
            c = max(1, c // 2)
        else:
            if hi - lo <= max(1, math.floor(0.05 * hi)):
                break
            c = (lo + hi) // 2
            if c in (lo, hi):
                break
    return lo, hi


def run_probe(target, prompts: list, client_args: dict[str, Any], slo, max_error_fraction: float = 0.5) -> Probe:
    """One load point through knee's load client; summarized and judged like a sweep point."""
    import time

    from core.load.metrics import summarize
    from core.load.runner import run_load_sync
    from core.spec.serving import LoadPoint

    if "request_rate" in client_args:
        lp = LoadPoint(request_rate=client_args["request_rate"], num_prompts=client_args["num_prompts"])
    else:
        lp = LoadPoint(concurrency=client_args["max_concurrency"], num_prompts=client_args["num_prompts"])
    t0 = time.time()
    res = run_load_sync(target, prompts[: client_args["num_prompts"]], lp)
    summary = summarize(res.records, float(res.duration_s), slo=slo)
    n = len(res.records)
    failed = sum(1 for r in res.records if not r.ok)
    ok, reason = True, None
    if n == 0 or failed / max(n, 1) > max_error_fraction:
        first = next((r.error for r in res.records if r.error), None)
        ok, reason = False, f"too many errors: {failed} of {n} requests failed" + (f" (first: {first})" if first else "")
    meets = ok and slo.holds(summary)
    return Probe(
        client_args=dict(client_args),
        summary=summary,
        ok=ok,
        meets_slo=meets,
        violations=slo.violations(summary) if ok else [],
        reason=reason,
        records=list(res.records),
        started_at=t0,
        ended_at=time.time(),
    )


@dataclass
class EndpointBench:
    probes: list[Probe]
    max_concurrency_meeting_slo: int | None
    lowest_failing: int | None
    at_target: Probe | None  # the per-instance share of --target-rps, open loop


def _verdict(p) -> str:
    """One probe's outcome in words: it met the SLOs, or why not."""
    return "meets the SLOs" if p.meets_slo else (p.reason or "misses: " + "; ".join(p.violations))


def bench_endpoint(
    target,
    prompts: list,
    slo,
    *,
    seed: int,
    cap: int,
    prompts_per_probe: Callable[[int], int],
    max_probes: int,
    target_rps: float | None,
    say: Callable[[str], None],
) -> EndpointBench:
    """SLA search at the SLO edge, then the target rate when given."""
    probes: list[Probe] = []

    def measure(args: dict[str, Any], announce: str, head: Callable[[dict[str, Any]], str]) -> Probe:
        """Run one probe, keep it, and say what it gave: ``head`` of its summary, p99, verdict."""
        say(announce)
        p = run_probe(target, prompts, args, slo)
        probes.append(p)
        s = p.summary
        say(f"  {head(s)}, p99 E2E {s.get('p99_e2el_ms', float('nan')) / 1000:.2f} s; {_verdict(p)}")
        return p

    def meets(c: int) -> bool:
        n = prompts_per_probe(c)
        p = measure(
            {"max_concurrency": c, "num_prompts": n},
            f"measuring c={c} ({n} requests)",
            lambda s: f"c={c}: {s.get('request_throughput', 0):.2f} req/s, {s.get('output_throughput', 0):.0f} out tok/s",
        )
        return p.meets_slo

    lo, hi = sla_search(meets, seed, cap, max_probes)
    at_target = None
    if target_rps:
        n = max(prompts_per_probe(max(1, lo or 1)), 1)
        at_target = measure(
            {"request_rate": round(target_rps, 3), "num_prompts": n},
            f"measuring the target rate {target_rps:g} req/s ({n} requests)",
            lambda s: f"{target_rps:g} req/s offered: {s.get('request_throughput', 0):.2f} req/s served",
        )
    return EndpointBench(probes, lo, hi, at_target)
