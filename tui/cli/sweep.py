"""`knee sweep`: measure serving configurations (llm-optimizer's flags, or a sweep file).

Runs the sweep runner in this process with a plain progress display on stderr, or with
``--detach`` as its own process that ``knee attach`` (and the TUI) follow. Every finished
load point is in the study store (``.knee/knee.db``) before the next starts; ``--resume``
runs only what is missing. ``--pause``, ``--continue`` and ``--stop`` steer a running sweep
through its store, from any terminal or machine that shares it (``tui.data.sweep_control``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from core.errors import BadInput, RunFailed

DEMO_INSTANCE = "ml.g6.12xlarge"


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
    p.add_argument("--engine", choices=["auto", "vllm", "sglang", "custom", "external", "sim"], default=None, help="auto (default): the framework on a GPU box, the simulator without GPUs")
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
    p.add_argument("--gpus", help="GPUs the sweep may use: a count or a list like 0,1,2,3 (pinned per trial with CUDA_VISIBLE_DEVICES)")
    p.add_argument("--input-len", type=int, help="prompt tokens when the client args do not say (default 1024)")
    p.add_argument("--output-len", type=int, help="output tokens when the client args do not say (default 512)")
    p.add_argument("--strategy", choices=["grid", "adaptive", "sla"], help="grid (default), adaptive (estimator-guided), sla (highest load meeting the SLOs)")
    p.add_argument("--objective", choices=["throughput", "throughput_per_gpu", "goodput", "latency", "cost"], help="what 'best' means (default throughput)")
    p.add_argument("--sla-knob", choices=["max_concurrency", "request_rate"], help="the load knob SLA search moves")
    p.add_argument("--early-stop", action="store_true", default=None, help="end a load point once throughput and latency have converged (real engines)")
    p.add_argument("--parallel", action="store_true", default=None, help="grid: run server configurations side by side on disjoint GPUs (each pinned with CUDA_VISIBLE_DEVICES)")
    p.add_argument("--study", help="study name (default: model-date-time)")
    p.add_argument("--join", action="store_true",
                   help="one of several workers (one per GPU box) on --study in a shared --storage: the first creates the study from its "
                        "arguments, later ones join it (their arguments must match); each claims one server configuration at a time")
    p.add_argument("--allow-mixed-hardware", action="store_true",
                   help="with --join: join a study whose GPU type or count differs from this box's (each point records its host and hardware)")
    control = p.add_mutually_exclusive_group()
    control.add_argument("--resume", "--continue", "-c", nargs="?", const=True, default=False, metavar="STUDY",
                         help="continue a study (default --study, else the latest): a paused sweep goes on; an interrupted one runs only the load points not stored yet")
    control.add_argument("--pause", nargs="?", const=True, default=False, metavar="STUDY",
                         help="pause a running sweep after the load point in flight (its server stays up); --continue goes on")
    control.add_argument("--stop", nargs="?", const=True, default=False, metavar="STUDY",
                         help="stop a running sweep now (the point in flight is dropped; --resume runs what is missing)")
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
    p.add_argument("--rest", type=float, help="seconds to pause between server launches (default 0)")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON on stdout")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=run)


def _parse_gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    t = text.replace(" ", "")
    try:
        if "," in t:
            return [int(x) for x in t.split(",") if x]
        n = int(t)
    except ValueError:
        raise BadInput(f"--gpus takes a count or a list like 0,1,2,3, got {text!r}") from None
    if n < 1:
        raise BadInput(f"--gpus must be at least 1, got {n}")
    return list(range(n))


def _env(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise BadInput(f"--env takes KEY=VALUE, got {it!r}")
        out[k] = v
    return out


def _storage(args) -> str:
    from core.results.store import default_storage

    return args.storage or default_storage(args.workspace)


def build_spec_from_args(args):
    """The SweepSpec from flags and/or a sweep file (flags win)."""
    from pydantic import ValidationError

    from core.errors import bad_input_from
    from core.serve.engines import detect_gpus
    from core.spec.study import EngineSpec, SweepSpec
    from core.sweep import build_spec
    from core.sweep.space import read_sweep_file

    file_kw: dict[str, Any] = read_sweep_file(args.sweep_file) if args.sweep_file else {}
    engine_tbl = file_kw.pop("engine", {}) or {}
    if isinstance(engine_tbl, str):
        engine_tbl = {"kind": engine_tbl}
    sla_tbl = file_kw.pop("sla", {}) or {}
    model = args.model or file_kw.pop("model", None)
    file_kw.pop("model", None)
    if not model:
        raise BadInput("no model given", "pass --model (or model = ... in the sweep file)")
    framework = args.framework or file_kw.pop("framework", None)
    file_kw.pop("framework", None)
    gpus = _parse_gpus(args.gpus) if args.gpus else engine_tbl.get("gpus")
    kind = args.engine or engine_tbl.get("kind") or "auto"
    notices = []
    if kind == "auto":
        if args.server_cmd or engine_tbl.get("command"):
            kind = "custom"
        elif args.url or engine_tbl.get("url"):
            kind = "external"
        elif framework and (gpus or detect_gpus()):
            kind = framework
        elif framework or args.python or args.executable:
            kind = "sim"
            notices.append(f"no GPU found: running {framework or 'vllm'} on the simulator (every number is simulated; --engine {framework or 'vllm'} forces a real server)")
        else:
            kind = "sim"
    instance = args.instance or file_kw.pop("instance", None)
    gpu_type = args.gpu or file_kw.pop("gpu", None)
    num_gpus = args.num_gpus or file_kw.pop("num_gpus", None)
    file_kw.pop("instance", None), file_kw.pop("gpu", None), file_kw.pop("num_gpus", None)
    if not instance and not gpu_type and kind == "sim":
        instance = DEMO_INSTANCE
        notices.append(f"no hardware given: simulating {DEMO_INSTANCE} (4x L4); pass --instance or --gpu/--num-gpus")
    if gpu_type and not num_gpus and gpus:
        num_gpus = len(gpus)
    eng_kw = {k: v for k, v in engine_tbl.items() if k != "kind"}
    unknown = sorted(set(eng_kw) - set(EngineSpec.model_fields))
    if unknown:  # pydantic would drop a misspelt key without a word
        raise BadInput(f"unknown key {unknown[0]!r} in the sweep file's [engine] table", "known: " + ", ".join(sorted(set(EngineSpec.model_fields) - {"kind"})))
    for flag, key in (("server_cmd", "command"), ("python", "python"), ("executable", "executable"), ("container", "container"), ("url", "url"), ("port", "port"), ("ready_endpoint", "ready_endpoint"), ("start_timeout", "start_timeout_s"), ("request_timeout", "request_timeout_s")):
        v = getattr(args, flag)
        if v is not None:
            eng_kw[key] = v
    env = dict(eng_kw.pop("env", {}) or {})
    env.update(_env(args.env))
    eng_kw["host"] = args.host
    if gpus is not None:
        eng_kw["gpus"] = gpus
    try:
        engine = EngineSpec(kind=kind, env=env, **eng_kw)
    except ValidationError as e:
        raise bad_input_from(e, "engine setting ", _ENGINE_NAMES, EngineSpec) from None
    except TypeError as e:  # a sweep file's [engine] value of the wrong shape
        raise BadInput(f"bad engine settings: {e}") from None
    kw: dict[str, Any] = {}
    for key in ("input_len", "output_len", "strategy", "objective", "warmup", "seed", "rest_s", "max_error_fraction", "early_stop", "parallel"):
        if key in file_kw:
            kw[key] = file_kw[key]
    for flag, key in (("input_len", "input_len"), ("output_len", "output_len"), ("strategy", "strategy"), ("objective", "objective"), ("rest", "rest_s"), ("sla_knob", "sla_knob"), ("early_stop", "early_stop"), ("parallel", "parallel")):
        v = getattr(args, flag)
        if v is not None:
            kw[key] = v
    for k, v in sla_tbl.items():
        kw[{"knob": "sla_knob", "min": "sla_min", "max": "sla_max", "tolerance": "sla_tolerance"}.get(k, k)] = v
    server_args = args.server_args if args.server_args else file_kw.get("server_sets")
    client_args = args.client_args if args.client_args else file_kw.get("client_sets")
    constraints = args.constraints if args.constraints is not None else file_kw.get("constraints")
    try:
        spec = build_spec(
            model,
            engine=engine,
            framework=framework or ("vllm" if kind in ("vllm", "sim") else None),
            server_args=server_args,
            client_args=client_args,
            constraints=constraints,
            instance=instance,
            gpu=gpu_type,
            num_gpus=num_gpus,
            **kw,
        )
    except BadInput:
        raise
    except ValidationError as e:  # a SweepSpec field (flags or the sweep file)
        raise bad_input_from(e, "sweep setting ", _SPEC_NAMES, SweepSpec) from None
    # A configuration needing more GPUs than there are could only fail at launch: refuse it
    # now, naming the value and the GPU count (knee estimate does the same for --tp).
    from core.sweep.space import check_gpu_counts, gpu_budget, plan_trials

    detected = detect_gpus() if kind in ("vllm", "sglang", "custom") and engine.gpus is None else None
    check_gpu_counts(spec, plan_trials(spec), gpu_budget(spec, detected))
    from core.sweep.space import sim_ignored_warning

    warning = sim_ignored_warning(spec)
    if warning:
        notices.append("warning: " + warning)
    return spec, notices


# Field → what the user typed (a flag, or the sweep file's key) for one-line errors.
_ENGINE_NAMES = {
    "start_timeout_s": "--start-timeout (start_timeout_s)", "request_timeout_s": "--request-timeout (request_timeout_s)",
    "port": "--port", "host": "--host", "ready_endpoint": "--ready-endpoint", "kind": "--engine (kind)",
}
_SPEC_NAMES = {
    "input_len": "--input-len (input_len)", "output_len": "--output-len (output_len)", "rest_s": "--rest (rest_s)",
    "sla_min": "[sla] min", "sla_max": "[sla] max", "sla_tolerance": "[sla] tolerance", "sla_knob": "--sla-knob ([sla] knob)",
    "num_gpus": "--num-gpus (num_gpus)",
}


class ProgressPrinter:
    """The headless display: one line per event that matters, a live line for progress."""

    def __init__(self, stream=None, store=None, study: str | None = None):
        self.out = stream or sys.stderr
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.store = store
        self.study = study
        self.trials: dict[int, dict[str, Any]] = {}
        self.n_trials = 0
        self.sim = False
        self._live = False
        self._last_line = 0.0
        self.show_workers = False  # following a study several workers share: say which ran what

    def _print(self, text: str) -> None:
        if self._live:
            self.out.write("\r\033[K")
            self._live = False
        self.out.write(text + "\n")
        self.out.flush()

    def handle(self, kind: str, d: dict[str, Any]) -> None:
        if kind == "study_started":
            self.sim = bool(d.get("simulated"))
            self.n_trials = d.get("planned_trials", 0)
            tag = " [SIMULATED]" if self.sim else ""
            resumed = f", {d['resumed_points']} already stored" if d.get("resumed_points") else ""
            self._print(f"sweep {self.study or ''}: {d.get('model')} on {d.get('engine')}{tag}, {d.get('strategy')} search, {d.get('planned_trials')} configs / {d.get('planned_points')} load points{resumed}")
        elif kind == "trial_started":
            args = " ".join(f"{k}={v}" for k, v in (d.get("server_args") or {}).items()) or "(defaults)"
            gpus = f" gpus={','.join(map(str, d['gpus']))}" if d.get("gpus") else ""
            on = f" on {_worker_name(d['worker'])}" if self.show_workers and d.get("worker") else ""
            self._print(f"[trial {d.get('trial_id')}] {args}{gpus}{on}")
        elif kind == "server_ready":
            how = "simulated launch" if d.get("simulated") else f"server ready in {d.get('start_s', 0):.1f} s (pid {d.get('pid')})"
            self._print(f"  {how}")
        elif kind == "progress":
            if d.get("phase") != "run":
                return
            now = time.monotonic()
            line = f"  {d.get('load', '')}: {d.get('completed', 0)}/{d.get('total') or '?'} done, {d.get('running', 0)} in flight, {d.get('failed', 0)} failed, {d.get('output_tokens_per_s') or 0:.0f} tok/s, {d.get('elapsed_s', 0):.0f} s"
            if d.get("server_running") is not None:
                line += f" | server running {d['server_running']:.0f} waiting {d.get('server_waiting') or 0:.0f}"
            if d.get("gpu_memory"):
                line += f" | GPU {d['gpu_memory']}"
            if self.tty:
                self.out.write("\r\033[K" + line[:200])
                self.out.flush()
                self._live = True
            elif now - self._last_line >= 5.0:
                self._last_line = now
                self._print(line)
        elif kind == "point_done":
            if d.get("status") == "ok":
                slo = "meets SLOs" if d.get("meets_slo") else ("misses " + ", ".join(d.get("violations") or []) if d.get("violations") else "")
                e2e = d.get("p99_e2el_ms")
                ttft = d.get("mean_ttft_ms")
                self._print(
                    f"  {d.get('load', ''):>10}  {d.get('output_throughput') or 0:9.1f} tok/s  {d.get('request_throughput') or 0:6.2f} req/s  "
                    f"TTFT {ttft / 1000 if ttft else float('nan'):6.2f} s  p99 E2E {e2e / 1000 if e2e else float('nan'):6.1f} s  {slo}"
                )
            else:
                self._print(f"  {d.get('load', ''):>10}  FAILED: {(d.get('reason') or '').splitlines()[0]}")
        elif kind == "calibration":
            from core.sweep.calibration import calibration_line

            self._print("  " + calibration_line(d))
        elif kind == "paused":
            server = ", its server stays up" if d.get("server_up") else ""
            study = f" --study {self.study}" if self.study else ""
            self._print(f"paused after {d.get('points_run', 0)} load points{server}; go on with: knee sweep --continue{study}")
        elif kind == "continued":
            self._print(f"continued after {d.get('paused_s', 0):.0f} s paused")
        elif kind == "point_skipped":
            args = " ".join(f"{k}={v}" for k, v in (d.get("server_args") or {}).items())
            self._print(f"[skip] {args}: {d.get('reason')}")
        elif kind == "trial_failed":
            reason = (d.get("reason") or "")
            first, _, rest = reason.partition("\n")
            self._print(f"  FAILED: {first}")
            for ln in rest.splitlines()[-5:]:
                self._print(f"    | {ln}")
        elif kind == "lease_taken_over":
            rerun = f"; point {d['rerun_point']} runs again (re-run)" if d.get("rerun_point") else ""
            self._print(f"[trial {d.get('trial_id')}] taken over from {_worker_name(d.get('from_worker'))} (its lease expired){rerun}")
        elif kind == "lease_lost":
            self._print(f"[trial {d.get('trial_id')}] lease lost{' by ' + _worker_name(d['worker']) if d.get('worker') else ''}: another worker took it over")
        elif kind in ("worker_done", "worker_interrupted") and self.show_workers:
            word = "finished" if kind == "worker_done" else f"interrupted ({d.get('signal')})"
            self._print(f"worker {_worker_name(d.get('worker'))} {word}: {d.get('points_run', 0)} load points run")
        elif kind in ("study_done", "study_interrupted"):
            word = "done" if kind == "study_done" else f"interrupted ({d.get('signal')})"
            self._print(
                f"sweep {word}: {d.get('points_run', 0)} load points run, {d.get('points_failed', 0)} failed, "
                f"{d.get('points_resumed', 0)} resumed, {d.get('launches', 0)} server launches, "
                f"{d.get('trials_skipped', 0)} configs skipped, GPU time {d.get('gpu_seconds', 0) / 3600:.2f} h"
                + (" (simulated)" if self.sim else "") + f", wall {d.get('wall_s', 0):.1f} s"
            )


def _worker_name(worker_id: str | None) -> str:
    """host pid from a worker id (host:pid:nonce)."""
    host, _, rest = (worker_id or "?").partition(":")
    return f"{host} pid {rest.split(':')[0]}" if rest else host


def _study_arg(args, flag: str, value) -> str | None:
    named = value if isinstance(value, str) else None
    if named and args.study and named != args.study:
        raise BadInput(f"{flag} {named} and --study {args.study} name different studies", "name one")
    return named or args.study


def _control(args, storage: str) -> int:
    """--pause / --stop: one request in the store (--continue goes through run(), which also
    resumes a study whose runner is gone)."""
    from core.results.store import StudyStore
    from tui.data.sweep_control import SweepControl

    flag, value = ("--pause", args.pause) if args.pause else ("--stop", args.stop)
    store = StudyStore(storage, create=False)
    name = _study_arg(args, flag, value) or store.latest_study()
    if not name:
        raise BadInput("the study store is empty", "start a sweep with knee sweep --detach")
    ctl = SweepControl(store=store)
    where = (f" --storage {args.storage}" if args.storage else "") + (f" --workspace {args.workspace}" if args.workspace else "")
    if flag == "--pause":
        asked = ctl.pause(name)
        msg = (f"pausing {name!r} after the load point in flight (its server stays up)" if asked else f"{name!r} is already paused or pausing")
        msg += f"; go on with: knee sweep --continue --study {name}{where}"
    else:
        ctl.check_runner(name, "stop")
        ctl.stop(name)
        msg = f"stopping {name!r}; resume with: knee sweep --resume --study {name}{where}"
    print(f"knee: {msg}", file=sys.stderr)
    if args.json:
        json.dump({"study": name, "requested": ctl.requested(name)}, sys.stdout)
        sys.stdout.write("\n")
    return 0


def _join(args, storage: str) -> int:
    """--join: this process is one worker of a study shared by several (core/sweep/workers.py)."""
    from core.results.store import StudyStore
    from core.sweep.runner import _summary_dict
    from core.sweep.workers import JoinedRunner, join_study

    if not args.study:
        raise BadInput("--join needs --study NAME: the study every worker shares")
    for flag, on in (("--resume/--continue", args.resume), ("--detach", args.detach), ("--dry-run", args.dry_run), ("--output-json", args.output_json)):
        if on:
            raise BadInput(f"--join and {flag} do not mix", "a worker runs in its own terminal; export the study with knee results --export")
    spec, notices = build_spec_from_args(args)
    store = StudyStore(storage)
    spec, created = join_study(store, spec, args.study, allow_mixed_hardware=args.allow_mixed_hardware)
    name = args.study
    for n in notices if created else []:
        print(f"knee: {n}", file=sys.stderr)
    print(f"knee: {'created' if created else 'joined'} study {name!r} as a worker", file=sys.stderr)
    printer = ProgressPrinter(store=store, study=name)
    summary = JoinedRunner(store, name, spec=spec, on_event=None if args.quiet else printer.handle, workspace=args.workspace).run()
    if args.json:
        json.dump({"study": name, "storage": storage, "created": created, "interrupted": summary.interrupted, **_summary_dict(summary)}, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    return 130 if summary.interrupted else 0


def run(args) -> int:
    from core.results.store import StudyStore
    from core.sweep import create_study, start_detached
    from core.sweep.runner import Runner
    from core.sweep.space import plan_trials

    storage = _storage(args)
    if args.pause or args.stop:
        return _control(args, storage)
    if args.join:
        return _join(args, storage)
    if args.allow_mixed_hardware:
        raise BadInput("--allow-mixed-hardware goes with --join", "add --join --study NAME, or drop it")
    store = StudyStore(storage)
    notices: list[str] = []
    if args.resume:
        name = _study_arg(args, "--resume", args.resume) or store.latest_study()
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
                print(f"knee: continuing {name!r} (pid {row['runner_pid']} on {row.get('runner_host')}); follow it with knee attach --study {name}", file=sys.stderr)
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
        print(f"knee: sweep {name!r} runs as pid {pid}; follow it with: knee attach --study {name}" + (f" --storage {args.storage}" if args.storage else "") + (f" --workspace {args.workspace}" if args.workspace else ""), file=sys.stderr)
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

        json.dump({"study": name, "storage": storage, "interrupted": summary.interrupted, **_summary_dict(summary), "sla": summary.sla}, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(f"knee: results: knee results --study {name}" + (f" --workspace {args.workspace}" if args.workspace else "") + (f" --storage {args.storage}" if args.storage else ""), file=sys.stderr)
    if summary.interrupted:
        print(f"knee: resume with: knee sweep --resume --study {name}", file=sys.stderr)
        return 130
    pts = store.points(name)
    if pts and not any(p.status == "ok" for p in pts):
        raise RunFailed(f"every load point failed; see knee results --study {name}")
    return 0
