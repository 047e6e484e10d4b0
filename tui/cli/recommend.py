"""``knee recommend``: which instance type, which layout and how many, at what cost, across the
catalog in well under a second (core/recommend). Plain text or ``--json``."""

from __future__ import annotations

from tui.cli.common import print_json


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
    p.add_argument("--constraints", help="SLOs, e.g. 'e2e_latency:p99<60s;ttft:p95<500ms' (default: the plan's)")
    p.add_argument("--goal", choices=["cost", "throughput", "latency"], default="cost", help="how to rank (default cost)")
    p.add_argument("--target-rps", type=float, help="size the instance count for this request rate")
    p.add_argument("--instances", default="all", help="all (default), a list (ml.g6.12xlarge,ml.g6e.xlarge) or globs (ml.g6*)")
    p.add_argument("--allow-quantization", action="store_true", help="also consider FP8 weights and FP8 KV cache where the GPU has FP8")
    p.add_argument("--region", help="price region (bundled prices are us-east-1; others come from your catalog override)")
    p.add_argument("--all-layouts", action="store_true", help="every layout, not only each instance's best")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args) -> int:
    from core.errors import BadInput
    from core.recommend import RecommendRequest, recommend
    from core.spec.plan import Plan

    plan = Plan.load(args.plan) if args.plan else None
    model = args.model or (plan.model if plan else None)
    if not model:
        raise BadInput("knee recommend needs a model", "pass --model Qwen/Qwen3-4B or --plan FILE")
    if args.region and args.region != "us-east-1":
        raise BadInput(f"no bundled prices for {args.region}", "bundled prices are us-east-1; set yours in ~/.config/knee/catalog.toml and drop --region")
    req = RecommendRequest(
        model=model,
        input_len=args.input_len or (plan.input_len if plan else 1024),
        output_len=args.output_len or (plan.output_len if plan else 512),
        constraints=args.constraints if args.constraints is not None else (plan.constraints if plan else ""),
        goal=args.goal,
        target_rps=args.target_rps,
        instances=args.instances,
        allow_quantization=args.allow_quantization,
    )
    rec = recommend(req)
    if args.json:
        d = rec.as_dict()
        if not args.all_layouts:
            d["rows"] = [c.as_dict() for c in rec.best_per_instance]
        print_json(d)
        return 0
    rows = rec.ranked if args.all_layouts else rec.best_per_instance
    target = f", {req.target_rps:g} req/s" if req.target_rps else ""
    print(f"knee recommend: {req.model}, {req.input_len:g} in / {req.output_len:g} out, constraints {req.constraints or 'none'}{target}; goal {req.goal}")
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
