"""Whether a study's runner is alive, from what the store holds (its pid, host and heartbeat)
and, on the runner's own host, from /proc. Viewers never write: they only judge.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

# A runner beats at least every few seconds (``core.sweep.control.BEAT_S``), also while a
# server starts or a point runs; one silent this long is taken for dead by a viewer on
# another host (the clocks of hosts that share a store are assumed to agree within seconds).
RUNNER_STALE_S = 60.0
_REUSE_SLACK_S = 5.0  # a pid whose process started this long after the last beat was reused


def _proc_stat(pid: int) -> tuple[str, float | None] | None:
    """(state letter, start time in epoch seconds at ~1 s resolution) of process ``pid``,
    where /proc tells; None elsewhere or when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)", which may hold spaces
    except (OSError, IndexError):
        return None
    try:
        ticks = int(fields[19])  # field 22, starttime
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        started = btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        started = None
    return (fields[0] if fields else "?"), started


def runner_gone(row: dict[str, Any], now: float | None = None) -> str | None:
    """Why the runner of a ``running`` study is dead, or None when it looks alive (or the
    study is not running). On the runner's host: its pid is gone, or belongs to a process
    that started after the runner's last heartbeat (a reused pid). From another host: no
    heartbeat for ``RUNNER_STALE_S``."""
    if row.get("status") != "running":
        return None
    pid, host, beat = row.get("runner_pid"), row.get("runner_host"), row.get("heartbeat_at")
    who = f"runner pid {pid} on {host}"
    if not pid:
        return "no runner recorded"
    if host == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"{who} is gone"
        except PermissionError:
            pass  # someone else's process: exists
        st = _proc_stat(pid)
        if st is not None:
            state, started = st
            # Killed but not yet reaped (its parent, e.g. the app that started it, has not
            # waited for it): a zombie answers kill(pid, 0) but runs nothing.
            if state in ("Z", "X", "x"):
                return f"{who} is gone"
            if started is not None and beat and started > beat + _REUSE_SLACK_S:
                return f"{who} is gone (the pid now belongs to another process)"
        return None
    age = (now if now is not None else time.time()) - (beat or 0)
    if age >= RUNNER_STALE_S:
        return f"{who} has not written a heartbeat for {age:.0f} s" if beat else f"{who} never wrote a heartbeat"
    return None


def runner_alive(row: dict[str, Any], now: float | None = None) -> bool:
    """Whether the study's runner looks alive (see :func:`runner_gone`)."""
    return row.get("status") == "running" and bool(row.get("runner_pid")) and runner_gone(row, now) is None


def study_status(row: dict[str, Any], now: float | None = None) -> str:
    """The status a viewer shows: the stored one, except that a ``running`` study whose
    runner died without a word (SIGKILL, power loss) is ``interrupted``; viewers never
    write, so the row keeps ``running`` until a resume claims the study."""
    status = row.get("status") or "unknown"
    if status == "running" and runner_gone(row, now) is not None:
        return "interrupted"
    return status
