"""The sweep's typed events (core/spec/events.py): what real sim sweeps emit parses into each
kind's model, stored studies from other knee versions still read, and the runner refuses an
event that does not fit its model."""

from __future__ import annotations

import json
import threading

import pytest

from core.results.store import StudyStore
from core.spec.events import KINDS, GenericEvent, PointDone, Progress, StudyStarted, TrialStarted, parse_event
from core.sweep import build_spec, create_study
from core.sweep.runner import Runner
from core.sweep.workers import JoinedRunner, join_study


def sim_spec(**kw):
    args = dict(
        engine="sim",
        server_args="tensor_parallel_size=[1,4]",
        client_args="max_concurrency=[8,32];num_prompts=100",
        constraints="e2e_latency:p99<60s",
        instance="ml.g6.12xlarge",
    )
    args.update(kw)
    return build_spec("Qwen/Qwen3-4B", **args)


def assert_all_typed(store: StudyStore, name: str) -> set[str]:
    """Every stored event of the study reads as its own model (no generic fallback); its kinds."""
    events = store.events(name)
    assert events
    for e in events:
        ev = e.event
        assert not isinstance(ev, GenericEvent), f"{e.kind} read as generic: {e.data}"
        assert ev.kind == e.kind and not ev.model_extra, (e.kind, ev.model_extra)
    return {e.kind for e in events}


def test_every_kind_a_grid_sweep_with_a_pause_and_a_failed_trial_emits_parses_into_its_model(tmp_path):
    store = StudyStore(tmp_path / "knee.db")
    # TP 8 needs more GPUs than the instance has: a failed trial among the measured ones.
    name = create_study(store, sim_spec(server_args="tensor_parallel_size=[1,8]"), "grid")
    store.request_state(name, "pause")  # the runner waits at its first checkpoint, then goes on
    threading.Timer(0.5, lambda: store.request_state(name, "run")).start()
    seen: list[tuple[str, dict]] = []
    Runner(store, name, install_signals=False, on_event=lambda k, d: seen.append((k, d))).run()
    kinds = assert_all_typed(store, name)
    assert kinds >= {
        "study_started",
        "paused",
        "continued",
        "trial_started",
        "server_ready",
        "progress",
        "point_done",
        "trial_done",
        "trial_failed",
        "study_done",
    }
    # Stored as emitted: the JSON a viewer reads back is the data the runner passed.
    assert [(e.kind, e.data) for e in store.events(name)] == [(k, json.loads(json.dumps(d))) for k, d in seen]
    started = store.events(name, kinds=["study_started"])[0].event
    assert isinstance(started, StudyStarted) and started.simulated is True and started.planned_trials == 2
    done = [e.event for e in store.events(name, kinds=["point_done"])]
    assert all(isinstance(d, PointDone) and d.status == "ok" and d.output_throughput and d.output_throughput > 0 for d in done)
    ends = [e.event for e in store.events(name, kinds=["progress"])]
    assert all(isinstance(p, Progress) and p.phase in ("start", "end") for p in ends)


def test_an_sla_sweep_and_a_joined_worker_emit_only_declared_kinds_and_fields(tmp_path):
    store = StudyStore(tmp_path / "knee.db")
    sla = create_study(store, sim_spec(strategy="sla", client_args="max_concurrency=[1,8,32,128];num_prompts=100"), "sla")
    Runner(store, sla, install_signals=False).run()
    assert "point_done" in assert_all_typed(store, sla)

    spec, _ = join_study(store, sim_spec(), "joined")
    JoinedRunner(store, "joined", spec=spec, install_signals=False, workspace=tmp_path).run()
    kinds = assert_all_typed(store, "joined")
    assert {"study_started", "worker_done", "study_done"} <= kinds
    every = store.events("joined")
    assert all(isinstance(e.event.worker, str) and e.event.worker for e in every)  # a worker signs each event
    assert store.events("joined", kinds=["study_started"])[0].event.host


def test_an_older_studys_event_with_an_extra_key_and_a_missing_field_still_reads(tmp_path):
    store = StudyStore(tmp_path / "knee.db")
    # Written by hand as an older (or newer) knee might have: no log_path or gpus, a key this
    # version does not declare.
    store.emit("old", "trial_started", trial_id=3, server_args={"tensor_parallel_size": 2}, engine="vllm", retired_field=1)
    ev = store.events("old")[0].event
    assert isinstance(ev, TrialStarted)
    assert ev.trial_id == 3 and ev.server_args == {"tensor_parallel_size": 2} and ev.log_path is None and ev.gpus is None
    assert ev.model_extra == {"retired_field": 1}


def test_an_unknown_kind_and_a_stored_event_of_the_wrong_shape_read_as_generic(tmp_path):
    store = StudyStore(tmp_path / "knee.db")
    store.emit("s", "from_the_future", answer=42)
    store.emit("s", "point_done", trial_id="not a number", status="ok")
    future, odd = (e.event for e in store.events("s"))
    assert isinstance(future, GenericEvent) and future.kind == "from_the_future" and future.model_extra == {"answer": 42}
    assert isinstance(odd, GenericEvent) and odd.kind == "point_done" and odd.model_extra == {"trial_id": "not a number", "status": "ok"}
    assert "from_the_future" not in KINDS
    assert isinstance(parse_event("progress", {"completed": 3, "total": 10}), Progress)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"trial_id": "x"}, "trial_id"),  # a wrong type
        ({"trail_id": 1}, "trail_id"),  # a misspelt field
    ],
)
def test_the_runner_refuses_to_emit_an_event_that_does_not_fit_its_model(tmp_path, bad, match):
    store = StudyStore(tmp_path / "knee.db")
    name = create_study(store, sim_spec(), "bad")
    runner = Runner(store, name, install_signals=False)
    with pytest.raises(ValueError, match=match):
        runner.emit("trial_done", **{"status": "ok", "points": 1, **bad})
    with pytest.raises(ValueError, match="unknown sweep event kind"):
        runner.emit("trial_finished", trial_id=1)
    assert store.events(name) == []  # nothing was stored


def test_a_live_sweep_logs_an_event_that_does_not_fit_and_goes_on(tmp_path, monkeypatch, caplog):
    """Outside the tests (no KNEE_STRICT_EVENTS) an event's shape never stops a sweep: the
    mismatch is logged as an error, and the event is stored as emitted."""
    monkeypatch.delenv("KNEE_STRICT_EVENTS")
    store = StudyStore(tmp_path / "knee.db")
    name = create_study(store, sim_spec(), "live")
    runner = Runner(store, name, install_signals=False)
    with caplog.at_level("ERROR", logger="core.sweep.run"):
        runner.emit("trial_done", trial_id="x", status="ok", points=1)
    assert "sweep event trial_done does not match core/spec/events.py" in caplog.text and "trial_id" in caplog.text
    (ev,) = store.events(name)
    assert ev.kind == "trial_done" and ev.data == {"trial_id": "x", "status": "ok", "points": 1}
