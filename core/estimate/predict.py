"""Predicted TTFT, ITL, E2E latency and throughput of a serving configuration, analytically.

The prediction is a steady state of continuous batching, solved as a small fixed point on
top of the step cost model (:mod:`core.estimate.costmodel`), so it is cheap enough to run as
the user types (well under a millisecond per load point) and agrees with the simulator that
uses the same cost model.

Public API (UI-free; the TUI, ``knee estimate`` and the sweep's adaptive strategy call it)::

    Predictor(arch, gpu, workload, *, kv_dtype="auto", engine="vllm", engine_version=None,
              gpu_memory_utilization=0.9, max_model_len=None)
        .memory(cfg: ServerConfig) -> MemoryPlan           # per replica, cached
        .predict(cfg, *, concurrency=None, request_rate=None, num_prompts=None,
                 duration_s=None, request_timeout_s=None) -> Prediction
        .curve(cfg, concurrencies) -> list[Prediction]
        .max_throughput(cfg) -> Prediction                 # everything submitted at once
        .config(tp, dp=1, **knobs) -> ServerConfig          # engine defaults filled in

    Prediction: ttft_ms / tpot_ms (per request) / itl_ms (pooled inter-token gaps; same
        mean as TPOT, different percentiles) / e2e_s as Stats(mean, p50, p90, p95, p99),
        req_per_s, output_tok_per_s, running, queued, limited_by, saturated,
        prefill_bottleneck, decode_bottleneck, .metrics() (vllm bench serve keys), .as_dict()

    The whole report (memory plans per TP, predictions per config x concurrency, limits,
    bottlenecks, suggested search space) is :func:`core.estimate.report.estimate`.

Where the model lives:

- :mod:`core.estimate.steady`: one replica's steady state with N sequences running (prefill
  chunks, mixed and pure decode steps, the cycle time).
- :mod:`core.estimate.closed_loop` and :mod:`core.estimate.open_loop`: the load point's
  running batch and wait, by kind of client.
- :mod:`core.estimate.latency`: means and approximate percentiles of a steady state, and
  the queue of an overloaded finite run.
- :mod:`core.estimate.waves`: lock-step waves (closed loop, fixed lengths), bursts, storms.
- :mod:`core.estimate.drain`: when a finite run with varying lengths ends (its longest answer).
- :mod:`core.estimate.fluid`: the batch a finite open-loop run's tokens decode in (it fills and empties).
- :mod:`core.estimate.stats` and :mod:`core.estimate.prediction`: the result types.
- Here: the memory plan, knobs and running cap per config, and how a load point picks N:

  - Closed loop at concurrency C: a fixed point of Little's law (closed_loop); with fixed
    lengths the requests stay in lock-step waves instead.
  - Open loop at rate λ: the N with N = λ·residence(N); near the cap an M/M/c waiting time
    (Sakasegawa's approximation); past it the replica is saturated (a finite run's queue).
  - Prefix caching (the ``shared-prefix`` dataset's ``shared_prefix_len``, which it prepends
    to the drawn input, and ``cfg.enable_prefix_caching``, on by default where the engine has
    it on): the shared prefix's whole 16-token KV blocks are cache hits, not computed at
    prefill; the prefix's blocks are held once in the KV cache, not per sequence.
"""

from __future__ import annotations

import dataclasses
import math

from core.errors import BadInput
from core.estimate.costmodel import CostModel
from core.estimate.params import engine_profile
from core.estimate.engine_memory import engine_kv_dtype, engine_memory_utilization
from core.estimate.closed_loop import closed_loop
from core.estimate.latency import finish, overloaded
from core.estimate.lockstep import lockstep_burst, one_wave
from core.estimate.memory import MemoryPlan, plan_memory
from core.estimate.open_loop import below_saturation, never_queues
from core.estimate.prediction import Prediction
from core.estimate.stats import QUANTILES, Stats, cv2_len, mean_len
from core.estimate.steady import Shape, length_bias, steady_state
from core.estimate.waves import BurstWait, burst, prefill_storm, synchronized, wave
from core.spec.engine_defaults import batch_defaults_for
from core.spec.hardware import GPU
from core.spec.model import ModelArch
from core.spec.serving import ServerConfig
from core.spec.workload import Workload

