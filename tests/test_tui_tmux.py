"""The installed ``knee`` command in a real terminal (tmux): drive the plan, the estimate, a
sim sweep and the Pareto screen with keystrokes, read the screen, quit cleanly; and kill the
app mid-sweep, then find the sweep still running with ``knee attach``.

tmux runs on a private socket, so these tests never touch a user's sessions.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from core.spec.plan import demo_plan
from tui.demo import demo_sweep_plan

pytestmark = [pytest.mark.tmux, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[1]


def knee_bin() -> str:
    venv = REPO / ".venv" / "bin" / "knee"
    return str(venv) if venv.exists() else (shutil.which("knee") or "knee")


class Tmux:
    def __init__(self, tmp_path: Path) -> None:
        self.socket = f"knee-test-{os.getpid()}-{tmp_path.name}"
        self.session = "knee"
        self.cwd = tmp_path
        self.env = {**os.environ, "KNEE_WORKSPACE": str(tmp_path / ".knee"), "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color"}

    def run(self, *args: str) -> str:
        out = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=self.env, cwd=self.cwd, timeout=30)
        return out.stdout

    def start(self, command: str, width: int = 100, height: int = 30) -> None:
        self.run("new-session", "-d", "-s", self.session, "-x", str(width), "-y", str(height), command)
        self.run("set-option", "-t", self.session, "remain-on-exit", "on")

    def keys(self, *keys: str) -> None:
        for k in keys:
            self.run("send-keys", "-t", self.session, k)
            time.sleep(0.15)

    def keys_at_once(self, *keys: str) -> None:
        """One send-keys: the app reads the keys together, as over a slow link."""
        self.run("send-keys", "-t", self.session, *keys)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", self.session)

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s = self.screen()
            if text in s:
                return s
            time.sleep(0.25)
        raise AssertionError(f"{text!r} never appeared; the screen shows:\n{self.screen()}")

    def pane_dead(self) -> bool:
        return self.run("display-message", "-p", "-t", self.session, "#{pane_dead}").strip() == "1"

    def pane_pid(self) -> int:
        return int(self.run("display-message", "-p", "-t", self.session, "#{pane_pid}").strip())

    def kill(self) -> None:
        self.run("kill-server")


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.kill()


def _stop_runners(workspace: Path) -> None:
    from core.results.store import StudyStore

    db = workspace / "knee.db"
    if not db.exists():
        return
    store = StudyStore(str(db))
    try:
        for s in store.studies():
            if s.get("runner_pid"):
                try:
                    os.kill(s["runner_pid"], signal.SIGTERM)
                except ProcessLookupError:
                    pass
    finally:
        store.close()


def test_drive_plan_estimate_sweep_and_pareto_then_quit(tmux, tmp_path):
    plan_file = tmp_path / "plan.toml"
    demo_sweep_plan().save(plan_file)
    tmux.start(f"{knee_bin()} --plan {plan_file}")
    try:
        tmux.wait_for("Model and hardware")
        # Tab enters the model field (the form has the focus at first): replace it and see
        # it resolved inline.
        tmux.keys("Tab", "C-u")
        tmux.wait_for("type a Hugging Face model id")  # cleared
        # Keys read together must apply in order: Textual ran ctrl+u after the characters
        # typed behind it, and left the field empty (Textualize/textual#6605).
        tmux.keys_at_once("C-u", "Qwen/Qwen3-8B")
        tmux.wait_for("8.2B params")
        # Apart: an Escape read together with the key after it is that key with Alt held.
        tmux.keys("Escape", "2")
        s = tmux.wait_for("Memory per GPU")
        tmux.wait_for("Qwen/Qwen3-8B on ml.g6.12xlarge")
        s = tmux.wait_for("Predicted against concurrency")
        assert "Limits" in s
        tmux.keys("3")
        tmux.wait_for("No sweep followed yet")
        tmux.keys("n")
        s = tmux.wait_for("points 12/12", timeout=120)
        assert "done" in s and "c=128" in s
        tmux.keys("4")
        s = tmux.wait_for("on the frontier", timeout=60)
        assert "◆" in s
        tmux.keys("q")
        end = time.monotonic() + 20
        while not tmux.pane_dead() and time.monotonic() < end:
            time.sleep(0.2)
        assert tmux.pane_dead(), f"knee did not quit:\n{tmux.screen()}"
        assert "Traceback" not in tmux.screen()
    finally:
        _stop_runners(tmp_path / ".knee")


def test_killing_the_app_mid_sweep_leaves_the_sweep_running(tmux, tmp_path):
    plan_file = tmp_path / "plan.toml"
    demo_plan().model_copy(
        update={
            "server_args": "tensor_parallel_size=[1,2,4];max_num_seqs=[16,32,64,128,256]",
            "client_args": "max_concurrency=[8,16,32,64,128,256];num_prompts=3000",
        }
    ).save(plan_file)
    tmux.start(f"{knee_bin()} --plan {plan_file}")
    try:
        tmux.wait_for("Model and hardware")
        tmux.keys("3", "n")  # the first keys: a digit switches screens at once
        tmux.wait_for("running ·", timeout=60)
        # Kill the app the hard way: the terminal goes away under it.
        os.kill(tmux.pane_pid(), signal.SIGKILL)
        tmux.kill()
        # Ctrl-C at a terminal reaches a process whose SIGINT is not ignored; a test run started
        # in the background (a CI script's `cmd &`) hands its children SIGINT ignored, and then
        # the SIGINT below would do nothing and the view would follow the sweep to its end.
        attach = subprocess.Popen(
            [knee_bin(), "attach"],
            cwd=tmp_path,
            env=tmux.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        # Detach once it has attached (not after a fixed sleep, which a busy machine outlasts).
        seen = []
        watchdog = threading.Timer(60, attach.kill)
        watchdog.start()
        try:
            for line in attach.stdout:
                seen.append(line)
                if "attached to" in line:
                    break
        finally:
            watchdog.cancel()
        attach.send_signal(signal.SIGINT)  # detach the view; the sweep goes on
        rest, _ = attach.communicate(timeout=20)
        out = "".join(seen) + rest
        assert "attached to" in out and "(running)" in out, out
        assert "detached; the sweep goes on" in out and attach.returncode == 0, out

        from core.results.store import StudyStore
        from core.sweep import runner_alive

        store = StudyStore(str(tmp_path / ".knee" / "knee.db"))
        try:
            study = store.latest_study()
            assert runner_alive(store.study(study)), "the sweep stopped with the app"
        finally:
            store.close()
    finally:
        _stop_runners(tmp_path / ".knee")
