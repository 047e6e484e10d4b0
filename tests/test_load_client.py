"""The streaming client against the loopback cadence server: timing points, load modes,
warm-up, progress, token counting and per-request errors (never fatal)."""

import asyncio
import sys

import numpy as np
import pytest

from core.load.datasets import Prompt, word_tokenizer
from core.load.openai import OpenAITarget
from core.load.runner import run_load, run_load_sync
from core.spec import LoadPoint
from support.cadence_server import start_cadence_server

TTFT, ITL = 0.030, 0.003


@pytest.fixture(scope="module")
def server():
    srv = start_cadence_server(TTFT, ITL)
    yield srv
    srv.stop()


def prompts(n, osl=10, tag="p"):
    return [Prompt(f"{tag}{i}", 1, osl) for i in range(n)]


@pytest.mark.parametrize("transport", ["raw", "aiohttp", "httpx-aiohttp"])
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_closed_loop_counts_and_timing_points(server, transport, api):
    t = OpenAITarget(server.url, "cadence", api=api, transport=transport)
    r = run_load_sync(t, prompts(24, osl=12, tag=f"{transport}-{api}-"), LoadPoint(concurrency=6))
    s = r.summary
    assert (s["completed"], s["failed"]) == (24, 0)
    assert s["total_output_tokens"] == 24 * 12  # from usage.completion_tokens
    assert r.transport == transport
    for rec in r.records:
        assert len(rec.chunk_times) == 12 and rec.output_tokens_usage == 12
        assert rec.send_time <= rec.headers_time <= rec.chunk_times[0] <= rec.end_time
        # TTFT can never beat the server's own 30 ms, less the 0.2 ms early the cadence server
        # may write a token (its timer batches writes due that soon; kernel receive stamps now
        # show it); the role-only chat chunk must not fire it
        assert rec.chunk_times[0] - rec.send_time >= TTFT - 2e-4 - 1e-4
        if api == "chat":
            assert rec.first_message_time < rec.chunk_times[0] - 0.02
    assert s["mean_ttft_ms"] >= TTFT * 1000
    # Never faster than the server writes. No upper bound: on a loaded box the server's own
    # writes come late, and how late is the machine's, not the client's (the figure against
    # the server's truth is bench/client_accuracy.py's).
    assert s["mean_tpot_ms"] >= 0.8 * ITL * 1000


def test_timestamps_match_server_truth_at_low_load(server):
    server.reset()
    t = OpenAITarget(server.url, "cadence")
    r = run_load_sync(t, prompts(8, osl=20, tag="truth"), LoadPoint(concurrency=4))
    truth = server.truth()
    for rec in r.records:
        w = np.asarray(truth[f"truth{rec.index}"]["writes"])
        c = np.asarray(rec.chunk_times) + r.t0
        err = c - w
        # the client can never see a byte before the server wrote it
        assert err.min() > -1e-4
        assert len(c) == len(w) == 20


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("kernel", [True, False])
def test_raw_transport_says_which_timestamps_it_used(server, monkeypatch, loop, kernel):
    # Kernel receive stamps on Linux (SO_TIMESTAMPNS through recvmsg on a loop reader, which
    # uvloop supports too); without the option, the user-space stamp, and the health says which.
    from core.load import rawhttp

    if not kernel:
        monkeypatch.setattr(rawhttp, "_SO_TIMESTAMPNS", None)
    t = OpenAITarget(server.url, "cadence")
    ps, lp = prompts(6, osl=8, tag=f"ts-{loop}-{kernel}-"), LoadPoint(concurrency=3)
    r = run_load_sync(t, ps, lp) if loop == "uvloop" else asyncio.run(run_load(t, ps, lp))
    assert (r.summary["completed"], r.summary["total_output_tokens"]) == (6, 48)
    expect = "kernel" if kernel and sys.platform.startswith("linux") else "user"
    assert r.health.timestamps == expect
    assert r.to_json(detailed=False)["client_health"]["timestamps"] == expect
    for rec in r.records:
        assert rec.send_time <= rec.headers_time <= rec.chunk_times[0] <= rec.end_time


def test_open_loop_rate_with_cap_records_client_queue_time(server):
    t = OpenAITarget(server.url, "cadence")
    lp = LoadPoint(request_rate=400.0, concurrency=2, arrival="constant", num_prompts=20)
    r = run_load_sync(t, prompts(20, osl=10, tag="cap"), lp)
    s = r.summary
    assert s["completed"] == 20
    # 2 slots, ~60 ms per request, one due every 2.5 ms: later requests wait for a slot
    assert s["max_client_queue_time_ms"] > 100
    scheds = [rec.scheduled_time for rec in r.records]
    assert scheds == pytest.approx([i / 400.0 for i in range(20)])
    assert s["max_concurrent_requests"] <= 20


