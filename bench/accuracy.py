"""How close knee's estimate comes to published serving measurements, beside llm-optimizer's.

    python -m bench.accuracy [PATH ...] [--json] [--quiet] [--loso [--loso-key id|publisher]]

PATH (default ``shared/calibration/measurements.jsonl``) is a JSONL file in that file's
schema (its README describes the fields). Each row is predicted by knee's :class:`core.estimate.Predictor` and
by llm-optimizer's formulas (:mod:`bench.llm_optimizer_formulas`); the report prints
predicted against measured per row, then the median absolute percentage error (APE) per
metric — TTFT, ITL (TPOT), E2E, req/s, output tok/s — overall, by GPU and by engine, and
llm-optimizer's on the rows it can predict, with knee's on those same rows. Rows that cannot
be predicted (an unknown mode, a load mode without its load, no bundled model config) are
listed with the reason and the rest go on. The last line is a one-line summary. With
``--json`` stdout holds one JSON document and nothing else: rows, skipped rows with their
reasons, and the summary (its one-line form as ``summary.line``).

With ``--loso`` (issue 11, honest validation; :mod:`bench.fit`): the cost model's physical
parameters (per GPU architecture mfu, mfu_fp8, mfu_attn, bw_weights, bw_kv; per
interconnect link_eff, allreduce_us; per engine profile step_us; each pulled toward its
calibration.toml value) are fitted to every predicted row (in-sample), and
for each source (the id prefix) fitted to the other sources' rows and used to predict the
held-out source's (leave-one-source-out). The report sets today's hand-set calibration
(in-sample: it was tuned on these rows), the fitted in-sample and the LOSO median APEs side
by side per metric, overall, per GPU, per engine and per held-out source, with row counts,
and flags a LOSO median more than 5 points above the fitted in-sample one as overfitting;
the fitted parameters beside the hand-set ones; the SUMMARY line gains the fitted and LOSO
medians. Several PATHs are read together (``measurements.jsonl bench/data/published.jsonl``).
The product's predictions are unchanged: the fits only apply inside the bench.

How a row becomes a prediction (the same for every row; nothing is fitted per row): the
workload rules are :mod:`bench.rows`, shared with ``bench/sim_accuracy.py`` (model through
``architecture_of``, topology, the server knobs the notes state, length spreads, the shared
system prompt and client timeout of inference-perf runs, prompt counts). Then:

- engine and version: the row's, through the engine profiles of ``calibration.toml``
  (vLLM < 0.6 -> the legacy profile; 0.6/0.7 -> V0; a null vLLM version -> current vLLM).
- mode: ``online-concurrency`` -> closed loop at that concurrency (split over replicas);
  ``online-rate`` -> open loop at that rate (with the run's prompt count and its client
  timeout: an overloaded run's figures are those of the requests that finished in time);
  ``offline-max-throughput`` -> everything submitted at once (``batch_size`` prompts if
  given, else the prompt count in the notes, else 1000); ``single-request`` -> one request
  (or the static batch given).
- statistic: ``median``/``p50`` rows are compared with knee's p50, the rest with its mean.
  ITL is TPOT (the schema's definition) unless the row's notes define its figure as the
  pooled inter-chunk gap, which is compared with knee's gap distribution.
- llm-optimizer's formulas get the row's mean lengths (its estimate has no length spread,
  prefix cache or timeout).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench import fit
from bench.loso import add_jobs_argument, attach, format_compare, honest_report, summary_part, to_stderr
from bench.loso import loso as leave_one_source_out
from bench import llm_optimizer_formulas as lo
from bench import rows as R
from bench.knee_predict import predict_knee
from bench.rows import LABELS, METRICS
from core.estimate.bands import kind_of

_ape = R.ape


def predict_lo(row: dict, cfg_dict: dict) -> dict:
    i, o = R.mean_lengths(row)
    r = lo.predict_row(lo.model_from_config(cfg_dict), row, i, o)
    f = lo.STAT_FACTOR.get(row.get("stat"), 1.0)
    return {"ttft_ms": r.ttft_ms * f, "itl_ms": r.itl_ms * f, "e2e_s": r.e2e_s * f, "req_per_s": r.req_per_s, "output_tok_per_s": r.output_tok_per_s}


def run(path, loso: bool = False, key: str = "id", sources: list[str] | None = None, jobs: int = 1) -> dict:
    """The report over the rows of ``path`` (a JSONL path, or a list of them read together),
    only the rows of ``sources`` (id prefixes) when given; with ``loso`` the honest validation
    too (:func:`honest`, its folds ``jobs`` at a time)."""
    from core.errors import KneeError

    rows = R.load_all([path] if isinstance(path, (str, Path)) else path)
    if sources:
        rows = [r for r in rows if r["id"].rsplit("-", 1)[0] in sources]
    results, skipped = [], []
    for row, cfg, arch in R.with_config(rows, skipped):
        meas = R.measured(row)
        try:
            kn = predict_knee(row, arch)
            kn_err = None
        except KneeError as e:
            kn, kn_err = {}, str(e)
        except Exception as e:  # noqa: BLE001 - the report goes on; knee's own defect is named as one
            kn, kn_err = {}, f"knee failed: {type(e).__name__}: {e}"
        try:
            lp = predict_lo(row, dict(cfg))
            lo_err = None
        except Exception as e:  # noqa: BLE001 - the peer's formulas refusing a row is its answer
            lp, lo_err = {}, str(e) if isinstance(e, lo.Unsupported) else f"{type(e).__name__}: {e}"
        results.append(
            {
                "id": row["id"],
                "gpu": row["gpu"],
                "engine": f"{row.get('engine')} {row.get('engine_version') or '?'}",
                "engine_name": row.get("engine"),
                # The bands and the track record are also kept per model kind (bench/bands.py).
                "model_kind": kind_of(arch.is_moe),
                "mode": row["workload"].get("mode"),
                "assumed_lengths": R.assumed_lengths(row),
                "measured": meas,
                "knee": kn,
                "knee_error": kn_err,
                "llm_optimizer": lp,
                "llm_optimizer_error": lo_err,
                "ape_knee": {k: _ape(kn.get(k), meas[k]) for k in METRICS},
                "ape_lo": {k: _ape(lp.get(k), meas[k]) for k in METRICS},
            }
        )
    rep = {"rows": results, "skipped": skipped, "summary": summarize(results, skipped, len(rows))}
    if loso:
        rep["honest"] = honest(rows, results, key, jobs)
        rep["summary"]["honest"] = {k: v for k, v in rep["honest"].items() if k not in ("params", "fit", "folds")}
        rep["summary"]["line"] += " | " + summary_part(rep["honest"])
    return rep


def honest(rows: list[dict], results: list[dict], key: str = "id", jobs: int = 1) -> dict:
    """Issue 11's honest validation on the estimator (:mod:`bench.fit`): the physical
    parameters fitted on every row (in-sample) and, for each source, fitted on the other
    sources' rows and judged on the held-out source's (leave-one-source-out). Adds to each
    result ``knee_fitted``/``ape_fitted``, ``knee_loso``/``ape_loso`` and ``source``, and
    returns the comparison (:func:`bench.loso.compare`), the parameters and the folds."""
    import time

    t0 = time.perf_counter()
    its, _ = fit.items(rows)
    assert [it.id for it in its] == [r["id"] for r in results]  # same rows, same order (bench.rows.with_config)
    progress = to_stderr("bench.accuracy")
    progress(f"fitting the parameters on all {len(its)} rows (in-sample), then one fold per source")
    infl = fit.influence(its)
    full = fit.fit(its, infl)
    in_sample = fit.predict_with(its, full.params)
    folds = leave_one_source_out(its, key, infl, jobs=jobs, progress=progress)
    held = {i: (f.source, p) for f in folds for i, p in f.predictions.items()}
    for r, it, p in zip(results, its, in_sample):
        src, q = held[it.id]
        attach(r, "knee", src, p, q)
    return honest_report(
        results,
        "ape_knee",
        full,
        folds,
        key,
        "coordinate pattern search in log space on the estimator, robust mean of capped |log(pred/meas)| (bench/fit.py)",
        t0,
    )


def summarize(results, skipped, total) -> dict:
    covered_lo = lambda r, m: r["ape_lo"][m] is not None  # noqa: E731
    s = {
        "rows": total,
        "predicted": sum(1 for r in results if r["knee"]),
        # A row the estimator refuses (the model does not fit the row's GPUs) is not
        # predicted either; it is counted and listed with the estimator's reason.
        "skipped": len(skipped) + sum(1 for r in results if not r["knee"]),
        "llm_optimizer_covered": sum(1 for r in results if r["llm_optimizer"]),
        "knee": R.median_apes(results, "ape_knee"),
        "knee_on_lo_rows": R.median_apes(results, "ape_knee", covered_lo),
        # Where a source does not publish a length the bench assumes ShareGPT's: those rows'
        # error is partly the guess, so the figure without them is shown beside.
        "knee_published_lengths": R.median_apes(results, "ape_knee", lambda r, m: not r.get("assumed_lengths")),
        "assumed_lengths": sum(1 for r in results if r["knee"] and r.get("assumed_lengths")),
        "llm_optimizer": R.median_apes(results, "ape_lo"),
        "by_gpu": {},
        "by_engine": {},
        "skipped_reasons": [f"{x['id']}: {x['reason']}" for x in skipped]
        + [f"{r['id']}: knee refused it: {r['knee_error']}" for r in results if not r["knee"]],
    }
    for group, field in (("by_gpu", "gpu"), ("by_engine", "engine_name")):
        keys = sorted({r[field] for r in results})
        for k in keys:
            sub = [r for r in results if r[field] == k]
            s[group][k] = {"rows": len(sub), "knee": R.median_apes(sub, "ape_knee"), "llm_optimizer": R.median_apes(sub, "ape_lo")}
    s["line"] = summary_line(s)
    return s


def summary_line(s: dict) -> str:
    """The report's last line: knee's median APEs beside llm-optimizer's."""
    k, lo_, kl = s["knee"], s["llm_optimizer"], s["knee_on_lo_rows"]
    ratio = [lo_[m] / kl[m] for m in METRICS if lo_[m] and kl[m]]
    return (
        "SUMMARY knee median APE: "
        + ", ".join(f"{LABELS[m]} {_pct(k[m])}" for m in METRICS)
        + f" on {s['predicted']} rows ({s['skipped']} skipped) | llm-optimizer: "
        + ", ".join(f"{LABELS[m]} {_pct(lo_[m])}" for m in METRICS)
        + f" on {s['llm_optimizer_covered']} rows"
        + (f" | knee is {min(ratio):.1f}-{max(ratio):.1f}x lower on the same rows" if ratio else "")
    )


