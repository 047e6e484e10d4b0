"""What the Recommend screen shows: the catalog-wide ranking (``core.recommend``) reshaped
into table rows, chart points and the frontier, with no Textual in sight so it is tested
on its own.

The request comes from the app's plan (model, workload, constraints, its target rate) and
the screen's two controls (the goal, a target the user typed). The chart plots every
ranked layout that has a price: $ per 1M output tokens against the capacity of one
instance. Every ranked layout meets the SLOs (core.recommend excludes those that cannot),
so the frontier drawn is the SLO-meeting one: no other layout both serves more requests
per instance and costs less per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.recommend import Candidate, Recommendation, RecommendRequest
from core.spec.plan import Plan

GOALS = ("cost", "throughput", "latency")


def parse_target(text: str) -> tuple[float | None, str | None]:
    """The typed target rate: (value, None), (None, None) when blank, or (None, why not)."""
    text = text.strip()
    if not text:
        return None, None
    try:
        v = float(text)
    except ValueError:
        return None, f"target req/s must be a number, got {text!r}"
    if not (v > 0 and math.isfinite(v)):
        return None, f"target req/s must be positive, got {text!r}"
    return v, None


def request_for(plan: Plan, goal: str = "cost", target_rps: float | None = None) -> RecommendRequest:
    """The recommendation for ``plan``: its model, workload and SLOs, across the catalog.
    FP8 variants are considered only when the plan already asks for FP8 weights or KV cache:
    quantizing is the user's call, not a ranking's."""
    fp8 = (plan.precision or "").lower().startswith("fp8") or plan.kv_cache_dtype.lower().startswith("fp8")
    from core.spec.lengths import SHAREGPT_INPUT_MEAN, SHAREGPT_OUTPUT_MEAN

    sharegpt = plan.dataset == "sharegpt" and not plan.lengths_from
    # A lengths file is read by the ranking's worker (it may be large, or bad: not here, on
    # the UI thread), which reports the file's means in the Recommendation's request.
    input_len, output_len = (SHAREGPT_INPUT_MEAN, SHAREGPT_OUTPUT_MEAN) if sharegpt else (plan.input_len, plan.output_len)
    return RecommendRequest(
        model=plan.model,
        # A ShareGPT plan ranks on the bundled shape at its own means, as its Estimate does.
        input_len=input_len,
        output_len=output_len,
        dataset="sharegpt" if sharegpt else "random",
        range_ratio=0.0 if sharegpt or plan.lengths_from else plan.range_ratio,
        ignore_eos=plan.ignore_eos,
        lengths_from=plan.lengths_from,
        constraints=plan.constraints,
        goal=goal,  # type: ignore[arg-type]
        target_rps=target_rps,
        allow_quantization=fp8,
    )


def plan_with(plan: Plan, c: Candidate, quantization_considered: bool = False) -> Plan:
    """``plan`` on the candidate's instance (a SageMaker type replaces any GPU + count). Its
    weights and KV precision follow the row only where FP8 variants were ranked; otherwise
    the rows all used the plan's own."""
    update: dict[str, object] = {"instance": c.instance, "gpu": None, "num_gpus": None}
    if quantization_considered:
        update["precision"] = c.knobs.get("quantization")
        update["kv_cache_dtype"] = c.kv_cache_dtype
    return plan.model_copy(update=update)


def key_of(c: Candidate) -> str:
    """One row and one chart point per instance, layout and precision variant."""
    return f"{c.instance}|{c.tp}x{c.copies}|{c.precision}|{c.kv_cache_dtype}"


def layout_label(c: Candidate) -> str:
    q = " fp8" if "quantization" in c.knobs else ""
    kv = " kv8" if c.kv_cache_dtype != "auto" else ""
    return f"TP{c.tp}×{c.copies}{q}{kv}"


def _num(v: float) -> str:
    """Three significant digits, so a column of capacities lines up without wasting width."""
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


# The estimator's bottleneck names (core/estimate/costmodel.py), short enough for a column
# at 80 columns; the detail line under the table gives them in full.
SHORT_BOTTLENECK = {
    "compute (matmuls)": "matmuls",
    "memory bandwidth (weights)": "weight reads",
    "compute (attention)": "attention",
    "memory bandwidth (KV cache)": "KV-cache reads",
    "tensor-parallel communication": "TP all-reduce",
    "engine overhead (CPU, launches)": "CPU overhead",
}


def short_bottleneck(c: Candidate) -> str:
    """What limits decode, the phase that sets capacity: "KV-cache reads"."""
    first = c.bottleneck.split(";")[0].strip().removeprefix("decode: ")
    return SHORT_BOTTLENECK.get(first, first.replace("_", " "))


def short_instance(name: str) -> str:
    """Every catalog type is a SageMaker one: the "ml." prefix only costs a column 3 cells."""
    return name.removeprefix("ml.")


@dataclass(frozen=True)
class Row:
    key: str
    rank: int
    instance: str  # without "ml."
    layout: str
    count: str  # instances for the target ("" without one)
    usd_per_hour: str  # for that count, or one instance without a target
    usd_per_1m: str
    capacity: str  # "3.78 (1.76–4.74)"
    bottleneck: str
    frontier: bool
    candidate: Candidate


