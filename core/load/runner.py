"""Drive one load point against a target and measure it.

::

    result = await run_load(target, prompts, LoadPoint(concurrency=16, num_prompts=200),
                            warmup=4, on_progress=cb, slo=None, tokenizer=tok)
    result.records      # list[RequestRecord], measured requests only (warm-up excluded)
    result.duration_s   # vLLM's duration: first dispatch → all requests gathered
    result.summary      # core.load.metrics.summarize(...) keys (vllm bench serve compatible)
    result.health       # ClientHealth: loop lag, send lag, CPU; .warning when the client limits
    result.to_json()    # summary + client health + run info + per-request arrays

    result = run_load_sync(...)   # same, on a fresh event loop (uvloop when installed)

**Load modes** (a :class:`core.spec.LoadPoint`):

- closed loop — ``concurrency`` only: that many workers, each sending its next prompt the
  moment its previous request ends; ``scheduled_time`` is when the slot freed.
- open loop — ``request_rate`` (``arrival`` constant/poisson/gamma, ``burstiness``), from a
  precomputed schedule (:mod:`core.load.schedule`); with ``concurrency`` too, that is a cap:
  a due request waits for a slot and the wait shows as ``client_queue_time``.
- stop after ``num_prompts`` (default: ``len(prompts)``), or after ``duration_s`` (prompts
  are cycled); requests still in flight at the duration get ``grace_s`` to finish, then are
  cancelled and counted as failed ("cancelled after the grace period").

**Warm-up**: ``warmup`` requests run first (at the load point's concurrency, capped by the
warm-up count), from the *end* of ``prompts`` so they do not pre-fill the prefix cache for
the measured ones; their records are in ``result.warmup_records`` and in no statistic.

**Progress**: ``on_progress(Progress)`` is called every 0.25 s (and once at the end) with
running, completed, failed, expected total, elapsed and output tokens/s so far. It runs on
the load's event loop: keep it cheap (store the object; render elsewhere).

**Client health** (:class:`ClientHealth`): a 5 ms ticker measures event-loop lag, open-loop
dispatch measures send lag (actual dispatch − schedule, before any concurrency-cap wait),
and process CPU time / wall time says whether the one core is saturated. When lag or CPU
say the client, not the server, limited the measurement, ``health.warning`` says so and
:func:`run_load` appends it to ``result.notes``. A lagging client reads TTFT too high and
TPOT too low (stack.md), so this is reported beside the metrics, not hidden.
``health.timestamps`` says where chunk stamps came from: ``"kernel"`` (the socket's receive
time, :mod:`core.load.rawhttp`) — then a lagging loop no longer delays them, though sends
still wait for it — or ``"user"`` (when the client read the bytes).

Token counts: a request without ``usage`` gets its OSL by retokenizing its joined text with
``tokenizer`` (``add_special_tokens=False``) after the run; with no tokenizer, by counting
content chunks, with a note. ``output_tokens_retokenized`` is filled for every request when
``retokenize=True`` so discrepancies with the server's count can be shown.

Input tokens: each prompt's own count (``Prompt.input_tokens``, as vLLM counts it) when
``tokenizer`` is exact; otherwise the server's ``usage.prompt_tokens`` where reported.

Errors (HTTP errors, timeouts, broken or malformed streams) are per-request ``error``
strings, counted as ``failed``; nothing a server does ends the run.
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from core.load.datasets import Prompt, Tokenizer
from core.load.metrics import per_request_arrays, summarize
from core.load.schedule import arrival_times
from core.spec.records import RequestRecord
from core.spec.serving import LoadPoint

PROGRESS_INTERVAL_S = 0.25
LAG_TICK_S = 0.005
# Thresholds for "the client is the bottleneck": timestamps can be late by about the loop
# lag, so a p99 lag above 1 ms already exceeds knee's timestamp-error budget.
LAG_WARN_MS = 1.0
SEND_LAG_WARN_MS = 5.0
CPU_WARN = 0.90


class Target(Protocol):
    name: str
    model: str

    async def open(self, limit: int) -> None: ...

    async def close(self) -> None: ...

    async def send(self, prompt: Prompt, rec: RequestRecord, t0: float) -> str: ...


@dataclass(slots=True)
class Progress:
    running: int
    completed: int
    failed: int
    total: int | None  # expected measured requests (None: stop by duration)
    elapsed_s: float
    duration_s: float | None
    output_tokens: int
    output_tokens_per_s: float
    warmup: bool = False


@dataclass
class ClientHealth:
    loop_lag_p99_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    send_lag_p99_ms: float = 0.0  # open loop only: dispatch − schedule, before cap waits
    send_lag_max_ms: float = 0.0
    cpu_fraction: float = 0.0  # process CPU seconds / wall seconds (1.0 = one core busy)
    warning: str | None = None
    # "kernel": chunk stamps are the kernel's receive times, immune to client scheduling;
    # "user": taken when the client read the bytes; "mixed": some of each (core.load.rawhttp)
    timestamps: str = "user"

    def as_dict(self) -> dict[str, Any]:
        return {
            "loop_lag_p99_ms": self.loop_lag_p99_ms,
            "loop_lag_max_ms": self.loop_lag_max_ms,
            "send_lag_p99_ms": self.send_lag_p99_ms,
            "send_lag_max_ms": self.send_lag_max_ms,
            "cpu_fraction": self.cpu_fraction,
            "warning": self.warning,
            "timestamps": self.timestamps,
        }


@dataclass
class LoadResult:
    records: list[RequestRecord]
    duration_s: float
    summary: dict[str, float]
    health: ClientHealth
    load_point: LoadPoint
    target: str = ""
    model: str = ""
    transport: str = ""
    warmup_records: list[RequestRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    t0: float = 0.0  # time.perf_counter() origin of every record time (CLOCK_MONOTONIC on Linux)
    wall_t0: float = 0.0  # time.time() at the same moment, for export

    def to_json(self, detailed: bool = True) -> dict[str, Any]:
        """vllm bench serve-style result: summary keys at top level, then knee's extras."""
        out: dict[str, Any] = {
            "backend": self.target,
            "model_id": self.model,
            "transport": self.transport,
            "request_rate": self.load_point.request_rate if self.load_point.request_rate is not None else "inf",
            "max_concurrency": self.load_point.concurrency,
            "burstiness": self.load_point.burstiness,
            "num_prompts": len(self.records),
            "num_warmups": len(self.warmup_records),
        }
        out.update(self.summary)
        out["client_health"] = self.health.as_dict()
        out["notes"] = list(self.notes)
        if detailed:
            out.update(per_request_arrays(self.records))
        return out


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


