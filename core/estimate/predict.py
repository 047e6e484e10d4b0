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

The model, per replica (data-parallel replicas split the load evenly):

- ``N`` sequences run at once, capped by ``max_num_seqs``, by the KV cache (sequences at the
  average context I + O/2, since lifetimes are staggered) and, with chunked prefill, by the
  token budget (every decode takes one token of it). Beyond the cap requests wait.
- Every running sequence lives ``L = k + O − 1`` steps: ``k = ceil(I / (budget − decodes))``
  prefill chunks (vLLM schedules running decodes first and gives prefill what is left of
  ``max_num_batched_tokens``), then O − 1 decode steps (the first token comes out of the last
  prefill chunk). Over one such cycle N requests complete, so throughput = N / cycle time.
- Of the L steps, ``min(L, N·k)`` carry prefill chunks ("mixed" steps: prefill tokens plus the
  decodes) and the rest are pure decode steps; a decoding request sees the mixed ones as
  prefill/decode interference, which is where its ITL comes from under load. Engines without
  chunked prefill (vLLM < 0.6) run whole prompts in prefill-only steps while decodes stall.
- Closed loop at concurrency C: a fixed point of Little's law, C = X·(API overhead + wait +
  residence); past the cap the excess queues and waits (C − N)/X. With fixed lengths the
  requests stay in lock-step waves instead (they start, prefill and finish together, as
  ``vllm bench serve`` with fixed random lengths makes them): a wave is the prefill of all
  its prompts in budget-sized steps, then O − 1 decode steps at the full batch.
