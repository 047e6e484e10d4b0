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
