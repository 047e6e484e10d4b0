"""Exports (knee JSON, JSONL, CSV, llm-optimizer's per-run JSONL and aggregated JSON) and
imports (llm-optimizer JSONL/aggregated JSON, ``vllm bench serve`` JSON, AIPerf
``profile_export_aiperf.json``, in :mod:`core.results.io_import` and re-exported here), so
earlier runs sit next to knee's.

llm-optimizer's formats follow ``shared/reference/llm-optimizer-compat.md`` sections 6-8,
without its defects: infinities are null, constraints keep their units, failed runs are
written (with ``status``/``reason``; llm-optimizer drops them), and ``best_configurations``
evaluate every operator with units converted once.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Sequence

from core.errors import BadInput

# Imports live in io_import; callers have always found them here.
from core.results.io_import import ECHO_KEYS, detect_format, import_file, parse_import  # noqa: F401 - re-exported
from core.spec.server_args import config_id, emit_args
from core.spec.slo import LATENCY_METRICS, SLO, parse_constraints
from core.spec.study import PointRow

LLMO_STATS = ("mean", "median", "std", "p95", "p99")
LLMO_METRICS = {"e2e_latency": "e2el", "ttft": "ttft", "tpot": "tpot", "itl": "itl"}


def _num(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


def _clean(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return _num(o)


def dashboard_constraints(slo: SLO) -> list[dict[str, Any]]:
    """llm-optimizer's dashboard form: ``{"op", "value" (ms), "name": "<stat>_<metric>_ms"}``."""
    out = []
    for c in slo.constraints:
        if c.metric in LATENCY_METRICS:
            name = f"{c.stat}_{'e2e_latency' if c.metric == 'e2el' else c.metric}_ms"
        else:
            name = c.metric
        out.append({"op": c.op, "value": c.value, "name": name})
    return out


# ---- export ------------------------------------------------------------------------------------
def llmo_record(p: PointRow, meta: dict[str, Any], slo: SLO) -> dict[str, Any]:
    """One llm-optimizer per-run JSONL record (plus a ``knee`` block llm-optimizer ignores)."""
    s = p.summary
    results: dict[str, Any] = {}
    client = dict(p.client_args)
    for k in ECHO_KEYS:
        if k == "backend":
            results[k] = client.get("backend", "openai" if meta.get("engine") != "sglang" else "sglang")
        elif k == "request_rate":
            rr = client.get("request_rate")
            results[k] = None if rr is None or rr == float("inf") else rr
        else:
            results[k] = client.get(k)
    for k in (
        "duration",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "input_throughput",
        "output_throughput",
        "concurrency",
    ):
        results[k] = _num(s.get(k))
    results["total_output_tokens_retokenized"] = _num(s.get("total_output_tokens_retokenized", s.get("total_output_tokens")))
    for stat in LLMO_STATS:
        for lname, kname in LLMO_METRICS.items():
            results[f"{stat}_{lname}_ms"] = _num(s.get(f"{stat}_{kname}_ms"))
    results["accept_length"] = None
    isl = client.get("random_input_len", meta.get("input_len", 0))
    osl = client.get("random_output_len", meta.get("output_len", 0))
    rec = {
        "config": {"client_args": client, "server_args": dict(p.server_args), "server_cmd_args": emit_args(p.server_args)},
        "results": results,
        "cmd": p.cmd or "",
        "constraints": dashboard_constraints(slo),
        "metadata": {
            "gpu_type": meta.get("gpu_type"),
            "gpu_count": meta.get("gpu_count"),
            "model_tag": meta.get("model"),
            "input_tokens": isl if client.get("dataset_name", "random") != "sharegpt" else -1,
            "output_tokens": osl,
        },
        "knee": {
            "point_id": p.point_id,
            "status": p.status,
            "reason": p.reason,
            "simulated": p.simulated,
            "source": p.source,
            "meets_slo": p.meets_slo,
            "started_at": p.started_at,
            "ended_at": p.ended_at,
            "telemetry": p.telemetry,
            "summary": s,
            "config_id": config_id(p.client_args, p.server_args),
        },
    }
    return _clean(rec)


