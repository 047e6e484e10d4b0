"""Scheduling helpers for the timing tests: keep other tenants of a shared machine from
delaying the processes a test measures with.

    with realtime([0, server_pid]) as granted:   # 0 = the calling thread
        ...                                      # measure
    with affinity({1}):                          # this thread (and children it starts) on CPU 1
        ...

``realtime`` puts the calling thread (pid 0) and every thread of each other pid under
SCHED_RR priority 1 and restores SCHED_OTHER afterwards. It needs root or CAP_SYS_NICE; without
it nothing changes and it yields False, so callers can say so in their failure messages. Why
not ``nice``: with autogroup scheduling (Linux default), nice only ranks tasks within their own
session, not against other sessions' work. Keep what runs under it light and short: a
SCHED_RR task that spins leaves other work only the kernel's 5% reserve on that CPU.
"""

from __future__ import annotations

import contextlib
import os


def _threads(pid: int) -> list[int]:
    if pid == 0:
        return [0]
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


@contextlib.contextmanager
def realtime(pids):
    rr = getattr(os, "SCHED_RR", None)
    tids = [t for pid in pids for t in _threads(pid)]
    if rr is None or not tids:
        yield False
        return
    done = []
    try:
        for t in tids:
            with contextlib.suppress(ProcessLookupError):  # a thread that already ended
                os.sched_setscheduler(t, rr, os.sched_param(1))
                done.append(t)
    except OSError:  # PermissionError: not allowed here; undo what was set
        _restore(done)
        yield False
        return
    try:
        yield True
    finally:
        _restore(done)


def _restore(tids) -> None:
    for t in tids:
        with contextlib.suppress(OSError):  # the process may be gone already
            os.sched_setscheduler(t, os.SCHED_OTHER, os.sched_param(0))


@contextlib.contextmanager
def affinity(cpus):
    """The calling thread on ``cpus`` (children started meanwhile inherit it); no-op if empty."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def pin_process(pid: int, cpus) -> None:
    """Every thread of ``pid`` on ``cpus`` (sched_setaffinity on a pid moves one thread only)."""
    for t in _threads(pid):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(t, cpus)
