"""`knee results`: a study's load points, the best configuration under the SLOs, the Pareto
frontier over any two metrics and its knee; exports (json, jsonl, csv, llm-optimizer)."""

from __future__ import annotations

import math
import sys
from typing import Any

from core.errors import BadInput


def register(sub) -> None:
    p = sub.add_parser("results", help="show a study: best config, Pareto frontier, knee; export")
    p.add_argument("--study", help="study name (default: the latest)")
    p.add_argument("--list", action="store_true", help="list the studies in the store")
    p.add_argument(
        "--pareto",
        metavar="X,Y",
        help="frontier over two metrics, e.g. output_throughput,p99_e2el_ms (default) or tokens_per_s_per_user,output_throughput_per_gpu",
    )
    p.add_argument(
        "--objective", choices=["throughput", "throughput_per_gpu", "goodput", "latency", "cost"], help="what 'best' means (default: the study's)"
    )
    p.add_argument("--constraints", help="override the study's SLOs for 'best'")
    p.add_argument("--export", metavar="FILE", help="write the study to FILE")
    p.add_argument("--format", choices=["json", "jsonl", "csv", "llm-optimizer"], help="export format (default from FILE's suffix)")
    p.add_argument("--workspace", help="directory of the study store (default .knee)")
    p.add_argument("--storage", help="study store path or SQLAlchemy URL")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def analyze(store, study: str, pareto_axes: str | None = None, objective: str | None = None, constraints: str | None = None) -> dict[str, Any]:
    """Everything `knee results` shows, as a dict (the TUI's results screen can use it too)."""
    from core.results.analysis import best, knee, pareto, resolve_metric
    from core.results.io import study_meta
    from core.results.store import runner_alive, runner_gone, study_status
    from core.spec.slo import parse_constraints

    row = store.study(study)
    if row is None:
        raise BadInput(f"no study named {study!r}", "see knee results --list")
    meta = study_meta(store, study)
    spec_obj = None
    if row.get("spec"):
        from core.spec.study import SweepSpec

        spec_obj = SweepSpec.model_validate_json(row["spec"])
    slo = parse_constraints(constraints if constraints is not None else meta.get("constraints"))
    objective = objective or (spec_obj.objective if spec_obj else "throughput")
    points = store.points(study)
    x, y = ("output_throughput", "p99_e2el_ms")
    if pareto_axes:
        parts = [s for s in pareto_axes.split(",") if s.strip()]
        if len(parts) != 2:
            raise BadInput(f"--pareto takes two metrics X,Y, got {pareto_axes!r}")
        x, y = resolve_metric(parts[0]), resolve_metric(parts[1])
    price = (row.get("info") or {}).get("price_per_gpu_hour")
    predicted = _predictions(spec_obj, points)
    front = pareto(points, x, y)
    k = knee(front, x, y)
    b = best(points, objective, slo, price)
    trials = store.trials(study)
    from core.sweep.lease import worker_status

    workers = worker_status(store, study)  # several workers on this study (knee sweep --join)
    hosts = store.point_hosts(study) if workers else {}
    # Per configuration: the highest load that met every SLO (what SLA search looks for; also
    # meaningful for a grid). Keyed by trial id.
    sla: dict[int, Any] = {}
    for p in points:
        load = p.client_args.get("max_concurrency", p.client_args.get("request_rate"))
        if p.status == "ok" and load is not None and slo.holds(p.summary):
            sla[p.trial_id] = max(sla.get(p.trial_id, load), load)
    return {
        "predicted": predicted,
        "max_load_meeting_slo": sla,
        "study": study,
        "model": row["model"],
        "status": study_status(row),  # "interrupted" for a runner that died without a word
        "runner": {
            "pid": row.get("runner_pid"),
            "host": row.get("runner_host"),
            "heartbeat_at": row.get("heartbeat_at"),
            "alive": runner_alive(row),
            "reason": runner_gone(row),
        },
        "source": row["source"],
        "simulated": any(p.simulated for p in points),
        "constraints": str(slo),
        "objective": objective,
        "points": points,
        "trials": trials,
        "pareto": {"x": x, "y": y, "points": front, "knee": k},
        "best": b,
        "workers": workers,
        "point_hosts": hosts,
    }


def _predictions(spec, points) -> dict[str, dict[str, float]]:
    """The estimator's prediction per point (point_id -> output_throughput, p99_e2el_ms),
    where the study's model and hardware are known to it; {} otherwise."""
    if spec is None or not (spec.instance or spec.gpu):
        return {}
    try:
        from core.sweep.predict import SurrogatePredictor
        from core.sweep.runner import _arch, _hardware
        from core.sweep.space import load_of, server_config

        pred = SurrogatePredictor.for_spec(spec, _arch(spec), _hardware(spec))
    except Exception:
        return {}
    out = {}
    for p in points:
        try:
            wl, lp = load_of(p.client_args, spec)
            m = pred.predict(server_config(spec.model, p.server_args), wl, lp)
        except Exception:
            continue
        if m:
            out[p.point_id] = {"output_throughput": m.get("output_throughput"), "p99_e2el_ms": m.get("p99_e2el_ms")}
    return out


