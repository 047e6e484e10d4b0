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
import logging
import math
import time
from collections.abc import Callable, Sequence

from core.load.datasets import Prompt, Tokenizer
from core.load.health import _diagnose, _Lag, _p99_ms
from core.load.metrics import summarize

# The result types live in core.load.result; callers have always imported them from here.
from core.load.result import ClientHealth, LoadResult, Progress, Target  # noqa: F401 - re-exported
from core.load.schedule import arrival_times
from core.spec.records import RequestRecord
from core.spec.serving import LoadPoint

PROGRESS_INTERVAL_S = 0.25
log = logging.getLogger(__name__)


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

        def _report():
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
            except Exception:  # noqa: BLE001 - a broken progress callback must not end the run
                # ... nor pass unseen: logged once (it would fail again every tick).
                if not state.get("progress_failed"):
                    state["progress_failed"] = 1
                    log.exception("on_progress callback failed; the load continues without progress reports")

        lag.start()
        tick = asyncio.get_running_loop().create_task(ticker())
        tasks: list[asyncio.Task] = []
        try:
            if rate is None:
                # ---- closed loop ------------------------------------------------------------
                assert conc is not None  # a load point without a rate has a concurrency (LoadPoint._check)
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

                async def capped(i: int, s: float, cap: asyncio.Semaphore):
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
                    tasks.append(loop.create_task(capped(i, float(st), cap) if cap else one(i, float(st))))
                await _gather_with_grace(tasks, deadline, grace_s, clock)
        finally:
            tick.cancel()
            await lag.stop()
        duration = clock() - t0
        cpu = (time.process_time() - cpu0) / duration if duration > 0 else 0.0
        _report()
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
    disc = [
        r
        for r in records
        if r.output_tokens_usage is not None and r.output_tokens_retokenized is not None and r.output_tokens_usage != r.output_tokens_retokenized
    ]
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
