"""Model architectures: from a local directory, the bundled catalog, or the HF cache/hub.

Lookup order for a reference ``ref``:
1. an existing local directory (or ``config.json`` file) — read with ``transformers.AutoConfig``;
2. the bundled catalog (:mod:`core.catalog.bundled`: ``data/models/<org>--<name>.json``,
   copied verbatim from the published ``config.json`` files, and its aliases: chat variants
   and distillations with the same dimensions; re-quantizations, with their own
   ``quantization_config``);
3. the Hugging Face cache, then the hub unless offline (``HF_HUB_OFFLINE=1`` or
   ``offline=True``), through ``AutoConfig``.

A model that none of these knows is reported as unknown, never guessed, with the bundled ids
it resembles.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from core.errors import BadInput
from core.catalog.bundled import bundled_config, bundled_models, close_bundled
from core.catalog.quantization import config_dtype, quantization_of
from core.spec.model import ModelArch

# Interleaved local/global attention, when a config has no layer_types: one layer in every
# this many attends globally, the others over the sliding window.
_SLIDING_EVERY = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6, "gemma4": 6, "gemma4_text": 6, "cohere2": 4}

# Dimensions a published config.json leaves to its model type's config class, which
# transformers fills in (checked in transformers 5.23.0, Gemma3TextConfig()): Gemma 3's
# multimodal files (gemma-3-4b/12b/27b-it) give text_config no vocab_size and no context.
_CLASS_DEFAULTS: dict[str, dict[str, int]] = {"gemma3_text": {"vocab_size": 262208, "max_position_embeddings": 131072}}

# What ``tie_word_embeddings`` means when a config.json leaves it out: the default of the
# model type's own config class, as transformers reads it. Checked in transformers 5.23.0
# (models/<type>/configuration_<type>.py, e.g. gemma2's ``tie_word_embeddings: bool = True``,
# llama's ``= False``): these decoder types default to True (Gemma 1-4, Falcon, Cohere,
# StarCoder2, GPT-2/BigCode, ...). Llama, Mistral, Mixtral, Qwen2/3 (+MoE), Phi/Phi-3,
# DBRX, Granite, DeepSeek-V2/V3, GLM-4(-MoE), gpt-oss, MiniMax and the remote-code classes
# knee meets (Arctic, InternLM2) set False, which is also the rule for a type not listed.
# transformers 4.x's PretrainedConfig defaulted to True, so the remote-code Falcon types
# (RefinedWeb, RefinedWebModel), whose config class does not set it, tie too.
_TIED_BY_DEFAULT = frozenset(
    {
        "RefinedWeb",
        "RefinedWebModel",
        "bloom",
        "cohere",
        "cohere2",
        "cohere2_moe",
        "ernie4_5",
        "ernie4_5_moe",
        "falcon",
        "falcon_mamba",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "gemma3n",
        "gemma3n_text",
        "gemma4",
        "gemma4_text",
        "gpt2",
        "gpt_bigcode",
        "gpt_neo",
        "granite_swa",
        "jetmoe",
        "lfm2",
        "lfm2_moe",
        "mamba",
        "minicpm3",
        "mpt",
        "opt",
        "recurrent_gemma",
        "smollm3",
        "starcoder2",
        "vaultgemma",
        "xglm",
        "zamba",
        "zamba2",
    }
)


def tie_word_embeddings(cfg: dict[str, Any], outer: dict[str, Any] | None = None) -> bool:
    """Whether the LM head shares the input embedding: the config's own key, else the
    wrapper's (multimodal configs may keep it outside ``text_config``), else the default of
    the model type's transformers config class (see ``_TIED_BY_DEFAULT``)."""
    for c in (cfg, outer or {}):
        if c.get("tie_word_embeddings") is not None:
            return bool(c["tie_word_embeddings"])
    return str(cfg.get("model_type", "")) in _TIED_BY_DEFAULT


def _autoconfig(ref: str, local_only: bool) -> dict[str, Any]:
    # transformers is heavy; import it only on this path.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(ref, local_files_only=local_only, trust_remote_code=False)
    return cfg.to_dict()


