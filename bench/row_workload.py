"""The workload a measurement row's client sent: prompt and output length distributions,
prompt pools a client cycled, the prompt counts and timeouts of its run (the rules
:mod:`bench.rows` describes; both accuracy benches build their workload here)."""

from __future__ import annotations

import re

from core.spec.lengths import SHAREGPT_INPUT_MEAN as SHAREGPT_IN
from core.spec.lengths import SHAREGPT_OUTPUT_MEAN as SHAREGPT_OUT
from core.spec.lengths import SHAREGPT_SIGMA, lognormal, sharegpt_input, sharegpt_output

from bench.row_versions import caches_prefixes

_ROUND_ROBIN = re.compile(r"\b(\d+) prompt templates? [^.;]{0,60}round-robin")
# Length spreads a source states for random prompts (:func:`lengths`).
_STATED_SPREAD = re.compile(r"(?:\+-|±) ?(\d+(?:\.\d+)?)% variance")
_UP_TO_MAXIMUM = re.compile(r"lengths drawn uniformly up to the configured")
_COUNTS = [
    re.compile(r"successes=(\d+), failures=(\d+)"),
    re.compile(r"(\d[\d,]*) (?:ShareGPT )?prompts"),
    re.compile(r"completed_requests=(\d+)"),
]


def prompts_sent(row: dict) -> int | None:
    """Requests the row's run sent: its workload's ``num_prompts`` where the row gives it, else
    what its notes say (:func:`prompt_count`). The field first: notes also count other things
    ("a warm-up of 10 prompts discarded" in a 300-prompt run)."""
    n = (row.get("workload") or {}).get("num_prompts")
    return int(n) if isinstance(n, (int, float)) and n >= 1 else prompt_count(row.get("notes") or "")


def prompt_count(notes: str) -> int | None:
    """Requests the run sent, from its notes: successes + failures, "N prompts" or "completed_requests=N"."""
    for rx in _COUNTS:
        m = rx.search(notes or "")
        if m:
            return sum(int(g.replace(",", "")) for g in m.groups())
    return None


def mean_lengths(row: dict) -> tuple[float, float]:
    """Mean prompt and output tokens (the ShareGPT means where the source gives none; the
    generated mean where the run stopped answers early, :func:`stopped_early`)."""
    w = row["workload"]
    out = stopped_early(row) or float(w.get("output_len") or SHAREGPT_OUT)
    return float(w.get("input_len") or SHAREGPT_IN), out


def stopped_early(row: dict) -> float | None:
    """The mean answer a random-dataset run generated, where its own figures show that the
    model stopped before the configured length: output tok/s over req/s well below it
    (``vllm bench serve`` random prompts without ``--ignore-eos``: the configured length is
    only max_tokens, and an answer ends at the model's EOS). mrah4090's runs configured 128
    tokens and generated 100 on average at every concurrency. None where the run generated
    what was configured, or where req/s is too coarse to tell (0.02 to two decimals)."""
    w, m = row["workload"], row["metrics"]
    cap, rps, tps = w.get("output_len"), m.get("req_per_s"), m.get("output_tok_per_s")
    if w.get("dataset") != "random" or not (cap and rps and tps) or rps < 0.2:
        return None
    generated = tps / rps
    return generated if generated < 0.9 * cap else None


# A source that says its client ignored EOS (iogbench writes "no --ignore-eos": not that).
_IGNORES_EOS = re.compile(r"(?<!no )(?<!without )--ignore[-_]eos")
_VLLM_SERVING_BENCH = re.compile(r"benchmark_serving|bench serve")
_EOS_IGNORING_BENCH = re.compile(r"benchmark_throughput|bench throughput|sglang\.bench_serving|bench_serving\.py")


