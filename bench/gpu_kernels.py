"""Measure the kernel-level efficiencies knee's step cost model assumes, on the GPU at hand.

core/estimate/calibration.toml holds, per architecture, the fraction of the datasheet peak
that a decode step's kernels reach: ``bw_weights`` (streaming weights through skinny GEMMs),
``bw_kv`` (reading the KV cache in decode attention), ``mfu`` / ``mfu_fp8`` (prefill-sized
GEMMs) and ``mfu_attn`` (causal prefill attention). Until now those were hand-set from the
literature and then pulled toward published serving runs by bench/fit.py, which makes the
priors only as independent as the people who set them. This script measures them directly,
with PyTorch and nothing of knee, so the priors can come from a GPU, not from the rows they
are later judged on:

    python3 -m bench.gpu_kernels --gpu H100-SXM --out kernels.json

Shapes are Llama-3.1-8B's (hidden 4096, 32 query / 8 KV heads of 128, MLP 14336), 32 layers
of distinct weights so nothing stays in L2; every timed region is a CUDA graph replayed
several times (launch overhead is an engine cost, not a kernel efficiency), median of
repeats. Prints one line per measurement and writes a JSON summary.

Standalone on purpose (torch and the standard library only): the GPU machine this runs on
has no knee environment.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from bench.gpu_run import cuda_torch, emit, parser, write

# Datasheet peaks (dense), the same figures core/catalog/data/gpus.toml uses.
PEAKS = {
    "H100-SXM": {"bandwidth_gbps": 3350, "bf16": 989, "fp8": 1979},
    "H200": {"bandwidth_gbps": 4800, "bf16": 989, "fp8": 1979},
}
HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, LAYERS = 4096, 14336, 32, 8, 128, 32
# (out_features, in_features) of one layer's four linear maps: fused QKV, O, fused gate/up, down.
LAYER_SHAPES = [
    ((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN),
    (HIDDEN, HEADS * HEAD_DIM),
    (2 * INTER, HIDDEN),
    (HIDDEN, INTER),
]


def graph_time_s(fn, torch, replays: int = 5, repeats: int = 7) -> float:
    """Median seconds of one call of ``fn``, captured once as a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm-up outside the graph: cuBLAS picks its algorithm here
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / replays)
    return statistics.median(times)


def hbm(torch, peak: dict, out: list) -> None:
    n = 1 << 31  # 4 GiB of bf16
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    t = graph_time_s(lambda: dst.copy_(src), torch)
    gbps = 2 * n * 2 / t / 1e9
    out.append({"what": "hbm_copy", "gbps": gbps, "fraction": gbps / peak["bandwidth_gbps"]})
    acc = torch.empty((), dtype=torch.float32, device="cuda")
    t = graph_time_s(lambda: torch.sum(src, dim=0, dtype=torch.float32, out=acc), torch)
    gbps = n * 2 / t / 1e9
    out.append({"what": "hbm_read", "gbps": gbps, "fraction": gbps / peak["bandwidth_gbps"]})


