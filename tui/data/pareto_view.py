"""The Pareto screen's data: any two metrics of a study's points, the frontier, the knee,
the SLO lines, predictions next to measurements, and imported runs as their own series.

The frontier and the knee come from ``core.results.analysis``; predictions from the
sweep's predictor (``core.sweep.predict``) at each measured point's configuration and load.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.results.analysis import direction, knee, metric_value, pareto
from core.spec.slo import SLO
from core.spec.study import PointRow

# (key, label) of the metrics an axis can show.
METRICS: tuple[tuple[str, str], ...] = (
    ("request_throughput", "req/s"),
    ("output_throughput", "output tok/s"),
    ("p99_e2el_ms", "E2E p99 (ms)"),
    ("p99_ttft_ms", "TTFT p99 (ms)"),
    ("p99_itl_ms", "ITL p99 (ms)"),
    ("mean_ttft_ms", "TTFT mean (ms)"),
    ("tokens_per_s_per_user", "tok/s per user"),
    ("output_throughput_per_gpu", "tok/s per GPU"),
)
LABELS = dict(METRICS)
PRESETS: tuple[tuple[str, str], ...] = (
    ("request_throughput", "p99_e2el_ms"),  # the design's default view
    ("tokens_per_s_per_user", "output_throughput_per_gpu"),  # the interactivity trade-off
    ("output_throughput", "p99_ttft_ms"),
)


@dataclass(frozen=True)
class Dot:
    key: str  # point id
    x: float
    y: float


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

    @property
    def empty(self) -> bool:
        return not (self.measured or self.imported)


def _dot(p: PointRow, x: str, y: str) -> Dot | None:
    vx, vy = metric_value(p, x), metric_value(p, y)
    return None if vx is None or vy is None else Dot(p.point_id, vx, vy)


def _bound(slo: SLO, key: str) -> float | None:
    for c in slo.constraints:
        if c.key == key:
            return c.value
    return None


def predictions(points: list[PointRow], model: str, instance: str | None, gpu: str | None,
                num_gpus: int | None, spec=None) -> dict[str, PointRow]:
    """What the estimator predicted for each measured point, shaped as a PointRow so the
    same metric functions read it. Empty where the model or hardware is unknown."""
    from core.catalog import load_model, resolve_hardware
    from core.errors import KneeError
    from core.sweep.predict import Predictor
    from core.sweep.space import load_of, server_config

    if spec is None:
        return {}
    try:
        pred = Predictor(load_model(model), resolve_hardware(gpu=gpu, num_gpus=num_gpus, instance=instance))
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


def build(points: list[PointRow], x: str, y: str, slo: SLO, predicted: dict[str, PointRow] | None = None) -> ParetoView:
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
        predicted=tuple(d for p in (predicted or {}).values() for d in [_dot(p, x, y)] if d),
        x_bound=_bound(slo, x),
        y_bound=_bound(slo, y),
        points={p.point_id: p for p in points},
    )


def better_label(metric: str) -> str:
    return "higher is better" if direction(metric) == "max" else "lower is better"
