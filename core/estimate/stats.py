"""The statistics the analytic estimator shares: a latency's mean and percentiles, and the
quantiles of length distributions, Poisson counts and weighted samples it builds them from.

No scipy: these run on the estimator's hot path (the TUI predicts per keystroke).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist

from core.errors import BadInput
from core.spec.workload import LengthDist

QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}
# Standard normal quantiles for the same levels.
Z = {0.50: 0.0, 0.90: 1.2816, 0.95: 1.6449, 0.99: 2.3263}
_STANDARD_NORMAL = NormalDist()


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
        return {k: round_sig(v, digits) for k, v in asdict(self).items()}


def round_sig(v: float, digits: int) -> float:
    """``v`` to ``digits + 3`` significant digits below 10**digits, else to one decimal (for
    reports: enough digits to compare, none of the float noise)."""
    if v is None or not math.isfinite(v):
        return v
    return float(f"{v:.{digits + 3}g}") if abs(v) < 10**digits else round(v, 1)


def stats_of(mean: float, quantiles: dict[str, float], scale: float = 1.0) -> Stats:
    """A :class:`Stats` from a mean and a dict keyed by :data:`QUANTILES`, times ``scale``
    (1e3: seconds to ms). (Keys spelled out, not a generator: this runs four times a
    prediction, and the TUI predicts per keystroke.)"""
    return Stats(mean * scale, quantiles["p50"] * scale, quantiles["p90"] * scale, quantiles["p95"] * scale, quantiles["p99"] * scale)


def weighted_quantile(ordered: list[tuple[float, float]], total: float, q: float) -> float:
    """The first value of ``ordered`` (sorted (value, weight) pairs) whose cumulative weight
    reaches ``q`` of ``total``; the last value when rounding leaves it short, 0.0 when there
    is none."""
    acc = 0.0
    for t, w in ordered:
        acc += w
        if acc >= q * total - 1e-12:
            return t
    return ordered[-1][0] if ordered else 0.0


def weighted_quantiles(ordered: list[tuple[float, float]], total: float) -> dict[str, float]:
    """:func:`weighted_quantile` per :data:`QUANTILES` level."""
    return {name: weighted_quantile(ordered, total, q) for name, q in QUANTILES.items()}


def run_level(q: float, requests: float | None) -> float:
    """The level of the population quantile that a run of ``requests`` requests reports, on
    average, as its ``q`` percentile. A benchmark takes the percentile of the requests it
    ran (``np.percentile``'s linear interpolation, as ``vllm bench serve`` and knee's
    client do): position q·(n − 1) among the n sorted, and the k-th smallest of n sits at
    k / (n + 1) of the distribution on average. So a p99 of 200 requests reads the 98.5th
    population percentile, of 24 requests the 95th; the median stays the median. None (the
    steady state production traffic sees): ``q`` itself."""
    if not requests or requests <= 1:
        return q
    return (q * (requests - 1.0) + 1.0) / (requests + 1.0)


def standard_normal_quantile(q: float) -> float:
    """The standard normal's ``q`` quantile (:data:`Z` at the usual levels)."""
    z = Z.get(q)
    return z if z is not None else _STANDARD_NORMAL.inv_cdf(min(max(q, 1e-9), 1 - 1e-9))


def quantile_len(dist: LengthDist, q: float) -> float:
    """The ``q`` quantile of a length distribution (a normal one floored at one token)."""
    if dist.kind == "uniform":
        return dist.mean * (1 - dist.range_ratio + 2 * dist.range_ratio * q)
    if dist.kind == "normal":
        z = Z.get(q)
        if z is None:
            z = _STANDARD_NORMAL.inv_cdf(min(max(q, 1e-9), 1.0 - 1e-9))
        return max(1.0, dist.mean + z * dist.std)
    if dist.kind == "empirical":
        vals = sorted(dist.values)
        return float(vals[min(len(vals) - 1, int(q * len(vals)))])
    return dist.mean


def length_classes(dist: LengthDist, n: int = 128) -> list[float]:
    """Equally likely lengths that stand for ``dist``: an empirical distribution's own
    values, else ``n`` quantiles."""
    if dist.kind == "empirical" and dist.values:
        return [float(v) for v in dist.values]
    return [quantile_len(dist, (j + 0.5) / n) for j in range(n)]


def mean_len(dist: LengthDist) -> float:
    if dist.kind == "empirical":
        return sum(dist.values) / len(dist.values)
    return dist.mean


def cv2_len(dist: LengthDist) -> float:
    """Squared coefficient of variation (variance over the squared mean) of a length
    distribution: 0 when every draw is the same length."""
    if dist.kind == "uniform":
        return dist.range_ratio**2 / 3.0
    if dist.kind == "normal":
        return (dist.std / dist.mean) ** 2 if dist.mean > 0 else 0.0
    if dist.kind == "empirical":
        m = mean_len(dist)
        return sum((v - m) ** 2 for v in dist.values) / len(dist.values) / (m * m) if m > 0 else 0.0
    return 0.0


def skew_len(dist: LengthDist) -> float:
    """E[X^3] / E[X]^3 of a length distribution: 1 when every draw is the same length."""
    if dist.kind == "uniform":
        return 1.0 + dist.range_ratio**2  # X = m(1 + rU), U uniform on [-1, 1]
    if dist.kind == "normal":
        return 1.0 + 3.0 * (dist.std / dist.mean) ** 2 if dist.mean > 0 else 1.0
    if dist.kind == "empirical":
        m = mean_len(dist)
        return sum(v**3 for v in dist.values) / len(dist.values) / m**3 if m > 0 else 1.0
    return 1.0


@dataclass(frozen=True, slots=True)
class QueueWait:
    """A queue's wait: its ``mean`` over every arrival, the ``share`` of arrivals that wait at
    all, and the squared coefficient of variation ``cv2`` of the wait of those that do (1: an
    exponential wait; 1/3: a uniform share of one deterministic service)."""

    mean: float = 0.0
    share: float = 0.0
    cv2: float = 1.0

    def at(self, q: float) -> float:
        """The ``q`` quantile of the wait: zero for the share that does not wait, a gamma
        distribution with the waiters' mean and spread beyond (Wilson-Hilferty's cube-root
        normal approximation, within a few percent from shape 1/2 up)."""
        if self.share <= 0 or self.mean <= 0 or q <= 1.0 - self.share:
            return 0.0
        level = min((q - (1.0 - self.share)) / self.share, 1.0 - 1e-9)
        m = self.mean / self.share
        k = 1.0 / max(self.cv2, 1e-6)  # gamma shape
        z = _STANDARD_NORMAL.inv_cdf(level)
        return m * max(0.0, 1.0 - 1.0 / (9.0 * k) + z / (3.0 * math.sqrt(k))) ** 3


def is_fixed(dist: LengthDist) -> bool:
    """Every draw the same length."""
    return dist.kind == "fixed" or (dist.kind == "uniform" and dist.range_ratio == 0) or (dist.kind == "normal" and dist.std == 0)


def poisson_quantile(m: float, q: float) -> int:
    """Smallest k with P(Poisson(m) <= k) >= q (m small; a normal tail beyond)."""
    if m <= 0:
        return 0
    if m > 30:
        return max(0, int(m + Z.get(q, 0.0) * math.sqrt(m) + 0.5))
    p = math.exp(-m)
    acc, k = p, 0
    while acc < q and k < 200:
        k += 1
        p *= m / k
        acc += p
    return k
