"""Pause, continue and stop through the study store: the store's control API, a runner
process paused between load points (sim engine), a paused runner holding a real server that
is then stopped or SIGTERM'd (no server may survive), a stop while a point is in flight, and
the command-line twin ``knee sweep --pause/--continue/--stop``."""

import json
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest
from support.procs import exited, tagged_pids, wait_for, wait_gone

from core.errors import BadInput
from core.results.store import StudyStore
from core.spec.study import EngineSpec
from core.sweep import build_spec, create_study, runner_alive, start_detached
from core.sweep.runner import Runner
from tui.cli import main as knee

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
CADENCE = ROOT / "tests" / "support" / "cadence_server.py"


def sim_spec(loads="[4,8,16]", prompts=1000, tps="[1,2,4]"):
    return build_spec(
        "Qwen/Qwen3-4B",
        engine="sim",
        server_args=f"tensor_parallel_size={tps}",
        client_args=f"max_concurrency={loads};num_prompts={prompts}",
        instance="ml.g6.12xlarge",
    )


def kinds(store, study):
    return [e.kind for e in store.events(study)]


@pytest.fixture(autouse=True)
def _no_runner_outlives_its_test(monkeypatch):
    # A detached runner has its own session, and a paused one waits for ever: if a test fails
    # before it continues or stops its runner, end the runner here rather than leave it behind.
    started: list[int] = []
    real = start_detached

    def tracked(*args, **kwargs):
        pid = real(*args, **kwargs)
        started.append(pid)
        return pid

    monkeypatch.setitem(globals(), "start_detached", tracked)
    yield
    for pid in started:
        if not exited(pid):
            os.kill(pid, signal.SIGTERM)
            try:
                wait_for(lambda: exited(pid), timeout=10, what=f"runner {pid} to end")
            except AssertionError:
                os.kill(pid, signal.SIGKILL)


# ---- the store's control API ----------------------------------------------------------------


def test_control_requests_live_in_the_store_and_reach_other_connections(tmp_path):
    a = StudyStore(tmp_path / "knee.db")
    name = create_study(a, sim_spec(), "s")
    assert a.requested_state(name) == "run"  # nothing asked yet
    b = StudyStore(tmp_path / "knee.db")  # another process or machine sharing the store
    for state in ("pause", "run", "stop", "pause"):
        a.request_state(name, state)
        assert b.requested_state(name) == state
    with pytest.raises(BadInput, match="unknown runner state 'sleep'"):
        a.request_state(name, "sleep")
    with pytest.raises(BadInput, match="no study named 'nope'"):
        a.request_state("nope", "pause")
    assert a.requested_state("nope") == "run"
    assert b.requested_state(name) == "pause"  # the bad requests changed nothing


def test_a_store_made_before_the_control_table_gains_it(tmp_path):
    db = tmp_path / "knee.db"
    s = StudyStore(db)
    create_study(s, sim_spec(), "old")
    s.close()
    con = sqlite3.connect(db)
    con.execute("DROP TABLE knee_control")  # as an older knee left it
    con.commit()
    con.close()
    s = StudyStore(db)
    assert s.requested_state("old") == "run"
    s.request_state("old", "pause")
    assert s.requested_state("old") == "pause" and len(s.points("old")) == 0


# ---- a runner process on the sim engine --------------------------------------------------------


def test_a_runner_asked_to_pause_before_it_starts_waits_then_continues_to_the_end(tmp_path):
    db = tmp_path / "knee.db"
    store = StudyStore(db)
    name = create_study(store, sim_spec(), "early")
    store.request_state(name, "pause")  # e.g. knee sweep --pause while the runner starts up
    pid = start_detached(str(db), name, workspace=str(tmp_path))
    wait_for(lambda: "paused" in kinds(store, name), what="the paused event")
    time.sleep(1.5)  # three polls of the request
    assert store.points(name) == [] and not exited(pid)
    assert runner_alive(store.study(name))
    paused = next(e for e in store.events(name) if e.kind == "paused")
    assert paused.data["points_run"] == 0 and paused.data["server_up"] is False
    store.request_state(name, "run")
    wait_for(lambda: exited(pid), what="the runner's end")
    assert store.study(name)["status"] == "done" and len(store.points(name)) == 9
    k = kinds(store, name)
    assert k.index("study_started") < k.index("paused") < k.index("continued") < k.index("trial_started")
    assert k[-1] == "study_done"
    assert next(e for e in store.events(name) if e.kind == "continued").data["paused_s"] >= 1.5


