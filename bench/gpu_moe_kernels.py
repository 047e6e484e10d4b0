"""Measure how fast a MoE layer's routed experts run, against the width each GPU holds.

knee's cost model (core/estimate/costmodel.py) charges a MoE layer's routed experts as GEMMs
at ``moe_mfu_scale`` (0.5, hand-set) of a dense GEMM's efficiency, and the weights of the
experts a step touches at the dense weight-streaming bandwidth. Under tensor parallelism each
GPU holds every expert's intermediate dimension split TP ways: Qwen3-235B's 1536 becomes 192
at TP8, GLM-4.5-Air's 1408 becomes 176. Published bursts of such models at TP4/8 decode 2-5x
slower than knee predicts, and one suspect is a grouped GEMM that cannot use an H100 well on
such narrow experts. This script measures that, with PyTorch alone:

    python3 -m bench.gpu_moe_kernels --gpu H100-SXM --out moe-h100.json

For each model's expert shape, tensor-parallel degree and token count it routes the tokens
top-k over the experts at random (uniform router, so the per-expert counts vary as real
routing does), then times one layer's two grouped GEMMs (gate/up, then down) with
``torch._grouped_mm`` (CUTLASS grouped GEMM on Hopper), each timed region a CUDA graph replayed
several times (bench.gpu_kernels.graph_time_s). Beside it, the same FLOPs as one dense GEMM of
the same row count through one expert-sized weight ("dense"): their ratio at large token
counts is the grouped kernel's efficiency relative to a dense GEMM, what ``moe_mfu_scale``
stands for. The SiLU-and-mul between the GEMMs is in both; routing and permutation are left out
(knee's ``moe_layer_us``).

vLLM's own fused_moe is a Triton kernel, not CUTLASS's grouped GEMM: these figures bound what
a grouped kernel reaches on these shapes; they are not vLLM's timings.
"""

from __future__ import annotations

import sys
import time

from bench.gpu_kernels import PEAKS, graph_time_s
from bench.gpu_run import check_parser, cpu_timer, cuda_torch, emit, write

# hidden, moe_intermediate, routed experts, top-k: from the bundled configs
# (core/catalog/data/models/*.json).
MODELS = {
    "Qwen/Qwen3-30B-A3B": (2048, 768, 128, 8),
    "Qwen/Qwen3-235B-A22B": (4096, 1536, 128, 8),
    "zai-org/GLM-4.5-Air": (4096, 1408, 128, 8),
    "deepseek-ai/DeepSeek-V3": (7168, 2048, 256, 8),
    "openai/gpt-oss-120b": (2880, 2880, 128, 4),
    "mistralai/Mixtral-8x7B-v0.1": (4096, 14336, 8, 2),
}
TPS = (1, 2, 4, 8)
TOKENS = (1, 8, 32, 128, 512, 2048, 8192)


def route(torch, tokens: int, experts: int, top_k: int, device: str):
    """Rows per expert for ``tokens`` tokens each sent to ``top_k`` distinct experts at random."""
    gen = torch.Generator(device="cpu").manual_seed(tokens * 1009 + experts)
    chosen = torch.rand(tokens, experts, generator=gen).topk(top_k, dim=1).indices.flatten()
    return torch.bincount(chosen, minlength=experts).to(device)


def silu_and_mul(torch, h):
    """vLLM's activation between the two GEMMs: SiLU(gate) * up, a contiguous half-width tensor."""
    width = h.shape[1] // 2
    return torch.nn.functional.silu(h[:, :width]) * h[:, width:]


def grouped_layer(torch, x, w_up, w_down, offs):
    """One MoE layer's routed GEMMs: rows grouped by expert, gate/up then down."""

    def run():
        h = torch._grouped_mm(x, w_up.transpose(-2, -1), offs=offs)
        torch._grouped_mm(silu_and_mul(torch, h), w_down.transpose(-2, -1), offs=offs)

    return run


def loop_layer(torch, x, w_up, w_down, counts):
    """The same routed GEMMs one expert at a time (the fallback where the grouped kernel fails)."""
    spans, start = [], 0
    for e, n in enumerate(counts.tolist()):
        if n:
            spans.append((e, start, start + n))
        start += n

    def run():
        for e, a, b in spans:
            silu_and_mul(torch, x[a:b] @ w_up[e].t()) @ w_down[e].t()

    return run


def dense_layer(torch, x, w_up, w_down):
    """The same rows through one expert-sized weight pair: a dense GEMM of the same FLOPs."""

    def run():
        silu_and_mul(torch, x @ w_up[0].t()) @ w_down[0].t()

    return run


def measure(torch, peak: dict, out: list, timer, device: str, models: dict, tps, tokens_list) -> None:
    for model, (hidden, inter, experts, top_k) in models.items():
        for tp in tps:
            width = inter // tp
            # (experts, out, in): gate and up fused as vLLM does, so gate/up is 2*width wide.
            w_up = torch.empty(experts, 2 * width, hidden, dtype=torch.bfloat16, device=device).normal_(std=0.02)
            w_down = torch.empty(experts, hidden, width, dtype=torch.bfloat16, device=device).normal_(std=0.02)
            expert_bytes = 3 * hidden * width * 2
            for tokens in tokens_list:
                counts = route(torch, tokens, experts, top_k, device)
                rows = tokens * top_k
                offs = torch.cumsum(counts, 0).to(torch.int32)
                x = torch.empty(rows, hidden, dtype=torch.bfloat16, device=device).normal_()
                flops = 2.0 * rows * 3 * hidden * width
                touched = int((counts > 0).sum())
                row = {"what": "moe_grouped", "model": model, "tp": tp, "width": width, "tokens": tokens, "rows": rows, "experts_touched": touched}
                try:
                    t = timer(grouped_layer(torch, x, w_up, w_down, offs))
                    row["kernel"] = "grouped"
                except Exception as exc:  # noqa: BLE001  # one shape failing must not lose the sweep
                    row["grouped_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    t = timer(loop_layer(torch, x, w_up, w_down, counts))
                    row["kernel"] = "loop"
                td = timer(dense_layer(torch, x, w_up, w_down))
                row.update(
                    us=t * 1e6,
                    dense_us=td * 1e6,
                    tflops=flops / t / 1e12,
                    mfu=flops / t / 1e12 / peak["bf16"],
                    dense_mfu=flops / td / 1e12 / peak["bf16"],
                    weight_gbps=touched * expert_bytes / t / 1e9,
                    bw_fraction=touched * expert_bytes / t / 1e9 / peak["bandwidth_gbps"],
                )
                out.append(row)
                emit(row)
                del x
            del w_up, w_down
            if device == "cuda":
                torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    args = check_parser(__doc__, PEAKS).parse_args(argv)
    torch = cuda_torch("gpu_moe_kernels", need_gpu=not args.cpu_check)
    if torch is None:
        return 2
    rows: list = []
    began = time.time()
    if args.cpu_check:
        measure(torch, PEAKS[args.gpu], rows, cpu_timer, "cpu", {"tiny": (64, 96, 8, 2)}, (1, 2), (1, 8, 32))
    else:
        measure(torch, PEAKS[args.gpu], rows, lambda fn: graph_time_s(fn, torch), "cuda", MODELS, TPS, TOKENS)
    kernel = "torch._grouped_mm (bf16), uniform random top-k routing; dense = same rows through one expert's weights"
    write(args.out, torch, args.gpu, PEAKS[args.gpu], began, rows, kernel=kernel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
