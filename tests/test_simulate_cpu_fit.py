"""A CPU step profile for the simulator, fitted from measurements, and checked against real
vLLM on CPU (the tiny local model).

The realvllm test measures the real server (the shared real_vllm fixture, no CPU pinning or
real-time priority) at concurrencies 1-32, fits a profile on 1, 2 and 32 (the fixed costs
and the per-sequence cost) and checks what does not depend on the machine's speed: every
run complete with exact token counts, a fitted profile with finite non-negative costs, and a
simulated curve that rises with concurrency. How close the simulated throughput curve comes
to the measured one (issue 5's "within 25%"; measured 2-4% on a quiet box, 28-33% while other
suites loaded it) depends on the machine's other work during the measurement, so issue 10
moved that figure to bench/sim_cpu_fit.py, which prints it; the test prints it too.
"""

import math
import statistics
from dataclasses import replace

import pytest

from core.catalog import load_model
from core.errors import BadInput
from core.simulate import simulate
from core.simulate.profiles import MeasuredPoint, StepProfile, cpu_hardware, fit_step_profile
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.workload import Workload

ISL, OSL = 128, 128
CONCURRENCIES = (1, 2, 4, 8, 16, 32)
FIT = (1, 2, 32)  # fitted on; 4, 8 and 16 are predicted
KV_GIB = 1  # VLLM_CPU_KVCACHE_SPACE the real-vLLM fixture sets


def sim_point(arch, hw, config, profile, c, kv_tokens):
    return simulate(
        arch,
        hw,
        config,
        Workload.fixed(ISL, OSL, num_prompts=max(48, 8 * c)),
        LoadPoint(concurrency=c),
        cost=profile,
        kv_tokens=kv_tokens,
    ).summary


@pytest.fixture(scope="module")
def qwen():
    return load_model("Qwen/Qwen3-4B")


def test_step_profile_prices_steps_linearly():
    p = StepProfile("x", step_s=1e-3, seq_s=2e-4, token_s=1e-6, request_overhead_s=0.1)
    assert p.step_seconds(0, 0, 0, 0, 0) == 0.0
    assert p.step_seconds(0, 0, 0, 10, 5000) == pytest.approx(1e-3 + 10 * 2e-4 + 10 * 1e-6)
    assert p.step_seconds(500, 0, 500, 2, 100, prefill_seqs=1) == pytest.approx(1e-3 + 3 * 2e-4 + 502 * 1e-6)


def test_fit_recovers_a_known_profile_through_the_scheduler(qwen):
    hw = cpu_hardware()
    config = ServerConfig(model="q", max_model_len=4096)
    true = StepProfile("true", step_s=8e-4, seq_s=2.5e-4, token_s=5e-6, request_overhead_s=0.15)
    points = []
    for c in FIT:
        s = sim_point(qwen, hw, config, true, c, 1 << 20)
        points.append(MeasuredPoint(c, ISL, OSL, s["mean_ttft_ms"] / 1e3, s["mean_tpot_ms"] / 1e3))
    fit = fit_step_profile(points, qwen, hw, config, kv_tokens=1 << 20)
    assert fit.step_s == pytest.approx(true.step_s, rel=0.05)
    assert fit.seq_s == pytest.approx(true.seq_s, rel=0.05)
    assert fit.request_overhead_s == pytest.approx(true.request_overhead_s, rel=0.05)
    assert fit.token_s == pytest.approx(true.token_s, rel=0.1)
    with pytest.raises(BadInput):
        fit_step_profile(points[:1], qwen, hw, config)
    # A point whose TPOT was not observed (NaN: every token reached the client in one read) is
    # left out, not turned into a NaN profile; with too few left the fit says why.
    unobserved = MeasuredPoint(FIT[-1] * 2, ISL, OSL, points[-1].ttft_s, float("nan"))
    again = fit_step_profile([*points, unobserved], qwen, hw, config, kv_tokens=1 << 20)
    assert again.step_s == pytest.approx(fit.step_s, rel=1e-6) and again.seq_s == pytest.approx(fit.seq_s, rel=1e-6)
    with pytest.raises(BadInput, match="TPOT observed"):
        fit_step_profile([points[0], unobserved], qwen, hw, config)


def test_a_client_that_cannot_keep_its_slots_full_caps_the_request_rate(qwen):
    hw = cpu_hardware()
    config = ServerConfig(model="q", max_model_len=4096)
    free = StepProfile("free", step_s=1e-3, seq_s=1e-5, token_s=0.0, request_overhead_s=0.005)
    capped = StepProfile("capped", step_s=1e-3, seq_s=1e-5, token_s=0.0, request_overhead_s=0.005, client_send_s=0.05)
    fast = sim_point(qwen, hw, config, free, 8, 1 << 20)
    slow = sim_point(qwen, hw, config, capped, 8, 1 << 20)
    assert fast["request_throughput"] > 40
    # At most one send per 50 ms: 20 requests/s, whatever the slots allow.
    assert slow["request_throughput"] == pytest.approx(20.0, rel=0.1)
    # The wait is before the send, outside the request's own clock: its latency does not grow
    # with it (the batch it joins is smaller, so it shrinks).
    assert slow["mean_e2el_ms"] <= fast["mean_e2el_ms"] * 1.01
    # One slot sends slower than the ceiling: the ceiling changes nothing there.
    one_free, one_capped = sim_point(qwen, hw, config, free, 1, 1 << 20), sim_point(qwen, hw, config, capped, 1, 1 << 20)
    assert one_capped["request_throughput"] == pytest.approx(one_free["request_throughput"], rel=0.01)


