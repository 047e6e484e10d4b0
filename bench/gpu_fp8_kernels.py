"""Measure how fast block-scaled FP8 GEMMs run against per-tensor FP8 and bf16 on the GPU at hand.

DeepSeek-V3/R1 and the models built like them (Kimi K2, GLM-5, Qwen3-FP8) ship FP8 weights
with one scale per 128x128 block (``weight_block_size`` in their config), and the engines run
them with activations scaled per token per 128 channels. knee's cost model prices every FP8
GEMM at ``mfu_fp8`` of the FP8 peak, measured on per-tensor-scaled GEMMs. This measures the
same shapes with block scales, with PyTorch alone (``torch._scaled_mm``; CUTLASS/cuBLAS
block-scaled kernels on Hopper), so the cost of block scaling is a measurement, not a guess:

    python3 -m bench.gpu_fp8_kernels --gpu H100-SXM --out fp8-h100.json

Shapes are DeepSeek-V3's per-GPU linear layers at TP 1 and 8 (MLA projections, the dense MLP
of its first three layers, one expert), at 8 to 8192 tokens; each timed region is a CUDA graph
(bench.gpu_kernels.graph_time_s). DeepSeek's routed experts are also timed as FP8 grouped
GEMMs with row-wise scales (``torch._scaled_grouped_mm``) beside bf16 grouped GEMMs.
"""

from __future__ import annotations

import sys
import time

from bench.gpu_kernels import PEAKS, graph_time_s
from bench.gpu_run import cuda_torch, emit, parser, write
from bench.gpu_moe_kernels import route

HIDDEN, HEADS, Q_LORA, KV_LORA, ROPE, NOPE, V_HEAD, DENSE_INTER, MOE_INTER = 7168, 128, 1536, 512, 64, 128, 128, 18432, 2048


