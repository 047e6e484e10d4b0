"""The Recommend screen (issue 13, item 3): the catalog-wide ranking in the real app, driven
with Pilot, and its data shaping (tui/data/recommend.py) and chart on their own."""

from __future__ import annotations

import pytest
from textual.widgets import Input, Select

from core.recommend import Candidate, Recommendation, RecommendRequest, recommend
from core.spec.plan import demo_plan
from tui.app import make_app
from tui.data.recommend import (
    ChartData,
    Point,
    chart_data,
    detail,
    frontier,
    parse_target,
    plan_with,
    request_for,
    rows,
    short_bottleneck,
    summary,
)
from tui.demo import settle
from tui.screens.estimate import EstimateScreen
from tui.screens.recommend import RecommendScreen
from support.pareto_ansi import parse_ansi
from tui.widgets.recommend_plot import draw, log_ticks_125
from support.pilot import offline, wait_until  # noqa: F401 (fixtures)


def _ready(app, goal: str | None = None) -> bool:
    s = app.screen
    return (
        isinstance(s, RecommendScreen)
        and s.rec is not None
        and s.table.row_count > 0
        and not s.table.loading
        and (goal is None or s.rec.request.goal == goal)
    )


# ---- the screen ------------------------------------------------------------------------


async def test_open_rank_change_goal_and_choose_an_instance_for_the_plan():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f6")
        await wait_until(pilot, lambda: _ready(app), what="the ranked table")
        screen = app.screen
        # The plan's model, workload, SLOs and target rate (5 req/s) went into the request.
        req = screen.rec.request
        assert (req.model, req.input_len, req.output_len, req.constraints, req.target_rps, req.goal) == (
            "Qwen/Qwen3-4B",
            1024,
            512,
            "e2e_latency:p99<60s",
            5.0,
            "cost",
        )
        assert screen.query_one("#rec-target", Input).value == "5"
        # Goal cost with a target: the cheapest fleet first, one row per instance type.
        shown = [r.candidate for r in screen._rows.values()]
        assert screen.table.row_count == len(screen.rec.best_per_instance) == len(shown)
        totals = [c.usd_per_hour_total for c in shown]
        assert totals == sorted(totals)
        assert "Excluded (" in str(screen.query_one("#rec-excluded").title)
        assert screen.plot.query_one("#rec-canvas").data is screen.chart and not screen.chart.empty

        # The goal selector: o cycles cost -> throughput, and the ranking follows.
        await pilot.press("o")
        await wait_until(pilot, lambda: _ready(app, "throughput"), what="the throughput ranking")
        assert screen.query_one("#rec-goal", Select).value == "throughput"
        lows = [r.candidate.capacity_rps_low for r in screen._rows.values()]
        assert lows == sorted(lows, reverse=True)

        # Enter on a row makes its instance the plan's hardware.
        before = app.plan.instance
        table = screen.table
        target = next(i for i, r in enumerate(screen._rows.values()) if r.candidate.instance != before)
        table.move_cursor(row=target)
        await pilot.pause()
        chosen = screen._rows[screen.selected_key()].candidate.instance
        await pilot.press("enter")
        await pilot.pause()
        assert app.plan.instance == chosen != before
        assert app.plan.gpu is None and app.plan.num_gpus is None
        assert app.plan.model == "Qwen/Qwen3-4B"  # nothing else of the plan changed
        # The same request: choosing does not rank again, and the cursor stays on the row.
        await settle(pilot)
        assert screen.rec.request.goal == "throughput" and screen.selected_key() is not None
        assert screen._rows[screen.selected_key()].candidate.instance == chosen

        # Estimate now works on the chosen instance.
        await pilot.press("2")
        await settle(pilot)
        assert isinstance(app.screen, EstimateScreen) and chosen in app.screen.view.title


async def test_a_plan_without_a_rate_takes_the_typed_target_and_rejects_a_bad_one():
    app = make_app(demo_plan().model_copy(update={"min_request_rate": None}))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f6")
        await wait_until(pilot, lambda: _ready(app), what="the ranked table")
        screen = app.screen
        inp = screen.query_one("#rec-target", Input)
        assert inp.value == "" and screen.rec.request.target_rps is None
        assert all(r.count == "" for r in screen._rows.values())  # nothing to size for

        inp.value = "12"
        await wait_until(pilot, lambda: _ready(app) and screen.rec.request.target_rps == 12.0, what="target 12")
        first = next(iter(screen._rows.values())).candidate
        assert first.instances_needed * first.capacity_rps_low >= 12

        inp.value = "lots"
        await settle(pilot)
        assert "must be a number" in str(screen.query_one("#rec-note").render())
        assert screen.rec.request.target_rps == 12.0  # the last good ranking stays