def resume_command(study: str, args) -> str:
    """The command that resumes ``study`` in the store these arguments name."""
    where = (f" --workspace {args.workspace}" if getattr(args, "workspace", None) else "") + (
        f" --storage {args.storage}" if getattr(args, "storage", None) else ""
    )
    return f"knee sweep --resume --study {study}{where}"


def run(args) -> int:
    from core.results.io import export
    from core.results.store import StudyStore, default_storage, study_status

    store = StudyStore(args.storage or default_storage(args.workspace), create=False)
    if args.list:
        studies = store.studies()
        if args.json:
            from tui.cli.common import print_json

            print_json(
                [
                    {k: s[k] for k in ("name", "model", "source", "created_at")} | {"status": study_status(s), "points": len(store.points(s["name"]))}
                    for s in studies
                ]
            )
        else:
            for s in studies:
                print(f"{s['name']:40} {s['model']:30} {study_status(s):12} {len(store.points(s['name'])):4} points  ({s['source']})")
        return 0
    study = args.study or store.latest_study()
    if not study:
        raise BadInput("the study store is empty", "run knee sweep or knee import first")
    if args.export:
        fmt = args.format or {".json": "json", ".jsonl": "jsonl", ".csv": "csv"}.get(_suffix(args.export))
        if fmt is None:
            raise BadInput(f"cannot tell the format of {args.export}", "pass --format json|jsonl|csv|llm-optimizer")
        export(store, study, fmt, args.export)
        print(f"knee: wrote {args.export} ({fmt})", file=sys.stderr)
        return 0
    a = analyze(store, study, args.pareto, args.objective, args.constraints)
    a["resume"] = resume_command(study, args) if a["status"] == "interrupted" else None
    if args.json:
        from core.estimate.bands import model_kind
        from tui.cli.common import print_json

        kind = model_kind(a["model"]) if a.get("model") else None  # a MoE model's predictions take MoE models' bands

        def pt(p):
            if p is None:
                return None
            d = {
                "point_id": p.point_id,
                "trial_id": p.trial_id,
                "server_args": p.server_args,
                "client_args": p.client_args,
                "summary": p.summary,
                "status": p.status,
                "reason": p.reason,
                "meets_slo": p.meets_slo,
                "simulated": p.simulated,
                "cmd": p.cmd,
            }
            if p.point_id in a["point_hosts"]:
                d["stored_by"] = a["point_hosts"][p.point_id]  # worker, host, pid, rerun
            if p.simulated:  # a prediction: its error band (the simulator stands in for vLLM)
                from core.estimate.bands import summary_bands

                d["bands"] = summary_bands(p.summary, "vllm", kind)
            return d

        print_json(
            {
                "study": a["study"],
                "model": a["model"],
                "status": a["status"],
                "simulated": a["simulated"],
                "runner": a["runner"],
                "resume": a["resume"],
                "constraints": a["constraints"],
                "objective": a["objective"],
                "max_load_meeting_slo": a["max_load_meeting_slo"],
                "predicted": a["predicted"],
                "best": pt(a["best"]),
                "pareto": {
                    "x": a["pareto"]["x"],
                    "y": a["pareto"]["y"],
                    "points": [pt(p) for p in a["pareto"]["points"]],
                    "knee": pt(a["pareto"]["knee"]),
                },
                "trials": [t.model_dump(mode="json") for t in a["trials"]],
                "points": [pt(p) for p in a["points"]],
                "workers": a["workers"],
            }
        )
        return 0
    _print_text(a)
    return 0


def worker_lines(workers: list[dict[str, Any]]) -> list[str]:
    """The workers of a joined study, one line each (knee results, knee attach)."""
    if not workers:
        return []
    out = [f"workers ({len(workers)}):"]
    for w in workers:
        what = w["state"]
        if w.get("trial_id") is not None:
            what = f"{w['state']} trial {w['trial_id']}" + (f", point {w['inflight']} in flight" if w.get("inflight") else "")
        age = w.get("heartbeat_age_s")
        beat = (
            f"heartbeat {age:.0f} s ago"
            if age is not None and w.get("trial_id") is not None
            else (f"last seen {age:.0f} s ago" if age is not None else "")
        )
        out.append(f"  {w['host']} pid {w['pid']}: {what}; {beat}; {w['configurations_done']} configurations done")
    return out


def _suffix(path: str) -> str:
    from pathlib import Path

    return Path(path).suffix.lower()


