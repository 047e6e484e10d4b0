"""Client fidelity side by side: knee's client, a minimal aiohttp client and `vllm bench serve`
against one exact-cadence server in one run — mean/p50/p99 TTFT, TPOT and ITL for each, and
where each client's TTFT goes, split against the server's truth.

The server is tests/support/cadence_server.py (its own process): first token ``--ttft`` ms
after it reads the request, then one every ``--itl`` ms, every write stamped with perf_counter
(CLOCK_MONOTONIC, shared by processes), and the request's arrival (``recv``). Every client
stamps its send with perf_counter too, so each TTFT splits into

    to server  = server recv − client send      (request bytes on their way; connection setup)
    server     = server first write − recv      (the cadence: --ttft, plus any server lateness)
    to client  = client first stamp − first write (response bytes on their way; stamping)

Clients, one closed-loop run each per round at ``--streams`` concurrency, ``--requests``
measured requests after a warm-up of one request per stream (connections open):

- knee: core.load (OpenAITarget, raw transport, kernel receive stamps);
- aiohttp: one ClientSession (connector limit = streams), lines read from the response
  stream (``async for line in resp.content``), TTFT at the first line with text — the
  minimal client a user would write;
- vllm bench serve: from .venv-vllm (tests/support/vllm_bench.py; random dataset, the tiny
  model's tokenizer), skipped with a note when that venv or tokenizer is missing. Its TTFT
  split is not shown (its requests could not be matched one to one to the server's log).

Rounds alternate the order (ABC, CBA, ...) so a drift of the machine's load favours no
client. No assertions; it prints the table (per round with ``--per-round``).

    .venv/bin/python bench/client_fidelity.py [--streams 32] [--requests 256] [--ttft 40]
        [--itl 7] [--osl 32] [--rounds 3] [--no-vllm] [--per-round]
"""

from __future__ import annotations

import argparse
import asyncio
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
from core.load.runner import new_event_loop, run_load_sync  # noqa: E402
from core.spec import LoadPoint  # noqa: E402
from support.cadence_server import start_cadence_server  # noqa: E402

MODEL = "cadence"


def _per_request(sends, firsts, lasts, osls, stamps, truth_keys, truth) -> dict:
    """Per-request arrays (seconds, perf_counter) -> the figures printed."""
    sends, firsts, lasts, osls = map(np.asarray, (sends, firsts, lasts, osls))
    ttft = firsts - sends
    tpot = (lasts - firsts) / np.maximum(osls - 1, 1)
    itl = np.concatenate([np.diff(s) for s in stamps]) if stamps else np.empty(0)
    split = {"to server": [], "server": [], "to client": []}
    for send, first, key in zip(sends, firsts, truth_keys):
        t = truth.get(key)
        if not t or not t["writes"]:
            continue
        split["to server"].append(t["recv"] - send)
        split["server"].append(t["writes"][0] - t["recv"])
        split["to client"].append(first - t["writes"][0])
    return {"ttft": ttft, "tpot": tpot, "itl": itl, **{k: np.asarray(v) for k, v in split.items()}}


def run_knee(srv, streams: int, n: int, osl: int, tag: str) -> dict:
    prompts = [Prompt(f"{tag}{i}", 1, osl) for i in range(n)] + [Prompt(f"{tag}w{i}", 1, 2) for i in range(streams)]
    srv.reset()
    res = run_load_sync(OpenAITarget(srv.url, MODEL), prompts, LoadPoint(concurrency=streams, num_prompts=n), warmup=streams)
    truth = srv.truth()
    ok = [r for r in res.records if r.error is None and len(r.chunk_times)]
    t0 = res.t0
    return _per_request(
        [r.send_time + t0 for r in ok],
        [r.chunk_times[0] + t0 for r in ok],
        [r.chunk_times[-1] + t0 for r in ok],
        [r.output_tokens for r in ok],
        [np.asarray(r.chunk_times) for r in ok],
        [f"{tag}{r.index}" for r in ok],
        truth,
    ) | {"failed": n - len(ok)}


async def _aiohttp_run(url: str, streams: int, prompts: list[str], osl: int, warm: list[str]):
    import aiohttp

    clock = time.perf_counter
    out = []

    async def one(session, prompt):
        body = {"model": MODEL, "prompt": prompt, "max_tokens": osl, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
        st = clock()
        stamps, ntok = [], 0
        async with session.post(url + "/v1/completions", json=body) as resp:
            async for line in resp.content:
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                data = line[6:]
                if data == b"[DONE]":
                    break
                obj = json.loads(data)
                ch = obj.get("choices")
                if ch and ch[0].get("text"):
                    stamps.append(clock())
                elif obj.get("usage"):
                    ntok = obj["usage"]["completion_tokens"]
        return prompt, st, stamps, ntok

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=streams), trust_env=False) as session:

        async def drain(queue, sink):
            while queue:
                r = await one(session, queue.pop())
                if sink is not None:
                    sink.append(r)

        wq = list(reversed(warm))
        await asyncio.gather(*(drain(wq, None) for _ in range(streams)))
        q = list(reversed(prompts))
        await asyncio.gather(*(drain(q, out) for _ in range(streams)))
    return out


def run_aiohttp(srv, streams: int, n: int, osl: int, tag: str) -> dict:
    prompts = [f"{tag}{i}" for i in range(n)]
    warm = [f"{tag}w{i}" for i in range(streams)]
    srv.reset()
    loop = new_event_loop()
    try:
        rows = loop.run_until_complete(_aiohttp_run(srv.url, streams, prompts, osl, warm))
    finally:
        loop.close()
    truth = srv.truth()
    ok = [r for r in rows if r[2]]
    return _per_request(
        [r[1] for r in ok],
        [r[2][0] for r in ok],
        [r[2][-1] for r in ok],
        [r[3] for r in ok],
        [np.asarray(r[2]) for r in ok],
        [r[0] for r in ok],
        truth,
    ) | {"failed": n - len(ok)}


