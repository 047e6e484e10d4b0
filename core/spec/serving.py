"""A server configuration (one launch) and a load point (one measurement on it)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.errors import BadInput


class ServerConfig(BaseModel):
    """The knobs knee tunes. Anything else the engine accepts rides in ``extra_args``
    (kebab- or snake-case names, emitted as ``--name=value``)."""

    model_config = ConfigDict(frozen=True)

    model: str
    tp: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_model_len: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    quantization: str | None = None  # fp8, awq, gptq, mxfp4, ...
    kv_cache_dtype: str = "auto"  # auto (= weights' activation dtype) or fp8
    enable_prefix_caching: bool = True
    extra_args: dict[str, Any] = Field(default_factory=dict)

    @property
    def num_gpus(self) -> int:
        return self.tp * self.dp

    # vLLM V1 defaults when unset (online serving, chunked prefill on).
    @property
    def batched_tokens(self) -> int:
        return self.max_num_batched_tokens or 8192

    @property
    def seqs(self) -> int:
        return self.max_num_seqs or 256

    def engine_arg(self, name: str, default: Any = None) -> Any:
        """An engine argument from ``extra_args``, given in either spelling (snake_case name)."""
        return self.extra_args.get(name, self.extra_args.get(name.replace("_", "-"), default))

    @property
    def stream_interval(self) -> int:
        """Tokens per streamed message (vLLM's and SGLang's ``--stream-interval``, default 1):
        the API server sends a running request's tokens every this many steps (the first at
        once, the last at the end), so its streaming work per token falls by this much. The
        gap between messages grows by it (``chunk_itl``); ITL, spread over the tokens a
        message carries (core/load/metrics.py), and TPOT do not."""
        raw = self.engine_arg("stream_interval", 1)
        try:
            n = int(raw)
        except (TypeError, ValueError):
            n = 0
        if n < 1 or str(raw).strip() not in (str(n), f"{n}.0"):
            raise BadInput(f"stream_interval must be a whole number of tokens, at least 1, got {raw!r}", "1 streams every token")
        return n

    def key(self) -> str:
        """A stable identity: two configs with the same key run on the same server."""
        import json

        return json.dumps(self.model_dump(mode="json"), sort_keys=True)


class LoadPoint(BaseModel):
    """One measurement: closed loop at ``concurrency`` or open loop at ``request_rate``."""

    model_config = ConfigDict(frozen=True)

    concurrency: int | None = Field(default=None, ge=1)
    request_rate: float | None = Field(default=None, gt=0)  # req/s; None with concurrency = closed loop
    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    burstiness: float = Field(default=1.0, gt=0)  # gamma shape; 1 = Poisson
    num_prompts: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> "LoadPoint":
        if self.concurrency is None and self.request_rate is None:
            raise ValueError("a load point needs a concurrency or a request rate")
        return self

    @property
    def label(self) -> str:
        parts = []
        if self.request_rate is not None:
            parts.append(f"{self.request_rate:g} req/s")
        if self.concurrency is not None:
            parts.append(f"c={self.concurrency}")
        return " ".join(parts)
