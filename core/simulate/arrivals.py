"""Request lengths and open-loop arrival schedules for the simulator.

These follow ``vllm bench serve`` so a simulated load point asks the same of the server as
the real client does (``shared/reference/metrics.md`` §8):

- lengths: ``fixed``; ``uniform`` integers in [mean·(1−r), mean·(1+r)] (vLLM's random
  dataset); ``normal`` clipped at 1; ``empirical`` drawn with replacement from ``values``.
- arrivals: the first request at 0, then gaps that are constant (1/λ), exponential
  (Poisson) or gamma with shape k and scale 1/(λk) (burstiness k; k = 1 is Poisson).

The load generator (``core/load``) owns the real datasets and schedules; these small
functions exist so the simulator has no dependency on work in progress there. They are
pure and seeded, so a seed gives the same schedule every time.
"""

from __future__ import annotations

import numpy as np

from core.errors import BadInput
from core.spec.workload import LengthDist


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token lengths (int64, each ≥ 1) drawn from ``dist``."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    if dist.kind == "fixed":
        out = np.full(n, int(round(dist.mean)), dtype=np.int64)
    elif dist.kind == "uniform":
        lo = int(dist.mean * (1.0 - dist.range_ratio))
        hi = int(dist.mean * (1.0 + dist.range_ratio))
        out = rng.integers(max(lo, 1), max(hi, 1) + 1, size=n, dtype=np.int64)
    elif dist.kind == "normal":
        out = np.rint(rng.normal(dist.mean, dist.std, size=n)).astype(np.int64)
    elif dist.kind == "empirical":
        out = rng.choice(np.asarray(dist.values, dtype=np.int64), size=n, replace=True)
    else:  # pragma: no cover - the spec's Literal rules this out
        raise BadInput(f"unknown length distribution {dist.kind!r}")
    return np.maximum(out, 1)


def arrival_times(
    n: int, rate: float, arrival: str = "poisson", burstiness: float = 1.0, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Send times (seconds from the start) of ``n`` open-loop requests at ``rate`` req/s."""
    if n <= 0:
        return np.zeros(0)
    if not rate > 0:
        raise BadInput(f"request rate must be positive, got {rate}")
    rng = rng or np.random.default_rng(0)
    if arrival == "constant":
        gaps = np.full(n - 1, 1.0 / rate)
    elif arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n - 1)
    elif arrival == "gamma":
        if not burstiness > 0:
            raise BadInput(f"burstiness must be positive, got {burstiness}")
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), size=n - 1)
    else:
        raise BadInput(f"unknown arrival pattern {arrival!r}", "use constant, poisson or gamma")
    return np.concatenate(([0.0], np.cumsum(gaps)))
