"""core.load.metrics.summarize: definitions from shared/reference/metrics.md, checked by hand."""

import math

import numpy as np
import pytest

from core.load.metrics import per_request_arrays, summarize
from core.spec import RequestRecord, parse_constraints


def rec(i, send, ttft, gaps, toks=None, osl=None, isl=10, sched=None, error=None, end_extra=0.001):
    times = [send + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    toks = toks or [1] * len(times)
    return RequestRecord(
        index=i,
        send_time=send,
        scheduled_time=sched,
        input_tokens=isl,
        output_tokens=osl if osl is not None else sum(toks),
        chunk_times=times,
        chunk_tokens=toks,
        end_time=times[-1] + end_extra,
        error=error,
    )


def test_single_token_chunks_match_vllm_definitions():
    # Two requests: ttft 0.1 and 0.3 s; gaps 10 ms (3 chunks) and 20 ms (2 chunks).
    r1 = rec(0, 0.0, 0.1, [0.01, 0.01])
    r2 = rec(1, 0.5, 0.3, [0.02])
    s = summarize([r1, r2], duration_s=2.0)
    assert s["completed"] == 2 and s["failed"] == 0
    assert s["total_input_tokens"] == 20 and s["total_output_tokens"] == 5
    assert s["request_throughput"] == pytest.approx(1.0)
    assert s["output_throughput"] == pytest.approx(2.5)
    assert s["total_token_throughput"] == pytest.approx(12.5)
    assert s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["median_ttft_ms"] == pytest.approx(200.0)
    assert s["std_ttft_ms"] == pytest.approx(100.0)  # ddof=0
    assert s["p90_ttft_ms"] == pytest.approx(np.percentile([100.0, 300.0], 90))
    # tpot: (last - first) / (osl - 1): 10 ms and 20 ms
    assert s["mean_tpot_ms"] == pytest.approx(15.0)
    # itl pooled over gaps: [10, 10, 20] -> chunk-weighted mean differs from mean tpot (vllm #6531)
    assert s["mean_itl_ms"] == pytest.approx(40.0 / 3)
    assert s["mean_chunk_itl_ms"] == s["mean_itl_ms"]
    # e2el ends at the last content chunk, not at end_time
    assert s["mean_e2el_ms"] == pytest.approx((120.0 + 320.0) / 2)
    assert s["duration"] == 2.0
    for key in ("p50_ttft_ms", "p95_tpot_ms", "p99_itl_ms", "p99_e2el_ms", "max_e2el_ms"):
        assert key in s


def test_multi_token_chunks_split_per_token_itl_but_not_chunk_itl():
    # First chunk carries 1 token, then a 30 ms gap delivering 3 tokens, then 10 ms with 1.
    r = rec(0, 0.0, 0.05, [0.03, 0.01], toks=[1, 3, 1])
    s = summarize([r], duration_s=1.0)
    assert s["total_output_tokens"] == 5
    assert s["mean_tpot_ms"] == pytest.approx(40.0 / 4)
    # per-token: [10, 10, 10, 10]; per-chunk: [30, 10]
    assert s["mean_itl_ms"] == pytest.approx(10.0)
    assert s["max_itl_ms"] == pytest.approx(10.0)
    assert s["mean_chunk_itl_ms"] == pytest.approx(20.0)
    assert s["max_output_tokens_per_s"] == 5


def test_untrusted_chunk_tokens_fall_back_to_one_token_per_chunk():
    # Usage says 10 tokens but only 3 chunks with unknown per-chunk counts: ITL = chunk gaps.
    r = rec(0, 0.0, 0.05, [0.03, 0.01], osl=10)
    s = summarize([r], duration_s=1.0)
    assert s["mean_itl_ms"] == pytest.approx(20.0)
    assert s["mean_tpot_ms"] == pytest.approx(40.0 / 9)


def test_failures_are_counted_not_measured():
    good = rec(0, 0.0, 0.1, [0.01])
    bad = RequestRecord(index=1, send_time=0.0, error="HTTP 500: boom", end_time=0.2)
    broken = RequestRecord(index=2, send_time=0.0, chunk_times=[0.001], error="stream ended early")
    s = summarize([good, bad, broken], duration_s=1.0)
    assert s["completed"] == 1 and s["failed"] == 2
    assert s["mean_ttft_ms"] == pytest.approx(100.0)
    assert s["good_fraction"] == pytest.approx(1 / 3)


def test_all_failed_gives_nan_latency_that_fails_any_slo():
    bad = RequestRecord(index=0, send_time=0.0, error="connection refused")
    s = summarize([bad], duration_s=1.0)
    assert s["completed"] == 0 and s["failed"] == 1
    assert math.isnan(s["p99_ttft_ms"])
    assert not parse_constraints("ttft:p99<500ms").holds(s)
    assert summarize([], 1.0)["completed"] == 0


def test_goodput_uses_per_request_bounds():
    fast = rec(0, 0.0, 0.1, [0.01, 0.01])
    slow_first = rec(1, 0.0, 0.6, [0.01, 0.01])
    slow_decode = rec(2, 0.0, 0.1, [0.05, 0.05])
    one_token = rec(3, 0.0, 0.1, [])  # tpot counts as 0 for osl <= 1 (vLLM)
    recs = [fast, slow_first, slow_decode, one_token]
    s = summarize(recs, 2.0, slo=parse_constraints("ttft:p95<500ms;tpot:p99<20ms"))
    assert s["request_goodput"] == pytest.approx(2 / 2.0)
    assert s["good_fraction"] == pytest.approx(0.5)
    # no SLO: every completed request is good
    assert summarize(recs, 2.0)["request_goodput"] == pytest.approx(2.0)
    # throughput constraints do not judge single requests
    assert summarize(recs, 2.0, slo=parse_constraints("output_throughput>1000"))["request_goodput"] == pytest.approx(2.0)


def test_client_queue_time_and_concurrency_peaks():
    a = rec(0, 1.0, 0.1, [0.1], sched=0.5)
    b = rec(1, 1.2, 0.1, [0.1], sched=1.2)
    s = summarize([a, b], duration_s=2.0)
    assert s["mean_client_queue_time_ms"] == pytest.approx(250.0)
    assert s["max_client_queue_time_ms"] == pytest.approx(500.0)
    assert s["max_e2el_including_client_queue_ms"] == pytest.approx(700.0)
    assert s["max_concurrent_requests"] == 2
    assert s["concurrency"] == pytest.approx(0.4 / 2.0)


def test_fractional_percentiles_and_numpy_inputs():
    r = rec(0, 0.0, 0.1, [0.01] * 9)
    arr = RequestRecord(
        index=1,
        send_time=0.0,
        input_tokens=10,
        output_tokens=10,
        chunk_times=np.asarray(r.chunk_times),
        chunk_tokens=np.ones(10, dtype=int),
        end_time=r.end_time,
    )
    s1 = summarize([r], 1.0, percentiles=(99.9,))
    s2 = summarize([arr], 1.0, percentiles=(99.9,))
    assert "p99.9_ttft_ms" in s1
    assert s1 == pytest.approx(s2, nan_ok=True)


def test_per_request_arrays_follow_save_detailed():
    r = rec(0, 0.0, 0.1, [0.01, 0.02])
    bad = RequestRecord(index=1, send_time=0.0, error="HTTP 401")
    d = per_request_arrays([r, bad])
    assert d["output_lens"] == [3, 0]
    assert d["ttfts"][0] == pytest.approx(0.1)
    assert d["itls"][0] == pytest.approx([0.01, 0.02])
    assert d["errors"] == ["", "HTTP 401"]


def test_tokens_all_arriving_in_one_read_give_no_tpot_rather_than_zero():
    # Seen on a real vLLM point in a loaded CI run (test_sweep_realvllm: mean_tpot_ms == 0.0):
    # the client got no CPU for a whole generation, TCP merged the 32 unread SSE messages into
    # one read, and every message carried that read's stamp: last == first, so vLLM's formula
    # (e2el - ttft) / (osl - 1) read 0 ms — infinitely fast decoding, passing any TPOT SLO.
    merged = rec(0, 0.0, 0.2, [0.0] * 31)  # 32 one-token messages, one stamp
    one_msg = rec(1, 1.0, 0.2, [], toks=[32])  # or one message carrying all 32 tokens
    streamed = rec(2, 2.0, 0.1, [0.005] * 31)  # decode seen: 5 ms a token
    s = summarize([merged, one_msg, streamed], duration_s=3.0)
    assert s["completed"] == 3 and s["total_output_tokens"] == 96
    assert s["tpot_unobserved"] == 2
    assert s["mean_tpot_ms"] == pytest.approx(5.0) and s["max_tpot_ms"] == pytest.approx(5.0)
    # TTFT and E2EL of the merged requests are still what the client saw.
    assert s["max_ttft_ms"] == pytest.approx(200.0) and s["mean_e2el_ms"] == pytest.approx((200 + 200 + 255) / 3)
    # Only merged requests: no TPOT at all (NaN, which fails a TPOT SLO), never 0.
    only = summarize([merged, one_msg], duration_s=2.0)
    assert math.isnan(only["mean_tpot_ms"]) and only["tpot_unobserved"] == 2
    # A multi-token chunk after a first chunk is a decode the client saw: it has a TPOT.
    burst = rec(3, 0.0, 0.1, [0.031], toks=[1, 31])
    assert summarize([burst], duration_s=1.0)["mean_tpot_ms"] == pytest.approx(1.0)
    # One output token: no TPOT, and not "unobserved" either (vLLM: defined only for osl >= 2).
    single = summarize([rec(4, 0.0, 0.1, [])], duration_s=1.0)
    assert math.isnan(single["mean_tpot_ms"]) and single["tpot_unobserved"] == 0
