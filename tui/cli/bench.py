"""``knee bench``: measure one load point against a running server with knee's own client.

    knee bench --url http://127.0.0.1:8000 --model M [--dataset random|sharegpt|shared-prefix|corpus]
               [--concurrency N | --request-rate R [--concurrency CAP]] [--num-prompts N | --duration S]
               [--json] [--result-file FILE]
    knee bench --sagemaker-endpoint NAME [--inference-component IC] --model M [--sagemaker-format vllm|lmi] ...

Results use ``vllm bench serve``'s keys (``--result-file`` writes its JSON, with the
per-request arrays under ``--save-detailed``). A one-request preflight turns an unreachable
URL, a rejected key, a wrong model name or a server that does not stream into one line
and exit 2. Progress goes to stderr; the load runs on its own thread and event loop, so
drawing the bar never delays a timestamp.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from tui.cli.common import print_json


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark a running OpenAI-compatible server or SageMaker endpoint",
        description="Send a dataset at a concurrency or request rate with knee's streaming client and report "
        "TTFT, TPOT, ITL, E2E and throughput with vllm bench serve's keys.",
    )
    t = p.add_argument_group("target")
    t.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:8000 (or .../v1)")
    t.add_argument("--model", required=True, help="model name the server serves (also the default tokenizer)")
    t.add_argument("--api", choices=["completions", "chat"], default="completions", help="OpenAI endpoint (default completions)")
    t.add_argument("--api-key", help="bearer token (default: $OPENAI_API_KEY); never printed or saved")
    t.add_argument("--sagemaker-endpoint", help="benchmark a SageMaker endpoint instead of --url")
    t.add_argument("--inference-component", help="inference component of --sagemaker-endpoint to invoke (endpoints knee deploy made with copies)")
    t.add_argument("--sagemaker-format", choices=["vllm", "lmi"], default="vllm", help="request/response schema of the container")
    t.add_argument("--region", help="AWS region for --sagemaker-endpoint (default: the AWS configuration's)")
    t.add_argument(
        "--transport", choices=["raw", "aiohttp", "httpx-aiohttp", "httpx"], help="HTTP client (default: raw, chosen by bench/client_capacity.py)"
    )
    d = p.add_argument_group("dataset")
    d.add_argument("--dataset", choices=["random", "sharegpt", "shared-prefix", "corpus"], default="random")
    d.add_argument("--dataset-path", help="ShareGPT JSON/JSONL file (for --dataset sharegpt)")
    d.add_argument("--input-len", type=int, help="prompt tokens (random, shared-prefix suffix; default 1024)")
    d.add_argument("--output-len", type=int, help="output tokens asked for (max_tokens; default 128)")
    d.add_argument("--range-ratio", type=float, help="lengths uniform in [L(1-r), L(1+r)] (default 0)")
    d.add_argument("--prefix-len", type=int, help="shared prefix tokens (shared-prefix)")
    d.add_argument(
        "--lengths-from",
        metavar="FILE",
        help="random prompts at your own requests' lengths (as knee estimate --lengths-from; cached tokens become a shared prefix)",
    )
    d.add_argument("--sharegpt-output-len", action="store_true", help="with sharegpt, use --output-len instead of the replies' lengths")
    d.add_argument("--tokenizer", help="tokenizer path or HF id (default: --model, from a local path or the HF cache)")
    d.add_argument("--seed", type=int, default=0)
    lo = p.add_argument_group("load")
    lo.add_argument("--concurrency", type=int, help="closed loop with N in flight; with --request-rate, a cap")
    lo.add_argument("--request-rate", type=float, help="open loop, requests per second (inf = all at once)")
    lo.add_argument("--arrival", choices=["poisson", "constant", "gamma"], default="poisson")
    lo.add_argument("--burstiness", type=float, default=1.0, help="gamma shape (1 = Poisson)")
    lo.add_argument("--num-prompts", type=int, help="measured requests (default 200, or unlimited with --duration)")
    lo.add_argument("--duration", type=float, help="stop sending after S seconds")
    lo.add_argument("--warmup", type=int, default=0, help="warm-up requests, excluded from results")
    lo.add_argument("--no-ignore-eos", action="store_true", help="do not send ignore_eos (for servers that reject it)")
    lo.add_argument("--temperature", type=float, help="sampling temperature (default: the server's; 0 = greedy)")
    lo.add_argument("--per-chunk-usage", action="store_true", help="ask vLLM for usage on every chunk (exact tokens per chunk)")
    lo.add_argument("--timeout", type=float, default=6 * 3600, help="per-request timeout in seconds")
    o = p.add_argument_group("output")
    o.add_argument("--goodput", "--slo", dest="goodput", help="SLOs for goodput, e.g. 'ttft:p99<500ms;tpot<50ms'")
    o.add_argument("--percentiles", default="50,90,95,99", help="percentiles to report (default 50,90,95,99)")
    o.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    o.add_argument("--result-file", help="write the vllm bench serve-style result JSON here")
    o.add_argument("--save-detailed", action="store_true", help="include per-request arrays in the JSON")
    o.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def _check(args):
    from core.errors import BadInput

    if not args.url and not args.sagemaker_endpoint:
        raise BadInput("knee bench needs a target", "pass --url URL or --sagemaker-endpoint NAME")
    if args.url and args.sagemaker_endpoint:
        raise BadInput("pass either --url or --sagemaker-endpoint, not both")
    if args.inference_component and not args.sagemaker_endpoint:
        raise BadInput("--inference-component belongs to a SageMaker endpoint", "pass --sagemaker-endpoint NAME with it")
    if args.url and not args.url.startswith(("http://", "https://")):
        raise BadInput(f"--url must start with http:// or https://, got {args.url!r}")
    if args.lengths_from:
        from core.spec.length_log import refuse_lengths_beside

        flags = [(f"--{n.replace('_', '-')}", getattr(args, n)) for n in ("input_len", "output_len", "range_ratio", "prefix_len")]
        refuse_lengths_beside([*flags, ("--dataset", None if args.dataset == "random" else args.dataset)])
    args.input_len = 1024 if args.input_len is None else args.input_len
    args.output_len = 128 if args.output_len is None else args.output_len
    args.range_ratio = 0.0 if args.range_ratio is None else args.range_ratio
    args.prefix_len = 0 if args.prefix_len is None else args.prefix_len
    for name in ("concurrency", "num_prompts", "input_len", "output_len"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise BadInput(f"--{name.replace('_', '-')} must be at least 1, got {v}")
    for name in ("request_rate", "duration", "burstiness", "timeout"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise BadInput(f"--{name.replace('_', '-')} must be positive, got {v:g}")
    if args.warmup < 0:
        raise BadInput(f"--warmup must be ≥ 0, got {args.warmup}")
    if not 0 <= args.range_ratio <= 1:
        raise BadInput(f"--range-ratio must be in [0, 1], got {args.range_ratio:g}")
    if args.dataset == "sharegpt" and not args.dataset_path:
        raise BadInput("--dataset sharegpt needs --dataset-path FILE")
    if args.dataset == "shared-prefix" and args.prefix_len < 1:
        raise BadInput("--dataset shared-prefix needs --prefix-len N (N ≥ 1)")
    try:
        pcts = tuple(float(x) for x in args.percentiles.split(",") if x.strip())
    except ValueError:
        raise BadInput(f"--percentiles must be numbers separated by commas, got {args.percentiles!r}") from None
    if not pcts or any(not 0 < q <= 100 for q in pcts):
        raise BadInput(f"--percentiles must be in (0, 100], got {args.percentiles!r}")
    return pcts


def run(args) -> int:
    from core.errors import BadInput, RunFailed
    from core.load.datasets import load_tokenizer, make_prompts
    from core.load.runner import run_load_sync
    from core.spec import LengthDist, LoadPoint, Workload, parse_constraints

    pcts = _check(args)
    slo = parse_constraints(args.goodput) if args.goodput else None
    if args.request_rate is None and args.concurrency is None:
        args.concurrency = 1
    num = args.num_prompts if args.num_prompts is not None else (None if args.duration else 200)
    try:
        lp = LoadPoint(
            concurrency=args.concurrency,
            request_rate=args.request_rate,
            arrival=args.arrival,
            burstiness=args.burstiness,
            num_prompts=num,
            duration_s=args.duration,
        )
    except ValueError as e:
        raise BadInput(f"bad load point: {e}") from None

    tok = load_tokenizer(args.tokenizer or args.model)
    if tok.note:
        print(f"knee: note: {tok.note}", file=sys.stderr)
    # With --duration, cycle a pool of prompts large enough not to repeat soon.
    n_prompts = (num if num is not None else max(200, int((args.request_rate or 0) * args.duration) + 1, (args.concurrency or 1) * 20)) + args.warmup
    rr = args.range_ratio
    w = Workload(
        input=LengthDist(kind="uniform" if rr else "fixed", mean=args.input_len, range_ratio=rr),
        output=LengthDist(kind="uniform" if rr else "fixed", mean=args.output_len, range_ratio=rr),
        dataset=args.dataset,
        dataset_path=args.dataset_path,
        shared_prefix_len=args.prefix_len,
        num_prompts=max(1, n_prompts - args.warmup),
        warmup=args.warmup,
        seed=args.seed,
    )
    if args.lengths_from:
        from core.spec.length_log import read_lengths

        served = read_lengths(args.lengths_from).workload()
        w = w.model_copy(update={k: getattr(served, k) for k in ("input", "output", "dataset", "shared_prefix_len")})
    prompts = make_prompts(w, tok, n=n_prompts, output_override=args.sharegpt_output_len)
    target = _target(args)

    # Preflight on its own short-lived loop: a clear exit 2 instead of N failed requests.
    import asyncio

    if hasattr(target, "preflight"):
        asyncio.run(target.preflight())
    else:
        from core.load.openai import preflight

        asyncio.run(preflight(target))

    box: dict = {}
    latest: list = [None]

    def work():
        try:
            box["result"] = run_load_sync(
                target,
                prompts,
                lp,
                warmup=args.warmup,
                on_progress=lambda p: latest.__setitem__(0, p),
                slo=slo,
                tokenizer=tok,
                percentiles=pcts,
                seed=args.seed,
            )
        except BaseException as e:  # re-raised on the main thread
            box["error"] = e

    th = threading.Thread(target=work, name="knee-load", daemon=True)
    th.start()
    _follow(th, latest, lp, quiet=args.no_progress)
    if "error" in box:
        raise box["error"]
    result = box["result"]
    s = result.summary
    out = result.to_json(detailed=args.save_detailed)
    out["dataset"] = args.dataset
    out["tokenizer"] = tok.name
    if args.result_file:
        import json

        from tui.cli.common import _jsonable

        try:
            with open(args.result_file, "w") as f:
                json.dump(_jsonable(out), f, indent=2)
        except OSError as e:
            raise BadInput(f"cannot write --result-file {args.result_file!r}: {e.strerror}") from None
    if args.json:
        print_json(out)
    else:
        _print_table(result, pcts)
    for note in result.notes:
        print(f"knee: note: {note}", file=sys.stderr)
    if s["completed"] == 0:
        errors = [r.error for r in result.records if r.error]
        common = max(set(errors), key=errors.count) if errors else "no request completed"
        raise RunFailed(f"every request failed ({len(errors)}); most common error: {common}")
    return 0


def _target(args):
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or None
    if args.sagemaker_endpoint:
        from core.load.sagemaker import SageMakerTarget

        return SageMakerTarget(
            args.sagemaker_endpoint,
            model=args.model,
            fmt=args.sagemaker_format,
            api=args.api,
            region=args.region,
            inference_component=args.inference_component,
            ignore_eos=not args.no_ignore_eos,
            temperature=args.temperature,
            timeout_s=args.timeout,
        )
    from core.load.openai import OpenAITarget

    return OpenAITarget(
        args.url,
        args.model,
        api=args.api,
        api_key=api_key,
        transport=args.transport,
        ignore_eos=not args.no_ignore_eos,
        per_chunk_usage=args.per_chunk_usage,
        temperature=args.temperature,
        timeout_s=args.timeout,
    )


def _follow(th: threading.Thread, latest: list, lp, quiet: bool) -> None:
    """Show progress from the main thread while the load thread runs (4 Hz on a terminal,
    a line every 5 s otherwise)."""
    if quiet:
        th.join()
        return
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        total = lp.num_prompts or None
        with Progress(
            TextColumn("[bold]bench[/] {task.description}"),
            BarColumn(),
            TextColumn("{task.completed:.0f}/{task.total:.0f}" if total else ""),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            refresh_per_second=4,
            transient=False,
        ) as bar:
            task = bar.add_task(lp.label, total=total or lp.duration_s, info="starting")
            while th.is_alive():
                th.join(0.25)
                p = latest[0]
                if p is None:
                    continue
                done = p.completed + p.failed
                bar.update(
                    task,
                    completed=done if total else min(p.elapsed_s, lp.duration_s or p.elapsed_s),
                    info=f"running {p.running}  failed {p.failed}  {p.output_tokens_per_s:,.0f} tok/s",
                )
        return
    last = time.monotonic()
    while th.is_alive():
        th.join(0.5)
        p = latest[0]
        if p is not None and time.monotonic() - last >= 5:
            last = time.monotonic()
            tot = f"/{p.total}" if p.total else ""
            print(
                f"knee bench: {p.completed + p.failed}{tot} done, {p.running} running, {p.failed} failed, "
                f"{p.output_tokens_per_s:,.0f} tok/s, {p.elapsed_s:.0f} s",
                file=sys.stderr,
            )


def _print_table(result, pcts) -> None:
    s = result.summary
    lp = result.load_point

    def row(label, value, fmt="{:.2f}"):
        print(f"{label:<44}{fmt.format(value) if value == value else 'n/a':>12}")

    print("{s:{c}^62}".format(s=" knee bench result ", c="="))
    print(f"{'Target:':<44}{result.target + ' ' + result.model:>18}")
    print(f"{'Load:':<44}{lp.label:>18}")
    row("Successful requests:", s["completed"], "{:.0f}")
    row("Failed requests:", s["failed"], "{:.0f}")
    row("Benchmark duration (s):", s["duration"])
    row("Total input tokens:", s["total_input_tokens"], "{:.0f}")
    row("Total generated tokens:", s["total_output_tokens"], "{:.0f}")
    row("Request throughput (req/s):", s["request_throughput"])
    row("Request goodput (req/s):", s["request_goodput"])
    row("Output token throughput (tok/s):", s["output_throughput"])
    row("Peak output token throughput (tok/s):", s["max_output_tokens_per_s"])
    row("Peak concurrent requests:", s["max_concurrent_requests"], "{:.0f}")
    row("Total token throughput (tok/s):", s["total_token_throughput"])
    from core.load.metrics import percentile_label

    for key, title in (
        ("ttft", "Time to First Token"),
        ("tpot", "Time per Output Token (excl. 1st token)"),
        ("itl", "Inter-token Latency (per token)"),
        ("chunk_itl", "Inter-chunk Latency"),
        ("e2el", "End-to-end Latency"),
        ("client_queue_time", "Client Queue Time"),
    ):
        print("{s:{c}^62}".format(s=title, c="-"))
        row(f"Mean {key.upper()} (ms):", s[f"mean_{key}_ms"])
        row(f"Median {key.upper()} (ms):", s[f"median_{key}_ms"])
        for p in pcts:
            row(f"P{percentile_label(p)} {key.upper()} (ms):", s[f"p{percentile_label(p)}_{key}_ms"])
    h = result.health
    print("{s:{c}^62}".format(s="Client", c="-"))
    print(f"{'Transport:':<44}{result.transport:>18}")
    row("Event-loop lag p99 (ms):", h.loop_lag_p99_ms)
    row("Client CPU (fraction of a core):", h.cpu_fraction)
    print("=" * 62)
    errors = [r.error for r in result.records if r.error]
    if errors:
        counts: dict[str, int] = {}
        for e in errors:
            counts[e] = counts.get(e, 0) + 1
        print("Errors:")
        for e, c in sorted(counts.items(), key=lambda kv: -kv[1])[:5]:
            print(f"  {c:>5} × {e}")
