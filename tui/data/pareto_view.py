"""The Pareto screen's data: any two metrics of a study's points, the frontier, the knee,
the SLO lines, predictions next to measurements, and imported runs as their own series.

The frontier and the knee come from ``core.results.analysis``; predictions from the
sweep's predictor (``core.sweep.predict``) at each measured point's configuration and load.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import pairwise

from core.results.analysis import best, direction, knee, metric_value, pareto
from core.spec.slo import SLO
from core.spec.study import PointRow

# (key, label) of the metrics an axis can show. Short: a label is an axis title and a table
# header, and the table's columns must fit beside the chart.
METRICS: tuple[tuple[str, str], ...] = (
    ("request_throughput", "req/s"),
    ("output_throughput", "out tok/s"),
    ("p99_e2el_ms", "E2E p99 (ms)"),
    ("p99_ttft_ms", "TTFT p99 (ms)"),
    ("p99_itl_ms", "ITL p99 (ms)"),
    ("mean_ttft_ms", "TTFT mean (ms)"),
    ("tokens_per_s_per_user", "tok/s/user"),
    ("output_throughput_per_gpu", "tok/s/GPU"),
)
LABELS = dict(METRICS)
PRESETS: tuple[tuple[str, str], ...] = (
    ("request_throughput", "p99_e2el_ms"),  # the design's default view
    ("tokens_per_s_per_user", "output_throughput_per_gpu"),  # the interactivity trade-off
    ("output_throughput", "p99_ttft_ms"),
)


# Mixed hardware: a plain point's shape says its hardware class (its colour still says
# frontier or not). Shapes none of the other marks use; more classes than these repeat.
CLASS_GLYPHS = ("●", "■", "▲", "▼", "◼", "✚")


# A latency metric whose largest value reaches this many ms is shown in seconds: "161.1 s"
# reads at a glance where "161,098 ms" does not.
SECONDS_FROM_MS = 10_000


@dataclass(frozen=True)
class Axis:
    """How one metric is shown, the same on the chart, in the table and in the detail line:
    one unit (chosen from the study's values, not per view, so a metric never changes unit
    when the other axis does) and one number of decimals."""

    metric: str
    label: str  # with the unit: "E2E p99 (s)"
    scale: float  # shown value = raw value / scale
    decimals: int
    better: str  # "max" or "min"

    @property
    def unit(self) -> str:
        m = re.search(r"\(([^)]*)\)$", self.label)
        return m.group(1) if m else ""

    @property
    def name(self) -> str:
        """The label without its unit: "E2E p99"."""
        return re.sub(r"\s*\([^)]*\)$", "", self.label)

    @property
    def better_label(self) -> str:
        return "higher is better" if self.better == "max" else "lower is better"

    def shown(self, raw: float) -> float:
        return raw / self.scale

    def fmt(self, raw: float | None, unit: bool = False) -> str:
        if raw is None:
            return ""
        text = f"{self.shown(raw):,.{self.decimals}f}"
        return f"{text} {self.unit}" if unit and self.unit else text


def axis(metric: str, values: Iterable[float]) -> Axis:
    vals = [abs(v) for v in values if v is not None and math.isfinite(v)]
    label = LABELS.get(metric, metric)
    scale = 1.0
    if metric.endswith("_ms") and vals and max(vals) >= SECONDS_FROM_MS:
        scale, label = 1000.0, label.replace("(ms)", "(s)")
    top = max(vals) / scale if vals else 0.0
    # Four significant digits at most for the largest value, so a column lines up.
    decimals = 0 if top >= 1000 else 1 if top >= 10 else 2
    return Axis(metric, label, scale, decimals, direction(metric))


def axis_of(points: Iterable[PointRow], metric: str) -> Axis:
    """The metric's axis over a study's successful points."""
    return axis(metric, (v for p in points if p.status == "ok" for v in [metric_value(p, metric)] if v is not None))


@dataclass(frozen=True)
class Dot:
    key: str  # point id
    x: float
    y: float
    # A prediction's error band on each axis, (low, high) in the metric's units
    # (core/estimate/bands.py); None on a measurement.
    x_band: tuple[float, float] | None = None
    y_band: tuple[float, float] | None = None


@dataclass(frozen=True)
class ParetoView:
    x: str
    y: str
    measured: tuple[Dot, ...]
    imported: tuple[Dot, ...]
    failed_slo: tuple[Dot, ...]  # measured points that missed a constraint
    frontier: tuple[Dot, ...]  # sorted by x
    knee: Dot | None
    predicted: tuple[Dot, ...]  # same keys as the measured points they predict
    x_bound: float | None  # an SLO bound on the x metric, drawn as a vertical line
    y_bound: float | None
    points: dict[str, PointRow]
    ax: Axis
    ay: Axis
    recommended: str | None = None
    """The point id of the best point under the SLOs by the study's objective
    (``core.results.analysis.best``, as ``knee results`` and ``recommend`` choose): what the
    screen selects first, so Deploy gets a configuration that meets the constraints. None
    when no point meets them."""
    host_classes: dict[str, str] = field(default_factory=dict)
    """point id -> hardware class ("H100 x8") for a study that ran on mixed hardware (joined
    workers on different GPU boxes); empty otherwise, and the chart is as for one box."""

    @property
    def empty(self) -> bool:
        return not (self.measured or self.imported)

    @property
    def steps(self) -> list[tuple[float, float]]:
        return frontier_steps(self.frontier, self.x, self.y)

    def prediction(self, key: str | None) -> Dot | None:
        """The estimator's prediction for point ``key`` (with its band), None where none."""
        return next((d for d in self.predicted if d.key == key), None) if key is not None else None

    def marker(self, key: str) -> str:
        """What a point is on the chart (and so in the table's first column): ``knee``,
        ``failed`` (missed an SLO), ``imported``, ``frontier`` or ``measured``; the first
        that applies."""
        return self._kinds.get(key, "measured")

    @cached_property
    def classes(self) -> tuple[str, ...]:
        """The hardware classes in the study, each with its glyph (:data:`CLASS_GLYPHS`)
        by position; () for a study on one kind of box."""
        return tuple(sorted(set(self.host_classes.values()))) if len(set(self.host_classes.values())) > 1 else ()

    def class_glyph(self, key: str) -> str | None:
        """The glyph of a plain (measured or frontier) point's hardware class on a
        mixed-hardware chart; None where one glyph serves every point."""
        label = self.host_classes.get(key)
        if not self.classes or label is None:
            return None
        return CLASS_GLYPHS[self.classes.index(label) % len(CLASS_GLYPHS)]

    @cached_property
    def _kinds(self) -> dict[str, str]:
        # Built once: the chart asks for every point on each redraw.
        kinds = {d.key: "frontier" for d in self.frontier}
        kinds.update({d.key: "imported" for d in self.imported})
        kinds.update({d.key: "failed" for d in self.failed_slo})
        if self.knee is not None:
            kinds[self.knee.key] = "knee"
        return kinds


