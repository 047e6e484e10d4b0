"""What a load run is made of and gives back: the :class:`Target` protocol every client
implements, the :class:`Progress` reports, :class:`ClientHealth` and :class:`LoadResult`
(``to_json`` is the vllm bench serve-compatible export). Driving the load is
:mod:`core.load.runner`'s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from core.load.datasets import Prompt
from core.load.metrics import per_request_arrays
from core.spec.records import RequestRecord
from core.spec.serving import LoadPoint


class Target(Protocol):
    name: str
    model: str

    async def open(self, limit: int) -> None: ...

    async def close(self) -> None: ...

    async def send(self, prompt: Prompt, rec: RequestRecord, t0: float) -> str: ...


@dataclass(slots=True)
class Progress:
    running: int
    completed: int
    failed: int
    total: int | None  # expected measured requests (None: stop by duration)
    elapsed_s: float
    duration_s: float | None
    output_tokens: int
    output_tokens_per_s: float
    warmup: bool = False


@dataclass
class ClientHealth:
    loop_lag_p99_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    send_lag_p99_ms: float = 0.0  # open loop only: dispatch − schedule, before cap waits
    send_lag_max_ms: float = 0.0
    cpu_fraction: float = 0.0  # process CPU seconds / wall seconds (1.0 = one core busy)
    warning: str | None = None
    # "kernel": chunk stamps are the kernel's receive times, immune to client scheduling;
    # "user": taken when the client read the bytes; "mixed": some of each (core.load.rawhttp)
    timestamps: str = "user"

    def as_dict(self) -> dict[str, Any]:
        return {
            "loop_lag_p99_ms": self.loop_lag_p99_ms,
            "loop_lag_max_ms": self.loop_lag_max_ms,
            "send_lag_p99_ms": self.send_lag_p99_ms,
            "send_lag_max_ms": self.send_lag_max_ms,
            "cpu_fraction": self.cpu_fraction,
            "warning": self.warning,
            "timestamps": self.timestamps,
        }


@dataclass
class LoadResult:
    records: list[RequestRecord]
    duration_s: float
    summary: dict[str, float]
    health: ClientHealth
    load_point: LoadPoint
    target: str = ""
    model: str = ""
    transport: str = ""
    warmup_records: list[RequestRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    t0: float = 0.0  # time.perf_counter() origin of every record time (CLOCK_MONOTONIC on Linux)
    wall_t0: float = 0.0  # time.time() at the same moment, for export

    def to_json(self, detailed: bool = True) -> dict[str, Any]:
        """vllm bench serve-style result: summary keys at top level, then knee's extras."""
        out: dict[str, Any] = {
            "backend": self.target,
            "model_id": self.model,
            "transport": self.transport,
            "request_rate": self.load_point.request_rate if self.load_point.request_rate is not None else "inf",
            "max_concurrency": self.load_point.concurrency,
            "burstiness": self.load_point.burstiness,
            "num_prompts": len(self.records),
            "num_warmups": len(self.warmup_records),
        }
        out.update(self.summary)
        out["client_health"] = self.health.as_dict()
        out["notes"] = list(self.notes)
        if detailed:
            out.update(per_request_arrays(self.records))
        return out