def _read_local(path: Path) -> dict[str, Any]:
    cfg_file = path / "config.json" if path.is_dir() else path
    if not cfg_file.exists():
        raise BadInput(f"{path} has no config.json", "point --model at a Hugging Face model directory")
    try:
        raw = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{cfg_file} is not valid JSON ({e})", "re-download the model's config.json") from None
    if not isinstance(raw, dict):
        raise BadInput(f"{cfg_file} does not hold a JSON object")
    text_config = raw.get("text_config")
    inner: dict = text_config if isinstance(text_config, dict) else raw
    # AutoConfig would fill the gaps with the class defaults (a 7B Llama); refuse instead.
    for keys in (
        ("hidden_size", "n_embd", "d_model"),
        ("num_hidden_layers", "n_layer", "num_layers"),
        ("num_attention_heads", "n_head"),
        ("vocab_size",),
    ):
        if not any(inner.get(k) is not None for k in keys):
            raise BadInput(
                f"config for {str(path)!r} lacks {keys[0]} (one of hidden_size, num_hidden_layers, num_attention_heads, vocab_size)",
                "is it a decoder-only language model's config.json?",
            )
    try:
        return _autoconfig(str(cfg_file.parent), local_only=True)
    except Exception:
        # An architecture transformers does not know (or a partial config) still has the
        # fields knee needs; read them straight from the file.
        return raw


# How long to wait for the hub's host to answer before calling it unreachable.
_HUB_CONNECT_S = 3.0
# A client that goes through a proxy never connects to the hub's host itself.
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def _hub_unreachable() -> str | None:
    """Why the Hugging Face hub (``HF_ENDPOINT``, as huggingface_hub reads it) cannot be
    reached, or None when a connection to it opens. One connection, before transformers
    asks: without network its client retries each request five times with backoff, which
    measured 24.5 s and ten lines of retry warnings before a one-line "unknown model" on a
    box with no DNS, against well under a second with this check. Behind a proxy (one of
    ``_PROXY_VARS`` set) the hub's host may be unreachable directly and fine through it:
    no check, the client's own answer stands."""
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return None
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = url.hostname or "huggingface.co"
    try:
        port = url.port or (80 if url.scheme == "http" else 443)
    except ValueError:
        return f"HF_ENDPOINT {url.geturl()!r} has no valid port"
    try:
        socket.create_connection((host, port), timeout=_HUB_CONNECT_S).close()
    except OSError as e:
        return f"{host}:{port} is unreachable ({e.strerror or type(e).__name__})"
    return None


def _unknown_hint(ref: str, otherwise: str) -> str:
    close = close_bundled(ref)
    return f"did you mean {' or '.join(close)}?" if close else otherwise


def load_config_dict(ref: str, offline: bool | None = None) -> tuple[dict[str, Any], str]:
    """The raw config dict for ``ref`` and where it came from."""
    if not ref or not ref.strip():
        raise BadInput("no model given", "pass --model with a Hugging Face id or a local directory")
    path = Path(ref).expanduser()
    if path.exists():
        return _read_local(path), f"local {path}"
    cfg = bundled_config(ref)
    if cfg is not None:
        return cfg, "bundled catalog"
    if offline is None:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false")
    if "/" not in ref:
        raise BadInput(
            f"unknown model {ref!r}",
            _unknown_hint(
                ref, "give a Hugging Face id like Qwen/Qwen3-4B or a local directory; bundled: " + ", ".join(bundled_models()[:6]) + ", ..."
            ),
        )
    try:
        return _autoconfig(ref, local_only=True), "HF cache"
    except Exception:
        pass
    if offline:
        raise BadInput(
            f"unknown model {ref!r}: not bundled, not a local directory, not in the HF cache",
            _unknown_hint(ref, "download it once with network, or pass a local directory"),
        )
    why = _hub_unreachable()
    if why:
        raise BadInput(
            f"unknown model {ref!r}: not bundled, not a local directory, not in the HF cache, and the hub {why}",
            _unknown_hint(ref, "download it once with network or from a mirror (HF_ENDPOINT), or pass a local directory"),
        )
    try:
        return _autoconfig(ref, local_only=False), "Hugging Face hub"
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadInput(f"unknown model {ref!r}: the hub lookup failed ({first[:160]})") from None