def best_configurations(points: Sequence[PointRow], slo: SLO) -> dict[str, Any]:
    def pick(key: str, constrained: bool):
        cands = [p for p in points if p.status == "ok" and p.summary.get(key) is not None and not _isnan(p.summary.get(key))]
        if constrained:
            cands = [p for p in cands if slo.holds(p.summary)]
        if not cands:
            return None
        b = max(cands, key=lambda p: p.summary[key])
        return {"throughput": b.summary[key], "config": {"client_args": b.client_args, "server_args": b.server_args}, "cmd": b.cmd or ""}

    return {
        "best_input_throughput": pick("input_throughput", False),
        "best_output_throughput": pick("output_throughput", False),
        "best_input_throughput_constrained": pick("input_throughput", True),
        "best_output_throughput_constrained": pick("output_throughput", True),
    }


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def aggregated(points: Sequence[PointRow], meta: dict[str, Any], slo: SLO) -> dict[str, Any]:
    """llm-optimizer's aggregated JSON (what its ``visualize`` reads)."""
    records = [llmo_record(p, meta, slo) for p in points]
    return _clean(
        {
            "metadata": {
                "gpu_type": meta.get("gpu_type"),
                "gpu_count": meta.get("gpu_count"),
                "model_tag": meta.get("model"),
                "total_tests": len(records),
                "constraints": dashboard_constraints(slo),
                "input_len": meta.get("input_len"),
                "output_len": meta.get("output_len"),
            },
            "best_configurations": best_configurations(points, slo),
            "test_results": records,
        }
    )


def knee_json(study: dict[str, Any], trials: list, points: Sequence[PointRow], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return _clean(
        {
            "format": "knee-study/1",
            "study": {k: v for k, v in study.items() if k not in ("runner_pid", "runner_host")},
            "trials": [t.model_dump(mode="json") for t in trials],
            "points": [p.model_dump(mode="json") for p in points],
            **(extra or {}),
        }
    )


CSV_KEYS = (
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "request_goodput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "p90_e2el_ms",
    "p99_e2el_ms",
)


def to_csv(points: Sequence[PointRow]) -> str:
    sargs = sorted({k for p in points for k in p.server_args})
    cargs = sorted({k for p in points for k in p.client_args})
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        ["point_id", "trial", "status", "reason", "meets_slo", "simulated", "source"]
        + [f"server.{k}" for k in sargs]
        + [f"client.{k}" for k in cargs]
        + list(CSV_KEYS)
    )
    for p in points:
        row = [p.point_id, p.trial_id, p.status, (p.reason or "").splitlines()[0] if p.reason else "", p.meets_slo, p.simulated, p.source]
        row += [_csv(p.server_args.get(k)) for k in sargs] + [_csv(p.client_args.get(k)) for k in cargs]
        row += [_csv(p.summary.get(k)) for k in CSV_KEYS]
        w.writerow(row)
    return buf.getvalue()


def _csv(v: Any) -> Any:
    if v is None or _isnan(v):
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return v


def export(store, study: str, fmt: str, path: str | Path | None = None) -> str:
    """Render ``study`` in ``fmt`` (json, jsonl, csv, llm-optimizer) and write it to ``path``
    when given. Returns the text."""
    s = store.study(study)
    if s is None:
        raise BadInput(f"no study named {study!r}")
    points = store.points(study)
    meta = study_meta(store, study)
    slo = parse_constraints(meta.get("constraints"))
    if fmt == "json":
        text = json.dumps(knee_json(s, store.trials(study), points), indent=2, default=str)
    elif fmt == "jsonl":
        text = "".join(json.dumps(llmo_record(p, meta, slo), default=str) + "\n" for p in points)
    elif fmt == "csv":
        text = to_csv(points)
    elif fmt in ("llm-optimizer", "aggregated"):
        text = json.dumps(aggregated(points, meta, slo), indent=2, default=str)
    else:
        raise BadInput(f"unknown export format {fmt!r}", "use json, jsonl, csv or llm-optimizer")
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    return text


def study_meta(store, study: str) -> dict[str, Any]:
    s = store.study(study) or {}
    info = s.get("info") or {}
    meta = {
        "model": s.get("model"),
        "gpu_type": info.get("gpu_type"),
        "gpu_count": info.get("gpu_count"),
        "engine": info.get("engine"),
        "constraints": info.get("constraints", ""),
    }
    if s.get("spec"):
        from core.spec.study import SweepSpec

        spec = SweepSpec.model_validate_json(s["spec"])
        meta.update(constraints=spec.constraints, input_len=spec.input_len, output_len=spec.output_len, engine=spec.engine.kind)
    return meta


# ---- import ------------------------------------------------------------------------------------