async def test_all_layouts_and_excluded_toggles():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f6")
        await wait_until(pilot, lambda: _ready(app), what="the ranked table")
        screen = app.screen
        best = screen.table.row_count
        await pilot.press("a")
        await pilot.pause()
        assert screen.table.row_count == len(screen.rec.ranked) > best
        excluded = screen.query_one("#rec-excluded")
        assert excluded.collapsed
        await pilot.press("e")
        await pilot.pause()
        assert not excluded.collapsed
        assert "price unknown" in str(screen.query_one("#rec-excluded-list").render())


async def test_an_unknown_model_is_reported_not_raised():
    app = make_app(demo_plan().model_copy(update={"model": "no-such-org/no-such-model-xyz"}))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("f6")
        await settle(pilot)
        screen = app.screen
        assert "cannot recommend" in str(screen.query_one("#rec-summary").render())
        assert screen.table.row_count == 0 and not screen.table.loading


# ---- data shaping ----------------------------------------------------------------------


def cand(
    instance: str,
    tp: int = 1,
    copies: int = 1,
    cap: float = 2.0,
    price: float | None = 1.0,
    per_m: float | None = 0.5,
    needed: int | None = None,
    **kw,
) -> Candidate:
    base = dict(
        instance=instance,
        gpu="L4",
        num_gpus=tp * copies,
        tp=tp,
        copies=copies,
        precision="bf16",
        kv_cache_dtype="auto",
        capacity_rps=cap,
        capacity_rps_low=cap / 2,
        capacity_rps_high=cap * 1.2,
        output_tok_per_s=cap * 500,
        concurrency=32,
        ttft_ms=800.0,
        e2e_s=20.0,
        instances_needed=needed,
        usd_per_hour=price,
        usd_per_hour_total=None if price is None else price * (needed or 1),
        usd_per_1m_output_tokens=per_m,
        bottleneck="decode: memory bandwidth (KV cache); prefill: compute (matmuls); batch limited by kv_cache",
        knobs={"tensor_parallel_size": tp, "data_parallel_size": copies},
    )
    base.update(kw)
    return Candidate(**base)


@pytest.mark.parametrize(
    "text,value,error",
    [
        ("", None, None),
        ("  ", None, None),
        ("5", 5.0, None),
        (" 2.5 ", 2.5, None),
        ("abc", None, "must be a number"),
        ("0", None, "must be positive"),
        ("-3", None, "must be positive"),
        ("inf", None, "must be positive"),
        ("nan", None, "must be positive"),
    ],
)
def test_parse_target(text, value, error):
    v, e = parse_target(text)
    assert v == value
    assert (e is None) if error is None else (error in e)


def test_request_for_takes_the_plan_and_considers_fp8_only_when_the_plan_does():
    plan = demo_plan().model_copy(update={"input_len": 2048, "output_len": 128, "constraints": "ttft:p95<500ms"})
    req = request_for(plan, "latency", 3.0)
    assert (req.model, req.input_len, req.output_len, req.constraints, req.goal, req.target_rps) == (
        plan.model,
        2048,
        128,
        "ttft:p95<500ms",
        "latency",
        3.0,
    )
    assert req.instances == "all" and not req.allow_quantization
    assert request_for(plan.model_copy(update={"kv_cache_dtype": "fp8"})).allow_quantization
    assert request_for(plan.model_copy(update={"precision": "fp8"})).allow_quantization


def test_plan_with_moves_the_plan_to_the_instance():
    plan = demo_plan().model_copy(update={"instance": None, "gpu": "H100-SXM", "num_gpus": 8})
    c = cand("ml.g6e.xlarge")
    p = plan_with(plan, c)
    assert (p.instance, p.gpu, p.num_gpus) == ("ml.g6e.xlarge", None, None)
    assert p.precision == plan.precision and p.kv_cache_dtype == plan.kv_cache_dtype
    q = plan_with(plan, cand("ml.p5.48xlarge", kv_cache_dtype="fp8", knobs={"quantization": "fp8"}), True)
    assert (q.precision, q.kv_cache_dtype) == ("fp8", "fp8")


