"""Open-loop arrival schedules, precomputed as absolute send offsets (seconds from the start).

``arrival_times(rate, n, arrival="poisson"|"constant"|"gamma", burstiness=1.0, seed=0,
duration_s=None, rescale=True) -> np.ndarray``

- ``constant``: i / rate. ``poisson``: exponential gaps (gamma with shape 1).
  ``gamma``: shape ``burstiness``, scale 1/(rate·burstiness) — mean gap 1/rate; burstiness < 1
  is burstier than Poisson, > 1 smoother (vLLM's and AIPerf's convention).
- Random schedules send request i at the cumulative sum of gaps 0..i, as vLLM does; with a
  count and ``rescale`` they are scaled so the last send lands at exactly ``n / rate``
  (vLLM's normalisation), so the same ``--request-rate`` offers the same load in both tools.
  ``constant`` sends at i / rate from t = 0.
- With ``duration_s`` and no count, sends are generated until the duration is reached.
- ``rate = inf`` sends everything at t = 0 (a burst; pair it with a concurrency cap).

Precomputing absolute times (rather than sleeping gap after gap) keeps a late wake-up from
shifting every later send (pacing drift; metrics.md §9).
"""

from __future__ import annotations

import math

import numpy as np


def arrival_times(
    rate: float,
    n: int | None,
    arrival: str = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
    duration_s: float | None = None,
    rescale: bool = True,
) -> np.ndarray:
    if n is None and duration_s is None:
        raise ValueError("an arrival schedule needs a count or a duration")
    if math.isinf(rate):
        return np.zeros(n if n is not None else 1)
    if rate <= 0:
        raise ValueError("rate must be positive")
    rng = np.random.default_rng(seed)
    # Where the schedule stops when a duration bounds it (n is None, so duration_s is given).
    end = duration_s if duration_s is not None else math.inf
    count = n if n is not None else int(math.ceil(end * rate * 1.5 + 10))

    def gaps(k: int) -> np.ndarray:
        if arrival == "constant":
            return np.full(k, 1.0 / rate)
        shape = 1.0 if arrival == "poisson" else burstiness
        return rng.gamma(shape, 1.0 / (rate * shape), size=k)

    if arrival == "constant":
        t = np.arange(count) / rate
    else:
        t = np.cumsum(gaps(count))
    if n is None:
        while t[-1] < end:  # rare: the draw ran short of the duration
            t = np.concatenate((t, t[-1] + (np.arange(1, count + 1) / rate if arrival == "constant" else np.cumsum(gaps(count)))))
        return t[t < end]
    if rescale and arrival != "constant" and t[-1] > 0:
        t = t * ((n / rate) / t[-1])
    return t
