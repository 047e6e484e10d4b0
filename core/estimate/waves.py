"""Closed loops with fixed lengths, and finite bursts: where requests do not reach the
staggered steady state of :mod:`core.estimate.steady`.

- Waves: with fixed lengths a closed loop's first requests start together (as ``vllm bench
  serve`` with fixed random lengths sends them): the first wave is the prefill of all its
  prompts in budget-sized steps, then O − 1 decode steps at the full batch. Its requests
  finish one prefill step apart, as they started, so the next ones arrive staggered at the
  pace the budget takes them: from the second cycle on a prompt waits for its own chunk,
  not for the whole wave's prefill, and its decode runs through the others' prefill steps.
- A burst (everything submitted at once) whose output lengths vary: the queue drains at the
  capped steady state, then the batch thins out as the short requests finish.
- The prefill storm: prompts that arrive together prefill back to back in full-budget steps.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import NamedTuple

from core.estimate.costmodel import Batch, CostModel
from core.estimate.prediction import Prediction, make_prediction
from core.estimate.stats import QUANTILES, is_fixed, quantile_len, stats_of, weighted_quantiles
from core.estimate.steady import Shape, State, recompute_tokens, steady_gaps
from core.spec.serving import ServerConfig


class BurstTPOT(NamedTuple):
    """A burst's TPOT as benchmark clients average it (:func:`burst`)."""

    classes: list[tuple[float, float]]  # (TPOT seconds, share of requests) per output-length class
    decode_s: float  # mean seconds from a request's first token to its last
    # (seconds from first token to last, share of requests), sorted: where the long answers
    # decode in the drain, their E2E tail (latency.finish's run_decode); empty: not priced
    spans: list[tuple[float, float]] = []


class BurstWait(NamedTuple):
    """What a burst's requests wait before their prefill (everything submitted at once).

    The first ``1 − queued`` of them are admitted together and prefill back to back in
    full-budget steps (the storm): the j-th one's first token waits j/N of it. The queued
    rest wait the whole storm and then for a slot: the i-th starts once i running requests
    have finished. Those finish at the steady rate X, but only after a first request has
    decoded: the first wave all started together, so by renewal theory the i-th completion
    comes about (i + N(1 − CV²)/2)/X after they started (CV: the output lengths' spread;
    fixed lengths finish as a wave, widely spread ones staggered from the start), and they
    started during the storm (``Predictor.max_throughput`` sets ``first_s``). Only the
    queued share waits for a slot: averaging that wait over every request instead
    over-counted it by n/(n − N), 1.3x at 1,000 prompts over 256 slots."""

    storm_s: float
    queued: float  # share of the burst that finds no slot free
    drain_s: float  # seconds from the first queued request's start to the last one's: (n − N)/X
    first_s: float = 0.0  # from the storm's end to the first queued request's start

    @property
    def mean(self) -> float:
        return self.storm_s * (1.0 - (1.0 - self.queued) / 2.0) + self.queued * (self.first_s + self.drain_s / 2.0)

    def at(self, q: float) -> float:
        """The wait at quantile ``q`` of the burst's requests."""
        admitted = 1.0 - self.queued
        if q <= admitted:
            return self.storm_s * q / admitted if admitted > 0 else 0.0
        return self.storm_s + self.first_s + self.drain_s * (q - admitted) / self.queued


def synchronized(shape: Shape) -> bool:
    """Fixed lengths: a closed loop's requests start together and finish together."""
    return is_fixed(shape.input) and is_fixed(shape.output)


