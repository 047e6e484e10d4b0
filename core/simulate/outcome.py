"""What a simulated load point returns: :class:`SimResult`, built from the client's and the
replicas' state into the same :class:`RequestRecord` s and summary the real load client
produces, every one labelled simulated."""

from __future__ import annotations

import math
from typing import Any
from dataclasses import dataclass, field

import numpy as np

from core.estimate.memory import MemoryPlan
from core.load.metrics import summarize
from core.simulate.client import SimClient
from core.simulate.requests import DONE, FAILED, Requests
from core.spec.records import RequestRecord


@dataclass
class SimResult:
    """One simulated load point. Every number in it is simulated (``simulated`` is True)."""

    records: list[RequestRecord]
    duration_s: float  # first send to the last response (vLLM's ``duration``), virtual seconds
    summary: dict  # core.load.metrics.summarize(...) plus "simulated": True
    memory: MemoryPlan  # per replica
    replicas: int
    steps: int  # engine steps, all replicas
    preemptions: int
    prefix_hits: int  # admissions that found the shared prefix cached
    kv_capacity_tokens: int  # per replica
    peak_kv_usage: float  # highest fraction of a replica's KV blocks in use
    busy_fraction: float  # time the engines spent stepping / (replicas × duration)
    # Time series for the live panel (virtual seconds from the start of the load point),
    # summed over replicas except kv_usage (the mean fraction of blocks in use).
    timeseries: dict[str, np.ndarray] = field(default_factory=dict)
    simulated: bool = True


_ONES: dict[int, np.ndarray] = {}


def _ones(n: int) -> np.ndarray:
    """A read-only array of n ones (one token per streamed chunk), shared between records."""
    a = _ONES.get(n)
    if a is None:
        a = np.ones(n, dtype=np.int64)
        a.flags.writeable = False
        if len(_ONES) < 4096:
            _ONES[n] = a
    return a


def _chunks(times: np.ndarray, every: int) -> tuple[np.ndarray, np.ndarray]:
    """Token times grouped as a server with ``--stream-interval every`` sends them: the first
    token alone, then ``every`` tokens a message, the rest with the last token."""
    m = times.shape[0]
    idx = np.unique(np.concatenate(([0], np.arange(every, m, every), [m - 1])))
    counts = np.diff(np.concatenate(([-1], idx)))
    return times[idx], counts


def build_result(sim: SimClient, reqs: Requests, origin: float, busy0: float, mem: MemoryPlan, series, stream_interval: int = 1) -> SimResult:
    tok_s = sim.tok_s
    ends = [np.asarray(r.dends) for r in sim.replicas]
    records: list[RequestRecord] = []
    append = records.append
    # A simulated record keeps its chunk arrays as numpy arrays (no list copy: a run holds
    # thousands of them); RequestRecord and the metrics read them as sequences.
    chunk_times: Any
    chunk_tokens: Any
    rec_end: float | None
    last = 0.0
    for index, rid in enumerate(sim.measured):
        if math.isnan(sim.send[rid]):
            continue  # never sent
        send = sim.send[rid] - origin
        sched = sim.sched[rid]
        rec_sched = None if sched is None else sched - origin
        st = reqs.state[rid]
        if st == DONE:
            e = ends[reqs.replica[rid]]
            segs = reqs.segs[rid]
            if len(segs) == 1:
                tf, a, k = segs[0]
                times = np.empty(k + 1)
                times[0] = tf
                times[1:] = e[a : a + k]
            else:
                times = np.concatenate([np.concatenate(([tf], e[a : a + k])) for tf, a, k in segs])
            m = times.shape[0]
            # Same operations, in the same order, as the client's end time in SimClient.finished,
            # so the next closed-loop send is bit-for-bit the previous request's end.
            if tok_s:
                times = times + tok_s * np.arange(1, m + 1)
            times = times - origin
            end = float(times[-1])
            out, chunk_times, chunk_tokens, rec_end, error = m, times, _ones(m), end, None
            if stream_interval > 1:
                chunk_times, chunk_tokens = _chunks(times, stream_interval)
        else:
            end = sim.client_end[rid] - origin if not math.isnan(sim.client_end[rid]) else send
            out, chunk_times, chunk_tokens = 0, [], []
            rec_end, error = (end if st == FAILED else None), reqs.error[rid] or "not completed"
        append(
            RequestRecord(
                index=index,
                send_time=send,
                scheduled_time=rec_sched,
                input_tokens=reqs.P[rid],
                output_tokens=out,
                chunk_times=chunk_times,
                chunk_tokens=chunk_tokens,
                end_time=rec_end,
                error=error,
                simulated=True,
            )
        )
        if end > last:
            last = end
    duration = last
    summary = summarize(records, duration)
    summary["simulated"] = True
    reps = sim.replicas
    blocks = reps[0].total_blocks if reps else 1
    t = np.asarray(series["t"]) - origin
    keep = t >= 0
    busy = sum(r.busy_s for r in reps) - busy0
    return SimResult(
        records=records,
        duration_s=duration,
        summary=summary,
        memory=mem,
        replicas=len(reps),
        steps=sum(r.step for r in reps),
        preemptions=sum(r.preemptions for r in reps),
        prefix_hits=sum(r.prefix_hits for r in reps),
        kv_capacity_tokens=mem.kv_tokens,
        peak_kv_usage=max((r.peak_used for r in reps), default=0) / max(blocks, 1),
        busy_fraction=busy / (len(reps) * duration) if duration > 0 else 0.0,
        timeseries={
            "t": t[keep],
            "running": np.asarray(series["running"], dtype=np.int64)[keep],
            "waiting": np.asarray(series["waiting"], dtype=np.int64)[keep],
            "kv_usage": np.asarray(series["kv_usage"], dtype=np.float64)[keep],
        },
    )
