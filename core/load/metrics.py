"""Run metrics from per-request records, exactly as ``shared/reference/metrics.md`` defines them.

One pure function, shared by the real load client and the simulator (virtual time)::

    summarize(records, duration_s, slo=None, percentiles=(50, 90, 95, 99)) -> dict[str, float]

Input: :class:`core.spec.RequestRecord` s. ``chunk_times`` are the content-carrying messages
only (seconds, one monotonic clock); ``chunk_tokens`` the tokens each carried. Both may be
lists or 1-D numpy arrays (arrays are cheaper for the simulator). A record is *successful*
when ``error is None`` and ``end_time`` is set; latency statistics use successful records only.

Output keys (``vllm bench serve`` names where vLLM has one):

- run: ``completed``, ``failed``, ``duration`` (the caller's ``duration_s``, vLLM's
  ``dur_s``), ``duration_span`` (max request end − min request start, AIPerf's),
  ``total_input_tokens``, ``total_output_tokens``, ``request_throughput``,
  ``output_throughput``, ``total_token_throughput``, ``input_throughput``,
  ``request_goodput``, ``good_fraction``, ``max_output_tokens_per_s``,
  ``max_concurrent_requests``, ``concurrency`` (Σ e2el / duration, Little's law),
  ``tpot_unobserved`` (successful requests with osl ≥ 2 whose tokens all arrived at once).
- per metric ``M`` in ``ttft, tpot, itl, e2el, chunk_itl, client_queue_time,
  e2el_including_client_queue``: ``mean_M_ms``, ``median_M_ms``, ``std_M_ms``,
  ``max_M_ms`` and ``pXX_M_ms`` for each requested percentile (``p99_ttft_ms``,
  ``p99.9_ttft_ms`` for fractional ones, as vLLM writes them).

Definitions (per request, successful only):

- ``ttft`` = first content chunk − send. ``e2el`` = last content chunk − send (t_last); a
  successful request with no content at all falls back to ``end_time``.
- ``tpot`` = (e2el − ttft) / (osl − 1), only for osl ≥ 2 (vLLM's definition), and only
  where the decode was observed: a request whose every content chunk carries the same arrival
  stamp (all its tokens came in one read — the client, or the server's frontend, was held off
  the CPU for the whole generation, and TCP merged the unread segments) has e2el == ttft, and
  vLLM's formula would give it TPOT 0, i.e. infinitely fast decoding. It is left out of the
  TPOT population instead and counted in ``tpot_unobserved`` (run key); its TTFT and E2EL
  stay. Several tokens in one chunk *after* a first chunk still give a TPOT, as in vLLM.
- ``itl`` is **per token**: each gap between consecutive content chunks is spread evenly
  over the tokens the later chunk carried (g/k, k times), pooled over requests. When a
  request's ``chunk_tokens`` do not add up to its ``output_tokens`` (no per-chunk usage),
  every chunk counts as one token, which is exactly vLLM's ``itl``. With one token per
  chunk, ``itl`` and ``chunk_itl`` are identical.
- ``chunk_itl`` = the raw gaps between content chunks, pooled (vLLM's ``itl``; AIPerf's
  inter-chunk latency). Kept under its own name so multi-token chunks never pass for tokens.
- ``client_queue_time`` = send − scheduled (0 when the record has no schedule);
  ``e2el_including_client_queue`` = t_last − scheduled.

Statistics: mean, median, ``np.std`` (ddof=0), ``np.percentile`` (linear). A statistic over
an empty population is NaN, not vLLM's 0: a run where every request failed must not pass
a latency SLO (``Constraint.holds`` treats NaN as a violation).

Goodput: a successful request is good when, for every latency constraint of ``slo`` on
``ttft``, ``tpot`` or ``e2el`` with an upper bound (``<``/``<=``), its own value is ≤ the bound
(vLLM's ``--goodput``; tpot counts as 0 for osl ≤ 1 and where it was not observed). Constraints on other metrics (itl,
throughputs) are aggregate goals and do not make single requests good or bad. Without an
SLO (or without such constraints) every successful request is good, so ``request_goodput``
equals ``request_throughput``. ``good_fraction`` = good / (completed + failed) (AIPerf's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain

import numpy as np

from core.spec.records import RequestRecord

_GOODPUT_METRICS = ("ttft", "tpot", "e2el")
LATENCY_KEYS = ("ttft", "tpot", "itl", "e2el", "chunk_itl", "client_queue_time", "e2el_including_client_queue")


def percentile_label(p: float) -> str:
    """vLLM's spelling: 99 -> '99', 99.9 -> '99.9'."""
    return str(int(p)) if float(p).is_integer() else str(p)


