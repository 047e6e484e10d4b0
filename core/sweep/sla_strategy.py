"""The ``sla`` strategy: per server configuration, the highest ``max_concurrency`` (or
``request_rate``) that still meets every SLO: doubling from a seed until it fails, then
bisection until the bracket is within the tolerance (AIPerf's and vLLM's ``serve_sla``)."""

from __future__ import annotations

from typing import Any

from core.spec.study import PointRow, SweepSpec
from core.sweep.space import PointPlan, TrialPlan, make_point
from core.sweep.strategy_base import Strategy


class SLAStrategy(Strategy):
    """Bracketing then bisection on one load knob, per server configuration."""

    name = "sla"

    def __init__(self, spec: SweepSpec, predictor=None):
        super().__init__(spec, predictor)
        self.knob = spec.sla_knob
        self.integer = self.knob == "max_concurrency"
        # Client args other than the searched knob are the fixed workload (first variation).
        base = dict(self._client_base())
        base.pop("max_concurrency", None)
        base.pop("request_rate", None)
        self.base = base
        self._state: dict[str, dict[str, Any]] = {}

    def _client_base(self) -> dict[str, Any]:
        from core.sweep.space import client_points

        return client_points(self.spec)[0]

    def _seed(self, trial: TrialPlan) -> float:
        declared = self._client_base().get(self.knob)
        if declared:
            return float(declared)
        if self.predictor is not None:
            # Start where the estimator says the SLOs stop holding: the largest power of two
            # (concurrency) or rate step predicted to meet them. Bracketing then corrects it
            # in either direction, so a wrong prediction costs probes, never the answer.
            seed = None
            v = max(self.spec.sla_min, 1.0)
            while v <= self.spec.sla_max:
                p = make_point(self.spec, trial.server_args, {**self.base, self.knob: self._value(v)})
                pred = self.predictor.predict(trial.config, p.workload, p.load)
                if not pred or not self.slo.holds(pred):
                    break
                seed = v
                v *= 2
            if seed is not None:
                return seed
        return max(self.spec.sla_min, 1.0)

    def _value(self, v: float) -> float | int:
        return int(round(v)) if self.integer else round(v, 3)

    def _st(self, trial: TrialPlan) -> dict[str, Any]:
        st = self._state.get(trial.trial_key)
        if st is None:
            st = {"lo": None, "hi": None, "next": self._value(self._seed(trial)), "done": False, "tried": {}}
            self._state[trial.trial_key] = st
        return st

    def _point(self, trial: TrialPlan, v: float | int) -> PointPlan:
        return make_point(self.spec, trial.server_args, {**self.base, self.knob: v}, search="sla")

    def next_point(self, trial: TrialPlan) -> PointPlan | None:
        st = self._st(trial)
        while not st["done"]:
            v = st["next"]
            p = self._point(trial, v)
            if p.point_id in self.results:  # resumed: replay the stored result
                self._advance(trial, v, self.results[p.point_id])
                continue
            return p
        return None

    def observe(self, trial: TrialPlan, point: PointPlan, row: PointRow) -> None:
        super().observe(trial, point, row)
        v = point.client_args.get(self.knob)
        st = self._st(trial)
        if v == st["next"] and not st["done"]:
            self._advance(trial, v, row)

    def _advance(self, trial: TrialPlan, v: float | int, row: PointRow) -> None:
        st = self._st(trial)
        ok = row.status == "ok" and self.slo.holds(row.summary)
        st["tried"][v] = ok
        if ok:
            st["lo"] = v if st["lo"] is None else max(st["lo"], v)
        else:
            st["hi"] = v if st["hi"] is None else min(st["hi"], v)
        lo, hi = st["lo"], st["hi"]
        if hi is None:  # still bracketing upward
            nxt = self._value(min(v * 2, self.spec.sla_max))
            if nxt <= v:
                st["done"] = True
                return
        elif lo is None:  # failed at the seed: bracket downward
            if v <= self.spec.sla_min:
                st["done"] = True
                return
            nxt = self._value(max(self.spec.sla_min, v / 2))
        else:
            if (hi - lo) <= max(1 if self.integer else 0, self.spec.sla_tolerance * hi):
                st["done"] = True
                return
            nxt = self._value((lo + hi) / 2)
            if nxt in (lo, hi):
                st["done"] = True
                return
        st["next"] = nxt

    def points_left(self, trial: TrialPlan) -> list[PointPlan]:
        st = self._st(trial)
        return [] if st["done"] else [self._point(trial, st["next"])]

    def trial_failed(self, trial: TrialPlan) -> None:
        self._st(trial)["done"] = True

    def sla_result(self, trial: TrialPlan) -> dict[str, Any]:
        st = self._st(trial)
        return {"knob": self.knob, "max_meeting_slo": st["lo"], "lowest_failing": st["hi"]}
