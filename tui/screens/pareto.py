"""The Pareto screen: any two metrics of the followed study, its frontier and knee, SLO
lines and predictions; the highlighted point's full configuration, sent to Deploy with
``d`` (or Enter)."""

from __future__ import annotations

import json
import time

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import DataTable, Static

from core.errors import KneeError
from core.spec.slo import parse_constraints
from core.sweep import hardware_label
from tui.data.pareto_view import (
    METRICS,
    PRESETS,
    ParetoView,
    axis_of,
    build,
    predictions,
)
from tui.data.selection import Selection
from tui.data.sweep_state import SweepSnapshot
from tui.messages import StudyLoaded
from tui.screens.base import KneeScreen
from tui.widgets.pareto_plot import ParetoLegend, ParetoPlot, legend_items
from tui.widgets.point_table import PointTable

METRIC_KEYS = [k for k, _ in METRICS]
RELOAD_S = 2.0
# (metric, what follows its value; None: "name value unit")
DETAIL_METRICS = (("request_throughput", "req/s"), ("output_throughput", "tok/s"), ("p99_ttft_ms", None), ("p99_itl_ms", None), ("p99_e2el_ms", None))
DIM = "$foreground 60%"


class ParetoScreen(KneeScreen):
    MODE = "pareto"
    BINDINGS = [
        Binding("v", "next_view", "Next view"),
        Binding("x", "cycle_x", "X axis"),
        Binding("y", "cycle_y", "Y axis"),
        Binding("d", "deploy", "Deploy this"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.x, self.y = PRESETS[0]
        self._preset = 0
        self._loaded: StudyLoaded | None = None
        self._done_seen: tuple[str, int] | None = None
        self._pending: str | None = None  # a study whose stored points changed since the last load
        self._last_load = -1e9
        self._predicted: dict = {}  # point id -> predicted PointRow (points never change once stored)
        self.view: ParetoView | None = None

    # ---- accessors ----------------------------------------------------------------------
    @property
    def plot(self) -> ParetoPlot:
        return self.query_one(ParetoPlot)

    @property
    def table(self) -> PointTable:
        return self.query_one(PointTable)

    @property
    def detail(self) -> Static:
        return self.query_one("#point-detail", Static)

    def compose_body(self) -> ComposeResult:
        yield Static(
            "No study followed yet: start a sweep on the Sweep screen ([b]3[/b]), or attach to the latest one there ([b]a[/b]).", id="pareto-empty"
        )
        with Horizontal(id="pareto-main"):
            with Vertical(id="pareto-chart"):
                yield ParetoPlot(id="pareto-plot")
                yield ParetoLegend(id="legend")
            with Vertical(id="pareto-side"):
                yield PointTable(id="points")
                yield Static("", id="point-detail")

    def on_mount(self) -> None:
        self.watch(self.knee, "sweep", self._sweep_changed)
        self.set_interval(RELOAD_S / 2, self._maybe_load)
        # The table's colours are resolved from the theme when its rows are built.
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.refresh_view())

    def on_screen_resume(self) -> None:
        self._maybe_load()

    def on_resize(self) -> None:
        # Side by side when there is room, stacked on an 80-column terminal.
        self.set_class(self.size.width < 110, "-narrow")

    # ---- loading ------------------------------------------------------------------------
    def _sweep_changed(self, snap: SweepSnapshot | None) -> None:
        if snap is None:
            return
        seen = (snap.study, snap.done_points)
        if seen != self._done_seen:  # reread only when a point landed
            if self._done_seen is not None and self._done_seen[0] != snap.study:
                self._predicted = {}
            self._done_seen = seen
            self.mode_bar.set_status(f"{snap.study} · {snap.done_points} points")
            self._pending = snap.study
            self._maybe_load()

    def _maybe_load(self) -> None:
        """Load the pending study when this screen is shown, at most every ``RELOAD_S``:
        reading a large study costs far more than a live sweep adds between two reads."""
        if self._pending is None or not self.is_current:
            return
        if any(w.group == "pareto-load" and w.is_running for w in self.app.workers):
            return
        now = time.monotonic()
        if self._loaded is not None and now - self._last_load < RELOAD_S:
            return
        self._last_load = now
        study, self._pending = self._pending, None
        self.load(study, set(self._predicted))

    @work(thread=True, exclusive=True, group="pareto-load", exit_on_error=False)
    def load(self, study: str, known: set[str]) -> None:
        store = self.knee.sweep_control.store
        row = store.study(study) or {}
        points = store.points(study)
        try:
            spec = store.spec(study)
        except KneeError:
            spec = None  # imported studies have no spec
        info = dict(row.get("info", {}))
        if info.get("mixed_hardware"):  # joined workers on different GPU boxes: mark each point's class
            from tui.data.workers import point_classes

            info["host_classes"] = point_classes(points, store.point_hosts(study), store.trial_hosts(study))
        predicted = {}
        if row.get("model"):  # a MoE model's predictions take MoE models' bands (read here, off the UI thread)
            from core.estimate.bands import model_kind

            info["model_kind"] = model_kind(row["model"])
        if spec is not None:
            # Predictions for the points the table can show (the best by either plotted
            # metric, capped): a thousand predictions would hold the GIL for a second.
            fresh = [p for p in _predict_candidates(points, self.x, self.y) if p.point_id not in known]
            predicted = predictions(fresh, spec.model, spec.instance, spec.gpu, spec.num_gpus, spec)
        self.post_message(
            StudyLoaded(
                study,
                points,
                predicted,
                {**info, "model": row.get("model", ""), "objective": spec.objective if spec else None, "engine": spec.engine.kind if spec else None},
                spec.constraints if spec else "",
            )
        )

    @on(StudyLoaded)
    def _loaded_study(self, message: StudyLoaded) -> None:
        self._predicted.update(message.predicted)
        message.predicted = {k: v for k, v in self._predicted.items() if k in {p.point_id for p in message.points}}
        self._loaded = message
        self.add_class("-loaded")
        self.refresh_view()

    def refresh_view(self) -> None:
        m = self._loaded
        if m is None:
            return
        try:
            slo = parse_constraints(m.constraints)
        except KneeError:
            slo = parse_constraints("")
        self.view = build(
            m.points,
            self.x,
            self.y,
            slo,
            m.predicted,
            objective=m.info.get("objective") or "throughput",
            price_per_gpu_hour=m.info.get("price_per_gpu_hour"),
            host_classes=m.info.get("host_classes"),
            engine=m.info.get("engine") or "vllm",
            kind=m.info.get("model_kind"),
        )
        self.table.show(self.view)
        self._show_selected()

    # ---- selection ----------------------------------------------------------------------
    @on(DataTable.RowHighlighted, "#points")
    def _highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_selected()

    @on(DataTable.RowSelected, "#points")
    def _selected(self, _event: DataTable.RowSelected) -> None:
        self.action_deploy()

    def _show_selected(self) -> None:
        key = self.table.selected_key()
        self.plot.show(self.view, key)
        self.query_one(ParetoLegend).show(legend_items(self.view, key))
        if self.view is None or key is None or key not in self.view.points:
            self.detail.update("")
            return
        self.detail.update(self._detail(self.view.points[key]))

    def _detail(self, p) -> Content:
        """The highlighted point: its configuration in full (what Deploy gets) and its
        headline metrics, each in the unit the chart and the table use for it."""
        points = self._loaded.points if self._loaded else [p]
        rates, latencies = [], []
        for key, short in DETAIL_METRICS:
            v = p.summary.get(key)
            if v is not None:
                a = axis_of(points, key)
                if short:
                    rates.append(f"{a.fmt(v)} {short}")
                else:
                    latencies.append(f"{a.name} {a.fmt(v, unit=True)}")
        # Rates on the title line and latencies on their own: each line fits 60 columns,
        # so none wraps in the middle of a "name value unit".
        tag = ["recommended"] if self.view is not None and p.point_id == self.view.recommended else []
        if self.view is not None and self.view.classes and p.point_id in self.view.host_classes:
            tag.append(self.view.host_classes[p.point_id])  # mixed hardware: which box measured it
        lines = [
            Content.assemble((f"trial {p.trial_id}", "bold"), " · ".join(["", *tag, "simulated" if p.simulated else p.source, *rates])),
            Content.assemble(("server ", DIM), _kv(p.server_args)),
            Content.assemble(("client ", DIM), _kv(p.client_args)),
            Content(" · ".join(latencies)),
        ]
        guess = self.view.prediction(p.point_id) if self.view is not None else None
        if guess is not None:
            lines.append(Content.styled(_predicted_line(self.view, guess), DIM))
        if p.violations:
            lines.append(Content.styled("misses " + "; ".join(p.violations), "$text-error"))
        return Content("\n").join(lines)

    # ---- actions ------------------------------------------------------------------------
    def action_next_view(self) -> None:
        self._preset = (self._preset + 1) % len(PRESETS)
        self.x, self.y = PRESETS[self._preset]
        self.refresh_view()

    def action_cycle_x(self) -> None:
        self.x = METRIC_KEYS[(METRIC_KEYS.index(self.x) + 1) % len(METRIC_KEYS)]
        self.refresh_view()

    def action_cycle_y(self) -> None:
        self.y = METRIC_KEYS[(METRIC_KEYS.index(self.y) + 1) % len(METRIC_KEYS)]
        self.refresh_view()

    def action_deploy(self) -> None:
        key = self.table.selected_key()
        m = self._loaded
        if m is None or self.view is None or key is None:
            self.notify("no point selected", severity="warning")
            return
        p = self.view.points[key]
        if p.status != "ok":
            self.notify("that point failed; pick a measured one", severity="warning")
            return
        self.knee.selection = Selection(
            point=p,
            model=m.info.get("model") or self.knee.plan.model,
            gpu=m.info.get("gpu_type"),
            instance=self.knee.plan.instance,
            hardware=hardware_label(m.info),
        )
        self.app.switch_mode("deploy")


def _kv(args: dict) -> str:
    return " ".join(f"{k}={json.dumps(v) if isinstance(v, str) else v}" for k, v in sorted(args.items())) or "(defaults)"


def _predict_candidates(points: list, x: str, y: str, limit: int = 60) -> list:
    from core.results.analysis import direction, metric_value

    ok = [p for p in points if p.status == "ok"]
    if len(ok) <= limit:
        return ok
    chosen: dict[str, object] = {}
    for metric in (x, y):
        sign = -1.0 if direction(metric) == "max" else 1.0
        ranked = sorted((p for p in ok if metric_value(p, metric) is not None), key=lambda p: sign * metric_value(p, metric))
        for p in ranked[: limit // 2]:
            chosen[p.point_id] = p
    return list(chosen.values())


def _predicted_line(view, d) -> str:
    """What the estimator predicted for the highlighted point on the chart's two axes, each
    with its error band (the dotted cross on the chart)."""
    parts = []
    for a, value, band in ((view.ax, d.x, d.x_band), (view.ay, d.y, d.y_band)):
        text = f"{a.name} {a.fmt(value, unit=True)}"
        parts.append(f"{text} ({a.fmt(band[0])}-{a.fmt(band[1])})" if band else text)
    return "predicted " + " · ".join(parts)
