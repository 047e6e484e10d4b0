"""The sweep's events, typed: one pydantic model per kind the runner emits.

A runner writes events to its study's store (``Runner.emit``), and the TUI, ``knee attach``
and :class:`core.results.follow.StudyFollower` read them back. The schema of each kind lives
here, in the lowest layer, so that every layer shares it: the runner checks what it emits
against it (:func:`check_emitted`: a misspelt field or a wrong type fails in the tests, not
silently in a viewer) and the viewers read attributes (:func:`parse_event`) instead of
``data.get("...")``.

Reading is lenient and emitting is strict, on purpose:

- every field has a default (None where the runner may leave it out), and unknown keys are
  kept (``extra="allow"``): a study written by an older or newer knee, or by hand, still reads;
- a kind this version has never heard of reads as :class:`GenericEvent` rather than raising,
  and so does a stored event whose values do not fit its model: a viewer never fails on it;
- the runner validates in strict mode (no "3" for an int) and refuses keys its model does
  not declare.

The stored JSON is the emitted ``data`` as it is: these models check it, they do not
reshape it (``knee results``, exports and existing studies depend on its shape).
"""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from core.spec.study import Event

log = logging.getLogger(__name__)


class _Payload(BaseModel):
    model_config = ConfigDict(extra="allow")

    worker: str | None = None  # the emitting worker's id, on every event of a --join worker


class StudyStarted(_Payload):
    """At every (re)start of a runner (or a --join worker's arrival)."""

    kind: Literal["study_started"] = "study_started"
    model: str | None = None
    engine: str | None = None
    strategy: str | None = None
    planned_trials: int | None = None
    planned_points: int | None = None
    resumed_points: int | None = None  # already stored when it started
    simulated: bool | None = None
    host: str | None = None  # a --join worker's host


class TrialStarted(_Payload):
    kind: Literal["trial_started"] = "trial_started"
    trial_id: int | None = None
    server_args: dict[str, Any] | None = None
    engine: str | None = None
    log_path: str | None = None  # None on sim and external engines
    gpus: list[int] | None = None  # None: nothing pinned


class ServerReady(_Payload):
    kind: Literal["server_ready"] = "server_ready"
    trial_id: int | None = None
    start_s: float | None = None
    base_url: str | None = None  # None on sim
    pid: int | None = None  # None on sim
    simulated: bool | None = None
    # False: the engine logged that the trial's GPUs lack peer-to-peer access (all-reduce
    # through host memory; core/serve/startup_log.py); None: not reported.
    gpu_p2p: bool | None = None
    # The release the server reported (GET /version) on the study's first launch, which its
    # predictions use from then on; None: not asked (known already, or another engine).
    engine_version: str | None = None


class Progress(_Payload):
    """At 4 Hz while a point runs on a real server, at its start, and once with phase "end"."""

    kind: Literal["progress"] = "progress"
    trial_id: int | None = None
    point_id: str | None = None
    load: str | None = None  # the load point's label
    client_args: dict[str, Any] | None = None
    phase: Literal["start", "run", "end"] | None = None
    elapsed_s: float | None = None
    # From the load client (core/sweep/measure.py).
    running: int | None = None  # requests in flight
    completed: int | None = None
    failed: int | None = None
    total: int | None = None
    client_elapsed_s: float | None = None
    output_tokens: int | None = None
    output_tokens_per_s: float | None = None
    warmup: bool | None = None
    # From vLLM's /metrics (the telemetry sampler).
    server_running: float | None = None
    server_waiting: float | None = None
    kv_cache_usage: float | None = None  # 0..1
    gpu: dict[str, Any] | None = None  # NVML's used/total GiB, util %, power W; or the simulator's plan
    gpu_memory: str | None = None  # its one-line text, "(sim)" when simulated


class PointDone(_Payload):
    """A load point is stored (ok or failed)."""

    kind: Literal["point_done"] = "point_done"
    trial_id: int | None = None
    point_id: str | None = None
    load: str | None = None
    client_args: dict[str, Any] | None = None
    status: str | None = None  # "ok" | "failed"
    reason: str | None = None
    meets_slo: bool | None = None
    violations: list[str] | None = None
    simulated: bool | None = None
    output_throughput: float | None = None
    request_throughput: float | None = None
    p99_e2el_ms: float | None = None
    mean_ttft_ms: float | None = None
    completed: float | None = None
    failed: float | None = None
    duration_s: float | None = None


class PointSkipped(_Payload):
    """A configuration the strategy ruled out (infeasible, predicted to miss the SLOs, pruned)."""

    kind: Literal["point_skipped"] = "point_skipped"
    trial_id: int | None = None
    server_args: dict[str, Any] | None = None
    reason: str | None = None
    points: int | None = None