def rows(rec: Recommendation, all_layouts: bool = False, frontier: frozenset[str] = frozenset()) -> list[Row]:
    """The table, best first: each instance's best layout, or every layout."""
    out = []
    for i, c in enumerate(rec.ranked if all_layouts else rec.best_per_instance, 1):
        cost = c.usd_per_hour_total
        out.append(
            Row(
                key=key_of(c),
                rank=i,
                instance=short_instance(c.instance),
                layout=layout_label(c),
                count="" if c.instances_needed is None else str(c.instances_needed),
                usd_per_hour="–" if cost is None else f"{cost:,.2f}",
                usd_per_1m="–" if c.usd_per_1m_output_tokens is None else f"{c.usd_per_1m_output_tokens:.3f}",
                capacity=f"{_num(c.capacity_rps)} ({_num(c.capacity_rps_low)}–{_num(c.capacity_rps_high)})",
                bottleneck=short_bottleneck(c),
                frontier=key_of(c) in frontier,
                candidate=c,
            )
        )
    return out


@dataclass(frozen=True)
class Point:
    key: str
    capacity: float  # req/s of one instance at the SLO knee
    cost: float  # $ per 1M output tokens (on the band's low edge of throughput)
    label: str  # "ml.g6e.xlarge TP1×1"


@dataclass(frozen=True)
class ChartData:
    points: tuple[Point, ...]  # every priced layout
    frontier: tuple[Point, ...]  # by capacity, ascending
    target_rps: float | None
    unpriced: int  # ranked layouts the chart cannot place (no price)

    @property
    def empty(self) -> bool:
        return not self.points

    @property
    def frontier_keys(self) -> frozenset[str]:
        return frozenset(p.key for p in self.frontier)

    @property
    def steps(self) -> list[tuple[float, float]]:
        """The frontier as a staircase: between two neighbours the corner takes the smaller
        capacity and the higher cost of the pair, so every point of the line is attainable
        by some layout (as on the Pareto screen); a straight segment would promise a
        layout in between that does not exist."""
        f = self.frontier
        if not f:
            return []
        out = [(f[0].capacity, f[0].cost)]
        for a, b in zip(f, f[1:]):
            for v in ((min(a.capacity, b.capacity), max(a.cost, b.cost)), (b.capacity, b.cost)):
                if v != out[-1]:
                    out.append(v)
        return out


def frontier(points: list[Point] | tuple[Point, ...]) -> tuple[Point, ...]:
    """The points no other point beats on both capacity (higher) and cost (lower), sorted
    by capacity. Of equal points (the same GPUs in a larger host) the first is kept."""
    best: list[Point] = []
    cheapest = math.inf
    # From the most capacity down: a point is on the frontier when it is cheaper than every
    # point with at least its capacity.
    for p in sorted(points, key=lambda p: (-p.capacity, p.cost)):
        if p.cost < cheapest:
            best.append(p)
            cheapest = p.cost
    return tuple(reversed(best))


def chart_data(rec: Recommendation) -> ChartData:
    pts = [
        Point(key_of(c), c.capacity_rps, c.usd_per_1m_output_tokens, f"{c.instance} {layout_label(c)}")
        for c in rec.ranked
        if c.usd_per_1m_output_tokens is not None and c.capacity_rps > 0
    ]
    return ChartData(tuple(pts), frontier(pts), rec.request.target_rps, sum(1 for c in rec.ranked if c.usd_per_1m_output_tokens is None))


def summary(rec: Recommendation) -> str:
    """One line (it fits 80 columns for the demo plan): what was asked, and how much of the
    catalog answered. The target rate is in its own field beside it."""
    q = rec.request
    return f"{q.model} · {_lengths(q)} · {q.constraints or 'no SLOs'} · {len(rec.best_per_instance)} types ({len(rec.ranked)} layouts)"


def _lengths(q: RecommendRequest) -> str:
    from core.spec.lengths import describe

    # "from file": the path is long for a one-line summary, and the Plan screen shows it.
    return describe(q.dataset, q.input_len, q.output_len, q.range_ratio, q.ignore_eos, short=True, source="file" if q.lengths_from else None)


def detail(c: Candidate, target_rps: float | None) -> str:
    """The highlighted row in full, most needed first (at 80x24 only two lines show)."""
    one = f"${c.usd_per_hour:,.2f}/h each" if c.usd_per_hour is not None else "price unknown"
    sized = (
        f"{c.instances_needed}× for {target_rps:g} req/s at {_num(c.capacity_rps_low)} each"
        if c.instances_needed is not None and target_rps
        else f"{_num(c.capacity_rps)} req/s each"
    )
    knobs = " ".join(f"{k}={v}" for k, v in c.knobs.items())
    price = f"price {c.price_note} · " if c.price_note else ""
    return (
        f"{c.instance} · {c.num_gpus}× {c.gpu} · {one} · {sized}\n"
        f"{c.bottleneck} · c={c.concurrency} at the knee: TTFT {c.ttft_ms:,.0f} ms, E2E {c.e2e_s:.1f} s\n"
        f"{price}vLLM: {knobs}"
    )


def excluded_lines(rec: Recommendation) -> list[str]:
    return [f"{e.instance}: {e.reason}" for e in rec.excluded]
