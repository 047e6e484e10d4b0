"""Container flavours: how a :class:`ServerConfig` becomes a container environment, and
which image runs it.

Facts (``shared/reference/sagemaker.md`` §2–5):

- **LMI** (DJL Serving + vLLM, ECR ``djl-inference``): ``OPTION_<KEY>`` → ``option.<key>``;
  vLLM engine args pass through when the key is a vLLM ``EngineArgs`` field.
  ``OPTION_MAX_ROLLING_BATCH_SIZE`` is vLLM's ``max_num_seqs`` and its *default changed*
  from 256 (v15/v16) to 32 (v17+ async mode), so it is always set.
- **SageMaker vLLM DLC** (ECR ``vllm``): ``SM_VLLM_<NAME>`` → ``--<name>``; ``true`` is a
  bare flag and ``false`` *omits* the flag, so turning off an on-by-default feature needs
  the negated name (``SM_VLLM_NO_ENABLE_PREFIX_CACHING=true``). CUDA 13 images need
  ``InferenceAmiVersion`` on the production variant.
- **TGI** (ECR ``huggingface-pytorch-tgi-inference``): launcher env vars; in maintenance
  mode since 2025-12-11 and without data parallelism.

Each mapping returns the environment *and* a per-knob report; :func:`check_knobs` then
verifies against the environment itself that no knob the trial set was lost.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from core.errors import BadInput
from core.spec.serving import ServerConfig

Container = Literal["lmi", "vllm", "tgi"]
CONTAINERS: tuple[str, ...] = ("lmi", "vllm", "tgi")

# The knobs knee tunes; each must reach the container or the plan fails.
KNOBS = (
    "tp",
    "dp",
    "max_num_batched_tokens",
    "max_num_seqs",
    "max_model_len",
    "gpu_memory_utilization",
    "quantization",
    "kv_cache_dtype",
    "enable_prefix_caching",
)

# The AMI the SageMaker vLLM docs pair with CUDA 13 (cu130) images; a value of the
# botocore 1.44.5 ProductionVariantInferenceAmiVersion enum.
CUDA13_AMI = "al2-ami-sagemaker-inference-gpu-3-1"


class KnobMapping(BaseModel):
    """Where one tuned knob went. ``status``: ``exact`` (same semantics), ``approximate``
    (mapped to the closest setting; a warning), ``default`` (the trial left it unset and the
    container's engine default is the same one the trial ran with), ``dropped`` (no way to
    pass it: the plan fails)."""

    model_config = ConfigDict(frozen=True)

    knob: str
    value: Any
    variable: str | None = None
    env_value: str | None = None
    status: Literal["exact", "approximate", "default", "dropped"]
    note: str = ""


@dataclass(frozen=True)
class Flavour:
    name: str
    title: str
    sdk_framework: str  # sagemaker.core.image_uris framework key
    default_version: str | None  # None = the newest the SDK knows
    legacy: bool = False


FLAVOURS: dict[str, Flavour] = {
    "lmi": Flavour("lmi", "LMI (DJL Serving + vLLM)", "djl-lmi", None),
    "vllm": Flavour("vllm", "SageMaker vLLM DLC", "vllm", None),
    "tgi": Flavour("tgi", "Hugging Face TGI DLC (legacy, maintenance mode since 2025-12-11)", "huggingface-llm", None, legacy=True),
}


def _s(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def _snake(name: str) -> str:
    return name.strip().lstrip("-").replace("-", "_").lower()


def _extra_conflict(cfg: ServerConfig) -> None:
    # An extra arg that duplicates a tuned knob would race it for the same variable.
    aliases = {"tensor_parallel_size": "tp", "data_parallel_size": "dp", "quantize": "quantization"}
    for k in cfg.extra_args:
        s = _snake(k)
        s = s[3:] if s.startswith("no_") else s
        if s in KNOBS or s in aliases:
            raise BadInput(f"extra argument {k!r} duplicates the tuned knob {aliases.get(s, s)}", "set it through the knob, not extra_args")


class _EnvReport:
    """A container's environment and the report of where each knob went, built together."""

    def __init__(self, **env: str):
        self.env: dict[str, str] = dict(env)
        self.rep: list[KnobMapping] = []

    def put(self, knob: str, value: Any, var: str, status="exact", note="", env_value: str | None = None) -> None:
        self.env[var] = env_value if env_value is not None else _s(value)
        self.rep.append(KnobMapping(knob=knob, value=value, variable=var, env_value=self.env[var], status=status, note=note))

    def default(self, knob: str, value: Any = None) -> None:
        """The trial left the knob unset: the container's engine default applies."""
        self.rep.append(KnobMapping(knob=knob, value=value, status="default"))

    def put_set(self, knob: str, value: Any, var: str, **kw) -> None:
        """``put`` when the trial set the knob (not None), else the default entry."""
        if value is not None:
            self.put(knob, value, var, **kw)
        else:
            self.default(knob)

    def drop(self, knob: str, value: Any, note: str) -> None:
        self.rep.append(KnobMapping(knob=knob, value=value, status="dropped", note=note))

    def result(self) -> tuple[dict[str, str], list[KnobMapping]]:
        return self.env, self.rep


