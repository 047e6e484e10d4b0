"""What a plan's server args fix for the estimate.

A plan's ``server_args`` (llm-optimizer's grammar) is the search space a sweep runs. Before
this module the estimate ignored it: a user who typed ``max_num_seqs=64;stream_interval=8``
in the Plan screen saw predictions at the engine's defaults. Here the args the estimator
models become its arguments: the tensor-parallel degrees it tries (every value listed), and
each knob given one value. A knob given several values is a sweep, which only measuring
settles; the estimate keeps the engine's default for it and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.errors import BadInput
from core.sweep.grammar import parse_args

# Server arg (either spelling) -> the estimate's keyword argument, for the knobs that take one value.
_KNOBS = {
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "kv_cache_dtype": "kv_cache_dtype",
    "stream_interval": "stream_interval",
    # SGLang's names for the same knobs
    "max_running_requests": "max_num_seqs",
    "chunked_prefill_size": "max_num_batched_tokens",
    "context_length": "max_model_len",
    "mem_fraction_static": "gpu_memory_utilization",
}
_TP = ("tensor_parallel_size", "tp_size", "tp")
# Weights' format: the estimate prices the model at this precision (the plan's own otherwise).
_PRECISION = ("quantization",)
# Taken some other way: the estimate lays out every TP x copies itself, and random prompts share
# no prefix for a cache to serve.
_LAID_OUT = frozenset({"data_parallel_size", "dp_size", "dp", "enable_prefix_caching", "disable_radix_cache"})


@dataclass(frozen=True)
class PlanArgs:
    """What a plan's server args fix for the estimate."""

    kwargs: dict[str, Any]  # keyword arguments for core.estimate.report.estimate
    used: tuple[str, ...] = ()  # "name=value" of each arg the estimate takes
    swept: tuple[str, ...] = ()  # knobs given several values: left at the engine's default
    unmodelled: tuple[str, ...] = ()  # args that can change the numbers and the estimate ignores

    def notes(self) -> list[str]:
        out = []
        if self.used:
            out.append(f"from the plan's server args: {', '.join(self.used)}")
        if self.swept:
            out.append(f"{', '.join(self.swept)} swept in the plan's server args: estimated at the engine's default (a sweep measures each value)")
        if self.unmodelled:
            out.append(
                f"the estimate does not model server arg{'s' if len(self.unmodelled) > 1 else ''} {', '.join(self.unmodelled)}: "
                "predicted as if unset (a real sweep measures them)"
            )
        return out


def estimate_args(server_args: str) -> PlanArgs:
    """The estimate's arguments that ``server_args`` (llm-optimizer's grammar) fixes."""
    from core.simulate.feasibility import NO_SPEED_EFFECT_ARGS

    kwargs: dict[str, Any] = {}
    used: list[str] = []
    swept: list[str] = []
    unmodelled: list[str] = []
    for s in parse_args(server_args or None):
        if len(s.names) != 1:
            continue  # a composite (tp*dp tuples): a layout list the estimate enumerates itself
        name = s.names[0].replace("-", "_")
        values = [v[0] for v in s.values]
        if name in _TP:
            kwargs["tp"] = sorted({int(v) for v in values})
            used.append(f"{name}={kwargs['tp']}")
        elif name in _KNOBS or name in _PRECISION:
            if len(values) == 1:
                knob = _KNOBS.get(name, "precision")
                kwargs[knob] = _typed(knob, values[0], name)
                used.append(f"{name}={values[0]}")
            else:
                swept.append(name)
        elif name not in _LAID_OUT and name not in NO_SPEED_EFFECT_ARGS:
            unmodelled.append(name)
    return PlanArgs(kwargs, tuple(used), tuple(swept), tuple(unmodelled))


def _typed(knob: str, value: Any, name: str) -> Any:
    kind = str if knob in ("kv_cache_dtype", "precision") else float if knob == "gpu_memory_utilization" else int
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise BadInput(
            f"server arg {name}={value!r} is not {'a number' if kind is float else 'an integer' if kind is int else 'text'}", f"e.g. {name}=8"
        ) from None
