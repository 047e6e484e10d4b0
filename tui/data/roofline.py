"""Roofline figures for the Estimate screen: arithmetic intensity of prefill and decode
against the hardware's ridge point.

The cost model (``core.estimate.costmodel``) decides step *times*; the roofline here only
explains them: a phase whose intensity (FLOPs per byte moved) sits left of the ridge is
bound by memory bandwidth, right of it by compute. Figures are per GPU; tensor parallelism
divides FLOPs and bytes alike, so intensity does not depend on TP.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.spec.hardware import GPU
from core.spec.model import ModelArch


@dataclass(frozen=True)
class RooflinePoint:
    label: str  # "prefill 1024" or "decode b=32"
    phase: str  # "prefill" | "decode"
    intensity: float  # FLOP per byte
    attainable_tflops: float  # min(peak, intensity x bandwidth)
    bound: str  # "compute" | "memory"


@dataclass(frozen=True)
class Roofline:
    gpu: str
    peak_tflops: float
    bandwidth_gbps: float
    ridge: float  # FLOP per byte where the roof turns flat
    points: tuple[RooflinePoint, ...]


def _weights_touched(arch: ModelArch, tokens: int) -> float:
    dense = arch.weight_bytes_dense + arch.weight_bytes_embeddings / 2  # the lm_head is read, the embedding table looked up
    if not arch.is_moe:
        return dense
    k_over_e = arch.experts_per_token / arch.num_experts
    touched_fraction = 1.0 - (1.0 - k_over_e) ** tokens
    return dense + arch.weight_bytes_experts * touched_fraction


def _phase(arch: ModelArch, tokens: int, attn_pairs: float, kv_read_tokens: float, kv_dtype: str, decode: bool) -> tuple[float, float]:
    flops = 2.0 * (arch.params_matmul_dense + arch.params_experts_active) * tokens
    flops += arch.attention_flops_per_pair(decode=decode) * arch.num_layers * attn_pairs
    kv_per_token = arch.kv_bytes_per_token(kv_dtype)
    nbytes = _weights_touched(arch, tokens) + kv_read_tokens * kv_per_token
    return flops, nbytes


def roofline(
    arch: ModelArch,
    gpu: GPU,
    input_len: int,
    output_len: int,
    batches: tuple[int, ...] = (1, 8, 32, 128),
    kv_dtype: str = "auto",
) -> Roofline:
    """Prefill of one ``input_len`` prompt, and decode at each batch size in ``batches``
    with the mean context of a request halfway through its output."""
    precision = arch.quantization.compute_precision
    peak = gpu.peak_flops(precision if precision in gpu.tflops else "bf16")
    bw = gpu.bandwidth_gbps * 1e9
    ridge = peak / bw

    def point(label: str, phase: str, flops: float, nbytes: float) -> RooflinePoint:
        ai = flops / nbytes
        attainable = min(peak, ai * bw)
        return RooflinePoint(label, phase, ai, attainable / 1e12, "compute" if ai >= ridge else "memory")

    pts = []
    n = input_len
    f, b = _phase(arch, n, n * n / 2, n, kv_dtype, decode=False)
    pts.append(point(f"prefill {n}", "prefill", f, b))
    ctx = input_len + output_len / 2
    for bsz in batches:
        f, b = _phase(arch, bsz, bsz * ctx, bsz * ctx, kv_dtype, decode=True)
        pts.append(point(f"decode b={bsz}", "decode", f, b))
    return Roofline(gpu.name, peak / 1e12, gpu.bandwidth_gbps, ridge, tuple(pts))
