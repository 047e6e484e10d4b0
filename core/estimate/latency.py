"""Means and approximate percentiles of TTFT, TPOT, ITL and E2E from one replica's steady
state (:mod:`core.estimate.steady`), and the :class:`Prediction` that carries them.

Percentiles are approximations, stated as such everywhere they are shown: TTFT spreads by
the step a request lands in (uniform over one step), by other prefills colliding with it
(Poisson count at the arrival rate) and by queueing (exponential tail in an open loop; a
closed loop's queue is nearly deterministic); ITL spreads by how many of a request's decode
steps are mixed ones (binomial); E2E adds the deviations in quadrature, plus the output
length's own spread when the workload has one. Per-request API overheads (HTTP,
tokenisation, detokenisation/streaming) from the engine profile add to TTFT and E2E.

An open loop whose arrivals outrun the replica, over a finite run of ``num_prompts``
requests: the queue grows linearly, so mean wait = (n−1)/2·(1/X − 1/λ). With a client
timeout T, only the requests with wait + time in the engine <= T finish (the first ones of
the run); TTFT and E2E are theirs and the throughput is successes over the run's span
(sending time + T), as benchmark clients report an overloaded run (:func:`overloaded`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate
from typing import TYPE_CHECKING

from core.estimate.costmodel import Batch, CostModel
from core.estimate.drain import last_answer
from core.estimate.prediction import Prediction, make_prediction
from core.estimate.stats import (
    QUANTILES,
    QueueWait,
    is_fixed,
    poisson_quantile,
    quantile_len,
    run_level,
    standard_normal_quantile,
    stats_of,
    weighted_quantiles,
)
from core.estimate.steady import Shape, State, dec_gap, mixed_step_seconds, multi_step, steady_gaps
from core.estimate.waves import prefill_storm
from core.spec.serving import ServerConfig

if TYPE_CHECKING:
    from core.estimate.waves import BurstTPOT, BurstWait


def finish(
    shape: Shape,
    cfg: ServerConfig,
    cm: CostModel,
    st: State,
    x: float,
    wait: float,
    wait_kind: str,
    limited: str,
    saturated: bool,
    concurrency: float | None,
    request_rate: float | None,
    budget: int,
    seqs: int,
    cap: float,
    gaps: list[tuple[float, float]] | None = None,
    resumed: float = 0.0,
    first_wave: tuple[float, float] = (0.0, 0.0),
    tpots: BurstTPOT | None = None,
    burst_wait: BurstWait | None = None,
    prefill_wait: QueueWait = QueueWait(),
    decode: State | None = None,
    run_decode: list[tuple[float, float]] | None = None,
    run_requests: float | None = None,
) -> Prediction:
    """Means and approximate percentiles from a replica's steady state. ``first_wave``:
    (the share of a finite closed-loop run's requests sent together at its start, the
    seconds their prompts take to prefill back to back); those wait for the prompts before
    theirs, half of it on average, and make the TTFT's upper tail. ``tpots``: a burst's TPOT
    per request class and the mean seconds from first to last token
    (:class:`core.estimate.waves.BurstTPOT`). ``burst_wait``: how a burst's waits spread
    (``wait`` is its mean). ``prefill_wait``: how long a prompt queues
    for the prompts ahead of it in the prefill budget (:func:`core.estimate.open_loop.prefill_queue`).
    ``decode``: the state whose steps the tokens decode in, where it is not ``st`` (a finite
    open-loop run's thinner batch, :func:`core.estimate.fluid.decode_state`); its batch is
    the running batch reported. ``run_decode``: a finite closed run's decode seconds per
    request (sorted (seconds, weight) pairs, :func:`core.estimate.drain.decode_spans`),
    whose spread replaces the output lengths' at the steady pace in the E2E percentiles.
    ``run_requests``: a finite run's measured requests, whose percentiles a benchmark
    reports (:func:`core.estimate.stats.run_level`); None: the steady state's."""
    I, O = shape.input_len, shape.output_len
    ovh = cm.first_token_overhead_s
    chunked = shape.chunked
    dec = max(O - 1.0, 0.0)
    # Closed loop: a new request finds the others running; open loop and bursts: all of them.
    others = st.n - 1 if wait_kind == "fixed" else st.n
    busy = min(1.0, max(others, 0.0))
    ms = multi_step(cfg)
    f1, storm = first_wave
    pq_mean, pq_p = prefill_wait.mean, prefill_wait.share
    ttft_mean = ovh + wait + pq_mean + st.align(others, ms, cm.steps_ahead) + st.prefill + f1 * storm / 2.0
    tok = cm.output_token_overhead_s
    # Inter-token gaps, token-weighted: pure decode steps, steps carrying prefill chunks
    # (or, without chunked prefill, gaps that span a whole prefill step); for a burst,
    # also the thinning batch of the drain.
    dec_st = decode or st
    dist = gaps if gaps else steady_gaps(shape, dec_st, 1.0)
    total = sum(w for _, w in dist) or 1.0
    gap_mean = sum(t * w for t, w in dist) / total + tok
    gap_q = {k: v + tok for k, v in weighted_quantiles(sorted(dist), total).items()}
    if resumed > 0 and dec > 0:
        # Time spent preempted between tokens: spread over the request's decode.
        dist = [(t + resumed / dec, w) for t, w in dist]
        gap_mean += resumed / dec
        gap_q = {k: v + resumed / dec for k, v in gap_q.items()}
    tpot_mean = gap_mean if gaps else dec_st.tpot + tok + resumed / max(dec, 1.0)
    e2e_mean = ttft_mean + dec * tpot_mean
    tpot_burst_q: dict[str, float] = {}
    if tpots and tpots.classes:
        # TPOT is averaged over requests, not tokens: a burst's short requests weigh as much
        # as its long ones though they met only its slowest steps.
        share = sum(w for _, w in tpots.classes) or 1.0
        extra = tok + resumed / max(dec, 1.0)
        tpot_mean = sum(t * w for t, w in tpots.classes) / share + extra
        tpot_burst_q = {k: v + extra for k, v in weighted_quantiles(sorted(tpots.classes), share).items()}
        e2e_mean = ttft_mean + tpots.decode_s + dec * tok + resumed

    # Percentiles (approximate; see the module docstring).
    # Other prefills arriving while ours runs: a closed loop's n - 1 others (a lone client's
    # prompt never meets another), all of an open loop's arrivals.
    collide_m = min(x * st.prefill * (others / st.n if st.n > 0 else 0.0), 50.0)
    share = 0.5 if chunked else 1.0
    # A longer or shorter prompt than the mean changes the steps it prefills in by its
    # extra tokens' marginal cost (their matmul FLOPs and attention), not in proportion:
    # the step's fixed costs, weight reads and the decodes riding along stay.
    Ic = I - st.cached
    delta = max(16.0, 0.1 * st.prefill_tokens_step)
    step_at = st.prefill_tokens_step
    per_token = max(mixed_step_seconds(shape, st, cm, step_at + delta) - mixed_step_seconds(shape, st, cm, step_at), 0.0) / delta
    p_wait = 0.0
    if wait_kind == "exponential" and wait > 0:
        rho = min(st.n / max(cap, 1e-9), 0.999)
        p_wait = min(1.0, rho ** (math.sqrt(2 * (cap + 1)) - 1))
    ttft_q, tpot_q, e2e_q = {}, {}, {}
    if run_decode:
        run_cum = list(accumulate(w for _, w in run_decode))
        run_total = run_cum[-1] or 1.0
        run_mean = sum(d * w for d, w in run_decode) / run_total
    for name, level in QUANTILES.items():
        q = run_level(level, run_requests)
        if wait_kind == "exponential":
            w = (wait / p_wait) * math.log(p_wait / (1 - q)) if p_wait > 0 and q > 1 - p_wait else 0.0
        elif burst_wait is not None:
            w = burst_wait.at(q)
        elif wait_kind == "uniform":
            w = 2 * wait * q
        else:  # a closed loop's queue is nearly deterministic
            w = wait
        # A prompt's prefill scales with the tokens it computes (not those the prefix
        # cache serves).
        computed_q = max(shape.prepend + quantile_len(shape.input, q) - st.cached, 1.0)
        pf = max(st.prefill + (computed_q - Ic) * per_token, per_token * computed_q)
        # Other prompts arriving while ours prefills: the mean holds the average collision,
        # the quantile its share of it. Where the open loop's prefill queue is modelled,
        # prompts meeting in the budget are that queue's wait instead.
        if pq_p <= 0:
            k_coll = poisson_quantile(collide_m, q)
            pf *= (1 + share * k_coll) / (1 + share * collide_m)
        w += prefill_wait.at(q)
        # The step in flight (a uniform share of it) and the steps an engine that schedules
        # ahead had already committed, as in the mean (State.align).
        t = ovh + w + (q * ms + cm.steps_ahead) * st.mean_step * busy + pf
        if f1 > 0 and q > 1.0 - f1:  # the slowest requests are the first wave's last prompts
            t += storm * (q - (1.0 - f1)) / f1
        ttft_q[name] = t
        if tpot_burst_q:
            tp = tpot_burst_q[name]
        elif gaps:
            tp = gap_q[name]  # a burst: requests decode at whatever batch they met
        elif dec > 0:
            # Mixed steps among one request's decode steps: binomial(O−1, frac_mixed).
            f = dec_st.frac_mixed
            f_q = min(1.0, max(0.0, f + standard_normal_quantile(q) * math.sqrt(max(f * (1 - f), 0.0) / dec)))
            tp = max(dec_st.tpot + (f_q - f) * dec_gap(dec_st, chunked, dec), 0.0) + tok + resumed / dec
        else:
            tp = 0.0
        tpot_q[name] = tp
        if run_decode:  # the first span whose cumulative weight reaches q (weighted_quantile, by bisection)
            length_dev = run_decode[min(bisect_left(run_cum, q * run_total - 1e-12), len(run_decode) - 1)][0] - run_mean
        else:
            length_dev = (quantile_len(shape.output, q) - O) * tpot_mean
        devs = (t - ttft_mean, length_dev) if run_decode else (t - ttft_mean, dec * (tp - tpot_mean), length_dev)
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
        request_rate=request_rate,
        ttft_ms=stats_of(ttft_mean, ttft_q, 1e3),
        itl_ms=stats_of(gap_mean, itl_q, 1e3),
        tpot_ms=stats_of(tpot_mean, tpot_q, 1e3),
        e2e_s=stats_of(e2e_mean, e2e_q),
        running=dec_st.n,
        queued=wait * x,
        limited_by=limited,
        saturated=saturated,
        prefill_chunks=st.k,
        step_ms_mixed=st.t_mixed * 1e3,
        step_ms_decode=st.t_pure * 1e3,
    )


