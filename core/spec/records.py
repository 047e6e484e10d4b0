"""Per-request records: what the load client and the simulator both produce.

Times are seconds on one monotonic clock (``time.perf_counter`` for real runs, virtual
time for simulated ones), relative to the start of the load point. ``chunk_times[i]`` is
when the i-th streamed chunk arrived and ``chunk_tokens[i]`` how many tokens it carried,
so per-token ITL and per-chunk ITL can both be derived (``shared/reference/metrics.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestRecord:
    index: int
    send_time: float  # when the request left the client (after any client-side queueing)
    scheduled_time: float | None = None  # when the schedule wanted it sent (open loop)
    input_tokens: int = 0
    output_tokens: int = 0
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    end_time: float | None = None
    error: str | None = None
    simulated: bool = False
    # Added by the load client (core/load); all optional so the simulator can ignore them.
    # ``chunk_times`` holds content-carrying messages only (non-empty text, content or
    # reasoning), each stamped at the first byte of its SSE message; ``end_time`` is t_end
    # (the usage chunk or [DONE]). The timestamps below keep the other definitions of
    # metrics.md recomputable (vLLM parity, stream setup, TTFO).
    headers_time: float | None = None  # t_headers: response headers arrived
    first_message_time: float | None = None  # first ``choices`` message, even if empty (vLLM chat TTFT)
    first_output_time: float | None = None  # first non-reasoning content (TTFO)
    wall_start_ns: int | None = None  # time.time_ns() at send, for export only
    output_tokens_usage: int | None = None  # usage.completion_tokens as the server reported it
    output_tokens_retokenized: int | None = None  # joined text through the model's tokenizer
    input_tokens_usage: int | None = None  # usage.prompt_tokens (may include BOS / chat template)
    status: int | None = None  # HTTP status (or SageMaker's), when one arrived

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_time is not None

    @property
    def first_token_time(self) -> float | None:
        # len(), not truthiness: simulated records carry numpy arrays here.
        return self.chunk_times[0] if len(self.chunk_times) else None

    @property
    def ttft(self) -> float | None:
        ft = self.first_token_time
        return None if ft is None else ft - self.send_time

    @property
    def e2e(self) -> float | None:
        return None if self.end_time is None else self.end_time - self.send_time

    @property
    def tpot(self) -> float | None:
        """Decode time per output token after the first: (last − first) / (N − 1)."""
        if self.output_tokens < 2 or len(self.chunk_times) < 1:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / (self.output_tokens - 1)

    @property
    def queue_delay(self) -> float:
        """Time the client held the request past its schedule (open loop)."""
        return 0.0 if self.scheduled_time is None else max(0.0, self.send_time - self.scheduled_time)
