"""core.load — knee's load generator: datasets, arrival schedules, the streaming client
(OpenAI completions/chat over SSE, SageMaker response streaming) and metrics.

Programmatic use (what ``knee bench`` and the sweep runner call)::

    from core.load import OpenAITarget, SageMakerTarget, run_load, run_load_sync, summarize
    from core.load.datasets import load_tokenizer, make_prompts, random_prompts
    from core.spec import LoadPoint

    tok = load_tokenizer("Qwen/Qwen3-4B")                 # exact, or the stated word fallback
    prompts = make_prompts(workload, tok)                 # list[Prompt]
    target = OpenAITarget(url, model, api="completions", api_key=key)   # transport: raw (default)
    result = await run_load(target, prompts, LoadPoint(concurrency=16, num_prompts=200),
                            warmup=4, on_progress=cb, slo=slo, tokenizer=tok)
    # or run_load_sync(...) on a fresh uvloop loop in the calling thread
    result.records     # list[RequestRecord] (warm-up excluded), times relative to result.t0
    result.summary     # summarize(...) — vllm bench serve keys, see core.load.metrics
    result.health      # ClientHealth: loop lag, send lag, CPU; .warning if the client limited it
    result.to_json()   # vllm bench serve-style result JSON (+ per-request arrays)

    summarize(records, duration_s, slo=None, percentiles=(50, 90, 95, 99)) -> dict[str, float]
        pure and numpy-fast; the simulator calls it on virtual-time records.

    await preflight(target)   # core.load.openai: one request; BadInput for unreachable URL,
                              # 401, unknown model, no streaming, malformed SSE

``on_progress(Progress)`` is called every 0.25 s on the load's loop with running,
completed, failed, total, elapsed and output tokens/s so far; keep it cheap.

Modules: ``metrics`` (definitions per shared/reference/metrics.md), ``datasets`` (random
with exact lengths, ShareGPT, shared prefix, shipped corpus), ``schedule`` (constant,
Poisson, gamma), ``runner`` (closed/open loop, cap, warm-up, count/duration stops, client
self-monitoring), ``openai`` (target + SSE parser + preflight), ``sagemaker`` (vLLM and LMI
container formats), ``transport`` and ``rawhttp`` (the HTTP layer, chosen by measurement in
bench/client_capacity.py).
"""

from core.load.metrics import summarize
from core.load.openai import OpenAITarget, preflight
from core.load.runner import ClientHealth, LoadResult, Progress, run_load, run_load_sync
from core.load.sagemaker import SageMakerTarget

__all__ = [
    "summarize",
    "OpenAITarget",
    "SageMakerTarget",
    "preflight",
    "run_load",
    "run_load_sync",
    "LoadResult",
    "ClientHealth",
    "Progress",
]
