"""Ending a load point early once its metrics have converged.

A long load point mostly re-measures a steady state it reached long before the last prompt.
:class:`Convergence` watches completed requests (in completion order), drops the ramp-up (the
first ``concurrency`` completions, which started on an empty server), splits the rest into
``windows`` consecutive windows of equal request count and calls the point converged when,
across the windows, both the output token rate and the mean E2E latency stay within
``tolerance`` of their mean. It needs at least ``min_requests`` steady-state completions
(and three per concurrency slot), so a short point always runs to its end.

:class:`EarlyStopTarget` wraps the load client's target: once converged, requests not yet
sent are answered at once with a marker error instead of being sent; the runner drops those
records, so the stored point holds only real requests (``requests_not_sent`` says how many
were saved). Requests already in flight finish normally.
"""

from __future__ import annotations

import threading
from typing import Any

NOT_SENT = "knee: not sent (load point converged)"


class _NotSent(Exception):
    def __str__(self) -> str:
        return NOT_SENT


class Convergence:
    def __init__(self, concurrency: int | None, min_requests: int = 60, windows: int = 3, tolerance: float = 0.05):
        self.ramp = int(concurrency or 1)
        self.min_requests = max(min_requests, 3 * self.ramp)
        self.windows = windows
        self.tolerance = tolerance
        self._done: list[tuple[float, float, int]] = []  # (end, e2e, output tokens)
        self._lock = threading.Lock()
        self.converged_at: int | None = None

    def add(self, end_time: float, e2e: float, output_tokens: int) -> None:
        with self._lock:
            self._done.append((end_time, e2e, output_tokens))

    def check(self) -> bool:
        """True (and stays true) once the steady-state windows agree."""
        if self.converged_at is not None:
            return True
        with self._lock:
            done = sorted(self._done)
        steady = done[self.ramp :]
        if len(steady) < self.min_requests:
            return False
        n = len(steady) // self.windows
        start = done[self.ramp - 1][0] if self.ramp >= 1 and len(done) >= self.ramp else steady[0][0]
        rates, lat = [], []
        for w in range(self.windows):
            chunk = steady[w * n : (w + 1) * n]
            end = chunk[-1][0]
            span = end - start
            if span <= 0:
                return False
            rates.append(sum(c[2] for c in chunk) / span)
            lat.append(sum(c[1] for c in chunk) / len(chunk))
            start = end
        if _spread(rates) <= self.tolerance and _spread(lat) <= self.tolerance:
            self.converged_at = len(done)
            return True
        return False


def _spread(values: list[float]) -> float:
    m = sum(values) / len(values)
    return (max(values) - min(values)) / m if m > 0 else float("inf")


class EarlyStopTarget:
    """A load-client target that feeds :class:`Convergence` and stops sending once it says so
    (or once ``cancel`` is set: the server died or the sweep is stopping)."""

    def __init__(self, inner: Any, convergence: Convergence | None, cancel: threading.Event | None = None):
        self.inner = inner
        self.convergence = convergence
        self.cancel = cancel
        self.name = getattr(inner, "name", "target")
        self.model = getattr(inner, "model", "")
        self.stopped = False
        self.not_sent = 0

    def __getattr__(self, item: str) -> Any:  # transport_name, base_url, ... of the inner target
        return getattr(self.inner, item)

    async def open(self, limit: int) -> None:
        await self.inner.open(limit)

    async def close(self) -> None:
        await self.inner.close()

    async def send(self, prompt, rec, t0):
        if rec.index >= 0 and (self.stopped or (self.cancel is not None and self.cancel.is_set())):
            self.not_sent += 1
            raise _NotSent()
        text = await self.inner.send(prompt, rec, t0)
        if self.convergence is not None and rec.index >= 0 and rec.error is None and rec.end_time is not None:
            self.convergence.add(rec.end_time, rec.end_time - rec.send_time, rec.output_tokens)
            if self.convergence.check():
                self.stopped = True
        return text
