"""``knee catalog gpus|instances|models``: what knee knows without a network."""

from __future__ import annotations

from tui.cli.common import print_json


def register(sub) -> None:
    p = sub.add_parser("catalog", help="list bundled GPUs, SageMaker instances and models")
    p.add_argument("what", choices=["gpus", "instances", "models"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from core.catalog import bundled_models, gpus, instances

    if args.what == "gpus":
        rows = [g.model_dump() for g in gpus().values()]
        if args.json:
            print_json(rows)
        else:
            for g in gpus().values():
                mark = " *" if g.uncertain else ""
                print(f"{g.name:11} {g.memory_gb:>5g} GB {g.bandwidth_gbps:>6g} GB/s {g.tflops['bf16']:>6g} TFLOPS bf16  {g.link}{mark}")
            print("* some figures uncertain (see --json)")
    elif args.what == "instances":
        if args.json:
            print_json([i.model_dump() for i in instances().values()])
        else:
            for i in instances().values():
                price = f"${i.price_per_hour:.3f}/h ({i.price_region}, {i.price_date})" if i.price_per_hour else "price unknown"
                print(f"{i.name:22} {i.num_gpus}x {i.gpu:10} {price}")
    else:
        names = bundled_models()
        print_json(names) if args.json else print("\n".join(names))
    return 0
