"""The Pareto screen's chart, table and key: what plotext draws on top of what, the
frontier staircase through its points, round ticks where their values are, one unit per
metric on the axis and in the table, and a table whose columns all fit at the snapshot
sizes."""

from __future__ import annotations

import itertools
from itertools import pairwise

import pytest

from core.results.analysis import direction
from core.spec.slo import parse_constraints
from core.spec.study import PointRow
from tui.app import make_app
from tui.data.pareto_view import Dot, axis, build, frontier_steps
from tui.demo import DEMO_STUDY, demo_sweep_plan, settle
from tui.widgets.pareto_plot import (
    LINE_CHARS,
    LINE_STYLE,
    MARKERS,
    SELECTED,
    ParetoLegend,
    default_palette,
    legend_items,
    wrap_items,
)
from tui.widgets.point_table import PointTable
from support.pareto_ansi import draw
from support.pilot import demo_storage, offline, wait_until  # noqa: F401 (fixtures)

PALETTE = default_palette()


def pt(i: int, rps: float, e2e_ms: float, meets: bool | None = True, source: str = "knee") -> PointRow:
    return PointRow(
        study="s",
        point_id=f"p{i}",
        trial_id=i,
        trial_key="k",
        server_args={"max_num_seqs": 8 * (i + 1)},
        client_args={"max_concurrency": 4 * (i + 1)},
        summary={
            "request_throughput": rps,
            "output_throughput": rps * 500,
            "p99_e2el_ms": e2e_ms,
            "p99_ttft_ms": e2e_ms / 10,
            "p99_itl_ms": 1e6 / max(e2e_ms, 1.0),
        },
        meets_slo=meets,
        source=source,
    )


# A frontier of four (0, 1, 3, 5), dominated points (2, 4), one point missing the SLO on
# the frontier (5) and one imported run.
POINTS = [
    pt(0, 1.0, 12_000),
    pt(1, 1.6, 20_000),
    pt(2, 1.2, 40_000),
    pt(3, 2.0, 35_000),
    pt(4, 1.9, 90_000, meets=False),
    pt(5, 2.6, 70_000, meets=False),
    pt(6, 0.7, 30_000, source="vllm-bench"),
]
SLO = parse_constraints("e2e_latency:p99<60s")


def view_of(points=POINTS, x="request_throughput", y="p99_e2el_ms", predicted=None):
    return build(points, x, y, SLO, predicted)


# ---- the frontier staircase -------------------------------------------------------------
# Each direction pair, each way round (max-min, min-max, max-max, min-min).
@pytest.mark.parametrize(
    "x,y",
    [
        *itertools.permutations(["request_throughput", "p99_e2el_ms"]),
        *itertools.permutations(["tokens_per_s_per_user", "output_throughput"]),
        *itertools.permutations(["p99_itl_ms", "p99_ttft_ms"]),
    ],
)
def test_frontier_steps_pass_through_every_frontier_point_on_the_attainable_side(x, y):
    view = view_of(x=x, y=y)
    assert len(view.frontier) >= 2
    steps = view.steps
    # Every frontier point is a vertex, in order, and the line ends on the last one.
    vertices = [(d.x, d.y) for d in view.frontier]
    it = iter(steps)
    assert all(v in it for v in vertices), (steps, vertices)
    assert steps[0] == vertices[0] and steps[-1] == vertices[-1]
    # Only horizontal and vertical runs.
    for (ax, ay), (bx, by) in pairwise(steps):
        assert ax == bx or ay == by
    # Every corner is matched or beaten by a frontier point: the line promises nothing
    # that no measured configuration delivers.
    sx = 1 if direction(x) == "max" else -1
    sy = 1 if direction(y) == "max" else -1
    for cx, cy in steps:
        assert any(sx * d.x >= sx * cx and sy * d.y >= sy * cy for d in view.frontier), (cx, cy)


def test_frontier_steps_of_one_point_and_of_none():
    assert frontier_steps([], "request_throughput", "p99_e2el_ms") == []
    assert frontier_steps([Dot("a", 1.0, 2.0)], "request_throughput", "p99_e2el_ms") == [(1.0, 2.0)]


