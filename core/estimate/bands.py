"""Error bands on the estimator's predictions, from measured residuals.

``bands.json`` (written by ``python -m bench.accuracy FILES --bands-out``, see bench/bands.py)
holds, per metric, the 10th and 90th percentile of measured/predicted over published
measurements (the calibration file and bench/data/published.jsonl), each row predicted by
parameters fitted without its source (leave-one-source-out): the shipped parameters are
fitted on those rows, so their own residuals would be too narrow. A prediction ``v`` is shown as ``v`` with a low
``v·low_ratio`` and a high ``v·high_ratio``: for latencies the high is the pessimistic edge,
for throughputs the low is. The pessimistic edge sits at the percentile where it held for 90%
of held-out sources' rows (each source against a band built without it; on both files
p8-p8.5 for throughputs, p91-p93.5 for latencies, where the 10th/90th held for 86-89%).
They are wide where knee is unsure, on purpose: sizing an endpoint on the optimistic number
under-provisions it.

An engine takes its own residuals' band for a metric (``by_engine``) only where that band's
pessimistic edge held for 90% of held-out sources' rows (bench/bands.py), the edge moved out
from the 10th percentile until it holds, as the pooled band's is; on both files (2026-12-07)
vLLM keeps its own for TTFT, ITL, req/s and out tok/s. Any other engine or metric takes the
pooled band.

A model kind (``by_kind``: "moe" for mixture-of-experts models, "dense" for the rest) takes its
own band for a metric by the same rule, and before its engine's: knee's misses on published MoE
runs (DeepSeek-R1/V3, GLM-4.5-Air, Qwen3-235B, MiniMax on vLLM, measured up to half the
predicted throughput) are much wider than on dense ones, so a band pooled over both is too
narrow for the first and too wide for the second.

An engine's rows of one model kind (``by_engine_kind``: "vllm|dense") take their own band by
the same rule again, before the kind's: the dense band pools TGI 1.0's GPTQ runs and SGLang's
with vLLM's, and its low edge on throughput (0.42x) sized a vLLM deploy of a dense model at
2.4x the instances its prediction needs; vLLM's own dense rows hold at 0.75x
(bench/bands.py).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from core.estimate.params import canonical_engine

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
METRIC_LABELS = {"ttft_ms": "TTFT", "itl_ms": "ITL", "e2e_s": "E2E", "req_per_s": "req/s", "output_tok_per_s": "out tok/s"}
LATENCIES = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_s")


@lru_cache(maxsize=1)
def table() -> dict:
    """The bundled bands document (empty bands where the file is missing)."""
    try:
        return json.loads(_FILE.read_text())
    except FileNotFoundError:
        return {"bands": {}}


def engine_key(engine: str | None) -> str:
    """The engine a band is kept under: its canonical name, a vLLM profile (vllm-async,
    vllm-legacy) or the simulator (which stands in for vLLM) under vllm."""
    name = canonical_engine(engine)
    return "vllm" if name == "sim" or name.startswith("vllm-") else name


def engine_kind_key(engine: str | None, kind: str) -> str:
    """The key an engine's runs of one model kind are kept under ("vllm|dense"): by_engine_kind
    and its held-out check, as bench/bands.py writes them and this module reads them."""
    return f"{engine_key(engine)}|{kind}"


KIND_LABELS = {"moe": "MoE", "dense": "dense"}
POOLED_ROWS = "all engines' rows"  # whose rows the pooled band comes from


def kind_label(kind: str | None) -> str:
    """How a model kind reads in a sentence: "MoE", "dense"."""
    return KIND_LABELS.get(kind or "", kind or "")


def kind_of(is_moe: bool) -> str:
    """The model kind a band and a track record are kept under."""
    return "moe" if is_moe else "dense"


def model_kind(model: str) -> str | None:
    """The kind of ``model`` ("moe" or "dense") where its config is at hand without the
    network (a local directory, the bundled catalog, the HF cache: ``load_model(offline=True)``),
    else None, which takes the bands every model shares: for a stored trial's predictions,
    whose readers fetch nothing."""
    from core.catalog.models import load_model
    from core.errors import KneeError

    try:
        return kind_of(load_model(model, offline=True).is_moe)
    except KneeError:
        return None


def _whose_rows(metric: str, engine: str | None, kind: str | None, doc: dict | None = None) -> tuple[dict | None, str]:
    """(the band, whose rows it comes from) for one metric: the engine's own rows of the
    kind's, the kind's own, the engine's own, else the pooled one, from ``doc`` (a bands
    document; the shipped one by default)."""
    t = table() if doc is None else doc
    if engine and kind and metric in (own := t.get("by_engine_kind", {}).get(engine_kind_key(engine, kind), {})):
        return own[metric], f"{engine_key(engine)} rows of {kind_label(kind)} models"
    if kind and metric in (own := t.get("by_kind", {}).get(kind, {})):
        return own[metric], f"{kind_label(kind)} models' rows"
    if engine and metric in (own := t.get("by_engine", {}).get(engine_key(engine), {})):
        return own[metric], f"{engine_key(engine)} rows"
    return t["bands"].get(metric), POOLED_ROWS


def ratios(key: str, engine: str | None = None, kind: str | None = None, doc: dict | None = None) -> dict | None:
    """The band's ``low_ratio``/``high_ratio`` for a prediction key: ``engine``'s own rows of
    the model kind (``kind``: "moe" or "dense") where they have one for this metric, else the
    kind's own, else ``engine``'s own, else the pooled one; None where no band is known. ``doc``: a bands document other than
    the shipped one (bench/bands.py judges the one it writes)."""
    return _whose_rows(_METRIC_OF.get(key, key), engine, kind, doc)[0]


def band(key: str, value: float | None, engine: str | None = None, kind: str | None = None) -> dict[str, float] | None:
    """``{"low", "high"}`` around ``value`` for a prediction key (of ``engine``'s
    predictions of a ``kind`` model when given), None where no band is known."""
    b = ratios(key, engine, kind)
    if b is None or value is None:
        return None
    return {"low": value * b["low_ratio"], "high": value * b["high_ratio"]}


def summary_band(key: str, value: float | None, engine: str | None = None, kind: str | None = None) -> tuple[float, float] | None:
    """(low, high) around a value under a ``vllm bench serve`` summary key (``p99_e2el_ms``,
    ``request_throughput``, ``tokens_per_s_per_user``...): the band of the metric's mean,
    applied to whichever statistic the key names (the residuals are of means; a p99 moves
    at least as much). None for a key no band covers."""
    if key in ("request_throughput", "request_goodput", "total_token_throughput", "input_throughput"):
        metric = "req_per_s"  # these scale with the request rate
    elif key.startswith(("output_throughput", "tokens_per_s")):
        metric = "output_tok_per_s"
    else:
        stem = key.rsplit("_ms", 1)[0].rsplit("_", 1)[-1]
        metric = {"ttft": "ttft_ms", "itl": "itl_ms", "tpot": "itl_ms", "e2el": "e2e_s"}.get(stem, "")
    b = band(metric, value, engine, kind) if metric else None
    return (b["low"], b["high"]) if b else None


def summary_bands(summary: dict, engine: str | None = "vllm", kind: str | None = None) -> dict[str, dict[str, float]]:
    """``{key: {"low", "high"}}`` for every numeric key of a ``vllm bench serve`` summary a
    band covers: what a simulated load point (a prediction, not a measurement) carries."""
    out: dict[str, dict[str, float]] = {}
    for key, value in summary.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            b = summary_band(key, float(value), engine, kind)
            if b is not None:
                out[key] = {"low": b[0], "high": b[1]}
    return out


def pessimistic(key: str, value: float, engine: str | None = None, kind: str | None = None) -> float:
    """The edge to size on: the high of a latency, the low of a throughput (value if unknown)."""
    b = band(key, value, engine, kind)
    if b is None:
        return value
    return b["high"] if key in LATENCIES else b["low"]


def scope(engine: str | None = None, kind: str | None = None) -> str:
    """Whose residuals the bands of ``engine``'s predictions (of a ``kind`` model) come
    from: "vllm rows", or per metric where they differ ("MoE models' rows for req/s, out
    tok/s, all engines' otherwise")."""
    by_whose: dict[str, list[str]] = {}
    for m in table()["bands"]:
        by_whose.setdefault(_whose_rows(m, engine, kind)[1], []).append(METRIC_LABELS.get(m, m))
    pooled = by_whose.pop(POOLED_ROWS, None)
    if not by_whose:
        return POOLED_ROWS
    if len(by_whose) == 1 and not pooled:
        return next(iter(by_whose))
    own = "; ".join(f"{w} for {', '.join(ms)}" for w, ms in by_whose.items())
    return f"{own}, all engines' otherwise" if pooled else own


def whose(key: str, engine: str | None = None, kind: str | None = None) -> str:
    """Whose rows one prediction key's band comes from: "MoE models' rows", "vllm rows" or
    "all engines' rows"."""
    return _whose_rows(_METRIC_OF.get(key, key), engine, kind)[1]


def provenance() -> str:
    """Short: how the residuals were predicted ("held-out runs" for leave-one-source-out)."""
    return "held-out runs" if table().get("predictions") == "leave-one-source-out" else "in-sample runs"


def source(engine: str | None = None, key: str | None = None, kind: str | None = None) -> str:
    """Where the bands (of ``key`` alone, when given) come from: the percentiles, whose
    rows, how predicted, which files."""
    t = table()
    rows = whose(key, engine, kind) if key else scope(engine, kind)
    return f"measured/predicted, 10th-90th percentile with the pessimistic edge where it held for 90% of held-out sources, {rows}, {t.get('predictions', '?')} ({', '.join(t.get('files', []))}, {t.get('date', '?')})"


def _unseen(kind: str | None, engine: str | None = None) -> tuple[dict[str, dict], str | None]:
    """(the held-out files' check of the shipped bands, whose runs it is: "vllm runs of dense
    models", "dense models' runs", or None for all runs), the most specific kept first, as
    the bands themselves are looked up (:func:`_whose_rows`)."""
    t = table()
    if engine and kind:
        own = (t.get("held_out_files_coverage_by_engine_kind") or {}).get(engine_kind_key(engine, kind))
        if own:
            return dict(own), f"{engine_key(engine)} runs of {kind_label(kind)} models"
    own = (t.get("held_out_files_coverage_by_kind") or {}).get(kind or "")
    if own:
        return dict(own), f"{kind_label(kind)} models' runs"
    return dict(t.get("held_out_files_coverage") or {}), None


def unseen_check(kind: str | None = None, engine: str | None = None) -> dict[str, dict]:
    """How the shipped bands did on runs of files no parameter was fitted on (the held-out
    files; bench/bands.py ``files_coverage``), per metric: ``held`` (share of runs whose
    pessimistic edge held), ``held_per_source``, ``inside`` (share inside both edges), ``rows``
    and ``sources``; ``engine``'s runs of a model ``kind`` where they have their own band and
    check, else the kind's own runs where it has them. {} where the bands file has no such
    check."""
    return _unseen(kind, engine)[0]


def unseen_line(kind: str | None = None, engine: str | None = None) -> str | None:
    """One sentence of :func:`unseen_check` for a reader of the bands: where the pessimistic
    edge held for fewer unseen runs than the 90% it was set for, the reader should know."""
    check, whose = _unseen(kind, engine)
    if not check:
        return None
    cells = ", ".join(f"{METRIC_LABELS.get(m, m)} {c['held']:.0%}" for m, c in check.items())
    sources = max(c["sources"] for c in check.values())
    return f"on {whose or 'runs'} from {sources} sources knee was never fitted on, the pessimistic edge held for: {cells} (set for 90%)"
