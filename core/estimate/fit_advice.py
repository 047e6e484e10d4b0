"""Which TP degrees a model splits over, and what would fit when none does: the fewest GPUs
of the same type (and the instances that have them), or a lighter weight format on the GPUs
given. ``knee estimate`` and the Estimate screen say it in one line where they used to
repeat each TP degree's shortfall; ``knee recommend`` names the closest miss of an instance
it excludes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from core.catalog.hardware import instances
from core.estimate.memory import MemoryPlan
from core.spec.model import WEIGHT_BYTES, ModelArch, Quantization

GB = 1e9
# Lighter formats to try, lightest last: what vLLM loads from a pre-quantized checkpoint
# (or quantizes FP8 at start-up with --quantization fp8).
LIGHTER = (("fp8", "FP8"), ("int4", "4-bit (AWQ/GPTQ)"))
MAX_TP = 16


@dataclass
class FitAdvice:
    """``closest``: the memory plan of the largest TP degree tried (the nearest miss);
    ``gpus``/``tp``/``per_gpu_gb``: the fewest GPUs of this type the model fits on, at that
    TP (None: not even at TP16); ``instances``: bundled SageMaker instances with that many,
    cheapest first; ``lighter``: (format, weights GB per GPU) that fit on the GPUs given."""

    closest: MemoryPlan
    gpus: int | None = None
    tp: int | None = None
    per_gpu_gb: float = 0.0
    instances: list[str] = field(default_factory=list)
    lighter: tuple[str, float] | None = None

    def line(self, model: str, gpu: str, num_gpus: int) -> str:
        """One sentence: the nearest miss, then what would fit."""
        c = self.closest
        if c.weight_bytes + c.runtime_bytes >= c.budget_bytes:
            head = f"{model}'s weights need {c.weight_bytes / GB:.1f} GB per GPU even at TP{c.tp}, where {gpu} offers {c.budget_bytes / GB:.1f} GB"
        else:
            head = f"even at TP{c.tp}, {c.reason}"
        options = []
        if self.gpus is not None:
            where = f": {', '.join(self.instances)}" if self.instances else "; no bundled instance has that many"
            options.append(f"it fits on {self.gpus}x {gpu} (TP{self.tp}, {self.per_gpu_gb:.1f} GB of weights each{where})")
        if self.lighter is not None:
            name, gb = self.lighter
            options.append(f"on these {num_gpus} with {name} weights ({gb:.1f} GB per GPU)")
        if not options:
            return head + f"; it fits neither on up to {MAX_TP} of them nor with 4-bit weights"
        return head + "; " + ", or ".join(options)


def nearest_miss(memory: list[MemoryPlan]) -> MemoryPlan:
    """The memory plan of the largest TP degree tried: the smaller ones miss by more."""
    return max(memory, key=lambda m: m.tp)


def valid_tp(arch: ModelArch, tp: int) -> str | None:
    """Why vLLM would refuse this TP degree for the model, or None."""
    if arch.num_heads % tp:
        return f"{arch.num_heads} attention heads do not split over TP{tp}"
    if arch.num_kv_heads % tp and tp % arch.num_kv_heads:
        return f"{arch.num_kv_heads} KV heads do not split over TP{tp}"
    return None


def fit_advice(arch: ModelArch, gpu: str, memory: list[MemoryPlan], plan: Callable[[ModelArch, int], MemoryPlan]) -> FitAdvice:
    """Advice for ``arch`` on the ``gpu`` s whose TP degrees' ``memory`` plans all missed.
    ``plan(arch, tp)``: the memory plan of a model at a TP degree, with the knobs the misses
    were planned with (utilization, context, batch, KV dtype)."""
    advice = FitAdvice(closest=nearest_miss(memory))
    tp = advice.closest.tp * 2
    while tp <= MAX_TP:
        if valid_tp(arch, tp) is None and (m := plan(arch, tp)).fits:
            advice.gpus, advice.tp, advice.per_gpu_gb = tp, tp, m.weight_bytes / GB
            have = [i for i in instances().values() if i.gpu == gpu and i.num_gpus >= tp]
            have.sort(key=lambda i: (i.price_per_hour is None, i.price_per_hour or 0.0, i.num_gpus))
            advice.instances = [i.name for i in have[:2]]
            break
        tp *= 2
    for method, name in LIGHTER:
        if WEIGHT_BYTES[method] < arch.quantization.bytes_per_weight:
            light = arch.model_copy(update={"quantization": Quantization(method=method, scope="linear")})
            if (m := plan(light, advice.closest.tp)).fits:
                advice.lighter = (name, m.weight_bytes / GB)
                break
    return advice