# ---- what plotext draws ----------------------------------------------------------------
# ``draw`` configures plotext and parses its output (ANSI) back into cells; ``Chart.cell_of``
# maps a point to its cell with plotext's arithmetic on the fixed limits, and the tests
# check that the axes sit where that arithmetic puts the canvas, so a wrong mapping fails.
MARKS = {g for g, _ in MARKERS.values()}
SOLID_MARKS = MARKS - {"○"}  # a measurement's glyphs; "○" is a prediction


def test_the_canvas_is_where_plotext_draws_it():
    for size in ((76, 11), (58, 30), (120, 40)):
        chart = draw(view_of(), None, *size)
        left, top, w, h = chart.canvas
        assert len(chart.lines) == size[1] and all(len(line) == size[0] for line in chart.lines)
        assert top == 0 and left + w == size[0] and h == size[1] - 2
        axis_row = chart.lines[top + h]
        assert axis_row[left - 1] == "└" and set(axis_row[left:]) <= set("─┬")
        assert all(line[left - 1] in "│┤" for line in chart.lines[top : top + h])


@pytest.mark.parametrize("size", [(76, 11), (96, 14), (58, 30)])
def test_every_point_is_drawn_over_the_frontier_line_and_the_knee_and_selection_on_top(size):
    view = view_of(predicted={p.point_id: p.model_copy(update={"summary": {**p.summary}}) for p in POINTS[:4]})
    chart = draw(view, None, *size)
    for d in (*view.measured, *view.failed_slo, *view.imported):
        # Each point shows a marker, never the line (or a prediction sitting on it).
        assert chart.char(d.x, d.y) in SOLID_MARKS, d
    for d in view.frontier:
        assert chart.char(d.x, d.y) == MARKERS[view.marker(d.key)][0]
    assert chart.char(view.knee.x, view.knee.y) == "◆"
    # The staircase is there between the points (not hidden under anything).
    left, top, _, h = chart.canvas
    assert sum(ch in LINE_CHARS for line in chart.lines[top : top + h] for ch in line[left:]) >= 3

    cursor = PALETTE(SELECTED)
    other = next(d for d in view.measured if d.key != view.knee.key)
    chart = draw(view, other.key, *size)
    cell = chart.at(other.x, other.y)
    assert (cell.char, cell.fg, cell.bg) == (MARKERS[view.marker(other.key)][0], cursor.fg, cursor.bg)
    assert chart.char(view.knee.x, view.knee.y) == "◆"
    # Nothing else has the cursor's background.
    assert sum(c.bg == cursor.bg for row in chart.cells for c in row) == 1
    # Selecting the knee keeps its diamond, in the selection's colours.
    chart = draw(view, view.knee.key, *size)
    cell = chart.at(view.knee.x, view.knee.y)
    assert (cell.char, cell.bg) == ("◆", cursor.bg)


def test_a_prediction_never_covers_the_measurement_it_predicts():
    view = view_of(predicted={p.point_id: p for p in POINTS})  # predictions exactly on the points
    chart = draw(view, None, 80, 12)
    for d in view.measured:
        assert chart.char(d.x, d.y) != "○"


