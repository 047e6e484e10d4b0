"""knee's estimate for one measurement row: the estimator driven the way the row's client
drove its server (closed loop, open loop, burst, single request). Used by the accuracy report
(:mod:`bench.accuracy`) and the parameter fit (:mod:`bench.fit`), in a module of its own so
that neither imports the other."""

from __future__ import annotations

import re

from bench import rows as R


def _predict(row: dict, arch, gpu, pool_cached: bool):
    """(Prediction, Predictor, ServerConfig) for the row, the prompt pool cached or not."""
    from core.estimate.predict import Predictor

    w = row["workload"]
    notes = row.get("notes", "")
    knobs = {**R.engine_defaults(row, gpu), **R.knobs(notes)}
    gmu = knobs.pop("gpu_memory_utilization", 0.9)
    mml = knobs.pop("max_model_len", None)
    n_prompts = R.prompts_sent(row)
    tp, dp = R.topology(row)

    def server(utilization: float):
        p = Predictor(
            arch,
            gpu,
            R.workload(row, pool_cached),
            kv_dtype=row.get("kv_dtype") or "auto",
            engine=R.engine_of(row),
            engine_version=R.engine_version(row),
            gpu_memory_utilization=utilization,
            max_model_len=mml,
        )
        return p, p.config(tp, dp, extra_args=R.extra_args(notes), **knobs)

    p, cfg = server(gmu)
    kv = R.stated_kv_bytes(notes)
    if kv is not None:
        p, cfg = server(R.utilization_leaving(kv, p.memory(cfg)))
    mode = w.get("mode")
    if mode == "online-concurrency":
        pred = p.predict(cfg, concurrency=float(w["concurrency"]), num_prompts=n_prompts)
    elif mode == "online-rate":
        pred = p.predict(
            cfg,
            request_rate=float(w["request_rate"]),
            concurrency=w.get("concurrency"),
            num_prompts=n_prompts,
            request_timeout_s=R.client_timeout(row),
        )
    elif mode == "offline-max-throughput":
        pred = p.max_throughput(cfg, num_prompts=int(w.get("batch_size") or n_prompts or 1000))
    elif mode == "single-request":
        b = int(w.get("batch_size") or 1)
        pred = p.max_throughput(cfg, num_prompts=b) if b > 1 else p.predict(cfg, concurrency=1)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    return pred, p, cfg


def _pool_verdict(row: dict, arch, gpu):
    """(whether the prefix cache holds the row's cycled prompts when they come round, the
    uncached prediction that was judged on; None for a row whose client cycles none)."""
    pool = R.prompt_pool(row)
    if not pool:
        return True, None
    pred, p, cfg = _predict(row, arch, gpu, False)
    isl, osl = R.mean_lengths(row)
    return R.pool_resident(pool, pred.running, isl, osl, p.memory(cfg).kv_tokens), pred


def pool_cached(row: dict, arch, gpu=None) -> bool:
    """Whether the prefix cache holds the row's cycled prompts when they come round
    (:func:`bench.rows.pool_resident`), judged on the estimator's running batch and KV cache
    with every running prompt in blocks of its own (as they are: the estimator's shared
    prefix is held once, which would hide the pool's memory); True for a row whose client
    cycles none. The simulator's bench takes the same answer, so both predictors see the
    same workload."""
    return _pool_verdict(row, arch, gpu or R.gpu_of(row))[0]


def predict_knee(row: dict, arch, gpu=None) -> dict:
    """knee's estimate for the row (``gpu``: the row's GPU spec, looked up when not given)."""
    gpu = gpu or R.gpu_of(row)
    cached, uncached = _pool_verdict(row, arch, gpu)
    pred = uncached if (uncached is not None and not cached) else _predict(row, arch, gpu, True)[0]
    notes = row.get("notes", "")
    stat = "p50" if R.stat(row) == "median" else "mean"
    # The schema's itl_ms is TPOT; a row whose notes define its figure as the pooled
    # inter-chunk gap (benchmark_serving's ITL) is compared with knee's gap statistic.
    gap = re.search(r"itl_ms = [^;]*inter-chunk gap", notes) is not None
    return {
        "ttft_ms": pred.ttft_ms.get(stat),
        "itl_ms": (pred.itl_ms if gap else pred.tpot_ms).get(stat),
        "e2e_s": pred.e2e_s.get(stat),
        "req_per_s": pred.req_per_s,
        "output_tok_per_s": pred.output_tok_per_s,
    }
