"""A sweep and what it stores: the sweep spec, server trials, load-point results, events.

Vocabulary (the same everywhere in knee):

- **study**: one sweep, stored under a name in a workspace's study store.
- **trial**: one server configuration, i.e. one server launch (``server_args``). A trial is
  measured at one or more load points; the server restarts only between trials.
- **point**: one measurement (``client_args`` → a :class:`LoadPoint` and a :class:`Workload`)
  on one trial. Its ``point_id`` is a hash of the canonical JSON of both argument dicts, so
  resuming finds what was already measured whatever order the values were written in.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.spec.engine_defaults import checked_release

EngineKind = Literal["vllm", "sglang", "custom", "external", "sim"]
Strategy = Literal["grid", "adaptive", "sla"]
Objective = Literal["throughput", "throughput_per_gpu", "cost", "latency", "goodput"]


class EngineSpec(BaseModel):
    """How servers are started (or found). Secrets never live here: the API key is made
    fresh per launch and kept out of every store."""

    model_config = ConfigDict(frozen=True)

    kind: EngineKind = "sim"
    # vllm/sglang: the launch command before the args. Empty = the framework default
    # (``vllm serve {model}``; ``python3 -m sglang.launch_server --model-path {model}``).
    # ``python`` replaces that with ``PYTHON -m <module>``; ``executable`` replaces the
    # ``vllm`` executable; ``container`` wraps the command (e.g. ``docker run --gpus all
    # --network host IMAGE``). ``command`` is a full template for custom engines, with
    # placeholders {model} {host} {port} {api_key}.
    command: str | None = None
    python: str | None = None
    executable: str | None = None
    container: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None  # external engine
    host: str = "127.0.0.1"
    port: int | None = None  # None = a free port per launch
    ready_endpoint: str = "/health"
    start_timeout_s: float = Field(default=900.0, gt=0)
    request_timeout_s: float = Field(default=600.0, gt=0)
    stop_timeout_s: float = Field(default=15.0, gt=0)
    api: Literal["completions", "chat"] = "completions"
    # The engine's release, for predictions (core/estimate/params.engine_profile): None =
    # the current one until a launch answers GET /version (the runner then stores it here).
    version: str | None = None
    gpus: list[int] | None = None  # devices the sweep may use; None = all NVML sees
    # Seconds one launch costs on the simulator (model load + warmup), charged to GPU time.
    sim_launch_s: float = 90.0

    @field_validator("version")
    @classmethod
    def _a_release(cls, v: str | None) -> str | None:
        return checked_release(v)


class SweepSpec(BaseModel):
    """Everything a runner needs to run (or resume) a study; stored with the study."""

    model_config = ConfigDict(frozen=True)

    model: str
    engine: EngineSpec = EngineSpec()
    framework: Literal["vllm", "sglang", "max"] | None = "vllm"
    # Hardware for the estimator, the simulator and cost: an instance or GPU x count.
    instance: str | None = None
    gpu: str | None = None
    num_gpus: int | None = None
    gpu_p2p: bool = True  # False: the GPUs cannot reach each other peer-to-peer (Plan.gpu_p2p)
    # Parsed argument sets: [{"names": [...], "values": [[...], ...]}, ...]
    server_sets: list[dict[str, Any]] = Field(default_factory=list)
    client_sets: list[dict[str, Any]] = Field(default_factory=list)
    constraints: str = ""
    # Workload defaults when the client args do not say (the demo plan: 1024 in / 512 out).
    input_len: int = 1024
    output_len: int = 512
    strategy: Strategy = "grid"
    objective: Objective = "throughput"
    # SLA search: which load knob to search and its bounds.
    sla_knob: Literal["max_concurrency", "request_rate"] = "max_concurrency"
    sla_min: float = 1
    sla_max: float = 4096
    sla_tolerance: float = 0.05
    warmup: int = 1
    early_stop: bool = False  # end a load point once its metrics converge (real engines)
    parallel: bool = False  # grid: run trials side by side on disjoint GPUs
    max_error_fraction: float = Field(default=0.5, ge=0, le=1)  # "too many errors" above this
    seed: int = 0
    rest_s: float = 0.0  # pause between server launches


class TrialRow(BaseModel):
    """One server configuration of a study (one launch when it runs)."""

    study: str
    trial_id: int
    trial_key: str  # canonical JSON of server_args
    server_args: dict[str, Any]
    status: Literal["pending", "running", "ok", "failed", "skipped", "interrupted"] = "pending"
    reason: str | None = None
    cmd: str | None = None  # redacted: the API key never appears
    log_path: str | None = None
    launches: int = 0
    gpus: list[int] | None = None
    started_at: float | None = None
    ended_at: float | None = None
    start_s: float | None = None  # seconds from launch to ready
    predicted: dict[str, Any] | None = None


class PointRow(BaseModel):
    """One measured (or failed) load point."""

    study: str
    point_id: str
    trial_id: int
    trial_key: str
    server_args: dict[str, Any]
    client_args: dict[str, Any]
    status: Literal["ok", "failed", "interrupted"] = "ok"
    reason: str | None = None
    summary: dict[str, Any] = Field(default_factory=dict)
    telemetry: dict[str, Any] = Field(default_factory=dict)
    simulated: bool = False
    source: str = "knee"  # knee | llm-optimizer | vllm-bench | aiperf
    search: str = "grid"  # grid | adaptive | sla
    started_at: float | None = None
    ended_at: float | None = None
    gpu_seconds: float = 0.0  # GPU-time this point cost (virtual on the simulator)
    cmd: str | None = None
    meets_slo: bool | None = None
    violations: list[str] = Field(default_factory=list)

    def value(self, key: str) -> Any:
        """A summary value, with the load knobs readable as metrics too."""
        if key in self.summary:
            return self.summary[key]
        if key in self.client_args:
            return self.client_args[key]
        return self.server_args.get(key)


class Event(BaseModel):
    """One entry of a study's event stream (``core.results.store.StudyStore.events``/``follow``).

    ``seq`` increases strictly within a store; a follower keeps the last ``seq`` it saw and
    asks for what came after. ``kind`` and ``data`` are as the runner emitted them: the kinds
    and their fields are declared once, as models, in :mod:`core.spec.events` (a kind this
    version does not know still reads: a newer runner may share the store)."""

    seq: int
    study: str
    time: float
    kind: str
    data: dict[str, Any] = Field(default_factory=dict)


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def make_point_id(server_args: dict[str, Any], client_args: dict[str, Any]) -> str:
    blob = canonical_json({"server": server_args, "client": client_args})
    return hashlib.sha1(blob.encode()).hexdigest()[:16]
