"""Error bands for knee's predictions, from measured residuals (issue 11 item 5).

For each metric, the 10th and 90th percentiles of measured/predicted over rows the predicting
model never saw: with ``--loso``, each row's leave-one-source-out prediction (what ships:
calibration.toml's values are fitted on both measurement files, so the shipped estimator's
own residuals on them are in-sample). knee multiplies a prediction by them to show a low and
a high (core/estimate/bands.py); deploy sizing takes the pessimistic edge.

Per engine too: an engine with at least ``MIN_ROWS`` rows from ``MIN_SOURCES`` sources for a
metric gets its own band for it (``by_engine``), because one engine's misses say little about
another's. On the 578 rows of both files vLLM's req/s band is 0.57-1.27x where the pooled one,
widened by 2023 TGI and SGLang rows, is 0.42-1.34x: a vLLM endpoint sized on the pooled low
edge would take a third more instances than its own residuals call for. Engines with fewer
rows keep the pooled band (it includes their rows).

    python -m bench.accuracy FILES --loso --bands-out core/estimate/bands.json    (measures, then writes)
    python -m bench.bands REPORT.json --files A.jsonl,B.jsonl --out core/estimate/bands.json
        (rewrites the bands from a saved ``bench.accuracy --loso --json`` report)
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

import numpy as np

from bench.fit import source_of
from bench.rows import METRICS
from core.estimate.params import canonical_engine

MIN_ROWS = 50  # rows of one engine for a metric before it gets a band of its own
MIN_SOURCES = 4  # ... from at least this many sources (one benchmark's quirks are not an engine's)


def _bands(results: list[dict], key: str, min_rows: int = 10, min_sources: int = 1) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for m in METRICS:
        ratios, sources = [], set()
        for r in results:
            pred = (r.get(key) or {}).get(m)
            meas = r["measured"].get(m)
            if pred and meas and pred > 0 and meas > 0:
                ratios.append(meas / pred)
                sources.add(r.get("source") or (source_of(r) if r.get("id") else None))
        if len(ratios) < min_rows or len(sources) < min_sources:
            continue  # too few held-out rows to say anything about this metric
        lo, hi = np.percentile(ratios, [10, 90])
        out[m] = {"low_ratio": round(float(lo), 4), "high_ratio": round(float(hi), 4), "rows": len(ratios)}
        if min_sources > 1:
            out[m]["sources"] = len(sources)
    return out


def write_bands(results: list[dict], out: str, paths: list[str], key: str = "knee") -> dict:
    by_engine: dict[str, dict] = {}
    for engine in sorted({canonical_engine(r.get("engine_name")) for r in results if r.get("engine_name")}):
        own = _bands([r for r in results if canonical_engine(r.get("engine_name")) == engine], key, MIN_ROWS, MIN_SOURCES)
        if own:
            by_engine[engine] = own
    doc = {
        "what": "10th/90th percentile of measured/predicted per metric (bench/bands.py); by_engine: an engine's own rows, "
        f"where it has at least {MIN_ROWS} rows from {MIN_SOURCES} sources for the metric",
        "predictions": "leave-one-source-out"
        if key == "knee_loso"
        else "shipped estimator (in-sample: calibration.toml ships the fit on both measurement files; --loso gives the honest bands)",
        "files": [Path(p).name for p in paths],
        "date": datetime.date.today().isoformat(),
        "bands": _bands(results, key),
        "by_engine": by_engine,
    }
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description="Write core/estimate/bands.json from a saved `bench.accuracy --loso --json` report.")
    ap.add_argument("report", help="the JSON report (its rows carry knee_loso)")
    ap.add_argument("--files", required=True, help="comma-separated names of the measurement files the report was run on")
    ap.add_argument("--out", default="core/estimate/bands.json")
    a = ap.parse_args()
    rows = json.loads(Path(a.report).read_text())["rows"]
    key = "knee_loso" if any(r.get("knee_loso") for r in rows) else "knee"
    doc = write_bands(rows, a.out, a.files.split(","), key)
    for scope, b in [("all", doc["bands"]), *doc["by_engine"].items()]:
        print(f"{scope:13} " + "  ".join(f"{m} {v['low_ratio']:.2f}-{v['high_ratio']:.2f} ({v['rows']})" for m, v in b.items()))


if __name__ == "__main__":
    main()
