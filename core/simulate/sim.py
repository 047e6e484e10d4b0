"""``simulate()``: one load point on one server configuration, in virtual time.

The driver around :mod:`core.simulate.engine`: it builds the memory plan and the cost model
(the estimator's, so the simulator and the estimator never disagree about the hardware),
draws the requests, plays the client (closed loop, open loop, open loop with a concurrency
cap, warm-up), routes requests over data-parallel replicas, steps the replica whose clock
is earliest, and turns what happened into the same :class:`RequestRecord` s and summary the
real load client produces, every one labelled simulated.

Infeasible configurations raise :class:`InfeasibleConfig` (a :class:`RunFailed`), exactly
where a real vLLM would refuse to start: the model does not fit in memory (the memory
plan's reason), more GPUs than the hardware has, heads that do not split over TP, or
``max_num_batched_tokens`` below ``max_num_seqs``. ``.kind`` is ``"out of memory"`` or
``"invalid configuration"``; the sweep stores the trial as failed with that kind and
``.reason``.

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
import heapq
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from core.errors import BadInput, RunFailed
from core.estimate.costmodel import CostModel
from core.estimate.memory import BLOCK_TOKENS, MemoryPlan, plan_memory
from core.load.metrics import summarize
from core.load.datasets import sample_lengths
from core.load.schedule import arrival_times
from core.simulate.engine import BLOCK, DONE, FAILED, PENDING, Replica, Requests
from core.spec.engine_defaults import with_engine_defaults
from core.spec.hardware import Hardware
from core.spec.model import WEIGHT_BYTES, ModelArch, Quantization
from core.spec.records import RequestRecord
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.workload import Workload

assert BLOCK == BLOCK_TOKENS  # one block size for the memory plan and the scheduler

ROUTERS = ("least-loaded", "round-robin")


class InfeasibleConfig(RunFailed):
    """The configuration cannot run: a real vLLM would refuse to start."""

    def __init__(self, kind: str, reason: str, memory: MemoryPlan | None = None):
        self.kind = kind  # "out of memory" | "invalid configuration"
        self.reason = reason
        self.memory = memory
        super().__init__(f"{kind}: {reason}")


@dataclass
class SimResult:
    """One simulated load point. Every number in it is simulated (``simulated`` is True)."""

    records: list[RequestRecord]
    duration_s: float  # first send to the last response (vLLM's ``duration``), virtual seconds
    summary: dict  # core.load.metrics.summarize(...) plus "simulated": True
    memory: MemoryPlan  # per replica
    replicas: int
    steps: int  # engine steps, all replicas
    preemptions: int
    prefix_hits: int  # admissions that found the shared prefix cached
    kv_capacity_tokens: int  # per replica
    peak_kv_usage: float  # highest fraction of a replica's KV blocks in use
    busy_fraction: float  # time the engines spent stepping / (replicas × duration)
    # Time series for the live panel (virtual seconds from the start of the load point),
    # summed over replicas except kv_usage (the mean fraction of blocks in use).
    timeseries: dict[str, np.ndarray] = field(default_factory=dict)
    simulated: bool = True


def _apply_quantization(arch: ModelArch, config: ServerConfig) -> ModelArch:
    """A ``--quantization`` on the server overrides the checkpoint's weight format."""
    q = (config.quantization or "").lower()
    if not q or q == arch.quantization.method:
        return arch
    if q not in WEIGHT_BYTES:
        raise BadInput(f"unknown quantization {config.quantization!r}", f"use one of {', '.join(WEIGHT_BYTES)}")
    return arch.model_copy(update={"quantization": Quantization(method=q, scope=arch.quantization.scope)})


