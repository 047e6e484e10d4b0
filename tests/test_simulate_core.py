"""The simulator's behaviour: the walkthrough trade-offs, load modes, memory, replicas."""

import pytest

from core.catalog import load_model, resolve_hardware
from core.errors import BadInput, RunFailed
from core.simulate import InfeasibleConfig, SimResult, simulate
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.workload import LengthDist, Workload


MODEL = "Qwen/Qwen3-4B"


@pytest.fixture(scope="module")
def arch():
    return load_model(MODEL)


@pytest.fixture(scope="module")
def g6():
    return resolve_hardware(instance="ml.g6.12xlarge")


def run(arch, hw, *, tp=1, dp=1, mbt=8192, conc=None, rate=None, n=200, wl=None, **cfg):
    wl = wl or Workload.fixed(1024, 512, num_prompts=n)
    config = ServerConfig(model=MODEL, tp=tp, dp=dp, max_num_batched_tokens=mbt, **cfg)
    return simulate(arch, hw, config, wl, LoadPoint(concurrency=conc, request_rate=rate))


def test_walkthrough_tradeoffs_point_the_right_way(arch, g6):
    thr = {}
    p99 = {}
    for tp in (1, 4):
        for c in (32, 64, 128):
            s = run(arch, g6, tp=tp, conc=c, n=256).summary
            thr[tp, c] = s["output_throughput"]
            p99[tp, c] = s["p99_e2el_ms"]
    for c in (32, 64, 128):
        assert thr[4, c] > 1.5 * thr[1, c]  # TP4 beats TP1 on throughput
    for tp in (1, 4):
        assert p99[tp, 32] < p99[tp, 64] < p99[tp, 128]  # tail latency grows with load
        # Throughput saturates: doubling concurrency gains less the second time.
        assert thr[tp, 128] / thr[tp, 64] < thr[tp, 64] / thr[tp, 32]
    assert thr[1, 128] / thr[1, 64] < 1.15  # TP1 is KV-bound well before c=128


def test_result_is_labelled_simulated_and_summarized_like_a_real_run(arch, g6):
    r = run(arch, g6, tp=2, conc=16, n=50)
    assert isinstance(r, SimResult) and r.simulated
    assert r.summary["simulated"] is True
    assert all(rec.simulated for rec in r.records)
    assert r.summary["completed"] == 50 and r.summary["failed"] == 0
    assert r.summary["total_output_tokens"] == 50 * 512
    assert r.summary["duration"] == pytest.approx(r.duration_s)
    assert r.summary["request_throughput"] == pytest.approx(50 / r.duration_s)
    # TTFT includes the API server's per-request overhead, so it is never below it.
    assert r.summary["mean_ttft_ms"] > 0
    assert set(r.timeseries) == {"t", "running", "waiting", "kv_usage"}
    assert r.timeseries["running"].max() <= 16


def test_out_of_memory_raises_with_the_memory_plans_reason(g6):
    big = load_model("meta-llama/Llama-3.1-70B")
    with pytest.raises(InfeasibleConfig) as e:
        simulate(big, g6, ServerConfig(model="x", tp=1), Workload.fixed(100, 10), LoadPoint(concurrency=1))
    assert e.value.kind == "out of memory"
    assert "weights need" in e.value.reason and e.value.memory is not None and not e.value.memory.fits
    assert isinstance(e.value, RunFailed)


@pytest.mark.parametrize(
    "cfg, words",
    [
        (dict(tp=4, dp=2), "needs 8 GPUs"),
        (dict(tp=3), "do not split"),
        (dict(max_num_batched_tokens=64, max_num_seqs=128), "at least max_num_seqs"),
    ],
)
def test_invalid_configurations_raise(arch, g6, cfg, words):
    with pytest.raises(InfeasibleConfig) as e:
        simulate(arch, g6, ServerConfig(model=MODEL, **cfg), Workload.fixed(100, 10), LoadPoint(concurrency=1))
    assert e.value.kind == "invalid configuration" and words in e.value.reason


def test_bad_router_is_bad_input(arch, g6):
    with pytest.raises(BadInput):
        simulate(arch, g6, ServerConfig(model=MODEL), Workload.fixed(10, 10), LoadPoint(concurrency=1), router="random")


