"""The SweepSpec of `knee sweep` from its flags and/or a sweep file (flags win): engine
choice (auto: the framework on a GPU box, the simulator without), hardware, and one-line
errors that name the flag or sweep-file key the user typed."""

from __future__ import annotations

from typing import Any

from core.errors import BadInput

DEMO_INSTANCE = "ml.g6.12xlarge"


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
            notices.append(
                f"no GPU found: running {framework or 'vllm'} on the simulator (every number is simulated; --engine {framework or 'vllm'} forces a real server)"
            )
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
        raise BadInput(
            f"unknown key {unknown[0]!r} in the sweep file's [engine] table", "known: " + ", ".join(sorted(set(EngineSpec.model_fields) - {"kind"}))
        )
    for flag, key in (
        ("server_cmd", "command"),
        ("python", "python"),
        ("executable", "executable"),
        ("container", "container"),
        ("url", "url"),
        ("port", "port"),
        ("ready_endpoint", "ready_endpoint"),
        ("start_timeout", "start_timeout_s"),
        ("request_timeout", "request_timeout_s"),
        ("engine_version", "version"),
    ):
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
    for key in (
        "input_len",
        "output_len",
        "strategy",
        "objective",
        "warmup",
        "seed",
        "rest_s",
        "max_error_fraction",
        "early_stop",
        "parallel",
        "gpu_p2p",
    ):
        if key in file_kw:
            kw[key] = file_kw[key]
    for flag, key in (
        ("input_len", "input_len"),
        ("output_len", "output_len"),
        ("strategy", "strategy"),
        ("objective", "objective"),
        ("rest", "rest_s"),
        ("sla_knob", "sla_knob"),
        ("early_stop", "early_stop"),
        ("parallel", "parallel"),
    ):
        v = getattr(args, flag)
        if v is not None:
            kw[key] = v
    if args.no_gpu_p2p:
        kw["gpu_p2p"] = False
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
    "start_timeout_s": "--start-timeout (start_timeout_s)",
    "request_timeout_s": "--request-timeout (request_timeout_s)",
    "port": "--port",
    "host": "--host",
    "ready_endpoint": "--ready-endpoint",
    "version": "--engine-version (version)",
    "kind": "--engine (kind)",
}
_SPEC_NAMES = {
    "input_len": "--input-len (input_len)",
    "output_len": "--output-len (output_len)",
    "rest_s": "--rest (rest_s)",
    "sla_min": "[sla] min",
    "sla_max": "[sla] max",
    "sla_tolerance": "[sla] tolerance",
    "sla_knob": "--sla-knob ([sla] knob)",
    "num_gpus": "--num-gpus (num_gpus)",
}
