"""Whether a server configuration can start, as a real vLLM decides it, and which scheduler
generation an engine version runs.

Infeasible configurations raise :class:`InfeasibleConfig` (a :class:`RunFailed`), exactly
where a real vLLM would refuse to start: the model does not fit in memory (the memory
plan's reason), more GPUs than the hardware has, heads that do not split over TP, or
``max_num_batched_tokens`` below ``max_num_seqs``. ``.kind`` is ``"out of memory"`` or
``"invalid configuration"``; the sweep stores the trial as failed with that kind and
``.reason``.
"""

from __future__ import annotations

from core.errors import BadInput, RunFailed
from core.estimate.memory import MemoryPlan, plan_config_memory
from core.spec.hardware import Hardware
from core.spec.model import WEIGHT_BYTES, ModelArch, Quantization, precision_key
from core.spec.serving import ServerConfig


# Server args the simulation honours beyond the ServerConfig knobs (tp, dp, batched tokens,
# max seqs, max model len, memory utilization, quantization, KV dtype, prefix caching):
# :func:`scheduler_generation` reads these from ``extra_args``.
MODELLED_EXTRA_ARGS = frozenset({"enable_chunked_prefill", "num_scheduler_steps", "stream_interval"})
# Server args that do not change what a load point measures (logging, names, trust, paths),
# so the simulator ignoring them needs no warning.
NO_SPEED_EFFECT_ARGS = frozenset(
    {
        "disable_log_stats",
        "disable_log_requests",
        "enable_log_requests",
        "trust_remote_code",
        "seed",
        "served_model_name",
        "download_dir",
        "tokenizer",
        "tokenizer_mode",
        "revision",
        "code_revision",
        "tokenizer_revision",
        "uvicorn_log_level",
        "disable_uvicorn_access_log",
        "api_key",
        "hf_token",
        "load_format",
        "disable_fastapi_docs",
        "enable_force_include_usage",
        "log_level",
    }
)


def unmodelled_args(names, modelled_knobs) -> list[str]:
    """The server args the simulator cannot honour: not one of ``modelled_knobs`` (the names
    that map onto ServerConfig), not read by the scheduler, and able to change the numbers.
    A simulated point ignores them; a real engine would not."""
    skip = set(modelled_knobs) | MODELLED_EXTRA_ARGS | NO_SPEED_EFFECT_ARGS
    return [n for n in dict.fromkeys(names) if n not in skip]


class InfeasibleConfig(RunFailed):
    """The configuration cannot run: a real vLLM would refuse to start."""

    def __init__(self, kind: str, reason: str, memory: MemoryPlan | None = None):
        self.kind = kind  # "out of memory" | "invalid configuration"
        self.reason = reason
        self.memory = memory
        super().__init__(f"{kind}: {reason}")


def apply_quantization(arch: ModelArch, config: ServerConfig) -> ModelArch:
    """A ``--quantization`` on the server overrides the checkpoint's weight format."""
    if not config.quantization:
        return arch
    q = precision_key(config.quantization)
    if q is None:
        raise BadInput(f"unknown quantization {config.quantization!r}", f"use one of {', '.join(WEIGHT_BYTES)}")
    if q == arch.quantization.method:
        return arch
    return arch.model_copy(update={"quantization": Quantization(method=q, scope=arch.quantization.scope)})


def check_config(arch: ModelArch, hardware: Hardware, config: ServerConfig) -> MemoryPlan:
    """The memory plan of one replica, or :class:`InfeasibleConfig` where vLLM would not start.
    The server's ``quantization`` applies (an fp8 server loads fp8 weights)."""
    arch = apply_quantization(arch, config)
    if config.num_gpus > hardware.num_gpus:
        raise InfeasibleConfig(
            "invalid configuration",
            f"needs {config.num_gpus} GPUs (TP{config.tp} x DP{config.dp}), {hardware.label} has {hardware.num_gpus}",
        )
    if arch.num_heads % config.tp:
        raise InfeasibleConfig("invalid configuration", f"{arch.num_heads} attention heads do not split over TP{config.tp}")
    if config.batched_tokens < config.seqs:
        raise InfeasibleConfig(
            "invalid configuration",
            f"max_num_batched_tokens ({config.batched_tokens}) must be at least max_num_seqs ({config.seqs})",
        )
    mem = plan_config_memory(arch, hardware.gpu, config)
    if not mem.fits:
        raise InfeasibleConfig("out of memory", mem.reason or "does not fit", mem)
    return mem


def _truthy(v) -> bool:
    return v is not None and str(v).strip().lower() not in ("0", "false", "no", "off")


def scheduler_generation(config: ServerConfig, engine: str, engine_version: str | None) -> tuple[bool, int]:
    """(V0 scheduler?, scheduler steps per decision) for this engine and configuration.

    vLLM before 0.8 ran the V0 engine, whose default online scheduler is prefill-first
    without chunked prefill (``--enable-chunked-prefill`` switches to budgeted chunks,
    which the V1 model covers); ``--num-scheduler-steps`` (0.6-0.7) is multi-step
    scheduling. Every other engine, and vLLM 0.8 on, is modelled by the V1 scheduler.
    """
    name = (engine or "vllm").lower()
    v0 = name == "vllm-v0"  # named outright (core.estimate.params.engine_under_env)
    if name in ("vllm", "sim") and engine_version:
        try:
            major, minor = (int(x) for x in engine_version.split(".")[:2])
            v0 = (major, minor) < (0, 8)
        except ValueError:
            v0 = False
    if v0 and _truthy(config.engine_arg("enable_chunked_prefill")):
        v0 = False
    steps = 1
    if v0:
        raw = config.engine_arg("num_scheduler_steps")
        if raw is not None:
            try:
                steps = max(1, int(raw))
            except (TypeError, ValueError):
                raise BadInput(f"num_scheduler_steps must be an integer, got {raw!r}") from None
    return v0, steps
