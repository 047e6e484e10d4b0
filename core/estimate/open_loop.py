"""An open loop the replica keeps up with: the running batch its arrivals sustain, the wait
for a slot, and, for a finite benchmark run, what its request rate and first prompts see.

:meth:`core.estimate.predict.Predictor.predict` calls it below saturation (and for a finite
run of no more requests than the replica runs at once, which never saturates whatever its
rate); past saturation :func:`core.estimate.latency.overloaded` applies.
"""

from __future__ import annotations

import math

from core.estimate.costmodel import CostModel
from core.estimate.latency import finish
from core.estimate.prediction import Prediction
from core.estimate.drain import last_answer
from core.estimate.fluid import decode_state
from core.estimate.stats import QueueWait, cv2_len, is_fixed, skew_len
from core.estimate.steady import Shape, State, mixed_step_seconds, steady_state
from core.estimate.waves import prefill_storm
from core.spec.serving import ServerConfig


def never_queues(n_run: float | None, cap: float) -> bool:
    """A finite run of no more requests than the replica runs at once never queues for a
    slot, whatever its rate: at most its N are ever in flight (a benchmark's 50 prompts at
    10 req/s of 2000-token answers: all 50 run together, none waits)."""
    return n_run is not None and 0 < n_run <= cap


def prefill_queue(shape: Shape, st: State, cm: CostModel, budget: int, lam: float, n_run: float | None = None) -> QueueWait:
    """How long a Poisson-arriving prompt waits for the prompts ahead of it
    in the prefill budget: an M/G/1 queue (Pollaczek-Khinchine) on the prefill work, served
    at a full budget of prefill tokens per mixed step. The steady state gives each prompt its
    chunks' steps as though prompts never met; at random arrivals they do, and a prompt
    longer than the budget holds it for several steps. Llama-3.1-8B on an A100, 4,000-token
    prompts at 2.27 req/s (a 2,048-token budget, 157 ms steps): prefill busy 70% of the time,
    TTFT 421 ms without the queue where the simulator's scheduler reads 764 ms; with it, 760 ms
    (the queue adds 340 ms). A finite run of ``n_run`` prompts starts with an empty queue and may end
    before it reaches the steady wait, which near full load takes long to build: its mean is
    held to that of a queue with no drift over the run's span (a reflected random walk of the
    prefill work, whose mean grows as the square root of time)."""
    if lam <= 0:
        return QueueWait()
    Ic = max(shape.input_len - st.cached, 1.0)
    if shape.chunked:
        room = max(budget - st.decodes_mixed, 1.0)
        service = Ic * mixed_step_seconds(shape, st, cm, room) / room  # the budget-steps one prompt's tokens take
    else:
        # Prefill-only steps of whole prompts: one prompt's share of the steps its group's
        # prompts are prefilled in, while later arrivals wait for the step in flight.
        group = max(st.prefill_tokens_step * st.k / Ic, 1.0)
        service = st.k * st.t_mixed / group
    rho = min(lam * service, 0.98)
    second_moment = service * service * (1.0 + cv2_len(shape.input))
    wait = lam * second_moment / (2.0 * (1.0 - rho))
    # The waiters' spread (Takacs: E[W^2] = 2 E[W]^2 + lam E[S^3] / 3(1 - rho)): prompts of
    # one length wait a uniform share of one service at light load, nearly exponentially near
    # full load, where an exponential at every load put the median too low and p99 too high.
    third_moment = service**3 * skew_len(shape.input)
    w1 = wait / rho if rho > 0 else 0.0
    w2 = (2.0 * wait * wait + lam * third_moment / (3.0 * (1.0 - rho))) / rho if rho > 0 else 0.0
    cv2 = max(w2 / (w1 * w1) - 1.0, 1e-3) if w1 > 0 else 1.0
    if n_run:
        span = n_run / lam
        building = (2.0 / 3.0) * math.sqrt(2.0 * lam * second_moment * span / math.pi)
        wait = 1.0 / (1.0 / wait + 1.0 / building) if wait > 0 and building > 0 else 0.0
    return QueueWait(wait, rho, cv2)


def below_saturation(
    shape: Shape,
    cfg: ServerConfig,
    cm: CostModel,
    lam: float,
    cap: float,
    cap_reason: str,
    budget: int,
    seqs: int,
    cached: float,
    tail: float,
    n_run: float | None,
    concurrency: float | None,
    request_rate: float | None,
) -> Prediction:
    """``lam``: arrivals per second at this replica; ``n_run``: the requests a finite run
    sends it (None: an endless stream); ``tail``: the per-request cost of streaming its
    answer out."""
    few = n_run if never_queues(n_run, cap) else None
    # The running batch n at which the arrivals keep it full: lam x cycle(n) = n; a finite
    # run never holds more than its own requests.
    n = _fixed_point(shape, cm, budget, cached, lam, cap if few is None else few)
    st = steady_state(shape, cm, n, budget, cached, poisson=True)
    decode = None
    if n_run:
        # Its tokens decode in the batch its fill and drain leave (core.estimate.fluid),
        # scaled from the fixed point as though the run had no size.
        steady_n = _fixed_point(shape, cm, budget, cached, lam, cap) if few is not None and n >= 0.999 * few else n
        decode = decode_state(shape, cm, budget, cached, lam, cap, n_run, steady_n)
    # M/M/c waiting with c = the cap (Sakasegawa's approximation): negligible until the
    # running batch nears its cap.
    rho = min(n / cap, 0.999)
    wait = 0.0 if few is not None else st.cycle * rho ** (math.sqrt(2 * (cap + 1)) - 1) / (cap * (1 - rho))
    limited = "load" if rho < 0.95 else cap_reason
    x = lam
    backlog = 0.0
    if n_run:
        span = n_run / lam
        if few is not None:
            # Their prompts arrive faster than they prefill when the run's prefill work
            # outlasts its arrivals: the last waits for the difference, the first not.
            backlog = max(0.0, prefill_storm(shape, cm, n_run, budget, cached) - span)
    # Short of that overflow, prompts that arrive together queue for the budget.
    queued = prefill_queue(shape, st, cm, budget, lam, n_run) if backlog == 0 else QueueWait()
    if n_run:
        # A finite run's rate is its requests over the time from the first arrival to the
        # last answer: with fixed lengths the arrivals' span, then the last request's
        # latency (in the batch the run's tokens decode in, not one of all its requests);
        # with lengths that vary the expected latest end (the longest answers).
        before_decode = cm.request_overhead_s + wait + queued.mean + st.prefill
        if is_fixed(shape.output):
            ran = decode or st
            end = span + before_decode + (ran.cycle - ran.prefill) + tail
        else:
            end = last_answer(shape, cm, st, span, n_run, before_decode, tail / max(shape.output_len, 1.0))
        x = n_run / (end + backlog)
    return finish(
        shape,
        cfg,
        cm,
        st,
        x,
        wait,
        "exponential",
        limited,
        False,
        concurrency,
        request_rate,
        budget,
        seqs,
        cap,
        first_wave=(1.0, backlog),
        prefill_wait=queued,
        decode=decode,
        run_requests=n_run * cfg.dp if n_run else None,
    )


def _fixed_point(shape: Shape, cm: CostModel, budget: int, cached: float, lam: float, top: float) -> float:
    """The running batch n <= ``top`` at which arrivals at ``lam`` keep it full: lam x cycle(n) = n."""
    lo, hi = 0.0, top
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if lam * steady_state(shape, cm, max(mid, 1e-3), budget, cached, poisson=True).cycle > mid:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-3 * max(hi, 1.0):
            break
    return max(hi, 1e-3)
