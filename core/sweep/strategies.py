"""Search strategies: which server configurations to launch and which load points to run.

A strategy hands the runner trials one at a time (:meth:`Strategy.next_trial`) and, per
trial, points one at a time (:meth:`Strategy.next_point`), and sees every stored result
(:meth:`Strategy.observe`) before it answers again — so adaptive and SLA search decide on
what was measured, and resume works by replaying stored results through ``observe``.

- ``grid``: every server configuration × every client variation, in llm-optimizer's order
  (server outer), one launch per configuration (never one per combination).
- ``adaptive``: the estimator drops configurations that cannot fit or cannot meet the SLOs,
  ranks the rest by predicted objective, runs the most promising first, and skips the ones
  that — after scaling the prediction by what the measured ones achieved — cannot beat the
  best measured result. Inside a configuration, loads run from the most promising down, and
  a load that breaks the SLOs ends the higher loads of that configuration (latency grows
  with load).
- ``sla``: per configuration, the highest ``max_concurrency`` (or ``request_rate``) that
  still meets every SLO: doubling from a seed until it fails, then bisection until the bracket
  is within the tolerance (AIPerf's and vLLM's ``serve_sla`` method).
"""

from __future__ import annotations

import math
from typing import Any

from core.results.analysis import objective_key, score
from core.spec.study import PointRow, SweepSpec, make_point_id
from core.sweep.space import PointPlan, TrialPlan
from core.sweep.sla_strategy import SLAStrategy
from core.sweep.strategy_base import GridStrategy, Strategy, load_knob_value