def test_a_runner_paused_mid_sweep_stores_nothing_new_then_stops_and_resumes(tmp_path):
    db = tmp_path / "knee.db"
    store = StudyStore(db)
    name = create_study(store, sim_spec(loads="[4,8,16,32]", prompts=2000), "mid")
    pid = start_detached(str(db), name, workspace=str(tmp_path))
    wait_for(lambda: store.points(name), what="the first point")
    store.request_state(name, "pause")
    wait_for(lambda: "paused" in kinds(store, name), what="the paused event")
    stored = {p.point_id for p in store.points(name)}
    assert 1 <= len(stored) < 12, "the sweep ended before the pause reached it"
    paused = next(e for e in store.events(name) if e.kind == "paused")
    assert paused.data["points_run"] == len(stored)  # the point in flight finished and was stored
    time.sleep(1.5)
    assert {p.point_id for p in store.points(name)} == stored and not exited(pid)
    # A stop through the store (what a viewer on another machine can do): no signal sent.
    store.request_state(name, "stop")
    wait_for(lambda: exited(pid), timeout=10, what="the runner's end")
    row = store.study(name)
    assert row["status"] == "interrupted" and not runner_alive(row)
    last = store.events(name)[-1]
    assert last.kind == "study_interrupted" and last.data["signal"] == "stop request"
    assert store.requested_state(name) == "run"  # the request was for that run only
    assert {p.point_id for p in store.points(name)} == stored
    assert knee(["sweep", "-q", "--resume", "--study", name, "--workspace", str(tmp_path)]) == 0
    assert len(store.points(name)) == 12 and store.study(name)["status"] == "done"


# ---- a paused runner holding a real server ---------------------------------------------------


@pytest.fixture
def wrapper(tmp_path):
    """The cadence server, accepting (and ignoring) --variant=N so each variant is a trial."""
    w = tmp_path / "wrap.py"
    w.write_text(
        "import runpy, sys\n"
        "sys.argv = ['cadence_server.py'] + [a for a in sys.argv[1:] if not a.startswith('--variant')]\n"
        f"runpy.run_path({str(CADENCE)!r}, run_name='__main__')\n"
    )
    return w


def cadence_spec(wrapper, prompts=8):
    cmd = f"{PY} {wrapper} --port {{port}} --model {{model}} --ttft 0.01 --itl 0.01"
    engine = EngineSpec(kind="custom", command=cmd, start_timeout_s=20, stop_timeout_s=5)
    return build_spec(
        "cadence",
        engine=engine,
        framework=None,
        server_args="variant=[1,2]",
        client_args=f"max_concurrency=[2,4];num_prompts={prompts};random_input_len=16;random_output_len=32;tokenizer=words",
    )


@pytest.mark.parametrize("how", ["stop request", "SIGTERM"])
def test_a_paused_runner_keeps_its_server_and_leaves_none_behind_when_stopped(tmp_path, wrapper, how):
    store = StudyStore(tmp_path / "knee.db")
    study = "held-" + how.split()[0].lower()
    name = create_study(store, cadence_spec(wrapper), study)
    seen = {}

    def on_event(kind, d):
        if kind == "server_ready" and not seen:
            store.request_state(name, "pause")  # arrives before the trial's first point

    def stopper():
        wait_for(lambda: "paused" in kinds(store, name), what="the paused event")
        time.sleep(1.0)
        seen["servers"] = tagged_pids(study)
        seen["points"] = len(store.points(name))
        if how == "SIGTERM":
            os.kill(os.getpid(), signal.SIGTERM)  # the runner's handler is installed: it tears down
        else:
            store.request_state(name, "stop")

    t = threading.Thread(target=stopper, daemon=True)
    t.start()
    summary = Runner(store, name, on_event=on_event, workspace=tmp_path).run()
    t.join(5)
    assert seen["servers"], "the paused runner should keep its server up"
    assert seen["points"] == 0
    assert summary.interrupted and store.study(name)["status"] == "interrupted"
    assert next(e for e in store.events(name) if e.kind == "paused").data["server_up"] is True
    assert store.events(name)[-1].data["signal"] == how
    assert wait_gone(study) == []


def test_a_stop_request_interrupts_the_point_in_flight(tmp_path, wrapper):
    """A stop read from the store ends a long point at once, as SIGTERM does: nothing
    half-measured is stored and the server is torn down."""
    store = StudyStore(tmp_path / "knee.db")
    name = create_study(store, cadence_spec(wrapper, prompts=400), "inflight")
    asked = {}

    def on_event(kind, d):
        if kind == "progress" and d.get("phase") == "run" and not asked:
            asked["at"] = time.monotonic()
            store.request_state(name, "stop")

    summary = Runner(store, name, on_event=on_event, workspace=tmp_path).run()
    took = time.monotonic() - asked["at"]
    assert summary.interrupted and took < 5.0, f"stop took {took:.1f} s"
    assert store.points(name) == [] and store.study(name)["status"] == "interrupted"
    assert wait_gone("inflight") == []


