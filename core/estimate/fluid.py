"""The batch a finite open-loop run's tokens decode in: a fluid model of the run.

A benchmark run sends ``n`` requests at ``lam`` a second for ``n / lam`` seconds. Its batch
fills over the first answers, holds while requests keep coming, and empties after the last
arrival; the steady state (:mod:`core.estimate.steady`) knows only the middle. A run no
longer than a few answers never reaches it, and a run no larger than the running cap was
priced as though all its requests decoded together: 200 ShareGPT-like requests at twice
the rate an A100 keeps up with (Llama-3.1-8B) read 1.88x the simulator's ITL, where the
simulator's tokens decode in a batch of 68 on average, not 200.

Each output-length class decodes at the step time of the batch at each moment (slower while
prompts still arrive and ride the steps), so where the batch is fuller its answers stay
longer; the model is iterated until the batch and the step times agree. Only its shape is
used: the ratio of its batch over the run to its batch over a run forty answers long scales
the steady state's fixed point, so a long run keeps the steady state's figures exactly.
"""

from __future__ import annotations

import numpy as np

from core.estimate.costmodel import CostModel
from core.estimate.stats import quantile_len
from core.estimate.steady import Shape, State, steady_state

# Output-length quantiles, time points and batch sizes: within 1% of 128 x 1,024 x 48 on the
# ShareGPT-like lengths.
_CLASSES = np.array([(j + 0.5) / 32 for j in range(32)])
_POINTS = 384
_SIZES = 12
# A run this many answers long holds its steady batch but for its first and last answers.
_LONG_RUN = 40.0


def decode_state(shape: Shape, cm: CostModel, budget: int, cached: float, lam: float, cap: float, n_run: float, steady_n: float) -> State:
    """The state a finite open-loop run's tokens decode in: the steady state's batch
    ``steady_n`` (the fixed point of lam x cycle(n) = n below the cap, whatever the run's
    size) scaled by how much of it the run's fill and drain leave, and never more than the
    run's ``n_run`` requests."""
    top = max(cap, 1.0)
    sizes = np.geomspace(1.0, top, _SIZES) if top > 1.0 else np.array([1.0, 1.0 + 1e-9])
    states = [steady_state(shape, cm, float(x), budget, cached, poisson=True) for x in sizes]
    tpots = np.array([st.tpot for st in states])
    ctx = shape.input_len + shape.output_len / 2.0
    decode = np.array([cm.step_seconds(0.0, 0.0, 0.0, float(x), float(x) * ctx, 0.0) for x in sizes])
    # The share of a decode's time that arriving prompts take (riding its steps, or stalling
    # them without chunked prefill), per unit arrival rate, as the steady state counts it at
    # its own rate n / cycle; while arrivals last at lam they take lam times that.
    per_arrival = np.array([max(1.0 - d / st.tpot, 0.0) * st.cycle / st.n if st.tpot > 0 else 0.0 for st, d in zip(states, decode, strict=True)])
    lengths = np.array([quantile_len(shape.output, float(q)) for q in _CLASSES])
    before = states[0].prefill

    def held(span: float) -> float:
        """The steady batch whose TPOT is the run's mean gap between tokens."""
        tpot_t = np.full(_POINTS, tpots[0])
        n_t = np.zeros(_POINTS)
        for _ in range(10):
            t = np.linspace(0.0, span + before + float(lengths.max() * tpot_t.max()), _POINTS)
            # Tokens one request decodes from 0 to t, were it in the batch all along.
            clock = np.concatenate(([0.0], np.cumsum(np.diff(t) / tpot_t[:-1])))
            # Class i still decodes at t if it started after clock^-1(clock(t) - O_i).
            first = np.interp(clock[:, None] - lengths[None, :], clock, t) - before
            n_t = lam * np.clip(np.minimum(t, span)[:, None] - np.clip(first, 0.0, None), 0.0, None).mean(axis=1)
            at = np.clip(n_t, 1.0, top)
            busy = np.where(t < span, np.minimum(lam * np.interp(at, sizes, per_arrival), 0.9), 0.0)
            tpot_t = 0.5 * (tpot_t + np.interp(at, sizes, decode) / (1.0 - busy))
        tokens = float((n_t / tpot_t).sum())
        gap = float(n_t.sum()) / tokens if tokens > 0 else float(tpots[0])
        return float(np.interp(gap, tpots, sizes))

    steady = steady_state(shape, cm, max(steady_n, 1e-3), budget, cached, poisson=True)
    cycle = steady.cycle
    # A run at least that long holds the steady batch: its share is 1 (the fluid's batch
    # grows with the run's span), so the fluid need not run.
    share = 1.0 if n_run / lam >= _LONG_RUN * cycle else min(held(n_run / lam) / max(held(_LONG_RUN * cycle), 1e-3), 1.0)
    n = max(min(steady_n * share, n_run), 1e-3)
    return steady if n == max(steady_n, 1e-3) else steady_state(shape, cm, n, budget, cached, poisson=True)
