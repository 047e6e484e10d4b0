"""Sizing a deployment offline: does one copy fit on the instance's GPUs (the estimator's
memory plan, or the trial itself when it ran there), warnings when the trial ran on other
hardware, and how many copies and instances serve the load at what cost. Used by
:func:`core.deploy.plan.build_plan`."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from core.deploy.source import DeploySource
from core.errors import BadInput
from core.spec.hardware import Instance

Style = Literal["inference-components", "single-model"]


class Sizing(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpus_per_copy: int
    copies_per_instance: int
    instance_count: int
    total_copies: int
    idle_gpus_per_instance: int
    request_throughput_per_copy: float | None
    output_throughput_per_copy: float | None
    capacity_rps: float | None  # all instances at the trial's operating point
    capacity_output_tps: float | None
    target_rps: float | None
    utilization: float | None  # target / capacity
    price_per_hour: float | None  # one instance
    cost_per_hour: float | None  # all instances
    cost_per_1m_output_tokens: float | None  # at capacity (the trial's operating point)
    cost_per_1m_output_tokens_at_target: float | None
    price_date: str | None
    price_region: str | None
    price_source: str | None
    price_uncertain: bool
    throughput_simulated: bool
    sized_on: str = "measured"  # which throughput the count was sized on (a simulated one: its pessimistic edge)
    cpu_cores_per_copy: float | None = None
    memory_mb_per_copy: int | None = None
    weights_gib_per_gpu: float | None = None


def _catalog_gpu(src: DeploySource) -> str | None:
    """The catalog's name of the GPU the trial ran on (the store may hold NVML's device
    name, "NVIDIA H100 80GB HBM3", which get_gpu reads too); the name as stored where the
    catalog does not know it, None where the trial names none."""
    from core.catalog import get_gpu

    if src.gpu is None:
        return None
    try:
        return get_gpu(src.gpu).name
    except BadInput:
        return src.gpu


def _same_gpu(src: DeploySource, gpu_name: str) -> bool:
    return _catalog_gpu(src) == gpu_name


def _fit_check(src: DeploySource, inst: Instance, warnings: list[str]) -> float | None:
    """Does one copy fit on the target's GPUs? The estimator's memory plan (weights,
    profile-run activations, runtime reserves, and a KV cache holding at least one
    max_model_len sequence, as vLLM requires to start) decides, offline. A trial that
    actually ran on this GPU at this TP outranks the estimate: then a misfit is a warning.
    Returns GiB of weights per GPU."""
    from core.catalog import get_gpu, load_model
    from core.estimate.memory import plan_config_memory
    from core.spec.model import precision_key

    cfg = src.config
    precision = precision_key(cfg.quantization)
    try:
        arch = load_model(cfg.model, precision=precision, offline=True)
    except BadInput:
        warnings.append(f"could not read {cfg.model}'s architecture offline; memory fit not checked")
        return None
    gpu = get_gpu(inst.gpu)
    mem = plan_config_memory(arch, gpu, cfg)
    gib = mem.weight_bytes / 1024**3
    if not mem.fits:
        # Weights alone over the budget is arithmetic, not an estimate: always an error.
        # The KV-cache verdict depends on the estimator's activation and reserve figures.
        weights_only = mem.weight_bytes + mem.runtime_bytes >= mem.budget_bytes
        ran_here = not src.simulated and _same_gpu(src, gpu.name) and (src.num_gpus in (None, cfg.num_gpus))
        if ran_here and not weights_only:
            warnings.append(f"the memory estimate says it does not fit ({mem.reason}), but the trial ran on {gpu.name}; trusting the measurement")
        else:
            raise BadInput(f"{cfg.model} does not fit on {inst.name}: {mem.reason}")
    elif mem.weight_bytes > 0.9 * mem.budget_bytes:
        warnings.append(f"weights take {mem.weight_bytes / mem.budget_bytes:.0%} of the usable GPU memory: little room for KV cache")
    return gib


def _hardware_warnings(src: DeploySource, inst: Instance, gpus_per_copy: int, warnings: list[str]) -> None:
    if src.gpu is None:
        warnings.append("the trial does not say which GPU it ran on: throughput and cost assume it was this instance's GPU")
        return
    measured = _catalog_gpu(src)
    if measured != inst.gpu:
        warnings.append(
            f"measured on {measured}, deploying on {inst.gpu} ({inst.name}): throughput, instance count and cost "
            "come from other hardware and will not hold; sweep on the target first"
        )
    if src.num_gpus is not None and src.num_gpus != gpus_per_copy:
        warnings.append(f"measured on {src.num_gpus} GPU(s) per replica, each copy here gets {gpus_per_copy}")


def _size(
    src: DeploySource, target_rps: float | None, instance_count: int | None, inst: Instance, style: Style, gpus_per_copy: int, warnings: list[str]
) -> Sizing:
    """Copies per instance, instance count (fixed, or enough for ``target_rps``), capacity and cost."""
    copies = inst.num_gpus // gpus_per_copy if style == "inference-components" else 1
    rps = src.request_throughput
    tps = src.output_throughput
    sized_on = "measured"
    if src.simulated and (rps or tps):
        # A simulated trial is a prediction: size on the pessimistic edge of its error band
        # (core/estimate/bands.py), so a 1.8x optimistic estimate does not halve the endpoint.
        from core.estimate.bands import model_kind, pessimistic, whose

        # The simulator stands in for vLLM, and what deploy serves is vLLM (the LMI and vLLM
        # containers): vLLM's own runs of the model's kind give the band where they have
        # one, else the kind's (MoE, dense), else vLLM's own.
        kind = model_kind(src.config.model)
        rps = pessimistic("req_per_s", rps, "vllm", kind) if rps else rps
        tps = pessimistic("output_tok_per_s", tps, "vllm", kind) if tps else tps
        sized_on = f"pessimistic edge of the prediction's error band (the low of measured/predicted throughput that held for 90% of held-out published runs, {whose('req_per_s', 'vllm', kind)})"
        warnings.append(
            f"throughput is simulated: sized on the {sized_on}, {rps:.2f} req/s per copy"
            if rps
            else f"throughput is simulated: sized on the {sized_on}"
        )
    if target_rps is not None and rps is None:
        raise BadInput("--target-rps needs the trial's request throughput per replica", "use a measured trial or pass --request-throughput")
    needed = math.ceil(target_rps / (copies * rps) - 1e-9) if target_rps and rps else None
    count = instance_count or needed or 1
    if instance_count and needed and rps and instance_count < needed:  # needed is only set with an rps
        warnings.append(
            f"{instance_count} instance(s) serve {instance_count * copies * rps:.2f} req/s, below the target {target_rps:g} req/s ({needed} needed)"
        )
    cap_rps = count * copies * rps if rps else None
    cap_tps = count * copies * tps if tps else None
    price = inst.price_per_hour
    cost_h = price * count if price is not None else None
    # Cost per 1M output tokens at the trial's operating point, for the whole instance
    # (its price shared among its copies; hardware.md §2).
    c1m = price / (copies * tps * 3600) * 1e6 if price is not None and tps else None
    c1m_target = None
    if cost_h is not None and target_rps and rps and tps:
        tokens_per_request = tps / rps
        c1m_target = cost_h / (target_rps * tokens_per_request * 3600) * 1e6
    if price is None:
        warnings.append(f"no price for {inst.name} in the catalog: set it in ~/.config/knee/catalog.toml")
    if tps is None:
        warnings.append("no output-token throughput: cost per 1M tokens unknown")
    return Sizing(
        gpus_per_copy=gpus_per_copy,
        copies_per_instance=copies,
        instance_count=count,
        total_copies=copies * count,
        idle_gpus_per_instance=inst.num_gpus - copies * gpus_per_copy,
        request_throughput_per_copy=rps,
        output_throughput_per_copy=tps,
        capacity_rps=cap_rps,
        capacity_output_tps=cap_tps,
        target_rps=target_rps,
        utilization=(target_rps / cap_rps) if target_rps and cap_rps else None,
        price_per_hour=price,
        cost_per_hour=cost_h,
        cost_per_1m_output_tokens=c1m,
        cost_per_1m_output_tokens_at_target=c1m_target,
        price_date=inst.price_date,
        price_region=inst.price_region,
        price_source=inst.price_source,
        price_uncertain="price_per_hour" in inst.uncertain,
        throughput_simulated=src.simulated,
        sized_on=sized_on,
    )
