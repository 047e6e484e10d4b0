"""knee's MoE expert term against published timings of the Triton fused_moe kernel that vLLM
and SGLang run, and the expert-GEMM efficiency those timings imply.

bench/data/moe-triton-published.jsonl holds 71 timings of one MoE layer's fused_moe (routing
sort, both expert GEMMs, activation, weighted sum; each a CUDA graph of 10 calls, mean per
call) that vLLM and SGLang pull requests published with their kernel benchmarks, on an H100,
H200 and B200, at 1-4096 tokens: Mixtral's bf16 experts, Qwen3-30B-A3B's and Qwen3-235B's
FP8 experts, DeepSeek-R1's block-FP8 experts at TP2 and TP8, Qwen3-Next's. Each row cites
its pull request. knee's term for the same work (core/estimate/costmodel.py) is

    softmax(FLOPs / (peak * mfu * scale),  touched * (expert bytes / (BW * bw_weights) + expert_us))
      + moe_layer_us

with ``scale`` the engine's ``moe_mfu_scale`` (16-bit experts) or ``moe_mfu_scale_fp8`` (FP8
experts), block-scaled FP8 taking ``block_fp8_scale`` on both rates, every value as
calibration.toml ships it. Printed: per series, the median measured/knee ratio below 1024
tokens (where streaming the touched experts sets the time) and from 1024 (where the GEMMs'
FLOPs do); then, for each compute-bound row, the ``scale`` at which knee's term would equal the
timing. Beside them the same figure from knee's own H100 measurement of DeepSeek-V3's experts
as FP8 and bf16 grouped GEMMs (bench/data/fp8-h100.json, torch._scaled_grouped_mm). No
assertions; nothing here is fitted.

Caveats, from the sources: the benchmarks replay the same routing ten times, so expert
weights that fit in L2 (Qwen3-Next's, Qwen3-235B's at TP8) are read from cache and the small-
batch rows run faster than any serving step; several series are the kernel's default (untuned)
configuration, which is what a model without a tuned config file gets.

    python -m bench.moe_published [bench/data/moe-triton-published.jsonl]
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from bench.gpu_moe_kernels import MODELS  # DeepSeek-V3's expert shape, as knee's H100 measured it
from bench.moe_kernel_fit import model_seconds  # knee's MoE term, as the H100 fit judges it
from core.catalog.hardware import gpus
from core.estimate.params import calibration

DATA = Path(__file__).parent / "data" / "moe-triton-published.jsonl"
OWN = Path(__file__).parent / "data" / "fp8-h100.json"
COMPUTE_BOUND_TOKENS = 1024


def _rates(row: dict, cal: dict) -> dict:
    """The calibration values knee prices this row's experts with, as
    :func:`bench.moe_kernel_fit.model_seconds` takes them (block-scaled FP8 scales both rates)."""
    gpu = gpus()[row["gpu"]]
    arch = cal["architecture"][gpu.architecture]
    eng = cal["engine"][row["engine"]]
    fp8 = row["dtype"].startswith("fp8")
    block = arch.get("block_fp8_scale", 1.0) if row["dtype"] == "fp8-block" else 1.0
    return {
        "peak": gpu.peak_flops("fp8" if fp8 else "bf16"),
        "mfu": (arch.get("mfu_fp8", arch["mfu"]) if fp8 else arch["mfu"]) * block,
        "bw": gpu.bandwidth_gbps * 1e9,
        "bw_weights": arch["bw_weights"] * block,
        "moe_mfu_scale": eng.get("moe_mfu_scale_fp8", eng["moe_mfu_scale"]) if fp8 else eng["moe_mfu_scale"],
        "expert_us": arch.get("expert_us", 0.0),
        "moe_layer_us": eng.get("moe_layer_us", 0.0),
    }


def _work(row: dict) -> tuple[float, float, float]:
    """(FLOPs, bytes of the touched experts, experts touched) of one layer at the row's tokens."""
    h, w, e, k, m = row["hidden"], row["width"], row["experts"], row["top_k"], row["tokens"]
    touched = e * (1 - (1 - k / e) ** m)
    weight_bytes = 1 if row["dtype"].startswith("fp8") else 2
    return 2.0 * m * k * 3 * h * w, touched * 3 * h * w * weight_bytes, touched


