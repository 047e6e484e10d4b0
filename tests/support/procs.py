"""Finding the servers a sweep started, by the KNEE_SERVER_TAG=<study>/... its runner puts in
each server's environment: the fault and control tests assert that none outlives its sweep."""

from __future__ import annotations

import os
import time
from pathlib import Path


def tagged_pids(study: str) -> list[int]:
    """Live processes carrying KNEE_SERVER_TAG=<study>/... (every server the sweep started)."""
    out = []
    needle = f"KNEE_SERVER_TAG={study}/".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
            state = (d / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if needle in env and state != "Z":  # a zombie has exited; its parent just has not reaped it
            out.append(int(d.name))
    return out


def wait_gone(study: str, timeout: float = 5.0) -> list[int]:
    """The study's servers still alive after up to ``timeout`` seconds ([] once all are gone)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and tagged_pids(study):
        time.sleep(0.1)
    return tagged_pids(study)


def wait_for(cond, timeout=60.0, what="condition", every=0.02):
    """Poll ``cond`` until it holds; an AssertionError naming ``what`` after ``timeout`` s."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"{what} not reached in {timeout} s")
        time.sleep(every)


def exited(pid: int) -> bool:
    """A detached runner that is our child (Popen): reaped once it has exited."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid
