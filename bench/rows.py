"""Reading measurement rows: the workload rules both accuracy benches share.

``bench/accuracy.py`` (the analytic estimator) and ``bench/sim_accuracy.py`` (the
simulator) turn a row of ``shared/calibration/measurements.jsonl`` into the same server,
workload and load point through this module, so the two can only differ in the predictor.
Every rule applies to every row the same way; nothing is keyed on a row id:

- rows that cannot be predicted are skipped with the reason, and the bench goes on: a mode
  it does not know, or a load mode without its load (``online-concurrency`` with a null
  concurrency, ``online-rate`` with a null request rate) (:func:`unpredictable`).
- model: ``model`` when knee bundles it (an FP8 checkpoint's alias carries its block
  scaling), else ``architecture_of`` when present, else ``model``; rows whose architecture has no
  bundled config are skipped (:func:`resolve`). Precision from the row, KV dtype from the
  row (null -> ``auto``).
- topology: TP from the row; data-parallel replicas from ``replicas``, else
  ``num_gpus // tp`` (:func:`topology`).
- server knobs the notes state (``max_num_batched_tokens``, ``max_num_seqs``,
  ``max_model_len``, ``gpu_memory_utilization``; ``num_scheduler_steps`` as an extra
  argument) describe the measured server and are applied (:func:`knobs`,
  :func:`extra_args`); a KV cache the server logged sets the utilization that leaves it
  (:func:`stated_kv_bytes`, :func:`utilization_leaving`).
- lengths: the row's means; ShareGPT rows with none use the ShareGPT means with a Llama-3
  tokenizer (231 in / 195 out, from KubeAI's 1000-prompt run). Spreads where the source's
  client documents them or the source states them (:func:`lengths`); ShareGPT answers at
  the model's EOS where the client let it stop (:func:`bench.row_workload.answers_to_eos`).
- inference-perf's shared_prefix workloads: a pool of 100 prompts cycled, which the prefix
  cache serves whole while it holds them (:func:`prompt_pool`, :func:`pool_resident`); the
  prompt a one-prompt vLLM/SGLang benchmark sent as its test run (:func:`first_prompt_cached`)
  and the client timeout (:func:`client_timeout`).
- output tok/s is the server's count (``usage.completion_tokens``, shared/reference/metrics.md
  section 5). Where a client re-tokenized the streamed text instead and the run set
  ``ignore_eos=true`` (inference-perf), the server generated exactly the configured output
  length, so the measured figure is req/s x that length (:func:`measured`).
- prompt counts from the notes (:func:`prompt_count`); statistic ``median``/``p50`` rows
  are compared with medians, the rest with means (:func:`stat`).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path


# Re-exported: the benches read a row's engine release and its workload through this module.
from bench.row_versions import caches_prefixes, engine_of, engine_version  # noqa: F401
from bench.row_workload import (  # noqa: F401
    INFERENCE_PERF_PROMPTS,
    assumed_lengths,
    assumed_lengths_marker,
    client_timeout,
    first_prompt_cached,
    lengths,
    mean_lengths,
    pool_resident,
    prompt_count,
    prompts_sent,
    stopped_early,
    prompt_pool,
    system_prompt,
    workload,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "calibration" / "measurements.jsonl"
if not DEFAULT.exists():
    DEFAULT = Path("/work/shared/calibration/measurements.jsonl")

METRICS = ("ttft_ms", "itl_ms", "e2e_s", "req_per_s", "output_tok_per_s")
LABELS = {"ttft_ms": "TTFT", "itl_ms": "ITL", "e2e_s": "E2E", "req_per_s": "req/s", "output_tok_per_s": "out tok/s"}

_KNOBS = {
    "max_num_batched_tokens": re.compile(r"max[_-]num[_-]batched[_-]tokens?[= ](\d+)"),
    "max_num_seqs": re.compile(r"max[_-]num[_-]seqs[= ](\d+)"),
    "max_model_len": re.compile(r"max[_-]model[_-]len[= ](\d+)"),
    "gpu_memory_utilization": re.compile(r"gpu[_-]memory[_-]utilization[= ]([0-9.]+)"),
}
_RETOKENIZED = re.compile(r"re-?tokenized mean output = [0-9.]+")
_SCHEDULER_STEPS = re.compile(r"num[_-]scheduler[_-]steps[= ](\d+)")
# vLLM's startup log line "Available KV cache memory: 8.22 GiB" (per GPU), as the notes quote it.
_KV_MEMORY = re.compile(r"available KV cache memory:? ([0-9.]+) GiB", re.I)


def load(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def load_all(paths) -> list[dict]:
    """The rows of several JSONL files, in order (``measurements.jsonl`` and
    ``bench/data/published.jsonl`` together)."""
    out: list[dict] = []
    for p in paths:
        out.extend(load(p))
    return out


def clean(o):
    """``o`` with NaN and infinities as None, so ``json.dumps(..., allow_nan=False)`` writes
    standard JSON (a figure a predictor could not give is null, not NaN)."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [clean(v) for v in o]
    return o


def resolve(row: dict):
    """(reference, HF config dict, ModelArch) for the row; config and arch are None when the
    architecture has no bundled config (the row is then skipped, not guessed)."""
    from core.catalog.bundled import bundled_config
    from core.catalog.models import arch_from_config

    # The checkpoint itself when knee knows it (an FP8 alias carries its block scaling, as a
    # user's ``knee estimate`` of that name would), else the architecture the row names.
    ref, cfg = row["model"], bundled_config(row["model"])
    if cfg is None and row.get("architecture_of"):
        ref = row["architecture_of"]
        cfg = bundled_config(ref)
    if cfg is None:
        return ref, None, None
    return ref, cfg, arch_from_config(dict(cfg), name=ref, precision=row.get("precision"))


# The load each mode is run at: the workload field it needs (None: none).
MODES = {"online-concurrency": "concurrency", "online-rate": "request_rate", "offline-max-throughput": None, "single-request": None}


def unpredictable(row: dict) -> str | None:
    """Why the row's load cannot be reproduced (an unknown mode, or a mode without its
    load: a null ``concurrency`` for ``online-concurrency``, a null ``request_rate`` for
    ``online-rate``), or None when it can."""
    w = row.get("workload") or {}
    mode = w.get("mode")
    if mode not in MODES:
        return f"unknown mode {mode!r}"
    field = MODES[mode]
    if field is None:
        return None
    v = w.get(field)
    if v is None:
        return f"{mode} row without a {field} (null)"
    try:
        ok = math.isfinite(float(v)) and float(v) > 0
    except (TypeError, ValueError):
        ok = False
    return None if ok else f"{mode} row whose {field} {v!r} is not a positive number"


def unusable(row: dict) -> str | None:
    """Why the row's server cannot be built, or None: no metrics, a GPU the catalog does not
    know, a topology or a length that is not a positive number."""
    from core.errors import KneeError

    if not isinstance(row.get("metrics"), dict):
        return "no metrics object"
    try:
        gpu_of(row)
    except KneeError as e:
        return str(e)
    except KeyError:
        return "no gpu field"
    for field in ("tp", "replicas", "num_gpus"):
        v = row.get(field)
        if v is not None and not (isinstance(v, (int, float)) and v >= 1 and float(v).is_integer()):
            return f"{field} {v!r} is not a positive integer"
    for field in ("input_len", "output_len"):
        v = row["workload"].get(field)
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            return f"workload {field} {v!r} is not a positive number"
    return None


def with_config(rows: list[dict], skipped: list[dict]):
    """Each row that can be predicted, as (row, HF config, ModelArch): its load is complete
    (:func:`unpredictable`), its server can be built (:func:`unusable`) and its architecture
    has a bundled config at a precision knee knows. The others are appended to ``skipped``
    as {"id", "reason"}, in order, as they are met: a harness never stops on a row."""
    from core.errors import KneeError

    for row in rows:
        why = unpredictable(row) or unusable(row)
        if why is not None:
            skipped.append({"id": row.get("id"), "reason": why})
            continue
        try:
            ref, cfg, arch = resolve(row)
        except KneeError as e:
            skipped.append({"id": row.get("id"), "reason": f"{row.get('architecture_of') or row.get('model')}: {e}"})
            continue
        if cfg is None:
            skipped.append({"id": row.get("id"), "reason": f"no bundled config for {ref}"})
            continue
        isl, osl = mean_lengths(row)
        if isl + osl > arch.max_position_embeddings:
            # The server refuses such a request (as knee estimate does): no run measured it.
            skipped.append({"id": row.get("id"), "reason": f"{isl:.0f} + {osl:.0f} tokens exceed {ref}'s context of {arch.max_position_embeddings}"})
            continue
        yield row, cfg, arch


_INSTANCE = re.compile(r"\b(?:ml\.)?((?:g4dn|g5|g6e?|p4de?|p5e?n?|p6-b200)\.\d*x?large)\b")


def instance_of(row: dict) -> str | None:
    """The SageMaker/EC2 instance type the row ran on: its ``instance`` field, else the first
    instance type named in its source or notes (``ml.g6.12xlarge``), else None."""
    if row.get("instance"):
        return str(row["instance"])
    m = _INSTANCE.search((row.get("source") or "") + " " + (row.get("notes") or ""))
    return f"ml.{m.group(1)}" if m else None


def gpu_of(row: dict):
    """The row's GPU spec; on a known instance without GPU peer-to-peer (multi-GPU g5/g6/g6e)
    the spec says so, as ``resolve_hardware(instance=...)`` does for a user."""
    from core.catalog import get_gpu, instance_gpu, instances

    gpu = get_gpu(row["gpu"])
    inst = instances().get(instance_of(row) or "")
    if inst is not None and get_gpu(inst.gpu).name == gpu.name:
        gpu = instance_gpu(inst)
    # A row whose server logs show no GPU peer-to-peer says so (``gpu_p2p: false``).
    return gpu.model_copy(update={"p2p": False}) if row.get("gpu_p2p") is False else gpu