def knee_seconds(row: dict, cal: dict) -> float:
    return float(model_seconds(*_work(row), **_rates(row, cal)))


def implied_scale(row: dict, cal: dict) -> float | None:
    """The expert-GEMM scale at which knee's term equals the timing (None: the timing is below
    knee's streaming and fixed time alone, so no compute rate would match)."""
    r = _rates(row, cal)
    flops, nbytes, touched = _work(row)
    fixed = model_seconds(0.0, nbytes, touched, **r)  # the term without its FLOPs: streaming + fixed
    streaming = fixed - r["moe_layer_us"] * 1e-6
    left = row["us"] * 1e-6 - r["moe_layer_us"] * 1e-6
    if left <= streaming:
        return None
    # model_seconds' smooth maximum, (compute^4 + streaming^4)^(1/4), solved for compute
    compute = (left**4 - streaming**4) ** 0.25
    return flops / (r["peak"] * r["mfu"] * compute)


def _series(row: dict) -> str:
    return f"{row['gpu']:8} {row['engine']:6} {row['dtype']:10} H{row['hidden']} w{row['width']} E{row['experts']} k{row['top_k']} TP{row['tp']}"


def own_fp8_h100(cal: dict) -> list[str]:
    """The scale knee's own H100 grouped-GEMM timings of DeepSeek-V3's experts imply, FP8
    (row-wise scales) and bf16, at 8192 tokens (torch's kernels; no routing, so no moe_layer_us)."""
    if not OWN.exists():
        return [f"  (no {OWN.name})"]
    doc = json.loads(OWN.read_text())
    hopper = cal["architecture"]["hopper"]
    gpu = gpus()["H100-SXM"]
    lines = []
    for r in doc["rows"]:
        if r.get("what") != "deepseek_experts_grouped" or r["tokens"] < 8192:
            continue
        for kind, us, peak, mfu in (
            ("fp8", r["fp8_row_us"], gpu.peak_flops("fp8"), hopper["mfu_fp8"]),
            ("bf16", r["bf16_us"], gpu.peak_flops("bf16"), hopper["mfu"]),
        ):
            scale = r["flops"] / (us * 1e-6) / (peak * mfu)
            width = MODELS["deepseek-ai/DeepSeek-V3"][1] // r["tp"]
            lines.append(f"  DeepSeek-V3 experts TP{r['tp']} (width {width}) {kind:4} at {r['tokens']} tokens: scale {scale:.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    path = Path(argv[0]) if argv else DATA
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cal = calibration()
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[_series(r)].append(r)
    print(f"{path.name}: {len(rows)} published fused_moe timings, {len(groups)} series; measured / knee's term")
    print(f"  {'series':55} {'< 1024 tokens':>16} {'>= 1024 tokens':>16}")
    for name, rs in sorted(groups.items()):
        cells = []
        for small in (True, False):
            ratios = [r["us"] * 1e-6 / knee_seconds(r, cal) for r in rs if (r["tokens"] < COMPUTE_BOUND_TOKENS) == small]
            cells.append(f"{statistics.median(ratios):.2f}x ({len(ratios):2d})" if ratios else "-")
        print(f"  {name:55} {cells[0]:>16} {cells[1]:>16}")
    print(f"Expert-GEMM scale the compute-bound rows (>= {COMPUTE_BOUND_TOKENS} tokens) imply, against the shipped")
    for r in rows:
        if r["tokens"] >= COMPUTE_BOUND_TOKENS:
            s = implied_scale(r, cal)
            shipped = _rates(r, cal)["moe_mfu_scale"]
            print(f"  {_series(r):55} {r['tokens']:5d} tokens: {'-' if s is None else f'{s:.2f}'} (shipped {shipped:.3f})")
    print("knee's own H100 timings (bench/data/fp8-h100.json):")
    print("\n".join(own_fp8_h100(cal)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