def test_poisson_open_loop_without_cap_sends_on_schedule():
    """Without a cap no request waits for another to finish. Each request here takes 0.5 s,
    the whole schedule 0.3 s: a client that held a request for a free slot would queue it by
    about 0.5 s, ten times what an event loop delayed by a busy machine adds."""
    srv = start_cadence_server(0.5, 0.005)
    try:
        t = OpenAITarget(srv.url, "cadence")
        lp = LoadPoint(request_rate=100.0, num_prompts=30, arrival="poisson")
        r = run_load_sync(t, prompts(30, osl=5, tag="poi"), lp, seed=3)
    finally:
        srv.stop()
    assert r.summary["completed"] == 30
    # last send lands at n / rate (vLLM's normalisation)
    assert max(rec.scheduled_time for rec in r.records) == pytest.approx(30 / 100.0)
    assert r.summary["max_concurrent_requests"] >= 20  # all but the earliest overlap
    assert r.summary["max_client_queue_time_ms"] < 250


def test_warmup_is_excluded_and_duration_stops(server):
    t = OpenAITarget(server.url, "cadence")
    lp = LoadPoint(concurrency=4, duration_s=0.6)
    seen = []
    r = run_load_sync(t, prompts(50, osl=10, tag="dur"), lp, warmup=3, on_progress=seen.append)
    assert len(r.warmup_records) == 3 and all(w.index < 0 for w in r.warmup_records)
    assert all(rec.index >= 0 for rec in r.records)
    assert r.summary["completed"] == len(r.records) > 4
    # The deadline stops new requests: none is started after 0.6 s, and the run lasts that long.
    assert all(rec.scheduled_time < 0.6 for rec in r.records)
    assert r.duration_s > 0.55
    # Progress while the load runs, then the final report. How often it reports (2 Hz by
    # design) is a rate of a loaded box's event loop, not asserted here.
    assert len(seen) >= 2
    assert seen[-1].completed == r.summary["completed"]
    assert seen[-1].output_tokens == r.summary["total_output_tokens"]


def test_errors_are_counted_never_fatal():
    srv = start_cadence_server(0.01, 0.001, fail_every=3)
    try:
        t = OpenAITarget(srv.url, "cadence")
        r = run_load_sync(t, prompts(12, osl=5, tag="f"), LoadPoint(concurrency=3))
    finally:
        srv.stop()
    s = r.summary
    assert s["completed"] == 8 and s["failed"] == 4
    errs = [rec.error for rec in r.records if rec.error]
    assert all(e.startswith("HTTP 500: injected failure") for e in errs)
    assert s["good_fraction"] == pytest.approx(8 / 12)


@pytest.mark.parametrize(
    "mode, expect",
    [
        ("broken", "closed by the server mid-response"),
        ("malformed", "malformed SSE"),
        ("nostream", "server did not stream"),
    ],
)
def test_bad_streams_become_request_errors(mode, expect):
    srv = start_cadence_server(0.005, 0.001, mode=mode)
    try:
        for transport in ("raw", "aiohttp"):
            t = OpenAITarget(srv.url, "cadence", transport=transport)
            r = run_load_sync(t, prompts(4, osl=8, tag=f"{mode}{transport}"), LoadPoint(concurrency=2))
            assert r.summary["failed"] == 4, (transport, [x.error for x in r.records])
            errs = {rec.error for rec in r.records}
            if transport == "raw" or mode != "broken":
                assert all(expect in e for e in errs), errs
            else:  # aiohttp words it differently; it must still be a clear per-request error
                assert all(e for e in errs), errs
    finally:
        srv.stop()


def test_unreachable_server_is_a_request_error_not_a_crash():
    t = OpenAITarget("http://127.0.0.1:9", "m")  # port 9 (discard): nothing listens
    r = run_load_sync(t, prompts(3), LoadPoint(concurrency=3))
    assert r.summary["failed"] == 3
    assert all(rec.error.startswith("cannot connect") for rec in r.records)


def test_without_usage_output_tokens_are_retokenized_from_joined_text():
    srv = start_cadence_server(0.005, 0.001, mode="nousage")
    try:
        tok = word_tokenizer()
        r = run_load_sync(OpenAITarget(srv.url, "cadence"), prompts(3, osl=7, tag="nu"), LoadPoint(concurrency=3), tokenizer=tok)
        r2 = run_load_sync(OpenAITarget(srv.url, "cadence"), prompts(3, osl=7, tag="nv"), LoadPoint(concurrency=3))
    finally:
        srv.stop()
    # " tok" x6 + " end" joined -> 7 words; never chunk by chunk
    assert [rec.output_tokens for rec in r.records] == [7, 7, 7]
    assert all(rec.output_tokens_usage is None and rec.output_tokens_retokenized == 7 for rec in r.records)
    assert any("retokenized" in n for n in r.notes)
    assert any("counted as content chunks" in n for n in r2.notes)


def test_api_key_never_leaks_into_records_or_json(server):
    t = OpenAITarget(server.url, "cadence", api_key="sk-secret-123")
    r = run_load_sync(t, prompts(2, tag="key"), LoadPoint(concurrency=1))
    assert "sk-secret-123" not in repr(t)
    assert "sk-secret-123" not in str(r.to_json())


async def test_run_load_is_usable_from_a_running_loop(server):
    t = OpenAITarget(server.url, "cadence")
    r = await run_load(t, prompts(4, tag="aio"), LoadPoint(concurrency=2))
    assert r.summary["completed"] == 4
    assert asyncio.get_running_loop().is_running()