def _stats(out: dict[str, float], name: str, values_s: np.ndarray, pcts: Sequence[float]) -> None:
    """mean/median/std/max/pXX of ``values_s`` (seconds) into ``out`` as milliseconds."""
    if values_s.size == 0:
        nan = math.nan
        out[f"mean_{name}_ms"] = nan
        out[f"median_{name}_ms"] = nan
        out[f"std_{name}_ms"] = nan
        out[f"max_{name}_ms"] = nan
        for p in pcts:
            out[f"p{percentile_label(p)}_{name}_ms"] = nan
        return
    ms = values_s * 1000.0
    # One partition for the median and every percentile together.
    qs = np.percentile(ms, [50.0, *pcts])
    out[f"mean_{name}_ms"] = float(ms.mean())
    out[f"median_{name}_ms"] = float(qs[0])
    out[f"std_{name}_ms"] = float(ms.std())
    out[f"max_{name}_ms"] = float(ms.max())
    for p, q in zip(pcts, qs[1:]):
        out[f"p{percentile_label(p)}_{name}_ms"] = float(q)


def _goodput_bounds(slo) -> dict[str, float]:
    """Per-request upper bounds in seconds for ttft/tpot/e2el from an SLO (tightest wins)."""
    bounds: dict[str, float] = {}
    if slo is None:
        return bounds
    for c in slo.constraints:
        if c.metric in _GOODPUT_METRICS and c.op in ("<", "<="):
            v = c.value / 1000.0
            bounds[c.metric] = min(bounds.get(c.metric, math.inf), v)
    return bounds


def _bucket_max(times: np.ndarray, weights: np.ndarray | None, origin: float, nbuckets: int) -> float:
    if times.size == 0 or nbuckets <= 0:
        return 0.0
    idx = np.floor(times - origin).astype(np.int64)
    keep = (idx >= 0) & (idx < nbuckets)
    w = None if weights is None else weights[keep]
    if nbuckets > 4 * times.size + 4096:
        # A sparse span (a simulated run of absurd length, from a diverged fitted profile):
        # count only the seconds that hold a token, not an array of every second.
        _, inv = np.unique(idx[keep], return_inverse=True)
        counts = np.bincount(inv, weights=w)
    else:
        counts = np.bincount(idx[keep], weights=w, minlength=nbuckets)
    return float(counts.max()) if counts.size else 0.0