def _fmt(v, metric=None) -> str:
    if v is None:
        return "-"
    if metric == "ttft_ms" or metric == "itl_ms":
        return f"{v:.1f}" if v < 100 else f"{v:,.0f}"
    if metric == "e2e_s":
        return f"{v:.2f}"
    if metric == "req_per_s":
        return f"{v:.2f}"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def print_report(rep: dict, quiet: bool = False) -> None:
    s = rep["summary"]
    if not quiet:
        print("Per row: measured | knee | llm-optimizer  (APE knee / llm-optimizer)")
        for r in rep["rows"]:
            parts = []
            for m in METRICS:
                if r["measured"][m] is None:
                    continue
                parts.append(
                    f"{LABELS[m]} {_fmt(r['measured'][m], m)} | {_fmt(r['knee'].get(m), m)} | {_fmt(r['llm_optimizer'].get(m), m)}"
                    f" ({_pct(r['ape_knee'][m])}/{_pct(r['ape_lo'][m])})"
                )
            why = f"  [llm-optimizer: {r['llm_optimizer_error']}]" if r["llm_optimizer_error"] else ""
            why += f"  [knee: {r['knee_error']}]" if r["knee_error"] else ""
            why += R.assumed_lengths_marker(r.get("assumed_lengths") or [])
            print(f"  {r['id']:11} {r['gpu']:9} {r['engine']:18} {r['mode'][:14]:14} " + "; ".join(parts) + why)
    if s["skipped_reasons"]:
        # Also with --quiet: a row left out changes what the medians cover.
        print(f"Not predicted ({len(s['skipped_reasons'])} rows):")
        for why in s["skipped_reasons"]:
            print(f"  {why}")
    if not quiet:
        print()

    def line(name, med):
        return f"  {name:34}" + "".join(f"{_pct(med[m]):>8} ({med[m + '_n']:>2})" for m in METRICS)

    print("Median APE (rows)                   " + "".join(f"{LABELS[m]:>13}" for m in METRICS))
    print(line("knee, every predicted row", s["knee"]))
    if s.get("assumed_lengths"):
        print(line("knee, rows with published lengths", s["knee_published_lengths"]))
    print(line("knee, rows llm-optimizer covers", s["knee_on_lo_rows"]))
    print(line("llm-optimizer formulas", s["llm_optimizer"]))
    for group, title in (("by_gpu", "GPU"), ("by_engine", "engine")):
        print(f"By {title} (knee / llm-optimizer)")
        for k, v in s[group].items():
            cells = "".join(f"{_pct(v['knee'][m]):>6}/{_pct(v['llm_optimizer'][m]):<6}" for m in METRICS)
            print(f"  {k:14} {v['rows']:>3} rows  {cells}")
    print(
        f"Coverage: {s['rows']} rows, {s['predicted']} predicted by knee, {s['skipped']} not predicted (reasons above); "
        f"llm-optimizer predicts {s['llm_optimizer_covered']} (no L4/A10G, no FP8 on A100, L40S read as L40, "
        "rows its memory check rejects)"
    )
    if "honest" in rep:
        h = rep["honest"]
        print()
        print(
            f"Honest validation (issue 11): parameters fitted in-sample on all {h['rows']} predicted rows, and leave-one-source-out "
            f"over {h['sources']} sources (source = {'id prefix' if h['key'] == 'id' else 'id prefix without trailing digits'}); "
            f"{h['method']}; {h['seconds']:.0f} s"
        )
        if not quiet:
            print("Per row: APE hand-set / fitted / LOSO")
            for r in rep["rows"]:
                cells = [
                    f"{LABELS[m]} {_pct(r['ape_knee'][m])}/{_pct(r['ape_fitted'][m])}/{_pct(r['ape_loso'][m])}"
                    for m in METRICS
                    if r["measured"][m] is not None
                ]
                print(f"  {r['id']:14} {r['source']:12} " + "  ".join(cells))
        for ln in format_compare(h, h["params"]):
            print(ln)
    print(s["line"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.accuracy", description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="*", default=[str(R.DEFAULT)], help="JSONL files, read together (default: measurements.jsonl)")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout (the summary inside), nothing else")
    ap.add_argument("--quiet", action="store_true", help="summaries only")
    ap.add_argument(
        "--loso",
        action="store_true",
        help="honest validation: fit the physical parameters in-sample and leave-one-source-out (bench/fit.py; ~1 min per 100 rows)",
    )
    ap.add_argument(
        "--loso-key",
        choices=("id", "publisher"),
        default="id",
        help="source of a row: its id prefix (default), or that prefix without trailing digits (trt09/trt014/trt10 -> trt)",
    )
    ap.add_argument(
        "--bands-out",
        metavar="FILE",
        help="write the error bands (10th/90th percentile of measured/predicted per metric) that knee estimate shows: "
        "from the held-out predictions with --loso, else from the shipped estimator on these rows",
    )
    ap.add_argument(
        "--sources",
        metavar="A,B",
        help="only the rows of these sources (id prefixes, e.g. smwalk,infsim2,nimbench: the cases issue 11 names)",
    )
    add_jobs_argument(ap)
    a = ap.parse_args(argv)
    for p in a.path:
        if not Path(p).exists():
            print(f"bench.accuracy: {p} does not exist", file=sys.stderr)
            return 2
    try:
        rep = run(a.path, loso=a.loso, key=a.loso_key, sources=a.sources.split(",") if a.sources else None, jobs=a.jobs)
    except json.JSONDecodeError as e:
        print(f"bench.accuracy: {' '.join(a.path)} is not JSONL: {e}", file=sys.stderr)
        return 2
    if a.bands_out:
        from bench.bands import print_bands, write_bands

        # To stderr: with --json, stdout holds the report alone.
        print_bands(write_bands(rep["rows"], a.bands_out, a.path, "knee_loso" if a.loso else "knee"), file=sys.stderr)
    if a.json:
        json.dump(R.clean(rep), sys.stdout, indent=1, default=str, allow_nan=False)
        print()
    else:
        print_report(rep, a.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
