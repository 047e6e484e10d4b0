"""Exports (knee JSON, JSONL, CSV, llm-optimizer's per-run JSONL and aggregated JSON) and
imports (llm-optimizer JSONL/aggregated JSON, ``vllm bench serve`` JSON, AIPerf
``profile_export_aiperf.json``), so earlier runs sit next to knee's.

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
from core.spec.slo import LATENCY_METRICS, SLO, parse_constraints
from core.spec.study import PointRow, canonical_json, make_point_id
from core.spec.server_args import config_id, emit_args

LLMO_STATS = ("mean", "median", "std", "p95", "p99")
LLMO_METRICS = {"e2e_latency": "e2el", "ttft": "ttft", "tpot": "tpot", "itl": "itl"}
ECHO_KEYS = ("backend", "dataset_name", "request_rate", "max_concurrency", "sharegpt_output_len", "random_input_len", "random_output_len", "random_range_ratio")


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
    for k in ("duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput", "input_throughput", "output_throughput", "concurrency"):
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
    return _clean({
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
    })


def knee_json(study: dict[str, Any], trials: list, points: Sequence[PointRow], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return _clean({
        "format": "knee-study/1",
        "study": {k: v for k, v in study.items() if k not in ("runner_pid", "runner_host")},
        "trials": [t.model_dump(mode="json") for t in trials],
        "points": [p.model_dump(mode="json") for p in points],
        **(extra or {}),
    })


CSV_KEYS = (
    "completed", "failed", "duration", "request_throughput", "output_throughput", "total_token_throughput",
    "request_goodput", "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p90_e2el_ms", "p99_e2el_ms",
)


def to_csv(points: Sequence[PointRow]) -> str:
    sargs = sorted({k for p in points for k in p.server_args})
    cargs = sorted({k for p in points for k in p.client_args})
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["point_id", "trial", "status", "reason", "meets_slo", "simulated", "source"] + [f"server.{k}" for k in sargs] + [f"client.{k}" for k in cargs] + list(CSV_KEYS))
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
    meta = {"model": s.get("model"), "gpu_type": info.get("gpu_type"), "gpu_count": info.get("gpu_count"), "engine": info.get("engine"), "constraints": info.get("constraints", "")}
    if s.get("spec"):
        from core.spec.study import SweepSpec

        spec = SweepSpec.model_validate_json(s["spec"])
        meta.update(constraints=spec.constraints, input_len=spec.input_len, output_len=spec.output_len, engine=spec.engine.kind)
    return meta


# ---- import ------------------------------------------------------------------------------------
def _from_llmo_results(r: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in r.items():
        if k in ECHO_KEYS or k in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
            continue
        out[k.replace("_e2e_latency_ms", "_e2el_ms")] = float("nan") if v is None else v
    if "total_token_throughput" not in out and out.get("input_throughput") is not None and out.get("output_throughput") is not None:
        out["total_token_throughput"] = out["input_throughput"] + out["output_throughput"]
    return out


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
    p = PointRow(
        study=study,
        point_id=make_point_id(sargs, cargs),
        trial_id=0,
        trial_key=canonical_json(sargs),
        server_args=sargs,
        client_args=cargs,
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
                raise BadInput(f"{path} line {i} is not JSON ({e.msg})", "import takes llm-optimizer JSON/JSONL, vllm bench serve JSON or AIPerf profile_export_aiperf.json") from None
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
    raise BadInput(f"{path}: unknown result format", "import takes llm-optimizer JSON/JSONL, vllm bench serve JSON, AIPerf profile_export_aiperf.json or knee JSON")


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
        points.append(PointRow(study=study, point_id=make_point_id(sargs, cargs), trial_id=0, trial_key=canonical_json(sargs), server_args=sargs, client_args=cargs, summary=summary, source="vllm-bench"))
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
        points.append(PointRow(study=study, point_id=make_point_id(sargs, cargs), trial_id=0, trial_key=canonical_json(sargs), server_args=sargs, client_args=cargs, summary=_aiperf_summary(data), source="aiperf"))
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
        store.create_study(name, None, model, source=fmt, info={"imported_from": str(path), "gpu_type": meta.get("gpu_type"), "gpu_count": meta.get("gpu_count"), "constraints": _constraints_text(meta)})
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


