"""How close the simulator comes to published online-serving measurements.

    .venv/bin/python bench/sim_accuracy.py [PATH ...] [--json] [--exclude-overloaded] [--loso [--loso-key id|publisher]]

PATH defaults to ``shared/calibration/measurements.jsonl``. Only the rows that describe
online serving (``online-concurrency``: closed loop; ``online-rate``: open loop) are used:
they are what a scheduler simulation is for. A row that cannot be simulated (a null
concurrency or request rate, no bundled model config) is listed as skipped with the reason,
and the rest go on. With ``--json`` stdout holds one JSON document and nothing else. Each is simulated by :func:`core.simulate.simulate`
and compared with what was measured; the report prints simulated against measured per row
and the median absolute percentage error (APE) per metric. Acceptance (issue 5): median APE
<= 20% on req/s and output tok/s, <= 30% on TTFT. Several PATHs are read together. The last
line is a one-line SUMMARY.

With ``--loso`` (issue 11, honest validation): the cost model's physical parameters are
fitted on the analytic estimator (:mod:`bench.fit`; a fit through the simulator would cost a
simulation per row per trial), on every row of the file(s) (in-sample) and, per source (id
prefix), on the other sources' rows; the simulator is then run with each set, and the report
sets the hand-set, fitted in-sample and LOSO median APEs side by side per metric, GPU,
engine and held-out source, flagging a LOSO median more than 5 points above the in-sample
one. The product's predictions are unchanged: the fits only apply inside the bench.

How a row becomes a simulation (the same for every row; nothing is fitted per row):

The workload rules are :mod:`bench.rows`, shared with ``bench/accuracy.py`` (the analytic
estimator's bench), so both predictors see the same servers, lengths and loads:

- model: ``architecture_of`` when present, else ``model``; rows without a bundled config
  are skipped and counted. Precision and KV dtype from the row (KV null -> ``auto``).
- engine and version: the row's, through the cost model's engine profiles (vLLM < 0.6 ->
  the legacy profile, a null vLLM version -> current vLLM, SGLang its own).
- hardware: ``num_gpus`` of the row's GPU; TP from the row and data-parallel replicas from
  ``replicas``; server knobs the row's notes state (``max_num_batched_tokens``,
  ``max_num_seqs``, ``max_model_len``, ``gpu_memory_utilization``) are applied; a
  "round robin" balancer in the notes selects the round-robin router.
- lengths: the row's means; ShareGPT rows with none use the ShareGPT means with a
  Llama-3 tokenizer (231 in / 195 out, from KubeAI's 1000-prompt run). Spreads where the
  source's client documents them (:func:`bench.rows.lengths`), the shared system prompt of
  inference-perf's shared_prefix workloads (:func:`bench.rows.prompt_pool`, cached or not as
  :func:`bench.knee_predict.pool_cached` judges) and its
  client timeout (:func:`bench.rows.client_timeout`).
- load: ``online-concurrency`` -> closed loop at ``concurrency`` (a request rate stated too
  caps nothing: it is the burst that fills the concurrency); ``online-rate`` -> open loop at
  ``request_rate``, constant arrivals where the notes say so, else Poisson. The number of
  prompts comes from the notes (successes + failures, "N prompts", "completed_requests=N")
  or, failing that, enough for a steady state (max(100, 10 x concurrency); 600 s of arrivals).
- statistic: ``median``/``p50`` rows are compared with the simulation's median, the rest
  with its mean. ITL is compared with the simulated TPOT (the schema's definition).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import rows as R  # noqa: E402  (after the path set-up: run as a script)
from bench.knee_predict import pool_cached  # noqa: E402
from bench.loso import add_jobs_argument, attach, format_compare, honest_report, summary_part, to_stderr  # noqa: E402
from bench.loso import loso as leave_one_source_out  # noqa: E402
from bench.rows import DEFAULT, LABELS, METRICS, ape  # noqa: E402

ACCEPT = {"req_per_s": 0.20, "output_tok_per_s": 0.20, "ttft_ms": 0.30}


def simulate_row(row: dict):
    """(simulated metrics, SimResult) for one measurement row."""
    from core.estimate.memory import plan_config_memory
    from core.estimate.predict import workload_max_model_len
    from core.simulate import simulate
    from core.spec.engine_defaults import with_engine_defaults
    from core.spec.hardware import Hardware
    from core.spec.serving import LoadPoint, ServerConfig

    ref, _, arch = R.resolve(row)
    w = row["workload"]
    notes = row.get("notes", "")
    tp, dp = R.topology(row)
    hw = Hardware(gpu=R.gpu_of(row), num_gpus=max(int(row.get("num_gpus") or 1), tp * dp))
    workload = R.workload(row, pool_cached(row, arch))
    knobs = R.knobs(notes)
    # The estimator's bench assumes the max_model_len a user would pass for the workload when
    # the row states none; the simulator gets the same, not vLLM's model-length default, so a
    # row the one predicts the other does not refuse (the 72B TP2 ttgpuref rows).
    knobs.setdefault("max_model_len", workload_max_model_len(arch, workload))
    config = ServerConfig(
        model=ref,
        tp=tp,
        dp=dp,
        kv_cache_dtype=row.get("kv_dtype") or "auto",
        extra_args=R.extra_args(notes),
        **knobs,
    )
    engine, version = R.engine_of(row), R.engine_version(row)
    kv = R.stated_kv_bytes(notes)
    if kv is not None:
        plan = plan_config_memory(arch, hw.gpu, with_engine_defaults(config, engine, version, hw.gpu))
        config = config.model_copy(update={"gpu_memory_utilization": R.utilization_leaving(kv, plan)})
    n = R.prompts_sent(row)
    if w["mode"] == "online-concurrency":
        c = int(w["concurrency"])
        load = LoadPoint(concurrency=c, num_prompts=n or max(100, 10 * c))
    else:
        rate = float(w["request_rate"])
        arrival = "constant" if "constant-rate" in notes else "poisson"
        load = LoadPoint(request_rate=rate, arrival=arrival, concurrency=w.get("concurrency"), num_prompts=n or max(100, int(600 * rate)))
    router = "round-robin" if "round robin" in notes.lower() else "least-loaded"
    res = simulate(
        arch,
        hw,
        config,
        workload,
        load,
        seed=0,
        engine=engine,
        engine_version=version,
        router=router,
        request_timeout_s=R.client_timeout(row),
    )
    s = res.summary
    stat = R.stat(row)
    return {
        "ttft_ms": s[f"{stat}_ttft_ms"],
        "itl_ms": s[f"{stat}_tpot_ms"],
        "e2e_s": s[f"{stat}_e2el_ms"] / 1000.0,
        "req_per_s": s["request_throughput"],
        "output_tok_per_s": s["output_throughput"],
    }, res


def run(path, exclude_overloaded: bool = False, loso: bool = False, key: str = "id", jobs: int = 1) -> dict:
    """The report over the online rows of ``path`` (a JSONL path or a list of them); with
    ``loso`` the honest validation too (:func:`honest`, its folds ``jobs`` at a time)."""
    from core.errors import KneeError

    rows = R.load_all([path] if isinstance(path, (str, Path)) else path)
    online = [r for r in rows if (r.get("workload") or {}).get("mode") in ("online-concurrency", "online-rate")]
    results, skipped = [], []
    for row, _, _ in R.with_config(online, skipped):
        if exclude_overloaded and "OVERLOADED" in row.get("notes", ""):
            skipped.append({"id": row["id"], "reason": "overloaded stage (excluded on request)"})
            continue
        t0 = time.perf_counter()
        try:
            sim, res = simulate_row(row)
            err = None
        except KneeError as e:
            sim, res, err = {}, None, str(e)
        except Exception as e:  # noqa: BLE001 - the report goes on; knee's own defect is named as one
            sim, res, err = {}, None, f"knee failed: {type(e).__name__}: {e}"
        meas = R.measured(row)
        results.append(
            {
                "id": row["id"],
                "gpu": row["gpu"],
                "tp": row.get("tp"),
                "engine": f"{row.get('engine')} {row.get('engine_version') or '?'}",
                "engine_name": row.get("engine"),
                "mode": row["workload"]["mode"],
                "assumed_lengths": R.assumed_lengths(row),
                "measured": meas,
                "simulated": sim,
                "error": err,
                "ape": {k: ape(sim.get(k), meas[k]) for k in METRICS},
                "preemptions": res.preemptions if res else None,
                "overloaded": "OVERLOADED" in row.get("notes", ""),
                "sim_wall_s": time.perf_counter() - t0,
            }
        )
    med = R.median_apes(results, "ape")
    # Below saturation an open-loop run's throughput is its offered rate, which any
    # simulator gets right; the rows where the engine decides it are the telling ones.
    hard = R.median_apes([r for r in results if r["mode"] == "online-concurrency" or r["overloaded"]], "ape")
    out = {
        # Rows whose source gives no prompt (or output) length run on ShareGPT's mean: apart.
        "median_ape_published_lengths": R.median_apes([r for r in results if not r["assumed_lengths"]], "ape"),
        "assumed_lengths": sum(1 for r in results if r["simulated"] and r["assumed_lengths"]),
        "rows_online": len(online),
        "simulated": sum(1 for r in results if r["simulated"]),
        "skipped": skipped,
        "rows": results,
        "median_ape": med,
        "median_ape_engine_bound": hard,
        "simulated_label": "every predicted figure here is simulated",
    }
    if loso:
        out["honest"] = honest(rows, results, key, jobs)
    out["summary_line"] = summary_line(out)
    return out


def honest(rows: list[dict], results: list[dict], key: str = "id", jobs: int = 1) -> dict:
    """Issue 11's honest validation on the simulator, with the parameters fitted on the
    *estimator* (:mod:`bench.fit`; a fit through the simulator would cost a simulation per
    row per trial, hours on this box): fitted on every row of the file(s), all modes
    (in-sample), and per source on the other sources' rows, that fold's parameters then
    applied to the simulation of the held-out source's online rows (leave-one-source-out).
    Adds ``simulated_fitted``/``ape_fitted``, ``simulated_loso``/``ape_loso`` and ``source``
    to each result."""
    from bench import fit
    from core.estimate.params import calibrated
    from core.errors import KneeError

    t0 = time.perf_counter()
    its, _ = fit.items(rows)
    progress = to_stderr("bench.sim_accuracy")
    progress(f"fitting the parameters on all {len(its)} rows (in-sample), then one fold per source")
    infl = fit.influence(its)
    full = fit.fit(its, infl)
    by_id = {it.id: it for it in its}
    ids = {r["id"] for r in results}

    def sim(it):
        return simulate_row(it.row)[0]

    folds = leave_one_source_out(its, key, infl, predict_held=sim, held_filter=lambda it: it.id in ids, jobs=jobs, progress=progress)
    held = {i: (f.source, p) for f in folds for i, p in f.predictions.items()}
    with calibrated(full.params):
        for r in results:
            try:
                p = simulate_row(by_id[r["id"]].row)[0]
            except KneeError:
                p = None
            src, q = held[r["id"]]
            attach(r, "simulated", src, p, q)
    return honest_report(
        results,
        "ape",
        full,
        folds,
        key,
        "parameters fitted on the estimator over all rows (coordinate pattern search, bench/fit.py), applied to the simulator",
        t0,
    )


def summary_line(out: dict) -> str:
    med = out["median_ape"]
    line = (
        "SUMMARY simulator median APE (hand-set calibration): "
        + ", ".join(f"{LABELS[m]} {'-' if med[m] is None else f'{100 * med[m]:.0f}%'}" for m in METRICS)
        + f" on {out['simulated']} online rows ({len(out['skipped'])} skipped)"
    )
    if "honest" in out:
        line += " | " + summary_part(out["honest"])
    return line


def _fmt(v, m):
    if v is None:
        return "-"
    if m == "e2e_s":
        return f"{v:.2f}"
    if m in ("req_per_s",):
        return f"{v:.3g}"
    return f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sim_accuracy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="*", default=[str(DEFAULT)], help="JSONL files, read together (default: measurements.jsonl)")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout, nothing else")
    ap.add_argument("--exclude-overloaded", action="store_true", help="skip rows the source marks overloaded")
    ap.add_argument(
        "--loso",
        action="store_true",
        help="honest validation: estimator-fitted parameters (in-sample and leave-one-source-out) applied to the simulator",
    )
    ap.add_argument(
        "--loso-key",
        choices=("id", "publisher"),
        default="id",
        help="source of a row: its id prefix (default), or that prefix without trailing digits",
    )
    add_jobs_argument(ap)
    args = ap.parse_args(argv)
    for p in args.path:
        if not Path(p).exists():
            print(f"bench.sim_accuracy: {p} does not exist", file=sys.stderr)
            return 2
    try:
        out = run([Path(p) for p in args.path], args.exclude_overloaded, args.loso, args.loso_key, args.jobs)
    except json.JSONDecodeError as e:
        print(f"bench.sim_accuracy: {' '.join(args.path)} is not JSONL: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(R.clean(out), indent=2, allow_nan=False))
        return 0
    print("simulated (sim) vs measured (meas) on online-serving rows; APE = |sim - meas| / meas")
    for r in out["rows"]:
        head = f"{r['id']:<11} {r['gpu']:<9} TP{r['tp']} {r['engine']:<13} {r['mode']:<18}"
        if r["error"]:
            print(f"{head} ERROR {r['error']}")
            continue
        parts = []
        for m in METRICS:
            meas, sim, e = r["measured"][m], r["simulated"].get(m), r["ape"][m]
            if meas is None:
                continue
            parts.append(f"{LABELS[m]} {_fmt(sim, m)}/{_fmt(meas, m)} ({e * 100:.0f}%)" if e is not None else f"{LABELS[m]} -/{_fmt(meas, m)}")
        assumed = R.assumed_lengths_marker(r["assumed_lengths"])
        print(f"{head} " + "  ".join(parts) + assumed)
    for s in out["skipped"]:
        print(f"{s['id']:<11} skipped: {s['reason']}")
    print()
    med = out["median_ape"]
    print(f"rows: {out['rows_online']} online, {out['simulated']} simulated, {len(out['skipped'])} skipped")
    for m in METRICS:
        v = med[m]
        goal = ACCEPT.get(m)
        verdict = "" if goal is None or v is None else ("  (goal <= %d%%: %s)" % (goal * 100, "ok" if v <= goal else "MISSED"))
        print(f"median APE {LABELS[m]:<10} {'-' if v is None else f'{v * 100:5.1f}%'}  over {med[m + '_n']} rows{verdict}")
    if out["assumed_lengths"]:
        pub = out["median_ape_published_lengths"]
        print(
            f"rows with published lengths only ({out['assumed_lengths']} rows assumed ShareGPT's mean): "
            + ", ".join(f"{LABELS[m]} {'-' if pub[m] is None else f'{pub[m] * 100:.0f}%'} ({pub[m + '_n']})" for m in METRICS)
        )
    hard = out["median_ape_engine_bound"]
    print("engine-bound rows only (closed loop or overloaded, where throughput is not just the offered rate):")
    for m in METRICS:
        v = hard[m]
        print(f"median APE {LABELS[m]:<10} {'-' if v is None else f'{v * 100:5.1f}%'}  over {hard[m + '_n']} rows")
    if "honest" in out:
        h = out["honest"]
        print()
        print(
            f"Honest validation (issue 11) on the simulator: {h['method']}; leave-one-source-out over the {h['sources']} sources "
            f"with online rows (source = {'id prefix' if h['key'] == 'id' else 'id prefix without trailing digits'}); {h['seconds']:.0f} s"
        )
        for ln in format_compare(h, h["params"]):
            print(ln)
    print(out["summary_line"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
