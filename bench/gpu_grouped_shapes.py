"""Grouped-GEMM efficiency against the expert's shape, bf16 and FP8, on the GPU at hand.

bench/gpu_moe_kernels.py and bench/gpu_fp8_kernels.py found that a MoE layer's experts run
well below a dense GEMM's efficiency once tensor parallelism makes them narrow, and FP8
grouped GEMMs far more so (DeepSeek-V3's experts at TP8: 0.09 of the FP8 peak at 8192 tokens,
below bf16's 0.36 of its own). This separates the two GEMMs of an expert and the three sizes
that decide their efficiency, so the cost model can take a law rather than a per-model factor:

- gate/up: K = hidden, N = 2 x width;
- down:    K = width,  N = hidden;
- M = rows per expert, the same for every expert (no routing imbalance here).

128 experts, widths 96-2048, hidden 4096 and 7168, 16-512 rows per expert; bf16 through
``torch._grouped_mm``, FP8 with row-wise scales through ``torch._scaled_grouped_mm``; each timed
region a CUDA graph (bench.gpu_kernels.graph_time_s).

    python3 -m bench.gpu_grouped_shapes --gpu H100-SXM --out grouped-h100.json
"""

from __future__ import annotations

import sys
import time

from bench.gpu_kernels import PEAKS, graph_time_s
from bench.gpu_run import cuda_torch, emit, parser, write

EXPERTS = 128
WIDTHS = (96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
HIDDENS = (4096, 7168)
ROWS = (16, 64, 256, 512)


def one_gemm(torch, rows: int, n: int, k: int, fp8: bool):
    """A callable running one grouped GEMM of EXPERTS groups, each rows x k by k x n."""
    offs = torch.arange(rows, rows * EXPERTS + 1, rows, dtype=torch.int32, device="cuda")
    x = torch.empty(rows * EXPERTS, k, dtype=torch.bfloat16, device="cuda").normal_()
    w = torch.empty(EXPERTS, n, k, dtype=torch.bfloat16, device="cuda").normal_(std=0.02)
    if not fp8:
        return lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    sx = torch.ones(rows * EXPERTS, dtype=torch.float32, device="cuda")
    sw = torch.ones(EXPERTS, n, dtype=torch.float32, device="cuda")
    return lambda: torch._scaled_grouped_mm(x8, w8.transpose(-2, -1), sx, sw, offs=offs, out_dtype=torch.bfloat16)


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, PEAKS).parse_args(argv)
    torch = cuda_torch("gpu_grouped_shapes")
    if torch is None:
        return 2
    peak = PEAKS[args.gpu]
    rows_out: list = []
    began = time.time()
    for hidden in HIDDENS:
        for width in WIDTHS:
            for rows in ROWS:
                for gemm, n, k in (("gate_up", 2 * width, hidden), ("down", hidden, width)):
                    row: dict = {"gemm": gemm, "hidden": hidden, "width": width, "rows": rows, "m": rows, "n": n, "k": k, "experts": EXPERTS}
                    flops = 2.0 * rows * EXPERTS * n * k
                    for kind, fp8 in (("bf16", False), ("fp8", True)):
                        try:
                            t = graph_time_s(one_gemm(torch, rows, n, k, fp8), torch)
                            row[f"{kind}_us"] = t * 1e6
                            row[f"{kind}_mfu"] = flops / t / 1e12 / (peak["fp8"] if fp8 else peak["bf16"])
                        except Exception as exc:  # noqa: BLE001  # one shape failing must not lose the sweep
                            row[f"{kind}_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
                        torch.cuda.empty_cache()
                    rows_out.append(row)
                    emit(row)
    kernel = "torch._grouped_mm (bf16) and torch._scaled_grouped_mm (FP8, row-wise scales), 128 equal groups"
    write(args.out, torch, args.gpu, peak, began, rows_out, kernel=kernel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