# ---- LMI -------------------------------------------------------------------------------
def lmi_env(cfg: ServerConfig) -> tuple[dict[str, str], list[KnobMapping]]:
    out = _EnvReport(HF_MODEL_ID=cfg.model)
    out.put("tp", cfg.tp, "OPTION_TENSOR_PARALLEL_DEGREE")
    # Always explicit: LMI's default is 256 before v17 and 32 from v17 (async mode).
    out.put(
        "max_num_seqs",
        cfg.seqs,
        "OPTION_MAX_ROLLING_BATCH_SIZE",
        note="" if cfg.max_num_seqs else "vLLM's default 256, set explicitly: LMI v17+ would use 32",
    )
    out.put_set("max_num_batched_tokens", cfg.max_num_batched_tokens, "OPTION_MAX_NUM_BATCHED_TOKENS")
    out.put_set("max_model_len", cfg.max_model_len, "OPTION_MAX_MODEL_LEN")
    out.put("gpu_memory_utilization", cfg.gpu_memory_utilization, "OPTION_GPU_MEMORY_UTILIZATION")
    if cfg.quantization:
        out.put("quantization", cfg.quantization, "OPTION_QUANTIZE")
    else:
        out.default("quantization")
    if cfg.kv_cache_dtype != "auto":
        out.put("kv_cache_dtype", cfg.kv_cache_dtype, "OPTION_KV_CACHE_DTYPE", note="vLLM EngineArgs pass-through")
    else:
        out.default("kv_cache_dtype", "auto")
    # Explicit either way: the default has changed across vLLM versions.
    out.put(
        "enable_prefix_caching",
        cfg.enable_prefix_caching,
        "OPTION_ENABLE_PREFIX_CACHING",
        note="vLLM EngineArgs pass-through; false becomes --no-enable-prefix-caching",
    )
    if cfg.dp > 1:
        out.put("dp", cfg.dp, "OPTION_DATA_PARALLEL_SIZE", note="vLLM EngineArgs pass-through")
    else:
        out.default("dp", 1)
    for k, v in cfg.extra_args.items():
        out.env[f"OPTION_{_snake(k).upper()}"] = _s(v)
    return out.result()


