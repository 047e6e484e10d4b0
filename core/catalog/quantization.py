"""A checkpoint's weight format: what its ``config.json`` says (``quantization_config``,
``torch_dtype``), or the precision the user asks for instead."""

from __future__ import annotations

import json
from typing import Any

from core.errors import BadInput
from core.spec.model import Quantization, precision_key

DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16"}
PRECISION_HINT = "use bf16, fp16, fp8, int8, int4, awq, gptq, mxfp4 or nvfp4 (or a spelling such as bfloat16, w8a8, awq_marlin)"


def config_dtype(cfg: dict[str, Any]) -> str:
    """The 16/32-bit dtype a config declares (``torch_dtype``, or ``dtype`` in newer
    transformers), bf16 when it says none."""
    for key in ("torch_dtype", "dtype"):
        if cfg.get(key) is not None:
            return DTYPES.get(str(cfg[key]), "bf16")
    return "bf16"


def quantization_of(cfg: dict[str, Any], precision: str | None) -> Quantization:
    """The weight format of a checkpoint with config ``cfg``, or ``precision`` when given
    (any spelling :func:`core.spec.model.precision_key` knows; BadInput otherwise)."""
    if precision:
        p = precision_key(precision)
        if p is None:
            raise BadInput(f"unknown precision {precision!r}", PRECISION_HINT)
        native = quantization_of(cfg, None)
        if native.method == p:  # the checkpoint's own format: keep what its config says of it
            return native
        if p in ("bf16", "fp16", "fp32"):
            return Quantization(method=p, scope="all")
        return Quantization(method=p, scope="experts" if p == "mxfp4" else "linear")
    q = cfg.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower()
    if method == "mxfp4":
        return Quantization(method="mxfp4", scope="experts")
    if method in ("awq", "gptq"):
        bits = int(q.get("bits", q.get("w_bit", 4)))
        return Quantization(method=method if bits == 4 else "int8", scope="linear")
    if method == "compressed-tensors":
        fmt = _compressed_tensors(q)
        if _experts_only(cfg, q):
            return fmt.model_copy(update={"scope": "experts"})
        return fmt
    text = json.dumps(q).lower()
    if "nvfp4" in text:  # ModelOpt's NVFP4 (quant_algo "NVFP4")
        return Quantization(method="nvfp4", scope="linear")
    if method in ("fp8", "fbgemm_fp8") or "fp8" in text:
        return Quantization(method="fp8", scope="linear", block_scaled=bool(q.get("weight_block_size")))
    if method == "bitsandbytes":
        bits = q.get("bits") or (4 if q.get("load_in_4bit") else 8)
        return Quantization(method="int8" if int(bits) == 8 else "int4", scope="linear")
    dtype = config_dtype(cfg)
    if dtype == "fp32":
        # A checkpoint saved in float32 (Gemma 2's) is served in 16 bits: vLLM's --dtype auto
        # casts float32 weights down (to bf16 for Gemma 2, fp16 otherwise: 2 bytes either way).
        dtype = "bf16"
    return Quantization(method=dtype, scope="all")


def _compressed_tensors(q: dict[str, Any]) -> Quantization:
    """llm-compressor's format (RedHatAI's and neuralmagic's checkpoints): the weights'
    ``num_bits`` and ``type`` in the first config group. Its FP8 checkpoints say "float" and
    8 bits, never "fp8" ("format": "float-quantized"); W8A8 and W4A16 say "int"."""
    groups = q.get("config_groups") or {}
    weights = next((g.get("weights") or {} for g in groups.values() if isinstance(g, dict)), {})
    bits = int(weights.get("num_bits") or q.get("bits") or 8)
    if str(weights.get("type", "int")).lower() == "float":
        return Quantization(method="nvfp4" if bits == 4 else "fp8", scope="linear", block_scaled=weights.get("strategy") == "block")
    return Quantization(method="int8" if bits == 8 else "int4", scope="linear")


def _experts_only(cfg: dict[str, Any], q: dict[str, Any]) -> bool:
    """An MoE checkpoint whose quantization leaves attention out (``ignore`` names
    ``self_attn``): only the routed experts are quantized, as Kimi-K2.5's int4 is (its
    attention, shared experts and dense MLPs stay 16-bit)."""
    nested = cfg.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else cfg
    moe = any(text.get(k) for k in ("n_routed_experts", "num_experts", "num_local_experts"))
    return bool(moe) and any("self_attn" in str(x) for x in q.get("ignore") or ())
