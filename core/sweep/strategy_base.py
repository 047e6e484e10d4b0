"""What every search strategy is (:class:`Strategy`: trials one at a time, points one at a
time, every stored result observed before it answers again), and the plain grid. The
strategies themselves: :mod:`core.sweep.strategies` (adaptive, and the factory) and
:mod:`core.sweep.sla_strategy`."""

from __future__ import annotations

from core.spec.slo import SLO, parse_constraints
from core.spec.study import PointRow, SweepSpec
from core.sweep.space import PointPlan, TrialPlan, plan_trials


class Strategy:
    name = "grid"

    def __init__(self, spec: SweepSpec, predictor=None):
        self.spec = spec
        self.slo: SLO = parse_constraints(spec.constraints)
        self.plans = plan_trials(spec)
        self.predictor = predictor
        self.results: dict[str, PointRow] = {}
        self.skipped: list[tuple[TrialPlan, str]] = []
        self._trial_iter = iter(self.plans)

    def observe(self, trial: TrialPlan, point: PointPlan, row: PointRow) -> None:
        self.results[point.point_id] = row

    def next_trial(self) -> TrialPlan | None:
        return next(self._trial_iter, None)

    def next_point(self, trial: TrialPlan) -> PointPlan | None:
        for p in trial.points:
            if p.point_id not in self.results:
                return p
        return None

    def trial_failed(self, trial: TrialPlan) -> None:
        """The trial's server failed; nothing more to do on it."""

    def trial_done(self, trial: TrialPlan) -> None:
        """Every point of the trial is stored (measured, failed or replayed)."""

    def points_left(self, trial: TrialPlan) -> list[PointPlan]:
        """Points the trial would still run (to store as failed when its server fails)."""
        return [p for p in trial.points if p.point_id not in self.results]


class GridStrategy(Strategy):
    name = "grid"


def load_knob_value(p: PointPlan) -> float:
    """The load point's rate, or its concurrency for a closed loop: what grows with load."""
    return float(p.load.request_rate if p.load.request_rate is not None else (p.load.concurrency or 0))
