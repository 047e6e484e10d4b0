"""The per-layer floor of a decode step, by model shape and tensor-parallel shard, on the GPU
at hand: what a whole layer costs beyond streaming its bytes.

knee prices a decode step as bytes / (``bw_weights`` x peak) plus a fixed cost per layer
(the engine profile's ``layer_us``). bench/gpu_kernels.py measured the floor of
Llama-3.1-8B's layer alone (about 40 us on an H100 and an H200, against the 8 us knee
shipped); this script asks whether that floor is one constant or moves with the layer's
size: small models (Qwen3-0.6B's shape), large ones (Qwen3-32B's) and Llama-3.1-70B's
layer cut into the shards one GPU holds at TP 2, 4 and 8 (the all-reduce between shards is
not here: one GPU).

Each layer is RMSNorm, fused QKV, rotary embedding, the new token's K/V written into a
contiguous cache, GQA attention over it, O, residual, RMSNorm, fused gate/up, SiLU-and-mul,
down, residual: torch.compile'd so elementwise work fuses as vLLM's custom kernels do, many
layers of distinct weights (nothing stays in L2), the whole step captured as one CUDA graph
and replayed (launches cost nothing here, as under vLLM's graphs). Beside each whole step,
the same layers' four GEMMs alone, so the floor splits into the GEMMs' own and the rest.

    python3 -m bench.gpu_layer_floor --gpu H200 --out layer-floor-h200.json
    python3 -m bench.gpu_layer_floor --gpu H200 --cpu-check      # tiny shapes on the CPU: the script's logic only

Standalone on purpose (torch and the standard library only): the GPU machine this runs on
has no knee environment. Rows print as they are measured; the JSON is written at the end.
"""

from __future__ import annotations

import sys
import time

from bench.gpu_kernels import PEAKS, graph_time_s
from bench.gpu_run import check_parser, cpu_timer, cuda_torch, run_cases, write

# name -> (hidden, query heads, KV heads, head_dim, MLP width, layers measured), before TP.
# Layers measured: enough that the step's weights are gigabytes, far past any L2.
SHAPES = {
    "llama-8b": (4096, 32, 8, 128, 14336, 32),
    "llama-70b": (8192, 64, 8, 128, 28672, 80),
    "qwen3-0.6b": (1024, 16, 8, 128, 3072, 28),
    "qwen3-32b": (5120, 64, 8, 128, 25600, 24),
}
# (shape, TP) in the order measured: the reference first, then what decides the question.
CASES = [("llama-8b", 1), ("llama-70b", 8), ("llama-70b", 4), ("qwen3-0.6b", 1), ("qwen3-32b", 1), ("llama-70b", 2)]
BATCHES = (1, 32)
CTX = 1024
# Stop starting new cases after this many seconds, so a lease's run ends with its rows.
BUDGET_S = 270.0