def frontier_steps(frontier: Sequence[Dot], x: str, y: str) -> list[tuple[float, float]]:
    """The frontier as a staircase through its points, sorted by x: between two neighbours
    the corner takes the worse x and the worse y of the pair, so every point of the line is
    attainable (matched or beaten by a measured point). A straight segment would promise
    trade-offs between two points that nothing measured delivers."""
    if not frontier:
        return []
    worse_x = min if direction(x) == "max" else max
    worse_y = min if direction(y) == "max" else max
    out = [(frontier[0].x, frontier[0].y)]
    for a, b in pairwise(frontier):
        cx, cy = worse_x(a.x, b.x), worse_y(a.y, b.y)
        for v in ((cx, cy), (b.x, b.y)):
            if v != out[-1]:
                out.append(v)
    return out


def _dot(p: PointRow, x: str, y: str) -> Dot | None:
    vx, vy = metric_value(p, x), metric_value(p, y)
    return None if vx is None or vy is None else Dot(p.point_id, vx, vy)


def _banded(d: Dot, x: str, y: str, engine: str, kind: str | None = None) -> Dot:
    """A predicted dot with its error band on both axes, from ``engine``'s held-out
    residuals (the simulator stands in for vLLM: its studies take vLLM's), or those of the
    model's ``kind`` (MoE, dense) where it has its own."""
    from core.estimate.bands import summary_band

    return replace(d, x_band=summary_band(x, d.x, engine, kind), y_band=summary_band(y, d.y, engine, kind))


