"""Fitting the cost model's physical parameters to measurement rows, and leave-one-source-out.

    from bench import fit
    items, skipped = fit.items(rows)                 # rows -> predictable items (+ skipped with reasons)
    f = fit.fit(items)                               # fit on all of them (in-sample)
    lo = loso.loso(items)                            # leave one source out (bench/loso.py)

What is fitted (:func:`parameters`): per GPU architecture of ``calibration.toml`` the
efficiency factors ``mfu``, ``mfu_fp8``, ``mfu_attn``, ``bw_weights`` and ``bw_kv``; per
interconnect (``nvlink``, ``pcie``: an A10G all-reduces like an L40S, not like an A100)
``link_eff`` and ``allreduce_us``; and per engine profile the host overhead per step
``step_us``, the fixed GPU cost per layer ``layer_us`` (and vLLM's per-token API-server
streaming cost ``stream_token_us``, and vLLM's and SGLang's FP8 expert-GEMM efficiency
``moe_mfu_scale_fp8``). Nothing per source and nothing per row. Bounds keep each
physical: fractions of a peak in [0.2, 1.0] (``link_eff`` [0.05, 1.0]), ``allreduce_us`` in
[1, 300] us, ``step_us`` in [20, 10000] us, ``layer_us`` in [1, 200] us. A parameter no
training row's prediction depends on (no row of that architecture or engine profile, or no
row that exercises it: ``link_eff`` without a TP>1 row, ``mfu_fp8`` without an FP8 row)
keeps its prior and is listed as fixed.

The prior (:mod:`bench.fit_priors`: :data:`PRIOR_WEIGHT`, :data:`PRIOR_SIGMA`): each parameter
is pulled toward its prior (the hand-set value frozen there, or a GPU's measurement), a
log-normal penalty of spread 0.25 (about ±28%; PCIe all-reduce,
which no datasheet pins down, 1.0), so a parameter that a few training rows touch cannot run
to a bound on them. Measured on ``measurements.jsonl`` (87 rows, 9 sources): without the
prior the LOSO median APE was TTFT 26%, ITL 27%, E2E 47%, out tok/s 14%, 11-42 points above
the in-sample fit (sglang's step_us went to 5000 us on one row, mfu_attn to 0.2 or 1.0 by
fold); with it, LOSO and in-sample agree within 5 points (``python -m bench.accuracy
--loso``; ``KNEE_FIT_PRIOR_WEIGHT=0`` reproduces the unregularised fit). The honest reading:
the prior values were hand-set by people who had seen these rows, so LOSO on this file
measures how stable the fit is, not independent error; ``python -m bench.transfer`` (fit on
this file, judge on ``bench/data/published.jsonl``, which nothing was tuned on) is the
independent check.

Each row's terms are weighted 1/sqrt(its source's row count) (:func:`source_weights`), so a
90-row source cannot decide every parameter alone.

The objective is a robust mean of ``|log(predicted / measured)|`` over every (row, metric)
pair the rows measure (TTFT, ITL, E2E, req/s, output tok/s), each term capped at ``log 3``
(a row missed by more than 3x counts as 3x: a broken row should not drag the physics), and a
row that cannot be predicted with a parameter set counts the cap on each metric.

How (:func:`fit`): a coordinate pattern search in log space. For each free parameter in
turn, multiply it by ``step`` or ``1/step`` (clipped to its bounds) and keep the move if the
objective falls, repeating the move while it keeps falling; when a sweep over all parameters
improves nothing, ``step`` shrinks to its square root, from 1.25 down to ~1.01. Only the rows
that depend on a parameter (:func:`influence`, measured once by perturbing each parameter)
are predicted again for its moves, which is what makes a fit take seconds. Why not
``scipy.optimize`` (scipy 1.17 is in the venv): the objective is piecewise and flat in places
(a median-like capped L1 through the predictor's scheduler logic: batch caps, compute/memory
switches), so gradient methods stall, and scipy's derivative-free methods (Powell,
Nelder-Mead) evaluate the whole objective (every row) at every trial point, where this
search re-predicts only the rows a parameter touches (on measurements.jsonl a parameter
touches 1 to 57 of the 87 rows; a whole fit is ~20,000 row predictions, ~10 s). The search
finds a local minimum from the hand-set values; it is a check on them, not a global optimum,
and parameters that trade off (an engine's step_us against bw_weights on throughput-only
rows) can drift together to a bound.

Sources (:func:`source_of`): the id prefix before the last ``-<n>`` (``trt014-07`` ->
``trt014``). The ``source`` field is not used: one publisher's document gives several
strings (TensorRT-LLM's perf-overview has three versions of its tables under three strings)
and one id prefix can span several strings (llmperf's two benchmark files). The id prefix is
the unit the data files were collected in (one table, one run set). Coarser groups
(``--loso-key publisher`` strips trailing digits: ``trt09``/``trt014``/``trt10`` -> ``trt``,
``infsim``/``infsim2`` -> ``infsim``) are stricter: the held-out publisher's other tables are
left out too.

The parameter overrides go through :func:`core.estimate.params.calibrated`, which makes
every CostModel and engine profile built inside it read ``calibration.toml`` with the given
values replaced; the file itself is never edited.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field

from bench import rows as R
from bench.fit_priors import CAP, parameters, prior_cost
from bench.rows import METRICS


def source_of(row: dict, key: str = "id") -> str:
    """The row's source for leave-one-source-out: the id prefix before its last ``-<n>``
    (``key="id"``), or that prefix without trailing digits (``key="publisher"``)."""
    rid = str(row.get("id") or "")
    s = re.sub(r"-\d+$", "", rid) or rid
    if key == "publisher":
        s = re.sub(r"\d+$", "", s) or s
    return s


@dataclass
class Item:
    row: dict
    arch: object
    measured: dict  # metric -> measured value (only those the row gives)
    gpu: object = None  # the row's GPU spec (looked up once)

    @property
    def id(self) -> str:
        return self.row["id"]


def items(rows: list[dict]) -> tuple[list[Item], list[dict]]:
    """The rows that can be predicted, as :class:`Item`, and the others as {"id", "reason"}
    (:func:`bench.rows.with_config`: an unknown mode, a load mode without its load, no
    bundled model config)."""
    skipped: list[dict] = []
    out = []
    for row, _, arch in R.with_config(rows, skipped):
        meas = {m: v for m, v in R.measured(row).items() if v is not None and v > 0}
        out.append(Item(row, arch, meas, R.gpu_of(row)))
    return out, skipped


def default_predict(item: Item) -> dict:
    from bench.knee_predict import predict_knee

    return predict_knee(item.row, item.arch, item.gpu)


def predict_with(its: list[Item], params: dict[str, float] | None, predict=None) -> list[dict | None]:
    """Each item's prediction, ``predict(item)`` (default: the estimator, as
    ``bench.accuracy`` predicts), with ``params`` overriding calibration.toml (None where the
    predictor refuses the row)."""
    from core.estimate.params import calibrated
    from core.errors import KneeError

    predict = predict or default_predict
    out = []
    with calibrated(params):
        for it in its:
            try:
                out.append(predict(it))
            except (KneeError, ValueError, ZeroDivisionError):
                out.append(None)
    return out


def source_weights(its: list[Item]) -> dict[str, float]:
    """Each item's weight in the objective: 1/sqrt(its source's row count), scaled so the
    weights sum to the number of items. Without it one large source decides every parameter:
    fitted on measurements.jsonl and published.jsonl together, GPUStack's 93 predicted rows
    (bursts of 1000 chat requests, client- and API-bound) pulled Hopper's bw_weights from 0.88
    to 0.68 and the other sources' E2E median from 9% to 32%. Full balancing (1/n) would
    instead let a one-row source weigh as much as a 90-row one; the square root is between."""
    n: dict[str, int] = {}
    for it in its:
        s = source_of(it.row)
        n[s] = n.get(s, 0) + 1
    raw = {it.id: 1.0 / math.sqrt(n[source_of(it.row)]) for it in its}
    scale = len(its) / max(sum(raw.values()), 1e-12)
    return {k: v * scale for k, v in raw.items()}


def terms(pred: dict | None, meas: dict) -> float:
    """The item's contribution to the objective: Σ over its measured metrics of
    min(|log(pred/meas)|, log 3); the cap where a prediction is missing."""
    t = 0.0
    for m, v in meas.items():
        p = None if pred is None else pred.get(m)
        if p is None or not isinstance(p, (int, float)) or not math.isfinite(p) or p <= 0:
            t += CAP
        else:
            t += min(abs(math.log(p / v)), CAP)
    return t


def _changed(a: dict | None, b: dict | None) -> bool:
    if (a is None) != (b is None):
        return True
    if a is None:
        return False
    for m in METRICS:
        x, y = a.get(m), b.get(m)
        if (x is None) != (y is None):
            return True
        if x is not None and (not math.isfinite(x) or not math.isfinite(y) or abs(x - y) > 1e-6 * max(abs(x), abs(y), 1e-12)):
            return True
    return False


def influence(its: list[Item], predict=None) -> dict[str, set[str]]:
    """For each parameter, the ids of the items whose prediction changes when it moves (x1.5
    and /1.5 within bounds, from the priors). Architecture parameters are probed on
    the rows of that GPU architecture only (CostModel reads its GPU's section alone; a GPU of
    an architecture without a section reads hopper's)."""
    from core.catalog import get_gpu
    from core.estimate.params import _calibration_file

    archs = set(_calibration_file()["architecture"])
    params = parameters()
    prior = {k: v for k, (v, _, _) in params.items()}
    base = dict(zip([it.id for it in its], predict_with(its, prior, predict)))
    gpu_arch = {}
    for it in its:
        a = get_gpu(it.row["gpu"]).architecture
        gpu_arch[it.id] = a if a in archs else "hopper"
    out: dict[str, set[str]] = {}
    for name, (v, lo, hi) in params.items():
        sec, sect, _ = name.split(".")
        cand = [it for it in its if sec != "architecture" or gpu_arch[it.id] == sect]
        hit: set[str] = set()
        for f in (1.5, 1 / 1.5):
            nv = min(hi, max(lo, v * f))
            if nv == v or not cand:
                continue
            for it, p in zip(cand, predict_with(cand, {**prior, name: nv}, predict)):
                if _changed(base[it.id], p):
                    hit.add(it.id)
        out[name] = hit
    return out


@dataclass
class Fit:
    params: dict[str, float]  # every fittable parameter: fitted, or its hand-set value
    free: list[str]  # fitted (some training row depends on it)
    fixed: dict[str, str]  # name -> why it kept its calibration.toml value
    train_ids: list[str]
    loss_start: float  # robust mean |log ratio| over the training terms, hand-set values
    loss_end: float
    terms: int
    predictions: int  # predictor calls the search made
    seconds: float
    changed: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (hand-set, fitted)


def fit(
    its: list[Item], infl: dict[str, set[str]] | None = None, predict=None, step: float = 1.25, min_step: float = 1.01, max_sweeps: int = 60
) -> Fit:
    """Fit :func:`parameters` to ``its`` (see the module's docstring). ``infl`` is
    :func:`influence` over these items or a superset (computed when not given)."""
    t0 = time.perf_counter()
    params = parameters()
    infl = infl if infl is not None else influence(its, predict)
    ids = {it.id for it in its}
    by_id = {it.id: it for it in its}
    x = {k: v for k, (v, _, _) in params.items()}
    free, fixed = [], {}
    for name in params:
        rows = infl.get(name, set()) & ids
        if rows:
            free.append(name)
        else:
            sect = name.split(".")[1]
            fixed[name] = f"no training row depends on it (no {sect} row exercises it)"
    preds = dict(zip([it.id for it in its], predict_with(its, x, predict)))
    weight = source_weights(its)
    cur = {i: weight[i] * terms(preds[i], by_id[i].measured) for i in ids}
    n_terms = sum(weight[it.id] * len(it.measured) for it in its)
    loss_start = sum(cur.values()) / max(n_terms, 1)
    calls = len(its)
    sweeps = 0
    while step > min_step and sweeps < max_sweeps:
        sweeps += 1
        improved = False
        for name in free:
            lo, hi = params[name][1], params[name][2]
            rows = [by_id[i] for i in sorted(infl[name] & ids)]
            for f in (step, 1 / step):
                moved = False
                while True:
                    nv = min(hi, max(lo, x[name] * f))
                    if abs(nv - x[name]) <= 1e-12 * x[name]:
                        break
                    trial = {**x, name: nv}
                    ps = predict_with(rows, trial, predict)
                    calls += len(rows)
                    new = {it.id: weight[it.id] * terms(p, it.measured) for it, p in zip(rows, ps)}
                    prior = params[name][0]
                    moved_cost = prior_cost(nv, prior, name) - prior_cost(x[name], prior, name)
                    if sum(new.values()) + moved_cost < sum(cur[i] for i in new) - 1e-9:
                        x = trial
                        cur.update(new)
                        preds.update({it.id: p for it, p in zip(rows, ps)})
                        moved = improved = True
                    else:
                        break
                if moved:
                    break
        if not improved:
            step = math.sqrt(step)
    loss_end = sum(cur.values()) / max(n_terms, 1)
    return Fit(
        params=x,
        free=free,
        fixed=fixed,
        train_ids=sorted(ids),
        loss_start=loss_start,
        loss_end=loss_end,
        terms=n_terms,
        predictions=calls,
        seconds=time.perf_counter() - t0,
        changed={k: (params[k][0], x[k]) for k in free if abs(x[k] - params[k][0]) > 1e-9 * params[k][0]},
    )