def measured(row: dict) -> dict:
    """The row's measured figures, one per metric of :data:`METRICS` (None where absent).

    Output tok/s counts what the server generated. inference-perf reports the count of a
    client tokenizer run over the streamed text; under ``ignore_eos=true`` the server
    generated the configured length, so that length times the measured req/s is the server's
    figure. The two differ by the text, not by the engine: Llama-2-7B's ignore_eos output
    re-tokenizes to 76-85% of what was generated, the 34B/70B/Mixtral runs' to 98-101%
    (the notes of the 24 inference-sim rows)."""
    out = {k: row["metrics"].get(k) for k in METRICS}
    generated = server_output_len(row)
    if generated and out["req_per_s"]:
        out["output_tok_per_s"] = out["req_per_s"] * generated
    return out


def server_output_len(row: dict) -> float | None:
    """The output length the server generated per request where the row's token count is a
    client's re-tokenization of an ``ignore_eos`` run (its configured length); else None."""
    notes = row.get("notes") or ""
    if "ignore_eos=true" in notes and _RETOKENIZED.search(notes):
        return float(row["workload"]["output_len"])
    return None


def topology(row: dict) -> tuple[int, int]:
    """(TP, data-parallel replicas)."""
    tp = int(row.get("tp") or 1)
    dp = int(row.get("replicas") or max(1, int(row.get("num_gpus") or 1) // tp))
    return tp, dp


def knobs(notes: str) -> dict:
    """Server knobs the notes state, as ServerConfig fields."""
    out = {}
    for k, rx in _KNOBS.items():
        m = rx.search(notes or "")
        if m:
            out[k] = float(m.group(1)) if k == "gpu_memory_utilization" else int(m.group(1))
    return out


_OFFLINE_HARNESS = re.compile(r"benchmark_throughput|benchmark_latency|bench (?:throughput|latency)|\bLLM\(|LLM class", re.I)


def engine_defaults(row: dict, gpu) -> dict:
    """The batch limits vLLM chose itself for a row run through the offline ``LLM`` class
    (``benchmark_throughput``/``benchmark_latency``: twice ``vllm serve``'s token budget,
    ``core.spec.engine_defaults``), as ServerConfig fields; empty otherwise (the estimator
    and the simulator apply ``vllm serve``'s defaults for the GPU themselves)."""
    from core.spec.engine_defaults import vllm_batch_defaults

    if engine_of(row).lower() != "vllm" or not _OFFLINE_HARNESS.search(row.get("notes", "") or ""):
        return {}
    d = vllm_batch_defaults(engine_version(row), gpu.name, gpu.usable_bytes / 2**30, offline=True)
    return {} if d is None else {"max_num_batched_tokens": d[0], "max_num_seqs": d[1]}


def stated_kv_bytes(notes: str) -> float | None:
    """The KV cache per GPU the measured server logged ("Available KV cache memory: 6.77 GiB",
    quoted in the notes), for a row whose notes state that but not the utilization itself;
    else None. The log is the server's own account of its cache, closer than any
    reconstruction of flags the source does not show: the dennislee22 runs on 2x A100 left
    6.77 GiB per GPU for Qwen2-72B (44k tokens), where vLLM's default 0.9 leaves about 2 GiB
    (13k)."""
    m = _KV_MEMORY.search(notes or "")
    if m is None or "gpu_memory_utilization" in knobs(notes):
        return None
    return float(m.group(1)) * 2**30


def utilization_leaving(kv_bytes: float, plan) -> float:
    """The ``gpu_memory_utilization`` at which knee's memory plan leaves ``kv_bytes`` of KV
    cache per GPU. ``plan``: the row's :class:`core.estimate.memory.MemoryPlan` at any
    utilization (weights, activations and reserves do not depend on it)."""
    used = kv_bytes + plan.weight_bytes + plan.activation_bytes + plan.runtime_bytes
    return min(1.0, used / plan.visible_bytes)


def extra_args(notes: str) -> dict:
    """Engine arguments knee carries in ``ServerConfig.extra_args`` (vLLM 0.6's multi-step
    scheduling)."""
    m = _SCHEDULER_STEPS.search(notes or "")
    return {"num_scheduler_steps": int(m.group(1))} if m else {}


def stat(row: dict) -> str:
    return "median" if row.get("stat") in ("median", "p50") else "mean"


def ape(pred: float | None, meas: float | None) -> float | None:
    """Absolute percentage error (a fraction); None where either side is missing."""
    if pred is None or meas is None or meas == 0 or not math.isfinite(pred):
        return None
    return abs(pred - meas) / abs(meas)


def median_apes(results: list[dict], key: str, only=None) -> dict[str, float | None]:
    """Per metric, the median of ``result[key][metric]`` (an APE) over the results that have
    one (and pass ``only(result, metric)`` when given), and beside it ``metric + "_n"``, how
    many there were."""
    out: dict[str, float | None] = {}
    for m in METRICS:
        xs = [r[key][m] for r in results if r[key][m] is not None and (only is None or only(r, m))]
        out[m] = statistics.median(xs) if xs else None
        out[m + "_n"] = len(xs)
    return out