def answers_to_eos(row: dict) -> bool:
    """Whether the row's ShareGPT answers ended at the model's EOS (each capped at its
    conversation's reply length): vLLM's serving benchmark sends ``ignore_eos`` only when
    asked (``--ignore-eos``), while SGLang's ``bench_serving`` (unless
    ``--disable-ignore-eos``) and vLLM's throughput benchmark ignore EOS, so their answers are
    the replies' own lengths. A source that names no client keeps the replies' lengths,
    knee's own client's default."""
    src = (row.get("source") or "") + " " + (row.get("notes") or "")
    if "disable-ignore-eos" in src or "disable_ignore_eos" in src:
        return True
    if _IGNORES_EOS.search(src) or _EOS_IGNORING_BENCH.search(src):
        return False
    return _VLLM_SERVING_BENCH.search(src) is not None


def assumed_lengths(row: dict) -> list[str]:
    """Which of the row's mean lengths its source does not publish ("input", "output"): the
    benches assume ShareGPT's there, so its error measures the guess as much as knee."""
    w = row["workload"]
    return [name for name in ("input", "output") if not w.get(f"{name}_len")]


def assumed_lengths_marker(assumed: list[str]) -> str:
    """The report's mark on a row whose lengths were assumed (empty when none were)."""
    return f"  [{' and '.join(assumed)} length not published: ShareGPT's mean assumed]" if assumed else ""


def lengths(row: dict, mean: float, which: str, other: float | None = None):
    """The length distribution the row's client drew from, where the source documents it.

    - llmperf (``token_benchmark_ray.py``): normal with its documented spreads, stddev 150
      input and 10 output tokens (the rows' "~550 in / 150 out" is its documented example);
    - ShareGPT conversations: heavy-tailed, a log-normal (sigma 1) about the mean; single-turn
      ShareGPT benchmarks (``vllm``/``sglang`` ``bench serve``) drop prompts over 1024 tokens
      and requests over 2048 in all, so the tail is cut there (``other`` is the mean length
      on the other side). The tail decides how long a burst takes to drain: the longest
      requests decode nearly alone at the end of it. Answers that ended at the model's EOS
      (:func:`answers_to_eos`: vLLM's serving benchmark without ``--ignore-eos``) take the
      measured shape of such answers instead, whose longest is half the replies' own
      (``core/spec/lengths.py``);
    - random lengths with a stated spread: uniform about the mean, +-N% where the source
      says so ("~20k input tokens (+-15% variance)": ``vllm bench serve``'s range ratio
      0.15), from 0 to twice the mean where SGLang's ``bench_serving`` drew them up to the
      configured maximum (its default range ratio 0). Without the spread, equal requests of
      a closed loop stay in lockstep in the simulator: each wave's prompts arrive together
      and queue behind one another's prefill, where the real client's lengths scatter the
      arrivals (the vllmfp8kv rows: 20k-token prompts at c=8, median TTFT 0.76 s measured,
      2.0 s simulated with fixed lengths);
    - answers a random-dataset run ended at EOS (:func:`stopped_early`): uniform about the
      generated mean up to the configured length, never in lockstep;
    - otherwise the mean, fixed.
    """
    from core.spec.workload import LengthDist

    src = (row.get("source") or "") + " " + (row.get("notes") or "")
    if which == "output" and stopped_early(row):
        # Answers that end at EOS spread below the configured max_tokens: uniform up to it.
        cap = float(row["workload"]["output_len"])
        return LengthDist(kind="uniform", mean=mean, range_ratio=min(1.0, cap / mean - 1.0))
    if "llmperf" in src:
        return LengthDist(kind="normal", mean=mean, std=150.0 if which == "input" else 10.0)
    if row["workload"].get("dataset") == "sharegpt":
        return sharegpt_input(mean) if which == "input" else sharegpt_output(mean, other, answers_to_eos(row))
    if "ShareGPT" in src:  # multi-turn or unfiltered: the shape without the single-turn cut
        return lognormal(mean, SHAREGPT_SIGMA)
    m = _STATED_SPREAD.search(src)
    if m:
        return LengthDist(kind="uniform", mean=mean, range_ratio=min(1.0, float(m.group(1)) / 100.0))
    if _UP_TO_MAXIMUM.search(src):
        return LengthDist(kind="uniform", mean=mean, range_ratio=1.0)
    return LengthDist.of(mean)