def test_the_selected_points_prediction_shows_its_error_band_as_a_dotted_cross(monkeypatch):
    """Issue 11 item 5: a predicted ring carries its band (vLLM's held-out residuals) on
    both axes; the selected point's is drawn through its ring, under every marker, and an
    unselected prediction draws none."""
    from core.estimate import bands
    from core.estimate.bands import summary_band

    # An engine with a TTFT band of its own and nothing else (the shipped file's vLLM has four).
    shipped = bands.table()
    own = {"low_ratio": 0.45, "high_ratio": 3.96, "rows": 223, "sources": 15, "held_out_coverage": 0.928}
    monkeypatch.setattr(bands, "table", lambda: {**shipped, "by_engine": {"vllm": {"ttft_ms": own}}})

    off = {p.point_id: p.model_copy(update={"summary": {k: v * 0.8 for k, v in p.summary.items()}}) for p in POINTS}
    view = view_of(predicted=off)
    guess = next(d for d in view.predicted if d.key == "p1")
    assert guess.x_band == summary_band("request_throughput", guess.x, "vllm") and guess.x_band[0] < guess.x < guess.x_band[1]
    assert guess.y_band == summary_band("p99_e2el_ms", guess.y, "vllm") and guess.y_band[0] < guess.y < guess.y_band[1]
    assert all(d.x_band is None for d in view.measured)
    # The study's engine picks the band where an engine has its own (vLLM's TTFT) ...
    ttft = {
        e: next(d for d in build(POINTS, "request_throughput", "p99_ttft_ms", SLO, off, engine=e).predicted if d.key == "p1")
        for e in ("vllm", "sglang")
    }
    assert ttft["vllm"].y_band == summary_band("p99_ttft_ms", ttft["vllm"].y, "vllm") != ttft["sglang"].y_band
    assert ttft["sglang"].y_band == summary_band("p99_ttft_ms", ttft["sglang"].y, None)  # ... the pooled band elsewhere
    # ... and the study's model kind before its engine, where the kind has its own (MoE req/s).
    moe = next(d for d in build(POINTS, "request_throughput", "p99_e2el_ms", SLO, off, engine="vllm", kind="moe").predicted if d.key == "p1")
    assert moe.x_band == summary_band("request_throughput", moe.x, "vllm", "moe") != guess.x_band
    plain, chart = draw(view, None, 100, 30), draw(view, "p1", 100, 30)
    c, r = chart.cell_of(guess.x, guess.y)
    row = "".join(chart.lines[r])
    col = "".join(line[c] for line in chart.lines)
    assert "┈" in row and "┊" in col and not {"┈", "┊"} & set("".join(plain.lines))
    lo_c, _ = chart.cell_of(guess.x_band[0], guess.y)
    assert chart.lines[r][max(lo_c, chart.canvas[0])] in "┈○●◆×◇─│" and lo_c < c
    for d in view.measured:  # the band never covers a measurement
        assert chart.char(d.x, d.y) not in "┈┊"


