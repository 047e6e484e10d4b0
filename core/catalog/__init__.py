"""Data: GPUs, SageMaker instances (dated prices, user-overridable) and model architectures."""

from core.catalog.hardware import get_gpu, get_instance, gpus, instance_gpu, instances, resolve_hardware
from core.catalog.bundled import bundled_models
from core.catalog.models import load_model

__all__ = [
    "get_gpu",
    "get_instance",
    "gpus",
    "instance_gpu",
    "instances",
    "resolve_hardware",
    "bundled_models",
    "load_model",
    "plan_arch",
    "plan_hardware",
]


def plan_hardware(plan):
    """The hardware a :class:`core.spec.plan.Plan` or a :class:`core.spec.study.SweepSpec`
    names (its instance, or GPU x count, and whether the GPUs reach each other peer-to-peer)."""
    return resolve_hardware(gpu=plan.gpu, num_gpus=plan.num_gpus, instance=plan.instance, gpu_p2p=plan.gpu_p2p)


def plan_arch(plan):
    """The architecture of a plan's model at its precision (bundled config, cache or hub)."""
    return load_model(plan.model, precision=plan.precision)