def test_frontier_keeps_what_nothing_beats_on_both_axes():
    pts = [
        Point("a", 1, 1.0, ""),
        Point("b", 4, 0.8, ""),
        Point("c", 4, 0.9, ""),
        Point("d", 10, 2.0, ""),
        Point("e", 10, 2.0, ""),
        Point("f", 3, 0.8, ""),
        Point("g", 20, 0.5, ""),
    ]
    assert [p.key for p in frontier(pts)] == ["g"]  # g is cheapest and largest: it beats them all
    pts = pts[:-1]
    # b beats a, c and f (f: less capacity at the same cost); d beats e only by coming first.
    assert [p.key for p in frontier(pts)] == ["b", "d"]
    data = ChartData(tuple(pts), frontier(pts), None, 0)
    # A staircase whose corner takes the smaller capacity and the higher cost of the pair.
    assert data.steps == [(4, 0.8), (4, 2.0), (10, 2.0)]
    assert frontier([]) == () and ChartData((), (), None, 0).steps == []


def _rec(*cands: Candidate, target: float | None = 5.0) -> Recommendation:
    return Recommendation(RecommendRequest("Qwen/Qwen3-4B", target_rps=target), ranked=list(cands))


def test_rows_chart_and_detail_from_a_recommendation():
    a1 = cand("ml.g6e.xlarge", cap=3.78, price=2.61, per_m=0.802, needed=3)
    b4 = cand("ml.g6.12xlarge", tp=1, copies=4, cap=4.35, price=5.75, per_m=1.539, needed=3)
    b2 = cand("ml.g6.12xlarge", tp=2, copies=2, cap=4.47, price=5.75, per_m=1.497, needed=3)
    unpriced = cand("ml.p5e.48xlarge", tp=1, copies=8, cap=156.5, price=None, per_m=None, needed=1)
    rec = _rec(a1, b4, b2, unpriced)
    data = chart_data(rec)
    assert len(data.points) == 3 and data.unpriced == 1 and data.target_rps == 5.0
    assert [p.label for p in data.frontier] == ["ml.g6e.xlarge TP1×1", "ml.g6.12xlarge TP2×2"]

    best = rows(rec, frontier=data.frontier_keys)
    assert [r.instance for r in best] == ["g6e.xlarge", "g6.12xlarge", "p5e.48xlarge"]  # one per type
    r = best[0]
    assert (r.rank, r.layout, r.count, r.usd_per_hour, r.usd_per_1m, r.capacity, r.bottleneck, r.frontier) == (
        1,
        "TP1×1",
        "3",
        "7.83",
        "0.802",
        "3.78 (1.89–4.54)",
        "KV-cache reads",
        True,
    )
    assert best[1].layout == "TP1×4" and not best[1].frontier
    assert (best[2].usd_per_hour, best[2].usd_per_1m, best[2].capacity) == ("–", "–", "156 (78.2–188)")
    every = rows(rec, all_layouts=True)
    assert [x.layout for x in every] == ["TP1×1", "TP1×4", "TP2×2", "TP1×8"] and len({x.key for x in every}) == 4

    text = detail(a1, 5.0)
    assert "ml.g6e.xlarge · 1× L4 · $2.61/h each · 3× for 5 req/s at 1.89 each" in text
    assert "decode: memory bandwidth (KV cache)" in text and "tensor_parallel_size=1" in text
    assert "3.78 req/s each" in detail(a1, None)
    assert short_bottleneck(cand("x", bottleneck="decode: tensor-parallel communication; prefill: x")) == "TP all-reduce"
    assert short_bottleneck(cand("x", bottleneck="kv_cache")) == "kv cache"
    assert summary(rec) == "Qwen/Qwen3-4B · 1024/512 tok · no SLOs · 3 types (4 layouts)"


