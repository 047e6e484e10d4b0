"""The estimator: one step cost model, the memory plan, predictions and suggestions."""

from core.estimate.costmodel import Batch, CostModel, StepBreakdown
from core.estimate.memory import MemoryPlan, plan_memory

__all__ = ["Batch", "CostModel", "StepBreakdown", "MemoryPlan", "plan_memory"]
