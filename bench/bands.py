"""Error bands for knee's predictions, from measured residuals (issue 11 item 5).

For each metric, the 10th and 90th percentiles of measured/predicted over rows the predicting
model never saw (the pessimistic edge moved out to where it holds, below): with ``--loso``, each row's leave-one-source-out prediction (what ships:
calibration.toml's values are fitted on both measurement files, so the shipped estimator's
own residuals on them are in-sample). knee multiplies a prediction by them to show a low and
a high (core/estimate/bands.py); deploy sizing takes the pessimistic edge (the low of a
throughput, the high of a latency).

Is a band honest for a setup none of its rows came from? ``coverage`` answers it the same
way the predictions are judged: each source's rows against the band built from the other
sources' rows. A pessimistic edge should hold for 90% of them; at the 10th/90th percentile
the pooled edges held for 86-89% on both files (one large source's rows move a percentile
that a band built without them cannot know), so each sits at the percentile where it holds
(``calibrated_tail``: p8 to p8.5 for throughputs, p91 to p93.5 for latencies).

Per engine: an engine's own residuals give a narrower band (vLLM's req/s 0.57-1.27x against
the pooled 0.42-1.34x), but narrower is not better unless it holds. An engine gets its own
band for a metric (``by_engine``) only where it has ``MIN_ROWS`` rows from ``MIN_SOURCES``
sources and its own band's pessimistic edge, built without each source in turn, holds for
at least ``NOMINAL`` of that source's rows. On the 578 rows of both files it does not for
vLLM's throughputs and ITL (82% of held-out vLLM rows against the pooled band's 90-93%: the
spread between one benchmark's setup and another's is wider than within an engine's pooled
rows), so they keep the pooled band. Since 2026-12-07 an engine's or a kind's edge moves out
from the 10th percentile until it holds, as the pooled band's does (``own_bands``); vLLM
then keeps its own for TTFT, ITL, req/s and out tok/s.

Per model kind (``by_kind``, ``model_kind`` in the report's rows: "moe" or "dense"): the same
rule, and a kind's band comes before its engine's (core/estimate/bands.py). knee's held-out
error splits by kind far more than by GPU or engine: on vLLM, out tok/s 9% median on dense
models against 32% on MoE ones (LOSO, with the held-out files as shipped; 37% before FP8
experts took their own efficiency), so the pooled band's low edge held for 85% of held-out MoE
rows and its own (0.32x, at p9) for 90%. The
track record keeps GPU x engine x kind and engine x kind groups too, looked up first.

Per engine and kind (``by_engine_kind``, "vllm|dense"): the same rule again, looked up before
the kind's own. A dense model on vLLM, the common case, otherwise took the dense band, which
pools TGI 1.0's GPTQ runs (measured at a fifth to half of knee's throughput) and SGLang's
with vLLM's: its low edge on out tok/s was 0.42x, so a deploy sized on it asked for 2.4x the
instances the prediction needs. vLLM's own dense rows give 0.75x, and that edge, built
without each source in turn, held for 92% of the source's rows (2026-12-07, session 36).

    python -m bench.accuracy FILES --loso --bands-out core/estimate/bands.json    (measures, then writes)
    python -m bench.bands REPORT.json --files A.jsonl,B.jsonl --out core/estimate/bands.json
        (rewrites the bands from a saved ``bench.accuracy --loso --json`` report)
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.fit import source_of
from bench.rows import METRICS, ape
from core.estimate.bands import LATENCIES, engine_key, engine_kind_key, ratios
from core.estimate.params import canonical_engine

MIN_ROWS = 50  # rows of one engine for a metric before it may have a band of its own
MIN_SOURCES = 4  # ... from at least this many sources (one benchmark's quirks are not an engine's)
NOMINAL = 0.9  # a pessimistic edge (10th or 90th percentile) should hold for this share of unseen rows
TAILS = tuple(t / 2 for t in range(20, 3, -1))  # 10%, 9.5%, ... 2%: the pessimistic edge's percentile, searched
TRACK_ROWS = 10  # held-out rows a GPU / engine group needs before its track record is stated
TRACK_SOURCES = 2  # ... from this many sources (one benchmark's setup is not a GPU's)
TRACK_METRIC_ROWS = 5  # rows behind one metric's median error in a stated group


def _source(r: dict) -> str:
    return r.get("source") or source_of(r)


def _ratio(r: dict, m: str, key: str) -> float | None:
    pred, meas = (r.get(key) or {}).get(m), r["measured"].get(m)
    return meas / pred if pred and meas and pred > 0 and meas > 0 else None


def _band(results: list[dict], m: str, key: str, min_rows: int, min_sources: int, tail: float = 10.0) -> tuple[float, float, int, int] | None:
    """(low, high, rows, sources): the 10th and 90th percentiles of measured/predicted, the
    pessimistic edge at ``tail`` percent instead (the low of a throughput, the high of a latency)."""
    pairs = [(x, _source(r)) for r in results for x in [_ratio(r, m, key)] if x is not None]
    sources = {s for _, s in pairs}
    if len(pairs) < min_rows or len(sources) < min_sources:
        return None  # too few held-out rows to say anything about this metric
    lo, hi = np.percentile([x for x, _ in pairs], [10, 100 - tail] if m in LATENCIES else [tail, 90])
    return float(lo), float(hi), len(pairs), len(sources)


def _holds(m: str, x: float, lo: float, hi: float) -> bool:
    """The pessimistic edge holds: a throughput at or above its low, a latency at or below its high."""
    return x <= hi if m in LATENCIES else x >= lo


def coverage(
    results: list[dict],
    m: str,
    key: str,
    rows_of: Callable[[dict], bool],
    min_rows: int = 10,
    min_sources: int = 1,
    tail: float = 10.0,
    band_rows: Callable[[dict], bool] | None = None,
    per_source: bool = False,
) -> tuple[float, int]:
    """Share of the rows ``rows_of`` selects whose ratio the pessimistic edge holds, each
    source's rows against the band of the other sources' rows (those ``band_rows`` selects,
    the same rows by default; a row whose band cannot be built counts as not held), and how
    many rows were judged. ``per_source``: the mean over sources of each one's share instead
    (every source weighs the same, as a user's setup is one more source; by rows, one large
    source's spread moves the edge)."""
    band_rows = band_rows or rows_of
    held = judged = 0
    shares = []
    for s in sorted({_source(r) for r in results if rows_of(r)}):
        b = _band([r for r in results if band_rows(r) and _source(r) != s], m, key, min_rows, min_sources, tail)
        mine = [x for r in results if rows_of(r) and _source(r) == s and (x := _ratio(r, m, key)) is not None]
        ok = sum(b is not None and _holds(m, x, b[0], b[1]) for x in mine)
        judged, held = judged + len(mine), held + ok
        if mine:
            shares.append(ok / len(mine))
    if per_source:
        return (float(np.mean(shares)) if shares else 0.0), judged
    return (held / judged if judged else 0.0), judged


def calibrated_tail(results: list[dict], m: str, key: str, per_source: bool = False) -> tuple[float, float]:
    """The pooled band's pessimistic percentile: the largest tail (10%, then 9.5%, ...) at
    which its edge holds for ``NOMINAL`` of held-out sources' rows, and that share. Each
    source's rows judge a band built without them, as the predictions themselves are; the
    10th percentile of all rows' residuals held for 86-89% on both files (one large
    source's rows move a percentile the others' band cannot know)."""
    if len({_source(r) for r in results if _ratio(r, m, key) is not None}) < 2:
        return 10.0, float("nan")  # one source: nothing held out to judge by
    share = 0.0
    for tail in TAILS:
        share, _ = coverage(results, m, key, lambda r: True, tail=tail, per_source=per_source)
        if share >= NOMINAL:
            return tail, share
    return TAILS[-1], share


def _record(rows: list[dict], key: str) -> dict:
    """Rows, sources and, per metric with ``TRACK_METRIC_ROWS`` rows, the median absolute
    error and the median measured/predicted of ``rows``' predictions under ``key``."""
    metrics: dict[str, dict] = {}
    for m in METRICS:
        judged = [(r, x) for r in rows if (x := _ratio(r, m, key)) is not None]
        if len(judged) >= TRACK_METRIC_ROWS:
            apes = [ape(r[key][m], r["measured"][m]) for r, _ in judged]
            metrics[m] = {
                "median_ape": round(float(np.median(apes)), 3),
                "median_ratio": round(float(np.median([x for _, x in judged])), 3),
                "rows": len(judged),
            }
    return {"rows": len(rows), "sources": len({_source(r) for r in rows}), "metrics": metrics}


def track_record(results: list[dict], key: str) -> dict:
    """How close knee came on published runs, by GPU, engine and model kind
    (``gpu_engine_kind``: "H200|vllm|moe"), by engine and model kind, by GPU and engine
    (``gpu_engine``: "L4|vllm"), by GPU, by engine and over all rows: what a user reads beside a prediction for that GPU
    and engine. A group is kept with ``TRACK_ROWS`` rows from ``TRACK_SOURCES`` sources; with
    ``--loso`` each row was predicted by parameters fitted without its source (the held-out
    files' rows, by the shipped parameters, which never saw them). A row whose source does
    not publish its lengths is left out: its error is partly the bench's guess of them, and a
    user's estimate always has its own."""
    groups: dict[str, dict[str, list[dict]]] = {"gpu_engine_kind": {}, "engine_kind": {}, "gpu_engine": {}, "gpu": {}, "engine": {}}
    judged = [r for r in results if not r.get("assumed_lengths") and any(_ratio(r, m, key) for m in METRICS)]
    for r in judged:
        engine = canonical_engine(r.get("engine_name"))
        kind = r.get("model_kind")
        groups["engine"].setdefault(engine, []).append(r)
        if kind:
            groups["engine_kind"].setdefault(f"{engine}|{kind}", []).append(r)
        if r.get("gpu"):
            groups["gpu_engine"].setdefault(f"{r['gpu']}|{engine}", []).append(r)
            groups["gpu"].setdefault(r["gpu"], []).append(r)
            if kind:
                groups["gpu_engine_kind"].setdefault(f"{r['gpu']}|{engine}|{kind}", []).append(r)
    out: dict = {
        level: {
            name: _record(rows, key)
            for name, rows in sorted(by.items())
            if len(rows) >= TRACK_ROWS and len({_source(r) for r in rows}) >= TRACK_SOURCES
        }
        for level, by in groups.items()
    }
    out["all"] = _record(judged, key)
    return out


def files_coverage(doc: dict, unseen: list[dict]) -> dict:
    """How the bands of ``doc`` did on rows of files no parameter was fitted on (the held-out
    files, predicted by the shipped estimator under ``knee``), each row under the band knee
    would show it (its kind's, its engine's, else the pooled one): per metric, the share of
    rows whose pessimistic edge held, the mean of that share over their sources (a user's
    setup is one more source, and one large source moves the row share), and the share inside
    both edges. The bands are built from the fitting files' leave-one-source-out residuals
    alone, so this is their out-of-sample check. Rows whose source does not publish its
    lengths are left out, as in the track record."""
    out: dict[str, dict] = {}
    for m in doc["bands"]:
        by_source: dict[str, list[tuple[bool, bool]]] = {}
        for r in unseen:
            if r.get("assumed_lengths") or (x := _ratio(r, m, "knee")) is None:
                continue
            b = ratios(m, r.get("engine_name"), r.get("model_kind"), doc)
            if b is None:
                continue
            lo, hi = b["low_ratio"], b["high_ratio"]
            by_source.setdefault(_source(r), []).append((_holds(m, x, lo, hi), lo <= x <= hi))
        judged = [v for vs in by_source.values() for v in vs]
        if judged:
            out[m] = {
                "rows": len(judged),
                "sources": len(by_source),
                "held": round(sum(h for h, _ in judged) / len(judged), 3),
                "held_per_source": round(float(np.mean([sum(h for h, _ in vs) / len(vs) for vs in by_source.values()])), 3),
                "inside": round(sum(i for _, i in judged) / len(judged), 3),
            }
    return out


def _entry(b: tuple[float, float, int, int], cover: float | None = None) -> dict:
    lo, hi, rows, sources = b
    d: dict = {"low_ratio": round(lo, 4), "high_ratio": round(hi, 4), "rows": rows}
    if cover is not None:
        d |= {"sources": sources, "held_out_coverage": round(cover, 3)}
    return d


def own_bands(
    results: list[dict], key: str, group_of: Callable[[dict], str | None], pooled_tails: dict[str, float], per_source: bool = False
) -> tuple[dict, dict]:
    """(kept, checks): per group (an engine, a model kind) and metric, the group's own band
    where it has ``MIN_ROWS`` rows from ``MIN_SOURCES`` sources and its pessimistic edge,
    built without each source in turn, holds for ``NOMINAL`` of that source's rows; as for
    the pooled band (:func:`calibrated_tail`), the edge moves out from the 10th percentile
    (to the 2nd at most) until it holds. ``checks``: every group and metric tried, the share
    its own edge held for (where kept, else the best share found), the pooled band's share on
    the same rows beside it (the bar; the pooled edge at its own percentile,
    ``pooled_tails``), and the percentile kept."""
    kept: dict[str, dict] = {}
    checks: dict[str, dict] = {}
    for group in sorted({g for r in results if (g := group_of(r))}):

        def ours(r: dict, group: str = group) -> bool:
            return group_of(r) == group

        mine = [r for r in results if ours(r)]
        for m in METRICS:
            if _band(mine, m, key, MIN_ROWS, MIN_SOURCES) is None:
                continue
            best, n, at = 0.0, 0, None
            for tail in TAILS:
                own, n = coverage(results, m, key, ours, MIN_ROWS, MIN_SOURCES, tail=tail, per_source=per_source)
                best = max(best, own)
                if own >= NOMINAL:
                    at = tail
                    break
            pool, _ = coverage(results, m, key, ours, band_rows=lambda r: True, tail=pooled_tails.get(m, 10.0), per_source=per_source)
            pct = None if at is None else (100 - at if m in LATENCIES else at)
            checks.setdefault(group, {})[m] = {"own": round(best, 3), "pooled": round(pool, 3), "rows": n, "pessimistic_percentile": pct}
            if at is not None:
                b = _band(mine, m, key, MIN_ROWS, MIN_SOURCES, at)
                assert b is not None
                kept.setdefault(group, {})[m] = _entry(b, best) | {"pessimistic_percentile": pct}
    return kept, checks


def _engine_group(r: dict) -> str | None:
    """A row's engine, keyed as core.estimate.bands looks an engine's band up (a vLLM
    profile's rows under vllm)."""
    return engine_key(r["engine_name"]) if r.get("engine_name") else None


def _engine_kind_group(r: dict) -> str | None:
    """An engine's rows of one model kind ("vllm|dense"), keyed as core.estimate.bands looks
    them up."""
    return engine_kind_key(r["engine_name"], r["model_kind"]) if r.get("engine_name") and r.get("model_kind") else None


def _files_coverage_by(doc: dict, unseen: list[dict], group_of: Callable[[dict], str | None], groups) -> dict[str, dict]:
    """:func:`files_coverage` of each group's held-out rows (those ``group_of`` puts in it),
    for the groups that have any."""
    return {g: c for g in sorted(groups) if (c := files_coverage(doc, [r for r in unseen if group_of(r) == g]))}


def write_bands(
    results: list[dict],
    out: str,
    paths: list[str],
    key: str = "knee",
    held_out: list[dict] | None = None,
    held_out_paths: list[str] | None = None,
    per_source: bool = False,
) -> dict:
    """bands.json from ``results`` (the report's rows, predictions under ``key``); the track
    record also counts ``held_out`` (rows of files no parameter was fitted on, predicted by
    the shipped estimator under ``knee``). ``per_source``: each edge where it holds for 90%
    of a held-out source's rows on average over sources (:func:`coverage`), not of all
    held-out rows pooled; not what ships (see ``--per-source`` in :func:`main`)."""
    unseen = [{**r, key: r.get("knee") or {}} for r in held_out or []]
    pooled: dict[str, dict] = {}
    coverage_of: dict[str, float] = {}
    tails: dict[str, float] = {}
    for m in METRICS:
        tail, share = calibrated_tail(results, m, key, per_source)
        b = _band(results, m, key, 10, 1, tail)
        if b is None:
            continue  # too few rows for this metric
        coverage_of[m] = share
        tails[m] = tail
        pooled[m] = _entry(b) | {"pessimistic_percentile": 100 - tail if m in LATENCIES else tail}
    by_engine, checks = own_bands(results, key, _engine_group, tails, per_source)
    by_kind, kind_checks = own_bands(results, key, lambda r: r.get("model_kind"), tails, per_source)
    by_engine_kind, engine_kind_checks = own_bands(results, key, _engine_kind_group, tails, per_source)
    doc = {
        "what": "10th/90th percentile of measured/predicted per metric, the pessimistic edge (pessimistic_percentile) where it "
        f"holds for {NOMINAL:.0%} of held-out sources' rows (bench/bands.py); by_engine: an engine's own rows, "
        f"where it has {MIN_ROWS} rows from {MIN_SOURCES} sources for the metric and its own band's pessimistic edge holds "
        f"for {NOMINAL:.0%} of each held-out source's rows; by_kind: a model kind's own (moe, dense), by the same rule; "
        "by_engine_kind: an engine's rows of one model kind (vllm|dense), by the same rule, taken first; track_record: median absolute error and median "
        f"measured/predicted by GPU and engine, GPU, engine and all rows (a group with {TRACK_ROWS} rows from "
        f"{TRACK_SOURCES} sources; rows whose lengths their source does not publish left out; the held-out files' rows as the "
        "shipped estimator predicts them)",
        "predictions": "leave-one-source-out"
        if key == "knee_loso"
        else "shipped estimator (in-sample: calibration.toml ships the fit on both measurement files; --loso gives the honest bands)",
        "files": [Path(p).name for p in paths],
        "track_record_held_out_files": [Path(p).name for p in held_out_paths or []],
        "date": datetime.date.today().isoformat(),
        "bands": pooled,
        "held_out_coverage": {m: (round(v, 3) if v == v else None) for m, v in coverage_of.items()},
        "coverage_weighting": "per source" if per_source else "per row",
        "by_engine": by_engine,
        "engine_checks": checks,
        "by_kind": by_kind,
        "kind_checks": kind_checks,
        "by_engine_kind": by_engine_kind,
        "engine_kind_checks": engine_kind_checks,
        "track_record": track_record(results + unseen, key),
    }
    doc["held_out_files_coverage"] = files_coverage(doc, unseen)
    kinds = {k for r in unseen if (k := r.get("model_kind"))}
    doc["held_out_files_coverage_by_kind"] = _files_coverage_by(doc, unseen, lambda r: r.get("model_kind"), kinds)
    # The same check for each engine x kind with a band of its own: the runs that band is shown for.
    doc["held_out_files_coverage_by_engine_kind"] = _files_coverage_by(doc, unseen, _engine_kind_group, by_engine_kind)
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def _pct(x: float | None) -> str:
    return "- (one source)" if x is None else f"{x:.0%}"


def main() -> None:
    ap = argparse.ArgumentParser(description="Write core/estimate/bands.json from a saved `bench.accuracy --loso --json` report.")
    ap.add_argument("report", help="the JSON report (its rows carry knee_loso)")
    ap.add_argument("--files", required=True, help="comma-separated names of the measurement files the report was run on")
    ap.add_argument("--out", default="core/estimate/bands.json")
    ap.add_argument(
        "--held-out",
        default="",
        help="comma-separated saved `bench.accuracy HELDOUT.jsonl --json` reports of files never fitted on: "
        "the shipped estimator's errors on them join the track record (each named by its report's file name)",
    )
    ap.add_argument(
        "--per-source",
        action="store_true",
        help="set each edge where it holds for 90%% of a held-out source's rows on average over sources (every source weighs "
        "the same) instead of 90%% of all held-out rows; for comparing, not what ships: write it to another --out",
    )
    a = ap.parse_args()
    rows = json.loads(Path(a.report).read_text())["rows"]
    key = "knee_loso" if any(r.get("knee_loso") for r in rows) else "knee"
    reports = [p for p in a.held_out.split(",") if p]
    unseen = [r for p in reports for r in json.loads(Path(p).read_text())["rows"]]
    print_bands(write_bands(rows, a.out, a.files.split(","), key, unseen, reports, a.per_source))


def print_bands(doc: dict, file=None) -> None:
    """The bands written, each edge's held-out coverage and every engine check."""
    p = functools.partial(print, file=file)
    p("pooled band, its pessimistic edge's percentile, and the share of each held-out source's rows that edge holds for (nominal 90%):")
    for m, v in doc["bands"].items():
        p(
            f"  {m:17} {v['low_ratio']:.2f}-{v['high_ratio']:.2f}x ({v['rows']} rows)  pessimistic edge at "
            f"p{v['pessimistic_percentile']:g} holds for {_pct(doc['held_out_coverage'][m])}"
        )
    p(
        "an engine's, a model kind's or an engine's rows of one kind's own band, where it could have one: held-out share its "
        f"edge holds for, own / pooled (kept at {NOMINAL:.0%}):"
    )
    for checks, kept in (("engine_checks", "by_engine"), ("kind_checks", "by_kind"), ("engine_kind_checks", "by_engine_kind")):
        for group, ms in doc.get(checks, {}).items():
            cells = [f"{m} {c['own']:.0%}/{c['pooled']:.0%}{' kept' if m in doc[kept].get(group, {}) else ''}" for m, c in ms.items()]
            p(f"  {group:18} " + "  ".join(cells))
    if files := doc.get("held_out_files_coverage"):
        p("the same bands on the held-out files' rows (never fitted on): share whose pessimistic edge held, its mean over sources, share inside:")
        for m, c in files.items():
            p(
                f"  {m:17} {c['held']:.0%} (per source {c['held_per_source']:.0%}), inside {c['inside']:.0%}  ({c['rows']} rows, {c['sources']} sources)"
            )
    track = doc.get("track_record") or {}
    if track:
        p("track record (median absolute error per metric, rows, sources):")
        for level in ("gpu_engine_kind", "engine_kind", "gpu_engine", "gpu", "engine"):
            for name, rec in track.get(level, {}).items():
                p(f"  {name.replace('|', ' with '):24} {_record_line(rec)}")
        p(f"  {'all rows':24} {_record_line(track['all'])}")


def _record_line(rec: dict) -> str:
    cells = [f"{m} {v['median_ape']:.0%}" for m, v in rec["metrics"].items()]
    return f"{'  '.join(cells)}  ({rec['rows']} rows, {rec['sources']} sources)"


if __name__ == "__main__":
    main()
