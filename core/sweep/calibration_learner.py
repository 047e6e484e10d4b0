"""The runner's side of calibration (:mod:`core.sweep.calibration`): around each real measured
point, predict it from what the study measured before, learn from it, store the profile with
the study, and report both as a ``calibration`` event, read as one line by the text output and
the TUI's log (:func:`calibration_line`).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from core.errors import BadInput
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.workload import Workload
from core.sweep.calibration import StudyCalibration, for_study

log = logging.getLogger(__name__)


class StudyLearner:
    """What the runner calls around each real measured point: predict it from what the study
    measured before it, learn from it, store the profile with the study, and report both.

    The ``calibration`` event carries the point's prediction made before it was measured
    (uncalibrated and calibrated) beside what was measured, so the Sweep and Pareto views and
    ``knee attach`` can show predicted against measured as the sweep goes."""

    KEYS = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms", "request_throughput")

    def __init__(self, store, study: str, calibration: StudyCalibration):
        self.store, self.study, self.calibration = store, study, calibration

    @classmethod
    def for_runner(cls, store, study: str, spec, base_predictor) -> StudyLearner | None:
        """None on the simulator (nothing to learn: it is the model) or where the machine is unknown."""
        if spec.engine.kind == "sim":
            return None
        try:
            cal = for_study(spec, base=base_predictor.predict if base_predictor is not None else None)
        except BadInput as e:  # unknown model or hardware: the sweep runs uncalibrated, and says so
            log.warning("calibration off for study %s: %s", study, e)
            return None
        if cal is None:
            return None
        if cal.base is None:
            # No estimator-backed predictor for this spec (a CPU host has no GPU entry): the
            # uncalibrated reference is the estimator pricing the machine from nominal figures.
            from core.sweep.predict import SurrogatePredictor

            cal.base = SurrogatePredictor.for_spec(spec, cal.arch, cal.hardware).predict
        cal.name = study
        # A resumed study learns again from what it already measured, in the order measured.
        for p in sorted(store.points(study, status="ok"), key=lambda p: p.started_at or 0):
            if not p.simulated:
                cal.observe(p.server_args, p.client_args, p.summary)
        return cls(store, study, cal)

    def after_point(self, cfg: ServerConfig, workload: Workload, load: LoadPoint, row) -> dict[str, Any] | None:
        """Learn from one stored point; the ``calibration`` event's data (None when the point
        cannot inform a fit)."""
        if row.status != "ok" or row.simulated:
            return None
        base = self.calibration.base(cfg, workload, load) if self.calibration.base else {}
        before = self.calibration.predict(cfg, workload, load)
        stage = self.calibration.stage(cfg.tp)
        refitted = self.calibration.observe(row.server_args, row.client_args, row.summary)
        if refitted:
            info = dict((self.store.study(self.study) or {}).get("info") or {})
            info["calibration"] = self.calibration.as_dict()
            self.store.set_study(self.study, info=info)
        pick = lambda d: {k: _num(d.get(k)) for k in self.KEYS}  # noqa: E731
        return {
            "point_id": row.point_id,
            "tp": cfg.tp,
            "stage": stage,
            "refitted": refitted,
            "refits": self.calibration.refits,
            "uncalibrated": pick(base or {}),
            "predicted": pick(before or {}),
            "measured": pick(row.summary),
        }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def calibration_line(d: dict[str, Any]) -> str:
    """One line for a ``calibration`` event: predicted against measured for the point just
    measured, and whether the profile was refitted (the sweep's text output and the TUI log)."""
    p, m, u = d.get("predicted") or {}, d.get("measured") or {}, d.get("uncalibrated") or {}

    def pair(key: str, unit: str, fmt: str) -> str:
        if m.get(key) is None:
            return ""
        pred = p.get(key) if p.get(key) is not None else u.get(key)
        err = f" ({(pred - m[key]) / m[key]:+.0%})" if pred is not None and m[key] else ""
        shown = format(pred, fmt) if pred is not None else "-"
        return f"{key.split('_')[0] if key != 'mean_tpot_ms' else 'TPOT'} predicted {shown} vs measured {format(m[key], fmt)} {unit}{err}"

    parts = [x for x in (pair("output_throughput", "tok/s", ".0f"), pair("mean_tpot_ms", "ms", ".2f")) if x]
    stage = {"profile": "calibrated", "scaled": "scaled by the first point", "none": "uncalibrated"}.get(d.get("stage", ""), d.get("stage", ""))
    refit = f"; step profile refitted ({d.get('refits')} so far)" if d.get("refitted") else ""
    return f"calibration ({stage}): " + "; ".join(parts) + refit
