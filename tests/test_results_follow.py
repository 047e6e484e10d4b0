"""The one study follower (core.results.follow), used by StudyStore.follow, the TUI's Sweep
screen and knee attach: it ends with the study's last run, not with one a resume restarted,
and it stops waiting on a study whose runner died without writing a last event."""

import subprocess
import sys
import threading

from core.results.follow import StudyFollower
from core.results.store import StudyStore
from core.sweep import build_spec, create_study


def _study(tmp_path):
    store = StudyStore(tmp_path / "knee.db")
    spec = build_spec(
        "Qwen/Qwen3-4B", engine="sim", instance="ml.g6.12xlarge", server_args="max_num_seqs=[4]", client_args="max_concurrency=[1];num_prompts=5"
    )
    return store, create_study(store, spec, "f")


def test_follow_ends_with_the_last_run_not_with_a_resumed_one(tmp_path):
    store, name = _study(tmp_path)
    store.claim_runner(name)  # this process is the runner: alive
    store.emit(name, "study_started", model="m")
    store.emit(name, "study_interrupted", signal="SIGINT")
    store.emit(name, "study_started", model="m")  # a resume
    seen = []

    def finish_later():
        store.emit(name, "point_done", status="ok")
        store.set_study(name, status="done", runner_pid=None)
        store.emit(name, "study_done")

    t = threading.Timer(0.3, finish_later)
    t.start()
    try:
        seen = [ev.kind for ev in store.follow(name, poll_s=0.02)]
    finally:
        t.join()
    assert seen == ["study_started", "study_interrupted", "study_started", "point_done", "study_done"]


def test_follow_stops_waiting_on_a_runner_that_died_without_a_word(tmp_path):
    store, name = _study(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.claim_runner(name)
    store.set_study(name, runner_pid=dead.pid)  # as a SIGKILLed runner leaves it: still "running"
    store.emit(name, "study_started", model="m")
    store.emit(name, "point_done", status="ok")
    f = StudyFollower(store, name)
    assert [ev.kind for ev in f.events(poll_s=0.02)] == ["study_started", "point_done"]
    assert f.state.status == "interrupted" and not f.state.alive and "gone" in f.state.note


def test_the_state_is_re_read_after_an_event_that_changes_it(tmp_path):
    store, name = _study(tmp_path)
    f = StudyFollower(store, name, row_every_s=3600)  # never due again after the first read
    assert f.poll() == [] and f.state.status == "created" and f.state.starting and not f.state.unattended
    store.request_state(name, "pause")
    store.emit(name, "paused", trial_id=0)
    assert [ev.kind for ev in f.poll()] == ["paused"]
    assert f.state.requested == "pause"  # read again because of the paused event
    store.emit(name, "progress", phase="run")
    store.request_state(name, "run")
    assert [ev.kind for ev in f.poll()] == ["progress"]
    assert f.state.requested == "pause"  # not due, and nothing that changes the row happened


def test_an_orderly_end_s_last_event_is_read_though_the_status_is_stored_first(tmp_path, monkeypatch):
    """The runner stores "done", then writes study_done: a follower that read the status
    before the event was written still yields it (within the grace, made long here so that a
    loaded machine cannot make the test flaky)."""
    import core.results.follow as follow

    monkeypatch.setattr(follow, "LAST_EVENT_GRACE_S", 60.0)
    store, name = _study(tmp_path)
    store.claim_runner(name)
    store.emit(name, "study_started", model="m")
    store.set_study(name, status="done", runner_pid=None)
    t = threading.Timer(0.3, lambda: store.emit(name, "study_done"))
    t.start()
    try:
        kinds = [ev.kind for ev in store.follow(name, poll_s=0.02)]
    finally:
        t.join()
    assert kinds == ["study_started", "study_done"]
