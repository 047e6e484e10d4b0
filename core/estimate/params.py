"""The estimator's parameters: ``calibration.toml`` (efficiencies per GPU architecture,
all-reduce costs per interconnect, engine profiles), the fit's temporary overrides
(:func:`calibrated`), and the engine profile for an engine and release
(:func:`engine_profile`). :mod:`core.estimate.costmodel` prices steps from them.
"""

from __future__ import annotations

import tomllib
from contextlib import contextmanager
from functools import lru_cache
from importlib import resources

from core.errors import BadInput
from core.spec.engine_defaults import release


@lru_cache(maxsize=1)
def _calibration_file() -> dict:
    return tomllib.loads(resources.files("core.estimate").joinpath("calibration.toml").read_text())


_override: dict | None = None  # set only inside calibrated(...) (bench/fit.py)


def calibration() -> dict:
    """The efficiency factors and engine profiles: ``calibration.toml``, or inside
    :func:`calibrated` that file with some values replaced."""
    return _override if _override is not None else _calibration_file()


def calibration_with(params: dict[str, float]) -> dict:
    """``calibration.toml`` with the values named in ``params`` replaced, each named by its
    section path and key: ``{"architecture.hopper.mfu": 0.7, "engine.vllm.step_us": 500.0}``.
    The file and the cached table are left as they are; an unknown name is an error."""
    base = _calibration_file()
    out = {sec: {name: dict(tab) for name, tab in base[sec].items()} for sec in ("architecture", "interconnect", "engine")}
    out.update({k: v for k, v in base.items() if k not in out})
    for key, value in params.items():
        sec, name, field = key.split(".")
        if name not in out[sec]:
            raise KeyError(f"no [{sec}.{name}] in calibration.toml")
        out[sec][name][field] = float(value)
    return out


@contextmanager
def calibrated(params: dict[str, float] | None):
    """Within the block, every CostModel (the estimator's and the simulator's) and engine
    profile built reads :func:`calibration_with` ``(params)`` instead of calibration.toml.
    Objects built before keep their values. Not thread-safe (a module-level switch)."""
    global _override
    saved = _override
    _override = calibration_with(params) if params else None
    try:
        yield _override
    finally:
        _override = saved


def _release(version: str | None) -> tuple[int, ...]:
    """The leading numeric parts of a version string, at most (major, minor): "0.10.2" ->
    (0, 10), "1.0rc1" -> (1,), "x" or None -> ()."""
    return release(version, 2)


# Other spellings of the engines knee models, as benchmark reports and tools write them.
ENGINE_ALIASES = {
    "trtllm": "tensorrt-llm",
    "trt-llm": "tensorrt-llm",
    "tensorrt_llm": "tensorrt-llm",
    "tensorrtllm": "tensorrt-llm",
    "text-generation-inference": "tgi",
    "nvidia-nim": "nim",
}


def canonical_engine(engine: str | None) -> str:
    """The engine's name as knee's profiles know it: lower case, other spellings mapped
    (``TRT-LLM`` -> ``tensorrt-llm``, ``text-generation-inference`` -> ``tgi``); None -> vllm."""
    name = (engine or "vllm").strip().lower()
    return ENGINE_ALIASES.get(name, name)


def engine_profile(engine: str, version: str | None = None) -> dict[str, float]:
    """Overheads for an engine. vLLM by version: before 0.6 the legacy engine, 0.6 and 0.7
    the V0 engine (faster, still no chunked prefill by default), from 0.8 V1, from 0.14 (or
    unknown: the current release) V1 with async scheduling.
    TGI before 2.0 (2023: vLLM's paged-attention kernels under a Python model server, no
    overlapped scheduling) runs on the legacy profile: on 127 published TGI 1.0/1.1 rows
    (bench/data/published.jsonl fmbench-*, tgisagemaker-*) the median error of req/s is 31%
    with it and 83% with the current-vLLM profile."""
    table = calibration()["engine"]
    name = canonical_engine(engine)
    asked = name
    release = _release(version)
    if name == "tgi" and release and release[0] < 2:
        name = "vllm-legacy"
    if name in ("vllm", "sim") and not release:
        # No version: the current release, which schedules asynchronously (0.14 on).
        name = "vllm-async"
    elif name in ("vllm", "sim") and (len(release) == 2 or release >= (1,)):
        if release < (0, 6):
            name = "vllm-legacy"
        elif release < (0, 8):
            name = "vllm-v0"
        elif release >= (0, 14):
            # Async scheduling on by default (vLLM PR #27614, the last item of the async
            # scheduling plan, issue #27679): the host schedules step N+1 while the GPU runs N.
            name = "vllm-async"
    if name == "sglang" and release and len(release) == 2 and release < (0, 4):
        name = "sglang-legacy"
    if name == "nim":
        # NIM for LLMs serves pre-built TensorRT-LLM engines (its "optimized profiles") on the
        # data-center GPUs it supports, vLLM only as a generic fallback
        # (docs.nvidia.com/nim/large-language-models/latest/profiles.html). On the 9 published
        # NIM 1.8 rows (Llama-3.3-70B FP8 TP2, H100) the TensorRT-LLM profile (FP8 KV with FP8
        # weights, memory after weights) gives out tok/s within 10% at saturation, vLLM's 30% low.
        name = "tensorrt-llm"
    if name in ("sim", "other", "tgi", "custom"):
        name = "vllm"
    if name not in table:
        raise BadInput(f"unknown engine {engine!r}", "use one of vllm, sglang, tensorrt-llm, nim or tgi; --engine-version names a release")
    prof = table[name]
    parent = prof.get("inherits")
    # A version's profile names the profile it differs from and sets only what differs.
    out = {**table[parent], **{k: v for k, v in prof.items() if k != "inherits"}} if parent else prof
    if asked == "tgi":
        # TGI's router admits a request against max_batch_total_tokens with its whole
        # max_new_tokens counted: it waits rather than evicts.
        out = {**out, "evicts_when_full": 0}
    return out


def engine_under_env(engine: str | None, version: str | None, env: dict[str, str] | None) -> str:
    """The engine to predict a server with, given the environment it was started in: vLLM
    0.8-0.10 started with ``VLLM_USE_V1=0`` runs its V0 engine (``vllm-v0``: no chunked
    prefill by default, a slower step), not the V1 engine its release defaults to; from 0.11
    V0 is gone and the variable changes nothing, and before 0.8 V0 is the default anyway.
    Measured on the ten published vLLM 0.9.1 runs that set it (Mistral-7B and a Qwen3-8B
    distill on an A100 PCIe, bench/data/heldout.jsonl livinA100), median error priced as V0
    against priced as V1: TTFT 37% against 49%, ITL 14% against 21%, E2E 15% against 31%."""
    name = canonical_engine(engine)
    rel = _release(version)
    forced_v0 = str((env or {}).get("VLLM_USE_V1", "")).strip() == "0"
    if name == "vllm" and forced_v0 and len(rel) == 2 and (0, 8) <= rel < (0, 11):
        return "vllm-v0"
    return engine or "vllm"
