"""Shared test plumbing: the real-vLLM fixtures and the per-tier summary.

Fixtures (real-vLLM tier; mark such tests `@pytest.mark.realvllm`):
  vllm_python            Path to .venv-vllm/bin/python (checked to exist).
  tiny_model_dir         Path of the tiny local Llama (built on first use, then cached).
  real_vllm              one session-wide server (support.vllm_server.VllmServer):
                         .url .api_key .model_dir .model_name .log_path .pid .port .headers
                         .log_tail() .alive() .startup_s .args; started on first use.
  vllm_server_factory    start(extra_args=(), **kw) -> VllmServer for servers with other
                         arguments (kw as for support.vllm_server.start_vllm_server, e.g.
                         ready_timeout, enforce_eager, env); each is stopped after the test.
  vLLM's own benchmark:  support.vllm_bench.run_vllm_bench / sample_vllm_requests.

No test pins CPUs or raises priorities (issue 10): tests assert behaviour; the timing
comparisons that needed a pinned server live in bench/ (client_vs_vllm.py, sim_cpu_fit.py).

Tiers (markers realvllm, moto, tmux, postgres): a test of a tier whose environment is missing is
skipped with the reason, or fails when CI=true for realvllm (CI installs it, so missing means
broken). At the end one line per tier says what ran, passed, failed and was skipped, and why.
Other fixtures belong in the test files that use them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from support import tinymodel, vllm_server  # `tests` is taken in site-packages; see support/__init__.py

TIERS = ("realvllm", "moto", "tmux", "postgres")
REPO_ROOT = Path(__file__).resolve().parents[1]
# Every sweep event a test's runner emits (in this process or a knee subprocess) must match
# its model in core/spec/events.py: a mismatch raises instead of being logged.
os.environ["KNEE_STRICT_EVENTS"] = "1"
# Every server this test session starts inherits it (core/serve/process.py passes the
# environment on): support/procs.py finds this session's servers, not another checkout's
# running the same tests on the same machine with the same study names.
os.environ.setdefault("KNEE_TEST_SESSION", f"{os.getpid()}-{time.time_ns()}")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


# --- environment probes, one per tier: (ready, why not) ---------------------------------------


def _probe_realvllm() -> tuple[bool, str]:
    marker = tinymodel.VLLM_VENV / ".knee-vllm-setup"
    if not tinymodel.VLLM_PYTHON.exists():
        return False, f"{tinymodel.VLLM_PYTHON} missing; run scripts/setup-vllm-cpu.sh (scripts/test.sh does)"
    if not marker.exists():
        return False, f"{tinymodel.VLLM_VENV} is incomplete (no setup marker); rerun scripts/setup-vllm-cpu.sh"
    return True, marker.read_text().strip()


def _probe_moto() -> tuple[bool, str]:
    if importlib.util.find_spec("moto") is None:
        return False, "moto is not installed in the project venv (pip install -e '.[test]')"
    return True, "moto importable"


def _probe_tmux() -> tuple[bool, str]:
    if shutil.which("tmux") is None:
        return False, "tmux is not installed"
    knee = REPO_ROOT / ".venv" / "bin" / "knee"
    if not knee.exists() and shutil.which("knee") is None:
        return False, "the knee command is not installed (pip install -e .)"
    return True, "tmux and knee found"


def _probe_postgres() -> tuple[bool, str]:
    from support import postgres

    why = postgres.why_not()
    return (False, why) if why else (True, f"PostgreSQL found ({postgres.find_bin()})")


PROBES = {"realvllm": _probe_realvllm, "moto": _probe_moto, "tmux": _probe_tmux, "postgres": _probe_postgres}


def require_tier(tier: str) -> None:
    """Skip (or, for realvllm under CI, fail) the current test when `tier` cannot run here."""
    ready, why = PROBES[tier]()
    if ready:
        return
    if tier == "realvllm" and _in_ci():
        pytest.fail(f"[realvllm] CI=true but the environment is missing: {why}", pytrace=False)
    pytest.skip(f"[{tier}] cannot run: {why}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    # The marker alone is enough: a tier test that uses none of the fixtures below still gets
    # a clear reason instead of an obscure crash.
    for tier in TIERS:
        if item.get_closest_marker(tier) is not None:
            require_tier(tier)


# --- real-vLLM fixtures -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    require_tier("realvllm")
    return tinymodel.VLLM_PYTHON


@pytest.fixture(scope="session")
def tiny_model_dir(vllm_python: Path) -> Path:
    return tinymodel.ensure_tiny_model(python=vllm_python)


@pytest.fixture(scope="session")
def real_vllm(tiny_model_dir: Path):
    server = vllm_server.start_vllm_server(tiny_model_dir)
    yield server
    server.stop()


@pytest.fixture
def vllm_server_factory(tiny_model_dir: Path):
    started: list[vllm_server.VllmServer] = []

    def start(extra_args=(), **kwargs) -> vllm_server.VllmServer:
        kwargs.setdefault("python", tinymodel.VLLM_PYTHON)
        server = vllm_server.start_vllm_server(kwargs.pop("model_dir", tiny_model_dir), extra_args=extra_args, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


# --- per-tier summary -------------------------------------------------------------------------

# nodeid -> (tiers, (state, reason)) for every tier-marked test of this run.
_OUTCOMES: dict[str, tuple[list[str], tuple[str, str]]] = {}
# tier -> how many of its tests -m/-k left out, so "none ran" is told apart from "none exist".
_DESELECTED: Counter = Counter()


def pytest_deselected(items) -> None:
    for item in items:
        for tier in TIERS:
            if item.get_closest_marker(tier) is not None:
                _DESELECTED[tier] += 1


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tiers = [t for t in TIERS if t in report.keywords]
    if not tiers:
        return
    prev = _OUTCOMES.get(report.nodeid)
    # One outcome per test: a failure or error in any phase wins, then a skip, then a pass.
    if report.failed:
        state = ("error" if report.when != "call" else "failed", _short(report.longreprtext))
    elif report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        state = ("skipped", reason.removeprefix("Skipped: "))
    elif report.when == "call":
        state = ("passed", "")
    else:
        return
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 2}
    if prev is None or rank[state[0]] >= rank[prev[1][0]]:
        _OUTCOMES[report.nodeid] = (tiers, state)


def _short(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    by_tier: dict[str, Counter] = defaultdict(Counter)
    reasons: dict[str, Counter] = defaultdict(Counter)
    for tiers, (state, reason) in _OUTCOMES.values():
        for tier in tiers:
            by_tier[tier][state] += 1
            if state != "passed":
                reasons[tier][f"{state}: {reason}"] += 1
    terminalreporter.write_sep("-", "test tiers")
    for tier in TIERS:
        c = by_tier[tier]
        ready, why = PROBES[tier]()
        env = f"environment ready ({why})" if ready else f"ENVIRONMENT MISSING: {why}"
        left_out = f"{_DESELECTED[tier]} deselected by -m/-k; " if _DESELECTED[tier] else ""
        if not c:
            terminalreporter.write_line(f"{tier}: no tests of this tier ran ({left_out or 'none collected'}); {env}")
            continue
        ran = c["passed"] + c["failed"] + c["error"]
        line = f"{tier}: {ran} ran, {c['passed']} passed, {c['failed'] + c['error']} failed or errored, {c['skipped']} skipped; {left_out}{env}"
        markup = {"red": True} if c["failed"] + c["error"] else {"yellow": True} if c["skipped"] else {"green": True}
        terminalreporter.write_line(line, **markup)
        for reason, n in reasons[tier].most_common(5):
            terminalreporter.write_line(f"    {n} x {reason}")
