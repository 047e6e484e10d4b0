"""Latency and throughput goals, in llm-optimizer's constraint grammar.

``ttft:p95<500ms;e2e_latency:p99<60s;itl<=20`` — parts split on ``;``, each
``METRIC[:STAT] OP VALUE[UNIT]``. knee accepts everything llm-optimizer accepts and fixes
its defects: units are honoured everywhere (ms, s, and req/s or tok/s for throughputs),
``<=`` and ``>=`` are real operators, p50/p90 are allowed, and a malformed part is an error
naming the part instead of a silent skip.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict

from core.errors import BadInput

# Metric name aliases → knee's canonical names (vllm bench serve keys without the stat).
METRIC_ALIASES = {
    "ttft": "ttft",
    "itl": "itl",
    "tpot": "tpot",
    "e2e": "e2el",
    "e2el": "e2el",
    "e2e_latency": "e2el",
    "latency": "e2el",
    "request_throughput": "request_throughput",
    "req_per_s": "request_throughput",
    "rps": "request_throughput",
    "output_throughput": "output_throughput",
    "output_tok_per_s": "output_throughput",
    "throughput": "output_throughput",
    "total_token_throughput": "total_token_throughput",
    "goodput": "request_goodput",
}
LATENCY_METRICS = {"ttft", "itl", "tpot", "e2el"}
STATS = {"mean", "median", "p50", "p90", "p95", "p99", "std"}
OPS = ("<=", ">=", "<", ">", "==", "!=")
_VALUE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([a-zA-Z/_]*)\s*$")


class Constraint(BaseModel):
    """One goal: ``stat`` of ``metric`` ``op`` ``value`` (latencies always in ms)."""

    model_config = ConfigDict(frozen=True)

    metric: str  # canonical: ttft, itl, tpot, e2el, request_throughput, output_throughput, ...
    stat: str = "mean"
    op: str = "<"
    value: float  # milliseconds for latencies; per second for throughputs

    @property
    def key(self) -> str:
        """The result key this constraint reads, as ``vllm bench serve`` names it."""
        if self.metric in LATENCY_METRICS:
            stat = "median" if self.stat == "p50" else self.stat
            return f"{stat}_{self.metric}_ms"
        return self.metric

    def holds(self, measured: float | None) -> bool:
        if measured is None or (isinstance(measured, float) and math.isnan(measured)):
            return False
        return {
            "<": measured < self.value,
            "<=": measured <= self.value,
            ">": measured > self.value,
            ">=": measured >= self.value,
            "==": measured == self.value,
            "!=": measured != self.value,
        }[self.op]

    def __str__(self) -> str:
        if self.metric in LATENCY_METRICS:
            v = f"{self.value / 1000:g}s" if self.value >= 1000 else f"{self.value:g}ms"
            name = "e2e_latency" if self.metric == "e2el" else self.metric
            return f"{name}:{self.stat}{self.op}{v}"
        return f"{self.metric}{self.op}{self.value:g}"


class SLO(BaseModel):
    """A conjunction of constraints."""

    model_config = ConfigDict(frozen=True)

    constraints: tuple[Constraint, ...] = ()

    def holds(self, results: dict[str, float]) -> bool:
        return all(c.holds(results.get(c.key)) for c in self.constraints)

    def violations(self, results: dict[str, float]) -> list[str]:
        return [str(c) for c in self.constraints if not c.holds(results.get(c.key))]

    def __str__(self) -> str:
        return ";".join(str(c) for c in self.constraints)


def _parse_part(part: str) -> Constraint:
    op = next((o for o in OPS if o in part), None)
    if op is None:
        raise BadInput(
            f"constraint {part!r} has no operator",
            "write METRIC[:STAT]<VALUE, e.g. ttft:p95<500ms",
        )
    lhs, rhs = part.split(op, 1)
    name, _, stat = lhs.strip().partition(":")
    name = name.strip().lower()
    stat = stat.strip().lower() or "mean"
    metric = METRIC_ALIASES.get(name)
    if metric is None:
        known = ", ".join(sorted({"ttft", "itl", "tpot", "e2e_latency", "request_throughput", "output_throughput"}))
        raise BadInput(f"unknown metric {name!r} in constraint {part!r}", f"use one of {known}")
    if stat not in STATS:
        raise BadInput(f"unknown statistic {stat!r} in constraint {part!r}", "use mean, median, p50, p90, p95 or p99")
    m = _VALUE.match(rhs)
    if not m:
        raise BadInput(f"constraint {part!r} has no number after {op!r}", "e.g. e2e_latency:p99<60s")
    value, unit = float(m.group(1)), m.group(2).lower()
    if metric in LATENCY_METRICS:
        scale = {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 1e-3, "min": 60_000.0}.get(unit)
        if scale is None:
            raise BadInput(f"unknown unit {unit!r} in constraint {part!r}", "use ms or s")
        value *= scale
    elif unit not in ("", "req/s", "rps", "tok/s", "/s"):
        raise BadInput(f"unknown unit {unit!r} in constraint {part!r}", "throughputs take req/s or tok/s")
    if value < 0:
        raise BadInput(f"constraint {part!r} has a negative value")
    return Constraint(metric=metric, stat=stat, op=op, value=value)


def parse_constraints(text: str | None) -> SLO:
    """Parse llm-optimizer's ``--constraints`` grammar; raises :class:`BadInput`."""
    if not text or not text.strip():
        return SLO()
    parts = [p.strip() for p in text.split(";") if p.strip()]
    return SLO(constraints=tuple(_parse_part(p) for p in parts))
