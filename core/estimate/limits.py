"""Concurrency limits of one configuration: KV capacity, compute saturation and the SLOs.

All concurrencies are for the whole deployment (every data-parallel replica), closed loop.

- ``kv_full_length``: sequences of I + O tokens the KV caches hold at once; past it vLLM
  preempts (recomputes) running sequences.
- ``running_cap``: the most sequences that run at once (the smallest of max_num_seqs, the KV
  cache at the average context, the token budget), and what sets it.
- ``saturation``: the concurrency where throughput reaches 90% of its maximum — the knee of
  the throughput curve; past it latency grows and throughput barely does.
- ``slo``: per constraint, the highest concurrency that still meets it (lowest for a
  throughput floor), and the concurrency meeting all of them at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.estimate.predict import Prediction, Predictor
from core.spec.serving import ServerConfig
from core.spec.slo import LATENCY_METRICS, SLO, Constraint

SATURATION_SHARE = 0.90


@dataclass(frozen=True)
class ConstraintLimit:
    constraint: str
    kind: str  # "max" (latency ceilings: highest concurrency) or "min" (throughput floors)
    concurrency: int | None  # None: met nowhere in the searched range
    met_everywhere: bool = False  # a ceiling met even at the largest concurrency searched

    def as_dict(self) -> dict[str, object]:
        return {"constraint": self.constraint, "kind": self.kind, "concurrency": self.concurrency, "met_everywhere": self.met_everywhere}


@dataclass(frozen=True)
class Limits:
    kv_full_length: int
    running_cap: int
    running_cap_reason: str
    saturation: int
    max_req_per_s: float
    max_output_tok_per_s: float
    slo: list[ConstraintLimit] = field(default_factory=list)
    slo_concurrency: int | None = None  # highest concurrency meeting every constraint
    slo_feasible: bool = True  # some concurrency >= 1 meets every constraint

    def as_dict(self) -> dict[str, object]:
        return {
            "kv_full_length_concurrency": self.kv_full_length,
            "running_cap": self.running_cap,
            "running_cap_reason": self.running_cap_reason,
            "saturation_concurrency": self.saturation,
            "max_req_per_s": round(self.max_req_per_s, 4),
            "max_output_tok_per_s": round(self.max_output_tok_per_s, 2),
            "slo": [c.as_dict() for c in self.slo],
            "slo_concurrency": self.slo_concurrency,
            "slo_feasible": self.slo_feasible,
        }


def _meets(pred: Prediction, c: Constraint) -> bool:
    return c.holds(pred.value(c.metric, c.stat) if c.metric in LATENCY_METRICS else pred.metrics().get(c.metric))


def _edge(ok, start: int, toward: int) -> int | None:
    """The integer farthest from ``start`` towards ``toward`` (either direction) with ok(c),
    for ok that holds from ``start`` up to a threshold and not past it; None if not ok(start).

    One bisection serves both searches of a monotone predicate: a latency ceiling holds
    below a concurrency (search upwards from the bottom), a throughput floor holds above
    one (search downwards from the top)."""
    if not ok(start):
        return None
    if ok(toward):
        return toward
    while abs(toward - start) > 1:
        mid = (start + toward) // 2
        if ok(mid):
            start = mid
        else:
            toward = mid
    return start


def _largest(ok, lo: int, hi: int) -> int | None:
    """Largest integer in [lo, hi] with ok(c), for ok true below a threshold."""
    return _edge(ok, lo, hi)


def _smallest(ok, lo: int, hi: int) -> int | None:
    """Smallest integer in [lo, hi] with ok(c), for ok true above a threshold."""
    return _edge(ok, hi, lo)


def compute_limits(p: Predictor, cfg: ServerConfig, slo: SLO | None = None) -> Limits:
    mem = p.memory(cfg)
    cap, reason = p.running_cap(cfg)
    total_cap = max(1, int(cap * cfg.dp))
    kv_full = cfg.dp * mem.max_sequences(p.input_len + p.output_len)
    # Past the cap the throughput is flat, so search up to a few times it.
    hi = max(4, 4 * total_cap)
    cache: dict[int, Prediction] = {}

    def pred(c: int) -> Prediction:
        if c not in cache:
            cache[c] = p.predict(cfg, concurrency=c)
        return cache[c]

    # Flat past the cap, or lower past a KV cache that evicts and recomputes: the peak is at
    # the cap then, and the search for saturation stops there. Searching up to ``hi`` would
    # bisect a curve that falls again (an 8B model on one RTX 4090 under ShareGPT: 12.4 req/s
    # at its cap of 160, 9.4 at 640) and report 640, where TTFT is 50 s, as the knee.
    peak_c = hi if pred(hi).req_per_s >= pred(total_cap).req_per_s else total_cap
    best = pred(peak_c)
    sat = _smallest(lambda c: pred(c).req_per_s >= SATURATION_SHARE * best.req_per_s, 1, peak_c) or peak_c

    limits: list[ConstraintLimit] = []
    ceilings: list[int | None] = []
    floors: list[int] = []
    for c in slo.constraints if slo else ():
        if c.op in ("<", "<="):
            v = _largest(lambda x, c=c: _meets(pred(x), c), 1, hi)
            limits.append(ConstraintLimit(str(c), "max", v, met_everywhere=v == hi))
            ceilings.append(v)
        elif c.op in (">", ">="):
            v = _smallest(lambda x, c=c: _meets(pred(x), c), 1, hi)
            limits.append(ConstraintLimit(str(c), "min", v))
            floors.append(v if v is not None else hi + 1)
    ceiling = None
    feasible = True
    if ceilings:
        met = [v for v in ceilings if v is not None]
        if len(met) < len(ceilings):  # a latency ceiling no concurrency meets
            feasible = False
        else:
            ceiling = min(met)
    elif slo and slo.constraints:
        ceiling = hi
    if floors and feasible:
        lo_need = max(floors)
        if ceiling is not None and lo_need > ceiling or lo_need > hi:
            feasible = False
        elif ceiling is None:
            ceiling = hi
    return Limits(
        kv_full_length=kv_full,
        running_cap=total_cap,
        running_cap_reason=reason,
        saturation=sat,
        max_req_per_s=best.req_per_s,
        max_output_tok_per_s=best.output_tok_per_s,
        slo=limits,
        slo_concurrency=ceiling if feasible else None,
        slo_feasible=feasible,
    )