# Callers import the result types from here too.
__all__ = ["DEFAULT_NUM_PROMPTS", "KV_BLOCK", "QUANTILES", "Prediction", "Predictor", "Stats"]

KV_BLOCK = 16  # vLLM's KV block (the prefix cache's granularity)
DEFAULT_NUM_PROMPTS = 1000  # vllm bench serve / llm-optimizer default for a finite run


def workload_max_model_len(arch: ModelArch, workload: Workload) -> int:
    """What a user would pass as --max-model-len for this workload: the next power of two
    over the longest request (with the shared prefix), at least 4096, never above the
    model's own limit."""
    need = workload.max_total_len + workload.prepended_len
    return min(arch.max_position_embeddings, max(4096, 1 << math.ceil(math.log2(max(need, 2)))))


class Predictor:
    """Predictions for one model, GPU type, workload and engine, over server configs."""

    def __init__(
        self,
        arch: ModelArch,
        gpu: GPU,
        workload: Workload,
        *,
        kv_dtype: str = "auto",
        engine: str = "vllm",
        engine_version: str | None = None,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
    ):
        self.arch, self.gpu, self.workload = arch, gpu, workload
        self.engine, self.engine_version = engine, engine_version
        self.profile = engine_profile(engine, engine_version)
        batch = batch_defaults_for(engine, engine_version, gpu)
        if batch is not None:
            # vLLM V1 picks its batch limits by GPU (core/spec/engine_defaults.py).
            self.profile = {**self.profile, "default_max_num_batched_tokens": batch[0], "default_max_num_seqs": batch[1]}
        self.kv_dtype = engine_kv_dtype(self.profile, arch, kv_dtype)
        self.gpu_memory_utilization = gpu_memory_utilization
        self._prepend = float(workload.prepended_len)
        self.input_len = self._prepend + mean_len(workload.input)
        self.output_len = max(1.0, mean_len(workload.output))
        if self.input_len <= 0:
            raise BadInput("input length must be positive")
        self.prefix_len = self._prepend
        self.shape = Shape(
            workload.input, workload.output, self._prepend, self.input_len, self.output_len, bool(self.profile.get("chunked_prefill", 1))
        )
        self.max_model_len = max_model_len or workload_max_model_len(arch, workload)
        self._cms: dict[tuple[int, str, int], CostModel] = {}  # by (TP, KV dtype, stream interval)
        self._mems: dict[tuple, MemoryPlan] = {}

    # ---- building blocks -------------------------------------------------------------
    def cost_model(self, tp: int, kv_dtype: str | None = None, stream_interval: int = 1) -> CostModel:
        kv = kv_dtype or self.kv_dtype
        key = (tp, kv, stream_interval)
        cm = self._cms.get(key)
        if cm is None:
            cm = self._cms[key] = CostModel(self.arch, self.gpu, tp, kv, self.engine, self.engine_version, stream_interval)
        return cm

    def config(self, tp: int = 1, dp: int = 1, **knobs) -> ServerConfig:
        """A ServerConfig with this engine's defaults for the knobs left unset."""
        knobs.setdefault("max_num_batched_tokens", self.default_budget(chunked=self._asks_chunked(knobs.get("extra_args") or {})))
        knobs.setdefault("max_num_seqs", int(self.profile.get("default_max_num_seqs", 256)))
        knobs.setdefault("gpu_memory_utilization", self.gpu_memory_utilization)
        knobs.setdefault("max_model_len", self.max_model_len)
        knobs.setdefault("kv_cache_dtype", self.kv_dtype)
        # Automatic prefix caching: on by default in vLLM V1, SGLang (radix cache) and
        # TensorRT-LLM (KV block reuse); off by default in vLLM before 0.8.
        knobs.setdefault("enable_prefix_caching", bool(self.profile.get("prefix_caching", 1)))
        return ServerConfig(model=self.arch.name, tp=tp, dp=dp, **knobs)

    def default_budget(self, chunked: bool = False) -> int:
        """The engine's token budget per step when none is set; ``chunked``: chunked prefill
        turned on by the config where the engine's default has it off."""
        budget = int(self.profile.get("default_max_num_batched_tokens", 8192))
        if not (self.profile.get("chunked_prefill", 1) or chunked):
            # Without chunked prefill a whole prompt must fit one step: vLLM < 0.6 sets the
            # budget to max(max_model_len, 2048).
            budget = max(budget, self.max_model_len)
        return budget

    def _asks_chunked(self, extra_args: dict) -> bool:
        """vLLM's V0 engine given ``--enable-chunked-prefill``: its default is prefill-first."""
        flag = extra_args.get("enable_chunked_prefill", extra_args.get("enable-chunked-prefill"))
        return self.engine in ("vllm", "vllm-v0") and str(flag).strip().lower() in ("1", "true", "yes", "on")

    def chunked(self, cfg: ServerConfig) -> bool:
        """Whether prompt chunks share steps with decodes under ``cfg``: the engine's default,
        or vLLM V0 told to (the simulator's V0 scheduler takes the same flag)."""
        return bool(self.profile.get("chunked_prefill", 1)) or self._asks_chunked(cfg.extra_args)

    def shape_for(self, cfg: ServerConfig) -> Shape:
        return self.shape if self.chunked(cfg) == self.shape.chunked else dataclasses.replace(self.shape, chunked=True)

    def _knobs(self, cfg: ServerConfig) -> tuple[int, int, int]:
        budget = cfg.max_num_batched_tokens or self.default_budget(self._asks_chunked(cfg.extra_args))
        seqs = cfg.max_num_seqs or int(self.profile.get("default_max_num_seqs", 256))
        mml = cfg.max_model_len or self.max_model_len
        return budget, seqs, mml

    def memory(self, cfg: ServerConfig) -> MemoryPlan:
        budget, seqs, mml = self._knobs(cfg)
        key = (cfg.tp, budget, seqs, mml, cfg.gpu_memory_utilization, cfg.kv_cache_dtype)
        plan = self._mems.get(key)
        if plan is None:

            def make(gmu: float) -> MemoryPlan:
                return plan_memory(
                    self.arch,
                    self.gpu,
                    cfg.tp,
                    gpu_memory_utilization=gmu,
                    max_model_len=mml,
                    max_num_batched_tokens=budget,
                    max_num_seqs=seqs,
                    kv_dtype=cfg.kv_cache_dtype,
                )

            plan = make(cfg.gpu_memory_utilization)
            gmu = engine_memory_utilization(self.profile, plan, cfg.gpu_memory_utilization)
            if gmu != cfg.gpu_memory_utilization:
                plan = make(gmu)
            self._mems[key] = plan
        return plan

    def cached_tokens(self, cfg: ServerConfig) -> float:
        """Prompt tokens per request served from the prefix cache: the shared prefix's full
        KV blocks (vLLM hashes and caches whole 16-token blocks, and always computes at
        least the prompt's last token so that it can sample), when prefix caching is on.
        They are not computed at prefill, but the attention still reads their KV."""
        if not (self.prefix_len and cfg.enable_prefix_caching):
            return 0.0
        return float(int(min(self.prefix_len, self.input_len - 1.0)) // KV_BLOCK * KV_BLOCK)

    def evicts(self, cap_reason: str) -> bool:
        """Whether a full KV cache makes this engine evict running requests to admit waiting
        ones (:func:`core.estimate.steady.recompute_tokens`): vLLM admits a request once its
        prompt fits; TensorRT-LLM reserves its whole length first and SGLang a share of it."""
        return cap_reason == "kv_cache" and bool(self.profile.get("evicts_when_full", 0))

    def running_cap(self, cfg: ServerConfig, staggered: bool = True) -> tuple[float, str]:
        """The most sequences one replica runs at once, and what sets it. ``staggered``: they
        were admitted at random points of each other's lives (closed and open loops), so
        long answers hold more of the KV cache (:func:`length_bias`); False for a burst's
        first wave, admitted together with nothing decoded yet."""
        budget, seqs, _ = self._knobs(cfg)
        mem = self.memory(cfg)
        caps = [(float(seqs), "max_num_seqs")]
        if mem.fits:
            # Staggered lifetimes: a running sequence holds I + O/2 tokens on average, more
            # when the answers' lengths vary (long ones run longer: length_bias). The
            # cached prefix's blocks are held once, shared by every sequence.
            c = self.cached_tokens(cfg)
            per_seq = self.input_len - c + self.output_len / 2 + (length_bias(self.shape) if staggered else 0.0) + 8
            caps.append((max(1.0, (mem.kv_tokens - c) / per_seq), "kv_cache"))
        if self.chunked(cfg):
            caps.append((float(max(1, budget - 1)), "token_budget"))
        return min(caps)

    # ---- predictions -----------------------------------------------------------------
    def predict(
        self,
        cfg: ServerConfig,
        *,
        concurrency: float | None = None,
        request_rate: float | None = None,
        num_prompts: int | None = None,
        duration_s: float | None = None,
        request_timeout_s: float | None = None,
    ) -> Prediction:
        """Closed loop at ``concurrency`` (whole deployment), or open loop at
        ``request_rate`` req/s (optionally capped by ``concurrency``).

        An open loop whose rate exceeds what the deployment completes is a finite run of
        ``num_prompts`` requests (else ``duration_s`` of arrivals, else the workload's count):
        the queue grows through the run. A closed loop given ``num_prompts`` is a finite
        benchmark run: its first requests start together, and their back-to-back prefill is in
        the TTFT (without it, the steady state that production traffic sees). With a client
        ``request_timeout_s``, the requests that cannot finish within it fail, and the
        latencies and throughput are those of the requests that finished (what a benchmark
        client reports).
        """
        if concurrency is None and request_rate is None:
            raise BadInput("a prediction needs a concurrency or a request rate")
        if concurrency is not None and concurrency <= 0:
            raise BadInput(f"concurrency must be positive, got {concurrency}")
        if request_rate is not None and request_rate <= 0:
            raise BadInput(f"request rate must be positive, got {request_rate}")
        mem = self.memory(cfg)
        if not mem.fits:
            raise BadInput(f"TP{cfg.tp} does not fit: {mem.reason}")
        cm = self.cost_model(cfg.tp, cfg.kv_cache_dtype, cfg.stream_interval)
        shape = self.shape_for(cfg)
        budget, seqs, _ = self._knobs(cfg)
        cap, cap_reason = self.running_cap(cfg)
        cached = self.cached_tokens(cfg)
        dp = cfg.dp
        tail = cm.output_token_overhead_s * self.output_len
        if request_rate is None:
            assert concurrency is not None  # checked above: a prediction has one of the two
            if num_prompts is not None and num_prompts <= concurrency and request_timeout_s is None:
                # No request waits for another to finish: every prompt is sent at once.
                return self.max_throughput(cfg, num_prompts=num_prompts)
            if synchronized(shape) and concurrency / dp > 1.0:
                # Fixed lengths: the requests move in waves (core.estimate.waves). A run's first
                # wave weighs in only when its length is given (a benchmark, not sizing); under a
                # prefill-first scheduler every wave is a first wave.
                return wave(shape, cfg, cm, concurrency, cap, cap_reason, budget, seqs, cached, num_prompts, self.evicts(cap_reason))
            return closed_loop(
                shape, cfg, cm, concurrency, cap, cap_reason, budget, seqs, cached, self.evicts(cap_reason), mem.kv_tokens, num_prompts
            )

        lam = request_rate / dp
        st_cap = steady_state(shape, cm, cap, budget, cached)
        n_replica = num_prompts / dp if num_prompts else None
        if lam * st_cap.cycle >= cap and not never_queues(n_replica, cap):
            # Arrivals outrun the replica: once its batch is full the queue grows linearly
            # (latency.overloaded: who waits and how long). At a full KV cache the engine
            # evicts too.
            if self.evicts(cap_reason):
                st_cap = steady_state(shape, cm, cap, budget, cached, True)
            cap_x = st_cap.throughput
            n_run = num_prompts or (int(request_rate * duration_s) if duration_s else None)
            n_run = n_run or self.workload.num_prompts or DEFAULT_NUM_PROMPTS
            # A benchmark run (its length given) starts from an empty batch; a stream being
            # sized is past that start.
            x, wait = overloaded(
                shape,
                cfg,
                cm,
                st_cap,
                cap_x,
                lam,
                max(n_run / dp, 1.0),
                request_timeout_s,
                budget,
                seqs,
                cap,
                from_empty=num_prompts is not None,
            )
            pred = finish(shape, cfg, cm, st_cap, x, wait, "uniform", cap_reason, True, concurrency, request_rate, budget, seqs, cap)
        else:
            pred = below_saturation(
                shape,
                cfg,
                cm,
                lam,
                cap,
                cap_reason,
                budget,
                seqs,
                cached,
                tail,
                n_replica,
                concurrency,
                request_rate,
            )
        if concurrency is not None and pred.req_per_s * pred.e2e_s.mean > concurrency:
            # The client caps requests in flight: the closed loop at that cap applies.
            closed = self.predict(cfg, concurrency=concurrency)
            if closed.req_per_s < pred.req_per_s:
                return closed
        return pred

    @property
    def synchronized(self) -> bool:
        """Fixed lengths: a closed loop's requests start together and finish together."""
        return synchronized(self.shape)

    def curve(self, cfg: ServerConfig, concurrencies) -> list[Prediction]:
        return [self.predict(cfg, concurrency=c) for c in concurrencies]

    def max_throughput(self, cfg: ServerConfig, num_prompts: int | None = None) -> Prediction:
        """Everything submitted at once: the running batch at its cap, the rest queued."""
        mem = self.memory(cfg)
        if not mem.fits:
            raise BadInput(f"TP{cfg.tp} does not fit: {mem.reason}")
        cap, reason = self.running_cap(cfg, staggered=False)
        n = num_prompts or self.workload.num_prompts or DEFAULT_NUM_PROMPTS
        per_rep = n / cfg.dp
        run = min(per_rep, cap)
        cm = self.cost_model(cfg.tp, cfg.kv_cache_dtype, cfg.stream_interval)
        shape = self.shape_for(cfg)
        budget, seqs, _ = self._knobs(cfg)
        cached = self.cached_tokens(cfg)
        # Fixed lengths that the cache admits at once: one wave, its prompts' prefill and then
        # its decode, part of it evicted if it outgrows the cache (core.estimate.lockstep),
        # not the staggered steady state.
        lock = synchronized(shape) and not cached and self.evicts("kv_cache") and one_wave(shape, per_rep, mem.kv_tokens, seqs)
        if lock:
            run = per_rep
        st = steady_state(shape, cm, run, budget, cached, self.evicts(reason) and per_rep > cap and not lock)
        x = st.throughput
        gaps = tpots = None
        storm = prefill_storm(shape, cm, run, budget, cached)
        if lock:
            x, gaps, tpots, evicted = lockstep_burst(shape, cm, per_rep, mem.kv_tokens, budget, cached, storm)
            reason = "kv_cache" if evicted > 0 else "load"
        elif self.workload.output.kind != "fixed" and per_rep > 1:
            x, gaps, tpots = burst(shape, cm, st, per_rep, run, budget, storm)
        queued = max(0.0, per_rep - run)
        # The first queued request starts when a first-wave one finishes: renewal theory puts
        # the i-th completion of N slots started together at (i + N(1 − CV²)/2)/X (CV: the
        # spread of the output lengths; fixed lengths finish as a wave, ShareGPT's at once
        # staggered), less half the storm, over which the first wave's decodes started.
        first = max(0.0, run / (2.0 * x) * (1.0 - min(cv2_len(shape.output), 1.0)) - storm / 2.0) if queued else 0.0
        queue = BurstWait(storm, queued / per_rep, queued / x, first)
        return finish(
            shape,
            cfg,
            cm,
            st,
            x,
            queue.mean,
            "uniform",
            reason if lock or run >= cap else "load",
            False,
            n,
            None,
            budget,
            seqs,
            cap,
            gaps,
            tpots=tpots,
            burst_wait=queue,
            run_decode=tpots.spans if tpots else None,
            run_requests=n,
        )