def test_the_fit_finds_the_client_ceiling_and_predicts_the_points_it_did_not_see(qwen):
    hw = cpu_hardware()
    config = ServerConfig(model="q", max_model_len=4096)
    true = StepProfile("true", step_s=1e-3, seq_s=2e-5, token_s=0.0, request_overhead_s=0.01, client_send_s=0.06)
    measured = {}
    for c in (1, 2, 4, 8):
        s = sim_point(qwen, hw, config, true, c, 1 << 20)
        measured[c] = s
    points = [
        MeasuredPoint(
            c,
            ISL,
            OSL,
            measured[c]["mean_ttft_ms"] / 1e3,
            measured[c]["mean_tpot_ms"] / 1e3,
            req_per_s=measured[c]["request_throughput"],
            in_flight=measured[c]["concurrency"],
        )
        for c in (1, 2, 8)
    ]
    assert points[-1].in_flight < 0.5 * 8  # the signature: 8 slots, fewer than 4 requests in flight
    fit = fit_step_profile(points, qwen, hw, config, kv_tokens=1 << 20)
    assert fit.client_send_s == pytest.approx(true.client_send_s, rel=0.1)
    got = sim_point(qwen, hw, config, fit, 4, 1 << 20)
    assert got["request_throughput"] == pytest.approx(measured[4]["request_throughput"], rel=0.1)
    # Without the measured rates the fit cannot see the ceiling, and predicts more at c=4.
    blind = fit_step_profile([replace(p, req_per_s=None) for p in points], qwen, hw, config, kv_tokens=1 << 20)
    assert blind.client_send_s == 0.0
    assert sim_point(qwen, hw, config, blind, 4, 1 << 20)["request_throughput"] > 1.3 * measured[4]["request_throughput"]
    # A client that kept its slots full: a rate below the scheduler's is the server's cost
    # (a profile that prices it wrong), never a cap on what the profile predicts.
    full = fit_step_profile([replace(p, in_flight=p.concurrency) for p in points], qwen, hw, config, kv_tokens=1 << 20)
    assert full.client_send_s == 0.0


def test_the_fit_stays_finite_on_points_a_starved_client_measured(qwen):
    """Points measured on vLLM-CPU (2 cores, 64/64 tokens, max_num_seqs 4) while the client
    was held off the CPU (TTFT here: the mean E2E less the observed decode): its rate stopped
    near 24/s and the TPOT line is not a line. Before each round's correction was bounded,
    these drove the per-sequence cost to 2e10 s, and the next simulated run to 1e13 s."""
    hw = cpu_hardware()
    measured = [  # (max_num_seqs, concurrency, TTFT ms, TPOT ms, req/s, requests in flight)
        (4, 1, 18.9, 1.20, 10.1, 0.96),
        (4, 2, 73.7, 0.34, 11.3, 1.08),
        (4, 4, 39.8, 1.07, 21.4, 2.30),
        (4, 8, 72.3, 1.24, 24.2, 3.64),
    ]
    points = [
        MeasuredPoint(
            c, 64, 64, ttft / 1e3, tpot / 1e3, config=ServerConfig(model="q", max_model_len=2048, max_num_seqs=seqs), req_per_s=rps, in_flight=held
        )
        for seqs, c, ttft, tpot, rps, held in measured
    ]
    fit = fit_step_profile(points, qwen, hw, points[0].config, kv_tokens=1 << 16)
    costs = (fit.step_s, fit.seq_s, fit.token_s, fit.request_overhead_s, fit.client_send_s)
    assert all(math.isfinite(v) and 0 <= v < 1.0 for v in costs), fit
    s = simulate(
        qwen,
        hw,
        ServerConfig(model="q", max_model_len=2048, max_num_seqs=16),
        Workload.fixed(64, 64, num_prompts=32),
        LoadPoint(concurrency=1),
        cost=fit,
        kv_tokens=1 << 16,
    ).summary
    assert s["completed"] == 32 and s["duration"] < 60


def test_kv_tokens_override_sets_the_cache(qwen):
    hw = cpu_hardware()
    p = StepProfile("x", 1e-3, 1e-4, 0.0)
    r = simulate(
        qwen,
        hw,
        ServerConfig(model="q", max_model_len=512),
        Workload.fixed(200, 200, num_prompts=40),
        LoadPoint(concurrency=40),
        cost=p,
        kv_tokens=4000,
    )
    assert r.kv_capacity_tokens == 4000 and r.preemptions > 0 and r.summary["completed"] == 40


