"""A plan: everything knee needs to estimate, sweep and deploy one serving problem.

The TUI's Plan screen edits one; ``knee estimate`` and ``knee sweep`` can read one from a
TOML file (``--plan FILE``). With nothing planned, knee opens :func:`demo_plan`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import BadInput
from core.spec.engine_defaults import checked_release
from core.spec.slo import SLO, parse_constraints
from core.tomlfile import read_toml

Objective = Literal["max_throughput", "min_cost", "min_latency"]
EngineName = Literal["sim", "vllm", "sglang", "custom", "external", "sagemaker"]


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str = "Qwen/Qwen3-4B"
    precision: str | None = None  # None: the checkpoint's own format
    kv_cache_dtype: str = "auto"
    # Hardware: a SageMaker instance, or a GPU type and count.
    instance: str | None = "ml.g6.12xlarge"
    gpu: str | None = None
    num_gpus: int | None = Field(default=None, ge=1)
    # False on a box whose GPUs cannot reach each other peer-to-peer (vLLM logs "Custom
    # allreduce is disabled because your platform lacks GPU P2P capability"): all-reduces go
    # through host memory. Instances without it (multi-GPU g5/g6/g6e) say so themselves.
    gpu_p2p: bool = True
    # Workload
    input_len: int = Field(default=1024, ge=1)
    output_len: int = Field(default=512, ge=1)
    range_ratio: float = Field(default=0.0, ge=0.0, le=1.0)
    dataset: str = "random"
    dataset_path: str | None = None
    num_prompts: int = Field(default=1000, ge=1)
    arrival: Literal["concurrency", "poisson", "constant", "gamma"] = "concurrency"
    # True: the client sends ignore_eos, so every answer runs to its length (knee's client,
    # SGLang's bench_serving). False: the model may stop first (`vllm bench serve`'s default,
    # and production traffic): ShareGPT answers take the measured EOS shape, the sweep's
    # client sends no ignore_eos, and random lengths are read as caps.
    ignore_eos: bool = True
    # A file of the user's own requests' token counts (core/spec/length_log.py): when set, its
    # lengths replace input_len, output_len, range_ratio and the dataset's shape everywhere
    # (estimate, recommendation, and the sweep's random prompts).
    lengths_from: str | None = None
    # Goals: constraints in llm-optimizer's grammar, plus a throughput floor.
    constraints: str = "e2e_latency:p99<60s"
    min_request_rate: float | None = Field(default=5.0, ge=0)
    objective: Objective = "max_throughput"
    # How to run
    engine: EngineName = "sim"
    # The engine's release, for predictions (None: the current one; a sweep asks its server).
    engine_version: str | None = None
    url: str | None = None  # external engine
    endpoint_name: str | None = None  # sagemaker engine
    # Search space in llm-optimizer's grammar (knee's suggestion when empty).
    server_args: str = ""
    client_args: str = ""

    @field_validator("instance", "gpu", "precision", "dataset_path", "lengths_from", "url", "endpoint_name", "engine_version", mode="before")
    @classmethod
    def _blank_is_none(cls, v):
        # TOML has no null: a saved plan writes "" for "not set" (see save()).
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("engine_version")
    @classmethod
    def _a_release(cls, v: str | None) -> str | None:
        return checked_release(v)

    @field_validator("constraints")
    @classmethod
    def _valid_constraints(cls, v: str) -> str:
        parse_constraints(v)  # raises BadInput with the reason
        return v

    @property
    def slo(self) -> SLO:
        return parse_constraints(self.constraints)

    def save(self, path: str | Path) -> None:
        # Unset optional fields are written as "" so that loading gives None back rather than
        # the field's default (a plan on --gpu must not reload on the default instance).
        data = {k: ("" if v is None else v) for k, v in self.model_dump().items()}
        data = {k: v for k, v in data.items() if not (k == "num_gpus" and v == "")}
        Path(path).write_text(_to_toml(data))

    @classmethod
    def load(cls, path: str | Path) -> "Plan":
        p = Path(path)
        data = read_toml(p, "plan file")
        try:
            return cls(**data.get("plan", data))
        except ValidationError as e:
            err = e.errors()[0]
            raise BadInput(f"plan file {p}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def demo_plan() -> Plan:
    """The public SageMaker + llm-optimizer walkthrough: Qwen3-4B on ml.g6.12xlarge (4x L4),
    1024 in / 512 out, E2E p99 <= 60 s, >= 5 req/s, on the simulator."""
    return Plan()


def _to_toml(data: dict) -> str:
    lines = ["[plan]"]
    for k, v in data.items():
        if isinstance(v, bool):
            lines.append(f"{k} = {'true' if v else 'false'}")
        elif isinstance(v, (int, float)):
            lines.append(f"{k} = {v!r}")
        else:
            s = str(v).replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'{k} = "{s}"')
    return "\n".join(lines) + "\n"