def overloaded(
    shape: Shape,
    cfg: ServerConfig,
    cm: CostModel,
    st: State,
    cap_x: float,
    lam: float,
    n: float,
    timeout: float | None,
    budget: int,
    seqs: int,
    cap: float,
    from_empty: bool = True,
) -> tuple[float, float]:
    """(completed req/s, mean queueing wait) of one replica over a finite overloaded run.

    The replica runs at most ``cap`` requests at once and, once full, frees ``cap_x`` slots a
    second while ``lam`` requests arrive. The run's first ``cap`` requests (j = 0..cap−1,
    sent at j/λ) start as they arrive: the batch is empty when the run begins. The j-th
    after them takes the (j − cap + 1)-th slot that frees, at F + (j − cap + 1)/X, where F is
    when the first one frees: the shortest answer's time in the engine (the whole resident
    time S when every answer is as long; nearly 0 under ShareGPT-like lengths, where short
    answers finish at once). It waits W_j = max(0, F + (j − cap + 1)/X − j/λ).

    A queue forms only if the run outlasts the batch: 200 ShareGPT prompts at 32 req/s
    into a replica that runs 160 at once and frees 9 slots a second never wait (the run's last
    prompt arrives after 6.2 s; its slot freed at 4.3 s). Before 2026-11-29 every request
    waited j·(1/X − 1/λ) as if the batch were full from the start, which put such a run's
    TTFT at 5-8 s where servers measured 0.1-0.2 s.

    ``from_empty`` False (sizing for a stream, no benchmark run's start): the batch is already
    full, so every request waits W_j = j·(1/X − 1/λ) and no prompt storm applies.

    A prompt also waits for those sent before it to prefill, j·e where e is how much longer one
    prompt's share of a full batch's prefill takes than the gap between sends; its wait is the
    longer of the two. A client timeout T fails every request whose wait + S > T (a request pulled from a queue
    that old holds its slot only until the client gives up, so none of the later ones
    completes either). When requests fail, the reported throughput is the successes over the
    run's span, from the first send to the last request's timeout; when all complete it is
    the replica's capacity for a stream or for fixed lengths, and for a benchmark run of
    lengths that vary its requests over the time to its last answer (the drain)."""
    inv_x = 1.0 / cap_x
    d = max(inv_x - 1.0 / lam, 0.0)
    needs_resident = from_empty or (timeout is not None and timeout > 0)
    resident = finish(shape, cfg, cm, st, cap_x, 0.0, "uniform", "load", True, None, None, budget, seqs, cap).e2e_s.mean if needs_resident else 0.0
    first_free = resident * min(1.0, shape.output.lower / max(shape.output.mean, 1e-9))
    c = max(1.0, math.floor(cap)) if from_empty else 0.0
    # For j >= c: W_j = a + d·j.
    a = first_free + (1.0 - c) * inv_x if from_empty else 0.0

    # Prompts that arrive faster than the replica prefills them queue for the prefill too,
    # slots or not: the j-th finds j·(p − 1/λ) seconds of others' prompts ahead of it, p being
    # one prompt's share of a full batch's prefill storm.
    p = prefill_storm(shape, cm, c, budget, st.cached) / c if from_empty else 0.0
    e = max(p - 1.0 / lam, 0.0)

    n_ok = n
    if timeout is not None and timeout > 0:
        budget_s = timeout - resident
        if budget_s < 0:
            # At least the first request: with T < S nothing finishes in time, and the
            # figures describe that one request's (timed-out) latency instead.
            n_ok = 1.0
        else:
            # W_j never falls with j, so the requests in time are a prefix: those whose slot
            # wait and whose prefill wait both fit T − S.
            if d > 0:
                n_ok = min(n, max(c, math.floor((budget_s - a) / d) + 1.0))
            elif a > budget_s:
                n_ok = min(n, c)
            if e > 0:
                n_ok = min(n_ok, math.floor(budget_s / e) + 1.0)
    n_ok = max(1.0, n_ok)
    count = max(1, math.floor(n_ok))
    wait = waiting_sum(count, c, a, d, e) / count
    if n_ok < n and timeout is not None:  # only a client timeout fails requests
        return n_ok / ((n - 1.0) / lam + timeout), wait
    if not from_empty or is_fixed(shape.output):
        # Fixed lengths free their slots a batch at a time and end a batch at a time: the
        # run's rate is the full batch's (the simulator's scheduler agrees within 2%).
        return cap_x, wait
    # With lengths that vary a benchmark run ends with its last answer: the last request
    # takes its slot (or its prefill turn) at s_last, and those still decoding then drain as
    # the batch thins, the longest answer last (core.estimate.drain, as for the runs the
    # replica keeps up with). Left out, 1,000 ShareGPT-like prompts at twice the burst rate
    # read 1.58x the simulator's request rate (Llama-3.1-8B, A100); with it, 1.18x.
    last = n - 1.0
    s_last = last / lam + max(0.0, a + d * last if last >= c else 0.0, e * last)
    end = last_answer(shape, cm, st, s_last, n, cm.request_overhead_s + st.prefill, cm.output_token_overhead_s)
    return min(cap_x, n / end), wait


def waiting_sum(count: int, c: float, a: float, d: float, e: float) -> float:
    """Σ_{j<count} max(W_j, e·j), where W_j = 0 for j < c and max(0, a + d·j) from j = c on.

    Closed form: a run of 60,000 prompts would otherwise sum as many terms per prediction.
    From j = c on the term is e·j + max(0, a + (d − e)·j), since e·j ≥ 0."""
    head = min(count, int(c))
    return e * count * (count - 1) / 2.0 + _sum_positive_linear(a, d - e, head, count - 1)


def _sum_linear(a: float, k: float, lo: int, hi: int) -> float:
    """Σ_{j=lo}^{hi} (a + k·j); 0 for an empty range."""
    n = hi - lo + 1
    return 0.0 if n <= 0 else n * a + k * (lo + hi) * n / 2.0


def _sum_positive_linear(a: float, k: float, lo: int, hi: int) -> float:
    """Σ_{j=lo}^{hi} max(0, a + k·j): the linear sum over the part where it is positive."""
    if k > 0:
        lo = max(lo, math.floor(-a / k) + 1)
    elif k < 0:
        hi = min(hi, math.ceil(-a / k) - 1)
    elif a <= 0:
        return 0.0
    return _sum_linear(a, k, lo, hi)
