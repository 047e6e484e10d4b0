"""Timestamp accuracy with 256 concurrent streams against a server of known cadence (first
token after 50 ms, then one every 5 ms): measured TTFT and ITL within 1 ms of the truth at p99.

The truth is what the server did: it stamps every write with perf_counter (CLOCK_MONOTONIC,
shared across processes), so per token the client's error is its stamp minus the server's —
TTFT error = measured TTFT − (server's first write − client send), ITL error = measured gap −
server's gap. Connections are opened by a warm-up round first: the test is about stamping
streamed tokens, not about 256 TCP handshakes. On failure the message carries the client's
own health figures and the machine's load, which say whether the client or a busy machine
delayed the stamps.

The client stamps with the kernel's receive time (SO_TIMESTAMPNS, core/load/rawhttp.py), so
how late its event loop gets to a read no longer matters — with one limit: TCP merges the
segments a connection leaves unread into one, stamped with the newest, so the client (and the
server, whose writes are the cadence) must each get a CPU within every 5 ms gap. On a shared
2-core box other sessions' work holds them off for 10-50 ms at a time (measured: 40% of reads
merged, p99 ITL error 9-25 ms), and ``nice`` cannot help across sessions (autogroup). So, when
the OS allows it (root or CAP_SYS_NICE), both test processes run SCHED_RR for the measurement
only: the test is about the client's stamps, not about the machine's other tenants. Where it is
not allowed, the test runs as before at normal priority, and the failure message says so.
"""

import os

import numpy as np

from core.load.datasets import Prompt
from core.load.openai import OpenAITarget
from core.load.runner import run_load_sync
from core.spec import LoadPoint
from support.cadence_server import start_cadence_server
from support.sched import realtime

STREAMS, OSL = 256, 40


def test_ttft_and_itl_within_1ms_of_truth_at_p99_with_256_streams():
    try:
        import uvloop  # noqa: F401

        uv = True
    except ImportError:
        uv = False
    srv = start_cadence_server(0.050, 0.005, use_uvloop=uv)
    try:
        measured = [Prompt(f"cad{i}", 1, OSL) for i in range(STREAMS)]
        warm = [Prompt(f"warm{i}", 1, 1) for i in range(STREAMS)]
        target = OpenAITarget(srv.url, "cadence")
        with realtime([0, srv.proc.pid]) as rt:
            res = run_load_sync(target, measured + warm, LoadPoint(concurrency=STREAMS, num_prompts=STREAMS), warmup=STREAMS)
        truth = srv.truth()
    finally:
        srv.stop()
    assert res.summary["completed"] == STREAMS, [r.error for r in res.records if r.error][:3]
    ttft_err, itl_err = [], []
    for rec in res.records:
        w = np.asarray(truth[f"cad{rec.index}"]["writes"])
        c = np.asarray(rec.chunk_times) + res.t0
        assert len(c) == len(w) == OSL
        ttft_err.append(c[0] - w[0])
        itl_err.append(np.diff(c) - np.diff(w))
    ttft_err = np.abs(np.asarray(ttft_err)) * 1000
    itl_err = np.abs(np.concatenate(itl_err)) * 1000
    p99_ttft, p99_itl = np.percentile(ttft_err, 99), np.percentile(itl_err, 99)
    why = (
        f"p99 error TTFT {p99_ttft:.3f} ms, ITL {p99_itl:.3f} ms (max {ttft_err.max():.2f} / {itl_err.max():.2f}); "
        f"client: {res.health.as_dict()}; test processes {'SCHED_RR' if rt else 'at normal priority (SCHED_RR not permitted)'}; "
        f"load average {os.getloadavg()} on {os.cpu_count()} CPUs"
    )
    print(why)
    assert p99_ttft < 1.0, why
    assert p99_itl < 1.0, why
    # The summary agrees with the server's nominal cadence as well as the truth allows.
    assert abs(res.summary["mean_tpot_ms"] - 5.0) < 1.0, why
