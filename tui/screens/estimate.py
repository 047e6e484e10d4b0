"""The Estimate screen: theory before measurement, recomputed whenever the plan changes.

Memory per TP degree, the roofline, predictions against concurrency, the limits and the
bottleneck, and the suggested search space, which is one key (``g``) away from a sweep.
"""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Label, Static

from core.errors import KneeError
from core.spec.plan import Plan
from tui.data.estimate import EstimateView, build_estimate
from tui.messages import EstimateFailed, EstimateReady
from tui.screens.base import KneeScreen
from tui.widgets.memory_table import MemoryTable
from tui.widgets.prediction_table import PredictionTable
from tui.widgets.roofline_plot import RooflinePlot


class EstimateScreen(KneeScreen):
    MODE = "estimate"
    BINDINGS = [
        Binding("g", "sweep_suggested", "Sweep this"),
        Binding("u", "use_suggested", "Use suggested space"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.view: EstimateView | None = None

    # ---- accessors ----------------------------------------------------------------------
    @property
    def memory_table(self) -> MemoryTable:
        return self.query_one(MemoryTable)

    @property
    def prediction_table(self) -> PredictionTable:
        return self.query_one(PredictionTable)

    @property
    def roofline_plot(self) -> RooflinePlot:
        return self.query_one(RooflinePlot)

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="estimate-body"):
            yield Static("estimating…", id="est-title")
            yield Label("Memory per GPU, by tensor parallelism", classes="section")
            yield MemoryTable(id="memory")
            with Horizontal(id="est-top"):
                yield RooflinePlot(id="roofline")
                with Vertical(id="est-right"):
                    yield Label("Limits", classes="section")
                    yield Static("", id="est-limits")
            yield Label("Predicted against concurrency", classes="section")
            yield PredictionTable(id="predictions")
            yield Static("", id="est-suggest")

    def on_mount(self) -> None:
        self.watch(self.knee, "plan", self._plan_changed)

    def on_resize(self) -> None:
        # The chart and the limits side by side when there is room, stacked at 80 columns.
        self.set_class(self.size.width < 100, "-narrow")

    def _plan_changed(self, plan: Plan) -> None:
        self.query_one("#est-title", Static).update(f"estimating {plan.model}…")
        self.compute(plan)

    @work(thread=True, exclusive=True, group="estimate")
    def compute(self, plan: Plan) -> None:
        try:
            view = build_estimate(plan)
        except KneeError as e:
            self.post_message(EstimateFailed(plan, str(e)))
            return
        except Exception as e:  # an estimator bug must not take the app down
            self.post_message(EstimateFailed(plan, f"the estimator failed: {type(e).__name__}: {e}"))
            return
        self.post_message(EstimateReady(plan, view))

    @on(EstimateReady)
    def _ready(self, message: EstimateReady) -> None:
        if message.plan != self.knee.plan:
            return  # a newer plan is being estimated
        v = self.view = message.view
        self.query_one("#est-title", Static).update(f"[b]{v.title}[/b]\n[dim]{v.model_summary}[/dim]")
        self.memory_table.show(v.memory)
        self.roofline_plot.show(v.roofline)
        self.prediction_table.show(v.predictions)
        limits = list(v.limits)
        if v.bottleneck:
            limits.insert(0, f"bottleneck: [b]{v.bottleneck}[/b]")
        bound = {p.phase: p.bound for p in v.roofline.points}
        limits.append(
            f"prefill is {bound.get('prefill', '?')}-bound, decode is {bound.get('decode', '?')}-bound (ridge {v.roofline.ridge:.0f} FLOP/byte)"
        )
        if any(r.plan.fits for r in v.memory):  # else the limits carry what would fit
            for r in v.memory:
                if not r.plan.fits and r.plan.reason:
                    limits.append(f"[$text-error]TP{r.tp}: {r.plan.reason}[/]")
        limits.extend(f"[dim]{n}[/dim]" for n in v.notes)
        self.query_one("#est-limits", Static).update("\n".join(limits))
        if v.suggested_server_args:
            self.query_one("#est-suggest", Static).update(
                f"[b]suggested search space[/b]\n  server: {v.suggested_server_args}\n"
                f"  client: {v.suggested_client_args or '(from the plan)'}\n"
                "[dim]g[/dim] sweep it now · [dim]u[/dim] copy it into the plan"
            )
        else:
            self.query_one("#est-suggest", Static).update("")

    @on(EstimateFailed)
    def _failed(self, message: EstimateFailed) -> None:
        if message.plan == self.knee.plan:
            self.query_one("#est-title", Static).update(f"[$text-error]cannot estimate: {message.error}[/]")

    def _suggested_plan(self) -> Plan:
        plan = self.knee.plan
        if self.view and self.view.suggested_server_args and not plan.server_args:
            return plan.model_copy(
                update={
                    "server_args": self.view.suggested_server_args,
                    "client_args": plan.client_args or self.view.suggested_client_args,
                }
            )
        return plan

    def action_use_suggested(self) -> None:
        self.knee.use_plan(self._suggested_plan())
        self.notify("suggested search space copied into the plan")

    def action_sweep_suggested(self) -> None:
        self.knee.start_sweep(self._suggested_plan())