- Open loop at rate λ: the N with N = λ·residence(N); near the cap an M/M/c waiting time
  (Sakasegawa's approximation); past it the replica is saturated and, over a finite run of
  ``num_prompts`` requests, the queue grows linearly, so mean wait = (n−1)/2·(1/X − 1/λ).
  With a client timeout T, only the requests with wait + time in the engine <= T finish
  (the first ones of the run); TTFT and E2E are theirs and the throughput is successes over
  the run's span (sending time + T), as benchmark clients report an overloaded run.
- Prefix caching (the ``shared-prefix`` dataset's ``shared_prefix_len``,
  ``cfg.enable_prefix_caching``, on by default where the engine has it on): a prompt's shared prefix, in whole 16-token KV
  blocks, is a cache hit and is not computed at prefill (fewer prefill tokens and FLOPs,
  a lower TTFT), but its KV is still read by the attention of the prompt's chunks and of
  every decode step; the prefix's blocks are held once in the KV cache, not per sequence.
  The ``shared-prefix`` dataset prepends the prefix to the drawn input (prompt = prefix +
  input), as the load generator and the simulator do.
- Per-request API overheads (HTTP, tokenisation, detokenisation/streaming) from the engine
  profile add to TTFT and E2E.

Percentiles are approximations, stated as such everywhere they are shown: TTFT spreads by
the step a request lands in (uniform over one step), by other prefills colliding with it
(Poisson count at the arrival rate) and by queueing (exponential tail in an open loop; a
closed loop's queue is nearly deterministic); ITL spreads by how many of a request's decode
steps are mixed ones (binomial); E2E adds the deviations in quadrature, plus the output
length's own spread when the workload has one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from core.errors import BadInput
from core.estimate.bands import band
from core.estimate.costmodel import Batch, CostModel, engine_profile
from core.estimate.memory import MemoryPlan, plan_memory
from core.spec.engine_defaults import batch_defaults_for
from core.spec.hardware import GPU
from core.spec.model import ModelArch
from core.spec.serving import ServerConfig
from core.spec.workload import LengthDist, Workload

KV_BLOCK = 16  # vLLM's KV block (the prefix cache's granularity)
QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
# Standard normal quantiles for the same levels (no scipy on the hot path).
_Z = {0.50: 0.0, 0.90: 1.2816, 0.95: 1.6449, 0.99: 2.3263}
DEFAULT_NUM_PROMPTS = 1000  # vllm bench serve / llm-optimizer default for a finite run


@dataclass(frozen=True, slots=True)
class Stats:
    """A latency's mean and (approximate) percentiles, in the unit the field name says."""

    mean: float
    p50: float
    p90: float
    p95: float
    p99: float

    def get(self, stat: str) -> float:
        stat = {"median": "p50"}.get(stat, stat)
        if stat == "mean":
            return self.mean
        if hasattr(self, stat):
            return getattr(self, stat)
        raise BadInput(f"unknown statistic {stat!r}", "use mean, median, p50, p90, p95 or p99")

    def as_dict(self, digits: int = 3) -> dict[str, float]:
        return {k: _round(v, digits) for k, v in asdict(self).items()}


def _round(v: float, digits: int) -> float:
    if v is None or not math.isfinite(v):
        return v
    return float(f"{v:.{digits + 3}g}") if abs(v) < 10**digits else round(v, 1)


def _stats(mean: float, quantiles: dict[str, float], scale: float = 1.0) -> Stats:
    """A :class:`Stats` from a mean and a dict keyed by :data:`QUANTILES`, times ``scale``
    (1e3: seconds to ms). (Keys spelled out, not a generator: this runs four times a
    prediction, and the TUI predicts per keystroke.)"""
    return Stats(mean * scale, quantiles["p50"] * scale, quantiles["p90"] * scale, quantiles["p95"] * scale,
                 quantiles["p99"] * scale)


def _weighted_quantiles(ordered: list[tuple[float, float]], total: float) -> dict[str, float]:
    """Per :data:`QUANTILES` level, the first value of ``ordered`` (sorted (value, weight)
    pairs) whose cumulative weight reaches that share of ``total``; the last value when
    rounding leaves it short, 0.0 when there is none."""
    out: dict[str, float] = {}
    for name, q in QUANTILES.items():
        acc, val = 0.0, ordered[-1][0] if ordered else 0.0
        for t, w in ordered:
            acc += w
            if acc >= q * total - 1e-12:
                val = t
                break
        out[name] = val
    return out


@dataclass(frozen=True)
class Prediction:
    """One configuration at one load point (whole deployment: all replicas)."""

    tp: int
    dp: int
    max_num_batched_tokens: int
    max_num_seqs: int
    concurrency: float | None  # closed loop (whole deployment)
    request_rate: float | None  # open loop (req/s, whole deployment)
    ttft_ms: Stats
    itl_ms: Stats  # inter-token gaps, pooled over tokens (vllm bench serve's ITL)
    e2e_s: Stats
    tpot_ms: Stats  # per request: (E2E − TTFT) / (O − 1); same mean as itl_ms
    req_per_s: float
    output_tok_per_s: float
    input_tok_per_s: float
    running: float  # sequences in each replica's running batch
    queued: float  # requests waiting per replica (mean)
    limited_by: str  # what caps the running batch: load, max_num_seqs, kv_cache, token_budget
    saturated: bool  # open loop: arrivals exceed what the replica completes
    prefill_chunks: int
    step_ms_mixed: float  # a step carrying prefill chunks (and the decodes)
    step_ms_decode: float  # a pure decode step
    prefill_bottleneck: str
    decode_bottleneck: str

    def metrics(self) -> dict[str, float]:
        """Flat keys as ``vllm bench serve`` names them (what SLO constraints read)."""
        out: dict[str, float] = {
            "request_throughput": self.req_per_s,
            "output_throughput": self.output_tok_per_s,
            "total_token_throughput": self.output_tok_per_s + self.input_tok_per_s,
        }
        for name, st, scale in (("ttft", self.ttft_ms, 1.0), ("tpot", self.tpot_ms, 1.0), ("itl", self.itl_ms, 1.0), ("e2el", self.e2e_s, 1000.0)):
            out[f"mean_{name}_ms"] = st.mean * scale
            out[f"median_{name}_ms"] = st.p50 * scale
            for q in ("p50", "p90", "p95", "p99"):
                out[f"{q}_{name}_ms"] = getattr(st, q) * scale
        return out

    def value(self, metric: str, stat: str = "mean") -> float:
        """``metric`` in knee's canonical names (ttft, itl, tpot, e2el in ms; throughputs)."""
        if metric == "ttft":
            return self.ttft_ms.get(stat)
        if metric == "itl":
            return self.itl_ms.get(stat)
        if metric == "tpot":
            return self.tpot_ms.get(stat)
        if metric == "e2el":
            return self.e2e_s.get(stat) * 1000.0
        return self.metrics()[metric]

    def as_dict(self) -> dict[str, object]:
        d = {
            "tp": self.tp,
            "dp": self.dp,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "ttft_ms": self.ttft_ms.as_dict(),
            "itl_ms": self.itl_ms.as_dict(),
            "tpot_ms": self.tpot_ms.as_dict(),
            "e2e_s": self.e2e_s.as_dict(),
            "req_per_s": _round(self.req_per_s, 4),
            "output_tok_per_s": _round(self.output_tok_per_s, 4),
            "input_tok_per_s": _round(self.input_tok_per_s, 4),
            "running_per_replica": _round(self.running, 3),
            "queued_per_replica": _round(self.queued, 3),
            "limited_by": self.limited_by,
            "saturated": self.saturated,
            "prefill_chunks": self.prefill_chunks,
            "step_ms_mixed": _round(self.step_ms_mixed, 3),
            "step_ms_decode": _round(self.step_ms_decode, 3),
            "prefill_bottleneck": self.prefill_bottleneck,
            "decode_bottleneck": self.decode_bottleneck,
            "percentiles": "approximate (analytic model)",
        }
        # Low/high of each mean from measured residuals (core/estimate/bands.py).
        means = {"ttft_ms": self.ttft_ms.mean, "itl_ms": self.itl_ms.mean, "tpot_ms": self.tpot_ms.mean, "e2e_s": self.e2e_s.mean,
                 "req_per_s": self.req_per_s, "output_tok_per_s": self.output_tok_per_s}
        d["bands"] = {k: {e: _round(x, 4) for e, x in b.items()} for k, v in means.items() if (b := band(k, v)) is not None}
        return d


@dataclass(slots=True)
class _State:
    """Steady state of one replica with ``n`` running sequences."""

    n: float
    k: int  # prefill chunks per request
    steps: float  # L: steps a request spends running
    n_mixed: float  # steps per cycle that carry prefill
    t_mixed: float
    t_pure: float
    cycle: float  # seconds per cycle = residence of a request in the running batch
    prefill: float  # seconds from being scheduled to the first token
    tpot: float
    frac_mixed: float  # share of a request's decode steps that are mixed
    prefill_tokens_step: float
    decodes_mixed: float
    decodes_pure: float
    cached: float = 0.0  # prompt tokens per request served by the prefix cache

    @property
    def throughput(self) -> float:
        return self.n / self.cycle if self.cycle > 0 else 0.0

    @property
    def mean_step(self) -> float:
        return self.cycle / self.steps if self.steps else 0.0

    def align(self, others: float) -> float:
        """Mean wait for the step in flight to end before a new request can join: half a
        step when the engine is busy with ``others`` sequences, nothing when it is idle."""
        return 0.5 * self.mean_step * min(1.0, max(others, 0.0))


def _quantile_len(dist: LengthDist, q: float) -> float:
    if dist.kind == "uniform":
        return dist.mean * (1 - dist.range_ratio + 2 * dist.range_ratio * q)
    if dist.kind == "normal":
        return max(1.0, dist.mean + _Z.get(q, 0.0) * dist.std)
    if dist.kind == "empirical":
        vals = sorted(dist.values)
        return float(vals[min(len(vals) - 1, int(q * len(vals)))])
    return dist.mean


def _mean_len(dist: LengthDist) -> float:
    if dist.kind == "empirical":
        return sum(dist.values) / len(dist.values)
    return dist.mean


def _poisson_quantile(m: float, q: float) -> int:
    """Smallest k with P(Poisson(m) <= k) >= q (m small; a normal tail beyond)."""
    if m <= 0:
        return 0
    if m > 30:
        return max(0, int(m + _Z.get(q, 0.0) * math.sqrt(m) + 0.5))
    p = math.exp(-m)
    acc, k = p, 0
    while acc < q and k < 200:
        k += 1
        p *= m / k
        acc += p
    return k


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
        if kv_dtype in ("auto", None, "") and self.profile.get("fp8_kv_with_fp8_weights") and arch.quantization.method == "fp8":
            # TensorRT-LLM's FP8 quantization stores the KV cache in FP8 too unless told not to.
            kv_dtype = "fp8"
        self.kv_dtype = kv_dtype or "auto"
        self.gpu_memory_utilization = gpu_memory_utilization
        # A shared prefix (a system prompt common to every request) exists in the
        # ``shared-prefix`` dataset, which prepends it to the drawn input (prompt = prefix +
        # input), as the load generator and the simulator build it; the other datasets draw
        # prompts that share nothing, whatever shared_prefix_len says.
        shared = workload.dataset == "shared-prefix"
        self._prepend = float(workload.shared_prefix_len) if shared else 0.0
        self.input_len = self._prepend + _mean_len(workload.input)
        self.output_len = max(1.0, _mean_len(workload.output))
        if self.input_len <= 0:
            raise BadInput("input length must be positive")
        self.prefix_len = self._prepend
        need = workload.max_total_len + int(self._prepend)
        if max_model_len is None:
            # What a user would pass as --max-model-len for this workload: the next power of
            # two over the longest request, at least 4096, never above the model's own limit.
            max_model_len = min(arch.max_position_embeddings, max(4096, 1 << math.ceil(math.log2(max(need, 2)))))
        self.max_model_len = max_model_len
        self._cms: dict[int, CostModel] = {}
        self._mems: dict[tuple, MemoryPlan] = {}

    # ---- building blocks -------------------------------------------------------------
    def cost_model(self, tp: int, kv_dtype: str | None = None) -> CostModel:
        kv = kv_dtype or self.kv_dtype
        cm = self._cms.get((tp, kv))
        if cm is None:
            cm = self._cms[(tp, kv)] = CostModel(self.arch, self.gpu, tp, kv, self.engine, self.engine_version)
        return cm

    def config(self, tp: int = 1, dp: int = 1, **knobs) -> ServerConfig:
        """A ServerConfig with this engine's defaults for the knobs left unset."""
        knobs.setdefault("max_num_batched_tokens", self.default_budget())
        knobs.setdefault("max_num_seqs", int(self.profile.get("default_max_num_seqs", 256)))
        knobs.setdefault("gpu_memory_utilization", self.gpu_memory_utilization)
        knobs.setdefault("max_model_len", self.max_model_len)
        knobs.setdefault("kv_cache_dtype", self.kv_dtype)
        # Automatic prefix caching: on by default in vLLM V1, SGLang (radix cache) and
        # TensorRT-LLM (KV block reuse); off by default in vLLM before 0.8.
        knobs.setdefault("enable_prefix_caching", bool(self.profile.get("prefix_caching", 1)))
        return ServerConfig(model=self.arch.name, tp=tp, dp=dp, **knobs)

    def default_budget(self) -> int:
        budget = int(self.profile.get("default_max_num_batched_tokens", 8192))
        if not self.profile.get("chunked_prefill", 1):
            # Without chunked prefill a whole prompt must fit one step: vLLM < 0.6 sets the
            # budget to max(max_model_len, 2048).
            budget = max(budget, self.max_model_len)
        return budget

    def _knobs(self, cfg: ServerConfig) -> tuple[int, int, int]:
        budget = cfg.max_num_batched_tokens or self.default_budget()
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
            frac = self.profile.get("kv_free_fraction")
            if frac:
                # TensorRT-LLM gives the KV cache a fraction of the memory left *after* the
                # weights and activations (kv_cache_free_gpu_mem_fraction), not of the total.
                used = plan.weight_bytes + plan.activation_bytes + plan.runtime_bytes
                gmu = min(1.0, (used + frac * max(plan.visible_bytes - used, 0.0)) / plan.visible_bytes)
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

    def running_cap(self, cfg: ServerConfig) -> tuple[float, str]:
        """The most sequences one replica runs at once, and what sets it."""
        budget, seqs, _ = self._knobs(cfg)
        mem = self.memory(cfg)
        caps = [(float(seqs), "max_num_seqs")]
        if mem.fits:
            # Staggered lifetimes: a running sequence holds I + O/2 tokens on average. The
            # cached prefix's blocks are held once, shared by every sequence.
            c = self.cached_tokens(cfg)
            per_seq = self.input_len - c + self.output_len / 2 + 8
            caps.append((max(1.0, (mem.kv_tokens - c) / per_seq), "kv_cache"))
        if self.profile.get("chunked_prefill", 1):
            caps.append((float(max(1, budget - 1)), "token_budget"))
        return min(caps)

    # ---- the steady state of one replica -------------------------------------------
    def _state(self, cm: CostModel, n: float, budget: int, cached: float = 0.0) -> _State:
        I, O = self.input_len, self.output_len
        # Prefix-cache hits: only Ic = I − c prompt tokens are computed, at contexts c..I, so
        # a prompt's attention pairs are (I² − c²)/2 and its chunks read the cached KV too.
        c = min(max(cached, 0.0), I - 1.0)
        Ic = I - c
        dec_steps = O - 1.0
        step = cm.step_seconds
        # Below one running sequence the replica is idle part of the time: each step still
        # serves one whole sequence, and throughput scales with the busy share.
        busy = min(n, 1.0)
        n = max(n, 1.0)
        ctx = I + dec_steps / 2.0  # mean context of a decoding sequence
        if self.profile.get("chunked_prefill", 1):
            # Decodes go first; prefill gets what is left of the budget.
            k = max(1, math.ceil(Ic / budget))
            for _ in range(3):
                steps = k + dec_steps
                decodes = n * dec_steps / steps
                prefilling = n * k / steps
                avail = max(budget - (n - max(prefilling, 1.0)), budget * 0.02, 1.0)
                k_new = max(1, math.ceil(Ic / avail))
                if k_new == k:
                    break
                k = k_new
            steps = k + dec_steps
            n_mixed = min(steps, n * k)
            prefilling = n * k / n_mixed  # sequences prefilling in a mixed step
            dec_mixed = max(0.0, n - prefilling) if n_mixed < steps else n * dec_steps / steps
            dec_pure = n
            bound = n * (Ic + dec_steps) / budget
            if bound > steps:
                # Token-budget bound: every step is full (decodes plus prefill chunks up to
                # max_num_batched_tokens) and prompts wait between their chunks.
                steps = n_mixed = bound
                prefilling = max(1.0, n - n * dec_steps / steps)
                dec_mixed = n * dec_steps / steps
            p_tok = n * Ic / n_mixed
            # Attention pairs and KV read by the prefill chunks, per mixed step.
            p_attn = n * (I * I - c * c) / 2.0 / n_mixed
            p_kv = n * (k * c + Ic * (k + 1) / 2.0) / n_mixed
            t_mixed = step(p_tok, p_attn, p_kv, dec_mixed, dec_mixed * ctx, prefilling)
            t_pure = step(0.0, 0.0, 0.0, dec_pure, dec_pure * ctx, 0.0) if n_mixed < steps else t_mixed
            cycle = n_mixed * t_mixed + (steps - n_mixed) * t_pure
            prefill = max(k, steps - dec_steps) * t_mixed
            decode_work = n * dec_steps
            frac_mixed = (n_mixed * dec_mixed / decode_work) if decode_work > 0 else 0.0
        else:
            # Prefill-only steps (vLLM < 0.8 by default, SGLang): whole prompts, several per step
            # when they fit the budget (longer prompts in budget-sized pieces), while decodes
            # stall. Waiting prompts go first, so those that arrived during the last step share one.
            k = max(1, math.ceil(Ic / budget))
            t_pure = step(0.0, 0.0, 0.0, n, n * ctx, 0.0) if dec_steps > 0 else 0.0
            fit = max(1.0, budget // max(int(Ic), 1)) if k == 1 else 1.0
            group = 1.0
            for _ in range(4):
                chunk = group * Ic / k
                t_mixed = step(chunk, group * (I * I - c * c) / 2.0 / k, group * (k * c + Ic * (k + 1) / 2.0) / k, 0.0, 0.0, group)
                n_mixed = n * k / group
                cycle = n_mixed * t_mixed + dec_steps * t_pure
                arrivals_per_step = n / cycle * (cycle / (n_mixed + dec_steps)) if k == 1 else 1.0
                group = min(max(1.0, arrivals_per_step), fit, n)
            steps = n_mixed + dec_steps
            prefill = k * t_mixed
            dec_mixed, dec_pure, p_tok = 0.0, n, group * Ic / k
            # A decoding request stalls through the other prompts' prefill steps.
            frac_mixed = max(0.0, n_mixed - k) / max(n_mixed - k + dec_steps, 1.0)
        tpot = (cycle - prefill) / dec_steps if dec_steps > 0 else 0.0
        if busy < 1.0:
            n = busy
        return _State(n, k, steps, n_mixed, t_mixed, t_pure, cycle, prefill, tpot, frac_mixed, p_tok, dec_mixed, dec_pure, c)

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
        the queue grows through the run. With a client ``request_timeout_s``, the requests
        that cannot finish within it fail, and the latencies and throughput are those of the
        requests that finished (what a benchmark client reports)."""
        if concurrency is None and request_rate is None:
            raise BadInput("a prediction needs a concurrency or a request rate")
        if concurrency is not None and concurrency <= 0:
            raise BadInput(f"concurrency must be positive, got {concurrency}")
        if request_rate is not None and request_rate <= 0:
            raise BadInput(f"request rate must be positive, got {request_rate}")
        mem = self.memory(cfg)
        if not mem.fits:
            raise BadInput(f"TP{cfg.tp} does not fit: {mem.reason}")
        cm = self.cost_model(cfg.tp, cfg.kv_cache_dtype)
        budget, seqs, _ = self._knobs(cfg)
        cap, cap_reason = self.running_cap(cfg)
        cached = self.cached_tokens(cfg)
        dp = cfg.dp
        ovh = cm.request_overhead_s
        tail = cm.output_token_overhead_s * self.output_len

        ms = _multi_step(cfg)
        if request_rate is None and self.synchronized and concurrency / dp > 1.0:
            return self._wave(cfg, cm, concurrency, cap, cap_reason, budget, seqs)
        if request_rate is None:
            c = concurrency / dp
            n = min(c, cap)
            st = self._state(cm, n, budget, cached)
            for _ in range(8):
                # Little's law: of the C requests a client holds, the engine runs those not in
                # API overhead or waiting for the next step.
                e = ovh + st.align(n - 1) * ms + st.cycle + tail
                n_new = min(cap, max(min(c, 1.0), c * st.cycle / e))
                if abs(n_new - n) < 1e-3 * max(n, 1.0):
                    break
                n = 0.5 * (n + n_new)
                st = self._state(cm, n, budget, cached)
            x = st.throughput
            e = ovh + st.align(n - 1) * ms + st.cycle + tail
            wait = max(0.0, c / x - e) if x > 0 else math.inf
            limited = "load" if n < cap - 1e-6 else cap_reason
            resumed = 0.0
            if limited == "kv_cache" and not self.profile.get("chunked_prefill", 1) and wait > 0:
                # Prefill-first schedulers (vLLM < 0.8) admit a prompt whenever its blocks are
                # free and preempt running sequences when the cache fills: past the KV limit
                # the excess waits as preempted sequences (decode slows), not before the first
                # token. Only what exceeds the prompt-only capacity waits for admission.
                mem = self.memory(cfg)
                admit = min(float(seqs), mem.kv_tokens / (self.input_len - cached + 16.0))
                ttft_wait = max(0.0, c - max(admit, n)) / x
                resumed, wait = wait - ttft_wait, ttft_wait
            return self._finish(cfg, cm, st, x, wait, "fixed", limited, False, concurrency, None, budget, seqs, resumed=resumed)

        lam = request_rate / dp
        st_cap = self._state(cm, cap, budget, cached)
        if lam * st_cap.cycle >= cap:
            # Arrivals outrun the replica: over a finite run the queue grows linearly and the
            # i-th request waits i·(1/X − 1/λ).
            cap_x = st_cap.throughput
            n_run = num_prompts or (int(request_rate * duration_s) if duration_s else None)
            n_run = n_run or self.workload.num_prompts or DEFAULT_NUM_PROMPTS
            x, wait = self._overloaded(cfg, cm, st_cap, cap_x, lam, max(n_run / dp, 1.0), request_timeout_s, budget, seqs)
            pred = self._finish(cfg, cm, st_cap, x, wait, "uniform", cap_reason, True, concurrency, request_rate, budget, seqs)
        else:
            lo, hi = 0.0, cap
            for _ in range(40):
                mid = 0.5 * (lo + hi)
                if lam * self._state(cm, max(mid, 1e-3), budget, cached).cycle > mid:
                    lo = mid
                else:
                    hi = mid
                if hi - lo < 1e-3 * max(hi, 1.0):
                    break
            n = max(hi, 1e-3)
            st = self._state(cm, n, budget, cached)
            # M/M/c waiting with c = the cap (Sakasegawa's approximation): negligible until
            # the running batch nears its cap.
            rho = min(n / cap, 0.999)
            wait = st.cycle * rho ** (math.sqrt(2 * (cap + 1)) - 1) / (cap * (1 - rho))
            limited = "load" if rho < 0.95 else cap_reason
            pred = self._finish(cfg, cm, st, lam, wait, "exponential", limited, False, concurrency, request_rate, budget, seqs)
        if concurrency is not None and pred.req_per_s * pred.e2e_s.mean > concurrency:
            # The client caps requests in flight: the closed loop at that cap applies.
            closed = self.predict(cfg, concurrency=concurrency)
            if closed.req_per_s < pred.req_per_s:
                return closed
        return pred

    def _overloaded(self, cfg, cm, st: _State, cap_x: float, lam: float, n: float, timeout: float | None,
                    budget: int, seqs: int) -> tuple[float, float]:
        """(completed req/s, mean queueing wait) of one replica over a finite overloaded run.

        The replica completes ``cap_x`` req/s while ``lam`` arrive, so the j-th request
        (j = 0..n−1, sent at j/λ) starts at j/X and waits W_j = j·(1/X − 1/λ), then spends
        S (its time in the engine) before its last token. A client timeout T fails every
        request with W_j + S > T: the first n_ok = (T − S)/(1/X − 1/λ) + 1 succeed, and the
        later ones start too late (a request pulled from a queue that old holds its slot
        only until the client gives up, so none of them completes either). When requests
        fail, the reported throughput is the successes over the run's span, from the first
        send to the last request's timeout; when all complete it is the replica's capacity
        (the drain at the end of the run is left out, as for a steady state)."""
        d = max(1.0 / cap_x - 1.0 / lam, 0.0)
        n_ok = n
        if timeout is not None and timeout > 0 and d > 0:
            resident = self._finish(cfg, cm, st, cap_x, 0.0, "uniform", "load", True, None, None, budget, seqs).e2e_s.mean
            # At least the first request: with T < S nothing finishes in time, and the
            # figures describe that one request's (timed-out) latency instead.
            n_ok = min(n, max(1.0, math.floor((timeout - resident) / d) + 1.0))
        wait = max(0.0, (n_ok - 1.0) / 2.0 * d)
        if n_ok < n:
            return n_ok / ((n - 1.0) / lam + timeout), wait
        return cap_x, wait

    def _finish(self, cfg, cm, st: _State, x: float, wait: float, wait_kind: str, limited: str,
                saturated: bool, concurrency, request_rate, budget: int, seqs: int,
                gaps: list[tuple[float, float]] | None = None, resumed: float = 0.0) -> Prediction:
        """Means and approximate percentiles from a replica's steady state."""
        I, O = self.input_len, self.output_len
        ovh = cm.request_overhead_s
        chunked = bool(self.profile.get("chunked_prefill", 1))
        dec = max(O - 1.0, 0.0)
        # Closed loop: a new request finds the others running; open loop and bursts: all of them.
        others = st.n - 1 if wait_kind == "fixed" else st.n
        busy = min(1.0, max(others, 0.0))
        ms = _multi_step(cfg)
        ttft_mean = ovh + wait + st.align(others) * ms + st.prefill
        tok = cm.output_token_overhead_s
        # Inter-token gaps, token-weighted: pure decode steps, steps carrying prefill chunks
        # (or, without chunked prefill, gaps that span a whole prefill step); for a burst,
        # also the thinning batch of the drain.
        dist = gaps if gaps else self._steady_gaps(st, 1.0)
        total = sum(w for _, w in dist) or 1.0
        gap_mean = sum(t * w for t, w in dist) / total + tok
        gap_q = {k: v + tok for k, v in _weighted_quantiles(sorted(dist), total).items()}
        if resumed > 0 and dec > 0:
            # Time spent preempted between tokens: spread over the request's decode.
            dist = [(t + resumed / dec, w) for t, w in dist]
            gap_mean += resumed / dec
            gap_q = {k: v + resumed / dec for k, v in gap_q.items()}
        tpot_mean = gap_mean if gaps else st.tpot + tok + resumed / max(dec, 1.0)
        e2e_mean = ttft_mean + dec * tpot_mean

        # Percentiles (approximate; see the module docstring).
        collide_m = min(x * st.prefill, 50.0)  # other prefills arriving while ours runs
        share = 0.5 if chunked else 1.0
        # A longer or shorter prompt than the mean changes the steps it prefills in by its
        # extra tokens' marginal cost (their matmul FLOPs and attention), not in proportion:
        # the step's fixed costs, weight reads and the decodes riding along stay.
        Ic = I - st.cached
        ctx = I + dec / 2.0
        def pf_step(tokens: float) -> float:
            return cm.step_seconds(tokens, tokens * (I + st.cached) / 2.0, tokens * I / Ic, st.decodes_mixed,
                                   st.decodes_mixed * ctx, max(1.0, tokens / Ic))
        delta = max(16.0, 0.1 * st.prefill_tokens_step)
        per_token = max(pf_step(st.prefill_tokens_step + delta) - pf_step(st.prefill_tokens_step), 0.0) / delta
        p_wait = 0.0
        if wait_kind == "exponential" and wait > 0:
            rho = min(st.n / max(self.running_cap(cfg)[0], 1e-9), 0.999)
            p_wait = min(1.0, rho ** (math.sqrt(2 * (self.running_cap(cfg)[0] + 1)) - 1))
        ttft_q, tpot_q, e2e_q = {}, {}, {}
        for name, q in QUANTILES.items():
            if wait_kind == "exponential":
                w = (wait / p_wait) * math.log(p_wait / (1 - q)) if p_wait > 0 and q > 1 - p_wait else 0.0
            elif wait_kind == "uniform":
                w = 2 * wait * q
            else:  # a closed loop's queue is nearly deterministic
                w = wait
            # The mean prefill already holds the average collision; scale by the quantile's
            # share of it.
            k_coll = _poisson_quantile(collide_m, q)
            # A prompt's prefill scales with the tokens it computes (not those the prefix
            # cache serves).
            computed_q = max(self._prepend + _quantile_len(self.workload.input, q) - st.cached, 1.0)
            pf = max(st.prefill + (computed_q - Ic) * per_token, per_token * computed_q)
            pf *= (1 + share * k_coll) / (1 + share * collide_m)
            t = ovh + w + q * st.mean_step * busy * ms + pf
            ttft_q[name] = t
            if gaps:
                tp = gap_q[name]  # a burst: requests decode at whatever batch they met
            elif dec > 0:
                # Mixed steps among one request's decode steps: binomial(O−1, frac_mixed).
                f = st.frac_mixed
                f_q = min(1.0, max(0.0, f + _Z[q] * math.sqrt(max(f * (1 - f), 0.0) / dec)))
                tp = max(st.tpot + (f_q - f) * dec_gap(st, chunked, dec), 0.0) + tok + resumed / dec
            else:
                tp = 0.0
            tpot_q[name] = tp
            devs = (t - ttft_mean, dec * (tp - tpot_mean), (_quantile_len(self.workload.output, q) - O) * tpot_mean)
            mag = math.sqrt(sum(d * d for d in devs))
            e2e_q[name] = max(e2e_mean + math.copysign(mag, sum(devs)), t)
        itl_q = gap_q
        for d, mean in ((ttft_q, ttft_mean), (e2e_q, e2e_mean)):
            # A rare collision lifts the mean a little while the tail misses it: keep the
            # upper percentiles of these latencies at or above their mean.
            for name in ("p90", "p95", "p99"):
                d[name] = max(d[name], mean)
        for d in (ttft_q, tpot_q, itl_q, e2e_q):  # keep p50 <= p90 <= p95 <= p99
            prev = -math.inf
            for name in QUANTILES:
                d[name] = prev = max(d[name], prev)

        # Bottlenecks: the step prefill chunks ride in, and the pure decode step.
        pf_seqs = max(1, round(st.n * st.k / max(st.n_mixed, 1e-9))) if chunked else max(1, round(st.prefill_tokens_step / Ic))
        pf_batch = Batch(
            prefill_tokens=int(st.prefill_tokens_step),
            prefill_attn=st.prefill_tokens_step * (I + st.cached) / 2.0,
            prefill_kv=st.prefill_tokens_step / Ic * (st.k * st.cached + Ic * (st.k + 1) / 2.0) / st.k,
            prefill_seqs=pf_seqs,
            decode_seqs=int(round(st.decodes_mixed)),
            decode_context=round(st.decodes_mixed) * (I + dec / 2),
        )
        dec_batch = Batch.decode(max(1, int(round(st.decodes_pure))), I + dec / 2) if dec > 0 else None
        return self._prediction(
            cfg, cm, budget, seqs, x, pf_batch, dec_batch,
            concurrency=concurrency,
            request_rate=request_rate,
            ttft_ms=_stats(ttft_mean, ttft_q, 1e3),
            itl_ms=_stats(gap_mean, itl_q, 1e3),
            tpot_ms=_stats(tpot_mean, tpot_q, 1e3),
            e2e_s=_stats(e2e_mean, e2e_q),
            running=st.n,
            queued=wait * x,
            limited_by=limited,
            saturated=saturated,
            prefill_chunks=st.k,
            step_ms_mixed=st.t_mixed * 1e3,
            step_ms_decode=st.t_pure * 1e3,
        )

    def _prediction(self, cfg: ServerConfig, cm: CostModel, budget: int, seqs: int, x: float, pf_batch: Batch,
                    dec_batch: Batch | None, **fields) -> Prediction:
        """A :class:`Prediction` from one replica's figures: what every path derives alike
        (the knobs; the whole deployment's throughputs from a replica's request rate ``x``;
        the bottlenecks of the step prefill chunks ride in and of the pure decode step, None
        when requests have a single output token) plus the path's own ``fields``."""
        dp = cfg.dp
        return Prediction(
            tp=cfg.tp,
            dp=dp,
            max_num_batched_tokens=budget,
            max_num_seqs=seqs,
            req_per_s=x * dp,
            output_tok_per_s=x * dp * self.output_len,
            input_tok_per_s=x * dp * self.input_len,
            prefill_bottleneck=cm.breakdown(pf_batch).bottleneck,
            decode_bottleneck=cm.breakdown(dec_batch).bottleneck if dec_batch is not None else "n/a (one output token)",
            **fields,
        )

    def curve(self, cfg: ServerConfig, concurrencies) -> list[Prediction]:
        return [self.predict(cfg, concurrency=c) for c in concurrencies]

    def max_throughput(self, cfg: ServerConfig, num_prompts: int | None = None) -> Prediction:
        """Everything submitted at once: the running batch at its cap, the rest queued."""
        mem = self.memory(cfg)
        if not mem.fits:
            raise BadInput(f"TP{cfg.tp} does not fit: {mem.reason}")
        cap, reason = self.running_cap(cfg)
        n = num_prompts or self.workload.num_prompts or DEFAULT_NUM_PROMPTS
        per_rep = n / cfg.dp
        run = min(per_rep, cap)
        cm = self.cost_model(cfg.tp, cfg.kv_cache_dtype)
        budget, seqs, _ = self._knobs(cfg)
        st = self._state(cm, run, budget, self.cached_tokens(cfg))
        x = st.throughput
        gaps = None
        if self.workload.output.kind != "fixed" and per_rep > 1:
            x, gaps = self._burst(cm, st, per_rep, run, budget)
        # The i-th request of the burst starts once i − N have finished: mean wait (n − N)/2X.
        # Before that, all N admitted prompts prefill back to back in full-budget steps (the
        # j-th one's first token leaves after ceil(j·I/budget) of them): the first N wait half
        # that storm on average, the queued rest all of it.
        storm = self._prefill_storm(cm, run, budget, cfg)
        wait = storm * (1.0 - run / (2.0 * per_rep)) + max(0.0, per_rep - run) / 2.0 / x
        return self._finish(cfg, cm, st, x, wait, "uniform", "load" if run < cap else reason, False, n, None, budget, seqs, gaps)

    def _prefill_storm(self, cm: CostModel, prompts: float, budget: int, cfg: ServerConfig) -> float:
        """Seconds to prefill ``prompts`` prompts that arrived together, in steps of ``budget``
        tokens (without chunked prefill: as many whole prompts as fit a step); 0 when they fit
        one step, which the steady state's own prefill already covers."""
        cached = self.cached_tokens(cfg)
        I = self.input_len
        Ic = max(I - cached, 1.0)
        tokens = prompts * Ic
        if self.profile.get("chunked_prefill", 1):
            per_step = float(budget)
        else:
            per_step = max(1.0, budget // max(int(Ic), 1)) * Ic if Ic <= budget else float(budget)
        if tokens <= per_step:
            return 0.0
        p = per_step
        t_pf = cm.step_seconds(p, p * (I + cached) / 2.0, p * I / Ic, 0.0, 0.0, max(1.0, p / Ic))
        return math.ceil(tokens / p - 1e-9) * t_pf

    @property
    def synchronized(self) -> bool:
        """Fixed lengths: a closed loop's requests start together and finish together."""
        def fixed(d: LengthDist) -> bool:
            return d.kind == "fixed" or (d.kind == "uniform" and d.range_ratio == 0) or (d.kind == "normal" and d.std == 0)

        return fixed(self.workload.input) and fixed(self.workload.output)

    def _wave(self, cfg: ServerConfig, cm: CostModel, concurrency: float, cap: float, cap_reason: str,
              budget: int, seqs: int) -> Prediction:
        """Closed loop with fixed lengths: the requests stay in lock-step waves (they start
        together, all prompts prefill, then all decode and finish on the same step, and the
        client sends the next wave at once) — what ``vllm bench serve`` with fixed random
        lengths and ``--max-concurrency`` produces, on a real server and on the simulator."""
        I, O = self.input_len, self.output_len
        dec = max(O - 1.0, 0.0)
        dp = cfg.dp
        c = concurrency / dp
        w = max(1.0, min(c, cap))
        ovh, tail = cm.request_overhead_s, cm.output_token_overhead_s * O
        cached = self.cached_tokens(cfg)
        Ic = I - cached  # prompt tokens each request computes (the rest are prefix-cache hits)
        tokens = w * Ic
        if self.profile.get("chunked_prefill", 1):
            per_step = float(budget)
        else:
            per_step = max(1.0, budget // max(int(Ic), 1)) * Ic if Ic <= budget else float(budget)
        steps_pf = max(1, math.ceil(tokens / per_step - 1e-9))
        p = tokens / steps_pf
        t_pf = cm.step_seconds(p, p * (I + cached) / 2.0, p * I / Ic, 0.0, 0.0, max(1.0, p / Ic))
        ctx = I + dec / 2.0
        t_dec = cm.step_seconds(0.0, 0.0, 0.0, w, w * ctx, 0.0) if dec > 0 else 0.0
        prefill_all = steps_pf * t_pf
        # Prompt j's first token leaves with the step that finishes it: ceil(j·I/budget) steps.
        def ttft_in(q: float) -> float:
            return max(1, math.ceil(q * tokens / per_step - 1e-9)) * t_pf

        mean_in = sum(ttft_in((j + 1) / 64) for j in range(64)) / 64
        wave = ovh + prefill_all + dec * t_dec + tail
        x = w / wave
        wait = max(0.0, c / x - wave)  # beyond the cap, requests wait whole waves
        e2e = wait + wave
        tok = cm.output_token_overhead_s
        tpot_mean = (prefill_all - mean_in + dec * t_dec) / dec + tok if dec > 0 else 0.0
        ttft_q = {k: ovh + wait + ttft_in(q) for k, q in QUANTILES.items()}
        tpot_q = {k: ((prefill_all - ttft_in(1 - q) + dec * t_dec) / dec + tok if dec > 0 else 0.0) for k, q in QUANTILES.items()}
        # Gaps: decode steps, and for early prompts one gap spanning the rest of the prefill.
        first_gap = prefill_all - mean_in + t_dec
        gaps = [(t_dec + tok, max(dec - 1, 0.0)), (first_gap + tok, 1.0 if dec >= 1 else 0.0)]
        ordered = sorted(g for g in gaps if g[1] > 0) or [(0.0, 1.0)]
        total = sum(g[1] for g in ordered)
        itl_q = _weighted_quantiles(ordered, total)
        itl_mean = sum(t * wt for t, wt in ordered) / total
        e2e_q = {k: e2e for k in QUANTILES}
        limited = "load" if c <= cap + 1e-9 else cap_reason
        pf_batch = Batch(prefill_tokens=int(p), prefill_attn=p * (I + cached) / 2.0, prefill_kv=p * I / Ic,
                         prefill_seqs=max(1, int(p / Ic)))
        dec_batch = Batch.decode(max(1, int(round(w))), ctx) if dec > 0 else None
        return self._prediction(
            cfg, cm, budget, seqs, x, pf_batch, dec_batch,
            concurrency=concurrency,
            request_rate=None,
            ttft_ms=_stats(ovh + wait + mean_in, ttft_q, 1e3),
            itl_ms=_stats(itl_mean, itl_q, 1e3),
            tpot_ms=_stats(tpot_mean, tpot_q, 1e3),
            e2e_s=_stats(e2e, e2e_q),
            running=w,
            queued=max(0.0, c - w),
            limited_by=limited,
            saturated=False,
            prefill_chunks=steps_pf,
            step_ms_mixed=t_pf * 1e3,
            step_ms_decode=t_dec * 1e3,
        )

    def _steady_gaps(self, st: _State, weight: float) -> list[tuple[float, float]]:
        """Inter-token gaps of the steady state, as (seconds, share of tokens)."""
        dec = self.output_len - 1.0
        if dec <= 0:
            return [(0.0, weight)]
        if self.profile.get("chunked_prefill", 1):
            f = 1.0 if st.n_mixed >= st.steps else min(1.0, max(st.frac_mixed, 0.0))
            return [(st.t_pure, weight * (1 - f)), (st.t_mixed, weight * f)]
        stalls = max(st.n_mixed - st.k, 0.0) / dec  # prefill steps per decode gap
        s = min(1.0, stalls)
        if s <= 0:
            return [(st.t_pure, weight)]
        return [(st.t_pure, weight * (1 - s)), (st.t_pure + st.t_mixed * stalls / s, weight * s)]

    def _burst(self, cm: CostModel, st: _State, n: float, run: float, budget: int) -> tuple[float, list[tuple[float, float]]]:
        """Request rate of a finite burst whose output lengths vary: the queue drains at the
        capped steady state, then the last ``run`` requests finish one by one and the batch
        thins out — the long ones decode almost alone (the "drain"), which is what a burst
        of ShareGPT-like requests spends much of its time on."""
        I = self.input_len
        Ic = I - st.cached
        # 48 quantiles; the last one is the longest of n draws (about the 1 − 1/2n quantile).
        grid = [(j + 0.5) / 48 for j in range(47)] + [max(47.5 / 48, 1 - 0.5 / n)]
        lengths = sorted(_quantile_len(self.workload.output, q) for q in grid)
        queued = max(0.0, n - run)
        total = queued / st.throughput if queued else 0.0
        gaps: list[tuple[float, float]] = []  # (decode step seconds, tokens produced at it)
        if queued:
            gaps.extend(self._steady_gaps(st, queued * max(self.output_len - 1, 0.0)))
        else:
            # One wave: every prompt prefills first (budget-sized steps), then decodes.
            tokens = run * Ic
            steps = max(1, math.ceil(tokens / budget))
            per = tokens / steps
            total += steps * cm.step_seconds(per, per * (I + st.cached) / 2.0, per * I / Ic, 0.0, 0.0, run / steps)
        prev = 0.0
        m = len(lengths)
        for j, length in enumerate(lengths):
            b = run * (m - j) / m  # sequences still decoding
            dt = max(length - prev, 0.0)
            if dt > 0:
                t = cm.step_seconds(0.0, 0.0, 0.0, b, b * (I + (prev + length) / 2.0), 0.0)
                total += dt * t
                gaps.append((t, dt * b))
            prev = length
        return (n / total if total > 0 else st.throughput), gaps


def dec_gap(st: _State, chunked: bool, dec: float) -> float:
    """How much a request's TPOT moves per unit of its share of mixed decode steps."""
    if chunked:
        return st.t_mixed - st.t_pure
    # Without chunked prefill a stall is a whole prefill step on top of the decode step.
    return st.t_mixed * (max(st.n_mixed - st.k, 0.0) + dec) / dec


def _multi_step(cfg: ServerConfig) -> int:
    """vLLM 0.6's multi-step scheduling (``--num-scheduler-steps``): the engine runs that many
    decode steps per scheduling round, so a new request waits for the round in flight."""
    try:
        return max(1, int(cfg.extra_args.get("num_scheduler_steps", cfg.extra_args.get("num-scheduler-steps", 1))))
    except (TypeError, ValueError):
        return 1
