"""How an engine sizes its KV cache, where it differs from vLLM's ``gpu_memory_utilization``
of the whole GPU with the model's KV dtype: one definition for the estimator
(:class:`core.estimate.predict.Predictor`) and the simulator (:func:`core.simulate.simulate`),
so that the two never size the same server differently."""

from __future__ import annotations

from core.estimate.memory import MemoryPlan
from core.spec.model import ModelArch


def engine_kv_dtype(profile: dict[str, float], arch: ModelArch, kv_dtype: str | None) -> str:
    """The KV dtype the engine uses when the user leaves it to the engine: TensorRT-LLM's FP8
    quantization (and NIM's TensorRT-LLM profiles) stores the KV cache in FP8 too."""
    if kv_dtype in ("auto", None, "") and profile.get("fp8_kv_with_fp8_weights") and arch.quantization.method == "fp8":
        return "fp8"
    return kv_dtype or "auto"


def engine_memory_utilization(profile: dict[str, float], plan: MemoryPlan, gpu_memory_utilization: float) -> float:
    """The share of the GPU the engine's KV cache and model take. TensorRT-LLM gives the KV
    cache a fraction of the memory left *after* the weights and activations
    (kv_cache_free_gpu_mem_fraction), not a fraction of the total as vLLM and SGLang do:
    the ``gpu_memory_utilization`` that gives the same KV cache (``plan`` is the plan at the
    server's own setting)."""
    frac = profile.get("kv_free_fraction")
    if not frac:
        return gpu_memory_utilization
    used = plan.weight_bytes + plan.activation_bytes + plan.runtime_bytes
    return min(1.0, (used + frac * max(plan.visible_bytes - used, 0.0)) / plan.visible_bytes)