def test_rows_of_the_real_catalog_match_the_recommendation():
    rec = recommend(request_for(demo_plan(), "cost", 5.0))
    data = chart_data(rec)
    best = rows(rec, frontier=data.frontier_keys)
    assert [r.candidate for r in best] == rec.best_per_instance
    assert len(rows(rec, all_layouts=True)) == len(rec.ranked) == len(data.points)  # goal cost: all priced
    assert data.frontier and all(p in data.points for p in data.frontier)
    # No point off the frontier beats a frontier point on both axes.
    for f in data.frontier:
        assert not any(p.capacity > f.capacity and p.cost < f.cost for p in data.points)


# ---- the chart -------------------------------------------------------------------------


def test_log_ticks_125():
    assert log_ticks_125(0.8, 130) == [1, 2, 5, 10, 20, 50, 100]
    assert log_ticks_125(0.55, 0.95) == []


def test_chart_draws_every_point_the_frontier_and_the_target():
    pts = [Point("a", 1, 1.0, ""), Point("b", 4, 0.8, ""), Point("c", 30, 2.0, ""), Point("d", 12, 3.0, "")]
    data = ChartData(tuple(pts), frontier(pts), 5.0, 0)
    text = "\n".join("".join(c.char for c in row) for row in parse_ansi(draw(data, "d", 60, 14)))
    assert text.count("●") == 2  # b and c, the frontier
    assert text.count("○") == 2  # a, and d (selected: drawn with its glyph on the cursor's colours)
    assert "╎" in text  # the target rate
    assert "─" in text or "│" in text  # the staircase between b and c
    for label in ("1", "2", "5", "10", "20"):
        assert label in text.splitlines()[-1]
    # One point, or all points at one cost: still a chart, not an exception.
    one = ChartData((Point("a", 3, 0.7, ""),), (Point("a", 3, 0.7, ""),), None, 0)
    assert "●" in "".join(c.char for row in parse_ansi(draw(one, None, 40, 8)) for c in row)


# ---- the Measure action's data (tui/data/recommend_measure.py; the flow: test_tui_recommend_measure.py)


@pytest.mark.parametrize(
    "n, role, region, msg",
    [
        ("x", "arn:aws:iam::123456789012:role/R", "us-east-1", "N must be a whole number, got 'x'"),
        ("0", "arn:aws:iam::123456789012:role/R", "us-east-1", "N must be at least 1"),
        ("2", " ", "us-east-1", "enter the SageMaker execution role"),
        ("2", "not-an-arn", "us-east-1", "bad role 'not-an-arn'"),
        ("2", "arn:aws:iam::123456789012:role/R", "us-nowhere-1", "unknown region 'us-nowhere-1'"),
    ],
)
def test_measure_dialog_answers_are_checked_by_core(n, role, region, msg, tmp_path):
    from tui.data.recommend_measure import measure_options

    opts, why = measure_options(n, role, region, storage=str(tmp_path / "k.db"))
    assert opts is None and msg in why and "--" not in why  # the dialog's words, not the CLI's flags


def test_measure_defaults_and_progress_stages(tmp_path):
    from tui.data.recommend_measure import Progress, measure_options

    opts, why = measure_options(
        "", "arn:aws:iam::123456789012:role/R", "", storage=str(tmp_path / "k.db"), poll_interval_s=0.5, overrides={"max_concurrency": 4}
    )
    assert why is None and (opts.n, opts.region, opts.poll_interval_s, opts.max_concurrency) == (3, "us-east-1", 0.5, 4)
    p = Progress(stages={"knee-m1-1-g6-xlarge": "planned"}, labels={"knee-m1-1-g6-xlarge": "g6.xlarge TP1×1"})
    seen = []
    for line in (
        "deploying knee-m1-1-g6-xlarge (ml.g6.xlarge, TP1 x 1)",
        "ready: knee-m1-1-g6-xlarge after 3 s",
        "benchmarking knee-m1-1-g6-xlarge (ml.g6.xlarge, TP1 x 1): SLA search from c=4",
        "measuring c=4 (16 requests)",
        "deleting knee-m1-1-g6-xlarge",
        "deleted knee-m1-1-g6-xlarge (4 resource(s))",
        "deploying knee-other-2",
    ):
        p.read(line)
        seen.append(p.stages["knee-m1-1-g6-xlarge"])
    assert seen == ["deploying", "ready", "benchmarking", "benchmarking", "deleting", "deleted", "deleted"]
    assert p.lines() == ["deleted      g6.xlarge TP1×1  knee-m1-1-g6-xlarge"]
