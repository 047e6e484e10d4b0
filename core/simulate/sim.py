"""``simulate()``: one load point on one server configuration, in virtual time.

The driver around :mod:`core.simulate.engine`: it builds the memory plan and the cost model
(the estimator's, so the simulator and the estimator never disagree about the hardware),
draws the requests, plays the client (closed loop, open loop, open loop with a concurrency
cap, warm-up), routes requests over data-parallel replicas, steps the replica whose clock
is earliest, and turns what happened into the same :class:`RequestRecord` s and summary the
real load client produces, every one labelled simulated.

Infeasible configurations raise :class:`InfeasibleConfig` where a real vLLM would refuse to
start (:mod:`core.simulate.feasibility`). The client and its event loop are
:mod:`core.simulate.client`; the result, :mod:`core.simulate.outcome`.

The client is played as knee's load generator (``core.load.runner``) plays it, with its
own dataset draws and schedules (``core.load.datasets.sample_lengths``,
``core.load.schedule.arrival_times``), so a simulated load point asks for what the real
one asks for:

- dataset: ``workload.num_prompts + workload.warmup`` prompts whose lengths are drawn from
  ``workload.seed`` in the order ``make_prompts`` draws them; the ``shared-prefix``
  dataset prepends ``shared_prefix_len`` common tokens (ISL = prefix + drawn suffix).
  ShareGPT and corpus files are not read: their lengths come from the workload's
  distributions;
- closed loop (``concurrency`` without ``request_rate``): ``concurrency`` requests at
  t = 0, each next one sent the moment one completes; no scheduled time;
- open loop (``request_rate``): the load generator's schedule for ``seed``; with a
  ``concurrency`` cap, a request waits at the client for a free slot and its
  ``scheduled_time`` keeps the schedule, so ``client_queue_time`` shows the wait;
- ``load.num_prompts`` measured requests (default: the dataset's, cycled); with
  ``load.duration_s``, nothing is sent after it and what is still in flight
  ``grace_s`` later is cancelled and recorded as failed;
- warm-up: ``workload.warmup`` requests from the end of the dataset, a burst capped at the
  concurrency, not recorded; the measured load point starts when they have all finished,
  with whatever they left in the prefix cache (t = 0 of the records is that moment);
- the API server's cost: a request reaches the engine ``request_overhead_s`` after it was
  sent (HTTP, tokenization, queue ingest; this is part of TTFT) and the i-th streamed token
  leaves ``i·output_token_overhead_s`` after its step (detokenize, stream).

Prompts longer than ``max_model_len`` minus the output (vLLM answers HTTP 400) fail at
once and are recorded with their error.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from core.errors import BadInput
from core.estimate.costmodel import CostModel
from core.estimate.params import engine_profile
from core.estimate.engine_memory import engine_kv_dtype, engine_memory_utilization
from core.estimate.memory import BLOCK_TOKENS
from core.load.datasets import sample_lengths
from core.load.schedule import arrival_times
from core.simulate.client import SimClient
from core.simulate.engine import Replica
from core.simulate.requests import BLOCK, Requests
from core.simulate.scheduler_v0 import replica_class

# Callers import these from here too (core.simulate, the sweep, the live server's tests).
from core.simulate.feasibility import InfeasibleConfig, apply_quantization, check_config, scheduler_generation
from core.simulate.outcome import SimResult, build_result
from core.spec.engine_defaults import with_engine_defaults
from core.spec.hardware import Hardware
from core.spec.model import ModelArch
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.workload import Workload

__all__ = ["ROUTERS", "InfeasibleConfig", "SimResult", "check_config", "scheduler_generation", "simulate", "simulate_detailed"]

assert BLOCK == BLOCK_TOKENS  # one block size for the memory plan and the scheduler

ROUTERS = ("least-loaded", "round-robin")


@dataclasses.dataclass
class _ClientState:
    """The simulated client's counters, shared by the callbacks of one run."""

    origin: float = 0.0  # when the measured requests start (after the warm-up)
    busy0: float = 0.0  # the replicas' busy time at that moment
    sent: int = 0  # measured requests sent
    warm_sent: int = 0
    warm_left: int = 0


def simulate(
    arch: ModelArch,
    hardware: Hardware,
    config: ServerConfig,
    workload: Workload,
    load: LoadPoint,
    seed: int = 0,
    **options,
) -> SimResult:
    """Simulate one load point of ``workload`` on ``config`` (see the module docstring).

    Deterministic: the same arguments give the same records. The request lengths come from
    ``workload.seed`` and the open-loop schedule from ``seed``, as in the load generator
    (``make_prompts`` and ``run_load(seed=...)``).

    ``options`` are :func:`simulate_detailed`'s keyword-only arguments (declared there once,
    with their defaults):
    ``engine``, ``engine_version``: whose scheduler and cost profile (default current vLLM).
    ``router`` spreads requests over ``config.dp`` replicas (``least-loaded``: fewest
    running + waiting, as vLLM's data-parallel front end does; ``round-robin``: as a plain
    load balancer does).
    ``request_timeout_s``: the client gives up on a request that has not completed this
    long after it was sent (the engine aborts it, freeing its KV cache; it is recorded as
    failed), as the real client does with its timeout.
    ``grace_s``: with ``load.duration_s``, how long in-flight requests may still finish.
    ``sample_interval_s``: spacing of the time series (default: about 500 samples).
    ``cost``: prices the steps instead of the estimator's cost model (anything with its
    ``step_seconds``, ``request_overhead_s`` and ``output_token_overhead_s``, e.g. a fitted
    :class:`core.simulate.profiles.StepProfile` for a CPU host); ``kv_tokens``: the KV
    cache per replica when it is set directly rather than planned (vLLM on CPU).
    Raises :class:`InfeasibleConfig` where a real vLLM would not start.
    """
    return simulate_detailed(arch, hardware, config, workload, load, seed, **options)[0]


def simulate_detailed(
    arch: ModelArch,
    hardware: Hardware,
    config: ServerConfig,
    workload: Workload,
    load: LoadPoint,
    seed: int = 0,
    *,
    engine: str = "vllm",
    engine_version: str | None = None,
    router: str = "least-loaded",
    request_timeout_s: float | None = None,
    grace_s: float = 30.0,
    sample_interval_s: float | None = None,
    cost=None,
    kv_tokens: int | None = None,
) -> tuple[SimResult, list[Replica], Requests]:
    """:func:`simulate` (whose docstring describes the arguments), also returning the
    replicas and the per-request state (for tests and diagnostics)."""
    if router not in ROUTERS:
        raise BadInput(f"unknown router {router!r}", f"use one of {', '.join(ROUTERS)}")
    arch = apply_quantization(arch, config)
    config = with_engine_defaults(config, engine, engine_version, hardware.gpu)
    # The engine's own KV sizing (TensorRT-LLM: FP8 KV with FP8 weights, and a fraction of
    # the memory left after the weights), as the estimator sizes it.
    profile = engine_profile(engine, engine_version)
    kv = engine_kv_dtype(profile, arch, config.kv_cache_dtype)
    if kv != config.kv_cache_dtype:
        config = config.model_copy(update={"kv_cache_dtype": kv})
    mem = check_config(arch, hardware, config)
    gmu = engine_memory_utilization(profile, mem, config.gpu_memory_utilization)
    if gmu != config.gpu_memory_utilization:
        config = config.model_copy(update={"gpu_memory_utilization": gmu})
        mem = check_config(arch, hardware, config)
    if kv_tokens is not None:
        if kv_tokens < BLOCK:
            raise BadInput(f"kv_tokens must hold one block ({BLOCK} tokens) at least, got {kv_tokens}")
        mem = dataclasses.replace(mem, kv_tokens=int(kv_tokens) // BLOCK * BLOCK)
    if cost is None:
        cost = CostModel(arch, hardware.gpu, config.tp, config.kv_cache_dtype, engine, engine_version, config.stream_interval)

    # The dataset, drawn exactly as the load generator's make_prompts draws it (same seed,
    # same order), so a simulated load point asks for the same lengths as the real one.
    warm = workload.warmup
    n_data = workload.num_prompts + warm
    rng = np.random.default_rng(workload.seed)
    ins = sample_lengths(workload.input, n_data, rng)
    outs = sample_lengths(workload.output, n_data, rng)
    if workload.prepended_len:
        # Every prompt is the shared prefix followed by a drawn suffix (ISL = prefix + suffix).
        pre = workload.prepended_len
        Pd, prefd = (ins + pre).tolist(), [pre] * n_data
    else:
        Pd, prefd = ins.tolist(), [0] * n_data
    Od = outs.tolist()
    reqs = Requests([], [], [])

    total_blocks = mem.kv_tokens // BLOCK
    v0, steps = scheduler_generation(config, engine, engine_version)
    # V0 without chunked prefill budgets a step by the longest prompt it must take whole.
    max_tokens = config.max_num_batched_tokens or (max(mem.max_model_len, 2048) if v0 else config.batched_tokens)
    sim = SimClient(reqs, [], cost, mem.max_model_len, router)
    sim.replicas = [
        replica_class(v0)(
            i,
            reqs,
            cost,
            total_blocks,
            config.seqs,
            max_tokens,
            config.enable_prefix_caching,
            sim.finished,
            scheduler_steps=steps,
            schedules_ahead=cost.steps_ahead > 0,
        )
        for i in range(config.dp)
    ]

    # The client, as core.load.runner plays it.
    closed = load.request_rate is None
    conc = load.concurrency
    if conc is not None:
        sim.cap = conc
    if request_timeout_s is not None:
        if not request_timeout_s > 0:
            raise BadInput(f"request timeout must be positive, got {request_timeout_s}")
        sim.timeout = float(request_timeout_s)
    # How many measured requests: the load point's count, else the dataset's; with only a
    # duration, as many as fit in it (prompts cycle).
    n = load.num_prompts if load.num_prompts is not None else (None if load.duration_s else workload.num_prompts)
    duration = load.duration_s if load.duration_s is not None else math.inf
    state = _ClientState(warm_left=warm)

    def measured_request(i: int) -> int:
        j = i % n_data
        return sim.create(Pd[j], Od[j], prefd[j], True)

    def warm_request(i: int) -> int:
        j = (n_data - 1 - i) % n_data  # from the end of the dataset, as the runner does
        return sim.create(Pd[j], Od[j], prefd[j], False)

    def start_measured(t0: float) -> None:
        state.origin = t0
        state.busy0 = sum(r.busy_s for r in sim.replicas)  # warm-up work is not measured
        if load.duration_s is not None:
            sim.push(t0 + load.duration_s + grace_s, 4, -1)
        if closed:
            assert conc is not None  # LoadPoint: no request rate means a concurrency
            first = conc if n is None else min(conc, n)
            for i in range(first):
                sim.push(t0, 0, measured_request(i))
            state.sent = first
        else:
            assert load.request_rate is not None  # open loop
            times = arrival_times(load.request_rate, n, load.arrival, load.burstiness, seed, duration_s=load.duration_s if n is None else None)
            for i, ts in enumerate(times.tolist()):
                if ts >= duration:
                    break
                rid = measured_request(i)
                sim.sched[rid] = t0 + ts
                sim.push(t0 + ts, 0, rid)

    warm_rids: set[int] = set()

    def after_finish(rid: int, end: float) -> None:
        if rid in warm_rids:
            state.warm_left -= 1
            if state.warm_sent < warm:
                nxt = warm_request(state.warm_sent)
                warm_rids.add(nxt)
                state.warm_sent += 1
                sim.push(end, 0, nxt)
            if state.warm_left == 0:
                sim.cap = conc if conc is not None else 1 << 62
                start_measured(end)
            return
        if closed and (n is None or state.sent < n) and end - state.origin < duration:
            sim.push(end, 0, measured_request(state.sent))
            state.sent += 1

    sim.after_finish = after_finish
    if warm:
        # Warm-up: a burst capped at the load point's concurrency (or the warm-up count),
        # whatever the rate, then the measured load point starts when all are done.
        first = min(conc or warm, warm)
        sim.cap = first
        for i in range(first):
            rid = warm_request(i)
            warm_rids.add(rid)
            sim.push(0.0, 0, rid)
        state.warm_sent = first
    else:
        start_measured(0.0)

    # Time-series spacing: about 500 samples over a rough guess of the run's length.
    if sample_interval_s is None:
        guess = cost.step_seconds(0, 0, 0, 1, 1024) * float(np.mean(Od)) * max(1.0, (n or 1000) / max(conc or 64, 1))
        sample_interval_s = max(guess / 500.0, 1e-3)
    series: dict[str, list] = {"t": [], "running": [], "waiting": [], "kv_usage": []}
    sim.run(sample_interval_s, series)

    return build_result(sim, reqs, state.origin, state.busy0, mem, series, config.stream_interval), sim.replicas, reqs
