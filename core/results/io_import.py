"""Imports of earlier runs into a study: llm-optimizer JSONL/aggregated JSON,
``vllm bench serve`` JSON and AIPerf ``profile_export_aiperf.json``
(:func:`detect_format`, :func:`parse_import`, :func:`import_file`). Exports are
:mod:`core.results.io`'s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.spec.slo import parse_constraints
from core.spec.study import PointRow, canonical_json, make_point_id

# Run-level keys llm-optimizer echoes beside the results: not metrics, so an import skips
# them and an export writes them back (core.results.io.llmo_record).
ECHO_KEYS = (
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "sharegpt_output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
)


def _from_llmo_results(r: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in r.items():
        if k in ECHO_KEYS or k in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
            continue
        out[k.replace("_e2e_latency_ms", "_e2el_ms")] = float("nan") if v is None else v
    if "total_token_throughput" not in out and out.get("input_throughput") is not None and out.get("output_throughput") is not None:
        out["total_token_throughput"] = out["input_throughput"] + out["output_throughput"]
    return out


def _imported_point(study: str, sargs: dict[str, Any], cargs: dict[str, Any], **fields: Any) -> PointRow:
    """An imported point: one trial (0) per file, keyed by its server arguments."""
    return PointRow(
        study=study,
        point_id=make_point_id(sargs, cargs),
        trial_id=0,
        trial_key=canonical_json(sargs),
        server_args=sargs,
        client_args=cargs,
        **fields,
    )


def _llmo_point(rec: dict[str, Any], study: str, source: str) -> tuple[PointRow, dict[str, Any]]:
    if not isinstance(rec, dict) or "config" not in rec or "results" not in rec:
        raise BadInput("not an llm-optimizer record (needs 'config' and 'results')")
    cfg = rec["config"] or {}
    sargs = dict(cfg.get("server_args") or {})
    cargs = dict(cfg.get("client_args") or {})
    for k in ECHO_KEYS:
        v = (rec.get("results") or {}).get(k)
        if k not in cargs and v is not None and k != "backend":
            cargs[k] = v
    knee = rec.get("knee") or {}
    status = knee.get("status", "ok")
    summary = knee.get("summary") or _from_llmo_results(rec.get("results") or {})
    summary = {k: (float("nan") if v is None else v) for k, v in summary.items()}
    p = _imported_point(
        study,
        sargs,
        cargs,
        status=status if status in ("ok", "failed") else "ok",
        reason=knee.get("reason"),
        summary=summary,
        telemetry=knee.get("telemetry") or {},
        simulated=bool(knee.get("simulated", False)),
        source=source if not knee else (knee.get("source") or "knee"),
        cmd=rec.get("cmd"),
        meets_slo=knee.get("meets_slo"),
        started_at=knee.get("started_at"),
        ended_at=knee.get("ended_at"),
    )
    return p, rec.get("metadata") or {}


_AIPERF_STATS = {"avg": "mean", "p50": "median", "std": "std", "min": "min", "max": "max"}
_AIPERF_METRICS = {"time_to_first_token": "ttft", "request_latency": "e2el", "inter_token_latency": "tpot", "inter_chunk_latency": "itl"}


def _aiperf_summary(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def val(name: str) -> Any:
        m = d.get(name)
        return m.get("avg") if isinstance(m, dict) else None

    for a, k in _AIPERF_METRICS.items():
        m = d.get(a)
        if not isinstance(m, dict):
            continue
        scale = 1000.0 if str(m.get("unit", "ms")).lower() in ("s", "sec") else 1.0
        for stat, v in m.items():
            if stat == "unit" or v is None:
                continue
            name = _AIPERF_STATS.get(stat, stat if stat.startswith("p") else None)
            if name is None:
                continue
            out[f"{name}_{k}_ms"] = float(v) * scale
            if stat == "p50":
                out[f"p50_{k}_ms"] = float(v) * scale
    pairs = {
        "request_throughput": "request_throughput",
        "output_token_throughput": "output_throughput",
        "benchmark_duration": "duration",
        "request_count": "completed",
        "total_isl": "total_input_tokens",
        "total_osl": "total_output_tokens",
        "error_request_count": "failed",
        "goodput": "request_goodput",
    }
    for a, k in pairs.items():
        v = val(a)
        if v is not None:
            out[k] = float(v)
    if "total_input_tokens" in out and out.get("duration"):
        out["input_throughput"] = out["total_input_tokens"] / out["duration"]
        out["total_token_throughput"] = out["input_throughput"] + out.get("output_throughput", 0.0)
    out.setdefault("failed", 0.0)
    return out


def detect_format(path: Path) -> tuple[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BadInput(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read {path}: {e}") from None
    stripped = text.strip()
    if not stripped:
        raise BadInput(f"{path} is empty")
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError:
        lines = []
        for i, ln in enumerate(stripped.splitlines(), 1):
            if not ln.strip():
                continue
            try:
                lines.append(json.loads(ln))
            except json.JSONDecodeError as e:
                raise BadInput(
                    f"{path} line {i} is not JSON ({e.msg})",
                    "import takes llm-optimizer JSON/JSONL, vllm bench serve JSON or AIPerf profile_export_aiperf.json",
                ) from None
        if lines and all(isinstance(r, dict) and "config" in r and "results" in r for r in lines):
            return "llm-optimizer-jsonl", lines
        raise BadInput(f"{path} is JSON lines but not llm-optimizer records")
    if isinstance(data, dict) and "config" in data and "results" in data:
        return "llm-optimizer-jsonl", [data]
    if isinstance(data, dict) and isinstance(data.get("test_results"), list):
        return "llm-optimizer-json", data
    if isinstance(data, dict) and isinstance(data.get("request_throughput"), dict) and ("time_to_first_token" in data or "request_latency" in data):
        return "aiperf", data
    if isinstance(data, dict) and "request_throughput" in data and ("mean_ttft_ms" in data or "duration" in data):
        return "vllm-bench", data
    if isinstance(data, dict) and data.get("format") == "knee-study/1":
        return "knee-json", data
    raise BadInput(
        f"{path}: unknown result format",
        "import takes llm-optimizer JSON/JSONL, vllm bench serve JSON, AIPerf profile_export_aiperf.json or knee JSON",
    )


def parse_import(path: str | Path, study: str) -> tuple[str, str | None, list[PointRow], dict[str, Any]]:
    """(format, model, points, metadata) read from a file of another tool (or knee's)."""
    path = Path(path)
    fmt, data = detect_format(path)
    points: list[PointRow] = []
    meta: dict[str, Any] = {}
    model = None
    if fmt == "llm-optimizer-jsonl":
        for rec in data:
            p, m = _llmo_point(rec, study, "llm-optimizer")
            points.append(p)
            if not meta:
                meta = dict(m)
                meta["constraints"] = rec.get("constraints") or []  # per record in the JSONL form
        model = meta.get("model_tag")
    elif fmt == "llm-optimizer-json":
        meta = data.get("metadata") or {}
        for rec in data["test_results"]:
            p, _ = _llmo_point(rec, study, "llm-optimizer")
            points.append(p)
        model = meta.get("model_tag")
    elif fmt == "knee-json":
        model = (data.get("study") or {}).get("model")
        for d in data.get("points", []):
            d = dict(d)
            d["study"] = study
            d["summary"] = {k: (float("nan") if v is None else v) for k, v in (d.get("summary") or {}).items()}
            points.append(PointRow(**d))
    elif fmt == "vllm-bench":
        cargs = {k: data[k] for k in ("max_concurrency", "request_rate", "num_prompts") if data.get(k) is not None}
        if isinstance(cargs.get("request_rate"), str):
            cargs.pop("request_rate")  # "inf"
        sargs: dict[str, Any] = {}
        summary = {k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        summary = {k: v for k, v in summary.items() if k not in cargs}
        model = data.get("model_id")
        points.append(_imported_point(study, sargs, cargs, summary=summary, source="vllm-bench"))
    elif fmt == "aiperf":
        cfg = data.get("input_config") or {}
        load = cfg.get("loadgen") or {}
        ep = cfg.get("endpoint") or {}
        cargs = {}
        if load.get("concurrency"):
            cargs["max_concurrency"] = load["concurrency"]
        if load.get("request_rate"):
            cargs["request_rate"] = load["request_rate"]
        names = ep.get("model_names") or []
        model = names[0] if names else None
        sargs = {}
        points.append(_imported_point(study, sargs, cargs, summary=_aiperf_summary(data), source="aiperf"))
    if not points:
        raise BadInput(f"{path} holds no runs")
    return fmt, model, points, meta


def import_file(store, path: str | Path, study: str | None = None, model: str | None = None) -> tuple[str, int, str]:
    """Import runs from ``path`` into a new study (or an existing imported one). Returns
    (study name, points imported, detected format)."""
    path = Path(path)
    name = study or f"import-{path.stem}"
    fmt, file_model, points, meta = parse_import(path, name)
    model = model or file_model or "unknown"
    existing = store.study(name)
    if existing is None:
        store.create_study(
            name,
            None,
            model,
            source=fmt,
            info={
                "imported_from": str(path),
                "gpu_type": meta.get("gpu_type"),
                "gpu_count": meta.get("gpu_count"),
                "constraints": _constraints_text(meta),
            },
        )
    elif existing["model"] != model and model != "unknown":
        raise BadInput(f"study {name!r} holds results for {existing['model']}, not {model}", "import into another --study")
    slo = parse_constraints(_constraints_text(meta)) if meta.get("constraints") else None
    trial_ids: dict[str, int] = {}
    for p in points:
        if p.meets_slo is None and slo is not None and slo.constraints and p.status == "ok":
            p = p.model_copy(update={"meets_slo": slo.holds(p.summary), "violations": slo.violations(p.summary)})
        tid = trial_ids.get(p.trial_key)
        if tid is None:
            tid = store.upsert_trial(name, p.trial_key, p.server_args, status="ok" if p.status == "ok" else "failed", cmd=p.cmd)
            trial_ids[p.trial_key] = tid
        store.save_point(p.model_copy(update={"trial_id": tid, "study": name}))
    return name, len(points), fmt


def _constraints_text(meta: dict[str, Any]) -> str:
    parts = []
    for c in meta.get("constraints") or []:
        if isinstance(c, dict) and {"name", "op", "value"} <= set(c):
            n = c["name"]
            if n.endswith("_ms"):
                stat, _, metric = n[:-3].partition("_")
                parts.append(f"{metric}:{stat}{c['op']}{c['value']}ms")
            else:
                parts.append(f"{n}{c['op']}{c['value']}")
    return ";".join(parts)
