"""A burst of fixed-length requests that the KV cache admits in one wave but cannot finish
in it: the wave grows past the cache, and the engine evicts part of it (vLLM's preemption by
recompute) to let the rest finish.

Why a model of its own: the steady state (:mod:`core.estimate.steady`) caps the running batch
at ``KV / (I + O/2)``, the mean context of requests whose lifetimes are staggered. A burst of
fixed lengths is not staggered: its requests start together and grow together, so the batch
that can finish together is ``KV / (I + O)``. vLLM admits a prompt once its own blocks fit,
so a burst of up to ``KV / I`` prompts starts as one wave. At decode step ``g`` the wave holds
``n (I + g)`` tokens; past ``g1 = KV/n − I`` every step evicts requests (the last admitted),
whose progress is kept but whose cache is given to the others. Those wait (the cache stays
full: the survivors' growth takes every freed block) until the survivors finish, then
recompute their context as a prefill and decode what is left of their answers in a batch
that thins as they finish. Measured against the simulator's scheduler (which implements the
preemption step by step): 1,024/1,024-token bursts of 50-75 prompts on a KV cache of 94,624
tokens (Qwen2-7B, A100) came out 1.14-1.36x its throughput with the steady state's cap
(bench: dlvllm-28, -46, -54 measured 1.16-1.24x).

The fluid picture (a continuous count of requests) is integrated over a few dozen segments of
the decode, each priced by the cost model at its batch and context.
"""

from __future__ import annotations

import math

from core.estimate.costmodel import CostModel
from core.estimate.steady import Shape
from core.estimate.waves import BurstTPOT, storm_steps

SEGMENTS = 48


def one_wave(shape: Shape, n: float, kv_tokens: float, seqs: int) -> bool:
    """Whether ``n`` fixed-length requests sent at once run as one wave: their prompts fit the
    cache and ``max_num_seqs`` together; if the wave outgrows the cache, the part it evicts
    fits the cache once the rest has finished (else the evicted thrash in turn, and the
    steady state's eviction model is the better picture)."""
    I, O = shape.input_len, shape.output_len
    return 1.0 < n <= seqs and n * I <= kv_tokens and n * (I + O) <= 2.0 * kv_tokens


def lockstep_burst(
    shape: Shape, cm: CostModel, n: float, kv_tokens: float, budget: int, cached: float, storm: float
) -> tuple[float, list[tuple[float, float]], BurstTPOT, float]:
    """(request rate, inter-token gaps as (seconds, tokens), TPOT per request class with the
    mean seconds from first to last token, share of the requests evicted) of a burst of ``n``
    fixed-length requests for which :func:`one_wave` holds, whose ``n`` prompts prefill back to
    back in ``storm`` seconds (:func:`core.estimate.waves.prefill_storm`). Without eviction it is the storm
    and then the wave's decode at its full batch (as :func:`core.estimate.waves.burst` prices
    one wave of varying lengths), not the steady state's overlap of prefill and decode."""
    I, O = shape.input_len, shape.output_len
    K = float(kv_tokens)
    dec = max(O - 1.0, 1.0)

    def batch(g: float) -> float:
        """Requests of the first wave still running at decode step ``g``."""
        return min(n, K / (I + g))

    def decode_step(b: float, ctx: float) -> float:
        return cm.step_seconds(0.0, 0.0, 0.0, b, b * ctx, 0.0)

    g1 = max(0.0, K / n - I)  # the step at which the wave fills the cache
    edges = [dec * j / SEGMENTS for j in range(SEGMENTS + 1)]
    gaps: list[tuple[float, float]] = []
    # The first wave: everyone decodes until g1, then the batch shrinks to KV / (I + g).
    t_wave = 0.0
    at_step: list[float] = [0.0]  # seconds into the wave at each edge
    for a, b_ in zip(edges, edges[1:]):
        mid = (a + b_) / 2.0
        b = batch(mid)
        t = decode_step(b, I + mid)
        t_wave += (b_ - a) * t
        at_step.append(t_wave)
        gaps.append((t, (b_ - a) * b))
    survivors = batch(O)
    evicted = n - survivors
    # The evicted recompute their context (prompt and the answer so far), evicted at step g
    # at the rate −d batch/dg = K / (I + g)²: K · ln((I + O) / (I + g1)) tokens in all.
    recompute = K * math.log((I + O) / (I + g1)) if evicted > 0 else 0.0
    t_recompute = 0.0
    if recompute > 0:
        steps = max(1, math.ceil(recompute / budget))
        per = recompute / steps
        ctx = recompute / evicted  # their mean context
        t_recompute = steps * cm.step_seconds(per, per * ctx / 2.0, per, 0.0, 0.0, per / ctx)
    # Then they decode the rest: at step s of this drain those evicted before step O − s
    # still run, at a context of about I + s + (g1 + O − s) / 2 (evicted between g1 and O − s).
    drain_edges = [(O - g1) * j / SEGMENTS for j in range(SEGMENTS + 1)]
    t_drain = 0.0
    drained_at: list[float] = [0.0]
    for a, b_ in zip(drain_edges, drain_edges[1:]):
        mid = (a + b_) / 2.0
        c = max(0.0, n - batch(O - mid))
        if c > 0:
            t = decode_step(min(c, K / (I + O)), I + (g1 + O + mid) / 2.0)
            t_drain += (b_ - a) * t
            gaps.append((t, (b_ - a) * c))
        drained_at.append(t_drain)
    total = storm + t_wave + t_recompute + t_drain
    # A prompt that finishes its prefill at share q of the storm meets the rest of it.
    # Without chunked prefill it waits (1 − q) of it for the others' prompts; with chunked
    # prefill it decodes meanwhile, a token a storm step, and short answers end inside the
    # storm (1,000 prompts of 128/4 tokens: every TPOT is a storm step).
    steps = storm_steps(shape, n, budget, cached)[0]
    t_storm = storm / steps if steps else 0.0
    t_dec = t_wave / dec  # a decode step of the wave, on average

    def storm_span(q: float) -> float:
        """Seconds from first to last token, beyond the wave's own, at storm share ``q``."""
        if not shape.chunked:
            return (1.0 - q) * storm
        inside = min(dec, steps * (1.0 - q))
        return inside * t_storm + (dec - inside) * t_dec - t_wave

    stall = sum(storm_span((j + 0.5) / 16) for j in range(16)) / 16
    # An evicted request's tokens stop for the rest of the wave and the recompute: one gap.
    classes: list[tuple[float, float]] = []
    decode_s = survivors / n * (stall + t_wave)
    if survivors > 0:
        classes.append(((stall + t_wave) / dec, survivors / n))
    for j in range(SEGMENTS):
        # Evicted between decode steps edges[j] and edges[j + 1]: a share of the burst.
        share = (batch(edges[j]) - batch(edges[j + 1])) / n
        if share <= 0:
            continue
        g = (edges[j] + edges[j + 1]) / 2.0
        left = O - g  # steps still to decode after the recompute
        k = min(SEGMENTS, max(0, round(left / max(O - g1, 1e-9) * SEGMENTS)))
        span = max(0.0, stall) + t_wave + t_recompute + drained_at[k]
        classes.append((span / dec, share))
        decode_s += share * span
        gaps.append((t_wave - at_step[j] + t_recompute, share * n))
    return n / total, gaps, BurstTPOT(classes, decode_s), evicted / n
