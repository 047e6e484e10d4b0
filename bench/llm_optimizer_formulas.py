"""llm-optimizer's estimate, reimplemented as a baseline for ``bench.accuracy``.

A faithful reimplementation of BentoML llm-optimizer 0.0.1's ``estimate_llm_performance``
(``performance.py``, ``predefined/gpus.py``), from the descriptions in
``shared/reference/anchors.md`` and ``shared/reference/perf-modeling.md``, defects included —
the point is to measure the formulas as they are:

- Parameter count from ``config.json`` only: attention with ``head_dim = hidden/heads`` and
  GQA, one dense SwiGLU MLP of ``intermediate_size`` (three matrices), embeddings plus an
  untied LM head. MoE experts are not counted (Mixtral-8x7B → 7.24B, Qwen3-30B-A3B → 2.89B).
- Bytes per parameter: fp16/bf16 2, fp8 1, anything else 2 (int4/AWQ/GPTQ count as 2). The
  KV cache has the weights' width.
- GPUs: its own table; multi-GPU sums FLOPs, bandwidth and memory, with no TP
  communication. Bandwidth and memory are scaled by 1024³ while TFLOPS use 1e12.
  L40S is looked up as L40 (half the compute), H100 PCIe as the SXM row, every A100 as the
  80 GB row; L4 and A10G are rejected, and FP8 on a GPU without FP8 (A100) raises.
- TTFT: all B prompts prefilled in one step. FLOPs from a transformer count with
  ``d_ff = 4·d`` and two MLP matrices, plus quadratic attention; bytes = weights (same
  ``d_ff = 4·d`` count, no embeddings) + KV + activations including a B·H·T² attention
  matrix. Memory-bound if FLOPs/bytes is below the GPU's ridge: bytes / 100% of peak
  bandwidth; else FLOPs / (peak · 0.45).
- ITL: the first decode step only (context I + 1), same roofline with MFU 0.30.
- E2E = TTFT + OSL·ITL; output tok/s = B / ITL; req/s = B / E2E.
- Memory check: weights + B·(I+O) KV tokens must fit 90% of the summed VRAM, else the
  estimate is infinite (infeasible).
- Percentile SLOs multiply the mean: median ×1.1, p95 ×1.3, p99 ×1.6.

How benchmark rows map onto it (``predict_row``): closed loop → B = concurrency; single
request → B = 1 (or the static batch); offline max throughput → the fixed batch if given,
else the B of best output throughput over llm-optimizer's own search (powers of two up to
1024, stopping where memory runs out); open loop → the smallest B whose predicted req/s
reaches the arrival rate (the mapping the sim-to-real evaluation used), else the best B.
Rows it cannot predict (unsupported GPU, FP8 on Ampere, infeasible memory) come back with a
reason and count against its coverage.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3

# predefined/gpus.py: dense FP16 / FP8 TFLOPS, bandwidth GB/s, VRAM GB.
GPU_TABLE = {
    "H100": (989.5, 1978.0, 3350.0, 80.0),
    "H200": (989.0, 1979.0, 4800.0, 141.0),
    "A100": (312.0, None, 2039.0, 80.0),
    "L20": (119.5, 239.0, 864.0, 48.0),
    "L40": (181.0, 362.0, 864.0, 48.0),
    "B100": (1800.0, 3500.0, 8000.0, 192.0),
    "B200": (2250.0, 4500.0, 8000.0, 192.0),
}
# knee's GPU names → what llm-optimizer would be run with (None: unsupported).
GPU_MAP = {
    "H100-SXM": "H100",
    "H100-PCIE": "H100",
    "H200": "H200",
    "A100-80GB": "A100",
    "A100-40GB": "A100",
    "L40S": "L40",
    "B200": "B200",
    "L4": None,
    "A10G": None,
}
MFU_PREFILL, MFU_DECODE, VRAM_UTIL = 0.45, 0.30, 0.90
STAT_FACTOR = {"mean": 1.0, "median": 1.1, "p50": 1.1, "p95": 1.3, "p99": 1.6}


class Unsupported(Exception):
    """llm-optimizer cannot produce an estimate for this row."""


@dataclass(frozen=True)
class LOModel:
    params: float
    layers: int
    hidden: int
    vocab: int
    heads: int
    kv_heads: int


@dataclass(frozen=True)
class LOResult:
    ttft_ms: float
    itl_ms: float
    e2e_s: float
    output_tok_per_s: float
    req_per_s: float
    concurrency: int


def model_from_config(cfg: dict) -> LOModel:
    cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
    h, n, i, v = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    heads = cfg.get("num_attention_heads", 0)
    kv = cfg.get("num_key_value_heads", heads)
    hd = h // heads
    attention = n * (h * (heads * hd) + 2 * h * (kv * hd) + h * h)
    ffn = n * 3 * h * i  # one dense SwiGLU MLP: MoE experts are not counted
    emb = v * h
    out = 0 if cfg.get("tie_word_embeddings", False) else v * h
    return LOModel(attention + ffn + emb + out, n, h, v, heads, kv)


def _flops(m: LOModel, seq: int) -> float:
    d, dh = m.hidden, m.hidden // m.heads
    dkv, dff = m.kv_heads * dh, 4 * m.hidden
    qkv = 2 * seq * (d * d + 2 * d * dkv)
    scores = 2 * m.heads * seq * seq * dh
    softmax = 3 * m.heads * seq * seq
    av = 2 * m.heads * seq * seq * dh
    proj = 2 * seq * d * d
    mlp = 2 * seq * (2 * d * dff)
    return (qkv + scores + softmax + av + proj + mlp) * m.layers


def _bytes(m: LOModel, seq: int, batch: int, bpp: float) -> float:
    d, dh = m.hidden, m.hidden // m.heads
    dkv, dff = m.kv_heads * dh, 4 * m.hidden
    weights = (d * (d + 2 * dkv) + d * d + 2 * d * dff) * m.layers * bpp
    kv = 2 * m.layers * m.kv_heads * dh * bpp * seq * batch
    act = batch * seq * d * bpp + batch * m.heads * seq * seq * bpp
    return weights + kv + act


def estimate(m: LOModel, gpu: str, num_gpus: int, precision: str, batch: int, input_len: int, output_len: int) -> LOResult:
    name = GPU_MAP.get(gpu, gpu)
    if name is None or name not in GPU_TABLE:
        raise Unsupported(f"GPU {gpu} is not in llm-optimizer's table")
    fp16, fp8, bw, vram = GPU_TABLE[name]
    prec = "fp8" if precision == "fp8" else "fp16"
    tflops = fp8 if prec == "fp8" else fp16
    if tflops is None:
        raise Unsupported(f"FP8 precision not supported on {name}")
    total_flops = num_gpus * tflops * 1e12
    total_bw = num_gpus * bw * GIB  # GiB-scaled bandwidth, as its code does
    usable = num_gpus * vram * GIB * VRAM_UTIL
    ridge = total_flops / total_bw
    bpp = 1.0 if prec == "fp8" else 2.0

    size = m.params * bpp
    kv_tok = 2 * m.layers * m.kv_heads * (m.hidden // m.heads) * bpp
    if size + batch * kv_tok * (input_len + output_len) > usable:
        raise Unsupported(f"llm-optimizer finds B={batch} does not fit in memory")

    pf_flops = _flops(m, input_len) * batch
    pf_bytes = _bytes(m, input_len, batch, bpp)
    ttft = pf_bytes / total_bw if pf_flops / pf_bytes < ridge else pf_flops / (total_flops * MFU_PREFILL)

    ctx = input_len + 1  # the first decode step only
    dh = m.hidden // m.heads
    attn_ctx = (2 * m.heads * ctx * dh + 3 * m.heads * ctx + 2 * m.heads * ctx * dh) * m.layers
    dc_flops = (_flops(m, 1) + attn_ctx) * batch
    dc_bytes = _bytes(m, ctx, batch, bpp)
    itl = dc_bytes / total_bw if dc_flops / dc_bytes < ridge else dc_flops / (total_flops * MFU_DECODE)

    e2e = ttft + output_len * itl
    return LOResult(ttft * 1e3, itl * 1e3, e2e, batch / itl, batch / e2e, batch)


def _search(m, gpu, n, prec, i, o):
    out = []
    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        try:
            out.append(estimate(m, gpu, n, prec, b, i, o))
        except Unsupported:
            if not out:
                raise
            break  # its search stops where memory runs out
    return out


def predict_row(m: LOModel, row: dict, input_len: float, output_len: float) -> LOResult:
    """llm-optimizer's estimate for one measurements row (see the module docstring)."""
    w = row["workload"]
    gpu, n, prec = row["gpu"], int(row.get("num_gpus") or 1), row.get("precision") or "fp16"
    i, o = max(1, int(round(input_len))), max(1, int(round(output_len)))
    mode = w.get("mode")
    if mode == "online-concurrency":
        return estimate(m, gpu, n, prec, int(w["concurrency"]), i, o)
    if mode == "single-request":
        return estimate(m, gpu, n, prec, int(w.get("batch_size") or 1), i, o)
    if mode == "offline-max-throughput":
        if w.get("batch_size"):
            return estimate(m, gpu, n, prec, int(w["batch_size"]), i, o)
        return max(_search(m, gpu, n, prec, i, o), key=lambda r: r.output_tok_per_s)
    if mode == "online-rate":
        rate = float(w["request_rate"])
        results = _search(m, gpu, n, prec, i, o)
        for r in results:
            if r.req_per_s >= rate:
                return r
        return max(results, key=lambda r: r.req_per_s)
    raise Unsupported(f"mode {mode!r}")
