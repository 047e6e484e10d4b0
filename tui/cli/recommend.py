"""``knee recommend``: which instance type, which layout and how many, at what cost, across the
catalog in well under a second (core/recommend). Plain text or ``--json``."""

from __future__ import annotations

import sys

from tui.cli.common import confirm, print_json


def register(sub) -> None:
    p = sub.add_parser(
        "recommend",
        help="rank instance types and layouts (TP x copies) for a model, SLOs and a target rate",
        description="For every instance type in the catalog (or --instances), every layout that fits: predicted "
        "capacity under the SLOs with its error band, instances needed for --target-rps (sized on the band's low "
        "edge), $/h and $ per 1M output tokens, the bottleneck and the vLLM knobs. Works offline.",
    )
    p.add_argument("--model", help="Hugging Face id or local directory (default: the plan's)")
    p.add_argument("--plan", help="a plan TOML file (knee's Plan); flags override its fields")
    p.add_argument("--input-len", type=float, help="prompt tokens per request (default: the plan's, 1024)")
    p.add_argument("--output-len", type=float, help="output tokens per request (default: the plan's, 512)")
    p.add_argument(
        "--dataset",
        choices=["random", "sharegpt"],
        help="random: --input-len/--output-len fixed (or within --range-ratio); sharegpt: the bundled "
        "ShareGPT-like shape, --input-len/--output-len its means (default: the plan's, random)",
    )
    p.add_argument("--range-ratio", type=float, help="random lengths uniform within ±this share of their mean (default: the plan's, 0)")
    p.add_argument(
        "--lengths-from",
        metavar="FILE",
        help="your own requests' token counts (as knee estimate --lengths-from): rank and measure on those lengths",
    )
    p.add_argument(
        "--no-ignore-eos",
        action="store_true",
        help="the client lets the model stop (vllm bench serve's default): ShareGPT answers end at EOS",
    )
    p.add_argument("--constraints", help="SLOs, e.g. 'e2e_latency:p99<60s;ttft:p95<500ms' (default: the plan's)")
    p.add_argument("--goal", choices=["cost", "throughput", "latency"], default="cost", help="how to rank (default cost)")
    p.add_argument("--target-rps", type=float, help="size the instance count for this request rate")
    p.add_argument("--instances", default="all", help="all (default), a list (ml.g6.12xlarge,ml.g6e.xlarge) or globs (ml.g6*)")
    p.add_argument("--allow-quantization", action="store_true", help="also consider FP8 weights and FP8 KV cache where the GPU has FP8")
    p.add_argument(
        "--region",
        help="price region: us-east-1 (default) and us-west-2 are bundled, others from your catalog "
        "override; an instance without a price there is excluded, never given another region's; "
        "with --measure, also where the endpoints are created",
    )
    p.add_argument("--all-layouts", action="store_true", help="every layout, not only each instance's best")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    m = p.add_argument_group("measure the finalists on SageMaker (creates billed endpoints, after one confirmation)")
    m.add_argument("--measure", type=int, metavar="N", help="deploy the top N rows side by side, benchmark each, delete them all")
    m.add_argument("--role", help="SageMaker execution role ARN (needed with --measure)")
    m.add_argument("--yes", action="store_true", help="skip the confirmation")
    m.add_argument("--container", choices=["lmi", "vllm"], default="lmi", help="serving container (default lmi)")
    m.add_argument("--measure-max-concurrency", type=int, default=256, help="highest concurrency the SLA search tries (default 256)")
    m.add_argument("--measure-prompts", type=int, default=32, help="fewest requests per load point (default 32; 4 x concurrency up to 1000)")
    m.add_argument("--poll-interval", type=float, default=15.0, help="seconds between SageMaker status polls (default 15)")
    m.add_argument("--study", help="name of the study the measurement is stored as (default sagemaker-<time>)")
    m.add_argument("--workspace", help="directory of the study store (default .knee)")
    m.add_argument("--storage", help="study store path or SQLAlchemy URL (overrides --workspace)")
    p.set_defaults(func=run)


