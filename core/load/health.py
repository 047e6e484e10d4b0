"""Client health during a load run: a ticker measuring event-loop lag, and the diagnosis
of whether the client (or the machine around it) rather than the server limited the
measurement. A lagging client reads TTFT too high and TPOT too low, so
:func:`core.load.runner.run_load` reports this beside the metrics."""

from __future__ import annotations

import asyncio
import time

import numpy as np

LAG_TICK_S = 0.005
# Thresholds for "the client is the bottleneck": timestamps can be late by about the loop
# lag, so a p99 lag above 1 ms already exceeds knee's timestamp-error budget.
LAG_WARN_MS = 1.0
SEND_LAG_WARN_MS = 5.0
CPU_WARN = 0.90


class _Lag:
    """Event-loop lag: how late a 5 ms sleep wakes up."""

    def __init__(self):
        self.samples: list[float] = []
        self._task: asyncio.Task | None = None

    async def _run(self):
        clock = time.perf_counter
        while True:
            t = clock()
            await asyncio.sleep(LAG_TICK_S)
            self.samples.append(clock() - t - LAG_TICK_S)

    def start(self):
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self):
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


def _p99_ms(values: list[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 0.0
    a = np.maximum(np.asarray(values), 0.0) * 1000.0
    return float(np.percentile(a, 99)), float(a.max())


def _diagnose(lag_p99: float, send_p99: float, cpu: float) -> str | None:
    """Say who delayed the timestamps, if anyone did: the client itself (busy loop, CPU near a
    full core) or other processes on the machine (lag while the client was mostly idle)."""
    late = []
    if lag_p99 > LAG_WARN_MS:
        late.append(f"event-loop lag p99 {lag_p99:.1f} ms")
    if send_p99 > SEND_LAG_WARN_MS:
        late.append(f"sends {send_p99:.1f} ms behind schedule at p99")
    if cpu > CPU_WARN:
        return (
            "client is the bottleneck: "
            + ", ".join(late + [f"client CPU {cpu:.0%} of a core"])
            + " — timings may be late and throughput capped by the client; lower the load or add client processes"
        )
    if late and cpu > 0.5:
        return "client is the bottleneck: " + ", ".join(late) + f" at {cpu:.0%} CPU — timings may be late; lower the load"
    if late:
        return (
            "the machine is busy: " + ", ".join(late) + f" while the client used only {cpu:.0%} of a core"
            " — other processes are delaying the client's timestamps"
        )
    return None
