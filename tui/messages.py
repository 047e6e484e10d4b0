"""Messages that carry results from workers back to the UI thread.

Workers (threads) never touch widgets: they post one of these and the screen updates itself
in an ``@on`` handler. High-rate messages define ``can_replace`` so a newer one replaces a
pending one instead of queueing behind it (toolong's backpressure idiom).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from core.spec.plan import Plan
    from tui.data.estimate import EstimateView
    from tui.data.sweep_state import SweepSnapshot


@dataclass
class ModelResolved(Message):
    """The model reference in the plan was looked up (catalog, cache or hub)."""

    ref: str
    summary: str | None
    error: str | None

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ModelResolved)


@dataclass
class EstimateReady(Message):
    """The estimate of one plan, computed in a worker."""

    plan: "Plan"
    view: "EstimateView"

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EstimateReady)


@dataclass
class EstimateFailed(Message):
    plan: "Plan"
    error: str


@dataclass
class SweepUpdated(Message):
    """A coalesced view of the followed sweep (posted at most a few times a second)."""

    snapshot: "SweepSnapshot"

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SweepUpdated)


@dataclass
class SweepStartFailed(Message):
    error: str


@dataclass
class DeployProgress(Message):
    """One step of applying or deleting a deployment."""

    step: str
    detail: str = ""
    done: bool = False
    error: str | None = None
    result: Any = None


@dataclass
class StudyLoaded(Message):
    """A study's points (and the estimator's predictions for them), read in a worker."""

    study: str
    points: list
    predicted: dict
    info: dict
    constraints: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StudyLoaded) and message.study == self.study


@dataclass
class DeployPlanned(Message):
    """A deployment plan built (or refused with the reason) in a worker."""

    plan: Any
    error: str | None = None

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DeployPlanned)