def _bound(slo: SLO, key: str) -> float | None:
    for c in slo.constraints:
        if c.key == key:
            return c.value
    return None


def predictions(points: list[PointRow], model: str, instance: str | None, gpu: str | None, num_gpus: int | None, spec=None) -> dict[str, PointRow]:
    """What the estimator predicted for each measured point, shaped as a PointRow so the
    same metric functions read it. Empty where the model or hardware is unknown."""
    from core.catalog import load_model, resolve_hardware
    from core.errors import KneeError
    from core.sweep.predict import SurrogatePredictor
    from core.sweep.space import load_of, server_config

    if spec is None:
        return {}
    try:
        hw = resolve_hardware(gpu=gpu, num_gpus=num_gpus, instance=instance, gpu_p2p=spec.gpu_p2p)
        pred = SurrogatePredictor.for_spec(spec, load_model(model), hw)
    except KneeError:
        return {}
    out: dict[str, PointRow] = {}
    for p in points:
        if p.status != "ok" or p.source != "knee":
            continue
        try:
            cfg = server_config(model, p.server_args)
            workload, load = load_of(p.client_args, spec)
            summary = pred.predict(cfg, workload, load)
        except (KneeError, ValueError):
            continue
        out[p.point_id] = p.model_copy(update={"summary": summary})
    return out


def build(
    points: list[PointRow],
    x: str,
    y: str,
    slo: SLO,
    predicted: dict[str, PointRow] | None = None,
    objective: str = "throughput",
    price_per_gpu_hour: float | None = None,
    host_classes: dict[str, str] | None = None,
    engine: str = "vllm",
    kind: str | None = None,
) -> ParetoView:
    """The chart's content. ``engine`` is the study's (vllm, sglang, sim) and ``kind`` its
    model's ("moe", "dense"): whose held-out residuals give the predictions' error bands."""
    ok = [p for p in points if p.status == "ok"]
    own = [p for p in ok if p.source == "knee"]
    imported = [p for p in ok if p.source != "knee"]
    front = pareto(ok, x, y)
    k = knee(front, x, y) if front else None
    measured = tuple(d for p in own if p.meets_slo is not False for d in [_dot(p, x, y)] if d)
    failed = tuple(d for p in own if p.meets_slo is False for d in [_dot(p, x, y)] if d)
    return ParetoView(
        x=x,
        y=y,
        measured=measured,
        imported=tuple(d for p in imported for d in [_dot(p, x, y)] if d),
        failed_slo=failed,
        frontier=tuple(d for p in front for d in [_dot(p, x, y)] if d),
        knee=_dot(k, x, y) if k is not None else None,
        predicted=tuple(_banded(d, x, y, engine, kind) for p in (predicted or {}).values() for d in [_dot(p, x, y)] if d),
        x_bound=_bound(slo, x),
        y_bound=_bound(slo, y),
        points={p.point_id: p for p in points},
        ax=axis_of(ok, x),
        ay=axis_of(ok, y),
        recommended=_recommended(ok, objective, slo, price_per_gpu_hour),
        host_classes=dict(host_classes or {}),
    )


def _recommended(ok: list[PointRow], objective: str, slo: SLO, price: float | None) -> str | None:
    from core.errors import KneeError

    try:
        chosen = best(ok, objective, slo, price)
    except KneeError:  # an objective this version does not know: rank by throughput
        chosen = best(ok, "throughput", slo, price)
    return chosen.point_id if chosen is not None else None