@pytest.mark.realvllm
def test_fitted_cpu_profile_from_the_real_server(real_vllm, tiny_model_dir):
    from core.load.datasets import load_tokenizer

    tok = load_tokenizer(str(tiny_model_dir))
    measured, profile, sims, lines = measure_and_fit(real_vllm, tiny_model_dir, tok, rounds=1)
    print("\n".join(lines))
    for v in profile.as_dict().values():
        if isinstance(v, float):
            assert math.isfinite(v) and v >= 0, lines
    thr = [sims[c]["output_throughput"] for c in CONCURRENCIES]
    assert all(b > a for a, b in zip(thr, thr[1:])), lines
    assert all(sims[c]["completed"] > 0 for c in CONCURRENCIES)


def measure_and_fit(server, model_dir, tok, rounds: int):
    """Measure the real server at CONCURRENCIES (median of ``rounds`` runs each, up then down
    the curve), fit on FIT, simulate every concurrency; returns (measured, profile, sims,
    printable lines). Shared with bench/sim_cpu_fit.py."""
    from core.load.datasets import make_prompts
    from core.load.openai import OpenAITarget
    from core.load.runner import run_load_sync

    target = OpenAITarget(server.url, server.model_name, api_key=server.api_key)
    runs = {c: [] for c in CONCURRENCIES}
    for r in range(rounds):
        for c in CONCURRENCIES if r % 2 == 0 else CONCURRENCIES[::-1]:
            n = max(16, 8 * c)
            prompts = make_prompts(Workload.fixed(ISL, OSL, num_prompts=n, seed=r), tok)
            res = run_load_sync(target, prompts, LoadPoint(concurrency=c, num_prompts=n), warmup=min(c, 4))
            assert res.summary["failed"] == 0 and res.summary["total_output_tokens"] == n * OSL
            runs[c].append(res.summary)
    measured = {
        c: {m: statistics.median(x[m] for x in runs[c]) for m in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")} for c in CONCURRENCIES
    }
    arch = load_model(str(model_dir))
    hw = cpu_hardware()
    config = ServerConfig(model=server.model_name, max_model_len=2048)
    kv_tokens = int(KV_GIB * 2**30 // arch.kv_bytes_per_token())
    points = [MeasuredPoint(c, ISL, OSL, measured[c]["mean_ttft_ms"] / 1e3, measured[c]["mean_tpot_ms"] / 1e3) for c in FIT]
    profile = fit_step_profile(points, arch, hw, config, kv_tokens=kv_tokens, name="cpu-2core")
    sims = {c: sim_point(arch, hw, config, profile, c, kv_tokens) for c in CONCURRENCIES}
    apes = {c: abs(sims[c]["output_throughput"] - measured[c]["output_throughput"]) / measured[c]["output_throughput"] for c in CONCURRENCIES}
    lines = [f"CPU profile (simulated figures below): {profile.as_dict()}"]
    for c in CONCURRENCIES:
        m, s = measured[c], sims[c]
        lines.append(
            f"c={c:<3d} out tok/s measured {m['output_throughput']:7.1f} simulated {s['output_throughput']:7.1f} "
            f"({apes[c]:.0%})  TTFT {m['mean_ttft_ms']:.0f}/{s['mean_ttft_ms']:.0f} ms  "
            f"TPOT {m['mean_tpot_ms']:.2f}/{s['mean_tpot_ms']:.2f} ms"
        )
    lines.append(
        f"median APE over concurrencies: {statistics.median(apes.values()):.0%}, worst {max(apes.values()):.0%} (issue 5's goal: each <= 25%)"
    )
    return measured, profile, sims, lines


def test_the_client_ceiling_never_falls_below_a_rate_the_client_measured(qwen):
    """One starved point at a low rate (a noisy stretch of a shared box) and a later point
    that sent faster: the ceiling is the fastest rate measured, not the starved point's, so
    the profile never predicts less than the client was seen to send."""
    hw = cpu_hardware()
    config = ServerConfig(model="q", max_model_len=4096)
    true = StepProfile("true", step_s=1e-3, seq_s=2e-5, token_s=0.0, request_overhead_s=0.01, client_send_s=0.02)
    points = []
    for c in (1, 2, 8):
        s = sim_point(qwen, hw, config, true, c, 1 << 20)
        points.append(
            MeasuredPoint(
                c, ISL, OSL, s["mean_ttft_ms"] / 1e3, s["mean_tpot_ms"] / 1e3, req_per_s=s["request_throughput"], in_flight=s["concurrency"]
            )
        )
    fastest = max(p.req_per_s for p in points)
    # The c=2 point starved at a third of its rate: alone, it would set a ceiling below c=8's.
    slow = replace(points[1], req_per_s=points[1].req_per_s / 3, in_flight=1.0)
    assert slow.req_per_s < fastest / 2
    fit = fit_step_profile([points[0], slow, points[2]], qwen, hw, config, kv_tokens=1 << 20)
    assert 0 < fit.client_send_s <= 1.0 / fastest * 1.001
    assert sim_point(qwen, hw, config, fit, 8, 1 << 20)["request_throughput"] > 0.7 * fastest
