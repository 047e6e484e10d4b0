"""What a run did, as the runner's events and the parallel coordinator's workers report it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunSummary:
    study: str
    points_run: int = 0
    points_failed: int = 0
    points_resumed: int = 0
    launches: int = 0
    trials_failed: int = 0
    trials_skipped: int = 0
    gpu_seconds: float = 0.0
    wall_s: float = 0.0
    interrupted: bool = False
    sla: dict[str, Any] = field(default_factory=dict)


# The counters a worker of a parallel run prints as JSON and its coordinator adds up.
WORKER_COUNTS = ("points_run", "points_failed", "points_resumed", "launches", "trials_failed")


def summary_dict(s: RunSummary) -> dict[str, Any]:
    """The summary's numbers, as ``study_done``/``study_interrupted`` events carry them."""
    return {
        "points_run": s.points_run,
        "points_failed": s.points_failed,
        "points_resumed": s.points_resumed,
        "launches": s.launches,
        "trials_failed": s.trials_failed,
        "trials_skipped": s.trials_skipped,
        "gpu_seconds": s.gpu_seconds,
        "wall_s": s.wall_s,
    }