def summarize(
    records: Sequence[RequestRecord],
    duration_s: float,
    slo=None,
    percentiles: Sequence[float] = (50, 90, 95, 99),
) -> dict[str, float]:
    """Summarize one load point; see the module docstring for every key and definition."""
    pcts = tuple(float(p) for p in percentiles)
    ok = [r for r in records if r.error is None and r.end_time is not None]
    n_ok = len(ok)
    failed = len(records) - n_ok
    dur = float(duration_s)
    inv = 1.0 / dur if dur > 0 else math.nan

    send = np.fromiter((r.send_time for r in ok), dtype=np.float64, count=n_ok)
    sched = np.fromiter((r.send_time if r.scheduled_time is None else r.scheduled_time for r in ok), dtype=np.float64, count=n_ok)
    isl = np.fromiter((r.input_tokens for r in ok), dtype=np.int64, count=n_ok)
    osl = np.fromiter((r.output_tokens for r in ok), dtype=np.int64, count=n_ok)
    end = np.fromiter((r.end_time for r in ok), dtype=np.float64, count=n_ok)
    nchunks = np.fromiter((len(r.chunk_times) for r in ok), dtype=np.int64, count=n_ok)
    has = nchunks > 0

    # Pool every content chunk once; per-request first/last come from the offsets.
    # (fromiter over a chain is the cheapest way to flatten Python lists; arrays from the
    # simulator concatenate without a per-element loop.)
    total_chunks = int(nchunks.sum())
    with_chunks = [r for r in ok if len(r.chunk_times)]
    if not total_chunks:
        times = np.empty(0)
    elif all(isinstance(r.chunk_times, np.ndarray) for r in with_chunks):
        times = np.concatenate([r.chunk_times for r in with_chunks]).astype(np.float64, copy=False)
    else:
        times = np.fromiter(chain.from_iterable(r.chunk_times for r in with_chunks), np.float64, total_chunks)
    # Tokens per chunk are trusted only where they add up to the request's OSL; only the
    # requests with multi-token chunks need their counts copied, everything else is 1.
    toks = np.ones(total_chunks)
    multi_token = False
    pos = 0
    for r in with_chunks:
        n = len(r.chunk_times)
        ctok = r.chunk_tokens
        if len(ctok) == n and r.output_tokens != n:
            if int(np.sum(ctok) if isinstance(ctok, np.ndarray) else sum(ctok)) == r.output_tokens:
                toks[pos : pos + n] = ctok
                multi_token = True
        pos += n
    nc = nchunks[has]
    starts = np.concatenate(([0], np.cumsum(nc)[:-1])) if nc.size else np.empty(0, dtype=np.int64)
    lasts = starts + nc - 1
    first_t = np.full(n_ok, math.nan)
    last_t = end.copy()
    first_t[has] = times[starts]
    last_t[has] = times[lasts]

    ttft = first_t - send  # NaN for content-less requests
    e2el = last_t - send
    # A request whose content all arrived at one instant (one socket read: the client, or the
    # server's frontend, was held off for the whole decode) carries no decode time at all:
    # last == first would read TPOT 0 — infinitely fast — which no server did. Such a request
    # is left out of TPOT (counted in ``tpot_unobserved``) rather than pulling the mean to 0.
    multi = (osl >= 2) & has
    observed = np.zeros(n_ok, dtype=bool)
    observed[multi] = last_t[multi] > first_t[multi]
    tpot_mask = observed
    tpot = (last_t[tpot_mask] - first_t[tpot_mask]) / (osl[tpot_mask] - 1)

    # Gaps between consecutive chunks of the same request (drop each request's first chunk).
    if total_chunks:
        gaps = np.diff(times, prepend=times[0])
        inner = np.ones(total_chunks, dtype=bool)
        inner[starts] = False
        chunk_gaps = gaps[inner]
        # Per-token ITL: gap / k repeated k times (k = tokens of the later chunk).
        if multi_token:
            k_int = np.maximum(toks[inner], 1).astype(np.int64)  # a 0-token content chunk is still a gap
            itl = np.repeat(chunk_gaps / k_int, k_int)
        else:
            itl = chunk_gaps
    else:
        chunk_gaps = np.empty(0)
        itl = np.empty(0)

    out: dict[str, float] = {
        "completed": float(n_ok),
        "failed": float(failed),
        "duration": dur,
    }
    if records:
        all_send = min(r.send_time for r in records)
        all_end = max((r.end_time if r.end_time is not None else r.send_time) for r in records)
        out["duration_span"] = float(all_end - all_send)
    else:
        out["duration_span"] = 0.0
    tin, tout = int(isl.sum()), int(osl.sum())
    out["total_input_tokens"] = float(tin)
    out["total_output_tokens"] = float(tout)
    out["request_throughput"] = n_ok * inv
    out["output_throughput"] = tout * inv
    out["total_token_throughput"] = (tin + tout) * inv
    out["input_throughput"] = tin * inv

    # Goodput (vLLM): every per-request bound must hold; tpot = 0 when osl <= 1.
    bounds = _goodput_bounds(slo)
    good = np.ones(n_ok, dtype=bool)
    if bounds:
        tpot_all = np.zeros(n_ok)
        tpot_all[tpot_mask] = tpot
        per = {"ttft": np.where(has, ttft, math.inf), "tpot": tpot_all, "e2el": e2el}
        for metric, b in bounds.items():
            good &= per[metric] <= b
    n_good = int(good.sum())
    out["request_goodput"] = n_good * inv
    out["good_fraction"] = n_good / len(records) if records else math.nan

    # Peaks over 1 s buckets from the first send (vLLM's max_output_tokens_per_s and
    # max_concurrent_requests), tokens weighted by what each chunk carried when trusted.
    if n_ok:
        origin = float(send.min())
        nb = int(math.ceil(float(np.max(last_t)) - origin)) + 1
        w = toks if multi_token else None
        out["max_output_tokens_per_s"] = _bucket_max(times, w, origin, nb)
        s_idx = np.floor(send - origin).astype(np.int64)
        e_idx = np.floor(last_t - origin).astype(np.int64)
        delta = np.zeros(nb + 1)
        np.add.at(delta, np.clip(s_idx, 0, nb), 1.0)
        np.add.at(delta, np.clip(e_idx + 1, 0, nb), -1.0)
        out["max_concurrent_requests"] = float(np.cumsum(delta)[:nb].max())
    else:
        out["max_output_tokens_per_s"] = 0.0
        out["max_concurrent_requests"] = 0.0
    out["concurrency"] = float(e2el.sum()) * inv if n_ok else 0.0
    out["tpot_unobserved"] = float(int(multi.sum()) - int(observed.sum()))

    _stats(out, "ttft", ttft[has], pcts)
    _stats(out, "tpot", tpot, pcts)
    _stats(out, "itl", itl, pcts)
    _stats(out, "e2el", e2el, pcts)
    if itl is chunk_gaps:  # one token per chunk everywhere: the same population, copy it
        for key in [k for k in out if k.endswith("_itl_ms") and "chunk" not in k]:
            out[key.replace("_itl_ms", "_chunk_itl_ms")] = out[key]
    else:
        _stats(out, "chunk_itl", chunk_gaps, pcts)
    _stats(out, "client_queue_time", send - sched, pcts)
    _stats(out, "e2el_including_client_queue", last_t - sched, pcts)
    return out


def per_request_arrays(records: Sequence[RequestRecord]) -> dict[str, list]:
    """``vllm bench serve --save-detailed`` arrays (seconds, as vLLM stores them), all
    requests in order; failed ones carry their error and zeros, as vLLM does."""
    out: dict[str, list] = {
        "input_lens": [],
        "output_lens": [],
        "ttfts": [],
        "itls": [],
        "errors": [],
        "queue_times": [],
        "start_times": [],
    }
    for r in records:
        ct = list(map(float, r.chunk_times))
        out["input_lens"].append(int(r.input_tokens))
        out["output_lens"].append(int(r.output_tokens) if r.error is None else 0)
        out["ttfts"].append(ct[0] - r.send_time if ct and r.error is None else 0.0)
        out["itls"].append([b - a for a, b in zip(ct, ct[1:])] if r.error is None else [])
        out["errors"].append(r.error or "")
        out["queue_times"].append(r.queue_delay)
        out["start_times"].append(r.send_time)
    return out
