"""The Recommend screen: which instance type, which layout (TP × copies) and how many, at
what cost, across the whole catalog (``core.recommend``), for the plan's model, workload,
SLOs and target rate.

A ranked table (each instance's best layout, or every layout with ``a``), a chart of $ per
1M output tokens against capacity with the frontier, the highlighted row in full, and the
excluded instances with their reasons. Enter puts the highlighted row's instance into the
plan; Estimate, Sweep and Deploy then work on it. The ranking takes a fraction of a second,
but it runs in a worker so typing a target never stutters. ``m`` measures the top N rows on
SageMaker itself and ranks them again by what it measured (tui/screens/recommend_measure.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Collapsible, DataTable, Input, Label, Select, Static

from core.errors import KneeError
from core.recommend import Recommendation, RecommendRequest, recommend
from core.spec.plan import Plan
from tui.data.recommend import (
    GOALS,
    ChartData,
    Row,
    chart_data,
    detail,
    excluded_lines,
    parse_target,
    plan_with,
    request_for,
    rows,
    summary,
)
from tui.data.recommend_measure import measured_rows, measured_summary
from tui.screens.base import LEAVE_FIELD
from tui.screens.recommend_measure import MeasureMixin
from tui.widgets.measure_progress import MeasureProgress
from tui.widgets.ordered_input import OrderedInput
from tui.widgets.point_table import rich_style
from tui.widgets.recommend_plot import FRONTIER, POINT, RecommendPlot

COLUMNS = (
    ("#", "rank"),
    ("instance", "instance"),
    ("layout", "layout"),
    ("n", "count"),
    ("$/h", "usd_h"),
    ("$/1M", "usd_1m"),
    ("req/s (low–high)", "capacity"),
    ("bottleneck", "bottleneck"),
)
RIGHT = {"rank", "count", "usd_h", "usd_1m"}


@dataclass
class RecommendReady(Message):
    request: RecommendRequest
    rec: Recommendation


@dataclass
class RecommendFailed(Message):
    request: RecommendRequest
    error: str


class RecommendScreen(MeasureMixin):
    MODE = "recommend"
    # The table first: Enter picks a row and the digits switch modes (a field would type them).
    AUTO_FOCUS = "#rec-table"
    BINDINGS = [
        Binding("o", "cycle_goal", "Goal"),
        Binding("a", "toggle_layouts", "All layouts"),
        Binding("e", "toggle_excluded", "Excluded"),
        Binding("m", "measure", "Measure top N on SageMaker"),
        LEAVE_FIELD,
        # While measuring: cancel (core tears every endpoint down), and no quitting past it.
        Binding("ctrl+c", "cancel_measure", "Cancel measurement", show=False),
        Binding("q", "quit_unless_measuring", "Quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rec: Recommendation | None = None
        self.chart: ChartData | None = None
        self.all_layouts = False
        self._request: RecommendRequest | None = None  # the one asked for last
        self._plan_rate: float | None = None  # the plan's target rate last put in the field
        self._rows: dict[str, Row] = {}
        self._measure_init()

    # ---- accessors ----------------------------------------------------------------------
    @property
    def table(self) -> DataTable:
        return self.query_one("#rec-table", DataTable)

    @property
    def plot(self) -> RecommendPlot:
        return self.query_one(RecommendPlot)

    @property
    def goal(self) -> str:
        return str(self.query_one("#rec-goal", Select).value)

    def compose_body(self) -> ComposeResult:
        with Vertical(id="rec-body"):
            with Horizontal(id="rec-controls"):
                yield Label("goal", classes="label")
                yield Select([(g, g) for g in GOALS], value="cost", allow_blank=False, compact=True, id="rec-goal")
                yield Label("target req/s", classes="label")
                yield OrderedInput(
                    "",
                    placeholder="none",
                    compact=True,
                    id="rec-target",
                    tooltip="size the instance count for this request rate (the plan's, if it has one)",
                )
                yield Static("", id="rec-note")
            yield Static("ranking the catalog…", id="rec-summary")
            with Horizontal(id="rec-main"):
                table = DataTable(id="rec-table", cursor_type="row", zebra_stripes=True)
                for label, key in COLUMNS:
                    table.add_column(Text(label, justify="right") if key in RIGHT else label, key=key)
                yield table
                yield RecommendPlot(id="rec-plot")
            yield Static("", id="rec-detail", markup=False)
            yield MeasureProgress(id="rec-measure")
            with Collapsible(title="Excluded", id="rec-excluded"):
                with VerticalScroll(id="rec-excluded-scroll"):
                    yield Static("", id="rec-excluded-list", markup=False)

    def on_mount(self) -> None:
        self.watch(self.knee, "plan", self._plan_changed)
        # The table's colours are resolved from the theme when its rows are built.
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._fill_table())

    def on_resize(self) -> None:
        # The chart beside the table when both fit; stacked below 140 columns (the table's
        # bottleneck column and the chart's titles need that much side by side).
        self.set_class(self.size.width < 140, "-narrow")

    # ---- asking -------------------------------------------------------------------------
    def _plan_changed(self, plan: Plan) -> None:
        rate = plan.min_request_rate or None
        if rate != self._plan_rate:
            # A new plan rate replaces what was typed; an unchanged one keeps it.
            self._plan_rate = rate
            self.query_one("#rec-target", Input).value = "" if rate is None else f"{rate:g}"
        self.ask()
        self._fill_table()  # the plan's instance is marked in the table

    @on(Input.Changed, "#rec-target")
    @on(Select.Changed, "#rec-goal")
    def _controls_changed(self) -> None:
        self.ask()

    def ask(self) -> None:
        """Rank again when the request changed (a new instance in the plan does not)."""
        target, error = parse_target(self.query_one("#rec-target", Input).value)
        note = self.query_one("#rec-note", Static)
        note.update(f"[$text-error]✗ {error}[/]" if error else "")
        if error:
            return
        req = request_for(self.knee.plan, self.goal, target)
        if req == self._request:
            return
        self._request = req
        self._measure_request_changed()  # measured for another request: the estimates again
        self.table.loading = True
        self.compute(req)

    @work(thread=True, exclusive=True, group="recommend", exit_on_error=False)
    def compute(self, req: RecommendRequest) -> None:
        try:
            rec = recommend(req)
        except KneeError as e:
            self.post_message(RecommendFailed(req, str(e)))
            return
        except Exception as e:  # a ranking bug must not take the app down
            self.post_message(RecommendFailed(req, f"the ranking failed: {type(e).__name__}: {e}"))
            return
        self.post_message(RecommendReady(req, rec))

    @on(RecommendReady)
    def _ready(self, message: RecommendReady) -> None:
        if message.request != self._request:
            return  # a newer request is being ranked
        self.rec = message.rec
        self.chart = chart_data(message.rec)
        self.table.loading = False
        self.query_one("#rec-summary", Static).update(summary(message.rec))
        lines = excluded_lines(message.rec)
        self.query_one("#rec-excluded", Collapsible).title = f"Excluded ({len(lines)})"
        self.query_one("#rec-excluded-list", Static).update("\n".join(lines) or "none")
        self._fill_table(keep_cursor=False)

    @on(RecommendFailed)
    def _failed(self, message: RecommendFailed) -> None:
        if message.request != self._request:
            return
        self.rec = self.chart = None
        self.table.loading = False
        self.table.clear()
        self._rows = {}
        self.plot.show(None)
        self.query_one("#rec-detail", Static).update("")
        self.query_one("#rec-summary", Static).update(f"[$text-error]cannot recommend: {message.error}[/]")

    # ---- showing ------------------------------------------------------------------------
    def _fill_table(self, keep_cursor: bool = True) -> None:
        if self.rec is None or self.chart is None:
            return
        table = self.table
        before = self.selected_key() if keep_cursor else None
        if self.measured is not None:
            shown = measured_rows(self.measured)
            self.query_one("#rec-summary", Static).update(measured_summary(self.measured, self.measured_region, self.goal))
        else:
            shown = rows(self.rec, self.all_layouts, self.chart.frontier_keys)
        self._rows = {r.key: r for r in shown}
        v = self.app.theme_variables
        mark = {True: (FRONTIER[0], rich_style(FRONTIER[1], v)), False: (POINT[0], rich_style(POINT[1], v))}
        planned = self.knee.plan.instance
        table.clear()
        for r in shown:
            # The rank after the glyph that marks the row's point on the chart (as on Pareto).
            rank = Text.assemble(mark[r.frontier], f" {r.rank:>2}")
            # The plan's own instance stands out: where the plan is now, among the options.
            planned_row = r.candidate.instance == planned
            inst = Text(r.instance, style=rich_style("bold $text-accent", v)) if planned_row else r.instance
            table.add_row(
                rank,
                inst,
                r.layout,
                Text(r.count, justify="right"),
                Text(r.usd_per_hour, justify="right"),
                Text(r.usd_per_1m, justify="right"),
                r.capacity,
                r.bottleneck,
                key=r.key,
            )
        if before in self._rows:
            table.move_cursor(row=table.get_row_index(before), animate=False)
        elif shown:
            table.move_cursor(row=0, animate=False)
        self._show_selected()

    def selected_key(self) -> str | None:
        table = self.table
        if table.row_count == 0:
            return None
        try:
            return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        except Exception:  # the cursor outside the rows while the table is rebuilt
            return None

    @on(DataTable.RowHighlighted, "#rec-table")
    def _highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_selected()

    def _show_selected(self) -> None:
        key = self.selected_key()
        self.plot.show(self.chart, key)
        row = self._rows.get(key or "")
        text = detail(row.candidate, self.rec.request.target_rps) if row and self.rec else ""
        self.query_one("#rec-detail", Static).update(text)

    # ---- choosing -----------------------------------------------------------------------
    @on(DataTable.RowSelected, "#rec-table")
    def _selected(self, event: DataTable.RowSelected) -> None:
        row = self._rows.get(str(event.row_key.value))
        if row is None or self.rec is None:
            return
        c = row.candidate
        self.knee.use_plan(plan_with(self.knee.plan, c, self.rec.request.allow_quantization))
        count = f", {c.instances_needed} of them for {self.rec.request.target_rps:g} req/s" if c.instances_needed else ""
        self.notify(
            f"plan hardware: {c.instance} ({c.num_gpus}× {c.gpu}), layout {row.layout}{count}. 2 Estimate · 3 Sweep · 5 Deploy",
            title="instance chosen",
        )

    # ---- actions ------------------------------------------------------------------------
    def action_cycle_goal(self) -> None:
        select = self.query_one("#rec-goal", Select)
        select.value = GOALS[(GOALS.index(self.goal) + 1) % len(GOALS)]

    def action_toggle_layouts(self) -> None:
        self.all_layouts = not self.all_layouts
        self._fill_table()
        self.notify("every layout" if self.all_layouts else "each instance's best layout", timeout=2)

    def action_toggle_excluded(self) -> None:
        c = self.query_one("#rec-excluded", Collapsible)
        c.collapsed = not c.collapsed

    def action_leave_field(self) -> None:
        if not self.action_cancel_measure():
            self.table.focus()
