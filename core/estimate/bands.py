"""Error bands on the estimator's predictions, from measured residuals.

``bands.json`` (written by ``python -m bench.accuracy FILES --bands-out``, see bench/bands.py)
holds, per metric, the 10th and 90th percentile of measured/predicted over published
measurements (the calibration file and bench/data/published.jsonl), each row predicted by
parameters fitted without its source (leave-one-source-out): the shipped parameters are
fitted on those rows, so their own residuals would be too narrow. A prediction ``v`` is shown as ``v`` with a low
``v·low_ratio`` and a high ``v·high_ratio``: for latencies the high is the pessimistic edge,
for throughputs the low is. They are wide where knee is unsure, on purpose: sizing an
endpoint on the optimistic number under-provisions it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

_FILE = Path(__file__).with_name("bands.json")
# Which band a prediction key uses (TPOT shares ITL's: same mean by definition).
_METRIC_OF = {
    "ttft_ms": "ttft_ms",
    "itl_ms": "itl_ms",
    "tpot_ms": "itl_ms",
    "e2e_s": "e2e_s",
    "req_per_s": "req_per_s",
    "output_tok_per_s": "output_tok_per_s",
}
LATENCIES = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_s")


@lru_cache(maxsize=1)
def table() -> dict:
    """The bundled bands document (empty bands where the file is missing)."""
    try:
        return json.loads(_FILE.read_text())
    except FileNotFoundError:
        return {"bands": {}}


def band(key: str, value: float | None) -> dict[str, float] | None:
    """``{"low", "high"}`` around ``value`` for a prediction key, None where no band is known."""
    b = table()["bands"].get(_METRIC_OF.get(key, key))
    if b is None or value is None:
        return None
    return {"low": value * b["low_ratio"], "high": value * b["high_ratio"]}


def pessimistic(key: str, value: float) -> float:
    """The edge to size on: the high of a latency, the low of a throughput (value if unknown)."""
    b = band(key, value)
    if b is None:
        return value
    return b["high"] if key in LATENCIES else b["low"]


def source() -> str:
    t = table()
    return f"10th-90th percentile of measured/predicted, {t.get('predictions', '?')} ({', '.join(t.get('files', []))}, {t.get('date', '?')})"
