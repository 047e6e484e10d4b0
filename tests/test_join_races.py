"""Races when several workers start on one study at the same moment (issue 14).

Two failures seen in CI, each a race between processes that start together:
- a SQLite store file that two processes create at once: the loser's switch to WAL saw
  "database is locked" and the worker exited;
- a worker that read a study in the instant between the first worker's insert and its
  write of the join marker and the hardware, and found the hardware as a label string.
These run the real store (SQLite files, real processes and threads), no mocks.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.errors import BadInput
from core.results.store import StudyStore
from core.sweep import build_spec, create_study
from core.sweep.workers import join_study

ROOT = Path(__file__).resolve().parents[1]
OPEN_AT = """
import sys, time
from core.results.store import StudyStore
start = float(sys.argv[2])
while time.time() < start:
    pass  # every process opens the store in the same instant
for _ in range(3):
    StudyStore(sys.argv[1]).close()
"""


def _spec(instance: str = "ml.g6.12xlarge"):
    return build_spec(
        "Qwen/Qwen3-4B", engine="sim", server_args="max_num_seqs=[16,32]", client_args="max_concurrency=[4];num_prompts=50", instance=instance
    )


def test_processes_that_create_one_sqlite_store_at_once_all_open_it(tmp_path):
    db = tmp_path / "knee.db"
    start = time.time() + 3.0  # after every interpreter has started (imports take ~1 s on a busy box)
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_AT, str(db), str(start)], cwd=ROOT, stderr=subprocess.PIPE, text=True) for _ in range(10)]
    errors = [(p.wait(120), p.stderr.read()) for p in procs]
    assert all(rc == 0 for rc, _ in errors), [e for rc, e in errors if rc]
    store = StudyStore(db, create=False)
    assert store.studies() == []
    store.close()


def test_workers_that_join_at_once_find_one_study_with_its_hardware(tmp_path):
    db, name, n = tmp_path / "knee.db", "together", 8
    StudyStore(db).close()
    barrier = threading.Barrier(n)
    results: list[tuple[bool, str | None]] = []
    errors: list[BaseException] = []

    def worker() -> None:
        store = StudyStore(db)
        try:
            barrier.wait()
            _, created = join_study(store, _spec(), name)
            results.append((created, None))
        except BaseException as e:  # the test reports every worker's failure, not only the first
            errors.append(e)
        finally:
            store.close()

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(c for c, _ in results) == [False] * (n - 1) + [True]
    info = StudyStore(db, create=False).study(name)["info"]
    assert info["join"] is True and info["hardware"] == {"gpu_type": "L4", "gpu_count": 4, "simulated": True}


def test_the_creating_worker_writes_the_join_marker_with_the_row_itself(tmp_path):
    """What a second worker can read the moment the study exists: the join marker and the
    hardware as a record, never a half-made study."""
    store = StudyStore(tmp_path / "knee.db")
    seen: list[dict] = []
    insert = store.create_study

    def create_and_look(name, *a, **kw):
        insert(name, *a, **kw)
        seen.append(StudyStore(store.path, create=False).study(name)["info"])

    store.create_study = create_and_look  # look from another connection right after the insert
    _, created = join_study(store, _spec(), "first")
    assert created and seen[0]["join"] is True and isinstance(seen[0]["hardware"], dict)
    assert seen[0]["hardware_label"] == "ml.g6.12xlarge (4x L4)"


def test_a_study_whose_hardware_is_a_label_is_joined_on_its_spec(tmp_path):
    """A study created by a single runner (or an earlier knee) keeps a label string: a worker
    compares its hardware with the study's spec instead, and refuses other hardware."""
    store = StudyStore(tmp_path / "knee.db")
    spec = _spec()
    store.create_study("old", spec, spec.model, info={"hardware": "ml.g6.12xlarge (4x L4)"})
    _, created = join_study(store, _spec(), "old")
    assert created is False
    assert store.study("old")["info"]["hardware"] == {"gpu_type": "L4", "gpu_count": 4, "simulated": True}
    store.create_study("old2", spec, spec.model, info={"hardware": "ml.g6.12xlarge (4x L4)"})
    with pytest.raises(BadInput, match="GPU type differs: the study runs on 4x L4"):
        join_study(store, _spec("ml.g5.12xlarge"), "old2")
    create_study(store, spec, "single")  # what a plain (not --join) runner makes
    assert isinstance(store.study("single")["info"]["hardware_label"], str)
    store.close()
