"""Fit on one file, judge on another: the cleanest out-of-sample check of the estimator.

    python -m bench.transfer [--train PATH ...] [--test PATH ...] [--json]

The cost model's physical parameters (:mod:`bench.fit`: per GPU architecture, per
interconnect, per engine profile, each pulled toward its ``calibration.toml`` prior) are
fitted on every predictable row of the training files (default: the calibration file,
``shared/calibration/measurements.jsonl``) and then used, unchanged, to predict every row of
the test files (default: ``bench/data/published.jsonl``, which no parameter was ever tuned
on). Prints the median APE per metric on the test rows with the shipped (hand-set)
calibration and with the fitted one, per GPU, and the parameters that moved; the last line
is a one-line summary. Leave-one-source-out inside one file (``bench.accuracy --loso``) holds
out a source at a time; this holds out a whole collection made at another time by another
hand.
"""

from __future__ import annotations

import argparse
import json
import time

from bench import fit, fit_priors
from bench import rows as R
from bench.rows import LABELS, METRICS

DEFAULT_TEST = "bench/data/published.jsonl"


def _apes(its, preds) -> list[dict]:
    out = []
    for it, p in zip(its, preds):
        out.append(
            {
                "id": it.id,
                "gpu": it.row["gpu"],
                "ape": {m: R.ape((p or {}).get(m), it.measured.get(m)) for m in METRICS},
            }
        )
    return out


def _medians(res: list[dict]) -> dict:
    return R.median_apes(res, "ape")


def run(train_paths, test_paths) -> dict:
    t0 = time.perf_counter()
    train, _ = fit.items(R.load_all(train_paths))
    test, skipped = fit.items(R.load_all(test_paths))
    f = fit.fit(train)
    shipped = _apes(test, fit.predict_with(test, None))
    fitted = _apes(test, fit.predict_with(test, f.params))
    by_gpu = {}
    for g in sorted({r["gpu"] for r in shipped}):
        by_gpu[g] = {
            "rows": sum(1 for r in shipped if r["gpu"] == g),
            "shipped": _medians([r for r in shipped if r["gpu"] == g]),
            "fitted": _medians([r for r in fitted if r["gpu"] == g]),
        }
    return {
        "train": [str(p) for p in train_paths],
        "test": [str(p) for p in test_paths],
        "train_rows": len(train),
        "test_rows": len(test),
        "test_skipped": len(skipped),
        "shipped": _medians(shipped),
        "fitted": _medians(fitted),
        "by_gpu": by_gpu,
        "changed": {k: list(v) for k, v in f.changed.items()},
        "prior": {"sigma": fit_priors.PRIOR_SIGMA, "weight": fit_priors.PRIOR_WEIGHT},
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.transfer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", nargs="+", default=[str(R.DEFAULT)], help="JSONL files the parameters are fitted on")
    ap.add_argument("--test", nargs="+", default=[DEFAULT_TEST], help="JSONL files judged (never fitted on)")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout, nothing else")
    a = ap.parse_args(argv)
    rep = run(a.train, a.test)
    head = "".join(f"{LABELS[m]:>13}" for m in METRICS)
    line = (
        f"SUMMARY fitted on {rep['train_rows']} rows of {', '.join(rep['train'])}; judged on {rep['test_rows']} rows of "
        f"{', '.join(rep['test'])} ({rep['test_skipped']} skipped): shipped calibration "
        + ", ".join(f"{LABELS[m]} {_pct(rep['shipped'][m])}" for m in METRICS)
        + " | fitted "
        + ", ".join(f"{LABELS[m]} {_pct(rep['fitted'][m])}" for m in METRICS)
    )
    rep["line"] = line
    if a.json:
        print(json.dumps(rep, indent=1))
        return 0
    print(f"Median APE on the test rows (rows)   {head}")
    for col in ("shipped", "fitted"):
        print(f"  {col + ' calibration':34}" + "".join(f"{_pct(rep[col][m]):>8} ({rep[col][m + '_n']:>3})" for m in METRICS))
    print("By GPU: shipped / fitted")
    for g, v in rep["by_gpu"].items():
        print(
            f"  {g:12} {v['rows']:>3} rows  "
            + "  ".join(f"{LABELS[m]} {_pct(v['shipped'][m])}/{_pct(v['fitted'][m])}" for m in METRICS if v["shipped"][m + "_n"])
        )
    print(f"Parameters moved by the fit (prior sigma {rep['prior']['sigma']}, weight {rep['prior']['weight']}):")
    for k, (a0, a1) in rep["changed"].items():
        print(f"  {k:40} {a0:>8.3g} -> {a1:.3g}")
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