def run_vllm(vb, srv, streams: int, n: int, osl: int, tok_dir: Path, seed: int) -> dict:
    srv.reset()
    ref = vb.run(
        srv.url,
        tok_dir,
        concurrency=streams,
        num_prompts=n,
        input_len=16,
        output_len=osl,
        model_name=MODEL,
        seed=seed,
        num_warmups=streams,
        extra=["--save-detailed"],
    )
    sends, firsts, lasts, osls, stamps, keys = [], [], [], [], [], []
    for req, st, ttft, itl, olen, err in zip(ref["sent_requests"], ref["start_times"], ref["ttfts"], ref["itls"], ref["output_lens"], ref["errors"]):
        if err:
            continue
        s = st + ttft + np.concatenate(([0.0], np.cumsum(itl)))
        sends.append(st)
        firsts.append(s[0])
        lasts.append(s[-1])
        osls.append(olen)
        stamps.append(s)
        keys.append(req["prompt"])
    # No split for vllm bench: matching its per-request arrays to the server's log by prompt
    # gave impossible splits here (first token before the server wrote it), so they are not
    # shown; its TTFT/TPOT/ITL come from its own arrays.
    return _per_request(sends, firsts, lasts, osls, stamps, keys, {}) | {"failed": n - len(sends)}


def _fmt(name: str, r: dict) -> str:
    ms = {k: r[k] * 1000 for k in ("ttft", "tpot", "itl", "to server", "server", "to client")}
    cells = []
    for k in ("ttft", "tpot", "itl"):
        v = ms[k]
        cells.append(f"{v.mean():>10.2f}{np.percentile(v, 50):>8.2f}{np.percentile(v, 99):>8.2f}" if v.size else f"{'-':>26}")
    split = "".join(
        f"{ms[k].mean():>9.3f}{np.percentile(ms[k], 99):>9.3f}" if ms[k].size else f"{'-':>18}" for k in ("to server", "server", "to client")
    )
    return f"{name:<17}" + "".join(cells) + " |" + split + (f"  ({r['failed']} failed)" if r["failed"] else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--ttft", type=float, default=40.0, help="server's first-token delay, ms")
    ap.add_argument("--itl", type=float, default=7.0, help="server's inter-token gap, ms")
    ap.add_argument("--osl", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--per-round", action="store_true")
    a = ap.parse_args()
    tok_dir = ROOT / ".cache" / "tiny-llama"
    vllm_python = ROOT / ".venv-vllm" / "bin" / "python"
    clients = ["knee", "aiohttp"]
    note = None
    if a.no_vllm:
        note = "vllm bench serve: skipped (--no-vllm)"
    elif not vllm_python.exists():
        note = "vllm bench serve: skipped, .venv-vllm missing (scripts/setup-vllm-cpu.sh)"
    elif not (tok_dir / "tokenizer.json").exists():
        note = "vllm bench serve: skipped, no tokenizer at .cache/tiny-llama"
    else:
        clients.append("vllm bench serve")
    try:
        import uvloop  # noqa: F401

        uv = True
    except ImportError:
        uv = False
    srv = start_cadence_server(a.ttft / 1000, a.itl / 1000, model=MODEL, use_uvloop=uv)
    vb = None
    if "vllm bench serve" in clients:
        from support.vllm_bench import VllmBenchSession

        vb = VllmBenchSession()
        vb.wait_ready()
    print(
        f"cadence server: first token {a.ttft:g} ms after the request, then 1 / {a.itl:g} ms; {a.osl} tokens; "
        f"{a.streams} streams, {a.requests} requests per run, {a.rounds} rounds; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}"
    )
    head = (
        f"{'client':<17}{'TTFT mean':>10}{'p50':>8}{'p99':>8}{'TPOT mean':>10}{'p50':>8}{'p99':>8}{'ITL mean':>10}{'p50':>8}{'p99':>8} |"
        f"{'to srv':>9}{'p99':>9}{'server':>9}{'p99':>9}{'to cli':>9}{'p99':>9}"
    )
    pooled: dict[str, list[dict]] = {c: [] for c in clients}
    try:
        for rnd in range(a.rounds):
            order = clients if rnd % 2 == 0 else clients[::-1]
            for c in order:
                tag = f"{c.split()[0]}-{rnd}-{time.perf_counter_ns()}-"
                if c == "knee":
                    r = run_knee(srv, a.streams, a.requests, a.osl, tag)
                elif c == "aiohttp":
                    r = run_aiohttp(srv, a.streams, a.requests, a.osl, tag)
                else:
                    r = run_vllm(vb, srv, a.streams, a.requests, a.osl, tok_dir, seed=rnd)
                pooled[c].append(r)
                if a.per_round:
                    if c == order[0]:
                        print(f"round {rnd}")
                    print(_fmt(c, r), flush=True)
    finally:
        if vb is not None:
            vb.close()
        srv.stop()
    print()
    print("all values in ms; TTFT/TPOT over requests, ITL over gaps; right: TTFT split against the server's truth (mean, p99)")
    print(head)
    for c in clients:
        rs = pooled[c]
        merged = {k: np.concatenate([r[k] for r in rs]) for k in ("ttft", "tpot", "itl", "to server", "server", "to client")}
        merged["failed"] = sum(r["failed"] for r in rs)
        print(_fmt(c, merged))
    print("per round, p99 TTFT: " + "; ".join(f"{c} " + " ".join(f"{np.percentile(r['ttft'], 99) * 1000:.2f}" for r in pooled[c]) for c in clients))
    if note:
        print(note)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