# ---- SageMaker vLLM DLC ------------------------------------------------------------------
def vllm_env(cfg: ServerConfig) -> tuple[dict[str, str], list[KnobMapping]]:
    out = _EnvReport(SM_VLLM_MODEL=cfg.model)
    out.put("tp", cfg.tp, "SM_VLLM_TENSOR_PARALLEL_SIZE")
    if cfg.dp > 1:
        out.put("dp", cfg.dp, "SM_VLLM_DATA_PARALLEL_SIZE")
    else:
        out.default("dp", 1)
    for knob, var in (
        ("max_num_batched_tokens", "SM_VLLM_MAX_NUM_BATCHED_TOKENS"),
        ("max_num_seqs", "SM_VLLM_MAX_NUM_SEQS"),
        ("max_model_len", "SM_VLLM_MAX_MODEL_LEN"),
        ("quantization", "SM_VLLM_QUANTIZATION"),
    ):
        out.put_set(knob, getattr(cfg, knob), var)
    out.put("gpu_memory_utilization", cfg.gpu_memory_utilization, "SM_VLLM_GPU_MEMORY_UTILIZATION")
    if cfg.kv_cache_dtype != "auto":
        out.put("kv_cache_dtype", cfg.kv_cache_dtype, "SM_VLLM_KV_CACHE_DTYPE")
    else:
        out.default("kv_cache_dtype", "auto")
    # "false" would omit the flag and leave vLLM's default (on); the negated flag turns it off.
    if cfg.enable_prefix_caching:
        out.put("enable_prefix_caching", True, "SM_VLLM_ENABLE_PREFIX_CACHING")
    else:
        out.put(
            "enable_prefix_caching",
            False,
            "SM_VLLM_NO_ENABLE_PREFIX_CACHING",
            env_value="true",
            note="SM_VLLM_*=false omits the flag, so the negated flag is set",
        )
    for k, v in cfg.extra_args.items():
        name = _snake(k).upper()
        if v is False:
            out.env[f"SM_VLLM_NO_{name}"] = "true"
        else:
            out.env[f"SM_VLLM_{name}"] = _s(v)
    return out.result()


# ---- TGI ---------------------------------------------------------------------------------
_TGI_QUANT = {"awq", "gptq", "fp8", "bitsandbytes", "bitsandbytes-nf4", "bitsandbytes-fp4", "eetq", "exl2", "marlin", "compressed-tensors"}
_TGI_KV = {"fp8", "fp8_e4m3fn", "fp8_e5m2"}


def tgi_env(cfg: ServerConfig) -> tuple[dict[str, str], list[KnobMapping]]:
    out = _EnvReport(HF_MODEL_ID=cfg.model)
    out.put("tp", cfg.tp, "SM_NUM_GPUS", note="the TGI entrypoint maps it to NUM_SHARD")
    if cfg.dp > 1:
        out.drop("dp", cfg.dp, "TGI has no data parallelism; deploy dp=1 copies instead")
    else:
        out.default("dp", 1)
    out.put_set(
        "max_num_batched_tokens",
        cfg.max_num_batched_tokens,
        "MAX_BATCH_PREFILL_TOKENS",
        status="approximate",
        note="TGI budgets prefill tokens per batch; vLLM budgets all tokens per step",
    )
    out.put_set(
        "max_num_seqs",
        cfg.max_num_seqs,
        "MAX_BATCH_SIZE",
        status="approximate",
        note="TGI enforces MAX_BATCH_SIZE only on hardware without unpadded inference; on CUDA the batch is bounded by MAX_BATCH_TOTAL_TOKENS",
    )
    if cfg.max_model_len is not None:
        out.put("max_model_len", cfg.max_model_len, "MAX_TOTAL_TOKENS", note="input + output")
        out.env["MAX_INPUT_TOKENS"] = str(max(1, cfg.max_model_len - 1))
    else:
        out.default("max_model_len")
    out.put(
        "gpu_memory_utilization",
        cfg.gpu_memory_utilization,
        "CUDA_MEMORY_FRACTION",
        status="approximate",
        note="TGI's fraction bounds the process's share of GPU memory, as vLLM's does",
    )
    if cfg.quantization:
        if cfg.quantization.lower() in _TGI_QUANT:
            out.put("quantization", cfg.quantization, "HF_MODEL_QUANTIZE", note="the entrypoint maps it to QUANTIZE")
        else:
            out.drop("quantization", cfg.quantization, f"TGI has no {cfg.quantization!r} quantization")
    else:
        out.default("quantization")
    if cfg.kv_cache_dtype != "auto":
        kv = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2"}.get(cfg.kv_cache_dtype, cfg.kv_cache_dtype)
        if kv in _TGI_KV:
            out.put("kv_cache_dtype", cfg.kv_cache_dtype, "KV_CACHE_DTYPE", env_value=kv)
        else:
            out.drop("kv_cache_dtype", cfg.kv_cache_dtype, "TGI's KV_CACHE_DTYPE takes fp8 or fp8_e5m2")
    else:
        out.default("kv_cache_dtype", "auto")
    # TGI 3 reads PREFIX_CACHING from the environment (on by default with flashinfer).
    out.put(
        "enable_prefix_caching",
        cfg.enable_prefix_caching,
        "PREFIX_CACHING",
        env_value="1" if cfg.enable_prefix_caching else "0",
        status="approximate",
        note="TGI 3 server env var [uncertain]",
    )
    for k, v in cfg.extra_args.items():
        out.env[_snake(k).upper()] = _s(v)
    return out.result()


