"""Typed models shared by every package: hardware, model architecture, workload, SLOs,
server configurations, load points and per-request records."""

from core.spec.hardware import GPU, Hardware, Instance
from core.spec.model import ModelArch, Quantization
from core.spec.records import RequestRecord
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.slo import SLO, Constraint, parse_constraints
from core.spec.workload import LengthDist, Workload

__all__ = [
    "GPU",
    "Hardware",
    "Instance",
    "ModelArch",
    "Quantization",
    "RequestRecord",
    "LoadPoint",
    "ServerConfig",
    "SLO",
    "Constraint",
    "parse_constraints",
    "LengthDist",
    "Workload",
]