@pytest.mark.parametrize(
    "x,y", [("request_throughput", "p99_e2el_ms"), ("p99_e2el_ms", "request_throughput"), ("tokens_per_s_per_user", "output_throughput")]
)
@pytest.mark.parametrize("size", [(76, 11), (58, 30), (120, 40)])
def test_the_drawn_staircase_runs_unbroken_through_every_frontier_point(x, y, size):
    view = view_of(x=x, y=y)
    chart = draw(view, None, *size)
    verts = [chart.cell_of(vx, vy) for vx, vy in view.steps]
    frontier = {chart.cell_of(d.x, d.y) for d in view.frontier}
    assert set(verts) >= frontier
    for (c0, r0), (c1, r1) in pairwise(verts):
        assert c0 == c1 or r0 == r1  # runs only: horizontal or vertical
        cells = [(c, r0) for c in range(min(c0, c1), max(c0, c1) + 1)] if r0 == r1 else [(c0, r) for r in range(min(r0, r1), max(r0, r1) + 1)]
        for c, r in cells:
            ch = chart.lines[r][c]
            # The line, or a point's marker over it: no gap, no other series on top.
            assert ch in LINE_CHARS or ch in SOLID_MARKS, (c, r, ch, chart.lines[r])
            if ch in SOLID_MARKS:
                assert (c, r) in {chart.cell_of(d.x, d.y) for d in (*view.measured, *view.failed_slo, *view.imported)}
        if r0 == r1 and abs(c1 - c0) > 1:  # a horizontal run reads as one
            assert chart.lines[r0][(c0 + c1) // 2] in "─" + "".join(SOLID_MARKS)
        if c0 == c1 and abs(r1 - r0) > 1:
            assert chart.lines[(r0 + r1) // 2][c0] in "│" + "".join(SOLID_MARKS)


def test_the_slo_line_is_labelled_with_its_bound_and_covers_no_marker():
    view = view_of()
    chart = draw(view, None, 80, 16)
    _, r = chart.cell_of(POINTS[0].summary["request_throughput"], 60_000)
    assert "SLO 60 s" in chart.lines[r]
    assert chart.lines[r].count("╌") > 20  # dashed, across the canvas
    for d in (*view.measured, *view.failed_slo):
        assert chart.char(d.x, d.y) not in "╌╎"


def test_the_chart_follows_the_theme():
    view = view_of()
    for theme in ("textual-dark", "textual-light"):
        pal = default_palette(theme)
        chart = draw(view, None, 80, 16, palette=pal)
        assert chart.at(view.knee.x, view.knee.y).fg == pal(MARKERS["knee"][1]).fg
        p0 = view.points["p0"].summary
        assert chart.at(p0["request_throughput"], p0["p99_e2el_ms"]).fg == pal(MARKERS["frontier"][1]).fg
        line = {c.fg for row in chart.cells for c in row if c.char in "┌┐└┘" and c.fg != pal("$foreground 60%").fg}
        assert line == {pal(LINE_STYLE).fg}


# ---- axes and units ---------------------------------------------------------------------
def _number(s: str) -> float:
    return float(s.replace(",", ""))


def test_ticks_are_round_numbers_where_their_values_are():
    for size in ((80, 16), (58, 30), (120, 9)):
        chart = draw(view_of(), None, *size)
        left, top, _, h = chart.canvas
        ylabels = {r: line[: left - 1].strip() for r, line in enumerate(chart.lines[top : top + h], top) if line[: left - 1].strip()}
        xlabels = chart.lines[-1].split()
        # Every tick asked for is drawn whole (plotext drops an x label that collides).
        assert sorted(ylabels.values(), key=_number) == chart.ylabels and xlabels == chart.xlabels
        assert len(ylabels) >= 2 and len(xlabels) >= 2
        for s in [*ylabels.values(), *xlabels]:
            v = _number(s)
            assert any(abs(v / m - round(v / m)) < 1e-9 for m in (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25)), s
        # A label sits on its value's row, beside a tick mark; no two on adjacent rows.
        for r, s in ylabels.items():
            assert chart.lines[r][left - 1] == "┤"
            assert chart.cell_of(1.0, _number(s) * chart.ay.scale)[1] == r
        assert all(b - a >= 2 for a, b in pairwise(sorted(ylabels)))
        for s in xlabels:
            c, _ = chart.cell_of(_number(s) * chart.ax.scale, 1.0)
            assert chart.lines[-2][c] == "┬" and s in chart.lines[-1][max(0, c - len(s)) : c + len(s)]


def test_one_unit_per_metric_on_axis_table_and_detail():
    # Tens of seconds in seconds, sub-second latencies in ms, whichever axis shows them.
    assert axis("p99_e2el_ms", [15_000, 161_000]).label == "E2E p99 (s)"
    assert axis("p99_ttft_ms", [120, 5_790]).label == "TTFT p99 (ms)"
    assert axis("p99_e2el_ms", [15_000, 161_000]).fmt(37_542.4) == "37.5"
    assert axis("p99_ttft_ms", [120, 5_790]).fmt(5_790.3, unit=True) == "5,790 ms"
    assert axis("request_throughput", [0.5, 2.14]).fmt(1.7784) == "1.78"
    # Swapping the axes leaves the unit alone: it follows the study, not the view.
    assert view_of().ay.label == view_of(x="p99_e2el_ms", y="request_throughput").ax.label


async def test_table_and_chart_share_units_and_every_header_fits(demo_storage):
    for size in ((80, 24), (100, 30), (120, 36)):
        app = make_app(demo_sweep_plan(), storage=demo_storage, study=DEMO_STUDY)
        async with app.run_test(size=size) as pilot:
            await pilot.press("f4")
            screen = app.screen
            await wait_until(pilot, lambda: screen.view is not None)
            await settle(pilot)
            for _ in range(3):  # the three preset views
                view, table = screen.view, screen.query_one(PointTable)
                labels = [c.label.plain for c in table.ordered_columns]
                assert labels[1:3] == [view.ax.label, view.ay.label]
                # The titles: the y title heads the chart, the x title ends the row under
                # the x tick labels; each whole, in the table's units.
                ytitle, xtitle = screen.plot.titles
                assert ytitle.startswith(f"{view.ay.label} · {view.ay.better_label}"), (size, ytitle)
                assert xtitle.rstrip().endswith(f"{view.ax.label} · {view.ax.better_label}"), (size, xtitle)
                assert len(xtitle) == screen.plot.size.width and xtitle.startswith(" ")
                chart = screen.plot.chart
                assert chart is not None and chart.xlabels == chart.lines[-1].split(), size
                # Each y title sits right above the chart's top row, the x title right under it.
                canvas = screen.plot.canvas.region
                assert screen.plot.query_one("#pareto-ytitle").region.bottom == canvas.y
                assert screen.plot.query_one("#pareto-xtitle").region.y == canvas.bottom
                # The knee's row shows its values in the axes' units; each row starts with
                # its point's glyph on the chart.
                row = table.get_row(view.knee.key)
                assert [c.plain for c in row[1:3]] == [view.ax.fmt(view.knee.x), view.ay.fmt(view.knee.y)]
                for key in table.rows:
                    assert table.get_row(key)[0].plain == MARKERS[view.marker(key.value)][0]
                # Every column is whole on screen: no header cut, nothing scrolled off.
                assert table.virtual_size.width <= table.scrollable_content_region.width, size
                header = "".join(s.text for s in table.render_line(0))
                for label in labels:
                    assert label in header, (size, label, header)
                await pilot.press("v")
                await settle(pilot)


async def test_the_table_keeps_rows_on_an_80x24_terminal(demo_storage):
    app = make_app(demo_sweep_plan(), storage=demo_storage, study=DEMO_STUDY)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f4")
        screen = app.screen
        await wait_until(pilot, lambda: screen.view is not None)
        await settle(pilot)
        table = screen.query_one(PointTable)
        # A header and the whole frontier at least (it used to get no rows at all).
        assert table.scrollable_content_region.height >= 1 + len(screen.view.frontier)
        assert screen.plot.size.height >= 10 and screen.plot.chart.canvas[3] >= 6
        assert screen.query_one(ParetoLegend).size.height == 1


# ---- the key ----------------------------------------------------------------------------
def test_the_legend_wraps_between_items_only():
    view = view_of(predicted={p.point_id: p for p in POINTS})
    items = legend_items(view, next(d.key for d in view.measured if d != view.knee))
    texts = [i.plain for i in items]
    assert {"●─ frontier", "● measured", "× misses SLO", "◇ imported", "○ predicted", "◆ knee", "● selected", "╌ SLO"} <= set(texts)
    for width in range(12, 130):
        lines = [line.plain for line in wrap_items(items, width)]
        assert "  ".join(lines) == "  ".join(texts)  # nothing lost, nothing split
        for line in lines:
            assert len(line) <= width or line in texts  # only an item wider than the line overflows
            rest = line
            while rest:  # each line is whole items, two spaces apart
                head = next(t for t in texts if rest.startswith(t))
                rest = rest[len(head) :].removeprefix("  ")


def test_the_legend_names_only_what_is_drawn():
    plain = [i.plain for i in legend_items(view_of(points=POINTS[:4]), None)]
    assert not any("imported" in t or "misses" in t or "predicted" in t or "selected" in t for t in plain)


def test_each_point_has_one_marker_kind():
    view = view_of()
    kinds = {k: view.marker(k) for k in view.points}
    assert kinds[view.knee.key] == "knee"
    assert kinds["p5"] == "failed"  # on the frontier but over the SLO: drawn as a miss
    assert kinds["p6"] == "imported" and kinds["p2"] == "measured"
    assert {kinds[d.key] for d in view.frontier} <= {"knee", "frontier", "failed"}


@pytest.mark.parametrize(
    "points", [POINTS[:1], [pt(0, 1.0, 5_000), pt(1, 1.0, 5_000)], [pt(0, 1.0, 0.0), pt(1, 3.0, 0.0)]], ids=["one point", "two alike", "zero latency"]
)
@pytest.mark.parametrize("size", [(24, 4), (40, 7), (120, 38)])
def test_degenerate_studies_still_draw(points, size):
    view = view_of(points=points)
    chart = draw(view, view.knee.key, *size)
    assert chart.char(view.knee.x, view.knee.y) == "◆"
    assert all(len(line) == size[0] for line in chart.lines) and len(chart.lines) == size[1]
    assert chart.xlabels == chart.lines[-1].split()