def load_model(ref: str, precision: str | None = None, offline: bool | None = None) -> ModelArch:
    """Resolve ``ref`` to a :class:`ModelArch`. ``precision`` overrides the checkpoint's
    weight format (bf16, fp16, fp8, int8, int4, awq, gptq, mxfp4)."""
    cfg, _ = load_config_dict(ref, offline)
    return arch_from_config(cfg, name=ref, precision=precision)


def _get(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


class _Fields:
    """Reads a config's integer fields, refusing what would make no model: a missing
    required field, a non-integer, zero or a negative count (one line naming the field)."""

    def __init__(self, cfg: dict[str, Any], name: str):
        self.cfg = cfg
        self.name = name

    def bad(self, what: str) -> BadInput:
        return BadInput(f"config for {self.name!r}: {what}", "fix the model's config.json")

    def get(self, *keys: str, default: Any = None, required: bool = False, minimum: int = 1) -> Any:
        key = next((k for k in keys if self.cfg.get(k) is not None), None)
        if key is None:
            if required:
                raise BadInput(
                    f"config for {self.name!r} lacks {keys[0]}" + (f" (or {', '.join(keys[1:])})" if keys[1:] else ""),
                    "is it a decoder-only language model's config.json?",
                )
            return default
        v = self.cfg[key]
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.bad(f"{key} = {json.dumps(v, default=str)[:60]} is not an integer")
        if v < minimum:
            raise self.bad(f"{key} = {v}, must be {'a positive integer' if minimum == 1 else f'at least {minimum}'}")
        return v


def arch_from_config(cfg: dict[str, Any], name: str, precision: str | None = None) -> ModelArch:
    """Build a :class:`ModelArch` from a HF config dict; raises :class:`BadInput` when the
    fields that decide memory and speed are missing."""
    outer: dict[str, Any] = {}
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM inside
        outer = cfg
        outer_q = cfg.get("quantization_config")
        cfg = {**cfg["text_config"], **({"quantization_config": outer_q} if outer_q else {})}
    cfg = {**_CLASS_DEFAULTS.get(str(cfg.get("model_type")), {}), **cfg}
    num = _Fields(cfg, name)
    hidden = num.get("hidden_size", "n_embd", "d_model", required=True)
    layers = num.get("num_hidden_layers", "n_layer", "num_layers", required=True)
    heads = num.get("num_attention_heads", "n_head", required=True)
    vocab = num.get("vocab_size", required=True)
    kv_heads = num.get("num_key_value_heads", "num_kv_heads", default=heads)
    # Falcon: multi_query means one KV head only in the old decoder; the new decoder
    # (Falcon-40B/180B) keeps num_kv_heads (transformers FalconAttention does the same).
    if cfg.get("multi_query") and not cfg.get("new_decoder_architecture"):
        kv_heads = 1
    if heads % kv_heads:
        raise num.bad(f"num_key_value_heads = {kv_heads} must divide num_attention_heads = {heads}")
    if "head_dim" not in cfg or cfg["head_dim"] is None:
        if hidden < heads:
            raise num.bad(f"hidden_size = {hidden} is smaller than num_attention_heads = {heads} and there is no head_dim")
    head_dim = num.get("head_dim", default=hidden // heads)
    inter = num.get("intermediate_size", "ffn_hidden_size", "n_inner", default=4 * hidden)
    model_type = str(cfg.get("model_type", "unknown"))
    # Falcon configs name no activation (FalconConfig's default is gelu, a plain 2-matrix MLP).
    default_act = "gelu" if model_type in ("falcon", "RefinedWeb", "RefinedWebModel") else "silu"
    act = str(_get(cfg, "hidden_act", "activation_function", "activation", default=default_act)).lower()
    gated = act in ("silu", "swiglu", "swish") or model_type in (
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "qwen3_moe",
        "gpt_oss",
        "gemma",
        "gemma2",
        "gemma3_text",
    )

    experts = num.get("num_local_experts", "num_experts", "n_routed_experts", default=0, minimum=0)
    top_k = num.get("num_experts_per_tok", "experts_per_token", "moe_topk", default=0, minimum=0)
    if experts and top_k > experts:
        raise num.bad(f"num_experts_per_tok = {top_k} is more than the {experts} experts")
    moe_inter = num.get("moe_intermediate_size", default=inter, minimum=0) or inter
    shared = num.get("shared_expert_intermediate_size", default=0, minimum=0)
    if cfg.get("n_shared_experts"):
        shared = num.get("n_shared_experts", minimum=0) * moe_inter
    if model_type == "llama4_text" and experts:
        # Llama 4 (transformers Llama4TextConfig): each routed expert and the one shared
        # expert are intermediate_size wide; the dense layers between MoE layers (Maverick)
        # use intermediate_size_mlp.
        moe_inter = shared = inter
        inter = num.get("intermediate_size_mlp", default=inter)
    moe_layers: tuple[int, ...] = ()
    if experts > 0 and top_k > 0:
        # Qwen2-MoE's decoder_sparse_step and Llama 4's interleave_moe_layer_step mean the
        # same: layer i is MoE when (i + 1) % step == 0.
        step = num.get("decoder_sparse_step", "interleave_moe_layer_step", default=1)
        dense_only = set(cfg.get("mlp_only_layers") or [])
        first_dense = num.get("first_k_dense_replace", default=0, minimum=0)
        moe_layers = tuple(i for i in range(layers) if i >= first_dense and i not in dense_only and (i + 1) % step == 0)

    # null/false/0 mean no window (seen in real configs); anything else must be a count.
    window = None if cfg.get("sliding_window") in (None, False, 0) else num.get("sliding_window")
    sliding: tuple[int, ...] = ()
    layer_types = cfg.get("layer_types")
    if window and isinstance(layer_types, list):
        sliding = tuple(i for i, t in enumerate(layer_types) if "sliding" in str(t))
    elif window and model_type in _SLIDING_EVERY:
        # Configs written before transformers had layer_types give only the window; their
        # model classes slide every layer but each pattern-th (transformers' Gemma2Config:
        # (i + 1) % 2; Gemma3's and Cohere2's sliding_window_pattern, default 6 and 4;
        # Gemma 4 also keeps its last layer global).
        every = num.get("sliding_window_pattern", default=_SLIDING_EVERY[model_type], minimum=1)
        sliding = tuple(i for i in range(layers) if (i + 1) % every)
        if model_type.startswith("gemma4") and layers - 1 in sliding:
            sliding = sliding[:-1]
    elif window and cfg.get("use_sliding_window", True) and model_type in ("mistral", "mixtral"):
        max_win = num.get("max_window_layers", default=layers, minimum=0) or layers
        sliding = tuple(range(min(max_win, layers)))
    if not sliding:
        window = None

    dtype = config_dtype(cfg)
    try:
        return ModelArch(
            name=name,
            model_type=model_type,
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=inter,
            vocab_size=vocab,
            max_position_embeddings=num.get("max_position_embeddings", "n_positions", "seq_length", default=4096),
            tie_embeddings=tie_word_embeddings(cfg, outer),
            gated_mlp=gated,
            attention_bias=bool(cfg.get("attention_bias", False)),
            num_experts=experts if moe_layers else 0,
            experts_per_token=top_k if moe_layers else 0,
            moe_intermediate_size=moe_inter if moe_layers else 0,
            shared_expert_intermediate_size=shared if moe_layers else 0,
            moe_layers=moe_layers,
            kv_lora_rank=num.get("kv_lora_rank", default=0, minimum=0),
            q_lora_rank=num.get("q_lora_rank", default=0, minimum=0),
            qk_rope_head_dim=num.get("qk_rope_head_dim", default=0, minimum=0),
            qk_nope_head_dim=num.get("qk_nope_head_dim", default=0, minimum=0),
            v_head_dim=num.get("v_head_dim", default=0, minimum=0),
            sliding_window=int(window) if window else None,
            sliding_layers=sliding,
            dtype=dtype if dtype != "fp32" else "bf16",
            quantization=quantization_of(cfg, precision),
        )
    except ValueError as e:
        raise BadInput(f"config for {name!r} has impossible values: {str(e).splitlines()[0]}") from None
