"""The adaptive strategy across ``--join`` workers (issue 14): every decision reads the store.

Three ``knee sweep ... --strategy adaptive --join`` processes share one study of 20 server
configurations on the sim engine (a SQLite file, then a throwaway PostgreSQL cluster). Each
worker asks the strategy for the next configuration given every point any worker stored, and
claims it by lease; the configurations the strategy rules out are recorded as pruned, once.
The study must end with every worker exiting 0, each point stored and announced once, no
configuration on two live workers at once, and no more configurations measured than a single
adaptive runner measures plus the number of workers. A worker SIGKILLed in the middle of a
configuration leaves it to another, which runs the point in flight again, marked re-run.
Behaviour only: no assertion on how long anything takes. The process tests are slow; the
last two (the prune record, and what a real engine's calibration learns from other boxes)
run in-process."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from support.procs import kill_mid_configuration, wait_for
from test_sweep_workers import KNEE, env, knee, open_store, procs  # noqa: F401 (procs: a fixture)
from test_sweep_workers_pg import pg_cluster, pg_url  # noqa: F401 (fixtures)

from core.results.store import StudyStore, runner_alive
from core.sweep import build_spec, create_study, lease

SERVER = "tensor_parallel_size=[1,2];max_num_seqs=[16,32,48,64,96,128,192,256,384,512]"  # 20 configurations
# A tight E2E limit: the estimator ranks the loads, the top one measured breaks the SLO on most
# configurations, so those run two loads (a worker can be caught between them); about half
# of the configurations cannot beat the best measured and are pruned. The limit depends on the
# cost model's numbers. With those of 2026-11-27, 20-23 s gives 9 of 10 measured configurations
# two loads and 10 pruned as unable to beat the best measured; 18-19 s and 25 s give one load
# each, 15-17 s prunes them as missing the SLOs instead. If the model moves and these tests
# fail on that, re-pick it from the single runner's points and skip reasons per limit.
CLIENT = "max_concurrency=[8,16,32,64];num_prompts=3000"
CONSTRAINTS = "e2e_latency:p99<21s"
N_WORKERS = 3


def adaptive_args(db: Path | str, study: str, join: bool = True) -> list[str]:
    return [
        "sweep",
        "-q",
        "--model",
        "Qwen/Qwen3-4B",
        "--engine",
        "sim",
        "--instance",
        "ml.g6.12xlarge",
        "--server-args",
        SERVER,
        "--client-args",
        CLIENT,
        "--constraints",
        CONSTRAINTS,
        "--strategy",
        "adaptive",
        "--storage",
        str(db),
        "--study",
        study,
        *(["--join"] if join else []),
    ]


def single_runner_measured(tmp_path: Path) -> set[str]:
    """The configurations one adaptive runner measures on the same sweep (the yardstick)."""
    db = tmp_path / "single.db"
    r = knee(*adaptive_args(db, "single", join=False), timeout=300)
    assert r.returncode == 0, r.stderr
    store = StudyStore(db, create=False)
    measured = {p.trial_key for p in store.points("single")}
    assert any(t.status == "skipped" for t in store.trials("single")), "the yardstick pruned nothing: the sweep tests no pruning"
    store.close()
    return measured


def start_workers(db: Path | str, name: str, procs: list) -> tuple[StudyStore, dict[str, int]]:
    """Three workers, all in before any configuration is decided: the first is paused as soon
    as it is up, the other two join while it waits, then the study continues. Returns the
    store and worker id -> pid."""

    def spawn() -> None:
        procs.append(subprocess.Popen([str(KNEE), *adaptive_args(db, name)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env()))

    spawn()
    store = open_store(db)
    wait_for(lambda: (row := store.study(name)) is not None and runner_alive(row), timeout=120, what="the first worker to start")
    r = knee("sweep", "--pause", "--study", name, "--storage", str(db))
    assert r.returncode == 0, r.stderr
    for _ in range(N_WORKERS - 1):
        spawn()

    def started() -> dict[str, int]:
        return {e.data["worker"]: int(e.data["worker"].split(":")[1]) for e in store.events(name, kinds=["study_started"])}

    wait_for(lambda: set(started().values()) >= {p.pid for p in procs}, timeout=120, what="all three workers to start")
    r = knee("sweep", "--continue", "--study", name, "--storage", str(db))
    assert r.returncode == 0, r.stderr
    return store, started()


def check_study(store: StudyStore, name: str, single: set[str], db: Path | str, killed: dict | None = None, killed_at: float = 0.0) -> None:
    """What every run of the scenario must show once all workers exited 0."""
    assert store.study(name)["status"] == "done"
    assert sum(1 for _ in store.events(name, kinds=["study_done"])) == 1
    trials = {t.trial_id: t for t in store.trials(name)}
    points = store.points(name)
    assert len(trials) == 20 and all(p.status == "ok" for p in points)

    # Each point measured and announced once (the re-run one: announced by its second runner only).
    done_events = Counter(e.data["point_id"] for e in store.events(name, kinds=["point_done"]))
    assert set(done_events) == {p.point_id for p in points} and set(done_events.values()) == {1}
    hosts = store.point_hosts(name)
    assert set(hosts) == {p.point_id for p in points}
    reruns = [pid for pid, h in hosts.items() if h["rerun"]]
    assert reruns == ([killed["inflight"]] if killed else [])

    # Every configuration is either measured or pruned, never both; each pruned one recorded
    # once (one worker announced it), with the strategy's reason; every lease is done.
    measured = {p.trial_id for p in points}
    pruned = {tid for tid, t in trials.items() if t.status == "skipped"}
    assert pruned and measured and not (pruned & measured) and (pruned | measured) == set(trials)
    assert all(trials[tid].reason.startswith("pruned: predicted output_throughput cannot beat the best measured") for tid in pruned)
    skipped_events = Counter(e.data["trial_id"] for e in store.events(name, kinds=["point_skipped"]))
    assert skipped_events == Counter({tid: 1 for tid in pruned})
    assert all(r["state"] == "done" for r in store.leases(name))

    # In-flight concurrency may measure a few that one runner pruned: at most one per worker.
    assert len({p.trial_key for p in points}) <= len(single) + N_WORKERS

    # No configuration on two live workers at once: per configuration the claims follow each
    # other (only a killed worker's ended by expiry, taken over after the kill), and no two
    # workers' points of one configuration overlap in time. Pruned ones were never claimed.
    log = defaultdict(list)
    for row in store.lease_log(name):
        log[row["trial_id"]].append(row)
    assert set(log) == measured and all(sum(r["outcome"] == "done" for r in rows) == 1 for rows in log.values())
    expired = [(r["trial_id"], r["worker"], r["inflight"]) for rows in log.values() for r in rows if r["outcome"] == "expired"]
    assert expired == ([(killed["trial_id"], killed["worker"], killed["inflight"])] if killed else [])
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

    # knee results, from any process, shows the pruned configurations with their reason.
    r = knee("results", "--study", name, "--storage", str(db), "--json")
    assert r.returncode == 0, r.stderr
    shown = {t["trial_id"]: t for t in json.loads(r.stdout)["trials"]}
    assert {tid for tid, t in shown.items() if t["status"] == "skipped"} == pruned
    r = knee("results", "--study", name, "--storage", str(db))
    assert r.returncode == 0, r.stderr
    assert sum(ln.startswith("skipped: trial ") and "pruned: " in ln for ln in r.stdout.splitlines()) == len(pruned)


def three_adaptive_workers(db: Path | str, procs: list, single: set[str]) -> None:
    name = "adaptive"
    store, workers = start_workers(db, name, procs)
    for p in procs:
        assert p.wait(300) == 0, p.stderr.read()
    check_study(store, name, single, db)
    # The three shared the work: each measured configurations of its own.
    hosts = store.point_hosts(name)
    assert {h["worker"] for h in hosts.values()} == set(workers)
    store.close()


@pytest.mark.slow
def test_three_adaptive_workers_share_one_sqlite_study(tmp_path, procs):
    three_adaptive_workers(tmp_path / "knee.db", procs, single_runner_measured(tmp_path))


@pytest.mark.slow
@pytest.mark.postgres
def test_three_adaptive_workers_share_one_postgresql_study(tmp_path, pg_url, procs):  # noqa: F811
    three_adaptive_workers(pg_url, procs, single_runner_measured(tmp_path))


@pytest.mark.slow
def test_an_adaptive_worker_killed_mid_configuration_leaves_it_to_another_which_reruns_the_point(tmp_path, procs):
    db, name = tmp_path / "knee.db", "adaptive-kill"
    single = single_runner_measured(tmp_path)
    store, workers = start_workers(db, name, procs)
    pids = {p.pid for p in procs}
    # SIGKILL one worker between two load points of a configuration (as in tests/test_sweep_workers.py).
    victim = kill_mid_configuration(store, name, pids, timeout=180)
    killed_at = time.time()
    dead = next(p for p in procs if p.pid == victim["pid"])
    dead.wait(10)
    kept = {p.point_id for p in store.points(name) if p.trial_id == victim["trial_id"]}
    assert kept and victim["inflight"] not in kept
    live = [p for p in procs if p is not dead]
    for p in live:
        assert p.wait(300) == 0, p.stderr.read()

    check_study(store, name, single, db, killed=victim, killed_at=killed_at)
    # The configuration was finished by a live worker: the point in flight ran again there,
    # marked re-run, and the points the dead worker stored were kept as its own.
    hosts = store.point_hosts(name)
    live_ids = {w for w, pid in workers.items() if pid != victim["pid"]}
    assert hosts[victim["inflight"]]["worker"] in live_ids and hosts[victim["inflight"]]["rerun"]
    assert {hosts[pid]["worker"] for pid in kept} == {victim["worker"]}
    takeovers = [e.data for e in store.events(name, kinds=["lease_taken_over"])]
    assert [(d["trial_id"], d["from_worker"], d["rerun_point"]) for d in takeovers] == [(victim["trial_id"], victim["worker"], victim["inflight"])]
    r = knee("results", "--study", name, "--storage", str(db))
    assert r.returncode == 0, r.stderr
    assert sum(ln.endswith("(re-run)") for ln in r.stdout.splitlines()) == 1
    store.close()


def _sim_points(tmp_path: Path) -> list:
    """Two points measured on the simulator, to store as if a real engine had measured them."""
    store = StudyStore(tmp_path / "sim.db")
    spec = build_spec(
        "Qwen/Qwen3-4B",
        engine="sim",
        server_args="tensor_parallel_size=[1]",
        client_args="max_concurrency=[8,32];num_prompts=200",
        instance="ml.g6.12xlarge",
    )
    from core.sweep.runner import Runner

    Runner(store, create_study(store, spec, "sim"), install_signals=False).run()
    points = store.points("sim")
    store.close()
    assert len(points) == 2
    return points


def test_a_pruned_configuration_is_recorded_once_and_never_one_that_is_held_or_begun(tmp_path):
    from test_sweep_workers_pg import _Plan

    store = StudyStore(tmp_path / "knee.db")
    store.create_study("p", None, "m")
    ids = lease.seed(store, "p", [_Plan(f"cfg{i}", {"max_num_seqs": i}) for i in range(3)])
    a, b = lease.Worker("a:1:x", "h", 1), lease.Worker("b:2:y", "h", 2)
    held = lease.claim(store, "p", a, 60.0, only=[ids["cfg0"]])
    assert held is not None and not lease.prune(store, "p", held.trial_id, "pruned: no")  # a live worker runs it
    assert lease.prune(store, "p", ids["cfg1"], "pruned: cannot beat") is True
    assert lease.prune(store, "p", ids["cfg1"], "pruned: cannot beat") is False  # the second worker to decide it
    assert lease.claim(store, "p", b, 60.0, only=[ids["cfg1"]]) is None  # and nobody runs it
    t = {t.trial_id: t for t in store.trials("p")}[ids["cfg1"]]
    assert (t.status, t.reason) == ("skipped", "pruned: cannot beat")
    # A configuration a dead worker held (its lease expired) is taken over, never pruned.
    lease.end(store, "p", a, held.trial_id, "done")
    dead = lease.claim(store, "p", a, -1.0, only=[ids["cfg2"]])
    assert dead is not None and not lease.prune(store, "p", dead.trial_id, "pruned: no")
    assert lease.remaining(store, "p") == 1
    store.close()


def test_a_real_engine_worker_learns_its_calibration_from_the_points_other_workers_stored(tmp_path):
    from core.sweep.calibration_learner import StudyLearner
    from core.sweep.run import default_predictor
    from core.sweep.shared_adaptive import Replayer, decide
    from core.sweep.strategies import AdaptiveStrategy

    sim = _sim_points(tmp_path)
    store = StudyStore(tmp_path / "knee.db")
    spec = build_spec(
        "Qwen/Qwen3-4B",
        engine="vllm",
        server_args="tensor_parallel_size=[1]",
        client_args="max_concurrency=[8,32];num_prompts=200",
        instance="ml.g6.12xlarge",
        strategy="adaptive",
    )
    name = create_study(store, spec, "real")
    learner = StudyLearner.for_runner(store, name, spec, default_predictor(spec))
    assert learner is not None and not learner.calibration.observations
    replayer = Replayer(store, name, learner)
    tid = store.upsert_trial(name, sim[0].trial_key, sim[0].server_args)
    # Another worker stores the first point: this worker's next decision sees it and learns from it.
    store.save_point(sim[0].model_copy(update={"study": name, "trial_id": tid, "simulated": False}))
    d = decide(store, name, spec, default_predictor(spec), replayer)
    assert sim[0].point_id in d.strategy.results and len(learner.calibration.observations) == 1
    s = AdaptiveStrategy(spec, None)
    replayer.replay(s)  # a later decision replays it again; the calibration learns it once
    assert sim[0].point_id in s.results and len(learner.calibration.observations) == 1
    # With --allow-mixed-hardware another box's points say nothing about this box.
    store.set_study(name, info={**(store.study(name).get("info") or {}), "mixed_hardware": True})
    store.save_point(sim[1].model_copy(update={"study": name, "trial_id": tid, "simulated": False}))
    replayer.replay(s)
    assert sim[1].point_id in s.results and len(learner.calibration.observations) == 1
    store.close()