def linear_sweep(torch, peak: dict, out: list, fp8: bool) -> None:
    """All 32 layers' four GEMMs at batch M: bandwidth fraction when M is small, MFU when large."""
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    weights = []
    for _ in range(LAYERS):
        for n_out, n_in in LAYER_SHAPES:
            w = torch.empty(n_out, n_in, dtype=torch.bfloat16, device="cuda").normal_(std=0.02)
            weights.append(w.to(dtype) if fp8 else w)
    weight_bytes = sum(w.numel() * w.element_size() for w in weights)
    one = torch.ones((), dtype=torch.float32, device="cuda")
    for m in (1, 8, 32, 64, 128, 256, 1024, 4096, 8192):
        xs = {n_in: torch.empty(m, n_in, dtype=torch.bfloat16, device="cuda").normal_() for _, n_in in LAYER_SHAPES}
        if fp8:
            xs = {k: v.to(dtype) for k, v in xs.items()}

            def run():
                for w in weights:
                    torch._scaled_mm(xs[w.shape[1]], w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:

            def run():
                for w in weights:
                    torch.matmul(xs[w.shape[1]], w.t())

        try:
            t = graph_time_s(run, torch, replays=3, repeats=5)
        except RuntimeError as exc:  # e.g. an FP8 shape cuBLASLt rejects: say so, go on
            out.append({"what": f"linear_{'fp8' if fp8 else 'bf16'}", "m": m, "error": str(exc)[:200]})
            continue
        flops = 2 * m * sum(w.shape[0] * w.shape[1] for w in weights)
        tflops = flops / t / 1e12
        gbps = weight_bytes / t / 1e9
        peak_tf = peak["fp8" if fp8 else "bf16"]
        out.append(
            {
                "what": f"linear_{'fp8' if fp8 else 'bf16'}",
                "m": m,
                "ms_per_step": t * 1e3,
                "weight_gbps": gbps,
                "bw_fraction": gbps / peak["bandwidth_gbps"],
                "tflops": tflops,
                "mfu": tflops / peak_tf,
            }
        )
    torch.cuda.empty_cache()


# (hidden, intermediate, query heads, KV heads) of the dense models whose per-GPU GEMMs a
# tensor-parallel shard shrinks: Llama-3.1-8B and -70B.
SHARD_MODELS = {"8b": (4096, 14336, 32, 8), "70b": (8192, 28672, 64, 8)}


def shard_shapes(model: str, tp: int) -> list[tuple[int, int]]:
    """(out, in) of one TP shard's four linear maps of a layer of ``SHARD_MODELS[model]``:
    QKV and gate/up split by output columns, O and down by input rows (vLLM's column- and
    row-parallel layers); a KV head is replicated when TP exceeds the KV heads."""
    hidden, inter, heads, kv = SHARD_MODELS[model]
    qkv_out = (heads // tp + 2 * max(kv // tp, 1)) * HEAD_DIM
    return [(qkv_out, hidden), (hidden, heads // tp * HEAD_DIM), (2 * inter // tp, hidden), (hidden, inter // tp)]


def shard_sweep(torch, peak: dict, out: list) -> None:
    """Weight-streaming bandwidth of one TP shard's GEMMs (QKV and gate/up split by output
    columns, O and down by input rows, as vLLM's column/row-parallel layers do): the narrower
    the matrices, the further below peak a decode step streams them."""
    for name in SHARD_MODELS:
        for tp in (1, 2, 4, 8):
            shapes = shard_shapes(name, tp)
            per_layer = sum(a * b * 2 for a, b in shapes)
            layers = max(4, int(8e9 // per_layer))  # ~8 GB of weights: far beyond L2
            weights = [torch.empty(a, b, dtype=torch.bfloat16, device="cuda").normal_(std=0.02) for _ in range(layers) for a, b in shapes]
            for m in (1, 32, 128):
                xs = {b: torch.empty(m, b, dtype=torch.bfloat16, device="cuda").normal_() for _, b in shapes}

                def run():
                    for w in weights:
                        torch.matmul(xs[w.shape[1]], w.t())

                t = graph_time_s(run, torch, replays=3, repeats=5)
                gbps = per_layer * layers / t / 1e9
                out.append(
                    {
                        "what": "shard_bf16",
                        "model": name,
                        "tp": tp,
                        "m": m,
                        "layers": layers,
                        "us_per_layer": t / layers * 1e6,
                        "weight_gbps": gbps,
                        "bw_fraction": gbps / peak["bandwidth_gbps"],
                    }
                )
            torch.cuda.empty_cache()


def decode_layers(torch, peak: dict, out: list) -> None:
    """Whole decode steps of Llama-3.1-8B-shaped layers (RMSNorm, fused QKV, the new token's
    K/V written into a contiguous cache, GQA attention over it, O, residual, RMSNorm, gate/up,
    SiLU-and-mul, down, residual), torch.compile'd so elementwise work fuses as vLLM's custom
    kernels do, 32 layers of distinct weights. What a step costs beyond streaming its bytes at
    the asymptotic bandwidth is the per-layer floor (kernel tails, small kernels) that the
    engine profile's ``layer_us`` stands for."""
    import torch.nn.functional as F

    ctx = 1024
    q_out, kv_out = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    layers = []
    for _ in range(LAYERS):
        layers.append(
            {
                "n1": torch.ones(HIDDEN, dtype=torch.bfloat16, device="cuda"),
                "n2": torch.ones(HIDDEN, dtype=torch.bfloat16, device="cuda"),
                "qkv": torch.empty(q_out + 2 * kv_out, HIDDEN, dtype=torch.bfloat16, device="cuda").normal_(std=0.02),
                "o": torch.empty(HIDDEN, q_out, dtype=torch.bfloat16, device="cuda").normal_(std=0.02),
                "gu": torch.empty(2 * INTER, HIDDEN, dtype=torch.bfloat16, device="cuda").normal_(std=0.02),
                "d": torch.empty(HIDDEN, INTER, dtype=torch.bfloat16, device="cuda").normal_(std=0.02),
            }
        )
    weight_bytes = sum(t.numel() * 2 for lay in layers for t in lay.values())

    def rms(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def layer(x, lay, kc, vc, pos):
        b = x.shape[0]
        qkv = rms(x, lay["n1"]) @ lay["qkv"].t()
        q, k, v = qkv.split([q_out, kv_out, kv_out], dim=-1)
        kc[:, :, pos] = k.view(b, KV_HEADS, HEAD_DIM)
        vc[:, :, pos] = v.view(b, KV_HEADS, HEAD_DIM)
        a = F.scaled_dot_product_attention(q.view(b, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM), kc, vc)
        x = x + a.reshape(b, q_out) @ lay["o"].t()
        g, u = (rms(x, lay["n2"]) @ lay["gu"].t()).chunk(2, dim=-1)
        return x + (F.silu(g) * u) @ lay["d"].t()

    try:
        step_layer = torch.compile(layer, dynamic=False)
        mode = "compiled"
    except Exception as exc:  # noqa: BLE001 - any compile failure: measure eager, say so
        step_layer, mode = layer, f"eager ({type(exc).__name__})"
    for batch in (1, 8, 32, 64, 128):
        caches = [
            (
                torch.zeros(batch, KV_HEADS, ctx, HEAD_DIM, dtype=torch.bfloat16, device="cuda"),
                torch.zeros(batch, KV_HEADS, ctx, HEAD_DIM, dtype=torch.bfloat16, device="cuda"),
            )
            for _ in range(LAYERS)
        ]
        x0 = torch.empty(batch, HIDDEN, dtype=torch.bfloat16, device="cuda").normal_()
        pos = ctx - 1

        def run():
            x = x0
            for lay, (kc, vc) in zip(layers, caches):
                x = step_layer(x, lay, kc, vc, pos)
            return x

        try:
            t = graph_time_s(run, torch, replays=3, repeats=5)
        except Exception as exc:  # noqa: BLE001 - report and go on to the next batch
            out.append({"what": "decode_layer", "batch": batch, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        kv_bytes = 2 * LAYERS * batch * KV_HEADS * ctx * HEAD_DIM * 2
        stream_us = (weight_bytes + kv_bytes) / (0.85 * peak["bandwidth_gbps"] * 1e9) * 1e6
        out.append(
            {
                "what": "decode_layer",
                "mode": mode,
                "batch": batch,
                "ctx": ctx,
                "ms_per_step": t * 1e3,
                "stream_ms_at_0.85": stream_us / 1e3,
                "floor_us_per_layer": (t * 1e6 - stream_us) / LAYERS,
                "bw_fraction": (weight_bytes + kv_bytes) / t / 1e9 / peak["bandwidth_gbps"],
            }
        )
    torch.cuda.empty_cache()


def attention_prefill(torch, peak: dict, out: list) -> None:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for s in (1024, 2048, 4096, 8192):
        q = torch.empty(1, HEADS, s, HEAD_DIM, dtype=torch.bfloat16, device="cuda").normal_()
        # K/V expanded to the query heads: the FLOPs are GQA's, the kernel the flash path.
        k = torch.empty_like(q).normal_()
        v = torch.empty_like(q).normal_()
        t = graph_time_s(lambda: sdpa(q, k, v, is_causal=True), torch)
        flops = 4 * HEADS * HEAD_DIM * s * s / 2  # QK^T and PV, half the square under the mask
        tflops = flops / t / 1e12
        out.append({"what": "attn_prefill", "seq": s, "ms": t * 1e3, "tflops": tflops, "mfu": tflops / peak["bf16"]})


def attention_decode(torch, peak: dict, out: list) -> None:
    """One query token per sequence over its KV cache: how much of HBM a decode step's
    attention reads per second. K/V heads are the model's 8; the 4 query heads that share a
    KV head are folded into the query length, as GQA decode kernels do."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    group = HEADS // KV_HEADS
    for batch, ctx in ((8, 4096), (32, 2048), (64, 2048), (128, 1024), (256, 1024)):
        q = torch.empty(batch, KV_HEADS, group, HEAD_DIM, dtype=torch.bfloat16, device="cuda").normal_()
        k = torch.empty(batch, KV_HEADS, ctx, HEAD_DIM, dtype=torch.bfloat16, device="cuda").normal_()
        v = torch.empty_like(k).normal_()
        t = graph_time_s(lambda: sdpa(q, k, v), torch)
        kv_bytes = 2 * k.numel() * k.element_size()
        gbps = kv_bytes / t / 1e9
        out.append({"what": "attn_decode", "batch": batch, "ctx": ctx, "us": t * 1e6, "gbps": gbps, "bw_fraction": gbps / peak["bandwidth_gbps"]})


def summarize(rows: list) -> dict:
    def pick(what, key, cond):
        vals = [r[key] for r in rows if r["what"] == what and key in r and cond(r)]
        return statistics.median(vals) if vals else None

    return {
        # decode-sized batches: M <= 64 streams the weights once per step
        "bw_weights": pick("linear_bf16", "bw_fraction", lambda r: r["m"] <= 64),
        "bw_weights_fp8": pick("linear_fp8", "bw_fraction", lambda r: r["m"] <= 64),
        "mfu": pick("linear_bf16", "mfu", lambda r: r["m"] >= 4096),
        "mfu_fp8": pick("linear_fp8", "mfu", lambda r: r["m"] >= 4096),
        "mfu_attn": pick("attn_prefill", "mfu", lambda r: r["seq"] >= 2048),
        "bw_kv": pick("attn_decode", "bw_fraction", lambda r: True),
        "hbm_read": pick("hbm_read", "fraction", lambda r: True),
    }


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__, PEAKS).parse_args(argv)
    torch = cuda_torch("gpu_kernels")
    if torch is None:
        return 2
    peak = PEAKS[args.gpu]
    rows: list = []
    began = time.time()
    for step in (
        hbm,
        lambda t, p, o: linear_sweep(t, p, o, False),
        lambda t, p, o: linear_sweep(t, p, o, True),
        attention_prefill,
        attention_decode,
        shard_sweep,
        decode_layers,
    ):
        n = len(rows)
        try:
            step(torch, peak, rows)
        except Exception as exc:  # noqa: BLE001  # one kernel family failing must not lose the rest
            rows.append({"what": getattr(step, "__name__", "step"), "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            torch.cuda.empty_cache()
        for r in rows[n:]:
            emit(r)
    summary = summarize(rows)
    print("summary", json.dumps({k: (round(v, 3) if v is not None else None) for k, v in summary.items()}))
    write(args.out, torch, args.gpu, peak, began, rows, summary=summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
