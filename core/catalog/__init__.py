"""Data: GPUs, SageMaker instances (dated prices, user-overridable) and model architectures."""

from core.catalog.hardware import get_gpu, get_instance, gpus, instances, resolve_hardware
from core.catalog.models import bundled_models, load_model

__all__ = ["get_gpu", "get_instance", "gpus", "instances", "resolve_hardware", "bundled_models", "load_model"]
