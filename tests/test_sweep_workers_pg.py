"""Several workers on one study in a shared PostgreSQL store (issue 14).

A throwaway cluster (tests/support/postgres.py: initdb in a temporary directory, 127.0.0.1
only, a free port) holds the study. The scenario of tests/test_sweep_workers.py runs on it:
three sim workers, one SIGKILLed mid-configuration, a pause from a third process. Lease
claiming is raced directly by many claimers, on PostgreSQL and on SQLite. Without PostgreSQL
(or its driver) these tests are skipped with the reason, printed by pytest's -rs.
Behaviour only: no assertion on how long anything takes."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support import postgres
from support.procs import wait_for
from test_sweep_workers import KNEE, env, procs, sweep_args, three_workers_one_killed_and_a_pause  # noqa: F401 (procs: a fixture)

from core.results.store import StudyStore
from core.sweep import lease

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pg_cluster():
    why = postgres.why_not()
    if why:
        pytest.skip(f"PostgreSQL tier: {why}")
    c = postgres.Cluster().start()
    yield c
    c.destroy()


_n = [0]


@pytest.fixture
def pg_url(pg_cluster) -> str:
    """A fresh database in the module's cluster."""
    _n[0] += 1
    return pg_cluster.create_db(f"knee_t{_n[0]}")


@pytest.mark.postgres
def test_three_workers_on_postgresql_one_killed_mid_configuration_and_a_pause_from_a_third_process(pg_url, procs):  # noqa: F811
    three_workers_one_killed_and_a_pause(pg_url, procs)


@dataclass(frozen=True)
class _Plan:  # what lease.seed reads of a trial plan
    trial_key: str
    server_args: dict = field(default_factory=dict)
    predicted: dict | None = None


class _LeaseClockAhead:
    """``time`` as core.sweep.lease sees it, ``ahead_s`` later than the wall clock: a lease
    of the first round has expired for every claim of the second, however long the first
    round took (with a real 0.5 s lease, a loaded 2-core box let leases expire mid-round and
    round one saw legitimate takeovers)."""

    def __init__(self, ahead_s: float) -> None:
        self.ahead_s = ahead_s

    def time(self) -> float:
        return time.time() + self.ahead_s