def test_kv_pressure_preempts_and_every_request_still_completes(arch):
    l4 = resolve_hardware(gpu="L4", num_gpus=1)
    wl = Workload.fixed(200, 300, num_prompts=60)
    cfg = ServerConfig(model=MODEL, max_model_len=512, gpu_memory_utilization=0.42, max_num_seqs=64, max_num_batched_tokens=512)
    r = simulate(arch, l4, cfg, wl, LoadPoint(concurrency=60))
    assert r.kv_capacity_tokens < 60 * 500  # far less than the batch wants
    assert r.preemptions > 0
    assert r.peak_kv_usage <= 1.0
    assert r.summary["completed"] == 60
    assert all(rec.output_tokens == 300 for rec in r.records)


def test_an_evicted_request_finds_its_own_blocks_in_the_prefix_cache_when_readmitted():
    """vLLM V1 frees an evicted request's blocks to the back of the free queue, still
    cached: readmitted before allocations reach them, it computes only what was lost. A
    prompt longer than the budget is admitted on its first chunk and evicts itself for the
    next when the cache is full; recomputed from scratch each time, the simulator thrashed
    (GPUStack's 32k-token prompts on an A100: 1,881 preemptions for 100 requests, 0.31x the
    measured throughput; 105 and 0.84x with the cache)."""
    from core.catalog import get_gpu
    from core.spec.hardware import Hardware

    arch = load_model("meta-llama/Llama-3.1-8B")
    hw = Hardware(gpu=get_gpu("A100-80GB"), num_gpus=1)
    wl = Workload.fixed(4000, 200, num_prompts=400)
    runs = {
        cached: simulate(
            arch,
            hw,
            ServerConfig(model="meta-llama/Llama-3.1-8B", gpu_memory_utilization=0.3, max_model_len=8192, enable_prefix_caching=cached),
            wl,
            LoadPoint(concurrency=256),
        )
        for cached in (True, False)
    }
    assert runs[True].kv_capacity_tokens < 20 * 4200  # the cache holds a handful of requests
    assert runs[False].preemptions > 2 * 400  # recomputing from scratch, it thrashes
    assert runs[True].preemptions < 400 / 4 and runs[True].prefix_hits > 0
    assert runs[True].summary["request_throughput"] > 1.5 * runs[False].summary["request_throughput"]
    assert all(r.summary["completed"] == 400 for r in runs.values())


def test_prefix_caching_hits_and_cuts_ttft(arch, g6):
    # ISL = 1536 shared + 512 drawn, as the load generator builds shared-prefix prompts.
    wl = Workload.fixed(512, 64, num_prompts=200, dataset="shared-prefix", shared_prefix_len=1536)
    on = run(arch, g6, conc=16, wl=wl)
    off = run(arch, g6, conc=16, wl=wl, enable_prefix_caching=False)
    # All but the requests admitted in the step that first computes the prefix hit it.
    assert on.prefix_hits >= 190 and off.prefix_hits == 0
    assert all(r.input_tokens == 2048 for r in on.records)
    assert on.summary["mean_ttft_ms"] < 0.7 * off.summary["mean_ttft_ms"]
    assert on.summary["request_throughput"] > off.summary["request_throughput"]


def test_open_loop_below_capacity_keeps_up_with_the_rate(arch, g6):
    r = run(arch, g6, tp=4, rate=1.0, n=100)
    s = r.summary
    # 100 requests at 1 req/s: sent over 100 s, each takes a few seconds.
    assert 100 < r.duration_s < 130
    assert s["mean_client_queue_time_ms"] == 0.0
    sends = [rec.send_time for rec in r.records]
    # The load generator's schedule: cumulative gaps, rescaled so the last send is at n / rate.
    assert sends == sorted(sends) and sends[0] >= 0.0 and sends[-1] == pytest.approx(100.0)
    assert all(rec.scheduled_time == rec.send_time for rec in r.records)


def test_open_loop_with_a_cap_queues_at_the_client(arch, g6):
    config = ServerConfig(model=MODEL, tp=4)
    r = simulate(arch, g6, config, Workload.fixed(1024, 256, num_prompts=100), LoadPoint(request_rate=50.0, concurrency=8))
    assert r.summary["mean_client_queue_time_ms"] > 1000
    assert (r.timeseries["running"] + r.timeseries["waiting"]).max() <= 8  # the server never sees more


def test_past_saturation_ttft_explodes_in_open_loop(arch, g6):
    low = run(arch, g6, tp=2, rate=0.5, n=100).summary
    high = run(arch, g6, tp=2, rate=20.0, n=100).summary
    assert high["mean_ttft_ms"] > 10 * low["mean_ttft_ms"]
    assert high["output_throughput"] > low["output_throughput"]


