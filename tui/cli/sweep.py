"""`knee sweep`: measure serving configurations (llm-optimizer's flags, or a sweep file).

Runs the sweep runner in this process with a plain progress display on stderr, or with
``--detach`` as its own process that ``knee attach`` (and the TUI) follow. Every finished
load point is in the study store (``.knee/knee.db``) before the next starts; ``--resume``
runs only what is missing. ``--pause``, ``--continue`` and ``--stop`` steer a running sweep
through its store, from any terminal or machine that shares it (``tui.data.sweep_control``).

The flags-to-spec step is ``tui.cli.sweep_spec``, the display ``tui.cli.progress``, and the
paths that start no runner here (--pause/--stop, --join) ``tui.cli.sweep_steer``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from core.errors import BadInput, RunFailed
from tui.cli.progress import ProgressPrinter
from tui.cli.sweep_spec import DEMO_INSTANCE, build_spec_from_args
from tui.cli.sweep_steer import control, join, study_arg


def register(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="measure server configurations x load points (grid, adaptive or SLA search)",
        description="Sweep server args x client args on a real engine or the simulator. "
        "Grammar: llm-optimizer's --server-args/--client-args/--constraints.",
    )
    p.add_argument("--sweep-file", "-f", help="TOML sweep file (knee's own format); flags override its keys")
    p.add_argument("--model", help="HF model id or local path")
    p.add_argument("--framework", choices=["vllm", "sglang"], help="server framework (llm-optimizer's flag)")
    p.add_argument(
        "--engine",
        choices=["auto", "vllm", "sglang", "custom", "external", "sim"],
        default=None,
        help="auto (default): the framework on a GPU box, the simulator without GPUs",
    )
    p.add_argument("--server-cmd", help="custom launch command template ({model} {host} {port} {api_key})")
    p.add_argument("--python", help="run vLLM as PYTHON -m vllm.entrypoints.openai.api_server")
    p.add_argument("--executable", help="the vllm executable (default: vllm)")
    p.add_argument("--container", help="wrap the launch command, e.g. 'docker run --rm --gpus all --network host IMAGE'")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="environment for the server (repeatable)")
    p.add_argument("--url", help="external engine: benchmark a server someone else runs")
    p.add_argument("--server-args", action="append", help="e.g. 'tensor_parallel_size=[1,2];max_num_seqs=[64,128]' (repeatable)")
    p.add_argument("--client-args", action="append", help="e.g. 'max_concurrency=[32,64];num_prompts=1000' (repeatable)")
    p.add_argument("--constraints", help="SLOs, e.g. 'ttft:p95<500ms;e2e_latency:p99<60s'")
    p.add_argument("--instance", help=f"SageMaker instance type for the simulator, estimator and cost (default without GPUs: {DEMO_INSTANCE})")
    p.add_argument("--gpu", help="GPU type (e.g. L4, H100) instead of --instance")
    p.add_argument("--num-gpus", type=int, help="GPU count with --gpu")
    p.add_argument("--no-gpu-p2p", action="store_true", help="the GPUs cannot reach each other peer-to-peer: all-reduces through host memory")
    p.add_argument("--gpus", help="GPUs the sweep may use: a count or a list like 0,1,2,3 (pinned per trial with CUDA_VISIBLE_DEVICES)")
    p.add_argument("--input-len", type=int, help="prompt tokens when the client args do not say (default 1024)")
    p.add_argument("--output-len", type=int, help="output tokens when the client args do not say (default 512)")
    p.add_argument(
        "--strategy", choices=["grid", "adaptive", "sla"], help="grid (default), adaptive (estimator-guided), sla (highest load meeting the SLOs)"
    )
    p.add_argument(
        "--objective", choices=["throughput", "throughput_per_gpu", "goodput", "latency", "cost"], help="what 'best' means (default throughput)"
    )
    p.add_argument("--sla-knob", choices=["max_concurrency", "request_rate"], help="the load knob SLA search moves")
    p.add_argument(
        "--early-stop", action="store_true", default=None, help="end a load point once throughput and latency have converged (real engines)"
    )
    p.add_argument(
        "--parallel",
        action="store_true",
        default=None,
        help="grid: run server configurations side by side on disjoint GPUs (each pinned with CUDA_VISIBLE_DEVICES)",
    )
    p.add_argument("--study", help="study name (default: model-date-time)")
    p.add_argument(
        "--join",
        action="store_true",
        help="one of several workers (one per GPU box) on --study in a shared --storage: the first creates the study from its "
        "arguments, later ones join it (their arguments must match); each claims one server configuration at a time",
    )
    p.add_argument(
        "--allow-mixed-hardware",
        action="store_true",
        help="with --join: join a study whose GPU type or count differs from this box's (each point records its host and hardware)",
    )
    control = p.add_mutually_exclusive_group()
    control.add_argument(
        "--resume",
        "--continue",
        "-c",
        nargs="?",
        const=True,
        default=False,
        metavar="STUDY",
        help="continue a study (default --study, else the latest): a paused sweep goes on; an interrupted one runs only the load points not stored yet",
    )
    control.add_argument(
        "--pause",
        nargs="?",
        const=True,
        default=False,
        metavar="STUDY",
        help="pause a running sweep after the load point in flight (its server stays up); --continue goes on",
    )
    control.add_argument(
        "--stop",
        nargs="?",
        const=True,
        default=False,
        metavar="STUDY",
        help="stop a running sweep now (the point in flight is dropped; --resume runs what is missing)",
    )
    p.add_argument("--workspace", help="directory of the study store and logs (default .knee, or $KNEE_WORKSPACE)")
    p.add_argument("--storage", help="study store: a SQLite path or any SQLAlchemy URL (e.g. postgresql://...)")
    p.add_argument("--output-json", help="llm-optimizer output: appends each run to PATH.jsonl and writes the aggregated PATH at the end")
    p.add_argument("--dry-run", action="store_true", help="print the planned trials and load points, run nothing")
    p.add_argument("--detach", action="store_true", help="run the sweep as its own process and return; follow it with knee attach")
    p.add_argument("--host", default="127.0.0.1", help="bind address of the servers knee starts (loopback only)")
    p.add_argument("--port", type=int, help="fixed server port (default: a free port per launch)")
    p.add_argument("--ready-endpoint", help="readiness path (default /health)")
    p.add_argument("--start-timeout", type=float, help="seconds a server may take to become ready (default 900)")
    p.add_argument("--request-timeout", type=float, help="seconds one request may take (default 600)")
    p.add_argument(
        "--engine-version",
        help="the engine's release, for predictions (e.g. 0.10.1: vLLM before 0.14 schedules no step ahead); "
        "default: the release the first server reports, the current one until then",
    )
    p.add_argument("--rest", type=float, help="seconds to pause between server launches (default 0)")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON on stdout")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=run)


def _storage(args) -> str:
    from core.results.store import default_storage

    return args.storage or default_storage(args.workspace)


def run(args) -> int:
    from core.results.store import StudyStore
    from core.sweep import create_study, start_detached
    from core.sweep.runner import Runner
    from core.sweep.space import plan_trials

    storage = _storage(args)
    if args.pause or args.stop:
        return control(args, storage)
    if args.join:
        return join(args, storage)
    if args.allow_mixed_hardware:
        raise BadInput("--allow-mixed-hardware goes with --join", "add --join --study NAME, or drop it")
    store = StudyStore(storage)
    notices: list[str] = []
    if args.resume:
        name = study_arg(args, "--resume", args.resume) or store.latest_study()
        if not name:
            raise BadInput("nothing to resume: the study store is empty", "start a sweep without --resume")
        row = store.study(name)
        if row is None:
            raise BadInput(f"no study named {name!r} to resume", "see knee results --list")
        if args.model and row["model"] != args.model:
            raise BadInput(f"study {name!r} was made for {row['model']}, not {args.model}", "resume it without --model, or start a new --study")
        if row["spec"] is None:
            raise BadInput(f"study {name!r} was imported; there is nothing to run")
        from core.sweep import runner_alive

        if runner_alive(row):
            requested = store.requested_state(name)
            if requested == "pause":
                # A paused runner is still alive: --continue lets it go on; no second runner.
                store.request_state(name, "run")
                print(
                    f"knee: continuing {name!r} (pid {row['runner_pid']} on {row.get('runner_host')}); follow it with knee attach --study {name}",
                    file=sys.stderr,
                )
                if args.json:
                    json.dump({"study": name, "requested": "run"}, sys.stdout)
                    sys.stdout.write("\n")
                return 0
            why = "is stopping" if requested == "stop" else "is being run"
            raise BadInput(f"study {name!r} {why} by pid {row['runner_pid']}", "follow it with knee attach")
        # Starting a runner is asking it to run: a pause or stop left by a killed one is stale.
        store.request_state(name, "run")
        spec = store.spec(name)
    else:
        spec, notices = build_spec_from_args(args)
        if args.study and store.study(args.study):
            raise BadInput(f"study {args.study!r} already exists", "pass --resume to continue it, or pick another --study")
        name = None
    for n in notices:
        print(f"knee: {n}", file=sys.stderr)
    if args.dry_run:
        plans = plan_trials(spec)
        out = [{"server_args": t.server_args, "load_points": [p.client_args for p in t.points]} for t in plans]
        if args.json:
            json.dump({"engine": spec.engine.kind, "strategy": spec.strategy, "trials": out}, sys.stdout, indent=2, default=str)
            sys.stdout.write("\n")
        else:
            for i, t in enumerate(plans):
                print(f"trial {i}: {t.server_args or '(defaults)'}")
                for p in t.points:
                    print(f"    {p.client_args}")
            print(f"{len(plans)} server launches, {sum(len(t.points) for t in plans)} load points ({spec.strategy}, engine {spec.engine.kind})")
        return 0
    if spec.engine.port and spec.engine.kind not in ("sim", "external"):
        from core.serve.process import check_port_free

        check_port_free(spec.engine.host, spec.engine.port)  # before anything is stored
    if name is None:
        name = create_study(store, spec, args.study)
    if args.detach:
        pid = start_detached(storage, name, workspace=args.workspace)
        print(
            f"knee: sweep {name!r} runs as pid {pid}; follow it with: knee attach --study {name}"
            + (f" --storage {args.storage}" if args.storage else "")
            + (f" --workspace {args.workspace}" if args.workspace else ""),
            file=sys.stderr,
        )
        if args.json:
            json.dump({"study": name, "pid": pid, "storage": storage}, sys.stdout)
            sys.stdout.write("\n")
        return 0
    printer = ProgressPrinter(store=store, study=name)
    jsonl_path = None
    if args.output_json:
        out_path = Path(args.output_json)
        jsonl_path = out_path.with_suffix(".jsonl")
        out_path.parent.mkdir(parents=True, exist_ok=True)
        if not args.resume and (out_path.exists() or jsonl_path.exists()):
            raise BadInput(f"{out_path} or {jsonl_path} exists", "pass --resume/--continue to add to it, or pick another --output-json")
    from core.results.io import llmo_record, study_meta
    from core.spec.slo import parse_constraints

    meta = study_meta(store, name)
    slo = parse_constraints(spec.constraints)

    def on_event(kind: str, d: dict[str, Any]) -> None:
        if not args.quiet:
            printer.handle(kind, d)
        if jsonl_path is not None and kind == "point_done" and d.get("point_id"):
            p = next((p for p in store.points(name) if p.point_id == d["point_id"]), None)
            if p is not None:
                with open(jsonl_path, "a") as f:
                    f.write(json.dumps(llmo_record(p, meta, slo), default=str) + "\n")

    summary = Runner(store, name, on_event=on_event, workspace=args.workspace).run()
    if args.output_json:
        from core.results.io import export

        export(store, name, "llm-optimizer", args.output_json)
        print(f"knee: wrote {jsonl_path} and {args.output_json}", file=sys.stderr)
    if args.json:
        from core.sweep.runner import _summary_dict

        json.dump(
            {"study": name, "storage": storage, "interrupted": summary.interrupted, **_summary_dict(summary), "sla": summary.sla},
            sys.stdout,
            indent=2,
            default=str,
        )
        sys.stdout.write("\n")
    else:
        print(
            f"knee: results: knee results --study {name}"
            + (f" --workspace {args.workspace}" if args.workspace else "")
            + (f" --storage {args.storage}" if args.storage else ""),
            file=sys.stderr,
        )
    if summary.interrupted:
        print(f"knee: resume with: knee sweep --resume --study {name}", file=sys.stderr)
        return 130
    pts = store.points(name)
    if pts and not any(p.status == "ok" for p in pts):
        raise RunFailed(f"every load point failed; see knee results --study {name}")
    return 0
