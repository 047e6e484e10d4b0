"""The sweep runner on the sim engine: storage, events, resume, adaptive and SLA search,
sweep files, and the llm-optimizer walkthrough command through `knee sweep`."""

import json
import sqlite3

import pytest

from core.errors import BadInput
from core.results.store import StudyStore
from core.spec.study import EngineSpec
from core.sweep import build_spec, create_study
from core.sweep.runner import Runner
from core.sweep.space import plan_trials, read_sweep_file
from tui.cli import main as knee

WALK_SERVER = "tensor_parallel_size=[1,2,4];max_num_batched_tokens=[4096,8192,16384]"
WALK_CLIENT = "max_concurrency=[32,64,128];num_prompts=1000;dataset_name=random"


def small_spec(**kw):
    args = dict(
        engine="sim",
        server_args="tensor_parallel_size=[1,4]",
        client_args="max_concurrency=[8,32];num_prompts=200",
        constraints="e2e_latency:p99<60s",
        instance="ml.g6.12xlarge",
    )
    args.update(kw)
    return build_spec("Qwen/Qwen3-4B", **args)


def test_sim_sweep_stores_every_point_trial_and_event(tmp_path):
    store = StudyStore(tmp_path / "knee.db")
    name = create_study(store, small_spec(), "s1")
    events = []
    summary = Runner(store, name, on_event=lambda k, d: events.append(k)).run()
    assert summary.points_run == 4 and summary.launches == 2 and not summary.interrupted
    points = store.points(name)
    assert len(points) == 4 and all(p.status == "ok" and p.simulated for p in points)
    assert all(p.summary["completed"] == 200 and p.summary["output_throughput"] > 0 for p in points)
    # per-request records are stored with each point
    recs = store.records(name, points[0].point_id)
    assert len(recs) == 200 and recs[0]["osl"] == 512
    assert [t.status for t in store.trials(name)] == ["ok", "ok"]
    # the event stream in the store is what the TUI and knee attach follow
    stored = [e.kind for e in store.events(name)]
    assert stored[0] == "study_started" and stored[-1] == "study_done"
    assert stored.count("trial_started") == 2 and stored.count("point_done") == 4
    assert events == stored
    assert store.study(name)["status"] == "done"
    con = sqlite3.connect(tmp_path / "knee.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_infeasible_config_is_a_stored_failed_trial_and_the_sweep_goes_on(tmp_path):
    store = StudyStore(tmp_path / "knee.db")
    # Llama-3.1-70B in bf16 does not fit one L4; TP over 8 GPUs is more than the instance has.
    spec = build_spec(
        "meta-llama/Llama-3.1-70B",
        engine="sim",
        server_args="tensor_parallel_size=[1,4,8]",
        client_args="max_concurrency=[4];num_prompts=20",
        instance="ml.g6.12xlarge",
    )
    name = create_study(store, spec, "big")
    s = Runner(store, name).run()
    trials = {t.server_args["tensor_parallel_size"]: t for t in store.trials(name)}
    assert trials[1].status == "failed" and trials[1].reason.startswith("oom:")
    assert trials[8].status == "failed" and "needs 8 GPUs" in trials[8].reason
    failed = [p for p in store.points(name) if p.status == "failed"]
    assert {p.server_args["tensor_parallel_size"] for p in failed} >= {1, 8}
    assert s.trials_failed >= 2


class StopAfter:
    """A measurer that simulates, then raises KeyboardInterrupt (a Ctrl-C) on point n."""

    def __init__(self, inner, n):
        self.inner, self.n, self.calls, self.simulated = inner, n, 0, True

    def check(self, config):
        self.inner.check(config)

    def measure(self, ctx, on_progress):
        self.calls += 1
        if self.calls == self.n:
            raise KeyboardInterrupt
        return self.inner.measure(ctx, on_progress)


def test_interrupt_then_resume_runs_only_the_missing_points(tmp_path):
    from core.sweep.runner import default_measurer

    store = StudyStore(tmp_path / "knee.db")
    spec = small_spec()
    name = create_study(store, spec, "r")
    m = StopAfter(default_measurer(spec), 3)
    s1 = Runner(store, name, measurer=m).run()
    assert s1.interrupted and s1.points_run == 2
    assert store.study(name)["status"] == "interrupted"
    first = {p.point_id: p.ended_at for p in store.points(name)}
    assert len(first) == 2
    s2 = Runner(store, name).run()
    assert s2.points_resumed == 2 and s2.points_run == 2 and not s2.interrupted
    after = {p.point_id: p.ended_at for p in store.points(name)}
    assert len(after) == 4 and all(after[k] == v for k, v in first.items())  # not re-measured
    kinds = [e.kind for e in store.events(name)]
    assert "study_interrupted" in kinds and kinds[-1] == "study_done"


def test_adaptive_drops_infeasible_and_prunes_hopeless_configs(tmp_path):
    store = StudyStore(tmp_path / "knee.db")
    grid_spec = small_spec(server_args=WALK_SERVER, client_args=WALK_CLIENT.replace("1000", "300"))
    spec = grid_spec.model_copy(update={"strategy": "adaptive"})
    g = create_study(store, grid_spec, "grid")
    a = create_study(store, spec, "adaptive")
    Runner(store, g).run()
    sa = Runner(store, a).run()
    from core.results.analysis import best
    from core.spec.slo import parse_constraints

    slo = parse_constraints(spec.constraints)
    bg, ba = best(store.points(g), "throughput", slo), best(store.points(a), "throughput", slo)
    assert ba.server_args == bg.server_args and ba.client_args == bg.client_args
    assert sa.points_run < 27 and sa.trials_skipped > 0
    skipped = [t for t in store.trials(a) if t.status == "skipped"]
    assert skipped and all(t.reason for t in skipped)


def test_sla_search_brackets_then_bisects(tmp_path):
    store = StudyStore(tmp_path / "knee.db")
    spec = small_spec(
        server_args="tensor_parallel_size=[4]", client_args="max_concurrency=8;num_prompts=300", constraints="e2e_latency:p99<30s", strategy="sla"
    )
    name = create_study(store, spec, "sla")
    s = Runner(store, name).run()
    res = next(iter(s.sla.values()))
    lo, hi = res["max_meeting_slo"], res["lowest_failing"]
    assert lo is not None and hi is not None and lo < hi
    assert hi - lo <= max(1, 0.05 * hi)
    pts = {p.client_args["max_concurrency"]: p for p in store.points(name)}
    assert pts[lo].meets_slo and not pts[hi].meets_slo
    tried = [p.client_args["max_concurrency"] for p in store.points(name)]
    assert tried[:3] == [8, 16, 32] or tried[0] == 8  # doubling from the declared seed
    assert all(p.search == "sla" for p in store.points(name))


def test_sweep_file(tmp_path):
    f = tmp_path / "sweep.toml"
    f.write_text(
        'model = "Qwen/Qwen3-4B"\ninstance = "ml.g6.12xlarge"\nconstraints = "e2e_latency:p99<60s"\n'
        '[engine]\nkind = "sim"\n[server]\n"tensor_parallel_size*max_num_seqs" = [[1, 64], [2, 128]]\nenable_prefix_caching = false\n'
        "[client]\nmax_concurrency = [8, 16]\nnum_prompts = 50\n"
    )
    kw = read_sweep_file(f)
    sets = kw["server_sets"]
    assert [s.names for s in sets] == [("tensor_parallel_size", "max_num_seqs"), ("enable_prefix_caching",)]
    rc = knee(["sweep", "-q", "-f", str(f), "--workspace", str(tmp_path / "ws"), "--study", "file"])
    assert rc == 0
    pts = StudyStore(tmp_path / "ws" / "knee.db").points("file")
    assert len(pts) == 4 and {p.server_args["max_num_seqs"] for p in pts} == {64, 128}
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "x"\nservr = {}\n')
    with pytest.raises(BadInput, match="unknown key 'servr'"):
        read_sweep_file(bad)


def test_walkthrough_command_runs_on_the_simulator_and_its_jsonl_imports_back(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = knee(
        [
            "sweep",
            "--framework",
            "vllm",
            "--model",
            "Qwen/Qwen3-4B",
            "--server-args",
            WALK_SERVER,
            "--client-args",
            WALK_CLIENT,
            "--constraints",
            "e2e_latency:p99<60s",
            "--output-json",
            "out/walk.json",
            "--study",
            "walk",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "no GPU found" in err and "[SIMULATED]" in err and "27 load points run" in err
    lines = (tmp_path / "out" / "walk.jsonl").read_text().splitlines()
    assert len(lines) == 27
    rec = json.loads(lines[0])
    assert set(rec) >= {"config", "results", "cmd", "constraints", "metadata"}
    assert rec["metadata"]["model_tag"] == "Qwen/Qwen3-4B" and rec["metadata"]["gpu_type"] == "L4" and rec["metadata"]["gpu_count"] == 4
    assert rec["constraints"] == [{"op": "<", "value": 60000.0, "name": "p99_e2e_latency_ms"}]
    assert "p99_e2e_latency_ms" in rec["results"] and any(a.startswith("--tensor-parallel-size=") for a in rec["config"]["server_cmd_args"])
    agg = json.loads((tmp_path / "out" / "walk.json").read_text())
    assert (
        agg["metadata"]["total_tests"] == 27
        and agg["best_configurations"]["best_output_throughput_constrained"]["config"]["server_args"]["tensor_parallel_size"] == 4
    )
    assert knee(["import", "out/walk.jsonl", "--study", "back"]) == 0
    store = StudyStore(tmp_path / ".knee" / "knee.db")
    orig = {p.point_id: p.summary["output_throughput"] for p in store.points("walk")}
    back = {p.point_id: p.summary["output_throughput"] for p in store.points("back")}
    assert orig == back


def test_resume_guards(tmp_path, capsys):
    ws = str(tmp_path / "ws")
    assert (
        knee(
            [
                "sweep",
                "-q",
                "--model",
                "Qwen/Qwen3-4B",
                "--engine",
                "sim",
                "--client-args",
                "max_concurrency=4;num_prompts=20",
                "--workspace",
                ws,
                "--study",
                "a",
            ]
        )
        == 0
    )
    assert knee(["sweep", "-q", "--model", "Qwen/Qwen3-4B", "--engine", "sim", "--workspace", ws, "--study", "a"]) == 2
    assert knee(["sweep", "-q", "--resume", "--model", "Qwen/Qwen3-8B", "--workspace", ws, "--study", "a"]) == 2
    assert "made for Qwen/Qwen3-4B" in capsys.readouterr().err
    # resuming a finished study runs nothing again
    assert knee(["sweep", "-q", "--resume", "--workspace", ws, "--study", "a", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["points_run"] == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--server-args", "max_num_seqs=[1,"],
        ["--client-args", "concurrency=4"],
        ["--constraints", "ttft<fast"],
        ["--engine", "warp"],
        ["--instance", "ml.nope"],
    ],
)
def test_bad_input_exits_2(tmp_path, argv):
    with pytest.raises(SystemExit) as e:
        raise SystemExit(
            knee(
                ["sweep", "-q", "--model", "Qwen/Qwen3-4B", "--engine", "sim", "--workspace", str(tmp_path), *argv]
                if "--engine" not in argv
                else ["sweep", "-q", "--model", "Qwen/Qwen3-4B", "--workspace", str(tmp_path), *argv]
            )
        )
    assert e.value.code == 2


def test_dry_run_plans_one_launch_per_server_config(tmp_path, capsys):
    assert (
        knee(
            [
                "sweep",
                "--dry-run",
                "--json",
                "--model",
                "Qwen/Qwen3-4B",
                "--engine",
                "sim",
                "--server-args",
                WALK_SERVER,
                "--client-args",
                WALK_CLIENT,
                "--workspace",
                str(tmp_path),
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["trials"]) == 9 and all(len(t["load_points"]) == 3 for t in plan["trials"])
    assert len(plan_trials(small_spec())) == 2


def test_engine_spec_defaults_are_loopback_and_secret_free():
    e = EngineSpec(kind="vllm")
    assert e.host == "127.0.0.1" and "key" not in e.model_dump_json().lower()


def test_detached_runner_and_attach(tmp_path, capsys):
    """`knee sweep --detach` runs in its own process; `knee attach` follows it to the end."""
    ws = str(tmp_path)
    assert (
        knee(
            [
                "sweep",
                "--detach",
                "--json",
                "--model",
                "Qwen/Qwen3-4B",
                "--engine",
                "sim",
                "--server-args",
                "tensor_parallel_size=[1,2]",
                "--client-args",
                "max_concurrency=[4,8];num_prompts=50",
                "--workspace",
                ws,
                "--study",
                "bg",
            ]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert info["study"] == "bg" and info["pid"] > 0
    assert knee(["attach", "--study", "bg", "--workspace", ws]) == 0
    err = capsys.readouterr().err
    assert "attached to 'bg'" in err and "sweep done: 4 load points run" in err
    store = StudyStore(tmp_path / "knee.db")
    assert store.study("bg")["status"] == "done" and len(store.points("bg")) == 4
    # replaying from the start shows every event again
    assert knee(["attach", "--study", "bg", "--workspace", ws, "--from-start"]) == 0
    assert capsys.readouterr().err.count("[trial") == 2


def test_ctrl_c_right_after_attached_detaches(tmp_path, monkeypatch):
    """A Ctrl-C that lands the moment "attached to" is shown detaches the view (exit 0), never
    "knee: interrupted" (the tmux tier caught that race on a busy machine). The interrupt is
    raised by stderr's write of that line, the earliest a user can react to it."""
    import io
    import sys

    ws = str(tmp_path)
    store = StudyStore(tmp_path / "knee.db")
    create_study(store, small_spec(server_args="tensor_parallel_size=[1]", client_args="max_concurrency=[4];num_prompts=20"), "idle")

    class CtrlCOnAttach(io.StringIO):
        def write(self, text):
            super().write(text)
            if "attached to" in text:
                raise KeyboardInterrupt

    err = CtrlCOnAttach()
    monkeypatch.setattr(sys, "stderr", err)
    assert knee(["attach", "--study", "idle", "--workspace", ws]) == 0
    assert "detached; the sweep goes on" in err.getvalue()


def test_adaptive_without_an_estimator_uses_optuna_tpe(tmp_path):
    store = StudyStore(tmp_path / "knee.db")
    spec = small_spec(server_args=WALK_SERVER, client_args="max_concurrency=[32,64];num_prompts=200", strategy="adaptive")
    name = create_study(store, spec, "tpe")
    s = Runner(store, name, predictor=None).run()  # as for a model the estimator does not know
    trials = store.trials(name)
    ran = [t for t in trials if t.launches]
    assert 3 <= len(ran) <= 9 and s.launches == len(ran)
    assert len({t.trial_key for t in ran}) == len(ran)  # never launches a configuration twice
    not_run = [t for t in trials if t.status == "skipped"]
    assert len(ran) + len(not_run) == 9 or len(ran) == 9
    assert all("without improvement" in t.reason for t in not_run)
    # deterministic for a seed
    name2 = create_study(store, spec, "tpe2")
    Runner(store, name2, predictor=None).run()
    assert [t.server_args for t in store.trials(name2) if t.launches] == [t.server_args for t in ran]


def test_study_view_rebuilds_state_from_events(tmp_path):
    from core.sweep.view import StudyView

    store = StudyStore(tmp_path / "knee.db")
    spec = build_spec(
        "Qwen/Qwen3-4B",
        engine="sim",
        server_args="tensor_parallel_size=[8,4]",
        client_args="max_concurrency=[4,8];num_prompts=20",
        instance="ml.g6.12xlarge",
    )
    name = create_study(store, spec, "v")
    view = StudyView(store, name)
    assert view.poll() == [] and view.status == "unknown"
    Runner(store, name).run()
    new = view.poll()
    assert new and view.finished and view.status == "done"
    assert view.trials[0].status == "failed" and "needs 8 GPUs" in view.trials[0].reason
    assert view.trials[1].status == "ok" and view.trials[1].points_done == 2
    assert len(view.points) == 2 and all(p["status"] == "ok" for p in view.points.values())
    assert view.counts["points_run"] == 2 and view.poll() == []  # nothing re-read


def test_one_runner_per_study(tmp_path):
    import os
    import socket

    store = StudyStore(tmp_path / "knee.db")
    name = create_study(store, small_spec(), "busy")
    # A live runner (this test's parent process stands in for it) holds the study.
    store.set_study(name, status="running", runner_pid=os.getppid(), runner_host=socket.gethostname())
    with pytest.raises(BadInput, match="is being run by pid"):
        Runner(store, name).run()
    assert store.study(name)["runner_pid"] == os.getppid() and store.points(name) == []


def test_progress_events_carry_simulated_gpu_memory(tmp_path):
    """Every simulated point ends with a progress event holding the trial's GPU memory at the
    point's peak KV use (weights and reserves plus the KV cache in use), labelled simulated."""
    from core.catalog import resolve_hardware
    from core.serve.telemetry import GIB

    store = StudyStore(tmp_path / "knee.db")
    name = create_study(store, small_spec(client_args="max_concurrency=[1,32];num_prompts=200"), "gpu")
    Runner(store, name).run()
    ends = [e.data for e in store.events(name) if e.kind == "progress" and e.data.get("phase") == "end"]
    assert len(ends) == 4
    usable = resolve_hardware(instance="ml.g6.12xlarge").gpu.usable_bytes / GIB
    tps = {t.trial_id: t.server_args["tensor_parallel_size"] for t in store.trials(name)}
    by = {}
    for d in ends:
        g, tp = d["gpu"], tps[d["trial_id"]]
        assert g["simulated"] and g["gpus"] == tp
        assert g["total_gib"] == pytest.approx(usable * tp)
        assert 0 < g["used_gib"] <= g["total_gib"] * 0.9 + 1e-6  # within gpu_memory_utilization
        assert d["gpu_memory"] == f"{g['used_gib']:.1f}/{g['total_gib']:.1f} GiB (sim)"
        assert d["kv_cache_usage"] == g["kv_usage"]
        by[(tp, d["client_args"]["max_concurrency"])] = g
    for tp in (1, 4):  # more requests in flight hold more KV cache
        assert by[(tp, 32)]["used_gib"] > by[(tp, 1)]["used_gib"]
    # The point's events come in order: its end-of-point progress just before point_done.
    k = [e.kind for e in store.events(name)]
    assert all(k[i - 1] == "progress" for i, x in enumerate(k) if x == "point_done")


def test_gpu_memory_line_from_nvml_samples():
    from core.serve.telemetry import format_gpu, gpu_live

    two = [
        {"mem_used_gb": 40.0, "mem_total_gb": 85.0, "util_pct": 90.0, "power_w": 300.0},
        {"mem_used_gb": 20.0, "mem_total_gb": 85.0, "util_pct": 70.0},
    ]  # no power reading
    g = gpu_live(two)
    assert g["gpus"] == 2 and g["util_pct"] == 80.0 and g["power_w"] == 300.0 and not g["simulated"]
    assert format_gpu(g) == f"{60e9 / 2**30:.1f}/{170e9 / 2**30:.1f} GiB · 80% · 300 W"
    assert gpu_live([{}]) is None and format_gpu(None) == ""


def test_nvml_telemetry_where_present():
    """On a machine with NVIDIA GPUs, the sampler's latest NVML sample gives the live line
    (used/total, utilization, power). nvidia-ml-py is a dependency, so only a missing driver
    or GPU skips this, never a missing module."""
    import pynvml

    try:
        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no NVIDIA GPU or driver on this machine (NVML: {e})")
    if n == 0:
        pytest.skip("no NVIDIA GPU")
    import time

    from core.serve.telemetry import TelemetrySampler, format_gpu, gpu_live

    with TelemetrySampler(None, gpus=[0], interval_s=0.1) as t:
        time.sleep(0.5)
    g = gpu_live(t.latest_gpus)
    assert g is not None and g["gpus"] == 1 and 0 < g["used_gib"] <= g["total_gib"]
    assert "GiB" in format_gpu(g) and "(sim)" not in format_gpu(g)
    assert t.summary()["gpus"][0]["max_mem_used_gb"] > 0
