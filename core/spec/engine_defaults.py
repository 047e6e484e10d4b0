"""The batch limits vLLM picks when the user sets none, by version, GPU and entry point.

vLLM's V1 engine does not have one default ``max_num_batched_tokens`` / ``max_num_seqs``: it
chooses by the GPU it finds and by how it was started (``EngineArgs.get_batch_defaults``):

- v0.8.0-0.8.4 (PR #12369, 2025-01): H100/H200 by name get a 16384-token budget offline
  (the ``LLM`` class: ``benchmark_throughput``) and 8192 behind the OpenAI API server
  (``vllm serve``); every other GPU 8192 and 2048. ``max_num_seqs`` 256 everywhere.
- v0.8.5 (PR #17073, 2025-04): any GPU with at least 70 GiB of memory gets the large budget
  and ``max_num_seqs`` 1024 in both contexts.
- v0.9.0 on (PR #17885, 2025-05): the same, except A100s, which went back to the small
  defaults (a large budget cost 36% of throughput on Llama-70B TP2).

So ``vllm serve`` on an H100 admits up to 1024 requests at once with an 8192-token step
budget, and on an L4, an A10G, an L40S or an A100 only 256 with a 2048-token budget: a
burst of 1000 prompts decodes ~4x more sequences per step on the first, and a 4k-token
prompt takes two steps of prefill on the second. The older engines (chunked prefill off) and
the other engines keep their profile's defaults.
"""

from __future__ import annotations

import re

GIB_LARGE = 70.0  # vLLM: device_memory >= 70 * GiB_bytes


def checked_release(version: str | None) -> str | None:
    """``version`` when it names an engine release ("0.10.1", "0.5.3rc0"), None for none or
    blank; ValueError (a field's message) for anything else ("v0.10", "latest")."""
    v = (version or "").strip()
    if v and not re.match(r"\d+\.\d+", v):
        raise ValueError("must be a release number such as 0.10.1")
    return v or None


def release(version: str | None, parts: int = 2) -> tuple[int, ...]:
    """The leading numeric parts of a version string, at most ``parts``: "0.10.2" -> (0, 10),
    "1.0rc1" -> (1,), "x" or None -> ()."""
    out: list[int] = []
    for part in (version or "").split(".")[:parts]:
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def vllm_batch_defaults(version: str | None, gpu_name: str | None, gpu_memory_gib: float | None, offline: bool = False) -> tuple[int, int] | None:
    """(max_num_batched_tokens, max_num_seqs) that vLLM's V1 engine uses when neither is set,
    or None for a version before V1 (0.8). An unknown version is taken as current.
    ``offline``: started as the ``LLM`` class (offline benchmarks) rather than ``vllm serve``."""
    rel = release(version, 3)
    if rel and rel[:2] < (0, 8):
        return None
    name = (gpu_name or "").lower()
    big_memory = (gpu_memory_gib or 0.0) >= GIB_LARGE
    if rel and rel < (0, 8, 5):
        big_budget = "h100" in name or "h200" in name
        seqs = 256
    else:
        big_budget = big_memory if rel and rel < (0, 9) else big_memory and "a100" not in name
        seqs = 1024 if big_budget else 256
    if big_budget:
        return (16384 if offline else 8192), seqs
    return (8192 if offline else 2048), seqs


def batch_defaults_for(engine: str | None, version: str | None, gpu) -> tuple[int, int] | None:
    """:func:`vllm_batch_defaults` behind ``vllm serve`` for an engine name and a
    :class:`core.spec.hardware.GPU` (knee's simulator stands in for vLLM); None for other
    engines, whose profile defaults stand."""
    if (engine or "vllm").lower() not in ("vllm", "sim") or gpu is None:
        return None
    return vllm_batch_defaults(version, gpu.name, gpu.usable_bytes / 2**30)


def with_engine_defaults(config, engine: str | None, version: str | None, gpu):
    """``config`` (a :class:`core.spec.serving.ServerConfig`) with the batch limits it leaves
    unset filled in as the engine would choose them on ``gpu``."""
    d = batch_defaults_for(engine, version, gpu)
    if d is None:
        return config
    update = {}
    if config.max_num_batched_tokens is None:
        update["max_num_batched_tokens"] = d[0]
    if config.max_num_seqs is None:
        update["max_num_seqs"] = min(d[1], update.get("max_num_batched_tokens", config.max_num_batched_tokens))
    return config.model_copy(update=update) if update else config
