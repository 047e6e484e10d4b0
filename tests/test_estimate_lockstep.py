"""A burst of fixed-length requests that runs as one wave (core/estimate/lockstep.py),
checked against the simulator's scheduler, which admits, evicts and recomputes step by step
as vLLM does."""

import pytest

from core.catalog import get_gpu, load_model
from core.estimate import Predictor
from core.estimate.lockstep import one_wave
from core.spec.workload import Workload


def _simulated(arch, gpu, cfg, wl, n):
    from core.simulate import simulate
    from core.spec.hardware import Hardware
    from core.spec.serving import LoadPoint

    return simulate(arch, Hardware(gpu=gpu, num_gpus=cfg.tp), cfg, wl, LoadPoint(concurrency=n, num_prompts=n))


@pytest.mark.parametrize("n", [50, 75, 90])
def test_a_wave_that_outgrows_the_kv_cache_evicts_and_finishes_late_like_the_simulator(n):
    """1,024/1,024-token prompts on a quarter of an A100 (94,624 tokens of KV cache): a burst of
    50-90 is admitted at once (its prompts fit) but only 46 can finish together. The steady
    state's cap, KV / (I + O/2) = 61, priced these bursts at 1.14-1.36x the simulator's
    throughput (1.18x at 75), as if the evicted requests' decode overlapped the survivors'."""
    arch, gpu = load_model("Qwen/Qwen2-7B-Instruct"), get_gpu("A100-80GB")
    wl = Workload.fixed(1024, 1024).model_copy(update={"num_prompts": n})
    p = Predictor(arch, gpu, wl, gpu_memory_utilization=0.25)
    cfg = p.config(1)
    kv = p.memory(cfg).kv_tokens
    assert n * 1024 <= kv < n * 2048  # admitted together, cannot finish together
    est = p.max_throughput(cfg, num_prompts=n)
    sim = _simulated(arch, gpu, cfg, wl, n)
    assert sim.preemptions > 0 and est.limited_by == "kv_cache"
    assert est.output_tok_per_s == pytest.approx(sim.summary["output_throughput"], rel=0.05)
    assert est.tpot_ms.mean == pytest.approx(sim.summary["mean_tpot_ms"], rel=0.08)
    assert est.ttft_ms.mean == pytest.approx(sim.summary["mean_ttft_ms"], rel=0.08)


def test_a_wave_of_long_prompts_prefills_before_it_decodes():
    """A burst that fits the cache whole still runs as one wave: the prompts' prefill, then the
    decode at the full batch; the steady state overlapped the two (its throughput is for
    requests whose lifetimes are staggered): 40 prompts of 4,000/180 tokens on an A100, 448
    tok/s against the simulator's 413 (the wave: 399); on the published Qwen3-235B bursts of
    the same shape (gpustack-057's configuration, 30-75 prompts) 1.16-1.42x."""
    arch, gpu = load_model("meta-llama/Llama-3.1-8B-Instruct"), get_gpu("A100-80GB")
    n = 40
    wl = Workload.fixed(4000, 180).model_copy(update={"num_prompts": n})
    p = Predictor(arch, gpu, wl)
    cfg = p.config(1)
    assert n * (4000 + 180) <= p.memory(cfg).kv_tokens
    est = p.max_throughput(cfg, num_prompts=n)
    sim = _simulated(arch, gpu, cfg, wl, n)
    assert sim.preemptions == 0 and est.limited_by == "load"
    assert est.output_tok_per_s == pytest.approx(sim.summary["output_throughput"], rel=0.08)
    # The steady state at the same batch is the overlap the wave does not have.
    from core.estimate.steady import steady_state

    staggered = steady_state(p.shape, p.cost_model(1, "auto", cfg.stream_interval), n, p._knobs(cfg)[0])
    simulated = sim.summary["output_throughput"]
    assert abs(est.output_tok_per_s - simulated) < abs(staggered.throughput * 180 - simulated)


def test_one_wave_needs_the_prompts_to_fit_and_the_evicted_to_fit_after():
    from core.estimate.steady import Shape

    wl = Workload.fixed(1000, 1000)
    shape = Shape(wl.input, wl.output, 0.0, 1000.0, 1000.0, True)
    kv = 100_000
    assert one_wave(shape, 60, kv, 256)  # 60k of prompts, 120k at the end: 10 evicted
    assert one_wave(shape, 40, kv, 256)  # fits whole
    assert not one_wave(shape, 101, kv, 256)  # the prompts alone do not fit
    assert not one_wave(shape, 60, kv, 32)  # max_num_seqs admits a first wave of 32 only
    assert not one_wave(shape, 1, kv, 256)
    long_answers = Shape(wl.input, Workload.fixed(1000, 4000).output, 0.0, 1000.0, 4000.0, True)
    # 50 of 1,000 + 4,000 tokens end at 250k: the 30 evicted would not fit after the rest.
    assert not one_wave(long_answers, 50, kv, 256)


def test_a_closed_loop_with_no_more_prompts_than_its_concurrency_is_a_burst():
    """A sweep's burst point (concurrency N, N prompts) sends every prompt at once: it is
    priced as the burst it is, not as a closed loop whose waves repeat (which put TTFT at 2.6x
    and throughput at 1.16x the one-wave burst, itself within 1% of the simulator above)."""
    arch, gpu = load_model("Qwen/Qwen2-7B-Instruct"), get_gpu("A100-80GB")
    wl = Workload.fixed(1024, 1024).model_copy(update={"num_prompts": 75})
    p = Predictor(arch, gpu, wl, gpu_memory_utilization=0.25)
    cfg = p.config(1)
    burst = p.max_throughput(cfg, num_prompts=75)
    for concurrency in (75, 128):
        closed = p.predict(cfg, concurrency=concurrency, num_prompts=75)
        assert closed.output_tok_per_s == pytest.approx(burst.output_tok_per_s)
        assert closed.ttft_ms.mean == pytest.approx(burst.ttft_ms.mean)
    # More prompts than the concurrency: a closed loop again.
    assert p.predict(cfg, concurrency=75, num_prompts=300).output_tok_per_s != pytest.approx(burst.output_tok_per_s)


def test_a_burst_of_sharegpt_prompts_drains_like_the_simulator():
    """The same for lengths that vary: 200 ShareGPT-like prompts sent at once to an 8B model on
    an A100. As a closed loop (each request replaced as it ends) knee priced the point at
    5,081 tok/s; nothing replaces them, the batch thins as the short answers end and the long
    ones decode almost alone (core.estimate.waves.burst): the simulator 1,506 tok/s."""
    from core.spec.lengths import sharegpt

    arch, gpu = load_model("meta-llama/Llama-3.1-8B-Instruct"), get_gpu("A100-80GB")
    i, o = sharegpt()
    wl = Workload(input=i, output=o, dataset="sharegpt", num_prompts=200)
    p = Predictor(arch, gpu, wl)
    cfg = p.config(1)
    est = p.predict(cfg, concurrency=200, num_prompts=200)
    sim = _simulated(arch, gpu, cfg, wl, 200).summary
    assert est.output_tok_per_s == pytest.approx(sim["output_throughput"], rel=0.10)
    assert est.ttft_ms.mean == pytest.approx(sim["mean_ttft_ms"], rel=0.10)
    assert est.tpot_ms.mean == pytest.approx(sim["mean_tpot_ms"], rel=0.15)
