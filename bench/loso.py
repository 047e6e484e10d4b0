"""Leave one source out (issue 11's honest validation) and the report both accuracy
harnesses print from it: hand-set in-sample, fitted in-sample and held-out (LOSO) median
APEs side by side.

    from bench import fit, loso
    its, _ = fit.items(rows)
    folds = loso.loso(its, jobs=2, progress=print)   # one fit per held-out source

Each fold fits :func:`bench.fit.fit` on every other source's rows and predicts the held-out
source's with that fit. The folds are independent, so ``jobs`` runs them in that many
forked processes: on the two fitting files (578 rows, 27 sources) one fold takes about two
minutes and the whole run an hour on one core. ``progress`` is told of each fold as it ends.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench import rows as R
from bench.fit import Fit, Item, fit, influence, predict_with, source_of
from bench.fit_priors import parameters
from bench.rows import METRICS


@dataclass
class Fold:
    source: str
    held_ids: list[str]
    fit: Fit
    predictions: dict[str, dict | None]  # held-out id -> prediction with the fold's parameters


def _held_out(its: list[Item], key: str, s: str, held_filter) -> tuple[list[Item], list[Item], list[Item]]:
    """Source ``s``'s items, the others' (its fold's training set), and those of ``s`` to predict."""
    held = [it for it in its if source_of(it.row, key) == s]
    train = [it for it in its if source_of(it.row, key) != s]
    return held, train, [it for it in held if held_filter is None or held_filter(it)]


def _fold(its: list[Item], key: str, s: str, infl, predict, predict_held, held_filter) -> Fold:
    held, train, target = _held_out(its, key, s, held_filter)
    f = fit(train, infl, predict)
    held_ids = {it.id for it in held}
    assert not held_ids & set(f.train_ids), "a held-out row is in its fold's training set"
    preds = predict_with(target, f.params, predict_held or predict)
    return Fold(s, sorted(held_ids), f, {it.id: p for it, p in zip(target, preds, strict=True)})


# What forked workers read (set just before the pool forks): the items and the predictors
# are shared by copy-on-write, not pickled, and the predictors may be closures.
_JOB: tuple = ()


def _fold_in_worker(s: str) -> Fold:
    return _fold(*_JOB[:2], s, *_JOB[2:])


def loso(
    its: list[Item],
    key: str = "id",
    infl: dict[str, set[str]] | None = None,
    predict=None,
    predict_held=None,
    held_filter=None,
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
) -> list[Fold]:
    """Leave one source out: for each source (:func:`bench.fit.source_of`), fit on every
    other source's items and predict the held-out source's items with that fit.
    ``predict_held`` (default: the fit's predictor) predicts the held-out rows, e.g. the
    simulator; ``held_filter(item)`` limits which held-out items are predicted (a fold with
    none is not fitted). A fold's ``fit.train_ids`` never contains one of its ``held_ids``.
    ``jobs`` > 1 fits that many folds at once in forked processes (the folds come back in
    the same order); ``progress(line)`` hears of each fold as it ends."""
    global _JOB
    infl = infl if infl is not None else influence(its, predict)
    sources = [s for s in sorted({source_of(it.row, key) for it in its}) if _held_out(its, key, s, held_filter)[2]]
    t0 = time.perf_counter()

    def told(i: int, f: Fold) -> Fold:
        if progress:
            progress(
                f"LOSO fold {i + 1}/{len(sources)} ({f.source}: {len(f.held_ids)} rows held out, fitted on {len(f.fit.train_ids)}"
                f" in {f.fit.seconds:.0f} s; {time.perf_counter() - t0:.0f} s elapsed)"
            )
        return f

    if jobs <= 1 or len(sources) <= 1:
        return [told(i, _fold(its, key, s, infl, predict, predict_held, held_filter)) for i, s in enumerate(sources)]
    _JOB = (its, key, infl, predict, predict_held, held_filter)
    try:
        with multiprocessing.get_context("fork").Pool(min(jobs, len(sources))) as pool:
            return [told(i, f) for i, f in enumerate(pool.imap(_fold_in_worker, sources))]
    finally:
        _JOB = ()


def add_jobs_argument(ap: argparse.ArgumentParser) -> None:
    """``--jobs N`` for a harness's ``--loso``."""
    ap.add_argument("--jobs", type=int, default=1, metavar="N", help="with --loso: fit N held-out sources at once (forked processes; default 1)")


def to_stderr(prog: str) -> Callable[[str], None]:
    """A ``progress`` that prints each line to stderr (with --json, stdout holds the report alone)."""
    return lambda line: print(f"{prog}: {line}", file=sys.stderr, flush=True)


def fit_summary(f: Fit) -> dict:
    """A Fit as plain JSON data."""
    return {
        "params": f.params,
        "free": f.free,
        "fixed": f.fixed,
        "changed": {k: list(v) for k, v in f.changed.items()},
        "train_ids": f.train_ids,
        "loss_start": f.loss_start,
        "loss_end": f.loss_end,
        "terms": f.terms,
        "predictions": f.predictions,
        "seconds": round(f.seconds, 2),
    }


# ---- the comparison both harnesses print: hand-set in-sample, fitted in-sample, LOSO ----

COLUMNS = (("hand_set", "hand-set, in-sample"), ("fitted", "fitted, in-sample"), ("loso", "LOSO (held out)"))
OVERFIT_PTS = 5.0


def _gap(fitted: dict, held: dict) -> dict:
    return {m: (None if fitted[m] is None or held[m] is None else round(100 * (held[m] - fitted[m]), 1)) for m in METRICS}


def compare(
    results: list[dict], apes: dict[str, str], groups: tuple = (("by_gpu", "gpu"), ("by_engine", "engine_name"), ("by_source", "source"))
) -> dict:
    """Median APEs per metric (with counts) for each column of :data:`COLUMNS` (``apes`` maps
    a column to the result key holding its APEs), overall and per group; ``gap`` is LOSO
    minus fitted in-sample in percentage points, and ``overfit`` names the metrics where it
    exceeds :data:`OVERFIT_PTS`."""

    def block(sub):
        b = {col: R.median_apes(sub, key) for col, key in apes.items()}
        b["gap_pts"] = _gap(b["fitted"], b["loso"])
        b["overfit"] = [m for m, g in b["gap_pts"].items() if g is not None and g > OVERFIT_PTS]
        return b

    out = {"rows": len(results), **block(results)}
    for group, fieldname in groups:
        out[group] = {}
        for k in sorted({str(r.get(fieldname)) for r in results}):
            sub = [r for r in results if str(r.get(fieldname)) == k]
            out[group][k] = {"rows": len(sub), **block(sub)}
    return out


def param_table(full: Fit, folds: list[Fold]) -> dict:
    """name -> hand-set value, fitted on all rows, and the range over the LOSO folds (for
    the parameters some fit moved)."""
    hand = {k: v for k, (v, _, _) in parameters().items()}
    out = {}
    for k, v in hand.items():
        vals = [f.fit.params[k] for f in folds if k in f.fit.free]
        if k not in full.free and not vals:
            continue
        out[k] = {
            "hand_set": v,
            "fitted": full.params[k],
            "free": k in full.free,
            "loso_min": min(vals) if vals else None,
            "loso_max": max(vals) if vals else None,
            "loso_folds_free": len(vals),
        }
    return out


def attach(r: dict, label: str, source: str, fitted: dict | None, held: dict | None) -> None:
    """Record on one harness result its in-sample (``<label>_fitted``) and leave-one-source-out
    (``<label>_loso``) predictions with their APEs, and the row's source."""
    r["source"] = source
    r[f"{label}_fitted"], r[f"{label}_loso"] = fitted or {}, held or {}
    r["ape_fitted"] = {m: R.ape((fitted or {}).get(m), r["measured"][m]) for m in METRICS}
    r["ape_loso"] = {m: R.ape((held or {}).get(m), r["measured"][m]) for m in METRICS}


def honest_report(results: list[dict], hand_set_ape: str, full: Fit, folds: list[Fold], key: str, method: str, t0: float) -> dict:
    """The comparison both harnesses report: hand-set, fitted in-sample and LOSO APEs per
    metric and group, each fold's training size, the parameters and the fits."""
    h = compare(results, {"hand_set": hand_set_ape, "fitted": "ape_fitted", "loso": "ape_loso"})
    for f in folds:
        h["by_source"][f.source]["train_rows"] = len(f.fit.train_ids)
    h.update(
        {
            "key": key,
            "sources": len(folds),
            "method": method,
            "seconds": round(time.perf_counter() - t0, 1),
            "params": param_table(full, folds),
            "fit": fit_summary(full),
            "folds": [{"source": f.source, "held_ids": f.held_ids, **fit_summary(f.fit)} for f in folds],
        }
    )
    return h


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def format_compare(h: dict, params: dict | None = None) -> list[str]:
    """The text table of :func:`compare` (and :func:`param_table`)."""
    from bench.rows import LABELS

    lines = ["Median APE (rows)                   " + "".join(f"{LABELS[m]:>13}" for m in METRICS)]
    for col, title in COLUMNS:
        lines.append(f"  {title:34}" + "".join(f"{_pct(h[col][m]):>8} ({h[col][m + '_n']:>3})" for m in METRICS))
    lines.append(
        f"  {'gap LOSO - fitted (points)':34}"
        + "".join(f"{'-' if g is None else f'{g:+.0f}':>8}{' OVERFIT' if m in h['overfit'] else '      '}" for m, g in h["gap_pts"].items())
    )
    for group, title in (("by_gpu", "GPU"), ("by_engine", "engine"), ("by_source", "held-out source")):
        if group not in h:
            continue
        lines.append(f"By {title}: hand-set / fitted / LOSO median APE, '!' = LOSO more than {OVERFIT_PTS:.0f} points above fitted")
        for k, v in h[group].items():
            cells = []
            for m in METRICS:
                n = v["loso"][m + "_n"]
                if not n:
                    cells.append(f"{LABELS[m]} -")
                    continue
                flag = "!" if m in v["overfit"] else ""
                cells.append(f"{LABELS[m]} {_pct(v['hand_set'][m])}/{_pct(v['fitted'][m])}/{_pct(v['loso'][m])}{flag} ({n})")
            lines.append(f"  {k:16} {v['rows']:>3} rows  " + "  ".join(cells))
    if params:
        lines.append("Parameters: hand-set (calibration.toml) -> fitted on all rows [range over the LOSO folds that fitted it]")
        for k, p in params.items():
            rng = f"[{p['loso_min']:.3g}..{p['loso_max']:.3g} in {p['loso_folds_free']} folds]" if p["loso_folds_free"] else "[fixed in every fold]"
            lines.append(f"  {k:36} {p['hand_set']:>8.3g} -> {p['fitted']:<8.3g}{'' if p['free'] else ' (fixed)'} {rng}")
    return lines


def summary_part(h: dict) -> str:
    """The LOSO and fitted in-sample medians for a harness's SUMMARY line."""
    from bench.rows import LABELS

    fit_ = ", ".join(f"{LABELS[m]} {_pct(h['fitted'][m])}" for m in METRICS)
    lo = ", ".join(f"{LABELS[m]} {_pct(h['loso'][m])}" for m in METRICS)
    over = f" (overfit > {OVERFIT_PTS:.0f} pts: {', '.join(LABELS[m] for m in h['overfit'])})" if h["overfit"] else ""
    return f"fitted in-sample: {fit_} | LOSO: {lo}{over}"