# inference-perf's shared_prefix generator draws ``num_groups x num_prompts_per_group``
# prompts (a system prompt per group, a question per prompt) once and then cycles through
# them (``SharedPrefixDataGenerator.get_data``: ``i = (i + 1) % len(prompts)``). The infsim
# runs' results/config.yaml in inference-sim/training show 10 x 10: 100 prompts for
# 4800-24000 requests. (Their profile.yaml asks for 9 x 5 with multi-turn chat under field
# names the installed inference-perf did not read; the measured mean prompt, 575 tokens =
# 100 + 447 + tokenizer drift, confirms single turns.)
INFERENCE_PERF_PROMPTS = 100


def prompt_pool(row: dict) -> int:
    """How many distinct prompts the row's client cycled through (0: every prompt new):
    inference-perf's pool, or the prompts a client sends round-robin where the notes say so
    (the SageMaker benchmark suite's 3 per use case) to an engine that caches prefixes."""
    notes = row.get("notes") or ""
    if "inference-perf" in notes:
        return INFERENCE_PERF_PROMPTS
    m = _ROUND_ROBIN.search(notes)
    return int(m.group(1)) if m and caches_prefixes(row) else 0


def system_prompt(row: dict) -> int:
    """inference-perf's shared system prompt: 150 tokens for "roleplay", 100 for the others,
    as the runs' config.yaml states."""
    if not prompt_pool(row):
        return 0
    return 150 if "roleplay" in (row.get("source") or "") else 100


def pool_resident(pool: int, running: float, input_len: float, output_len: float, kv_tokens: float) -> bool:
    """Whether a prompt of a cycled pool is still in vLLM's prefix cache when it comes round
    again: its previous request is still running (the pool is no larger than the running
    batch), or it finished recently enough that its blocks are among those the running
    sequences have not yet taken back from the free queue (vLLM evicts free blocks least
    recently used first). A pool that cycles through more than the cache holds misses every
    time (LRU on a cyclic scan)."""
    if pool <= running:
        return True
    free = kv_tokens - running * (input_len + output_len / 2.0)
    return (pool - running) * (input_len + output_len) <= free


def first_prompt_cached(row: dict) -> bool:
    """A one-prompt run of vLLM's benchmark client (``benchmark_serving.py``, ``vllm bench
    serve``) or SGLang's ``bench_serving``: both send the run's first prompt once as a test
    ("Starting initial single prompt test run...") before they measure, and with prefix
    caching on by default (vLLM's V1 engine, 0.8 on; SGLang's radix cache) the measured
    request, that same prompt, finds it cached. (In a longer run only its first request does.)"""
    notes = row.get("notes") or ""
    if prompts_sent(row) != 1 or not any(c in notes for c in ("benchmark_serving", "vllm bench serve", "bench_serving")):
        return False
    return caches_prefixes(row)


def client_timeout(row: dict) -> float | None:
    """inference-perf rows: 300 s, the client timeout their figures imply (successes /
    req_per_s = 1500 s = the 1200 s stage plus 300 s for the last requests); the other
    clients' timeouts (llmperf 600 s) are never reached in these rows."""
    if "inference-perf" in (row.get("notes") or ""):
        return 300.0
    return None


def workload(row: dict, pool_cached: bool = True):
    """The row's :class:`Workload`. A shared-prefix prompt is the prefix plus a drawn suffix
    (the ``shared-prefix`` dataset's convention, in the load generator and the simulator).
    For a client that cycles a prompt pool (:func:`prompt_pool`), ``pool_cached`` says whether
    the prefix cache still holds a prompt when it comes round (:func:`pool_resident`): then
    the whole prompt but its last token is the cached prefix, else the system prompt alone.
    So it is for a one-prompt run whose client sent the prompt once before measuring
    (:func:`first_prompt_cached`)."""
    from core.spec.workload import Workload

    isl, osl = mean_lengths(row)
    whole = (prompt_pool(row) and pool_cached) or first_prompt_cached(row)
    pre = max(0, int(isl) - 1) if whole else system_prompt(row)
    return Workload(
        input=lengths(row, max(1.0, isl - pre), "input", osl),
        output=lengths(row, osl, "output", isl),
        dataset="shared-prefix" if pre else "random",
        shared_prefix_len=pre,
    )