def shapes(tp: int) -> list[tuple[str, int, int]]:
    """(name, out_features, in_features) of DeepSeek-V3's linear maps on one GPU of TP ``tp``,
    out_features rounded up to whole 128-wide blocks (kv_a's 576 -> 640) so that every kind runs
    the same shapes."""
    rows = [
        ("q_a", Q_LORA, HIDDEN),
        ("q_b", HEADS * (NOPE + ROPE) // tp, Q_LORA),
        ("kv_a", KV_LORA + ROPE, HIDDEN),
        ("kv_b", HEADS * (NOPE + V_HEAD) // tp, KV_LORA),
        ("o", HIDDEN, HEADS * V_HEAD // tp),
        ("mlp_gate_up", 2 * DENSE_INTER // tp, HIDDEN),
        ("mlp_down", HIDDEN, DENSE_INTER // tp),
        ("expert_gate_up", 2 * MOE_INTER // tp, HIDDEN),
        ("expert_down", HIDDEN, MOE_INTER // tp),
    ]
    return [(name, -(-n // 128) * 128, k) for name, n, k in rows]


def block_scales(torch, m: int, n: int, k: int, device: str):
    """Scales as torch's block-scaled path takes them: activations 1x128 (M x K/128, M-major),
    weights 128x128 (given transposed, K/128 x N/128)."""
    sa = torch.rand(m, k // 128, device=device, dtype=torch.float32).add_(0.5).t().contiguous().t()
    sb = torch.rand(n // 128, k // 128, device=device, dtype=torch.float32).add_(0.5).t()
    return sa, sb


def gemm_fns(torch, m: int, n: int, k: int, device: str) -> dict:
    """One callable per kind of GEMM on an (m x k) by (k x n) product."""
    import torch.nn.functional as F

    f8 = torch.float8_e4m3fn
    a16 = torch.empty(m, k, dtype=torch.bfloat16, device=device).normal_()
    w16 = torch.empty(n, k, dtype=torch.bfloat16, device=device).normal_(std=0.02)
    a8, w8 = a16.to(f8), w16.to(f8)
    one = torch.ones((), dtype=torch.float32, device=device)
    row_a = torch.ones(m, 1, dtype=torch.float32, device=device)
    row_b = torch.ones(1, n, dtype=torch.float32, device=device)
    sa, sb = block_scales(torch, m, n, k, device)
    return {
        "bf16": lambda: a16 @ w16.t(),
        "fp8_tensor": lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
        "fp8_row": lambda: torch._scaled_mm(a8, w8.t(), scale_a=row_a, scale_b=row_b, out_dtype=torch.bfloat16),
        "fp8_block": lambda: torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16),
        # The same through the newer public API, in case this build takes block scales only there.
        "fp8_block_api": lambda: F.scaled_mm(
            a8, w8.t(), sa, F.ScalingType.BlockWise1x128, sb, F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16
        ),
    }


def measure(torch, peak: dict, out: list, timer, device: str, tps, tokens_list) -> None:
    for tp in tps:
        for m in tokens_list:
            totals: dict[str, float] = {}
            flops = 0.0
            nbytes = 0.0
            for name, n, k in shapes(tp):
                flops += 2.0 * m * n * k
                nbytes += n * k  # FP8 weight bytes
                for kind, fn in gemm_fns(torch, m, n, k, device).items():
                    if totals.get(kind) is None and kind in totals:
                        continue  # this kind already failed on an earlier shape
                    try:
                        totals[kind] = totals.get(kind, 0.0) + timer(fn)
                    except Exception as exc:  # noqa: BLE001  # one kernel kind failing must not lose the rest
                        totals[kind] = None  # type: ignore[assignment]
                        out.append(
                            {"what": "fp8_error", "kind": kind, "tp": tp, "m": m, "shape": name, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                        )
            row: dict = {"what": "deepseek_linears", "tp": tp, "m": m, "flops": flops, "fp8_weight_bytes": nbytes}
            for kind, t in totals.items():
                if t is None:
                    continue
                p = peak["bf16"] if kind == "bf16" else peak["fp8"]
                row[f"{kind}_us"] = t * 1e6
                row[f"{kind}_mfu"] = flops / t / 1e12 / p
            out.append(row)
            emit(row)


def measure_grouped(torch, peak: dict, out: list, timer, device: str) -> None:
    """DeepSeek-V3's routed experts (256 of width 2048, top-8) as FP8 grouped GEMMs with row-wise
    scales (``torch._scaled_grouped_mm``) beside bf16 grouped GEMMs, gate/up then down."""
    experts, top_k = 256, 8
    for tp in (1, 8):
        width = MOE_INTER // tp
        up16 = torch.empty(experts, 2 * width, HIDDEN, dtype=torch.bfloat16, device=device).normal_(std=0.02)
        down16 = torch.empty(experts, HIDDEN, width, dtype=torch.bfloat16, device=device).normal_(std=0.02)
        up8, down8 = up16.to(torch.float8_e4m3fn), down16.to(torch.float8_e4m3fn)
        s_up = torch.ones(experts, 2 * width, dtype=torch.float32, device=device)
        s_down = torch.ones(experts, HIDDEN, dtype=torch.float32, device=device)
        for tokens in (128, 512, 2048, 8192):
            rows = tokens * top_k
            offs = torch.cumsum(route(torch, tokens, experts, top_k, device), 0).to(torch.int32)
            x16 = torch.empty(rows, HIDDEN, dtype=torch.bfloat16, device=device).normal_()
            x8 = x16.to(torch.float8_e4m3fn)
            h16 = torch.empty(rows, width, dtype=torch.bfloat16, device=device).normal_()
            h8 = h16.to(torch.float8_e4m3fn)
            s_x = torch.ones(rows, dtype=torch.float32, device=device)

            def fp8():
                torch._scaled_grouped_mm(x8, up8.transpose(-2, -1), s_x, s_up, offs=offs, out_dtype=torch.bfloat16)
                torch._scaled_grouped_mm(h8, down8.transpose(-2, -1), s_x, s_down, offs=offs, out_dtype=torch.bfloat16)

            def bf16():
                torch._grouped_mm(x16, up16.transpose(-2, -1), offs=offs)
                torch._grouped_mm(h16, down16.transpose(-2, -1), offs=offs)

            flops = 2.0 * rows * 3 * HIDDEN * width
            row: dict = {"what": "deepseek_experts_grouped", "tp": tp, "tokens": tokens, "flops": flops}
            for kind, fn, p in (("fp8_row", fp8, peak["fp8"]), ("bf16", bf16, peak["bf16"])):
                try:
                    t = timer(fn)
                    row[f"{kind}_us"], row[f"{kind}_mfu"] = t * 1e6, flops / t / 1e12 / p
                except Exception as exc:  # noqa: BLE001
                    row[f"{kind}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            out.append(row)
            emit(row)
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, PEAKS).parse_args(argv)
    torch = cuda_torch("gpu_fp8_kernels")
    if torch is None:
        return 2
    rows: list = []
    began = time.time()
    timer = lambda fn: graph_time_s(fn, torch)  # noqa: E731
    measure(torch, PEAKS[args.gpu], rows, timer, "cuda", (1, 8), (8, 64, 512, 2048, 8192))
    try:
        measure_grouped(torch, PEAKS[args.gpu], rows, timer, "cuda")
    except Exception as exc:  # noqa: BLE001  # keep the dense rows whatever happens here
        rows.append({"what": "grouped_error", "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
    kernel = "torch._scaled_mm: tensor-wise, row-wise and block-wise (1x128 activations, 128x128 weights) FP8; bf16 matmul"
    write(args.out, torch, args.gpu, PEAKS[args.gpu], began, rows, kernel=kernel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