def test_data_parallel_replicas_share_the_load(arch, g6):
    one = run(arch, g6, tp=1, dp=1, conc=128, n=256)
    four = run(arch, g6, tp=1, dp=4, conc=128, n=256)
    rr = run(arch, g6, tp=1, dp=4, conc=128, n=256)
    assert four.replicas == 4
    assert four.summary["output_throughput"] > 3 * one.summary["output_throughput"]
    assert rr.summary["completed"] == 256
    # Four replicas of TP1 hold four times the KV cache: no preemption at c=128.
    assert four.preemptions == 0 and one.preemptions > 0


def test_round_robin_and_least_loaded_differ_on_uneven_requests(arch, g6):
    wl = Workload(
        input=LengthDist(kind="uniform", mean=1000, range_ratio=0.9), output=LengthDist(kind="uniform", mean=400, range_ratio=0.9), num_prompts=300
    )
    cfg = ServerConfig(model=MODEL, tp=1, dp=4)
    ll = simulate(arch, g6, cfg, wl, LoadPoint(request_rate=6.0), router="least-loaded").summary
    rr = simulate(arch, g6, cfg, wl, LoadPoint(request_rate=6.0), router="round-robin").summary
    assert ll["completed"] == rr["completed"] == 300
    assert ll["mean_e2el_ms"] != rr["mean_e2el_ms"]


def test_warmup_is_not_recorded(arch, g6):
    wl = Workload.fixed(256, 64, num_prompts=40, warmup=10, shared_prefix_len=256, dataset="shared-prefix")
    r = run(arch, g6, conc=8, wl=wl)
    assert len(r.records) == 40 and sorted(x.index for x in r.records) == list(range(40))
    assert min(x.send_time for x in r.records) == 0.0
    # The warm-up filled the prefix cache, so even the first measured requests hit it.
    assert r.prefix_hits >= 40


def test_prompt_longer_than_max_model_len_fails_once_with_http_400(arch, g6):
    wl = Workload(input=LengthDist(kind="uniform", mean=600, range_ratio=0.9), output=LengthDist.of(100), num_prompts=50)
    r = run(arch, g6, conc=4, wl=wl, max_model_len=700)
    bad = [x for x in r.records if x.error]
    assert bad and all("HTTP 400" in x.error for x in bad)
    assert all(x.input_tokens + 100 > 700 for x in bad)
    assert r.summary["failed"] == len(bad) and r.summary["completed"] == 50 - len(bad)


def test_duration_stops_sending(arch, g6):
    config = ServerConfig(model=MODEL, tp=4)
    r = simulate(arch, g6, config, Workload.fixed(256, 64, num_prompts=1000), LoadPoint(request_rate=2.0, duration_s=10))
    assert 8 <= len(r.records) <= 32  # Poisson at 2 req/s for 10 s
    assert max(x.send_time for x in r.records) < 10
    assert r.summary["failed"] == 0


def test_after_the_duration_and_grace_in_flight_requests_are_cancelled(arch, g6):
    config = ServerConfig(model=MODEL, tp=1)
    wl = Workload.fixed(1024, 2000, num_prompts=100)
    r = simulate(arch, g6, config, wl, LoadPoint(concurrency=8, duration_s=20), grace_s=5.0)
    cancelled = [x for x in r.records if x.error == "cancelled after the grace period"]
    assert len(cancelled) == 8  # nothing finishes 2000 tokens within 25 s on one L4
    assert all(x.end_time == pytest.approx(25.0) for x in cancelled)
    assert r.duration_s == pytest.approx(25.0)


def test_same_seed_same_run_other_seed_other_run(arch, g6):
    wl = Workload(input=LengthDist(kind="uniform", mean=500, range_ratio=0.5), output=LengthDist.of(100), num_prompts=50)
    a = run(arch, g6, rate=4.0, wl=wl)
    b = run(arch, g6, rate=4.0, wl=wl)
    assert [x.chunk_times.tolist() for x in a.records] == [x.chunk_times.tolist() for x in b.records]
    c = simulate(arch, g6, ServerConfig(model=MODEL, max_num_batched_tokens=8192), wl, LoadPoint(request_rate=4.0), seed=1)
    assert c.summary["mean_e2el_ms"] != a.summary["mean_e2el_ms"]