def run(args) -> int:
    from core.errors import BadInput
    from core.recommend import RecommendRequest, recommend
    from core.spec.lengths import SHAREGPT_INPUT_MEAN, SHAREGPT_OUTPUT_MEAN
    from core.spec.plan import Plan

    plan = Plan.load(args.plan) if args.plan else None
    model = args.model or (plan.model if plan else None)
    if not model:
        raise BadInput("knee recommend needs a model", "pass --model Qwen/Qwen3-4B or --plan FILE")
    if args.measure is not None:
        opts = _measure_options(args)  # bad --measure/--role/--region: exit 2 before any work
    dataset = args.dataset or (plan.dataset if plan else "random")
    if dataset not in ("random", "sharegpt"):
        raise BadInput(f"knee recommend ranks random or sharegpt lengths, not the plan's {dataset!r}", "pass --dataset random or sharegpt")
    sharegpt = dataset == "sharegpt"
    # A ShareGPT plan ranks on the bundled means unless a flag gives others (as knee estimate).
    input_len = args.input_len if args.input_len is not None else (SHAREGPT_INPUT_MEAN if sharegpt else plan.input_len if plan else 1024)
    output_len = args.output_len if args.output_len is not None else (SHAREGPT_OUTPUT_MEAN if sharegpt else plan.output_len if plan else 512)
    range_ratio = args.range_ratio if args.range_ratio is not None else (plan.range_ratio if plan and not sharegpt else 0.0)
    if args.lengths_from:
        from core.spec.length_log import refuse_lengths_beside

        refuse_lengths_beside(
            (("--input-len", args.input_len), ("--output-len", args.output_len), ("--dataset", args.dataset), ("--range-ratio", args.range_ratio))
        )
        dataset, range_ratio = "random", 0.0  # the file's lengths: recommend() reports their means
    req = RecommendRequest(
        model=model,
        input_len=input_len,
        output_len=output_len,
        dataset=dataset,  # type: ignore[arg-type]
        range_ratio=range_ratio,
        ignore_eos=False if args.no_ignore_eos else (plan.ignore_eos if plan else True),
        lengths_from=args.lengths_from,
        constraints=args.constraints if args.constraints is not None else (plan.constraints if plan else ""),
        goal=args.goal,
        target_rps=args.target_rps,
        instances=args.instances,
        allow_quantization=args.allow_quantization,
        region=args.region,
    )
    rec = recommend(req)
    if args.measure is not None:
        return _measure(args, rec.request, rec, opts)  # rec's request: a lengths file's means filled in
    if args.json:
        d = rec.as_dict()
        if not args.all_layouts:
            d["rows"] = [c.as_dict() for c in rec.best_per_instance]
        print_json(d)
        return 0
    rows = rec.ranked if args.all_layouts else rec.best_per_instance
    target = f", {req.target_rps:g} req/s" if req.target_rps else ""
    q = rec.request
    print(f"knee recommend: {q.model}, {q.workload_label}, constraints {q.constraints or 'none'}{target}; goal {q.goal}")
    head = f"{'#':>2}  {'instance':<20} {'layout':<9} {'req/s (low-high)':<20} {'count':>5} {'$/h':>9} {'$/1M out':>9}  bottleneck"
    print(head)
    print("-" * len(head))
    for i, c in enumerate(rows, 1):
        cap = f"{c.capacity_rps:.2f} ({c.capacity_rps_low:.2f}-{c.capacity_rps_high:.2f})"
        cost = f"{c.usd_per_hour_total:.2f}" if c.usd_per_hour_total is not None else "-"
        per_m = f"{c.usd_per_1m_output_tokens:.3f}" if c.usd_per_1m_output_tokens is not None else "-"
        count = str(c.instances_needed) if c.instances_needed is not None else "-"
        print(f"{i:>2}  {c.instance:<20} TP{c.tp}x{c.copies:<5} {cap:<20} {count:>5} {cost:>9} {per_m:>9}  {c.bottleneck.split(';')[0]}")
    if rec.excluded:
        print(f"\nExcluded ({len(rec.excluded)}):")
        for e in rec.excluded:
            print(f"  {e.instance:<20} {e.reason}")
    print(f"\ncount: instances for the target rate, sized on the low edge of req/s ({rec.band_source}); $/h is for that count")
    return 0