def shard(shape: str, tp: int) -> dict:
    hidden, heads, kv, d, inter, layers = SHAPES[shape]
    # KV heads split over TP, replicated where there are fewer than GPUs (as vLLM does).
    return {
        "hidden": hidden,
        "heads": heads // tp,
        "kv": max(1, kv // tp),
        "d": d,
        "inter": inter // tp,
        "layers": layers // tp if tp > 1 else layers,
    }


def build(torch, s: dict, device: str) -> list[dict]:
    q_out, kv_out = s["heads"] * s["d"], s["kv"] * s["d"]
    h, i = s["hidden"], s["inter"]

    def w(*shape):
        return torch.empty(*shape, dtype=torch.bfloat16, device=device).normal_(std=0.02)

    return [
        {
            "n1": torch.ones(h, dtype=torch.bfloat16, device=device),
            "n2": torch.ones(h, dtype=torch.bfloat16, device=device),
            "qkv": w(q_out + 2 * kv_out, h),
            "o": w(h, q_out),
            "gu": w(2 * i, h),
            "d": w(h, i),
        }
        for _ in range(s["layers"])
    ]


def norm_and_rope(torch):
    """RMSNorm and the rotary embedding, written plainly: torch.compile fuses them as vLLM's
    custom kernels do."""

    def rms(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def rope(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    return rms, rope


def make_layer(torch, s: dict):
    import torch.nn.functional as F

    q_out, kv_out, kv, d = s["heads"] * s["d"], s["kv"] * s["d"], s["kv"], s["d"]
    group = s["heads"] // kv

    rms, rope = norm_and_rope(torch)

    def layer(x, lay, kc, vc, pos, cos, sin):
        b = x.shape[0]
        qkv = rms(x, lay["n1"]) @ lay["qkv"].t()
        q, k, v = qkv.split([q_out, kv_out, kv_out], dim=-1)
        q = rope(q.view(b, s["heads"], d), cos, sin)
        k = rope(k.view(b, kv, d), cos, sin)
        kc[:, :, pos] = k
        vc[:, :, pos] = v.view(b, kv, d)
        # GQA decode: the query heads sharing a KV head are its query length.
        a = F.scaled_dot_product_attention(q.view(b, kv, group, d), kc, vc)
        x = x + a.reshape(b, q_out) @ lay["o"].t()
        g, u = (rms(x, lay["n2"]) @ lay["gu"].t()).chunk(2, dim=-1)
        return x + (F.silu(g) * u) @ lay["d"].t()

    return layer


def measure_case(torch, peak: dict, shape: str, tp: int, timer, device: str, compile_layer: bool, out: list) -> None:
    s = shard(shape, tp)
    layers = build(torch, s, device)
    weight_bytes = sum(t.numel() * 2 for lay in layers for t in lay.values())
    layer_fn = make_layer(torch, s)
    mode = "eager"
    if compile_layer:
        # Every case compiles the same function anew; dynamo's recompile limit (8 per code
        # object) would otherwise run the later cases eager while reporting them compiled.
        torch._dynamo.reset()
        try:
            layer_fn, mode = torch.compile(layer_fn, dynamic=False), "compiled"
        except Exception as exc:  # noqa: BLE001 - measure eager and say so
            mode = f"eager ({type(exc).__name__})"
    cos = torch.ones(s["d"], dtype=torch.bfloat16, device=device)
    sin = torch.zeros(s["d"], dtype=torch.bfloat16, device=device)
    for batch in BATCHES:
        caches = [
            (
                torch.zeros(batch, s["kv"], CTX, s["d"], dtype=torch.bfloat16, device=device),
                torch.zeros(batch, s["kv"], CTX, s["d"], dtype=torch.bfloat16, device=device),
            )
            for _ in layers
        ]
        x0 = torch.empty(batch, s["hidden"], dtype=torch.bfloat16, device=device).normal_()
        act = {
            "qkv": torch.empty(batch, s["hidden"], dtype=torch.bfloat16, device=device).normal_(),
            "o": torch.empty(batch, s["heads"] * s["d"], dtype=torch.bfloat16, device=device).normal_(),
            "d": torch.empty(batch, s["inter"], dtype=torch.bfloat16, device=device).normal_(),
        }

        def step():
            x = x0
            for lay, (kc, vc) in zip(layers, caches):
                x = layer_fn(x, lay, kc, vc, CTX - 1, cos, sin)
            return x

        def gemms():
            for lay in layers:
                act["qkv"] @ lay["qkv"].t()
                act["o"] @ lay["o"].t()
                act["qkv"] @ lay["gu"].t()
                act["d"] @ lay["d"].t()

        row = {"what": "layer_floor", "shape": shape, "tp": tp, "batch": batch, "ctx": CTX, "layers": s["layers"], "mode": mode}
        try:
            t_step, t_gemm = timer(step), timer(gemms)
        except Exception as exc:  # noqa: BLE001 - report and go on
            out.append({**row, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        kv_bytes = 2 * len(layers) * batch * s["kv"] * CTX * s["d"] * 2
        gemm_bytes = weight_bytes - sum(lay["n1"].numel() * 4 for lay in layers)
        out.append(
            {
                **row,
                "weight_bytes": weight_bytes,
                "kv_bytes": kv_bytes,
                "ms_per_step": t_step * 1e3,
                "us_per_layer": t_step * 1e6 / len(layers),
                "gemm_us_per_layer": t_gemm * 1e6 / len(layers),
                "bw_fraction_step": (weight_bytes + kv_bytes) / t_step / 1e9 / peak["bandwidth_gbps"],
                "bw_fraction_gemm": gemm_bytes / t_gemm / 1e9 / peak["bandwidth_gbps"],
            }
        )
    if device == "cuda":
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    args = check_parser(__doc__, PEAKS).parse_args(argv)
    torch = cuda_torch("gpu_layer_floor", need_gpu=not args.cpu_check)
    if torch is None:
        return 2
    peak = PEAKS[args.gpu]
    rows: list = []
    began = time.time()
    if args.cpu_check:
        SHAPES["tiny"] = (64, 4, 2, 16, 128, 3)
        cases, timer, device, compile_layer = [("tiny", 1), ("tiny", 2)], cpu_timer, "cpu", False
    else:
        cases, timer, device, compile_layer = CASES, (lambda fn: graph_time_s(fn, torch, replays=3, repeats=5)), "cuda", True
    run_cases(torch, "layer_floor", cases, lambda c: measure_case(torch, peak, c[0], c[1], timer, device, compile_layer, rows), rows, began, BUDGET_S)
    write(args.out, torch, args.gpu, peak, began, rows, ctx=CTX, batches=list(BATCHES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
