"""Direction-aware Pareto frontier, the knee, best-under-constraints, metric resolution."""

import math

import pytest

from core.errors import BadInput
from core.results.analysis import best, direction, knee, metric_value, pareto, resolve_metric
from core.spec.slo import parse_constraints
from core.spec.study import PointRow


def pt(i, tput, p99_ms, conc=8, tp=1, status="ok"):
    return PointRow(
        study="s",
        point_id=f"p{i}",
        trial_id=i,
        trial_key=str(tp),
        server_args={"tensor_parallel_size": tp},
        client_args={"max_concurrency": conc},
        status=status,
        summary={"output_throughput": tput, "p99_e2el_ms": p99_ms, "mean_ttft_ms": p99_ms / 10},
    )


POINTS = [
    pt(0, 100, 1000),
    pt(1, 200, 1500),
    pt(2, 150, 3000),  # dominated by 1
    pt(3, 400, 4000),
    pt(4, 420, 20000),
    pt(5, 900, 900, status="failed"),  # failed points never count
    pt(6, 390, 4000),  # dominated by 3
]


def test_directions():
    assert direction("output_throughput") == "max" and direction("p99_e2el_ms") == "min"
    assert direction("request_goodput") == "max" and direction("tokens_per_s_per_user") == "max"
    with pytest.raises(BadInput):
        direction("colour")


def test_pareto_is_direction_aware_on_either_axis():
    front = pareto(POINTS, "output_throughput", "p99_e2el_ms")
    assert [p.point_id for p in front] == ["p0", "p1", "p3", "p4"]
    # Latency on X: the same set (llm-optimizer's dashboard gets this wrong on Y).
    swapped = pareto(POINTS, "p99_e2el_ms", "output_throughput")
    assert {p.point_id for p in swapped} == {"p0", "p1", "p3", "p4"}
    # Two throughputs: only the best of both survives.
    assert [p.point_id for p in pareto(POINTS, "output_throughput", "output_throughput")] == ["p4"]


def test_knee_is_where_the_trade_turns():
    front = pareto(POINTS, "output_throughput", "p99_e2el_ms")
    assert knee(front, "output_throughput", "p99_e2el_ms").point_id == "p3"
    assert knee(front[:1], "output_throughput", "p99_e2el_ms").point_id == "p0"
    assert knee([], "output_throughput", "p99_e2el_ms") is None


def test_best_under_constraints_honours_units_and_operators():
    assert best(POINTS, "throughput").point_id == "p4"
    assert best(POINTS, "throughput", parse_constraints("e2e_latency:p99<=4s")).point_id == "p3"
    assert best(POINTS, "throughput", parse_constraints("e2e_latency:p99<4s")).point_id == "p1"
    assert best(POINTS, "latency").point_id == "p0"
    assert best(POINTS, "throughput", parse_constraints("e2e_latency:p99<1ms")) is None


def test_metric_resolution_and_derived_metrics():
    assert resolve_metric("ttft") == "mean_ttft_ms"
    assert resolve_metric("e2e_latency:p99") == "p99_e2el_ms"
    assert resolve_metric("ttft:p50") == "median_ttft_ms"
    assert resolve_metric("throughput") == "output_throughput"
    p = pt(9, 800, 100, conc=16, tp=4)
    assert metric_value(p, "tokens_per_s_per_user") == 50 and metric_value(p, "output_throughput_per_gpu") == 200
    nan = pt(10, math.nan, 1)
    assert metric_value(nan, "output_throughput") is None
