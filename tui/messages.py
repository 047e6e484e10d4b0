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
class FieldLookedUp(Message):
    """A Plan field's slow check finished in a worker: the model reference looked up
    (catalog, cache or hub), a lengths file read. ``key``: what was checked (the reference;
    the file's path and version)."""

    field: str
    key: str
    summary: str | None
    error: str | None

    def can_replace(self, message: Message) -> bool:
        # Only a result for the same thing: a late one for another must not drop this.
        return isinstance(message, FieldLookedUp) and (message.field, message.key) == (self.field, self.key)


@dataclass
class EstimateReady(Message):
    """The estimate of one plan, computed in a worker."""

    plan: "Plan"
    view: "EstimateView"

    def can_replace(self, message: Message) -> bool:
        # Only the same plan's: a superseded worker's late estimate must not drop the
        # current one (the screen ignores estimates of any other plan).
        return isinstance(message, EstimateReady) and message.plan == self.plan


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
    """A deployment plan built (or refused with the reason) in a worker, for the target
    fields as they were at ``generation``. A cancelled thread worker still runs to the end,
    so an older build can arrive after a newer one: the screen drops it, and a pending
    newer one is never replaced by it."""

    plan: Any
    error: str | None = None
    generation: int = 0

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DeployPlanned) and message.generation >= self.generation