class TrialFailed(_Payload):
    kind: Literal["trial_failed"] = "trial_failed"
    trial_id: int | None = None
    failure: str | None = None  # oom, crashed_at_start, bad_args, start_timeout, crashed, infeasible
    reason: str | None = None  # with the server log's last lines
    server_args: dict[str, Any] | None = None


class TrialDone(_Payload):
    kind: Literal["trial_done"] = "trial_done"
    trial_id: int | None = None
    status: str | None = None
    points: int | None = None


class Paused(_Payload):
    """A pause asked through the store took effect (the server stays up while paused)."""

    kind: Literal["paused"] = "paused"
    trial_id: int | None = None  # None from a parallel coordinator
    server_up: bool | None = None
    points_run: int | None = None


class Continued(_Payload):
    kind: Literal["continued"] = "continued"
    trial_id: int | None = None
    paused_s: float | None = None
    server_up: bool | None = None  # a parallel coordinator's
    points_run: int | None = None  # a parallel coordinator's


class _RunTotals(_Payload):
    """What a run did (core.sweep.summary.summary_dict)."""

    points_run: int | None = None
    points_failed: int | None = None
    points_resumed: int | None = None
    launches: int | None = None
    trials_failed: int | None = None
    trials_skipped: int | None = None
    gpu_seconds: float | None = None
    wall_s: float | None = None


class StudyDone(_RunTotals):
    kind: Literal["study_done"] = "study_done"


class StudyInterrupted(_RunTotals):
    kind: Literal["study_interrupted"] = "study_interrupted"
    signal: str | None = None  # "stop request" for a stop asked through the store


class WorkerDone(_RunTotals):
    """A --join worker found nothing left to claim."""

    kind: Literal["worker_done"] = "worker_done"


class WorkerInterrupted(_RunTotals):
    """A --join worker stopped while others still run the study."""

    kind: Literal["worker_interrupted"] = "worker_interrupted"
    signal: str | None = None


class Calibration(_Payload):
    """Predicted against measured for the point just measured (core/sweep/calibration.py)."""

    kind: Literal["calibration"] = "calibration"
    trial_id: int | None = None
    point_id: str | None = None
    tp: int | None = None
    stage: str | None = None  # profile, scaled, none
    refitted: bool | None = None
    refits: int | None = None
    uncalibrated: dict[str, float | None] | None = None
    predicted: dict[str, float | None] | None = None
    measured: dict[str, float | None] | None = None


class LeaseLost(_Payload):
    kind: Literal["lease_lost"] = "lease_lost"
    trial_id: int | None = None


class LeaseTakenOver(_Payload):
    kind: Literal["lease_taken_over"] = "lease_taken_over"
    trial_id: int | None = None
    from_worker: str | None = None
    rerun_point: str | None = None  # the point in flight when its worker went silent


class GenericEvent(BaseModel):
    """A kind this version does not know (or a stored event that does not fit its model)."""

    model_config = ConfigDict(extra="allow")

    kind: str


SweepEvent = Annotated[
    Union[
        StudyStarted,
        TrialStarted,
        ServerReady,
        Progress,
        PointDone,
        PointSkipped,
        TrialFailed,
        TrialDone,
        Paused,
        Continued,
        StudyDone,
        StudyInterrupted,
        WorkerDone,
        WorkerInterrupted,
        Calibration,
        LeaseLost,
        LeaseTakenOver,
    ],
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[SweepEvent] = TypeAdapter(SweepEvent)
# The kinds declared above (each model's ``kind`` default).
KINDS: frozenset[str] = frozenset(m.model_fields["kind"].default for m in get_args(get_args(SweepEvent)[0]))


def parse_event(kind: str, data: dict[str, Any]) -> SweepEvent | GenericEvent:
    """The typed event for a stored ``(kind, data)``; never raises (see the module's doc)."""
    if kind in KINDS:
        try:
            return _ADAPTER.validate_python({**data, "kind": kind})
        except ValidationError as e:
            log.debug("a stored %s event does not fit its model; read as generic: %s", kind, e)
    return GenericEvent.model_validate({**data, "kind": kind})


def check_emitted(kind: str, data: dict[str, Any]) -> SweepEvent:
    """Validate what a runner is about to emit: a declared kind, declared fields, strict types.

    Raises ValueError (pydantic's ValidationError is one) naming what is wrong."""
    if kind not in KINDS:
        raise ValueError(f"unknown sweep event kind {kind!r}: declare its model in core/spec/events.py")
    ev = _ADAPTER.validate_python({**data, "kind": kind}, strict=True)
    if ev.model_extra:
        raise ValueError(f"{kind} event: undeclared field(s) {sorted(ev.model_extra)}: fix the name or declare it in core/spec/events.py")
    return ev


class StoredEvent(Event):
    """A stored event (``seq``, ``study``, ``time``, ``kind``, ``data``) with its typed payload."""

    @cached_property
    def event(self) -> SweepEvent | GenericEvent:
        return parse_event(self.kind, self.data)