def check_config(arch: ModelArch, hardware: Hardware, config: ServerConfig) -> MemoryPlan:
    """The memory plan of one replica, or :class:`InfeasibleConfig` where vLLM would not start.
    The server's ``quantization`` applies (an fp8 server loads fp8 weights)."""
    arch = _apply_quantization(arch, config)
    if config.num_gpus > hardware.num_gpus:
        raise InfeasibleConfig(
            "invalid configuration",
            f"needs {config.num_gpus} GPUs (TP{config.tp} x DP{config.dp}), {hardware.label} has {hardware.num_gpus}",
        )
    if arch.num_heads % config.tp:
        raise InfeasibleConfig(
            "invalid configuration", f"{arch.num_heads} attention heads do not split over TP{config.tp}"
        )
    if config.batched_tokens < config.seqs:
        raise InfeasibleConfig(
            "invalid configuration",
            f"max_num_batched_tokens ({config.batched_tokens}) must be at least max_num_seqs ({config.seqs})",
        )
    mem = plan_memory(
        arch,
        hardware.gpu,
        config.tp,
        gpu_memory_utilization=config.gpu_memory_utilization,
        max_model_len=config.max_model_len,
        max_num_batched_tokens=config.batched_tokens,
        max_num_seqs=config.seqs,
        kv_dtype=config.kv_cache_dtype,
    )
    if not mem.fits:
        raise InfeasibleConfig("out of memory", mem.reason or "does not fit", mem)
    return mem


def _arg(config: ServerConfig, name: str):
    """An engine argument from ``extra_args`` in either spelling."""
    ea = config.extra_args
    return ea.get(name, ea.get(name.replace("_", "-")))


def _truthy(v) -> bool:
    return v is not None and str(v).strip().lower() not in ("0", "false", "no", "off")


def scheduler_generation(config: ServerConfig, engine: str, engine_version: str | None) -> tuple[bool, int]:
    """(V0 scheduler?, scheduler steps per decision) for this engine and configuration.

    vLLM before 0.8 ran the V0 engine, whose default online scheduler is prefill-first
    without chunked prefill (``--enable-chunked-prefill`` switches to budgeted chunks,
    which the V1 model covers); ``--num-scheduler-steps`` (0.6-0.7) is multi-step
    scheduling. Every other engine, and vLLM 0.8 on, is modelled by the V1 scheduler.
    """
    name = (engine or "vllm").lower()
    v0 = False
    if name in ("vllm", "sim") and engine_version:
        try:
            major, minor = (int(x) for x in engine_version.split(".")[:2])
            v0 = (major, minor) < (0, 8)
        except ValueError:
            v0 = False
    if v0 and _truthy(_arg(config, "enable_chunked_prefill")):
        v0 = False
    steps = 1
    if v0:
        raw = _arg(config, "num_scheduler_steps")
        if raw is not None:
            try:
                steps = max(1, int(raw))
            except (TypeError, ValueError):
                raise BadInput(f"num_scheduler_steps must be an integer, got {raw!r}") from None
    return v0, steps