class AdaptiveStrategy(Strategy):
    name = "adaptive"
    margin = 0.25  # the estimator's error we allow for before ruling a configuration out

    def __init__(self, spec: SweepSpec, predictor=None):
        super().__init__(spec, predictor)
        self.key, self.dir = objective_key(spec.objective)
        self._queue: list[TrialPlan] = []
        self._ratios: list[float] = []
        self._blocked: set[str] = set()  # trials whose higher loads break the SLO
        # --join workers (core/sweep/shared_adaptive.py): trials done, pruned or held elsewhere.
        self.taken: set[str] = set()
        self._tpe: Any = None  # an optuna Study once TPE runs (optuna is imported only then)
        if predictor is None:
            self._tpe_init()
        else:
            self._rank()

    # ---- without an estimator: Optuna's TPE over the server-arg space ----------------------
    # When the model or hardware is unknown to the estimator (a custom engine, a model with
    # no config), there is nothing to rank by; Optuna's TPE sampler proposes the next server
    # configuration from what was measured, and the search ends after ``patience`` launches
    # in a row that did not improve the best (or when the space is exhausted).
    patience = 3

    def _tpe_init(self) -> None:
        import optuna

        from core.sweep.space import sets_from_json

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._sets = sets_from_json(self.spec.server_sets)
        self._tpe = optuna.create_study(
            direction="maximize", sampler=optuna.samplers.TPESampler(seed=self.spec.seed, n_startup_trials=min(3, len(self.plans)))
        )
        self._by_key = {t.trial_key: t for t in self.plans}
        self._asked: dict[str, Any] = {}  # trial_key -> optuna trial awaiting its value
        self._values: dict[str, float] = {}
        self._since_best = 0
        self._best_value = -math.inf

    def _trial_value(self, trial: TrialPlan) -> float:
        vals = [
            v
            for r in self.results.values()
            if r.trial_key == trial.trial_key and r.status == "ok" and self.slo.holds(r.summary)
            if (v := score(r, self.spec.objective)) is not None
        ]
        return max(vals) if vals else -1e18  # failed or never meets the SLOs: worst

    def _tpe_next(self) -> TrialPlan | None:
        from core.spec.study import canonical_json

        left = [t for t in self.plans if t.trial_key not in self._values and t.trial_key not in self.taken]
        if not left or (len(self._values) >= 3 and self._since_best >= self.patience):
            for t in left:
                t.skip_reason = f"not run: {self.patience} launches in a row without improvement (TPE search, no estimator)"
                self.skipped.append((t, t.skip_reason))
                self._values[t.trial_key] = -1e18
            return None
        for _ in range(50):
            ot = self._tpe.ask()
            sargs: dict[str, Any] = {}
            for s in self._sets:
                idx = ot.suggest_categorical(s.key, list(range(len(s.values))))
                sargs.update(zip(s.names, s.values[idx]))
            key = canonical_json(sargs)
            if key in self._values:  # TPE repeats itself in small spaces: answer from memory
                self._tpe.tell(ot, self._values[key])
                continue
            if key in self.taken:  # another worker runs it: ask again (it stays untold)
                continue
            self._asked[key] = ot
            return self._by_key[key]
        return left[0]

    def trial_done(self, trial: TrialPlan) -> None:
        if self._tpe is None or trial.trial_key in self._values:
            return
        v = self._trial_value(trial)
        self._values[trial.trial_key] = v
        ot = self._asked.pop(trial.trial_key, None)
        if ot is not None:
            self._tpe.tell(ot, v)
        else:  # a trial replayed on resume: tell TPE what it already measured
            import optuna

            params: dict[str, int] = {}
            dists: dict[str, optuna.distributions.BaseDistribution] = {}
            for s in self._sets:
                idx = next(i for i, vals in enumerate(s.values) if all(trial.server_args.get(n) == x for n, x in zip(s.names, vals)))
                params[s.key] = idx
                dists[s.key] = optuna.distributions.CategoricalDistribution(list(range(len(s.values))))
            self._tpe.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=v))
        if v > self._best_value:
            self._best_value, self._since_best = v, 0
        else:
            self._since_best += 1

    def trial_failed(self, trial: TrialPlan) -> None:
        self.trial_done(trial)

    def _pred_score(self, pred: dict[str, float], trial: TrialPlan) -> float | None:
        row = PointRow(study="", point_id="", trial_id=0, trial_key="", server_args=trial.server_args, client_args={}, summary=pred)
        return score(row, self.spec.objective, None)

    def _meets_with_margin(self, pred: dict[str, float]) -> bool:
        for c in self.slo.constraints:
            v = pred.get(c.key)
            if v is None:
                continue
            if c.op in ("<", "<=") and v > c.value * (1 + self.margin):
                return False
            if c.op in (">", ">=") and v < c.value * (1 - self.margin):
                return False
        return True

    def _rank(self) -> None:
        ranked = []
        for t in self.plans:
            if self.predictor is None:
                ranked.append((0.0, t))
                continue
            ok, reason, _ = self.predictor.fits(t.config, t.points[0].workload if t.points else None)
            if not ok:
                t.skip_reason = f"infeasible: {reason}"
                self.skipped.append((t, t.skip_reason))
                continue
            preds = {}
            for p in t.points:
                preds[p.point_id] = self.predictor.predict(t.config, p.workload, p.load)
            good = {pid: pr for pid, pr in preds.items() if pr and self._meets_with_margin(pr)}
            if t.points and not good:
                t.skip_reason = "predicted to miss the SLOs at every load point"
                self.skipped.append((t, t.skip_reason))
                continue
            scored = {pid: self._pred_score(pr, t) for pid, pr in good.items()}
            best_pred = max((s for s in scored.values() if s is not None), default=0.0)
            t.predicted = {
                "score": best_pred,
                "points": {pid: {k: preds[pid].get(k) for k in (self.key, "p99_e2el_ms", "mean_ttft_ms") if k in preds[pid]} for pid in preds},
            }
            # Most promising load first; points predicted to break the SLOs (beyond the
            # margin) are not run.
            t.points.sort(key=lambda p: -(v if (v := scored.get(p.point_id)) is not None else -math.inf))
            t._scores = scored  # type: ignore[attr-defined]
            ranked.append((best_pred, t))
        ranked.sort(key=lambda x: -x[0])
        self._queue = [t for _, t in ranked]

    def _calibration(self) -> float:
        if not self._ratios:
            return 1.0
        r = sorted(self._ratios)
        return r[len(r) // 2]

    def _best_measured(self) -> float | None:
        vals = [
            v for r in self.results.values() if r.status == "ok" and self.slo.holds(r.summary) if (v := score(r, self.spec.objective)) is not None
        ]
        return max(vals) if vals else None

    def _can_beat(self, predicted: float | None) -> bool:
        best = self._best_measured()
        if best is None or predicted is None or self.predictor is None:
            return True
        k = self._calibration()
        # Scores are "higher is better"; for minimized objectives they are negative, and
        # the optimistic bound moves toward zero.
        optimistic = predicted * k * (1 + self.margin) if predicted >= 0 else predicted * k * (1 - self.margin)
        return optimistic > best

    def next_trial(self) -> TrialPlan | None:
        if self._tpe is not None:
            return self._tpe_next()
        while self._queue:
            t = self._queue.pop(0)
            if t.trial_key in self.taken:
                continue
            pred = (t.predicted or {}).get("score")
            if not self._can_beat(pred) and not any(p.point_id in self.results for p in t.points):
                t.skip_reason = f"pruned: predicted {self.key} cannot beat the best measured"
                self.skipped.append((t, t.skip_reason))
                continue
            return t
        return None

    def observe(self, trial: TrialPlan, point: PointPlan, row: PointRow) -> None:
        super().observe(trial, point, row)
        scores = getattr(trial, "_scores", {})
        pred = scores.get(point.point_id)
        measured = score(row, self.spec.objective) if row.status == "ok" else None
        if pred and measured and pred > 0 and measured > 0:
            self._ratios.append(measured / pred)
        if row.status != "ok" or not self.slo.holds(row.summary):
            self._blocked.add(trial.trial_key)
            self._block_load = getattr(self, "_block_load", {})
            self._block_load.setdefault(trial.trial_key, []).append(load_knob_value(point))

    def next_point(self, trial: TrialPlan) -> PointPlan | None:
        scores = getattr(trial, "_scores", {})
        blocked = getattr(self, "_block_load", {}).get(trial.trial_key, [])
        for p in trial.points:
            if p.point_id in self.results:
                continue
            if blocked and any(load_knob_value(p) >= b for b in blocked):
                continue  # a lower load already broke the SLO
            if self.predictor is not None and scores and p.point_id not in scores:
                continue  # predicted to miss the SLOs even with the estimator's margin
            if self.predictor is not None and not self._can_beat(scores.get(p.point_id)):
                continue
            return p
        return None


def make_strategy(spec: SweepSpec, predictor=None) -> Strategy:
    return {"grid": GridStrategy, "adaptive": AdaptiveStrategy, "sla": SLAStrategy}[spec.strategy](spec, predictor)


__all__ = ["Strategy", "GridStrategy", "AdaptiveStrategy", "SLAStrategy", "make_strategy", "make_point_id"]
