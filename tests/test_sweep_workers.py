"""Several workers on one study (issue 14, first slice): ``knee sweep ... --study S --join``
processes share a SQLite store on the sim engine and claim server configurations by lease.

One of three workers is killed with SIGKILL in the middle of a configuration (stopped first,
so the store is read while it can no longer write): its lease expires, another worker takes
the configuration over, keeps the points it stored and runs the point in flight again,
marked as a re-run. A pause from a third process pauses both remaining workers. Every other
point is stored exactly once, and no configuration is held by two live workers at once.
Behaviour only: no assertion on how long anything takes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from support.procs import wait_for

from core.results.store import StudyStore, runner_alive

ROOT = Path(__file__).resolve().parents[1]
KNEE = ROOT / ".venv" / "bin" / "knee"
TTL_S = 5.0  # the lease of a dead worker expires this long after its last renewal
SERVER = "tensor_parallel_size=[1,2];max_num_seqs=[16,32,48,64,96,128,192,256,384,512]"  # 20 configurations
CLIENT = "max_concurrency=[4,8,16];num_prompts=1000"
pytestmark = pytest.mark.slow


def sweep_args(db: Path, study: str, server: str = SERVER, client: str = CLIENT) -> list[str]:
    return ["sweep", "-q", "--model", "Qwen/Qwen3-4B", "--engine", "sim", "--instance", "ml.g6.12xlarge",
            "--server-args", server, "--client-args", client, "--storage", str(db), "--study", study, "--join"]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["KNEE_LEASE_TTL_S"] = str(TTL_S)
    e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def knee(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(KNEE), *args], capture_output=True, text=True, timeout=timeout, env=env())


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def in_flight(store: StudyStore, study: str, pids: set[int]) -> dict | None:
    """A lease of a worker in ``pids`` in the middle of its configuration: at least one of its
    points stored, and another being measured (not stored)."""
    stored = defaultdict(set)
    for p in store.points(study):
        stored[p.trial_id].add(p.point_id)
    for row in store.leases(study):
        if row["state"] == "running" and row["pid"] in pids and row["inflight"] and stored[row["trial_id"]] and row["inflight"] not in stored[row["trial_id"]]:
            return row
    return None


def test_three_workers_one_killed_mid_configuration_and_a_pause_from_a_third_process(tmp_path, procs):
    db, name = tmp_path / "knee.db", "multi"
    for _ in range(3):
        procs.append(subprocess.Popen([str(KNEE), *sweep_args(db, name)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, env=env()))
    pids = {p.pid for p in procs}
    wait_for(db.exists, what="the study store")
    store = StudyStore(db, create=False)

    # SIGKILL one worker mid-configuration. It is stopped first and the store read again, so
    # what it held and had in flight is known for certain; a stop that came too late (the
    # point just stored) lets it go on and the next chance is taken.
    victim = None
    end = time.monotonic() + 120
    while victim is None:
        assert time.monotonic() < end, "no worker was seen in the middle of a configuration"
        row = in_flight(store, name, pids)
        if row is None:
            time.sleep(0.01)
            continue
        os.kill(row["pid"], signal.SIGSTOP)
        again = next(r for r in store.leases(name) if r["trial_id"] == row["trial_id"])
        if again["pid"] == row["pid"] and again["inflight"] == row["inflight"] and in_flight(store, name, {row["pid"]}):
            os.kill(row["pid"], signal.SIGKILL)
            victim = again
        else:
            os.kill(row["pid"], signal.SIGCONT)
    killed_at = time.time()
    dead = next(p for p in procs if p.pid == victim["pid"])
    dead.wait(10)
    live = [p for p in procs if p is not dead]
    kept = {p.point_id for p in store.points(name) if p.trial_id == victim["trial_id"]}
    assert kept and victim["inflight"] not in kept

    # Pause from a third process: both remaining workers pause. (--pause needs the study row
    # to name a live worker; the row names whichever worker beat last, a live one within a beat.)
    wait_for(lambda: runner_alive(store.study(name)), timeout=30, what="the study row to name a live worker")
    before_pause = store.last_event_seq(name)
    r = knee("sweep", "--pause", "--study", name, "--storage", str(db))
    assert r.returncode == 0, r.stderr
    workers = {e.data["worker"]: int(e.data["worker"].split(":")[1]) for e in store.events(name, kinds=["study_started"])}
    live_ids = {w for w, pid in workers.items() if pid in {p.pid for p in live}}
    assert len(live_ids) == 2

    def paused() -> set[str]:
        return {e.data.get("worker") for e in store.events(name, after=before_pause, kinds=["paused"])}

    wait_for(lambda: paused() >= live_ids, timeout=60, what="both live workers to pause")
    assert len(store.points(name)) < 60, "the study ended before the pause reached it"
    frozen = {p.point_id for p in store.points(name)}
    time.sleep(1.0)  # a paused worker stores nothing new
    assert {p.point_id for p in store.points(name)} == frozen
    assert all(p.poll() is None for p in live)
    r = knee("sweep", "--continue", "--study", name, "--storage", str(db))
    assert r.returncode == 0, r.stderr
    for p in live:
        assert p.wait(180) == 0, p.stderr.read()

    # The study is complete: every point stored, each measured and announced once, except the
    # one in flight on the killed worker, which ran again on a live one and is marked re-run.
    assert store.study(name)["status"] == "done"
    points = store.points(name)
    assert len(points) == 60 and all(p.status == "ok" for p in points)
    done_events = Counter(e.data["point_id"] for e in store.events(name, kinds=["point_done"]))
    assert set(done_events) == {p.point_id for p in points} and set(done_events.values()) == {1}
    hosts = store.point_hosts(name)
    assert set(hosts) == {p.point_id for p in points}
    assert [pid for pid, h in hosts.items() if h["rerun"]] == [victim["inflight"]]
    assert hosts[victim["inflight"]]["worker"] in live_ids
    assert {hosts[pid]["worker"] for pid in kept} == {victim["worker"]}  # its stored points were kept
    assert sum(1 for e in store.events(name, kinds=["study_done"])) == 1

    # No configuration on two live workers at once: per configuration, claims follow each other;
    # only the killed worker's claim ended by expiry, and it was taken over after the kill.
    log = defaultdict(list)
    for row in store.lease_log(name):
        log[row["trial_id"]].append(row)
    assert len(log) == 20 and all(sum(r["outcome"] == "done" for r in rows) == 1 for rows in log.values())
    expired = [r for rows in log.values() for r in rows if r["outcome"] == "expired"]
    assert [(r["trial_id"], r["worker"], r["inflight"]) for r in expired] == [(victim["trial_id"], victim["worker"], victim["inflight"])]
    for rows in log.values():
        for a, b in zip(rows, rows[1:]):
            assert b["claimed_at"] >= (killed_at if a["outcome"] == "expired" else a["ended_at"])
    by_trial = defaultdict(list)
    for p in points:
        by_trial[p.trial_id].append((p.started_at, p.ended_at, hosts[p.point_id]["worker"]))
    for spans in by_trial.values():
        spans.sort()
        for (s1, e1, w1), (s2, e2, w2) in zip(spans, spans[1:]):
            assert w1 == w2 or s2 >= e1, "two workers measured one configuration at once"

    # Each launch records where it ran: host, GPU type and count, engine and version.
    th = store.trial_hosts(name)
    assert {t["trial_id"] for t in th} == set(log)
    for t in th:
        assert t["host"] and t["gpu_type"] == "L4" and t["gpu_count"] in (1, 2)
        assert t["engine"] == "sim" and t["simulated"] and t["engine_version"].startswith("knee-sim")
    store.close()


def test_a_worker_with_other_arguments_is_refused_naming_the_difference(tmp_path):
    db, name = tmp_path / "knee.db", "small"
    small = dict(server="max_num_seqs=[16,32]", client="max_concurrency=[4];num_prompts=50")
    r = knee(*sweep_args(db, name, **small), "--json")
    assert r.returncode == 0, r.stderr
    r = knee(*sweep_args(db, name, server=small["server"], client="max_concurrency=[4,8];num_prompts=50"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"knee: error: cannot join study {name!r}: --client-args: the study has")
    # The same arguments join, find every configuration done, and run nothing.
    r = knee(*sweep_args(db, name, **small), "--json")
    assert r.returncode == 0, r.stderr
    assert '"points_run": 0' in r.stdout and '"created": false' in r.stdout
    store = StudyStore(db, create=False)
    assert len(store.points(name)) == 2 and store.study(name)["status"] == "done"
    store.close()


def test_join_needs_a_study_name(tmp_path):
    r = knee("sweep", "--model", "Qwen/Qwen3-4B", "--engine", "sim", "--storage", str(tmp_path / "k.db"), "--join")
    assert r.returncode == 2 and r.stderr.strip() == "knee: error: --join needs --study NAME: the study every worker shares"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