class _Sim:
    """The client, the router and the replicas of one load point."""

    def __init__(self, reqs: Requests, replicas: list[Replica], cost, max_len: int, router: str):
        self.reqs = reqs
        self.replicas = replicas
        self.api_s = cost.request_overhead_s
        self.tok_s = cost.output_token_overhead_s
        self.max_len = max_len
        self.router = router
        self._rr = 0
        self.events: list[tuple[float, int, int, int]] = []  # (time, tie, kind, rid)
        self._tie = 0
        self.send: list[float] = []
        self.sched: list[float | None] = []
        self.client_end: list[float] = []  # when the client saw the last token (or the error)
        self.measured: list[int] = []  # request ids of the load point, in send/schedule order
        self.in_flight = 0
        self.cap = 1 << 62
        self.client_queue: list[int] = []  # FIFO via index
        self._cq_head = 0
        self.timeout = math.inf  # client request timeout (s after send)
        self.after_finish: Callable[[int, float], None] | None = None

    def create(self, prompt_len: int, output_len: int, prefix_len: int, measured: bool) -> int:
        rid = self.reqs.add(prompt_len, output_len, prefix_len)
        self.send.append(math.nan)
        self.sched.append(None)
        self.client_end.append(math.nan)
        if measured:
            self.measured.append(rid)
        return rid

    def cancel_in_flight(self, t: float) -> None:
        """The load point's grace period is over: the client cancels what is still running."""
        R = self.reqs
        for rid in self.measured:
            if not math.isnan(self.send[rid]) and R.state[rid] not in (DONE, FAILED):
                self.give_up(rid, t, "cancelled after the grace period")

    def fail(self, rid: int, t: float, reason: str) -> None:
        """A request that never reaches the engine fails at ``t`` (the client sees it then)."""
        R = self.reqs
        R.state[rid] = FAILED
        R.error[rid] = reason
        R.end[rid] = t
        self.finished(rid, t)

    def give_up(self, rid: int, t: float, reason: str) -> None:
        """The client abandons an unfinished request: one still in the API server never
        reaches the engine; one on the engine is aborted there (freeing its KV cache)."""
        R = self.reqs
        if R.state[rid] == PENDING:
            self.fail(rid, t, reason)
        else:
            self.replicas[R.replica[rid]].abort(rid, t, reason)

    # Event kinds: 0 = the schedule wants to send, 1 = the request reaches the engine,
    # 2 = the client has received the whole response, 3 = the client's timeout fires.
    def push(self, t: float, kind: int, rid: int) -> None:
        self._tie += 1
        heapq.heappush(self.events, (t, self._tie, kind, rid))

    def do_send(self, rid: int, t: float) -> None:
        self.send[rid] = t
        self.in_flight += 1
        self.push(t + self.api_s, 1, rid)
        if self.timeout < math.inf:
            self.push(t + self.timeout, 3, rid)

    def time_out(self, rid: int, t: float) -> None:
        R = self.reqs
        st = R.state[rid]
        if st == DONE or st == FAILED:
            return
        self.give_up(rid, t, f"timeout: no complete response within {self.timeout:g} s")

    def want_send(self, rid: int, t: float) -> None:
        if self.in_flight < self.cap:
            self.do_send(rid, t)
        else:
            self.client_queue.append(rid)

    def arrive(self, rid: int, t: float) -> None:
        R = self.reqs
        if R.state[rid] == FAILED:  # timed out before it got here
            return
        if R.P[rid] + R.O[rid] > self.max_len:
            self.fail(rid, t, (
                f"HTTP 400: prompt ({R.P[rid]} tokens) plus max_tokens ({R.O[rid]}) exceeds "
                f"max_model_len {self.max_len}"
            ))
            return
        reps = self.replicas
        if len(reps) == 1:
            rep = reps[0]
        elif self.router == "round-robin":
            rep = reps[self._rr % len(reps)]
            self._rr += 1
        else:  # least-loaded: fewest running + waiting, ties to the lowest index
            rep = min(reps, key=Replica.load)
        if not rep.has_work and rep.t < t:
            rep.t = t  # an idle engine picks the request up at once
        rep.enqueue(rid)

    def finished(self, rid: int, t: float) -> None:
        """A request completed or failed on the engine at engine time ``t``; the client
        sees its last token (and frees its slot) once the API server has streamed it."""
        R = self.reqs
        end = t + R.O[rid] * self.tok_s if R.state[rid] == DONE else t
        deadline = self.send[rid] + self.timeout
        if end > deadline:
            # Finished within the step that straddled the client's deadline: the client had
            # already given up, so it is a timeout all the same.
            R.state[rid] = FAILED
            R.error[rid] = f"timeout: no complete response within {self.timeout:g} s"
            end = deadline
        self.client_end[rid] = end
        self.push(end, 2, rid)

    def client_done(self, rid: int, end: float) -> None:
        self.in_flight -= 1
        if self.after_finish is not None:
            self.after_finish(rid, end)
        if self._cq_head < len(self.client_queue) and self.in_flight < self.cap:
            nxt = self.client_queue[self._cq_head]
            self._cq_head += 1
            self.do_send(nxt, end)

    def run(self, sample_dt: float, series: dict[str, list]) -> None:
        events = self.events
        reps = self.replicas
        single = reps[0] if len(reps) == 1 else None
        next_sample = 0.0
        st, sr, sw, sk = series["t"], series["running"], series["waiting"], series["kv_usage"]
        total_blocks = sum(r.total_blocks for r in reps)
        pop = heapq.heappop
        while True:
            if single is not None:
                # (inlined Replica.has_work: this loop runs once per engine step)
                rep = single if (single.n_dec or single.prefilling or single.waiting) else None
            else:
                rep = None
                for r in reps:
                    if r.has_work and (rep is None or r.t < rep.t):
                        rep = r
            if events and (rep is None or events[0][0] <= rep.t):
                t, _, kind, rid = pop(events)
                if kind == 0:
                    self.want_send(rid, t)
                elif kind == 1:
                    self.arrive(rid, t)
                elif kind == 2:
                    self.client_done(rid, t)
                elif kind == 3:
                    self.time_out(rid, t)
                else:
                    self.cancel_in_flight(t)
                continue
            if rep is None:
                break
            if not rep.run_step():
                # Nothing fits even on an empty engine: the head request can never run.
                rep.fail_head("request needs more KV cache than the engine has")
                continue
            if rep.t >= next_sample:
                next_sample = rep.t + sample_dt
                st.append(rep.t)
                if single is not None:
                    sr.append(single.n_dec + len(single.prefilling))
                    sw.append(len(single.waiting))
                    sk.append((single.total_blocks - single.free) / single.total_blocks)
                else:
                    sr.append(sum(r.running for r in reps))
                    sw.append(sum(len(r.waiting) for r in reps))
                    sk.append(sum(r.used_blocks for r in reps) / total_blocks)


