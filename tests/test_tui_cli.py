"""``knee`` with no subcommand: the app on the demo plan or a plan file, and ``--web``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from core.errors import BadInput
from core.spec.plan import demo_plan
from tui.app import make_app
from tui.cli import app as cli_app
from tui.cli import main


def test_the_app_opens_on_the_demo_plan_or_the_plan_file(tmp_path):
    assert make_app().plan == demo_plan()
    path = tmp_path / "plan.toml"
    demo_plan().model_copy(update={"model": "Qwen/Qwen3-8B", "output_len": 128}).save(path)
    app = make_app(plan_path=path)
    assert app.plan.model == "Qwen/Qwen3-8B" and app.plan.output_len == 128
    assert app.plan_path == path


def test_a_bad_plan_file_is_one_line_and_exit_code_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[plan]\ninput_len = -3\n")
    with pytest.raises(BadInput):
        make_app(plan_path=bad)
    assert main(["--plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("knee: error:") and "input_len" in err and "Traceback" not in err


def test_web_serves_the_same_app_on_loopback_only(monkeypatch):
    seen = {}

    class FakeServer:
        def __init__(self, command, host, port, title=None):
            seen.update(command=command, host=host, port=port)

        def serve(self):
            seen["served"] = True

    import textual_serve.server

    monkeypatch.setattr(textual_serve.server, "Server", FakeServer)
    assert cli_app.run_app(argparse.Namespace(web=True, plan="my plan.toml")) == 0
    assert seen["host"] == "127.0.0.1" and seen["served"]
    assert seen["command"].endswith("-m tui --plan 'my plan.toml'")


def test_without_a_terminal_knee_exits_2_with_one_line_pointing_to_the_headless_commands(tmp_path):
    # stdin at end of file and stdout a pipe: as under `knee > log`, cron or CI. It used to
    # spin at ~90% CPU until killed; the timeout catches that.
    env = {**os.environ, "KNEE_WORKSPACE": str(tmp_path / ".knee"), "HF_HUB_OFFLINE": "1"}
    env.pop("TEXTUAL_DRIVER", None)
    done = subprocess.run(
        [sys.executable, "-m", "tui"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("knee: error:") and "terminal" in lines[0]
    for command in ("knee estimate", "sweep", "results", "deploy", "knee --web"):
        assert command in lines[0]
    assert done.stdout == ""
    assert not (tmp_path / ".knee").exists()  # nothing was started


def test_the_terminal_check_lets_the_web_driver_through(monkeypatch):
    monkeypatch.setattr(os, "isatty", lambda fd: False)
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    assert cli_app.terminal_missing()
    # textual-serve runs `python -m tui` through pipes with the web driver named here.
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual.drivers.web_driver:WebDriver")
    assert not cli_app.terminal_missing()
    monkeypatch.setattr(os, "isatty", lambda fd: True)
    monkeypatch.delenv("TEXTUAL_DRIVER")
    assert not cli_app.terminal_missing()