def _measure_options(args):
    from core.errors import BadInput
    from core.recommend.measure import MeasureOptions, check_options
    from core.results import default_storage
    from tui.cli.common import positive
    from tui.data.recommend_measure import deploy_ops

    positive(args.poll_interval, "--poll-interval")
    if args.measure_prompts < 1:
        raise BadInput(f"--measure-prompts must be at least 1, got {args.measure_prompts}")
    opts = MeasureOptions(
        n=args.measure,
        role_arn=args.role,
        region=args.region or "us-east-1",
        container=args.container,
        poll_interval_s=args.poll_interval,
        max_concurrency=args.measure_max_concurrency,
        min_prompts=args.measure_prompts,
        storage=args.storage or default_storage(args.workspace),
        study=args.study,
    )
    check_options(opts, deploy_ops())
    return opts


def _say(line: str) -> None:
    print(line, flush=True)


def _say_err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _measure(args, req, rec, opts) -> int:
    """Plan, confirm once with the whole measurement's estimated cost, then measure."""
    from core.recommend.measure import cost_estimate, interrupts_as_keyboard, measure, plan_finalists
    from tui.data.recommend_measure import deploy_ops

    rows = rec.ranked if args.all_layouts else rec.best_per_instance
    ops = deploy_ops()
    finals = plan_finalists(req.model, rows, opts, ops)
    cost = cost_estimate(finals, opts)
    say = _say_err if args.json else _say  # --json: stdout holds only the result
    say(
        f"knee recommend --measure {opts.n}: deploying {len(finals)} endpoint(s) in {opts.region}, one instance each, "
        "side by side; each is benchmarked, then deleted"
    )
    for f in finals:
        c = f.cand
        price = f"${c.usd_per_hour:.2f}/h" if c.usd_per_hour is not None else "no price"
        say(f"  {f.plan.endpoint_name}: {c.instance} TP{c.tp} x {c.copies} ({price}, about {cost.minutes[f.plan.endpoint_name]:.0f} min)")
    if opts.region != "us-east-1":
        say("  prices are us-east-1's (the bundled ones)")
    say(f"  {cost.text()}")
    from core.errors import BadInput
    from core.results import StudyStore

    store = StudyStore(opts.storage)
    if opts.study and store.study(opts.study) is not None:
        raise BadInput(f"study {opts.study!r} already exists in {opts.storage}", "pass another --study")
    confirm("Create these endpoints and measure them?", args.yes)
    with interrupts_as_keyboard(say) as protect:
        res = measure(req, finals, opts, ops, store=store, say=say, protect=protect)
    if args.json:
        from tui.cli.common import print_json

        print_json({"study": res.study, "measured_on": "sagemaker", "rows": [r.as_dict() for r in res.rows], "leftovers": res.leftovers})
        return 1 if res.leftovers else 0
    print(f"\nRanked again by MEASURED numbers (SageMaker, {opts.region}; goal {req.goal}); study {res.study}:")
    head = f"{'#':>2}  {'instance':<20} {'layout':<9} {'req/s meas (pred)':<18} {'c@SLO':>5} {'count':>5} {'$/h':>9} {'$/1M out':>9}"
    print(head)
    print("-" * len(head))
    for i, r in enumerate(res.rows, 1):
        c = r.cand
        cap = f"{r.request_rps:.2f} ({c.capacity_rps:.2f})" if r.request_rps is not None else f"- ({c.capacity_rps:.2f})"
        cost_h = f"{r.usd_per_hour_total:.2f}" if r.usd_per_hour_total is not None else "-"
        per_m = f"{r.usd_per_1m_output_tokens:.3f}" if r.usd_per_1m_output_tokens is not None else "-"
        print(
            f"{i:>2}  {c.instance:<20} TP{c.tp}x{c.copies:<5} {cap:<18} {r.max_concurrency or '-':>5} "
            f"{r.instances_needed or '-':>5} {cost_h:>9} {per_m:>9}  {r.note}"
        )
    print(f"\nknee results --study {res.study} --storage {opts.storage}   (Pareto; knee deploy --trial ID --study {res.study})")
    return 1 if res.leftovers else 0