_ONES: dict[int, np.ndarray] = {}


def _ones(n: int) -> np.ndarray:
    """A read-only array of n ones (one token per streamed chunk), shared between records."""
    a = _ONES.get(n)
    if a is None:
        a = np.ones(n, dtype=np.int64)
        a.flags.writeable = False
        if len(_ONES) < 4096:
            _ONES[n] = a
    return a


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
    arch = _apply_quantization(arch, config)
    config = with_engine_defaults(config, engine, engine_version, hardware.gpu)
    mem = check_config(arch, hardware, config)
    if kv_tokens is not None:
        if kv_tokens < BLOCK:
            raise BadInput(f"kv_tokens must hold one block ({BLOCK} tokens) at least, got {kv_tokens}")
        mem = dataclasses.replace(mem, kv_tokens=int(kv_tokens) // BLOCK * BLOCK)
    if cost is None:
        cost = CostModel(arch, hardware.gpu, config.tp, config.kv_cache_dtype, engine, engine_version)

    # The dataset, drawn exactly as the load generator's make_prompts draws it (same seed,
    # same order), so a simulated load point asks for the same lengths as the real one.
    warm = workload.warmup
    n_data = workload.num_prompts + warm
    rng = np.random.default_rng(workload.seed)
    ins = sample_lengths(workload.input, n_data, rng)
    outs = sample_lengths(workload.output, n_data, rng)
    if workload.dataset == "shared-prefix" and workload.shared_prefix_len:
        # Every prompt is the shared prefix followed by a drawn suffix (ISL = prefix + suffix).
        pre = workload.shared_prefix_len
        Pd, prefd = (ins + pre).tolist(), [pre] * n_data
    else:
        Pd, prefd = ins.tolist(), [0] * n_data
    Od = outs.tolist()
    reqs = Requests([], [], [])

    total_blocks = mem.kv_tokens // BLOCK
    v0, steps = scheduler_generation(config, engine, engine_version)
    # V0 without chunked prefill budgets a step by the longest prompt it must take whole.
    max_tokens = config.max_num_batched_tokens or (max(mem.max_model_len, 2048) if v0 else config.batched_tokens)
    sim = _Sim(reqs, [], cost, mem.max_model_len, router)
    sim.replicas = [
        Replica(
            i, reqs, cost, total_blocks, config.seqs, max_tokens, config.enable_prefix_caching, sim.finished,
            v0=v0, scheduler_steps=steps,
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
    state = {"origin": 0.0, "sent": 0, "warm_sent": 0, "warm_left": warm, "busy0": 0.0}

    def measured_request(i: int) -> int:
        j = i % n_data
        return sim.create(Pd[j], Od[j], prefd[j], True)

    def warm_request(i: int) -> int:
        j = (n_data - 1 - i) % n_data  # from the end of the dataset, as the runner does
        return sim.create(Pd[j], Od[j], prefd[j], False)

    def start_measured(t0: float) -> None:
        state["origin"] = t0
        state["busy0"] = sum(r.busy_s for r in sim.replicas)  # warm-up work is not measured
        if load.duration_s is not None:
            sim.push(t0 + load.duration_s + grace_s, 4, -1)
        if closed:
            first = conc if n is None else min(conc, n)
            for i in range(first):
                sim.push(t0, 0, measured_request(i))
            state["sent"] = first
        else:
            times = arrival_times(load.request_rate, n, load.arrival, load.burstiness, seed,
                                  duration_s=load.duration_s if n is None else None)
            for i, ts in enumerate(times.tolist()):
                if ts >= duration:
                    break
                rid = measured_request(i)
                sim.sched[rid] = t0 + ts
                sim.push(t0 + ts, 0, rid)

    warm_rids: set[int] = set()

    def after_finish(rid: int, end: float) -> None:
        if rid in warm_rids:
            state["warm_left"] -= 1
            if state["warm_sent"] < warm:
                nxt = warm_request(state["warm_sent"])
                warm_rids.add(nxt)
                state["warm_sent"] += 1
                sim.push(end, 0, nxt)
            if state["warm_left"] == 0:
                sim.cap = conc if conc is not None else 1 << 62
                start_measured(end)
            return
        if closed and (n is None or state["sent"] < n) and end - state["origin"] < duration:
            sim.push(end, 0, measured_request(state["sent"]))
            state["sent"] += 1

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
        state["warm_sent"] = first
    else:
        start_measured(0.0)

    # Time-series spacing: about 500 samples over a rough guess of the run's length.
    if sample_interval_s is None:
        guess = cost.step_seconds(0, 0, 0, 1, 1024) * float(np.mean(Od)) * max(1.0, (n or 1000) / max(conc or 64, 1))
        sample_interval_s = max(guess / 500.0, 1e-3)
    series: dict[str, list] = {"t": [], "running": [], "waiting": [], "kv_usage": []}
    sim.run(sample_interval_s, series)

    return _result(sim, reqs, state["origin"], state["busy0"], mem, series), sim.replicas, reqs


def _result(sim: _Sim, reqs: Requests, origin: float, busy0: float, mem: MemoryPlan, series) -> SimResult:
    tok_s = sim.tok_s
    ends = [np.asarray(r.dends) for r in sim.replicas]
    records: list[RequestRecord] = []
    append = records.append
    last = 0.0
    for index, rid in enumerate(sim.measured):
        if math.isnan(sim.send[rid]):
            continue  # never sent
        send = sim.send[rid] - origin
        sched = sim.sched[rid]
        rec_sched = None if sched is None else sched - origin
        st = reqs.state[rid]
        if st == DONE:
            e = ends[reqs.replica[rid]]
            segs = reqs.segs[rid]
            if len(segs) == 1:
                tf, a, k = segs[0]
                times = np.empty(k + 1)
                times[0] = tf
                times[1:] = e[a : a + k]
            else:
                times = np.concatenate([np.concatenate(([tf], e[a : a + k])) for tf, a, k in segs])
            m = times.shape[0]
            # Same operations, in the same order, as the client's end time in _Sim.finished,
            # so the next closed-loop send is bit-for-bit the previous request's end.
            if tok_s:
                times = times + tok_s * np.arange(1, m + 1)
            times = times - origin
            end = float(times[-1])
            out, chunk_times, chunk_tokens, rec_end, error = m, times, _ones(m), end, None
        else:
            end = sim.client_end[rid] - origin if not math.isnan(sim.client_end[rid]) else send
            out, chunk_times, chunk_tokens = 0, [], []
            rec_end, error = (end if st == FAILED else None), reqs.error[rid] or "not completed"
        append(
            RequestRecord(
                index=index,
                send_time=send,
                scheduled_time=rec_sched,
                input_tokens=reqs.P[rid],
                output_tokens=out,
                chunk_times=chunk_times,
                chunk_tokens=chunk_tokens,
                end_time=rec_end,
                error=error,
                simulated=True,
            )
        )
        if end > last:
            last = end
    duration = last
    summary = summarize(records, duration)
    summary["simulated"] = True
    reps = sim.replicas
    blocks = reps[0].total_blocks if reps else 1
    t = np.asarray(series["t"]) - origin
    keep = t >= 0
    busy = sum(r.busy_s for r in reps) - busy0
    return SimResult(
        records=records,
        duration_s=duration,
        summary=summary,
        memory=mem,
        replicas=len(reps),
        steps=sum(r.step for r in reps),
        preemptions=sum(r.preemptions for r in reps),
        prefix_hits=sum(r.prefix_hits for r in reps),
        kv_capacity_tokens=mem.kv_tokens,
        peak_kv_usage=max((r.peak_used for r in reps), default=0) / max(blocks, 1),
        busy_fraction=busy / (len(reps) * duration) if duration > 0 else 0.0,
        timeseries={
            "t": t[keep],
            "running": np.asarray(series["running"], dtype=np.int64)[keep],
            "waiting": np.asarray(series["waiting"], dtype=np.int64)[keep],
            "kv_usage": np.asarray(series["kv_usage"], dtype=np.float64)[keep],
        },
    )