def test_timeouts_abort_requests_and_free_the_engine(arch, g6):
    config = ServerConfig(model=MODEL, tp=1)
    wl = Workload.fixed(1024, 512, num_prompts=200)
    r = simulate(arch, g6, config, wl, LoadPoint(request_rate=5.0), request_timeout_s=30.0)
    timed_out = [x for x in r.records if x.error and x.error.startswith("timeout")]
    assert timed_out and r.summary["failed"] == len(timed_out)
    assert all(x.end_time == pytest.approx(x.send_time + 30.0) for x in timed_out)
    assert all(x.e2e <= 30.0 for x in r.records if x.ok)
    assert r.summary["completed"] + r.summary["failed"] == 200


def test_old_vllm_runs_the_prefill_first_v0_scheduler(arch, g6):
    from core.simulate.sim import scheduler_generation

    assert scheduler_generation(ServerConfig(model=MODEL), "vllm", "0.4.3") == (True, 1)
    assert scheduler_generation(ServerConfig(model=MODEL), "vllm", "0.15.1") == (False, 1)
    assert scheduler_generation(ServerConfig(model=MODEL), "vllm", None) == (False, 1)
    multi = ServerConfig(model=MODEL, extra_args={"num-scheduler-steps": 10})
    assert scheduler_generation(multi, "vllm", "0.6.0") == (True, 10)
    chunked = ServerConfig(model=MODEL, extra_args={"enable_chunked_prefill": True})
    assert scheduler_generation(chunked, "vllm", "0.6.0") == (False, 1)
    assert scheduler_generation(ServerConfig(model=MODEL), "sglang", "0.3.0") == (False, 1)
    # vLLM 0.8-0.10 started with VLLM_USE_V1=0 is named V0 outright (core.estimate.params.engine_under_env).
    assert scheduler_generation(ServerConfig(model=MODEL), "vllm-v0", "0.9.1") == (True, 1)
    assert scheduler_generation(chunked, "vllm-v0", "0.9.1") == (False, 1)

    wl = Workload.fixed(512, 128, num_prompts=150)
    load = LoadPoint(request_rate=4.0)
    cfg = ServerConfig(model=MODEL, tp=2)
    v0 = simulate(arch, g6, cfg, wl, load, engine_version="0.6.0").summary
    ms = simulate(arch, g6, cfg.model_copy(update={"extra_args": {"num_scheduler_steps": 8}}), wl, load, engine_version="0.6.0").summary
    # Multi-step scheduling makes an arrival wait for the decode group to end.
    assert ms["mean_ttft_ms"] > v0["mean_ttft_ms"] + 20
    assert v0["completed"] == ms["completed"] == 150


def test_stream_interval_paces_less_and_sends_tokens_in_messages():
    """--stream-interval N: the API server's per-message work covers N tokens, so where
    streaming paces the steps (SGLang, hundreds running) throughput rises, in the simulator
    and the estimator alike; a client sees N tokens a message (chunk_itl about N x itl),
    while ITL per token and TPOT stay per token. A bad value is one line of bad input."""
    from core.catalog import get_gpu
    from core.estimate import Predictor

    arch, hw = load_model("meta-llama/Llama-3.1-8B"), resolve_hardware(gpu="H100-SXM", num_gpus=1)
    wl = Workload.fixed(300, 120, num_prompts=400)
    p = Predictor(arch, get_gpu("H100-SXM"), wl, engine="sglang")
    one, eight = (p.config(1, extra_args={"stream_interval": n}) for n in (1, 8))
    sim1, sim8 = (simulate(arch, hw, c, wl, LoadPoint(concurrency=256), engine="sglang") for c in (one, eight))
    assert sim8.summary["output_throughput"] > 1.2 * sim1.summary["output_throughput"]
    est1, est8 = (p.predict(c, concurrency=256) for c in (one, eight))
    assert est8.output_tok_per_s > 1.2 * est1.output_tok_per_s
    rec = sim8.records[-1]
    assert rec.output_tokens == 120 and list(rec.chunk_tokens[:3]) == [1, 8, 8] and sum(rec.chunk_tokens) == 120
    assert sim8.summary["mean_chunk_itl_ms"] > 5 * sim8.summary["mean_itl_ms"]
    assert sim1.summary["mean_chunk_itl_ms"] == pytest.approx(sim1.summary["mean_itl_ms"])
    # At one running request streaming never paces: nothing to gain.
    assert p.predict(eight, concurrency=1).output_tok_per_s == pytest.approx(p.predict(one, concurrency=1).output_tok_per_s)
    with pytest.raises(BadInput, match="stream_interval must be a whole number"):
        p.predict(p.config(1, extra_args={"stream-interval": "fast"}), concurrency=8)
