"""A server subprocess: launch, readiness, crash detection, logs and teardown.

What llm-optimizer gets wrong and this fixes (``llm-optimizer-compat.md`` section 10):
readiness polls ``/health`` *and* the process several times a second, so a crash is
reported within a second with the last log lines as the reason, not after a fixed 300 s;
the server runs in its own process group and teardown signals the whole group (SIGTERM, then
SIGKILL), so no engine worker is orphaned; on Linux the server also gets SIGTERM from the
kernel if the runner dies without cleaning up (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import ctypes
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import re


from core.serve import localhttp
from core.errors import BadInput

# Failure kinds (stored as the prefix of a reason: "oom: ...").
OOM = "oom"
CRASHED_AT_START = "crashed_at_start"
START_TIMEOUT = "start_timeout"
CRASHED = "crashed"
BAD_ARGS = "bad_args"

_OOM_PATTERNS = (
    "out of memory",
    "outofmemoryerror",
    "cuda error: out of memory",
    "no available memory for the cache blocks",
    "insufficient memory",
    "not enough memory",
    "kv cache is needed, which is larger than the available kv cache memory",
    "larger than the available kv cache memory",
    "cannot allocate memory",
)
_BAD_ARG_PATTERNS = ("unrecognized arguments", "error: argument", "invalid choice", "usage:")


class ServerFailed(Exception):
    """The server did not come up or died; ``kind`` is one of the failure kinds above."""

    def __init__(self, kind: str, detail: str):
        self.kind = kind
        self.detail = detail
        super().__init__(f"{kind}: {detail}")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            raise BadInput(f"port {port} on {host} is in use", "pick another --port or leave it out for a free one") from None


def classify(log_tail: str, default: str) -> str:
    low = log_tail.lower()
    if any(p in low for p in _OOM_PATTERNS):
        return OOM
    if default == CRASHED_AT_START and any(p in low for p in _BAD_ARG_PATTERNS):
        return BAD_ARGS
    return default


# An exception line anywhere on a log line, after whatever prefix the engine writes
# ("(EngineCore_DP0 pid=42) ERROR 11-23 21:00:05 [core.py:708] ValueError: ...").
_EXC_LINE = re.compile(r"(?:^|(?<=[\s\])]))((?:[A-Za-z_]\w*\.)*[A-Z]\w*):\s+(\S.*)$")
_EXC_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Failure", "Fault")
# A closing line that points elsewhere for the cause (vLLM: "Engine core initialization
# failed. See root cause above."; "please check the stack trace above for the root cause").
_POINTER = re.compile(r"root cause|(?:see|check) (?:the )?(?:stack ?trace|traceback|logs?|errors?) above", re.I)


_ERRORISH = re.compile(r"error|fatal|fail|cannot|can't|unable|not found|no such|denied|killed|abort|panic|exception|invalid|unrecognized", re.I)


def _exception(line: str) -> str | None:
    """``XxxError: message`` from a log line (prefix dropped), or None."""
    m = _EXC_LINE.search(line.rstrip())
    if not m:
        return None
    name = m.group(1).rsplit(".", 1)[-1]
    if name != "Exception" and not name.endswith(_EXC_SUFFIXES):
        return None
    return f"{m.group(1)}: {m.group(2).strip()}"


def root_cause(log_text: str) -> str | None:
    """The line that says why a server died, from its log.

    Engines often end with a line that only points back ("RuntimeError: Engine core
    initialization failed. See root cause above."). The cause is then the last exception
    line before the last such pointer that is not a pointer itself. Without a pointer, the
    last exception line of the log; without any exception line, the last line the server
    wrote (knee's own ``knee: ...`` lines are not the server's) if it reads like an error.
    Otherwise None."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    excs = [(i, e) for i, e in ((i, _exception(ln)) for i, ln in enumerate(lines)) if e]
    pointers = [i for i, e in excs if _POINTER.search(e)]
    if pointers:
        before = [e for i, e in excs if i < pointers[-1] and not _POINTER.search(e)]
        if before:
            return before[-1]
    causes = [e for _, e in excs if not _POINTER.search(e)]
    if causes:
        return causes[-1]
    if excs:
        return excs[-1][1]
    own = [ln for ln in lines if not ln.startswith("knee: ")]
    if own and _ERRORISH.search(own[-1]):
        return own[-1]
    return None  # an access log or a progress line is no cause (a SIGKILL leaves those)


def _pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


_LIVE: set["ServerProcess"] = set()
_LIVE_LOCK = threading.Lock()


def stop_all() -> None:
    """Tear down every server this process started (signal handlers and atexit call this)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for s in live:
        s.stop()


atexit.register(stop_all)


class ServerProcess:
    """One launched server. ``argv`` is a list (never a re-split string), so argument values
    may contain spaces. ``secrets`` are scrubbed from the log file at teardown."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: str | Path, secrets: tuple[str, ...] = (), stop_timeout_s: float = 15.0):
        self.argv = argv
        self.env = env
        self.log_path = Path(log_path)
        self.secrets = tuple(s for s in secrets if s)
        self.stop_timeout_s = stop_timeout_s
        self.proc: subprocess.Popen | None = None
        self.pgid: int | None = None
        self._log: io.FileIO | None = None  # the server's log, open from start() until stop()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log = open(self.log_path, "ab", buffering=0)
        # The server gets a clean Python environment, not knee's: vLLM usually runs from
        # another interpreter (its own venv or a container) that knee's PYTHONPATH would break.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env.update(self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # own process group: teardown reaches every worker
                preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None,
                close_fds=True,
            )
        except (FileNotFoundError, PermissionError) as e:
            log.write(f"knee: cannot start {self.argv[0]!r}: {e}\n".encode())
            log.close()
            raise ServerFailed(CRASHED_AT_START, f"cannot start {self.argv[0]!r}: {e.strerror or e}") from None
        self.pgid = self.proc.pid
        with _LIVE_LOCK:
            _LIVE.add(self)

    def exit_code(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def _log_end(self, max_bytes: int = 64_000) -> str:
        """The end of the log, secrets scrubbed."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        for s in self.secrets:
            text = text.replace(s, "***")
        return text

    def tail(self, n: int = 15, max_chars: int = 2000) -> str:
        lines = [ln for ln in self._log_end().splitlines() if ln.strip()]
        return "\n".join(lines[-n:])[-max_chars:]

    def exit_reason(self, code: int, when: str, default: str = CRASHED) -> tuple[str, str]:
        """(failure kind, reason) for a server that exited: the first line names the exit and
        the root cause from the log (not a closing "see root cause above" line, which may
        be all the log's tail shows); the log's last lines follow."""
        text = self._log_end(256_000)
        tail = self.tail()
        cause = root_cause(text)
        sig = ""
        if code < 0:
            try:
                sig = f" ({signal.Signals(-code).name})"
            except ValueError:
                pass
        first = f"server exited with code {code}{sig} {when}" + (f": {cause[:500]}" if cause else "")
        return classify(tail + "\n" + (cause or ""), default), f"{first}\n{tail}"

    def wait_ready(self, url: str, timeout_s: float, poll_s: float = 0.25, cancel: threading.Event | None = None) -> float:
        """Poll ``url`` until HTTP 200, watching the process. Returns seconds taken."""
        t0 = time.monotonic()
        while True:
            code = self.exit_code()
            if code is not None:
                raise ServerFailed(*self.exit_reason(code, "before it was ready", CRASHED_AT_START))
            try:
                if localhttp.get(url, timeout_s=2.0)[0] == 200:
                    return time.monotonic() - t0
            except localhttp.LocalHTTPError:
                pass  # not listening yet
            if time.monotonic() - t0 > timeout_s:
                raise ServerFailed(START_TIMEOUT, f"not ready after {timeout_s:g} s (GET {url})\n{self.tail()}")
            if cancel is not None and cancel.wait(poll_s):
                raise KeyboardInterrupt
            elif cancel is None:
                time.sleep(poll_s)

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL after ``stop_timeout_s``; idempotent."""
        if self.proc is None:
            return
        pgid = self.pgid
        try:
            if self.proc.poll() is None:
                _killpg(pgid, signal.SIGTERM)
                try:
                    self.proc.wait(self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    _killpg(pgid, signal.SIGKILL)
                    self.proc.wait(10)
            # The leader is gone; workers it left in the group get SIGKILL, and stop() returns
            # once they are gone too: a killed vLLM engine process takes a moment to release
            # gigabytes of memory, and the next server (or the caller's exit) must not overlap it.
            _killpg(pgid, signal.SIGKILL)
            _wait_group_gone(pgid, timeout_s=10.0)
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)
            if self._log and not self._log.closed:
                self._log.close()
            self._scrub_log()

    def _scrub_log(self) -> None:
        if not self.secrets or not self.log_path.exists():
            return
        try:
            data = self.log_path.read_bytes()
            clean = data
            for s in self.secrets:
                clean = clean.replace(s.encode(), b"***")
            if clean != data:
                self.log_path.write_bytes(clean)
        except OSError:
            pass


def _killpg(pgid: int | None, sig: int) -> None:
    if pgid is None:
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is left in process group ``pgid`` (Linux /proc;
    elsewhere: whether the group can still be signalled)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone while we looked
        if fields[0] != "Z" and int(fields[2]) == pgid:  # state, then ppid, then pgrp
            return True
    return False


def _wait_group_gone(pgid: int | None, timeout_s: float) -> None:
    if pgid is None:
        return
    end = time.monotonic() + timeout_s
    while _group_alive(pgid) and time.monotonic() < end:
        time.sleep(0.05)


def kill_stale_group(pid: int, tag: str) -> bool:
    """Kill a server group left by a runner that was killed (SIGKILL gives it no chance to
    clean up). The process must carry ``KNEE_SERVER_TAG=tag`` in its environment, so a
    recycled pid is never hit."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    if f"KNEE_SERVER_TAG={tag}".encode() not in environ:
        return False
    try:
        if os.getpgid(pid) != pid:
            return False
    except ProcessLookupError:
        return False
    _killpg(pid, signal.SIGTERM)
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    _killpg(pid, signal.SIGKILL)
    _wait_group_gone(pid, timeout_s=10.0)  # as Server.stop: nothing of the group is left on return
    return True
