"""GPUs, SageMaker instances and the hardware a configuration runs on."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

GIB = 1024**3


class GPU(BaseModel):
    """One GPU model's datasheet figures (dense, decimal units)."""

    model_config = ConfigDict(frozen=True)

    name: str
    aliases: list[str] = Field(default_factory=list)
    memory_gb: float  # as marketed (80 for an H100)
    visible_memory_gib: float | None = None  # as the driver reports it; vLLM budgets from this
    bandwidth_gbps: float  # HBM/GDDR bandwidth, GB/s (1e9)
    tflops: dict[str, float]  # precision -> dense TFLOPS (bf16, fp16, fp8, int8, fp4)
    link: str  # "pcie4", "pcie5", "nvlink3", "nvlink4", "nvlink5"
    link_bandwidth_gbps: float  # per GPU, both directions together, as datasheets quote it
    architecture: str  # "ampere", "ada", "hopper", "blackwell": selects efficiency factors
    uncertain: list[str] = Field(default_factory=list)  # fields with a single or stale source
    source: str = ""
    # Peer-to-peer between this box's GPUs over PCIe; False where the host stages NCCL
    # traffic through its memory (an instance's gpu_p2p = false sets it).
    p2p: bool = True
    # Without peer-to-peer, whether the group's GPUs reach host memory through one shared path
    # (a cloud instance's PCIe switch uplink: each gets 2/TP of it) or each through its own
    # x16 slot (a bare-metal box of GeForce cards). An instance's gpu_host_link_shared sets it.
    host_link_shared: bool = False

    @property
    def interconnect(self) -> str:
        """The all-reduce path calibration.toml's [interconnect.*] describes: "nvlink",
        "pcie" (peer-to-peer) or "pcie-host" (staged through host memory)."""
        if not self.p2p:
            # NVLink is peer-to-peer too: where the platform refuses P2P (vLLM logs "Custom
            # allreduce is disabled because your platform lacks GPU P2P capability"), NCCL
            # stages every all-reduce through host memory whatever links the GPUs have.
            return "pcie-host"
        return "nvlink" if self.nvlink else "pcie"

    @property
    def usable_bytes(self) -> float:
        # Drivers show less than the marketed size (an "80 GB" H100 reports ~79.6 GiB, a
        # "24 GB" L4 ~22.5 GiB); vLLM's gpu_memory_utilization applies to what is reported.
        return (self.visible_memory_gib or self.memory_gb * 0.97) * GIB

    @property
    def nvlink(self) -> bool:
        return self.link.startswith("nvlink")

    @property
    def allreduce_link_gbps(self) -> float:
        """Bandwidth (both directions, GB/s) of the link an all-reduce crosses: the GPU's own
        link, but the host's PCIe slot when traffic is staged through host memory (no P2P),
        even on an NVLink GPU: x16 Gen4 (64 GB/s) for Ampere and Ada, Gen5 (128) after."""
        if self.p2p or not self.nvlink:
            return self.link_bandwidth_gbps
        return 64.0 if self.architecture in ("ampere", "ada") else 128.0

    def peak_flops(self, precision: str) -> float:
        """Dense FLOP/s for matmuls at ``precision``; falls back to 16-bit where the GPU
        has no native support (FP8 on Ampere runs weight-only through Marlin)."""
        key = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "int8": "int8", "fp4": "fp4"}.get(precision, "bf16")
        return self.tflops.get(key, self.tflops["bf16"]) * 1e12


class Instance(BaseModel):
    """A SageMaker instance type. Prices are dated defaults the user may override."""

    model_config = ConfigDict(frozen=True)

    name: str
    gpu: str
    num_gpus: int
    vcpus: int
    host_memory_gib: float
    price_per_hour: float | None = None
    price_region: str = "us-east-1"
    price_date: str | None = None
    price_source: str = "bundled default"
    gpu_p2p: bool = True  # False: no GPU peer-to-peer (multi-GPU g5/g6/g6e; instances.toml)
    gpu_host_link_shared: bool = False  # without P2P, the GPUs share one path to host memory
    uncertain: list[str] = Field(default_factory=list)
    notes: str = ""


class Hardware(BaseModel):
    """What one deployment unit runs on: ``num_gpus`` of one GPU model."""

    model_config = ConfigDict(frozen=True)

    gpu: GPU
    num_gpus: int = Field(ge=1)
    instance: Instance | None = None

    @property
    def label(self) -> str:
        base = f"{self.num_gpus}x {self.gpu.name}"
        return f"{self.instance.name} ({base})" if self.instance else base
