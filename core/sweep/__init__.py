"""The sweep: grammar, search space, strategies, the runner and its event stream.

Public API (UI-free; ``knee sweep``/``knee attach`` and the TUI use exactly this)::

    spec = build_spec(model=..., engine="sim", server_args="max_num_seqs=[4,16]",
                      client_args="max_concurrency=[1,4];num_prompts=50",
                      constraints="e2e_latency:p99<60s", instance="ml.g6.12xlarge")
    store = StudyStore(storage)                 # core.results.store; default .knee/knee.db
    name = create_study(store, spec)            # or name=..., stores the spec
    summary = Runner(store, name).run()         # in this process (blocks), or:
    pid = start_detached(storage, name)         # its own process; survives the caller
    for ev in store.follow(name): ...           # events: trial_started, server_ready,
                                                # progress (4 Hz), point_done, trial_failed,
                                                # trial_done, paused, continued,
                                                # study_done, study_interrupted
    store.points(name) / store.trials(name)     # stored results (PointRow / TrialRow)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.spec.study import EngineSpec, SweepSpec
from core.sweep.grammar import ArgSet, parse_args
from core.sweep.space import sets_to_json


def build_spec(
    model: str,
    *,
    engine: str | EngineSpec = "sim",
    framework: str | None = "vllm",
    server_args: str | list[str] | list[ArgSet] | None = None,
    client_args: str | list[str] | list[ArgSet] | None = None,
    constraints: str | None = None,
    **kw: Any,
) -> SweepSpec:
    """A validated :class:`SweepSpec` from llm-optimizer-style strings (or parsed sets)."""
    from core.spec.slo import parse_constraints
    from core.sweep.space import plan_trials

    if not model:
        raise BadInput("no model given", "pass --model")

    def sets(v, side):
        if v is None:
            return []
        if isinstance(v, list) and v and isinstance(v[0], ArgSet):
            return v
        return parse_args(v, side=side, framework=framework)

    # model_validate: engine and framework arrive as plain strings (the CLI's) that pydantic
    # checks against the Literal kinds here, as the constructor would.
    eng = engine if isinstance(engine, EngineSpec) else EngineSpec.model_validate({"kind": engine})
    parse_constraints(constraints)  # fail early on bad grammar
    spec = SweepSpec.model_validate(
        dict(
            model=model,
            engine=eng,
            framework=framework,
            server_sets=sets_to_json(sets(server_args, "server")),
            client_sets=sets_to_json(sets(client_args, "client")),
            constraints=constraints or "",
            **kw,
        )
    )
    plans = plan_trials(spec)  # validates every combination
    if not plans:
        raise BadInput("the search space is empty")
    return spec


def default_study_name(spec: SweepSpec) -> str:
    short = spec.model.rstrip("/").split("/")[-1]
    return f"{short}-{time.strftime('%Y%m%d-%H%M%S')}"


def create_study(store, spec: SweepSpec, name: str | None = None, extra_info: dict[str, Any] | None = None) -> str:
    """Create study ``name`` from ``spec``. ``extra_info`` goes into the study's info in the
    same insert, so that no other process ever reads the study without it (a joining worker
    reads ``join`` and ``hardware`` the moment the row exists)."""
    from core.catalog import plan_hardware

    name = name or default_study_name(spec)
    info: dict[str, Any] = {"engine": spec.engine.kind, "strategy": spec.strategy}
    try:
        if spec.instance or spec.gpu:
            hw = plan_hardware(spec)
            info["hardware_label"] = hw.label
            info["gpu_type"] = hw.gpu.name
            info["gpu_count"] = hw.num_gpus
            if hw.instance and hw.instance.price_per_hour:
                info["price_per_gpu_hour"] = hw.instance.price_per_hour / hw.instance.num_gpus
    except BadInput:
        raise
    store.create_study(name, spec, spec.model, info={**info, **(extra_info or {})})
    return name


def hardware_label(info: dict[str, Any]) -> str:
    """The words for what a study runs on: its label ("ml.g6.12xlarge (4x L4)"), kept under
    ``hardware`` by studies of an earlier knee; "" when the study named no hardware."""
    label = info.get("hardware_label") or info.get("hardware")
    return label if isinstance(label, str) else ""


def start_detached(storage: str, study: str, workspace: str | None = None, log_path: str | os.PathLike | None = None) -> int:
    """Start the runner as its own process (own session: a closed terminal or TUI does not
    stop it). Returns its pid; follow it with ``StudyStore.follow(study)``."""
    from core.sweep.coordinator import STORAGE_ENV

    # The URL may hold a database password: it goes in the environment, not in argv (ps).
    argv = [sys.executable, "-m", "core.sweep.runner", "--study", study]
    if workspace:
        argv += ["--workspace", str(workspace)]
    log = Path(log_path) if log_path else Path(workspace or Path(storage).parent) / "logs" / f"runner-{study}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[STORAGE_ENV] = str(storage)
    with open(log, "ab") as f:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, env=env, close_fds=True)
    return p.pid


def runner_alive(study_row: dict[str, Any]) -> bool:
    """Whether the study's runner looks alive: on its host, its pid exists (and is not a
    reused one); from another host, its heartbeat is fresh. See ``core.results.store``."""
    from core.results.store import runner_alive as alive

    return alive(study_row)


__all__ = ["build_spec", "create_study", "start_detached", "runner_alive", "default_study_name"]