# ---- knee sweep --pause / --continue / --stop --------------------------------------------------


def test_cli_pause_continue_and_stop_a_detached_sweep(tmp_path, capsys):
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
                "--workspace",
                ws,
                "--server-args",
                "tensor_parallel_size=[1,2,4];max_num_seqs=[64,128,256]",
                "--client-args",
                "max_concurrency=[8,16,32,64];num_prompts=2000",
                "--study",
                "cli",
            ]
        )
        == 0
    )
    pid = json.loads(capsys.readouterr().out)["pid"]
    store = StudyStore(tmp_path / "knee.db")
    wait_for(lambda: store.points("cli"), what="the first point")
    assert knee(["sweep", "--pause", "cli", "--workspace", ws]) == 0
    err = capsys.readouterr().err
    assert "pausing 'cli' after the load point in flight" in err and "knee sweep --continue --study cli" in err
    wait_for(lambda: "paused" in kinds(store, "cli"), what="the paused event")
    # Asking again is harmless; --continue with the default study (the latest) goes on.
    assert knee(["sweep", "--pause", "--study", "cli", "--workspace", ws]) == 0
    assert "already paused" in capsys.readouterr().err
    n = len(store.points("cli"))
    assert knee(["sweep", "--continue", "--workspace", ws, "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == {"study": "cli", "requested": "run"} and "continuing 'cli'" in out.err
    wait_for(lambda: "continued" in kinds(store, "cli") and len(store.points("cli")) > n, what="new points")
    # --continue of a sweep that is running, not paused, is refused: it has a runner.
    assert knee(["sweep", "--continue", "cli", "--workspace", ws]) == 2
    assert "is being run by pid" in capsys.readouterr().err
    assert knee(["sweep", "--stop", "cli", "--workspace", ws]) == 0
    assert "stopping 'cli'; resume with: knee sweep --resume --study cli" in capsys.readouterr().err
    wait_for(lambda: exited(pid), timeout=10, what="the runner's end")
    assert store.study("cli")["status"] == "interrupted"
    # Nothing runs now: pause, continue-a-pause and stop say why, exit 2.
    assert knee(["sweep", "--pause", "cli", "--workspace", ws]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "study 'cli' has no runner to pause (interrupted)" in err
    assert "knee sweep --resume --study cli" in err
    assert knee(["sweep", "--stop", "--study", "cli", "--workspace", ws]) == 2
    assert "has no runner to stop" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--pause", "nope"], "no study named 'nope'"),
        (["--stop", "nope"], "no study named 'nope'"),
        (["--pause", "a", "--study", "b"], "--pause a and --study b name different studies"),
        (["--pause", "done1"], "study 'done1' has no runner to pause (done)"),
        (["--continue", "nope"], "no study named 'nope' to resume"),
    ],
)
def test_cli_control_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    ws = str(tmp_path)
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
                "done1",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert knee(["sweep", *argv, "--workspace", ws]) == 2
    err = capsys.readouterr().err
    assert err.startswith("knee: error:") and message in err and err.count("\n") == 1


def test_cli_control_without_a_store_or_with_two_requests(tmp_path, capsys):
    assert knee(["sweep", "--pause", "--workspace", str(tmp_path / "none")]) == 2
    assert "no study store at" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()  # asking to pause created nothing
    with pytest.raises(SystemExit) as e:
        knee(["sweep", "--pause", "--stop", "--workspace", str(tmp_path)])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_detached_runner_gets_the_storage_url_out_of_sight_of_ps(tmp_path):
    """A PostgreSQL URL may carry a password: the runner's command line (readable by every user
    through /proc and ps) holds only the study name; the URL travels in its environment."""
    from core.sweep.runner import STORAGE_ENV

    db = tmp_path / "secret-store" / "knee.db"
    db.parent.mkdir()
    store = StudyStore(db)
    name = create_study(store, sim_spec(), "quiet")
    store.request_state(name, "pause")  # hold it so its /proc entry can be read
    pid = start_detached(str(db), name, workspace=str(tmp_path))
    wait_for(lambda: "paused" in kinds(store, name), what="the paused event")
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    assert "core.sweep.runner" in cmdline and name in cmdline
    assert not any("secret-store" in a for a in cmdline) and "--storage" not in cmdline
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    assert f"{STORAGE_ENV}={db}" in environ
    store.request_state(name, "stop")
    wait_for(lambda: exited(pid), what="the runner's end")
