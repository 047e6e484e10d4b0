"""The adaptive strategy across ``--join`` workers: every decision reads the shared store.

A single runner keeps one :class:`~core.sweep.strategies.AdaptiveStrategy` for the whole study
and feeds it each point it measures. Workers cannot share an object, so each worker, whenever
it needs a configuration, builds the strategy afresh from the store (:func:`decide`): every
point stored so far by any worker is replayed into it, and the configurations that are done,
pruned or held by a live worker are ``taken`` (never proposed, never pruned here). Then:

- a configuration a worker claimed before and did not finish (it died: its lease expired; or it
  stopped and released it) is taken over first, as for grid: the point it had in flight runs
  again, marked re-run (the strategy proposed it once; a dead worker must not lose it). So is
  one with points stored but never claimed (a single runner's study that workers joined);
- else the strategy's next configuration is claimed with the lease (:func:`lease.claim` on that
  one trial): if another worker got it first, the worker decides again;
- the configurations the strategy ruled out on the way are recorded as pruned with one
  conditional write each (:func:`lease.prune`), so whoever prunes, each is recorded once.

While a worker runs its configuration, the same strategy object decides the load points,
and it reads the points the other workers stored since before each one (:class:`SharedStrategy`),
so a higher best measured elsewhere prunes loads here too. The study ends when the strategy
proposes nothing and no other worker holds a live lease (one might die and leave its
configuration to take over); every worker then ends.

In-flight concurrency costs a little: N workers claim N configurations before any is
measured, so up to N - 1 configurations that one runner would have pruned get measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from core.spec.study import PointRow
from core.sweep import lease
from core.sweep.control import CONTROL_POLL_S
from core.sweep.space import PointPlan, TrialPlan
from core.sweep.strategies import AdaptiveStrategy


@dataclass
class Decision:
    strategy: AdaptiveStrategy  # every stored point replayed into it
    trial: TrialPlan | None  # the configuration to claim; None: nothing to propose now
    prune: list[tuple[TrialPlan, str]] = field(default_factory=list)  # (configuration, why) to record
    live_elsewhere: int = 0  # configurations other live workers hold


class Replayer:
    """Feeds stored points into a strategy (and a real engine's learner) once each."""

    def __init__(self, store, study: str, learner: Any = None, learned: set[str] | None = None):
        self.store, self.study, self.learner = store, study, learner
        # Points the learner has seen: those stored before this worker started (it learned
        # them then) and this worker's own (the trial loop feeds it): the others' are fed here.
        self.learned = set(learned or ())

    def replay(self, s: AdaptiveStrategy) -> None:
        index = {p.point_id: (t, p) for t in s.plans for p in t.points}
        new = [row for row in self.store.points(self.study) if row.status in ("ok", "failed") and row.point_id not in s.results]
        for row in new:
            if row.point_id not in index:
                s.results[row.point_id] = row  # not in this worker's plan: counts for the best only
                continue
            s.observe(*index[row.point_id], row)
        self._learn([row for row in new if row.point_id not in self.learned])

    def _learn(self, rows: list[PointRow]) -> None:
        self.learned.update(row.point_id for row in rows)
        rows = [row for row in rows if row.status == "ok" and not row.simulated]
        if self.learner is None or not rows:
            return
        # What another box measured calibrates this box's predictions too, on the same
        # hardware only: a study joined with --allow-mixed-hardware learns from its own points.
        if ((self.store.study(self.study) or {}).get("info") or {}).get("mixed_hardware"):
            return
        for row in rows:
            self.learner.calibration.observe(row.server_args, row.client_args, row.summary)


def decide(store, study: str, spec, predictor, replayer: Replayer, now: float | None = None) -> Decision:
    """What a worker that holds nothing should do next, from the store as it is now."""
    now = time.time() if now is None else now
    leases = store.leases(study)
    s = AdaptiveStrategy(spec, predictor)
    plans = {t.trial_key: t for t in s.plans}
    live = {r["trial_key"] for r in leases if r["state"] == "running" and r["worker"] and (r["expires_at"] or 0) >= now}
    done = [r for r in leases if r["state"] == "done"]
    replayer.replay(s)
    # TPE (no estimator) learns per configuration: finished ones in the order they finished
    # (pruned ones, never claimed, are not results).
    for r in sorted(done, key=lambda r: r["heartbeat_at"] or 0):
        if r["attempts"] and r["trial_key"] in plans:
            s.trial_done(plans[r["trial_key"]])
    s.taken = live | {r["trial_key"] for r in done}
    free = [r for r in leases if r["trial_key"] not in s.taken and r["trial_key"] in plans]
    begun = {row.trial_key for row in s.results.values()}
    for r in free:
        # Claimed before and not finished (the lease says what re-runs), or begun by a single
        # runner before the workers joined: finish it first.
        if r["attempts"] or r["trial_key"] in begun:
            return Decision(s, plans[r["trial_key"]], [], len(live))
    prunable = {r["trial_key"] for r in free}
    trial = s.next_trial()
    prune = [(t, why) for t, why in s.skipped if t.trial_key in prunable]
    return Decision(s, trial, prune, len(live))


class SharedStrategy:
    """The decision's strategy for the configuration a worker runs: before each load point it
    reads what the other workers stored since, and it measures first the point a dead holder
    had in flight (``rerun``: the issue's rule, a taken-over point runs again)."""

    def __init__(self, strategy: AdaptiveStrategy, replayer: Replayer, rerun: str | None = None):
        self._s, self._replayer, self._rerun = strategy, replayer, rerun

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s, name)

    def observe(self, trial: TrialPlan, point: PointPlan, row: PointRow) -> None:
        self._replayer.learned.add(row.point_id)  # the trial loop fed the learner itself
        self._s.observe(trial, point, row)

    def next_point(self, trial: TrialPlan) -> PointPlan | None:
        self._replayer.replay(self._s)
        rerun, self._rerun = self._rerun, None
        if rerun is not None and rerun not in self._s.results:
            p = next((p for p in trial.points if p.point_id == rerun), None)
            if p is not None:
                return p
        return self._s.next_point(trial)


def work(r) -> None:
    """A :class:`~core.sweep.workers.JoinedRunner`'s loop on an adaptive study: decide, prune,
    claim, run, until the strategy proposes nothing and no other worker holds a live lease."""
    first = AdaptiveStrategy(r.spec, r.predictor)
    ids = r._db(lease.seed, r.study, first.plans)  # every configuration, pruned or not, has a lease
    replayer = Replayer(r.store, r.study, r.learner, {p.point_id for p in r.store.points(r.study)})
    r._announce(first)
    while True:
        r._checkpoint()
        d = decide(r.store, r.study, r.spec, r.predictor, replayer)
        for t, why in d.prune:
            if r._db(lease.prune, r.study, ids[t.trial_key], why):
                r.summary.trials_skipped += 1
                r.emit("point_skipped", trial_id=ids[t.trial_key], server_args=t.server_args, reason=why, points=len(t.points))
        if d.trial is not None:
            c = r._db(lease.claim, r.study, r.me, r.ttl_s, only=[ids[d.trial.trial_key]])
            if c is not None:
                r._run_claim(c, d.trial, strategy=SharedStrategy(d.strategy, replayer, c.rerun))
            continue  # the next decision sees what this one measured, or who got it first
        if not d.live_elsewhere:
            return  # nothing to propose and nobody to wait for: the study is complete
        time.sleep(CONTROL_POLL_S)  # another worker may store a better point, or die
        r._beat()


__all__ = ["Decision", "Replayer", "SharedStrategy", "decide", "work"]
