"""`knee sweep` input that cannot be run, or would be misread, is one line and exit 2.

Issue 10: pydantic's multi-line validation dump (ending in a URL) reached the user for
tensor_parallel_size=[0] and num_prompts=0; max_concurrency=[-8] ran unbounded;
tensor_parallel_size=[64] on 4 GPUs launched and failed every point; an unknown server arg
on the simulator was dropped without a word. Nothing is stored for a refused sweep.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from core.results.store import StudyStore
from tui.cli import main

ROOT = Path(__file__).resolve().parents[1]
KNEE = ROOT / ".venv" / "bin" / "knee"
BASE = ["sweep", "--framework", "vllm", "--model", "Qwen/Qwen3-4B", "--instance", "ml.g6.12xlarge", "--engine", "sim"]


def sweep(tmp_path, capsys, *args):
    rc = main([*BASE, "--workspace", str(tmp_path), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("knee: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "validation error" not in err and "errors.pydantic.dev" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    "args, line",
    [
        (["--server-args", "tensor_parallel_size=[0]"], "knee: error: server arg tensor_parallel_size must be at least 1, got 0"),
        (["--server-args", "tp_size=[1,-2]"], "knee: error: server arg tp_size must be at least 1, got -2"),
        (["--server-args", "gpu_memory_utilization=[0.5,1.2]"], "knee: error: server arg gpu_memory_utilization must be in (0, 1], got 1.2"),
        (["--server-args", "max_num_seqs=0"], "knee: error: server arg max_num_seqs must be at least 1, got 0"),
        (["--client-args", "max_concurrency=[4];num_prompts=0"], "knee: error: client arg num_prompts must be at least 1, got 0"),
        (["--client-args", "request_rate=[-1]"], "knee: error: client arg request_rate must be positive, got -1.0"),
        (
            ["--client-args", "max_concurrency=4;arrival=burst"],
            "knee: error: client arg arrival must be one of 'constant', 'poisson' or 'gamma', got 'burst'",
        ),
        (["--client-args", "max_concurrency=4;warmup_requests=-1"], "knee: error: client arg warmup_requests must be at least 0, got -1"),
        (["--client-args", "max_concurrency=[-8]"], "knee: error: client arg max_concurrency must be at least 1 (or 0 for no limit), got -8"),
        (["--start-timeout", "-1"], "knee: error: engine setting --start-timeout (start_timeout_s) must be positive, got -1.0"),
        (
            ["--engine-version", "v0.10"],
            "knee: error: engine setting --engine-version (version): must be a release number such as 0.10.1, got 'v0.10'",
        ),
        (["--input-len", "0"], "knee: error: input length must be at least 1, got 0 (set client arg random_input_len or --input-len)"),
    ],
)
def test_out_of_range_sweep_args_are_one_line_naming_arg_range_and_value(tmp_path, capsys, args, line):
    rc, _, err = sweep(tmp_path, capsys, *args)
    assert rc == 2
    assert one_error_line(err) == line
    assert not (tmp_path / "knee.db").exists() or StudyStore(tmp_path / "knee.db").studies() == []


def test_sweep_file_values_are_one_line_too(tmp_path, capsys):
    f = tmp_path / "s.toml"
    f.write_text('model = "Qwen/Qwen3-4B"\nmax_error_fraction = 3\n[client]\nmax_concurrency = 4\n')
    rc, _, err = sweep(tmp_path, capsys, "-f", str(f))
    assert rc == 2 and one_error_line(err) == "knee: error: sweep setting max_error_fraction must be in [0, 1], got 3"


def test_max_concurrency_zero_still_means_no_limit(tmp_path, capsys):
    # llm-optimizer's estimate writes max_concurrency=0 for "unlimited"; that stays accepted.
    rc, out, _ = sweep(tmp_path, capsys, "--client-args", "max_concurrency=0;num_prompts=20", "--dry-run", "--json")
    assert rc == 0 and json.loads(out)["trials"][0]["load_points"] == [{"max_concurrency": 0, "num_prompts": 20}]


def test_the_installed_knee_prints_one_line_for_tp_zero(tmp_path):
    if not KNEE.exists():
        pytest.skip("no .venv/bin/knee")
    r = subprocess.run(
        [str(KNEE), *BASE, "--workspace", str(tmp_path), "--server-args", "tensor_parallel_size=[0]"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert r.returncode == 2
    assert r.stderr.strip() == "knee: error: server arg tensor_parallel_size must be at least 1, got 0"


def test_a_validation_error_that_reaches_main_is_one_line(monkeypatch, capsys):
    """The net under every command: input that reaches a typed model unchecked."""
    import tui.cli.results as results_cmd
    from core.spec.serving import LoadPoint

    def boom(args):
        LoadPoint(concurrency=0)

    monkeypatch.setattr(results_cmd, "run", boom)
    monkeypatch.setattr(results_cmd, "register", _register_with(boom, results_cmd.register))
    rc = main(["results"])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip() == "knee: error: concurrency must be at least 1, got 0"


def _register_with(func, register):
    def reg(sub):
        register(sub)
        sub.choices["results"].set_defaults(func=func)

    return reg


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["--server-args", "tensor_parallel_size=[64]"],
            "knee: error: server arg tensor_parallel_size=64 needs 64 GPUs but ml.g6.12xlarge (4x L4) has 4 (TP x DP x PP must be at most 4)",
        ),
        (
            ["--server-args", "tensor_parallel_size=[1,2,8]", "--dry-run"],
            "knee: error: server arg tensor_parallel_size=8 needs 8 GPUs but ml.g6.12xlarge (4x L4) has 4 (TP x DP x PP must be at most 4)",
        ),
        (
            ["--server-args", "tensor_parallel_size*data_parallel_size=[(2,2),(4,2)]"],
            "knee: error: server arg tensor_parallel_size=4 data_parallel_size=2 needs 8 GPUs but ml.g6.12xlarge (4x L4) has 4 (TP x DP x PP must be at most 4)",
        ),
    ],
)
def test_more_gpus_than_the_hardware_has_is_refused_when_planned(tmp_path, capsys, args, line):
    rc, _, err = sweep(tmp_path, capsys, *args, "--client-args", "max_concurrency=[4];num_prompts=20")
    assert rc == 2 and one_error_line(err) == line
    assert not (tmp_path / "knee.db").exists() or StudyStore(tmp_path / "knee.db").studies() == []


def test_more_gpus_than_gpus_lists_is_refused_for_a_launched_engine(tmp_path, capsys):
    rc = main(
        [
            "sweep",
            "--model",
            "cadence",
            "--engine",
            "custom",
            "--server-cmd",
            "srv --port {port}",
            "--gpus",
            "0,1",
            "--server-args",
            "tensor_parallel_size=[1,4]",
            "--workspace",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert (
        rc == 2
        and one_error_line(err) == "knee: error: server arg tensor_parallel_size=4 needs 4 GPUs but --gpus 0,1 has 2 (TP x DP x PP must be at most 2)"
    )


def test_configurations_that_fit_still_plan(tmp_path, capsys):
    rc, out, _ = sweep(tmp_path, capsys, "--server-args", "tensor_parallel_size=[1,2,4]", "--dry-run", "--json")
    assert rc == 0 and len(json.loads(out)["trials"]) == 3


def test_a_server_arg_the_simulator_cannot_honour_is_named_in_a_warning(tmp_path, capsys):
    rc, _, err = sweep(
        tmp_path,
        capsys,
        "--server-args",
        "foo_bar=[1,2];enforce_eager=True;trust_remote_code=True;max_num_seqs=[64]",
        "--client-args",
        "max_concurrency=[4];num_prompts=20",
        "--study",
        "w",
    )
    assert rc == 0
    warnings = [ln for ln in err.splitlines() if ln.startswith("knee: warning:")]
    assert warnings == [
        "knee: warning: the simulator does not model server args foo_bar, enforce_eager: simulated points run as if unset; "
        "the values of foo_bar give identical simulated points (a real engine gets them: --engine vllm)"
    ]
    # Not dropped: the args are stored with the trials, as a real engine would get them.
    assert StudyStore(tmp_path / "knee.db").trials("w")[0].server_args["foo_bar"] == 1


def test_args_the_simulator_models_give_no_warning(tmp_path, capsys):
    rc, _, err = sweep(
        tmp_path,
        capsys,
        "--server-args",
        "tensor_parallel_size=[1,2];max_num_seqs=[64];enable_chunked_prefill=True;disable_log_stats=True",
        "--client-args",
        "max_concurrency=[4];num_prompts=20",
        "--dry-run",
    )
    assert rc == 0 and "warning" not in err


def test_a_real_engine_gets_no_simulator_warning(tmp_path, capsys):
    rc = main(
        [
            "sweep",
            "--model",
            "cadence",
            "--engine",
            "custom",
            "--server-cmd",
            "srv --port {port}",
            "--server-args",
            "foo_bar=[1]",
            "--dry-run",
            "--workspace",
            str(tmp_path),
        ]
    )
    assert rc == 0 and "warning" not in capsys.readouterr().err


def test_a_misspelt_engine_key_in_the_sweep_file_is_refused(tmp_path, capsys):
    f = tmp_path / "s.toml"
    f.write_text('model = "Qwen/Qwen3-4B"\n[engine]\nkind = "sim"\nstart_timeout = 5\n')
    rc, _, err = sweep(tmp_path, capsys, "-f", str(f), "--dry-run")
    assert rc == 2 and one_error_line(err).startswith("knee: error: unknown key 'start_timeout' in the sweep file's [engine] table (known: ")


def test_plan_form_says_which_server_args_the_simulator_does_not_model():
    """The TUI's twin of the headless warning: the Plan screen's server-args hint names the
    args a simulated sweep runs as if unset; on a real engine it does not."""
    from tui.data.plan_form import check_fields, fields_from_plan
    from tui.demo import demo_sweep_plan

    values = fields_from_plan(demo_sweep_plan())
    values["server_args"] = "tensor_parallel_size=[1,2];enforce_eager=[True,False]"
    plan, errors, hints = check_fields({**values, "engine": "sim"})
    assert plan is not None and not errors
    assert hints["server_args"] == "4 combinations · estimated with tensor_parallel_size=[1, 2] · the simulator does not model enforce_eager"
    _, _, hints = check_fields({**values, "engine": "vllm"})
    assert hints["server_args"] == "4 combinations · estimated with tensor_parallel_size=[1, 2]"
    # A swept knob is measured, not estimated: only one-valued knobs and the TP list are named.
    _, _, hints = check_fields({**values, "server_args": "max_num_seqs=[32,64];stream_interval=8", "engine": "vllm"})
    assert hints["server_args"] == "2 combinations · estimated with stream_interval=8"


def test_plan_form_reads_gpus_without_peer_to_peer():
    """The Plan screen's twin of `knee estimate --no-gpu-p2p`: a hardware field ending in
    no-p2p sets the plan's gpu_p2p, its hint says what that means, and it round-trips."""
    from tui.data.plan_form import check_fields, fields_from_plan
    from tui.demo import demo_sweep_plan

    values = {**fields_from_plan(demo_sweep_plan()), "hardware": "2x A100-80GB no-p2p"}
    plan, errors, hints = check_fields(values)
    assert plan is not None and not errors
    assert (plan.gpu, plan.num_gpus, plan.gpu_p2p) == ("A100-80GB", 2, False)
    assert hints["hardware"].endswith("· no GPU P2P")
    assert fields_from_plan(plan)["hardware"] == "2x A100-80GB no-p2p"
    plan, _, hints = check_fields({**values, "hardware": "2x A100-80GB"})
    assert plan is not None and plan.gpu_p2p and "P2P" not in hints["hardware"]


def test_sweep_no_gpu_p2p_simulates_the_host_staged_all_reduce(tmp_path, capsys):
    """`knee sweep --no-gpu-p2p` (the twin of estimate's): stored with the study, and the
    simulator's TP2 on NVLink GPUs then all-reduces through host memory: less throughput."""
    throughput = {}
    for flag in ([], ["--no-gpu-p2p"]):
        db, name = tmp_path / f"p2p{len(flag)}.db", f"p2p{len(flag)}"
        rc = main(
            ["sweep", "-q", "--model", "Qwen/Qwen2.5-7B", "--engine", "sim", "--gpu", "A100-80GB", "--num-gpus", "2"]
            + ["--server-args", "tensor_parallel_size=[2]", "--client-args", "max_concurrency=[32];num_prompts=200"]
            + ["--storage", str(db), "--study", name, "--workspace", str(tmp_path), *flag]
        )
        capsys.readouterr()
        assert rc == 0
        store = StudyStore(db, create=False)
        assert json.loads(store.study(name)["spec"])["gpu_p2p"] is (not flag)
        (point,) = store.points(name)
        throughput[bool(flag)] = point.summary["output_throughput"]
        store.close()
    assert throughput[True] < 0.8 * throughput[False]
