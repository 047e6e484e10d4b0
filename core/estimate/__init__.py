"""The estimator: one step cost model, the memory plan, predictions, limits and suggestions.

Entry points: :func:`estimate` (the whole report for a plan or arguments) and
:class:`Predictor` (one configuration at one load point, for the TUI and the sweep's
adaptive strategy). Nothing here prints or imports a UI library.
"""

from core.estimate.costmodel import Batch, CostModel, StepBreakdown
from core.estimate.limits import Limits, compute_limits
from core.estimate.memory import MemoryPlan, plan_memory
from core.estimate.predict import Prediction, Predictor, Stats
from core.estimate.report import ConfigEstimate, EstimateReport, estimate
from core.estimate.suggest import Suggestion

__all__ = [
    "Batch",
    "CostModel",
    "StepBreakdown",
    "MemoryPlan",
    "plan_memory",
    "Prediction",
    "Predictor",
    "Stats",
    "Limits",
    "compute_limits",
    "ConfigEstimate",
    "EstimateReport",
    "estimate",
    "Suggestion",
]