def _print_text(a: dict[str, Any]) -> None:
    sim = " [SIMULATED]" if a["simulated"] else ""
    print(f"study {a['study']}: {a['model']} ({a['status']}, {a['source']}){sim}")
    if a.get("resume"):
        why = a["runner"]["reason"]
        print(f"{why + '; ' if why else ''}resume with: {a['resume']}")
    print(f"constraints: {a['constraints'] or '(none)'}   objective: {a['objective']}")
    for line in worker_lines(a["workers"]):
        print(line)
    points = a["points"]
    sargs = sorted({k for p in points for k in p.server_args})
    cargs = sorted({k for p in points for k in p.client_args if k in ("max_concurrency", "request_rate")})
    pred = a.get("predicted") or {}
    hosts = a.get("point_hosts") or {}
    header = (
        ["trial"]
        + sargs
        + cargs
        + ["status", "out tok/s", "req/s", "TTFT ms", "p99 E2E s", "SLO"]
        + (["pred tok/s", "pred p99 s"] if pred else [])
        + (["host"] if hosts else [])
    )
    rows = []
    for p in points:
        s = p.summary
        e2e = s.get("p99_e2el_ms")
        row = (
            [str(p.trial_id)]
            + [_fmt(p.server_args.get(k)) for k in sargs]
            + [_fmt(p.client_args.get(k)) for k in cargs]
            + [
                p.status if p.status == "ok" else f"FAILED ({(p.reason or '').split(':', 1)[0]})",
                _fmt(s.get("output_throughput")),
                _fmt(s.get("request_throughput"), 2),
                _fmt(s.get("mean_ttft_ms"), 0),
                _fmt(e2e / 1000 if isinstance(e2e, (int, float)) else None),
                "ok" if p.meets_slo else ("-" if p.meets_slo is None else "miss"),
            ]
        )
        if pred:
            pp = pred.get(p.point_id) or {}
            pe = pp.get("p99_e2el_ms")
            row += [_fmt(pp.get("output_throughput")), _fmt(pe / 1000 if isinstance(pe, (int, float)) else None)]
        if hosts:
            h = hosts.get(p.point_id) or {}
            row.append(f"{h.get('host') or '-'}{' (re-run)' if h.get('rerun') else ''}")
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    b = a["best"]
    if b is not None:
        print(
            f"best ({a['objective']} under the constraints): trial {b.trial_id} {b.server_args} at {b.client_args.get('max_concurrency', b.client_args.get('request_rate', ''))}: {_fmt(b.summary.get('output_throughput'))} tok/s, p99 E2E {_fmt((b.summary.get('p99_e2el_ms') or float('nan')) / 1000)} s"
        )
        if b.simulated or (b.cmd or "").startswith("sim "):
            from core.estimate.bands import model_kind, provenance, summary_band
            from core.results.analysis import vllm_command

            kind = model_kind(a["model"]) if a.get("model") else None
            tok, e2e = (
                summary_band("output_throughput", b.summary.get("output_throughput"), "vllm", kind),
                summary_band("p99_e2el_ms", b.summary.get("p99_e2el_ms"), "vllm", kind),
            )
            if tok and e2e:  # a simulated point is a prediction: where a GPU's measurement would likely fall
                print(f"  error band ({provenance()}): {_fmt(tok[0])}-{_fmt(tok[1])} tok/s, p99 E2E {_fmt(e2e[0] / 1000)}-{_fmt(e2e[1] / 1000)} s")
            print(f"  command on a GPU (simulated here): {vllm_command(a['model'], b.server_args)}")
        elif b.cmd:
            print(f"  command: {b.cmd}")
    else:
        print("best: no load point meets the constraints")
    par = a["pareto"]
    print(f"Pareto frontier ({par['x']} vs {par['y']}): {len(par['points'])} points")
    for p in par["points"]:
        mark = "  <- knee" if par["knee"] is not None and p.point_id == par["knee"].point_id else ""
        print(
            f"  trial {p.trial_id} {p.server_args} {p.client_args.get('max_concurrency', '')}: {par['x']}={_fmt(_v(p, par['x']))} {par['y']}={_fmt(_v(p, par['y']))}{mark}"
        )
    if a["max_load_meeting_slo"] and a["constraints"]:
        by_trial = {t.trial_id: t for t in a["trials"]}
        print("highest load meeting the constraints, per configuration:")
        for tid, load in sorted(a["max_load_meeting_slo"].items()):
            print(f"  trial {tid} {by_trial[tid].server_args if tid in by_trial else ''}: {load}")
    failed = [t for t in a["trials"] if t.status in ("failed", "skipped")]
    for t in failed:
        print(f"{t.status}: trial {t.trial_id} {t.server_args}: {(t.reason or '').splitlines()[0] if t.reason else ''}")


def _v(p, key):
    from core.results.analysis import metric_value

    return metric_value(p, key)
