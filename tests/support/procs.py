"""Finding the servers a sweep started, by the KNEE_SERVER_TAG=<study>/... its runner puts in
each server's environment: the fault and control tests assert that none outlives its sweep.
And, for the several-workers tests, killing a worker in the middle of a configuration."""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from pathlib import Path


def tagged_pids(study: str) -> list[int]:
    """Live processes carrying KNEE_SERVER_TAG=<study>/... (every server the sweep started)."""
    out = []
    needle = f"KNEE_SERVER_TAG={study}/".encode()
    session = os.environ.get("KNEE_TEST_SESSION")
    ours = f"KNEE_TEST_SESSION={session}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
            state = (d / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        # Another test session's servers (a second checkout's suite on this machine) carry the
        # same study names but not this session's marker (tests/conftest.py).
        mine = session is None or ours in env.split(b"\0")
        if needle in env and mine and state != "Z":  # a zombie has exited; its parent just has not reaped it
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


def in_flight(store, study: str, pids: set[int]) -> dict | None:
    """A lease of a worker in ``pids`` in the middle of its configuration: at least one of its
    points stored, and another being measured (not stored)."""
    stored = defaultdict(set)
    for p in store.points(study):
        stored[p.trial_id].add(p.point_id)
    for row in store.leases(study):
        if (
            row["state"] == "running"
            and row["pid"] in pids
            and row["inflight"]
            and stored[row["trial_id"]]
            and row["inflight"] not in stored[row["trial_id"]]
        ):
            return row
    return None


def kill_mid_configuration(store, study: str, pids: set[int], timeout: float) -> dict:
    """SIGKILL one worker of ``pids`` between two load points of a configuration; its lease
    row as it was. The worker is stopped (SIGSTOP) first and the store read again, so what it
    held and had in flight is known for certain; a stop that came too late (the point just
    stored) lets it go on, and the next chance is taken."""
    end = time.monotonic() + timeout
    while True:
        assert time.monotonic() < end, "no worker was seen in the middle of a configuration"
        row = in_flight(store, study, pids)
        if row is None:
            time.sleep(0.01)
            continue
        os.kill(row["pid"], signal.SIGSTOP)
        again = next(r for r in store.leases(study) if r["trial_id"] == row["trial_id"])
        if again["pid"] == row["pid"] and again["inflight"] == row["inflight"] and in_flight(store, study, {row["pid"]}):
            os.kill(row["pid"], signal.SIGKILL)
            return again
        os.kill(row["pid"], signal.SIGCONT)
