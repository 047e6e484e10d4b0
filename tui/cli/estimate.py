"""``knee estimate``: memory plan per TP, limits, predictions, bottlenecks and a suggested
search space — in milliseconds, with no network and no GPU.

Plain text on purpose: it starts fast, reads well over SSH and in logs; ``--json`` gives the
full report (``core.estimate.report.EstimateReport.as_dict``).
"""

from __future__ import annotations

from tui.cli.common import int_list, print_json


def register(sub) -> None:
    p = sub.add_parser(
        "estimate",
        help="predict memory, latency and throughput per TP x DP and suggest a sweep",
        description="Predict memory, TTFT/ITL/E2E and throughput for every TP x DP configuration "
        "that fits, the concurrency limits, and a suggested search space. Works offline.",
    )
    p.add_argument("--model", help="Hugging Face id or local directory (default: the plan's)")
    p.add_argument("--plan", help="a plan TOML file (knee's Plan); flags override its fields")
    p.add_argument("--instance", help="SageMaker instance type, e.g. ml.g6.12xlarge")
    p.add_argument("--gpu", help="GPU type, e.g. L4, H100-SXM (with --num-gpus)")
    p.add_argument("--num-gpus", type=int, help="GPUs available (default 1 with --gpu)")
    p.add_argument(
        "--no-gpu-p2p",
        action="store_true",
        help="the GPUs cannot reach each other peer-to-peer (vLLM logs 'Custom allreduce is disabled'): all-reduce through host memory",
    )
    p.add_argument("--tp", help="tensor-parallel degree(s), e.g. 2 or 1,2,4 (default: every one that fits)")
    p.add_argument("--precision", help="weights: bf16, fp16, fp8, int8, int4, awq, gptq, mxfp4 (default: the checkpoint's)")
    p.add_argument("--kv-cache-dtype", help="auto (default) or fp8")
    p.add_argument("--input-len", type=float, help="prompt tokens per request (default 1024)")
    p.add_argument("--output-len", type=float, help="output tokens per request (default 512)")
    p.add_argument("--range-ratio", type=float, help="lengths uniform in [L(1-r), L(1+r)] (default 0: fixed)")
    p.add_argument(
        "--dataset",
        choices=("random", "sharegpt"),
        help="sharegpt: ShareGPT-like length spread, bundled (no file); --input-len/--output-len set its means",
    )
    p.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="the client lets the model stop at EOS (vllm bench serve's default): sharegpt answers take the measured shape of answers ended at EOS",
    )
    p.add_argument(
        "--lengths-from",
        metavar="FILE",
        help="your own requests' token counts: JSONL (prompt_tokens/completion_tokens, or input_/output_tokens, "
        "an OpenAI usage object), CSV with such a header, or a vllm bench serve --save-detailed result",
    )
    p.add_argument("--concurrency", help="closed-loop concurrencies to predict, e.g. 1,8,32 (default 1..256)")
    p.add_argument("--constraints", help="SLOs in llm-optimizer's grammar, e.g. 'ttft:p95<500ms;e2e_latency:p99<60s'")
    p.add_argument("--max-num-batched-tokens", type=int, help="vLLM token budget per step (default: the engine's)")
    p.add_argument("--max-num-seqs", type=int, help="vLLM running-sequence cap (default: the engine's)")
    p.add_argument("--max-model-len", type=int, help="context limit (default: the workload's, rounded up)")
    p.add_argument(
        "--stream-interval",
        type=int,
        help="tokens per streamed message (vLLM's and SGLang's --stream-interval, default 1): less API-server work at high concurrency",
    )
    p.add_argument("--gpu-memory-utilization", type=float, help="default: the plan's server args, else 0.9")
    p.add_argument("--engine", help="vllm (default), sglang, tensorrt-llm")
    p.add_argument(
        "--engine-version",
        help="the engine's release (e.g. 0.10.1: vLLM before 0.14 schedules no step ahead; 0.5.4: the pre-0.6 engine); default: the current one",
    )
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p.add_argument("--calibrate-from", metavar="STUDY", help="predict with the step profile this study fitted on its own machine")
    p.add_argument(
        "--no-client-ceiling",
        action="store_true",
        help="with --calibrate-from: predict the server alone, without the request-rate ceiling of the client that measured the study",
    )
    p.add_argument("--storage", help="study store path or SQLAlchemy URL (with --calibrate-from)")
    p.add_argument("--workspace", help="directory of the study store (default .knee; with --calibrate-from)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.calibrate_from:
        from tui.cli.estimate_calibrated import run_calibrated

        return run_calibrated(args)
    from dataclasses import replace

    from core.errors import BadInput
    from core.estimate.report import estimate
    from core.spec.plan import Plan
    from core.sweep.plan_estimate import estimate_args

    plan = Plan.load(args.plan) if args.plan else None
    # The plan's server args fill what no flag sets (TP degrees, one-valued knobs).
    from_plan = estimate_args(plan.server_args) if plan else None
    fixed = from_plan.kwargs if from_plan else {}

    def given(flag: str, default=None):
        v = getattr(args, flag)
        return v if v is not None else fixed.get(flag, default)

    if args.range_ratio is not None and not 0 <= args.range_ratio <= 1:
        raise BadInput(f"--range-ratio must be in [0, 1], got {args.range_ratio:g}")
    if args.num_gpus is not None and args.num_gpus < 1:
        raise BadInput(f"--num-gpus must be at least 1, got {args.num_gpus}")
    report = estimate(
        plan,
        model=args.model,
        gpu=args.gpu,
        num_gpus=args.num_gpus,
        instance=args.instance,
        gpu_p2p=False if args.no_gpu_p2p else None,
        tp=int_list(args.tp, "--tp") if args.tp else fixed.get("tp"),
        precision=args.precision or fixed.get("precision"),
        kv_cache_dtype=given("kv_cache_dtype"),
        input_len=args.input_len,
        output_len=args.output_len,
        range_ratio=args.range_ratio,
        dataset=args.dataset,
        concurrency=int_list(args.concurrency, "--concurrency") if args.concurrency else None,
        constraints=args.constraints,
        max_num_batched_tokens=given("max_num_batched_tokens"),
        max_num_seqs=given("max_num_seqs"),
        gpu_memory_utilization=given("gpu_memory_utilization", 0.9),
        max_model_len=given("max_model_len"),
        engine=args.engine,
        engine_version=args.engine_version,
        stream_interval=given("stream_interval"),
        ignore_eos=False if args.no_ignore_eos else None,  # None: the plan's
        lengths_from=args.lengths_from,
    )
    if from_plan and from_plan.notes():
        report = replace(report, notes=[*from_plan.notes(), *report.notes])
    if args.json:
        print_json(report.as_dict())
    else:
        print(format_report(report))
    return 0


# ---- plain-text rendering ---------------------------------------------------------------
def _table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells):
        return "  " + "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]


def _num(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    if v >= 10_000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def _ms(v: float) -> str:
    return f"{v / 1000:.1f}s" if v >= 10_000 else f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def format_report(r) -> str:
    m = r.model
    out: list[str] = []
    price = f", ${r.price_per_hour:g}/h" if r.price_per_hour else ""
    out.append(
        f"knee estimate: {m['name']} ({m['params_total_b']:g}B params, {m['params_active_b']:g}B active, "
        f"{m['weights']}, {m['weights_gb']:g} GB) on {r.hardware}{price}"
    )
    wl = r.workload
    rr = f" (±{wl['range_ratio']:g})" if wl.get("range_ratio") else ""
    if wl.get("dataset") == "sharegpt":
        rr = " (mean; ShareGPT-like spread, bundled" + ("; answers end at EOS)" if wl.get("ignore_eos") is False else ")")
    elif wl.get("lengths_from"):
        lf = wl["lengths_from"]
        cached = f"; {lf['cached_tokens']:.0f} prompt tokens a request from the prefix cache" if lf.get("cached_tokens") else ""
        rr = f" (means; from {lf['path']}, {lf['requests']:,} requests{cached})"
    elif wl.get("ignore_eos") is False:
        # knee has no shape for where a random prompt's answer stops: the length is its cap.
        rr += " (answers may end sooner at EOS: read as their caps)"
    out.append(
        f"workload: {wl['input_len']:.0f} in / {wl['output_len']:.0f} out tokens{rr}; engine {r.engine}"
        f"{' ' + r.engine_version if r.engine_version else ''}; constraints: {r.constraints or 'none'}"
    )

    out.append("")
    out.append("Memory plan per GPU")
    rows = []
    for mp in r.memory:
        d = mp.as_dict()
        rows.append(
            [
                f"TP{mp.tp}",
                "yes" if mp.fits else "NO",
                f"{d['weights_gb_per_gpu']:.2f}",
                f"{d['activations_gb_per_gpu']:.2f}",
                f"{d['runtime_gb_per_gpu']:.2f}",
                f"{d['kv_cache_gb_per_gpu']:.2f}",
                f"{mp.kv_tokens:,}",
                "" if mp.fits else (mp.reason or ""),
            ]
        )
    out += _table(["TP", "fits", "weights GB", "activ. GB", "runtime GB", "KV GB", "KV tokens/replica", "reason"], rows, {2, 3, 4, 5, 6})

    if not r.configs:
        out.append("")
        out.append(f"Nothing fits: {r.nothing_fits or 'no TP degree was tried'}")
        return "\n".join(out)

    out.append("")
    out.append("Limits (closed-loop concurrency, whole deployment)")
    slo_names = [c.constraint for c in r.configs[0].limits.slo]
    headers = ["config", "KV @ full length", "running cap", "saturation", "max req/s", "max out tok/s"] + [f"max c: {n}" for n in slo_names]
    rows = []
    for ce in r.configs:
        lim = ce.limits
        row = [
            ce.label,
            str(lim.kv_full_length),
            f"{lim.running_cap} ({lim.running_cap_reason})",
            str(lim.saturation),
            f"{lim.max_req_per_s:.2f}",
            _num(lim.max_output_tok_per_s),
        ]
        for cl in lim.slo:
            if cl.concurrency is None:
                row.append("never")
            else:
                row.append(f">={cl.concurrency}" if cl.kind == "min" else (f"{cl.concurrency}+" if cl.met_everywhere else str(cl.concurrency)))
        rows.append(row)
    out += _table(headers, rows, {1, 3, 4, 5})

    out.append("")
    out.append("Predictions (closed loop; p99 values are approximations)")
    rows = []
    for ce in r.configs:
        for p in ce.predictions:
            rows.append(
                [
                    ce.label,
                    str(int(p.concurrency)),
                    _ms(p.ttft_ms.mean),
                    _ms(p.ttft_ms.p99),
                    f"{p.itl_ms.mean:.1f}",
                    f"{p.itl_ms.p99:.1f}",
                    f"{p.e2e_s.mean:.2f}",
                    f"{p.e2e_s.p99:.2f}",
                    f"{p.req_per_s:.2f}",
                    _num(p.output_tok_per_s),
                    f"{p.running:.1f}" if p.running < 10 else f"{p.running:.0f}",
                    p.limited_by,
                ]
            )
    out += _table(
        ["config", "conc", "TTFT ms", "p99", "ITL ms", "p99", "E2E s", "p99", "req/s", "out tok/s", "running", "limited by"],
        rows,
        {1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
    )

    out.append("")
    out.append("At the knee (highest concurrency meeting the constraints, else saturation) and bottlenecks")
    rows = []
    for ce in r.configs:
        k = ce.at_knee
        cost = ce.cost_per_1m_output_tokens
        rows.append(
            [
                ce.label,
                str(int(k.concurrency)),
                f"{k.req_per_s:.2f}",
                _num(k.output_tok_per_s),
                f"${cost:.3f}" if cost is not None else "-",
                k.prefill_bottleneck,
                k.decode_bottleneck,
            ]
        )
    out += _table(["config", "conc", "req/s", "out tok/s", "$/1M out", "prefill bound by", "decode bound by"], rows, {1, 2, 3, 4})
    out += _bands(r)
    if r.track_record:
        out.append(f"Track record: {r.track_record.line()}")

    s = r.suggestion
    if s:
        out.append("")
        out.append("Suggested search space")
        out.append(f"  tp x dp:                {', '.join(f'({t},{d})' for t, d in s.tp_dp)}")
        out.append(f"  max_num_batched_tokens: {', '.join(map(str, s.max_num_batched_tokens))}")
        out.append(f"  max_num_seqs:           {', '.join(map(str, s.max_num_seqs))}")
        out.append(f"  concurrency:            {', '.join(map(str, s.concurrency))}")
        out.append("  knee:")
        out.append(f"    {s.knee_command}")
        out.append("  llm-optimizer:")
        out.append(f"    {s.llm_optimizer_command}")
    out.append("")
    for n in r.notes:
        out.append(f"note: {n}")
    return "\n".join(out)


def _bands(r) -> list[str]:
    """The error band of each configuration's at-knee numbers (core/estimate/bands.py)."""
    from core.estimate.bands import band, source, unseen_line

    engine = r.configs[0].at_knee.engine if r.configs else None
    kind = r.configs[0].at_knee.kind if r.configs else None
    lines = ["", f"Error bands at the knee, low-high ({source(engine, kind=kind)})"]
    rows = []
    for ce in r.configs:
        k = ce.at_knee
        cells = [ce.label]
        for key, v, fmt in (
            ("ttft_ms", k.ttft_ms.mean, _ms),
            ("itl_ms", k.itl_ms.mean, lambda x: f"{x:.1f}"),
            ("e2e_s", k.e2e_s.mean, lambda x: f"{x:.2f}"),
            ("req_per_s", k.req_per_s, lambda x: f"{x:.2f}"),
            ("output_tok_per_s", k.output_tok_per_s, _num),
        ):
            b = band(key, v, k.engine, k.kind)
            cells.append(f"{fmt(v)} ({fmt(b['low'])}-{fmt(b['high'])})" if b else fmt(v))
        rows.append(cells)
    if not any(band(k, 1.0, engine, kind) for k in ("ttft_ms", "output_tok_per_s")):
        return []
    unseen = unseen_line(kind, engine)
    table = _table(["config", "TTFT ms", "ITL ms", "E2E s", "req/s", "out tok/s"], rows, {1, 2, 3, 4, 5})
    return lines + table + ([f"  {unseen[0].upper()}{unseen[1:]}"] if unseen else [])