async def run_load(
    target: Target,
    prompts: Sequence[Prompt],
    load_point: LoadPoint,
    *,
    warmup: int = 0,
    on_progress: Callable[[Progress], None] | None = None,
    slo=None,
    tokenizer: Tokenizer | None = None,
    retokenize: bool = False,
    grace_s: float = 30.0,
    seed: int = 0,
    percentiles: Sequence[float] = (50, 90, 95, 99),
    open_target: bool = True,
) -> LoadResult:
    """Run one load point; see the module docstring. ``open_target=False`` when the caller
    has already opened ``target`` (e.g. to reuse its connections across load points)."""
    if not prompts:
        from core.errors import BadInput

        raise BadInput("no prompts to send", "the dataset produced no prompts")
    lp = load_point
    conc = lp.concurrency
    rate = lp.request_rate
    n_measured = lp.num_prompts if lp.num_prompts is not None else (None if lp.duration_s else len(prompts))
    # Connection pool size. It must never be what limits in-flight requests, or requests
    # would wait inside the client unrecorded (vllm #54101): the concurrency (closed loop or
    # cap) when there is one; otherwise every request of the schedule may be in flight.
    if conc is not None:
        limit = conc
    elif n_measured is not None:
        limit = max(1, n_measured)
    else:
        limit = max(64, int(math.ceil((rate or 1) * (lp.duration_s or 60))))
    clock = time.perf_counter
    keep_text = retokenize or tokenizer is not None
    texts: dict[int, str] = {}
    state = {"running": 0, "completed": 0, "failed": 0, "tokens": 0}
    in_flight: dict[int, RequestRecord] = {}

    if open_target:
        await target.open(limit)
    lag = _Lag()
    gc_was = gc.isenabled()
    thresholds = gc.get_threshold()
    try:
        # ---- warm-up: excluded from every statistic ---------------------------------------
        warm_records: list[RequestRecord] = []
        if warmup > 0:
            t_w = clock()
            wprompts = [prompts[(len(prompts) - 1 - i) % len(prompts)] for i in range(warmup)]
            sem = asyncio.Semaphore(min(conc or warmup, warmup))

            async def _warm(i: int, p: Prompt):
                async with sem:
                    rec = RequestRecord(index=-(i + 1), send_time=0.0)
                    await target.send(p, rec, t_w)
                    warm_records.append(rec)

            await asyncio.gather(*(_warm(i, p) for i, p in enumerate(wprompts)))

        # Freeze what exists (prompts, sessions) out of the collector and make gen-0
        # collections rare: a full GC pause mid-stream would stamp chunks late.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 50, 100)

        records: list[RequestRecord] = []
        send_lags: list[float] = []
        cpu0 = time.process_time()
        wall_t0 = time.time()
        t0 = clock()
        deadline = (t0 + lp.duration_s) if lp.duration_s else math.inf

        async def one(i: int, sched: float) -> None:
            p = prompts[i % len(prompts)]
            rec = RequestRecord(index=i, send_time=0.0, scheduled_time=sched)
            records.append(rec)
            in_flight[i] = rec
            state["running"] += 1
            try:
                text = await target.send(p, rec, t0)
            except asyncio.CancelledError:
                rec.error = "cancelled after the grace period"
                rec.end_time = None
                state["failed"] += 1
                raise
            except Exception as e:  # a target bug must not end the run either
                rec.error = f"{type(e).__name__}: {e}"
                text = ""
            finally:
                state["running"] -= 1
                in_flight.pop(i, None)
            if rec.error is None and rec.end_time is not None:
                state["completed"] += 1
                state["tokens"] += rec.output_tokens
                if keep_text and (rec.output_tokens_usage is None or retokenize):
                    texts[i] = text
            else:
                state["failed"] += 1

        async def ticker():
            while True:
                await asyncio.sleep(PROGRESS_INTERVAL_S)
                _report()

        def _report(final: bool = False):
            if on_progress is None:
                return
            el = clock() - t0
            toks = state["tokens"] + sum(len(r.chunk_times) for r in in_flight.values())
            try:
                on_progress(
                    Progress(
                        running=state["running"],
                        completed=state["completed"],
                        failed=state["failed"],
                        total=n_measured,
                        elapsed_s=el,
                        duration_s=lp.duration_s,
                        output_tokens=toks,
                        output_tokens_per_s=toks / el if el > 0 else 0.0,
                    )
                )
            except Exception:
                pass  # a broken progress callback must not end the run

        lag.start()
        tick = asyncio.get_running_loop().create_task(ticker())
        tasks: list[asyncio.Task] = []
        try:
            if rate is None:
                # ---- closed loop ------------------------------------------------------------
                counter = iter(range(n_measured) if n_measured is not None else _count())

                async def worker():
                    while True:
                        sched = clock() - t0
                        if clock() >= deadline:
                            return
                        i = next(counter, None)
                        if i is None:
                            return
                        await one(i, sched)

                tasks = [asyncio.ensure_future(worker()) for _ in range(conc)]
                await _gather_with_grace(tasks, deadline, grace_s, clock)
            else:
                # ---- open loop --------------------------------------------------------------
                sched_times = arrival_times(
                    rate, n_measured, lp.arrival, lp.burstiness, seed, duration_s=lp.duration_s if n_measured is None else None
                )
                cap = asyncio.Semaphore(conc) if conc else None
                loop = asyncio.get_running_loop()

                async def capped(i: int, s: float):
                    async with cap:
                        await one(i, s)

                for i, st in enumerate(sched_times):
                    due = t0 + float(st)
                    if due >= deadline:
                        break
                    now = clock()
                    if due > now:
                        # Sleep to the absolute deadline: lateness never accumulates.
                        await asyncio.sleep(due - now)
                    send_lags.append(clock() - due)
                    tasks.append(loop.create_task(capped(i, float(st)) if cap else one(i, float(st))))
                await _gather_with_grace(tasks, deadline, grace_s, clock)
        finally:
            tick.cancel()
            await lag.stop()
        duration = clock() - t0
        cpu = (time.process_time() - cpu0) / duration if duration > 0 else 0.0
        _report(final=True)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        if gc_was:
            gc.enable()
        if open_target:
            await target.close()

    records.sort(key=lambda r: r.index)
    notes: list[str] = []
    # ISL: the prompt's length in the model's tokenizer (vLLM's count); the server's own count
    # only when knee had no real tokenizer to measure the prompt with.
    if tokenizer is None or not tokenizer.exact:
        for r in records:
            if r.input_tokens_usage is not None:
                r.input_tokens = r.input_tokens_usage
    # ---- output tokens for requests without usage ---------------------------------------
    missing = [r for r in records if r.error is None and r.output_tokens_usage is None]
    if tokenizer is not None and texts:
        for r in records:
            if r.index in texts:
                r.output_tokens_retokenized = tokenizer.count(texts[r.index])
                if r.output_tokens_usage is None:
                    r.output_tokens = r.output_tokens_retokenized
        if missing:
            notes.append(
                f"{len(missing)} request(s) reported no usage: output tokens retokenized with {tokenizer.name}"
                + ("" if tokenizer.exact else " (approximate: word fallback)")
            )
    elif missing:
        notes.append(f"{len(missing)} request(s) reported no usage and no tokenizer was given: output tokens counted as content chunks")
    disc = [r for r in records if r.output_tokens_usage is not None and r.output_tokens_retokenized is not None and r.output_tokens_usage != r.output_tokens_retokenized]
    if retokenize and disc:
        notes.append(f"usage discrepancy: {len(disc)} request(s) where the server's completion_tokens differ from the retokenized count")

    summary = summarize(records, duration, slo, percentiles)
    if summary.get("tpot_unobserved"):
        notes.append(
            f"{summary['tpot_unobserved']:.0f} request(s) received all their tokens in one read (the client or the"
            " server was held off the CPU for the whole generation): their TPOT was not observed and is left out"
        )
    lag_p99, lag_max = _p99_ms(lag.samples)
    send_p99, send_max = _p99_ms(send_lags)
    health = ClientHealth(lag_p99, lag_max, send_p99, send_max, cpu, timestamps=getattr(target, "timestamps", "user"))
    health.warning = _diagnose(lag_p99, send_p99, cpu)
    if health.warning:
        notes.append(health.warning)
    return LoadResult(
        records=records,
        duration_s=duration,
        summary=summary,
        health=health,
        load_point=lp,
        target=getattr(target, "name", ""),
        model=getattr(target, "model", ""),
        transport=getattr(target, "transport_name", ""),
        warmup_records=warm_records,
        notes=notes,
        t0=t0,
        wall_t0=wall_t0,
    )


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
            "client is the bottleneck: " + ", ".join(late + [f"client CPU {cpu:.0%} of a core"])
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


def _count():
    i = 0
    while True:
        yield i
        i += 1


async def _gather_with_grace(tasks: list[asyncio.Task], deadline: float, grace_s: float, clock) -> None:
    if not tasks:
        return
    if math.isinf(deadline):
        await asyncio.gather(*tasks)
        return
    remaining = max(0.0, deadline - clock()) + grace_s
    done, pending = await asyncio.wait(tasks, timeout=remaining)
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed (cheaper per read), else asyncio's."""
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def run_load_sync(*args, **kwargs) -> LoadResult:
    """:func:`run_load` on a fresh event loop owned by the calling thread."""
    loop = new_event_loop()
    try:
        return loop.run_until_complete(run_load(*args, **kwargs))
    finally:
        loop.close()