def prefill_tokens_per_step(shape: Shape, Ic: float, budget: int) -> float:
    """Prompt tokens one prefill step takes: the whole budget with chunked prefill; without it,
    as many whole prompts of ``Ic`` computed tokens as fit (a longer prompt takes the budget)."""
    if shape.chunked:
        return float(budget)
    return max(1.0, budget // max(int(Ic), 1)) * Ic if Ic <= budget else float(budget)


def prefill_step_seconds(cm: CostModel, p: float, I: float, cached: float, Ic: float) -> float:
    """One step prefilling ``p`` prompt tokens of ``I``-token prompts whose first ``cached``
    tokens the prefix cache serves (``Ic`` computed per prompt)."""
    return cm.step_seconds(p, p * (I + cached) / 2.0, p * I / Ic, 0.0, 0.0, max(1.0, p / Ic))


def wave(
    shape: Shape,
    cfg: ServerConfig,
    cm: CostModel,
    concurrency: float,
    cap: float,
    cap_reason: str,
    budget: int,
    seqs: int,
    cached: float,
    num_prompts: float | None = None,
    evicting: bool = False,
) -> Prediction:
    """Closed loop with fixed lengths, ``num_prompts`` requests in all (None: production, no first wave).
    ``evicting``: requests wait at a full KV cache that the engine frees by eviction, and
    each decode step recomputes evicted context (:func:`core.estimate.steady.recompute_tokens`).
    The first ``w`` requests start together: all prompts prefill in budget-sized steps,
    then all decode, each finishing ``dec`` steps after its first token. With chunked
    prefill the client's next requests therefore arrive staggered, one prefill chunk apart,
    and each waits only for its own chunk (half a step to the next step, then its prompt's
    share of the budget);
    the cycle and the throughput are the same, so the prefill time they no longer wait
    for moves into their TPOT. On NIM's Llama-3.3-70B FP8 runs (5000/500 tokens, H100
    TP2) the lock-step model put TTFT at 8-13x the measured 0.69-0.83 s at concurrency
    25-50; the staggered cycles give 1.5 mixed steps, and a TPOT within 5%."""
    I, O = shape.input_len, shape.output_len
    dec = max(O - 1.0, 0.0)
    dp = cfg.dp
    c = concurrency / dp
    w = max(1.0, min(c, cap))
    tok = cm.output_token_overhead_s
    ovh, tail = cm.first_token_overhead_s, tok * dec  # the other O - 1 tokens' API-server passes
    Ic = I - cached  # prompt tokens each request computes (the rest are prefix-cache hits)
    tokens = w * Ic
    per_step = prefill_tokens_per_step(shape, Ic, budget)
    steps_pf = max(1, math.ceil(tokens / per_step - 1e-9))
    p = tokens / steps_pf
    # The scheduler fills each step's budget in turn: full steps, then what is left.
    t_full = prefill_step_seconds(cm, min(per_step, tokens), I, cached, Ic)
    t_last = prefill_step_seconds(cm, tokens - (steps_pf - 1) * per_step, I, cached, Ic)
    prefill_all = (steps_pf - 1) * t_full + t_last
    t_pf = prefill_all / steps_pf  # the mean step
    ctx = I + dec / 2.0
    r = recompute_tokens(w, budget, w * (Ic + dec) / budget / (steps_pf + dec)) if evicting and c > cap else 0.0
    t_dec = cm.step_seconds(0.0, 0.0, 0.0, w, w * ctx, 0.0) if dec > 0 else 0.0
    if r > 0 and dec > 0:
        # Evicted contexts come back in chunks (a context at a time, up to the budget) in
        # some of the decode steps, as in the steady state (core.estimate.steady).
        chunk = max(r, min(ctx, float(per_step)))
        with_chunk = r * dec / chunk  # decode steps that carry one
        t_chunk = cm.step_seconds(chunk, chunk * ctx / 2.0, chunk, w, w * ctx, 1.0)
        t_dec += (t_chunk - t_dec) * with_chunk / dec

    # Prompt j's first token leaves with the step that finishes it: ceil(j·I/budget) steps.
    def ttft_in(q: float) -> float:
        k = min(steps_pf, max(1, math.ceil(q * tokens / per_step - 1e-9)))
        return (k - 1) * t_full + (t_last if k == steps_pf else t_full)

    wave = ovh + prefill_all + dec * t_dec + tail
    x = w / wave
    wait = max(0.0, c / x - wave)  # beyond the cap, requests wait whole waves
    e2e = wait + wave
    # The first wave's requests (a share f1 of the run) wait for the prompts before theirs;
    # the later ones for their own chunk only (the same when every prompt fits one step).
    grid = [ttft_in((j + 1) / 64) for j in range(64)]
    grid_mean = sum(grid) / 64
    # Its own chunk: half a step to the next step boundary, then its share of the budget
    # (never less than its prompt alone takes, never more than the first wave waited).
    alone = prefill_step_seconds(cm, min(Ic, per_step), I, cached, Ic) * math.ceil(Ic / per_step - 1e-9)
    own = min(prefill_all, max(alone, t_pf * (0.5 + Ic / per_step))) if steps_pf > 1 else grid[-1]
    # Only a run of given length (a benchmark) starts with its first wave; production traffic
    # arrives already staggered (f1 = 0), as the steady state's rule has it. A prefill-first
    # scheduler (no chunked prefill) never staggers: it holds every decode while prompts
    # wait, so a wave's requests start decoding together, finish together, and send the next
    # wave together; every wave is a first wave.
    if not shape.chunked:
        f1 = 1.0
    else:
        f1 = min(1.0, w / max(num_prompts / dp, 1.0)) if num_prompts else 0.0
        if dec > 0 and steps_pf > 1:
            # The stagger holds only if a request's successor reaches the scheduler within a
            # decode step of its end (ovh < t_dec), so that its prompt rides the next step and
            # the next group ends a mixed step later. Where the round trip spans more than a
            # decode step, the groups end a decode step apart, their prompts arrive faster
            # than the budget takes them, queue, and the first wave's lock-step repeats (the
            # simulator's scheduler: Qwen2.5-0.5B on an L4, 256/128 at 16-64 concurrent).
            f1 = max(f1, min(1.0, max(0.0, ovh / t_dec - 0.5)))
    mean_in = f1 * grid_mean + (1.0 - f1) * own
    first = [(t, f1 / 64) for t in grid] + [(own, 1.0 - f1)]
    ttft_q = {k: ovh + wait + v for k, v in weighted_quantiles(sorted(first), 1.0).items()}

    def tpot_of(ttft_body: float) -> float:
        return (prefill_all - ttft_body + dec * t_dec) / dec + tok if dec > 0 else 0.0

    tpot_mean = tpot_of(mean_in)
    tpot_q = weighted_quantiles(sorted((tpot_of(t), wt) for t, wt in first), 1.0)
    # Gaps: decode steps; a first-wave request's first gap spans the rest of the prefill,
    # a later request's decode runs through the others' prefill steps one step at a time.
    # Staggered prompts that fit the budget arrive a step apart or more, so each takes a
    # step of its own: w − 1 steps carrying one prompt, not the budget-sized steps of the
    # first wave (the p99 ITL of 4x L4 at 16 per replica read 299 ms, a 2,048-token step,
    # where the simulator's 1,024-token prompts took 137 ms steps). The same prefill time
    # in fewer, longer steps when a prompt needs several.
    first_gap = prefill_all - grid_mean + t_dec
    others = prefill_all - own
    if Ic < per_step and w > 1:
        k = w - 1.0
    else:
        k = max(0.0, others / t_pf) if t_pf > 0 else 0.0
    k_in = min(k, dec)
    gap_pf = others / k_in if k_in > 0 else 0.0
    gaps = [
        (t_dec + tok, f1 * max(dec - 1, 0.0)),
        (first_gap + tok, f1 if dec >= 1 else 0.0),
        (t_dec + tok, (1.0 - f1) * max(dec - k_in, 0.0)),
        (gap_pf + t_dec + tok, (1.0 - f1) * k_in),
    ]
    ordered = sorted(g for g in gaps if g[1] > 0) or [(0.0, 1.0)]
    total = sum(g[1] for g in ordered)
    itl_q = weighted_quantiles(ordered, total)
    itl_mean = sum(t * wt for t, wt in ordered) / total
    e2e_q = {k: e2e for k in QUANTILES}
    limited = "load" if c <= cap + 1e-9 else cap_reason
    pf_batch = Batch(prefill_tokens=int(p), prefill_attn=p * (I + cached) / 2.0, prefill_kv=p * I / Ic, prefill_seqs=max(1, int(p / Ic)))
    dec_batch = Batch.decode(max(1, int(round(w))), ctx) if dec > 0 else None
    return make_prediction(
        cfg,
        cm,
        budget,
        seqs,
        x,
        pf_batch,
        dec_batch,
        I,
        O,
        concurrency=concurrency,
        request_rate=None,
        ttft_ms=stats_of(ovh + wait + mean_in, ttft_q, 1e3),
        itl_ms=stats_of(itl_mean, itl_q, 1e3),
        tpot_ms=stats_of(tpot_mean, tpot_q, 1e3),
        e2e_s=stats_of(e2e, e2e_q),
        running=w,
        queued=max(0.0, c - w),
        limited_by=limited,
        saturated=False,
        prefill_chunks=steps_pf,
        step_ms_mixed=t_pf * 1e3,
        step_ms_decode=t_dec * 1e3,
    )


def burst(
    shape: Shape, cm: CostModel, st: State, n: float, run: float, budget: int, storm_s: float = 0.0
) -> tuple[float, list[tuple[float, float]], BurstTPOT]:
    """Request rate of a finite burst whose output lengths vary: the queue drains at the
    capped steady state, then the last ``run`` requests finish one by one and the batch
    thins out — the long ones decode almost alone (the "drain"), which is what a burst
    of ShareGPT-like requests spends much of its time on.

    Also returns the inter-token gaps (token-weighted) and each request class's TPOT
    (request-weighted, as benchmark clients average it: ``(e2e − ttft) / (output − 1)`` per
    request, then the mean over requests) with the mean seconds from first to last token.
    The two averages differ in a burst: a short request decodes only at the full batch's
    slow steps, a long one mostly in the fast drain, and the time a first-wave request
    waits after its first token while the other prompts prefill (the whole rest of the
    storm where prompts stall decodes, as SGLang's prefill batches do) is divided by a
    short request's few tokens."""
    I = shape.input_len
    Ic = I - st.cached
    # 48 quantiles; the last one is the longest of n draws (about the 1 − 1/2n quantile).
    grid = [(j + 0.5) / 48 for j in range(47)] + [max(47.5 / 48, 1 - 0.5 / n)]
    lengths = sorted(quantile_len(shape.output, q) for q in grid)
    queued = max(0.0, n - run)
    # The first ``run`` prompts prefill back to back before the queue drains at the steady
    # rate (which prices only the queued requests' prefills).
    total = storm_s + queued / st.throughput if queued else 0.0
    gaps: list[tuple[float, float]] = []  # (decode step seconds, tokens produced at it)
    if queued:
        gaps.extend(steady_gaps(shape, st, queued * max(shape.output_len - 1, 0.0)))
    else:
        # One wave: every prompt prefills first (budget-sized steps), then decodes.
        tokens = run * Ic
        steps = max(1, math.ceil(tokens / budget))
        per = tokens / steps
        total += steps * cm.step_seconds(per, per * (I + st.cached) / 2.0, per * I / Ic, 0.0, 0.0, run / steps)
    prev = 0.0
    m = len(lengths)
    decoded = 0.0  # seconds of the drain so far: class j's decode lasts decoded after its segment
    drain_s: list[float] = []
    for j, length in enumerate(lengths):
        b = run * (m - j) / m  # sequences still decoding
        dt = max(length - prev, 0.0)
        if dt > 0:
            t = cm.step_seconds(0.0, 0.0, 0.0, b, b * (I + (prev + length) / 2.0), 0.0)
            total += dt * t
            decoded += dt * t
            gaps.append((t, dt * b))
        drain_s.append(decoded)
        prev = length
    tpots = _request_tpots(shape, cm, st, n, run, budget, lengths, drain_s)
    return (n / total if total > 0 else st.throughput), gaps, tpots


def _request_tpots(
    shape: Shape, cm: CostModel, st: State, n: float, run: float, budget: int, lengths: list[float], drain_s: list[float]
) -> BurstTPOT:
    """(TPOT, share of requests) per class of a burst (:func:`burst`), and the mean seconds
    from a request's first token to its last. The requests admitted while others queue
    decode at the steady state's TPOT; the last ``run`` decode through the drain, class j
    for ``drain_s[j]``. The first ``run`` requests' prompts prefill back to back (the
    storm): one whose first token leaves at share q of it then waits (1 − q) of the storm,
    half on average. With chunked prefill it decodes meanwhile, one token per storm step,
    so only each step's extra over a decode step delays it."""
    I = shape.input_len
    storm = prefill_storm(shape, cm, run, budget, st.cached)
    stall = 0.0
    if storm > 0:
        stall = storm / 2.0
        if shape.chunked:
            steps = storm_steps(shape, run, budget, st.cached)[0]
            full = cm.step_seconds(0.0, 0.0, 0.0, run, run * I, 0.0)
            stall = max(0.0, stall - steps / 2.0 * full)
    # The first ``run`` requests prefill in the storm and the last ``run`` decode through the
    # drain: the same share of the burst (one set when nothing queues).
    first = drained = min(1.0, run / n)
    queue_s = max(n - run, 0.0) / st.throughput if st.throughput > 0 else 0.0

    def through_drain(tokens: float) -> float:
        """Seconds of the drain (from the queue's end) to decode ``tokens`` more."""
        i = bisect_left(lengths, tokens)
        if i >= len(lengths):
            return drain_s[-1]
        lo_len, lo_s = (lengths[i - 1], drain_s[i - 1]) if i > 0 else (0.0, 0.0)
        hi_len, hi_s = lengths[i], drain_s[i]
        return lo_s + (hi_s - lo_s) * ((tokens - lo_len) / (hi_len - lo_len) if hi_len > lo_len else 1.0)

    out: list[tuple[float, float]] = []
    spans: list[tuple[float, float]] = []
    m = len(lengths)
    decode_s = 0.0
    for length, d in zip(lengths, drain_s):
        dec = max(length - 1.0, 0.0)
        decode_s += (first * stall + drained * d + (1.0 - drained) * st.tpot * dec) / m
        spans.append((first * stall + d, drained / m))
        if drained < 1.0:
            # Admitted while others queue (at even points of the queue's time): the steady
            # pace until the queue is empty, then on through the drain.
            steady = st.tpot * dec
            for i in range(8):
                left = queue_s * (1.0 - (i + 0.5) / 8)
                span = steady if steady <= left else left + through_drain(dec - left / st.tpot)
                spans.append((first * stall + span, (1.0 - drained) / m / 8))
        if dec < 1.0:  # one-token outputs have no TPOT (benchmark clients leave them out)
            continue
        wait = first * stall / dec
        out.append((d / dec + wait, drained / m))
        if drained < 1.0:
            out.append((st.tpot + wait, (1.0 - drained) / m))
    return BurstTPOT(out, decode_s, sorted(spans))


def prefill_storm(shape: Shape, cm: CostModel, prompts: float, budget: int, cached: float) -> float:
    """Seconds to prefill ``prompts`` prompts that arrived together, in steps of ``budget``
    tokens (without chunked prefill: as many whole prompts as fit a step); 0 when they fit
    one step, which the steady state's own prefill already covers."""
    steps, per_step = storm_steps(shape, prompts, budget, cached)
    if not steps:
        return 0.0
    I = shape.input_len
    return steps * prefill_step_seconds(cm, per_step, I, cached, max(I - cached, 1.0))


def storm_steps(shape: Shape, prompts: float, budget: int, cached: float) -> tuple[int, float]:
    """(prefill steps of :func:`prefill_storm`, prompt tokens each takes); 0 steps when the
    prompts fit one."""
    Ic = max(shape.input_len - cached, 1.0)
    tokens = prompts * Ic
    per_step = prefill_tokens_per_step(shape, Ic, budget)
    return (0 if tokens <= per_step else math.ceil(tokens / per_step - 1e-9)), per_step
