"""A runner killed with SIGKILL (no handler runs, the study row still says ``running``) is
shown as interrupted, with the command that resumes it: ``knee results`` (text and
--json), ``knee attach``, the TUI's sweep state; and resuming it finishes the sweep.

Liveness: on the runner's host, its pid must exist (and not be a newer process that reused
the pid); from another host, its heartbeat must be fresh. The runner keeps the heartbeat
fresh while a server starts, not only when it emits events."""

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from support.procs import exited, wait_for

from core.results.store import RUNNER_STALE_S, StudyStore, runner_alive, study_status
from core.spec.study import EngineSpec
from core.sweep import build_spec, create_study
from core.sweep.runner import Runner
from tui.cli import main as knee

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def killed(tmp_path, capsys):
    """A detached sim sweep, SIGKILLed after its first stored point: (workspace, study, pid)."""
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
                "--instance",
                "ml.g6.12xlarge",
                "--server-args",
                "tensor_parallel_size=[1,2,4]",
                "--client-args",
                "max_concurrency=[4,8,16,32];num_prompts=2000",
                "--study",
                "k",
            ]
        )
        == 0
    )
    pid = json.loads(capsys.readouterr().out)["pid"]
    store = StudyStore(tmp_path / "knee.db")
    try:
        wait_for(lambda: store.points("k"), what="the first point")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: exited(pid), timeout=10, what="the runner's end")
    except BaseException:
        if not exited(pid):
            os.kill(pid, signal.SIGKILL)
        raise
    row = store.study("k")
    assert row["status"] == "running" and row["runner_pid"] == pid  # as SIGKILL leaves it
    assert len(store.points("k")) < 12, "the sweep ended before it was killed"
    yield ws, "k", pid, store
    store.close()


def test_results_attach_and_the_tui_show_a_killed_runner_as_interrupted_and_it_resumes(killed, capsys):
    ws, name, pid, store = killed
    resume = f"knee sweep --resume --study {name} --workspace {ws}"

    assert knee(["results", "--study", name, "--workspace", ws]) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[:3]
    assert head[0].startswith(f"study {name}: Qwen/Qwen3-4B (interrupted, knee)"), out
    assert f"runner pid {pid} on {socket.gethostname()} is gone" in out
    assert f"resume with: {resume}" in out
    assert "running" not in head[0]

    assert knee(["results", "--study", name, "--workspace", ws, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "interrupted" and doc["resume"] == resume
    assert doc["runner"]["pid"] == pid and doc["runner"]["alive"] is False and "is gone" in doc["runner"]["reason"]

    assert knee(["results", "--list", "--workspace", ws]) == 0
    assert "interrupted" in capsys.readouterr().out
    assert knee(["results", "--list", "--workspace", ws, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["status"] == "interrupted"

    # knee attach: does not wait for a runner that will never write again.
    assert knee(["attach", "--study", name, "--workspace", ws]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "is gone" in err and resume in err

    # The TUI's sweep screen (its UI-free follower).
    from tui.data.sweep_state import SweepFollower

    f = SweepFollower(store, name)
    try:
        snap = f.poll()
    finally:
        f.close()
    assert snap.status == "interrupted" and not snap.runner_alive and not snap.running
    assert snap.state == "interrupted" and "is gone" in snap.note

    # The core view too.
    from core.sweep.view import StudyView

    v = StudyView(store, name)
    v.poll()
    assert v.state() == "interrupted"

    # Resuming runs only what is missing and ends the study.
    before = {p.point_id for p in store.points(name)}
    assert knee(["sweep", "-q", "--resume", "--study", name, "--workspace", ws]) == 0
    capsys.readouterr()
    pts = store.points(name)
    assert len(pts) == 12 and before <= {p.point_id for p in pts}
    assert store.study(name)["status"] == "done"
    assert knee(["results", "--study", name, "--workspace", ws]) == 0
    out = capsys.readouterr().out
    assert "(done, knee)" in out and "resume with" not in out


def test_liveness_from_pid_host_and_heartbeat():
    now = time.time()
    here = socket.gethostname()
    base = {"status": "running", "runner_pid": os.getpid(), "runner_host": here, "heartbeat_at": now}
    assert runner_alive(base) and study_status(base) == "running"
    # Same host: a pid that is gone is a dead runner, whatever the heartbeat says.
    gone = _dead_pid()
    assert not runner_alive({**base, "runner_pid": gone}) and study_status({**base, "runner_pid": gone}) == "interrupted"
    # Same host, pid alive but started after the runner's last heartbeat: the pid was reused.
    if Path(f"/proc/{os.getpid()}/stat").exists():
        assert not runner_alive({**base, "heartbeat_at": now - 10 * 86400})
    # Same host, killed but not reaped yet (a zombie child of the app that started it).
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        child.kill()
        if Path(f"/proc/{child.pid}/stat").exists():
            wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", what="a zombie")
            assert not runner_alive({**base, "runner_pid": child.pid})
    finally:
        child.wait()
    # Another host: the heartbeat decides.
    far = {**base, "runner_host": "another-box", "runner_pid": gone}
    assert runner_alive({**far, "heartbeat_at": now - 5})
    assert not runner_alive({**far, "heartbeat_at": now - RUNNER_STALE_S - 5})
    assert study_status({**far, "heartbeat_at": now - RUNNER_STALE_S - 5}) == "interrupted"
    # Not running: nothing to judge.
    for s in ("done", "interrupted", "created", "imported"):
        assert study_status({**base, "status": s, "runner_pid": gone}) == s


def _dead_pid() -> int:
    import subprocess

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_the_heartbeat_stays_fresh_while_a_server_starts(tmp_path, monkeypatch):
    """A launch can take minutes (a large model loading) with no event emitted; a viewer on
    another host must not call the runner dead meanwhile."""
    import core.sweep.control as runner_mod

    monkeypatch.setattr(runner_mod, "BEAT_S", 0.05)
    # A server that never becomes ready: the launch waits its whole start timeout.
    cmd = f'{sys.executable} -c "import time; time.sleep(60)" --port {{port}} --model {{model}}'
    engine = EngineSpec(kind="custom", command=cmd, start_timeout_s=4, stop_timeout_s=2)
    spec = build_spec(
        "slow",
        engine=engine,
        framework=None,
        server_args="variant=[1]",
        client_args="max_concurrency=[1];num_prompts=2;random_input_len=8;random_output_len=8;tokenizer=words",
    )
    store = StudyStore(tmp_path / "knee.db")
    name = create_study(store, spec, "slow")
    beats: list[float] = []

    def on_event(kind, d):
        if kind == "trial_started":
            t0 = store.study(name)["heartbeat_at"]
            deadline = time.monotonic() + 3.0
            import threading

            def watch():
                while time.monotonic() < deadline:
                    hb = store.study(name)["heartbeat_at"]
                    if hb > t0 + 0.5:
                        beats.append(hb)
                        return
                    time.sleep(0.05)

            threading.Thread(target=watch, daemon=True).start()

    Runner(store, name, on_event=on_event, workspace=tmp_path).run()
    assert beats, "no heartbeat while the server was starting"


async def test_the_sweep_screen_says_the_runner_is_gone_and_r_resumes(tmp_path, monkeypatch):
    """The TUI follows a study whose runner died without a word (the row says running)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from core.spec.plan import demo_plan
    from tui.app import make_app
    from tui.screens.sweep import SweepScreen
    from support.pilot import wait_until

    db = tmp_path / "knee.db"
    store = StudyStore(db)
    spec = build_spec("Qwen/Qwen3-4B", engine="sim", client_args="max_concurrency=[4];num_prompts=20", instance="ml.g6.12xlarge")
    name = create_study(store, spec, "dead")
    store.set_study(name, status="running", runner_pid=_dead_pid(), runner_host=socket.gethostname(), heartbeat_at=time.time())
    app = make_app(demo_plan(), storage=str(db), study=name)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.sweep is not None, what="the study followed")
        assert app.sweep.status == "interrupted" and app.sweep.state == "interrupted" and "is gone" in app.sweep.note
        await pilot.press("f3")
        await wait_until(pilot, lambda: isinstance(app.screen, SweepScreen), what="the sweep screen")
        await pilot.pause()
        status = str(app.screen.mode_bar.query_one("#status").render())
        assert "dead · interrupted · runner gone, r resumes" in status
