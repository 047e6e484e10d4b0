"""A real sweep over knee's simulated server, launched as a real process the way a real
engine is (tests of what a sweep learns from its server: its startup log, its version)."""

from __future__ import annotations

import sys

from core.results.store import StudyStore
from core.spec.study import EngineSpec
from core.sweep import build_spec, create_study
from core.sweep.runner import Runner


def sweep_simulated_server(tmp_path, name: str, kind: str, server_flags: str, gpu: str, num_gpus: int, server_args: str):
    """Run a two-point study on the simulated server; (store, runner, server_ready events)."""
    cmd = f"{sys.executable} -m core.simulate.server --model {{model}} --gpu {gpu} --num-gpus {num_gpus} --port {{port}} --scale 200 {server_flags}"
    engine = EngineSpec(kind=kind, command=cmd, start_timeout_s=60, stop_timeout_s=5)
    spec = build_spec(
        "Qwen/Qwen3-4B",
        engine=engine,
        server_args=server_args,
        client_args="max_concurrency=[2,4];num_prompts=8;random_input_len=64;random_output_len=16;tokenizer=words",
        gpu=gpu,
        num_gpus=num_gpus,
    )
    store = StudyStore(tmp_path / "knee.db")
    create_study(store, spec, name)
    events = []
    runner = Runner(store, name, on_event=lambda k, d: events.append((k, d)), workspace=tmp_path)
    summary = runner.run()
    assert summary.points_run == 2 and all(p.status == "ok" for p in store.points(name))
    return store, runner, [d for k, d in events if k == "server_ready"]


def shown(store, name: str, ready: dict) -> tuple[str, list[str]]:
    """What the user sees of a server_ready event: `knee sweep`'s text output, and the lines
    of the TUI's log of that trial."""
    import io

    from tui.cli.progress import ProgressPrinter
    from tui.data.sweep_state import SweepFollower

    out = io.StringIO()
    ProgressPrinter(out).handle("server_ready", ready)
    return out.getvalue(), list(SweepFollower(store, name).poll().events_per_trial[ready["trial_id"]])