MAPPERS = {"lmi": lmi_env, "vllm": vllm_env, "tgi": tgi_env}


def container_env(container: str, cfg: ServerConfig) -> tuple[dict[str, str], list[KnobMapping]]:
    if container not in MAPPERS:
        raise BadInput(f"unknown container {container!r}", f"use one of {', '.join(CONTAINERS)}")
    _extra_conflict(cfg)
    return MAPPERS[container](cfg)


def check_knobs(cfg: ServerConfig, env: dict[str, str], report: list[KnobMapping]) -> list[str]:
    """Problems that make a plan unsafe: a knob the trial set that is dropped, missing from
    the report, or whose variable is absent from (or differs in) the final environment.
    Checking against ``env`` rather than trusting the report catches a later write (an extra
    argument, a secret) clobbering a mapped variable."""
    problems: list[str] = []
    by_knob = {m.knob: m for m in report}
    for knob in KNOBS:
        m = by_knob.get(knob)
        if m is None:
            problems.append(f"{knob}: not mapped by this container")
            continue
        if m.status == "dropped":
            problems.append(f"{knob}={m.value}: dropped ({m.note})")
        elif m.status == "default":
            # Only allowed when the trial left the knob at the engine's default.
            val = getattr(cfg, knob)
            defaults = {"dp": 1, "kv_cache_dtype": "auto"}
            if val is not None and val != defaults.get(knob):
                problems.append(f"{knob}={val}: set by the trial but not passed to the container")
        elif m.variable is None or env.get(m.variable) != m.env_value:
            problems.append(f"{knob}: {m.variable} is {env.get(m.variable or '')!r} in the environment, expected {m.env_value!r}")
    return problems


# ---- images --------------------------------------------------------------------------------
def _vkey(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.\-]", v))


@lru_cache(maxsize=1)
def _image_uris():
    # sagemaker v3's image_uris is a pure lookup in bundled JSON plus botocore endpoint
    # data when a region is given: no network, no credentials (sagemaker.md §5).
    from sagemaker.core import image_uris

    return image_uris


def sdk_versions(container: str) -> list[str]:
    fl = FLAVOURS[container]
    vs = [v for v in _image_uris().list_versions(fl.sdk_framework) if v != "latest" and v.count(".") == 2]
    return sorted(vs, key=_vkey)


@dataclass(frozen=True)
class Image:
    uri: str
    version: str
    source: str

    @property
    def cuda13(self) -> bool:
        return bool(re.search(r"cu13\d", self.uri))


def resolve_image(container: str, region: str, version: str | None = None) -> Image:
    """The ECR image for ``container`` in ``region`` at ``version`` (default: the newest the
    pinned sagemaker-core knows). Unknown regions and versions are :class:`BadInput`."""
    from importlib.metadata import version as _dist_version

    fl = FLAVOURS[container]
    versions = sdk_versions(container)
    ver = version or versions[-1]
    try:
        uri = _image_uris().retrieve(framework=fl.sdk_framework, region=region, version=ver)
    except ValueError as e:
        msg = str(e)
        if "region" in msg.lower():
            raise BadInput(f"unknown region {region!r}: the sagemaker SDK has no {fl.sdk_framework} image there") from None
        raise BadInput(f"unknown {container} image version {ver!r}", f"the sagemaker SDK knows {', '.join(versions[-6:])}") from None
    sdk = _dist_version("sagemaker-core")
    return Image(
        uri=uri, version=ver, source=f"sagemaker-core {sdk} image_uris.retrieve(framework={fl.sdk_framework!r}, region={region!r}, version={ver!r})"
    )