def _race(storage: str, n_claimers: int, n_configs: int, monkeypatch) -> list[list[tuple[str, int]]]:
    """``n_claimers`` threads, each with its own connection pool (as separate worker processes
    have), claim configurations until none is free; two rounds: in the second every lease of
    the first has expired (the lease clock moved past them), so each claim is a takeover.
    Returns the claims of each round."""
    ttl_s = 3600.0
    setup = StudyStore(storage)
    setup.create_study("race", None, "m")
    lease.seed(setup, "race", [_Plan(f"cfg{i}", {"max_num_seqs": i}) for i in range(n_configs)])
    rounds: list[list[tuple[str, int]]] = []
    stores = [StudyStore(storage) for _ in range(n_claimers)]
    for _ in range(2):
        got: list[tuple[str, int]] = []
        lock, go = threading.Lock(), threading.Barrier(n_claimers)

        def claimer(i: int) -> None:
            me = lease.Worker(f"w{i}:{len(rounds)}", "h", 1000 + i)
            go.wait()
            while (c := lease.claim(stores[i], "race", me, ttl_s)) is not None:  # noqa: B023
                with lock:
                    got.append((me.id, c.trial_id))  # noqa: B023
                time.sleep(0.002)  # as a worker would, work before its next claim: lets the others in

        threads = [threading.Thread(target=claimer, args=(i,)) for i in range(n_claimers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        rounds.append(got)
        if len(rounds) == 1:
            # Every first-round lease expires before round two claims.
            monkeypatch.setattr(lease, "time", _LeaseClockAhead(2 * ttl_s))
    log = setup.lease_log("race")
    for s in (*stores, setup):
        s.close()
    rounds.append([(r["worker"], r["outcome"]) for r in log])
    return rounds


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def test_racing_claimers_never_get_one_configuration_twice(backend, request, tmp_path, monkeypatch):
    storage = request.getfixturevalue("pg_url") if backend == "postgresql" else str(tmp_path / "race.db")
    first, second, log = _race(storage, n_claimers=8, n_configs=40, monkeypatch=monkeypatch)
    # Round one: every configuration claimed exactly once (whoever got it: how the claims
    # spread over the claimers is up to the scheduler).
    assert sorted(t for _, t in first) == list(range(40))
    # Round two: every expired lease taken over exactly once.
    assert sorted(t for _, t in second) == list(range(40))
    outcomes = Counter(o for _, o in log)
    assert outcomes == {"expired": 40, "running": 40}


@pytest.mark.parametrize("backend", [pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def test_a_worker_claims_only_the_configurations_it_planned(backend, request, tmp_path):
    # A worker on other hardware (--allow-mixed-hardware) may plan fewer configurations.
    storage = request.getfixturevalue("pg_url") if backend == "postgresql" else str(tmp_path / "only.db")
    store = StudyStore(storage)
    store.create_study("only", None, "m")
    lease.seed(store, "only", [_Plan(f"cfg{i}", {"max_num_seqs": i}) for i in range(4)])
    me = lease.Worker("w:1:x", "h", 1)
    got = [lease.claim(store, "only", me, 60.0, only={1, 3}) for _ in range(3)]
    assert [c.trial_id if c else None for c in got] == [1, 3, None]
    assert lease.remaining(store, "only", only={1, 3}) == 2 and lease.remaining(store, "only") == 4
    lease.end(store, "only", me, 1, "done")
    assert lease.remaining(store, "only", only={1, 3}) == 1 and lease.remaining(store, "only") == 3
    store.close()


@pytest.mark.postgres
def test_the_cluster_listens_on_loopback_only(pg_cluster):
    conf = Path(pg_cluster.data / "postmaster.opts").read_text()
    assert "listen_addresses=127.0.0.1" in conf and str(pg_cluster.sock) in conf


# ---- the store goes away ------------------------------------------------------------------
BIG = "tensor_parallel_size=[1,2];max_num_seqs=[8,16,24,32,48,64,80,96,112,128,160,192,224,256,320,384,448,512,640,768]"  # 40


@pytest.fixture
def own_cluster():
    """A cluster of its own: the outage tests stop it."""
    why = postgres.why_not()
    if why:
        pytest.skip(f"PostgreSQL tier: {why}")
    c = postgres.Cluster().start()
    yield c
    c.destroy()


def _worker(url: str, study: str, procs: list, **extra_env: str) -> subprocess.Popen:
    p = subprocess.Popen(
        [str(KNEE), *sweep_args(url, study, server=BIG)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**env(), **extra_env}
    )
    procs.append(p)
    return p


def _stored(store: StudyStore, study: str) -> dict[str, tuple]:
    # A point stored again would have other times: (started_at, ended_at) identify a storing.
    return {p.point_id: (p.started_at, p.ended_at, p.status) for p in store.points(study)}


@pytest.mark.postgres
def test_workers_carry_on_through_a_10_s_postgresql_outage(own_cluster, procs):  # noqa: F811
    url, name = own_cluster.create_db("outage"), "outage"
    workers = [_worker(url, name, procs) for _ in range(2)]
    store = StudyStore(url)
    wait_for(lambda: len(store.points(name)) >= 10, timeout=120, what="10 points stored")
    before = _stored(store, name)
    store.close()
    assert len(before) < 120, "the study ended before the outage"
    own_cluster.stop("fast")  # every connection is cut; new ones are refused
    ended = [(p.returncode, p.stderr.read()) for p in workers if p.poll() is not None]
    assert not ended, f"a worker ended as the store went away: {ended}"
    time.sleep(10)
    assert all(p.poll() is None for p in workers), "a worker gave up during a 10 s outage"
    own_cluster.start()
    errs = []
    for p in workers:
        assert p.wait(300) == 0
        errs.append(p.stderr.read())
    store = StudyStore(url)
    after = _stored(store, name)
    # Nothing stored before the outage was lost or stored again; the study is complete.
    assert {k: after[k] for k in before} == before
    assert len(after) == 120 and all(s == "ok" for _, _, s in after.values())
    assert store.study(name)["status"] == "done"
    done = Counter(e.data["point_id"] for e in store.events(name, kinds=["point_done"]))
    assert set(done) == set(after) and set(done.values()) == {1}
    store.close()
    # Each worker said so in one line each (no traceback), and went on once it was back.
    for err in errs:
        assert "Traceback" not in err, err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert all(ln.startswith("knee: ") for ln in lines), err
        assert any("is unreachable" in ln and "waiting up to 120 s" in ln for ln in lines), err
        assert any("is back after" in ln for ln in lines), err


@pytest.mark.postgres
def test_a_worker_stops_cleanly_when_postgresql_stays_away_and_the_same_command_finishes(own_cluster, procs):  # noqa: F811
    url, name = own_cluster.create_db("gone"), "gone"
    w = _worker(url, name, procs, KNEE_STORE_OUTAGE_S="3")
    store = StudyStore(url)
    wait_for(lambda: len(store.points(name)) >= 5, timeout=120, what="5 points stored")
    store.close()
    own_cluster.stop("fast")
    rc = w.wait(120)
    err = w.stderr.read()
    assert rc == 1, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and all(ln.startswith("knee: ") for ln in lines), err
    assert lines[-1].startswith("knee: error: the study store postgresql://knee@127.0.0.1:")
    assert "has been unreachable for over 3 s" in lines[-1] and "the same command joins the study again" in lines[-1]
    own_cluster.start()
    store = StudyStore(url)
    before = _stored(store, name)
    assert 5 <= len(before) < 120
    again = _worker(url, name, procs)
    assert again.wait(300) == 0, again.stderr.read()
    after = _stored(store, name)
    assert {k: after[k] for k in before} == before and len(after) == 120
    assert store.study(name)["status"] == "done"
    store.close()
