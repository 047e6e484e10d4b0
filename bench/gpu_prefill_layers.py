"""Whole prefill steps of compiled layers on the GPU at hand: how much of the dense 16-bit peak
a layer's linear work reaches once the RMSNorms, rotary embedding, KV writes, SiLU-and-mul and
residuals run beside its GEMMs, which is what knee's ``mfu`` stands for (the cost model prices
a step's per-token work as linear FLOPs at ``mfu`` of peak, its attention apart at
``mfu_attn``). bench/gpu_kernels.py measured the GEMMs alone (0.68 of peak on an H100 and an
H200 from 4096 rows up); a fit on the published rows puts ``mfu`` near 0.61.

One sequence of T tokens through the layers of bench/gpu_layer_floor.py's shapes (causal
flash attention over itself, K/V expanded to the query heads as vLLM's varlen kernel reads
them), torch.compile'd, one CUDA graph per step. Beside each step, its attention alone and its
four GEMMs alone, so the step splits into attention, GEMMs and the rest.

    python3 -m bench.gpu_prefill_layers --gpu H200 --out prefill-h200.json
    python3 -m bench.gpu_prefill_layers --gpu H200 --cpu-check    # tiny shapes on the CPU: the script's logic only

Standalone (torch and the standard library only), like the other GPU scripts.
"""

from __future__ import annotations

import sys
import time

from bench.gpu_kernels import PEAKS, graph_time_s
from bench.gpu_layer_floor import SHAPES, build, norm_and_rope, shard
from bench.gpu_run import check_parser, cpu_timer, cuda_torch, run_cases, write

CASES = [("llama-8b", 1, 4), ("qwen3-32b", 1, 4), ("llama-70b", 8, 8), ("llama-70b", 2, 4)]  # (shape, TP, layers)
TOKENS = (2048, 8192)
BUDGET_S = 240.0


def make_prefill_layer(torch, s: dict):
    import torch.nn.functional as F

    q_out, kv_out, kv, d, heads = s["heads"] * s["d"], s["kv"] * s["d"], s["kv"], s["d"], s["heads"]
    group = heads // kv

    rms, rope = norm_and_rope(torch)

    def layer(x, lay, kc, vc, cos, sin):
        t = x.shape[0]
        qkv = rms(x, lay["n1"]) @ lay["qkv"].t()
        q, k, v = qkv.split([q_out, kv_out, kv_out], dim=-1)
        q = rope(q.view(t, heads, d), cos, sin)
        k = rope(k.view(t, kv, d), cos, sin)
        kc.copy_(k)
        vc.copy_(v.view(t, kv, d))
        qh = q.transpose(0, 1).unsqueeze(0)
        kh = kc.transpose(0, 1).repeat_interleave(group, dim=0).unsqueeze(0)
        vh = vc.transpose(0, 1).repeat_interleave(group, dim=0).unsqueeze(0)
        a = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
        x = x + a.squeeze(0).transpose(0, 1).reshape(t, q_out) @ lay["o"].t()
        g, u = (rms(x, lay["n2"]) @ lay["gu"].t()).chunk(2, dim=-1)
        return x + (F.silu(g) * u) @ lay["d"].t()

    return layer


def measure_case(torch, peak: dict, shape: str, tp: int, n_layers: int, tokens, timer, device: str, compile_layer: bool, out: list) -> None:
    s = {**shard(shape, tp), "layers": n_layers}
    layers = build(torch, s, device)
    lin_params = sum(lay[k].numel() for lay in layers for k in ("qkv", "o", "gu", "d")) / n_layers
    fn, mode = make_prefill_layer(torch, s), "eager"
    if compile_layer:
        torch._dynamo.reset()
        fn, mode = torch.compile(fn, dynamic=False), "compiled"
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for t in tokens:
        x0 = torch.empty(t, s["hidden"], dtype=torch.bfloat16, device=device).normal_()
        caches = [
            (
                torch.empty(t, s["kv"], s["d"], dtype=torch.bfloat16, device=device),
                torch.empty(t, s["kv"], s["d"], dtype=torch.bfloat16, device=device),
            )
            for _ in layers
        ]
        cos = torch.ones(s["d"], dtype=torch.bfloat16, device=device)
        sin = torch.zeros(s["d"], dtype=torch.bfloat16, device=device)
        q = torch.empty(1, s["heads"], t, s["d"], dtype=torch.bfloat16, device=device).normal_()
        k, v = torch.empty_like(q).normal_(), torch.empty_like(q).normal_()
        acts = {
            n: torch.empty(t, w, dtype=torch.bfloat16, device=device).normal_()
            for n, w in (("h", s["hidden"]), ("o", s["heads"] * s["d"]), ("d", s["inter"]))
        }

        def step():
            x = x0
            for lay, (kc, vc) in zip(layers, caches):
                x = fn(x, lay, kc, vc, cos, sin)
            return x

        def attention():
            for _ in layers:
                sdpa(q, k, v, is_causal=True)

        def gemms():
            for lay in layers:
                acts["h"] @ lay["qkv"].t()
                acts["o"] @ lay["o"].t()
                acts["h"] @ lay["gu"].t()
                acts["d"] @ lay["d"].t()

        row = {"what": "prefill_layer", "shape": shape, "tp": tp, "tokens": t, "layers": n_layers, "mode": mode}
        try:
            t_step, t_attn, t_gemm = timer(step), timer(attention), timer(gemms)
        except Exception as exc:  # noqa: BLE001 - report and go on
            out.append({**row, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        lin_flops = 2.0 * t * lin_params * n_layers
        attn_flops = 4.0 * s["heads"] * s["d"] * t * t / 2 * n_layers
        out.append(
            {
                **row,
                "linear_flops": lin_flops,
                "attn_flops": attn_flops,
                "ms_per_step": t_step * 1e3,
                "attn_ms": t_attn * 1e3,
                "gemm_ms": t_gemm * 1e3,
                "mfu_gemm": lin_flops / t_gemm / 1e12 / peak["bf16"],
                "mfu_attn": attn_flops / t_attn / 1e12 / peak["bf16"],
                # the step less its attention, as knee's linear term prices it
                "mfu_step_less_attn": lin_flops / (t_step - t_attn) / 1e12 / peak["bf16"],
            }
        )
    if device == "cuda":
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    args = check_parser(__doc__, PEAKS).parse_args(argv)
    torch = cuda_torch("gpu_prefill_layers", need_gpu=not args.cpu_check)
    if torch is None:
        return 2
    peak = PEAKS[args.gpu]
    rows: list = []
    began = time.time()
    if args.cpu_check:
        SHAPES["tiny"] = (64, 4, 2, 16, 128, 3)
        cases, timer, device, compile_layer, tokens = [("tiny", 1, 2), ("tiny", 2, 2)], cpu_timer, "cpu", False, (64, 128)
    else:
        cases, timer, device, compile_layer, tokens = CASES, (lambda fn: graph_time_s(fn, torch, replays=2, repeats=5)), "cuda", True, TOKENS

    def one(case):
        measure_case(torch, peak, case[0], case[1], case[2], tokens, timer, device, compile_layer, rows)

    run_cases(torch, "prefill_layer", cases, one, rows, began, BUDGET_S)
    write(args.out, torch, args.gpu, peak, began, rows, tokens=list(tokens))
    return 0


if __name__ == "__main__":
    sys.exit(main())
