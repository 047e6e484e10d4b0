"""Invariants of the scheduler simulation, over random workloads and tight KV caches.

Each example runs a small load point on a KV cache sized to a few hundred to a few
thousand tokens, so preemption, admission stalls and prefix caching all happen.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core.catalog import load_model, resolve_hardware
from core.simulate import InfeasibleConfig
from core.simulate.sim import simulate_detailed
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.workload import LengthDist, Workload

ARCH = load_model("Qwen/Qwen3-4B")
HW = resolve_hardware(gpu="L4", num_gpus=2)


@st.composite
def cases(draw):
    # gpu_memory_utilization 0.375-0.42 leaves ~1k-8k tokens of KV for this model on an L4.
    util = draw(st.sampled_from([0.375, 0.38, 0.39, 0.40, 0.42]))
    seqs = draw(st.integers(1, 24))
    mbt = draw(st.integers(max(seqs, 16), 512))
    cfg = ServerConfig(
        model="Qwen/Qwen3-4B",
        tp=1,
        dp=draw(st.sampled_from([1, 2])),
        max_num_seqs=seqs,
        max_num_batched_tokens=mbt,
        max_model_len=256,
        gpu_memory_utilization=util,
        enable_prefix_caching=draw(st.booleans()),
        extra_args={"num_scheduler_steps": draw(st.sampled_from([1, 4]))},
    )
    in_mean = draw(st.integers(1, 200))
    out_mean = draw(st.integers(1, 60))
    wl = Workload(
        input=LengthDist(kind="uniform", mean=in_mean, range_ratio=draw(st.sampled_from([0.0, 0.5, 1.0]))),
        output=LengthDist(kind="uniform", mean=out_mean, range_ratio=draw(st.sampled_from([0.0, 0.9]))),
        shared_prefix_len=draw(st.sampled_from([0, 16, 40, 100])),
        num_prompts=draw(st.integers(1, 40)),
        warmup=draw(st.sampled_from([0, 0, 3])),
    )
    if draw(st.booleans()):
        load = LoadPoint(concurrency=draw(st.integers(1, 64)))
    else:
        load = LoadPoint(
            request_rate=draw(st.floats(0.5, 200.0)),
            arrival=draw(st.sampled_from(["constant", "poisson", "gamma"])),
            burstiness=draw(st.sampled_from([0.3, 1.0, 3.0])),
            concurrency=draw(st.one_of(st.none(), st.integers(1, 32))),
        )
    router = draw(st.sampled_from(["least-loaded", "round-robin"]))
    timeout = draw(st.one_of(st.none(), st.floats(0.05, 5.0)))
    # None: the V1 scheduler; an old vLLM: the V0 prefill-first scheduler (multi-step too).
    version = draw(st.sampled_from([None, "0.5.3", "0.6.0"]))
    return cfg, wl, load, router, timeout, version, draw(st.integers(0, 2**16))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_request_accounted_tokens_add_up_and_kv_within_capacity(case):
    cfg, wl, load, router, timeout, version, seed = case
    try:
        res, reps, reqs = simulate_detailed(ARCH, HW, cfg, wl, load, seed, router=router, request_timeout_s=timeout, engine_version=version)
    except InfeasibleConfig:
        assume(False)
        return
    n = load.num_prompts or wl.num_prompts
    recs = res.records

    # Every request is recorded exactly once, and it either finished or failed.
    assert sorted(r.index for r in recs) == list(range(n))
    done = [r for r in recs if r.ok]
    failed = [r for r in recs if not r.ok]
    assert len(done) + len(failed) == n
    assert all(r.error for r in failed)
    assert res.summary["completed"] == len(done) and res.summary["failed"] == len(failed)
    assert all(r.simulated for r in recs) and res.summary["simulated"] is True

    # Token counts add up: each finished request streamed exactly the tokens it asked for,
    # one per chunk, in time order, after it was sent.
    for r in done:
        rid = wl.warmup + r.index
        assert r.output_tokens == reqs.O[rid]
        assert len(r.chunk_times) == r.output_tokens == int(np.sum(r.chunk_tokens))
        assert r.input_tokens == reqs.P[rid]
        assert np.all(np.diff(r.chunk_times) >= 0)
        assert r.chunk_times[0] > r.send_time
        assert r.end_time == r.chunk_times[-1]
    assert res.summary["total_output_tokens"] == sum(r.output_tokens for r in done)
    # Failures here can only be prompts that cannot fit max_model_len, or timeouts.
    for r in failed:
        rid = wl.warmup + r.index
        if r.error.startswith("timeout"):
            assert timeout is not None and r.end_time == pytest.approx(r.send_time + timeout)
        else:
            assert reqs.P[rid] + reqs.O[rid] > cfg.max_model_len
    if timeout is not None:
        assert all(r.end_time - r.send_time <= timeout + 1e-9 for r in done)

    # KV use never exceeded capacity, and every block came back (except the pinned prefix).
    for rep in reps:
        assert 0 <= rep.peak_used <= rep.total_blocks
        assert rep.free == rep.total_blocks - rep.pinned
        assert rep.n_dec == 0 and not rep.prefilling and not rep.waiting and rep.kv_sum == 0
        assert rep.v0 == (version is not None)
        assert sum(rep.phase) == 0
    assert 0.0 <= res.peak_kv_usage <= 1.0
    assert np.all(res.timeseries["kv_usage"] <= 1.0)
    assert np.all(res.timeseries["running"] <= cfg.seqs * cfg.dp)

    # The client never has more requests in flight than its concurrency (a request that
    # ends frees its slot for one sent at the same instant).
    if load.concurrency is not None:
        events = sorted([(r.send_time, 1) for r in recs] + [(r.end_time, -1) for r in recs if r.end_time is not None])
        in_flight = peak = 0
        for _, d in events:
            in_flight += d
            peak = max(peak, in_flight)
        assert peak <= load.concurrency


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_deterministic_for_a_seed(case):
    cfg, wl, load, router, timeout, version, seed = case
    kw = dict(router=router, request_timeout_s=timeout, engine_version=version)
    try:
        a = simulate_detailed(ARCH, HW, cfg, wl, load, seed, **kw)[0]
    except InfeasibleConfig:
        assume(False)
        return
    b = simulate_detailed(ARCH, HW, cfg, wl, load, seed, **kw)[0]
    assert [(r.send_time, r.end_time, r.output_tokens) for r in a.records] == [(r.send_time, r.end_time, r.output_tokens) for r in b.records]
    assert a.preemptions == b.preemptions and a.steps == b.steps
