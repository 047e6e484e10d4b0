"""Pareto frontier, the knee, and the best configuration under constraints.

Every metric has a direction (throughputs up, latencies down), so a frontier over any two
metrics is right whichever axis holds the latency (llm-optimizer's dashboard treats a Y-axis
latency as larger-is-better). Points that failed, or lack either metric, are left out.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from core.errors import BadInput
from core.spec.slo import METRIC_ALIASES, SLO
from core.spec.study import PointRow

MAXIMIZE_PREFIXES = (
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "input_throughput",
    "request_goodput",
    "good_fraction",
    "max_output_tokens_per_s",
    "completed",
    "tokens_per_s",
)
# knobs that read as metrics (axis "max_concurrency" in a plot)
_KNOBS_UP = ("max_concurrency", "request_rate", "concurrency", "max_concurrent_requests")


def direction(metric: str) -> str:
    """'max' or 'min' for a result key."""
    m = metric.lower()
    if m.endswith("_ms") or m.endswith("_s") and not m.endswith("per_s") or "latency" in m or m in ("failed", "cost_per_1m_tokens"):
        return "min"
    if m.startswith(MAXIMIZE_PREFIXES) or m in _KNOBS_UP or "throughput" in m or "goodput" in m or "per_gpu" in m or "per_user" in m:
        return "max"
    raise BadInput(f"no known direction for metric {metric!r}", "use a vllm bench serve key such as output_throughput or p99_e2el_ms")


def resolve_metric(name: str) -> str:
    """Accept short forms: ``ttft`` → ``mean_ttft_ms``, ``e2e_latency:p99`` → ``p99_e2el_ms``,
    ``throughput`` → ``output_throughput``."""
    n = name.strip()
    base, _, stat = n.partition(":")
    canon = METRIC_ALIASES.get(base.lower())
    if canon in ("ttft", "itl", "tpot", "e2el"):
        stat = (stat or "mean").lower()
        stat = "median" if stat == "p50" else stat
        return f"{stat}_{canon}_ms"
    if canon:
        return canon
    return n.replace("e2e_latency", "e2el")


def metric_value(p: PointRow, key: str) -> float | None:
    if key == "tokens_per_s_per_user":
        v, c = p.summary.get("output_throughput"), p.client_args.get("max_concurrency")
        return v / c if v is not None and c else None
    if key == "output_throughput_per_gpu":
        v = p.summary.get("output_throughput")
        tp = p.server_args.get("tensor_parallel_size", p.server_args.get("tp_size", p.server_args.get("tp", 1))) or 1
        dp = p.server_args.get("data_parallel_size", p.server_args.get("dp_size", p.server_args.get("dp", 1))) or 1
        return v / (tp * dp) if v is not None else None
    v = p.value(key)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    return float(v)


def _oriented(p: PointRow, x: str, y: str) -> tuple[float, float] | None:
    vx, vy = metric_value(p, x), metric_value(p, y)
    if vx is None or vy is None:
        return None
    return (vx if direction(x) == "max" else -vx, vy if direction(y) == "max" else -vy)


def pareto(points: Iterable[PointRow], x: str, y: str) -> list[PointRow]:
    """The non-dominated successful points over metrics ``x`` and ``y``, sorted by x."""
    x, y = resolve_metric(x), resolve_metric(y)
    cands = [(o, p) for p in points if p.status == "ok" for o in [_oriented(p, x, y)] if o is not None]
    # Sort by oriented x descending (then y descending); sweep keeps strictly better y.
    cands.sort(key=lambda t: (-t[0][0], -t[0][1]))
    front: list[tuple[tuple[float, float], PointRow]] = []
    best_y = -math.inf
    for o, p in cands:
        if o[1] > best_y:
            front.append((o, p))
            best_y = o[1]
    # By x itself, ascending: the oriented x turned back (negation is exact), which every
    # point on the front has (metric_value's None is filtered out above).
    sign = 1.0 if direction(x) == "max" else -1.0
    front.sort(key=lambda t: sign * t[0][0])
    return [p for _, p in front]


def knee(front: Sequence[PointRow], x: str, y: str) -> PointRow | None:
    """The frontier point farthest from the line joining its two ends, in normalized space
    (the Kneedle idea): where trading more of one metric starts costing much of the other."""
    x, y = resolve_metric(x), resolve_metric(y)
    oriented = [(_oriented(p, x, y), p) for p in front]
    pts = [(o, p) for o, p in oriented if o is not None]
    if len(pts) < 3:
        return pts[0][1] if len(pts) == 1 else (None if not pts else max(pts, key=lambda t: t[0][0] + t[0][1])[1])
    xs = [o[0] for o, _ in pts]
    ys = [o[1] for o, _ in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx, sy = (x1 - x0) or 1.0, (y1 - y0) or 1.0
    norm = [((o[0] - x0) / sx, (o[1] - y0) / sy, p) for o, p in pts]
    # Ends of the front: best x (and worst y) and best y (and worst x). The knee bulges
    # toward (1, 1), so take the largest distance on that side of the chord.
    a = max(norm, key=lambda t: (t[0], t[1]))
    b = max(norm, key=lambda t: (t[1], t[0]))
    dx, dy = b[0] - a[0], b[1] - a[1]

    def cross(tx: float, ty: float) -> float:
        return dx * (ty - a[1]) - dy * (tx - a[0])

    side = 1.0 if cross(1.0, 1.0) >= 0 else -1.0
    best = max(norm, key=lambda t: side * cross(t[0], t[1]))
    return best[2]


def objective_key(objective: str) -> tuple[str, str]:
    """(result key, direction) an objective ranks by."""
    return {
        "throughput": ("output_throughput", "max"),
        "throughput_per_gpu": ("output_throughput_per_gpu", "max"),
        "goodput": ("request_goodput", "max"),
        "latency": ("p99_e2el_ms", "min"),
        "cost": ("cost_per_1m_tokens", "min"),
    }.get(objective) or _bad_objective(objective)


def _bad_objective(o: str):
    raise BadInput(f"unknown objective {o!r}", "use throughput, throughput_per_gpu, goodput, latency or cost")


def score(p: PointRow, objective: str, price_per_gpu_hour: float | None = None) -> float | None:
    """Higher is better, for every objective."""
    key, d = objective_key(objective)
    if key == "cost_per_1m_tokens":
        v = cost_per_1m_tokens(p, price_per_gpu_hour)
    else:
        v = metric_value(p, key)
    if v is None:
        return None
    return v if d == "max" else -v


def cost_per_1m_tokens(p: PointRow, price_per_gpu_hour: float | None) -> float | None:
    tput = p.summary.get("output_throughput")
    if not price_per_gpu_hour or not tput:
        return None
    tp = p.server_args.get("tensor_parallel_size", p.server_args.get("tp_size", p.server_args.get("tp", 1))) or 1
    dp = p.server_args.get("data_parallel_size", p.server_args.get("dp_size", p.server_args.get("dp", 1))) or 1
    return price_per_gpu_hour * tp * dp / 3600.0 / tput * 1e6


def best(
    points: Iterable[PointRow], objective: str = "throughput", slo: SLO | None = None, price_per_gpu_hour: float | None = None
) -> PointRow | None:
    """The successful point with the best objective among those meeting every constraint."""
    cands = []
    for p in points:
        if p.status != "ok":
            continue
        if slo is not None and not slo.holds(p.summary):
            continue
        s = score(p, objective, price_per_gpu_hour)
        if s is not None:
            cands.append((s, p))
    return max(cands, key=lambda t: t[0])[1] if cands else None


def vllm_command(model: str, server_args: dict[str, Any]) -> str:
    """The ``vllm serve`` command line a configuration stands for: what knee's vllm engine
    launches for it (``core.serve.engines.build_argv``), less the host, port and API key it
    picks at each launch. A simulated study stores ``sim MODEL`` as its command; this is
    what its best configuration would run on a GPU."""
    import shlex

    from core.spec.server_args import emit_args

    return shlex.join(["vllm", "serve", model, *emit_args(server_args)])
