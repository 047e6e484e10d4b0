"""Ending a load point early once throughput and latency have converged."""

import random
import sys
from pathlib import Path

from core.results.store import StudyStore
from core.spec.study import EngineSpec
from core.sweep import build_spec, create_study
from core.sweep.converge import Convergence
from core.sweep.runner import Runner


def feed(conv, n, e2e_of, conc=4, tokens=32):
    """Closed loop: each of `conc` slots completes a request every e2e seconds."""
    rng = random.Random(0)
    slots = [0.0] * conc
    for i in range(n):
        k = min(range(conc), key=lambda j: slots[j])
        e2e = e2e_of(i) * (1 + rng.uniform(-0.02, 0.02))
        slots[k] += e2e
        conv.add(slots[k], e2e, tokens)
        if conv.check():
            return i + 1
    return None


def test_steady_state_converges_after_enough_requests():
    conv = Convergence(concurrency=4)
    at = feed(conv, 1000, lambda i: 0.5)
    assert at is not None and 60 <= at <= 200


def test_drifting_latency_does_not_converge():
    conv = Convergence(concurrency=4)
    assert feed(conv, 300, lambda i: 0.5 + i * 0.01) is None  # a queue that keeps growing


def test_short_points_always_run_to_the_end():
    conv = Convergence(concurrency=32)
    assert feed(conv, 90, lambda i: 0.5, conc=32) is None  # needs 3 x concurrency steady requests


def test_early_stop_on_a_real_server(tmp_path):
    cadence = Path(__file__).resolve().parent / "support" / "cadence_server.py"
    engine = EngineSpec(
        kind="custom", command=f"{sys.executable} {cadence} --port {{port}} --model {{model}} --ttft 0.005 --itl 0.001", start_timeout_s=20
    )
    spec = build_spec(
        "cadence",
        engine=engine,
        framework=None,
        client_args="max_concurrency=[4];num_prompts=2000;random_input_len=8;random_output_len=16",
        early_stop=True,
    )
    store = StudyStore(tmp_path / "knee.db")
    name = create_study(store, spec, "es")
    Runner(store, name, workspace=tmp_path).run()
    p = store.points(name)[0]
    assert p.status == "ok" and p.summary["early_stopped"] is True
    assert p.summary["failed"] == 0 and 60 <= p.summary["completed"] < 2000
    assert p.summary["requests_not_sent"] > 0
    assert p.summary["completed"] + p.summary["requests_not_sent"] <= 2000
    assert len(store.records(name, p.point_id)) == p.summary["completed"]
