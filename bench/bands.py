"""Error bands for knee's predictions, from measured residuals (issue 11 item 5).

For each metric, the 10th and 90th percentiles of measured/predicted over rows the predicting
model never saw: with ``--loso``, each row's leave-one-source-out prediction (what ships:
calibration.toml's values are fitted on both measurement files, so the shipped estimator's
own residuals on them are in-sample). knee multiplies a
prediction by them to show a low and a high (core/estimate/bands.py); deploy sizing takes the
pessimistic edge. Written by ``python -m bench.accuracy FILES --bands-out core/estimate/bands.json``.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np

from bench.rows import METRICS


def write_bands(results: list[dict], out: str, paths: list[str], key: str = "knee") -> dict:
    bands: dict[str, dict] = {}
    for m in METRICS:
        ratios = []
        for r in results:
            pred = (r.get(key) or {}).get(m)
            meas = r["measured"].get(m)
            if pred and meas and pred > 0 and meas > 0:
                ratios.append(meas / pred)
        if len(ratios) < 10:
            continue  # too few held-out rows to say anything about this metric
        lo, hi = np.percentile(ratios, [10, 90])
        bands[m] = {"low_ratio": round(float(lo), 4), "high_ratio": round(float(hi), 4), "rows": len(ratios)}
    doc = {
        "what": "10th/90th percentile of measured/predicted per metric (bench/bands.py)",
        "predictions": "leave-one-source-out"
        if key == "knee_loso"
        else "shipped estimator (in-sample: calibration.toml ships the fit on both measurement files; --loso gives the honest bands)",
        "files": [Path(p).name for p in paths],
        "date": datetime.date.today().isoformat(),
        "bands": bands,
    }
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")
    return doc
