"""The steady state of continuous batching on one replica, the analytic estimator's core.

Per replica (data-parallel replicas split the load evenly):

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
- Prefix-cache hits (``cached`` prompt tokens per request) are not computed at prefill, but
  their KV is still read by the attention of the prompt's chunks and of every decode step.

How a load point (closed or open loop) picks N is :mod:`core.estimate.predict`; the latency
distribution of a state is :mod:`core.estimate.latency`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from core.estimate.costmodel import CostModel
from core.estimate.stats import cv2_len
from core.spec.serving import ServerConfig
from core.spec.workload import LengthDist


@dataclass(frozen=True, slots=True)
class Shape:
    """The requests as the estimator sees them, fixed for one Predictor: the workload's length
    distributions, the shared prefix prepended to every prompt, the mean lengths (the prefix
    included in ``input_len``) and whether the engine chunks its prefills."""

    input: LengthDist
    output: LengthDist
    prepend: float
    input_len: float
    output_len: float
    chunked: bool


def length_bias(shape: Shape) -> float:
    """Tokens the running sequences' mean context gains because their answers' lengths vary.
    A slot holds each request for its O - 1 decode steps, so long answers fill the batch for
    longer (length-biased, the inspection paradox): the steps' mean context is
    I + E[(O-1)^2] / (2 E[O-1]), which is I + (O-1)/2 plus Var(O) / (2 E[O-1]). ShareGPT-like
    answers (a log-normal with sigma 1) more than double the decoded half; the simulator,
    which tracks each sequence, ran 13-15% slower per token than the estimator without it
    (Qwen3-4B on an L4 at concurrency 64-128; ``bench/estimate_vs_sim.py``)."""
    dec = shape.output_len - 1.0
    return _cv2(shape.output) * shape.output_len**2 / (2.0 * dec) if dec > 0 else 0.0


@lru_cache(maxsize=64)
def _cv2(dist: LengthDist) -> float:
    # Every steady state asks (many per prediction); a bundled shape has 256 values.
    return cv2_len(dist)


def decode_context(shape: Shape) -> float:
    """Mean context of the sequences decoding in a step (:func:`length_bias`)."""
    return shape.input_len + max(shape.output_len - 1.0, 0.0) / 2.0 + length_bias(shape)


@dataclass(slots=True)
class State:
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

    def align(self, others: float, group: int = 1, ahead: int = 0) -> float:
        """Mean wait before a new request's first step can start: half of the step group in
        flight (``group`` steps per scheduling pass under multi-step scheduling), plus the
        ``ahead`` steps an engine that schedules ahead had already committed when it arrived,
        when the engine is busy with ``others`` sequences; nothing when it is idle."""
        return (0.5 * group + ahead) * self.mean_step * min(1.0, max(others, 0.0))


def steady_state(shape: Shape, cm: CostModel, n: float, budget: int, cached: float = 0.0, evicting: bool = False, poisson: bool = False) -> State:
    """One replica running ``n`` sequences (fractional below one: idle part of the time) with
    a token budget of ``budget`` per step and ``cached`` prompt tokens per request from the
    prefix cache. ``evicting``: the KV cache is full and requests wait (:func:`recompute_tokens`).
    ``poisson``: requests arrive at random (an open loop), not as others finish (a closed one);
    see :func:`_seen_by_a_decode`."""
    I, O = shape.input_len, shape.output_len
    # Prefix-cache hits: only Ic = I − c prompt tokens are computed, at contexts c..I, so
    # a prompt's attention pairs are (I² − c²)/2 and its chunks read the cached KV too.
    c = min(max(cached, 0.0), I - 1.0)
    Ic = I - c
    dec_steps = O - 1.0
    # Below one running sequence the replica is idle part of the time: each step still
    # serves one whole sequence, and throughput scales with the busy share.
    busy = min(n, 1.0)
    mean_n = n
    n = max(n, 1.0)
    ctx = decode_context(shape)  # mean context of a decoding sequence
    own = n * (Ic + dec_steps)  # the batch's own tokens per cycle, prompts and decodes

    def step(p_tok: float, p_attn: float, p_kv: float, dec: float, dec_ctx: float, prefilling: float, rides: float = 0.0) -> float:
        # ``rides``: evicted context recomputed in every step, at the running contexts.
        return cm.step_seconds(p_tok + rides, p_attn + rides * ctx / 2.0, p_kv + rides, dec, dec_ctx, prefilling + rides / ctx)

    if shape.chunked:
        # Decodes go first; prefill gets what is left of the budget.
        k = max(1, math.ceil(Ic / budget))
        for _ in range(3):
            steps = k + dec_steps
            prefilling = n * k / steps
            avail = max(budget - (n - max(prefilling, 1.0)), budget * 0.02, 1.0)
            k_new = max(1, math.ceil(Ic / avail))
            if k_new == k:
                break
            k = k_new
        steps = k + dec_steps
        r = recompute_tokens(n, budget, own / budget / steps) if evicting else 0.0
        # An evicted request is readmitted like a prompt, its whole context in budget-sized
        # chunks: the recompute (r tokens a step on average) rides in the mixed steps, where
        # it is compute-bound, not spread thinly over the memory-bound decode steps (spread,
        # it hid under the decode's KV read: 1,024/1,024-token bursts on a small A100 cache
        # came out 1.17x the simulator's throughput, and 1.34x what dlvllm measured).
        chunk_r = max(1.0, min(ctx, avail))
        recomputed = r * steps  # tokens per cycle
        chunks = n * k + recomputed / chunk_r
        n_mixed = min(steps, chunks)
        prefilling = chunks / n_mixed  # sequences prefilling in a mixed step
        dec_mixed = max(0.0, n - prefilling) if n_mixed < steps else n * dec_steps / steps
        dec_pure = n
        bound = own / max(budget - r, budget * 0.02, 1.0)
        if bound > steps:
            # Token-budget bound: every step is full (decodes plus prefill chunks up to
            # max_num_batched_tokens) and prompts wait between their chunks.
            steps = n_mixed = bound
            recomputed = r * steps
            prefilling = max(1.0, n - n * dec_steps / steps)
            dec_mixed = n * dec_steps / steps
        p_tok = (n * Ic + recomputed) / n_mixed
        # Attention pairs and KV read by the prefill chunks, per mixed step.
        p_attn = (n * (I * I - c * c) / 2.0 + recomputed * ctx / 2.0) / n_mixed
        p_kv = (n * (k * c + Ic * (k + 1) / 2.0) + recomputed) / n_mixed
        t_mixed = step(p_tok, p_attn, p_kv, dec_mixed, dec_mixed * ctx, prefilling)
        t_pure = step(0.0, 0.0, 0.0, dec_pure, dec_pure * ctx, 0.0) if n_mixed < steps else t_mixed
        cycle = n_mixed * t_mixed + (steps - n_mixed) * t_pure
        prefill = max(k, steps - dec_steps) * t_mixed
        decode_work = n * dec_steps
        frac_mixed = (n_mixed * dec_mixed / decode_work) if decode_work > 0 else 0.0
        if poisson and r == 0 and n_mixed < steps and dec_steps > 0:
            n_mixed = _seen_by_a_decode(mean_n, k, k, dec_steps, t_mixed, t_pure, stalls=False)
            cycle = n_mixed * t_mixed + (steps - n_mixed) * t_pure
            frac_mixed = (n_mixed - k) / dec_steps
    else:
        # Prefill-only steps (vLLM < 0.8 by default, SGLang): whole prompts, several per step
        # when they fit the budget (longer prompts in budget-sized pieces), while decodes
        # stall. Waiting prompts go first, so those that arrived during the last step share one.
        k = max(1, math.ceil(Ic / budget))
        r = recompute_tokens(n, budget) if evicting else 0.0  # rides in every step here
        t_pure = step(0.0, 0.0, 0.0, n, n * ctx, 0.0, r) if dec_steps > 0 else 0.0
        fit = max(1.0, budget // max(int(Ic), 1)) if k == 1 else 1.0
        group = 1.0
        for _ in range(4):
            chunk = group * Ic / k
            t_mixed = step(chunk, group * (I * I - c * c) / 2.0 / k, group * (k * c + Ic * (k + 1) / 2.0) / k, 0.0, 0.0, group, r)
            n_mixed = n * k / group
            cycle = n_mixed * t_mixed + dec_steps * t_pure
            arrivals_per_step = n / cycle * (cycle / (n_mixed + dec_steps)) if k == 1 else 1.0
            group = min(max(1.0, arrivals_per_step), fit, n)
        steps = n_mixed + dec_steps
        prefill = k * t_mixed
        dec_mixed, dec_pure, p_tok = 0.0, n, group * Ic / k
        if poisson and r == 0 and dec_steps > 0:
            n_mixed = _seen_by_a_decode(mean_n, k, k / group, dec_steps, t_mixed, t_pure, stalls=True)
            steps = n_mixed + dec_steps
            cycle = n_mixed * t_mixed + dec_steps * t_pure
        # A decoding request stalls through the other prompts' prefill steps.
        frac_mixed = max(0.0, n_mixed - k) / max(n_mixed - k + dec_steps, 1.0)
    tpot = (cycle - prefill) / dec_steps if dec_steps > 0 else 0.0
    if busy < 1.0:
        n = busy
    return State(n, k, steps, n_mixed, t_mixed, t_pure, cycle, prefill, tpot, frac_mixed, p_tok, dec_mixed, dec_pure, c)


def _seen_by_a_decode(n: float, k: int, per_prompt: float, dec_steps: float, t_mixed: float, t_pure: float, stalls: bool) -> float:
    """Prefill steps in one request's life at random arrivals: its own ``k`` and the others'
    that fall in its decode (``per_prompt`` steps each; ``stalls``: they hold the decode, as
    without chunked prefill, rather than carry its token). A closed loop of ``n`` has n - 1
    others, each prefilling once per cycle; random arrivals bring ``n / cycle`` prompts a
    second whatever a request is doing, so its decode meets n x per_prompt x (its decode's
    share of its cycle) of their steps. At light load that is several times n - 1: a lone
    decode of a 4,000-token prompt's answer still meets the chunks of prompts that arrive
    meanwhile (Llama-3.1-8B on an A100 at 0.5 req/s: TPOT 12.8 ms with n - 1 others, 15.0 in
    the simulator's scheduler)."""
    others = 0.0
    for _ in range(8):
        t_dec = dec_steps * t_pure + others * (t_mixed if stalls else t_mixed - t_pure)
        cycle = k * t_mixed + t_dec
        others = n * per_prompt * t_dec / cycle if cycle > 0 else 0.0
        if not stalls:
            others = min(others, dec_steps)
    return k + others


def mixed_step_seconds(shape: Shape, st: State, cm: CostModel, tokens: float) -> float:
    """Seconds of one mixed step of the steady state ``st`` carrying ``tokens`` prompt tokens
    (in chunks of the prompts' uncached part) beside its decodes, which sit at the
    average context: what a prompt's chunk costs, and what a full budget of them costs."""
    I = shape.input_len
    Ic = max(I - st.cached, 1.0)
    ctx = decode_context(shape)
    return cm.step_seconds(tokens, tokens * (I + st.cached) / 2.0, tokens * I / Ic, st.decodes_mixed, st.decodes_mixed * ctx, max(1.0, tokens / Ic))


def recompute_tokens(n: float, budget: int, filled: float = 0.0) -> float:
    """Prompt tokens recomputed per step when the KV cache is full and requests wait, on an
    engine that admits a request once its prompt fits and frees a running one's cache to let
    the others grow (vLLM's preemption by recompute). Every step the
    ``n`` running sequences grow by a token each; the blocks a finishing request frees go to
    the waiting prompts at once, so that growth is paid by evicting a running request, whose
    context is computed again when it is readmitted: ``n`` tokens of prefill per step, however
    long the prompts (at most the step's token budget). Measured without it, the published
    and calibration rows that run at the KV cache's limit came out 1.41x too fast on vLLM
    (65 rows, ITL 0.83x) and 1.84x on SGLang (14 rows), against 1.01x and 1.03x for the rows
    the load limits; TensorRT-LLM, which reserves a request's whole length at admission,
    1.10x (31 rows).

    ``filled``: the share of the budget the batch's own tokens (prompts and decodes) take.
    Only a step with budget to spare admits a waiting request into the blocks a completion
    frees; in a full step they pay for the growth instead, so eviction pays for it in the
    other 1 - ``filled`` of the steps (the simulator's scheduler recomputes 0.04-0.92 tokens
    per running sequence per step as the batch fills 97-6% of the budget)."""
    return min(max(n, 0.0), float(budget)) * (1.0 - min(max(filled, 0.0), 1.0))


def steady_gaps(shape: Shape, st: State, weight: float) -> list[tuple[float, float]]:
    """Inter-token gaps of the steady state, as (seconds, share of tokens)."""
    dec = shape.output_len - 1.0
    if dec <= 0:
        return [(0.0, weight)]
    if shape.chunked:
        f = 1.0 if st.n_mixed >= st.steps else min(1.0, max(st.frac_mixed, 0.0))
        return [(st.t_pure, weight * (1 - f)), (st.t_mixed, weight * f)]
    stalls = max(st.n_mixed - st.k, 0.0) / dec  # prefill steps per decode gap
    s = min(1.0, stalls)
    if s <= 0:
        return [(st.t_pure, weight)]
    return [(st.t_pure, weight * (1 - s)), (st.t_pure + st.t_mixed * stalls / s, weight * s)]


def dec_gap(st: State, chunked: bool, dec: float) -> float:
    """How much a request's TPOT moves per unit of its share of mixed decode steps."""
    if chunked:
        return st.t_mixed - st.t_pure
    # Without chunked prefill a stall is a whole prefill step on top of the decode step.
    return st.t_mixed * (max(st.n_mixed - st.k, 0.0) + dec) / dec


def multi_step(cfg: ServerConfig) -> int:
    """vLLM 0.6's multi-step scheduling (``--num-scheduler-steps``): the engine runs that many
    decode steps per scheduling round, so a new request waits for the round in flight."""
    try:
        return max(1, int(cfg.engine_arg("num_scheduler_steps", 1)))
    except (TypeError, ValueError):
        return 1
