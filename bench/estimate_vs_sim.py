"""The estimator against the simulator on the same inputs: where two models of one engine
disagree, at least one of them is wrong, whatever the published rows say.

Both price a step with the same cost model (:mod:`core.estimate.costmodel`), so what this
compares is the scheduling: the estimator's closed forms (steady state, lock-step waves,
bursts, open-loop queueing) against the simulator's step-by-step scheduler. It found a
burst's queue wait averaged over the queued requests only and a burst that completed
requests faster than the steady state at its cap (the first prompts' prefill left out).

Grid: four model/GPU pairs x four workloads (fixed, uniform +-50%, long prompts, the bundled
ShareGPT-like lengths, whose long tail sets when a finite run ends) x closed
loops at 1/16/64/256 (the run's length given to both, so both see its first wave), bursts
of 1,000, open loops at half and 0.9x the burst rate, and open loops past saturation ("past":
twice the burst rate, runs of 200 and 1,000 requests). Prints est/sim per metric per
case (TTFT's mean, then its p50 / p90 / p99), then the median |log(est/sim)| per metric and
load kind as a ratio, and a SUMMARY line. ``--engine``/``--engine-version`` run both on
another engine's scheduler (vLLM 0.6's V0, SGLang: prefill steps of whole prompts). No
assertions (tests/test_estimate_predict.py and tests/test_estimate_open_loop.py assert
agreement where it was found wanting).

    .venv/bin/python bench/estimate_vs_sim.py [--quick] [--engine sglang --engine-version 0.4.6]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.catalog import get_gpu, load_model  # noqa: E402
from core.estimate import Predictor  # noqa: E402
from core.simulate import simulate  # noqa: E402
from core.spec.hardware import Hardware  # noqa: E402
from core.spec.serving import LoadPoint  # noqa: E402
from core.spec.lengths import sharegpt  # noqa: E402
from core.spec.workload import LengthDist, Workload  # noqa: E402

CASES = [
    ("Qwen/Qwen3-8B", "H100-SXM", 1),
    ("meta-llama/Llama-3.1-8B", "A100-80GB", 1),
    ("Qwen/Qwen3-4B", "L4", 1),
    ("meta-llama/Llama-3.1-70B", "H100-SXM", 4),
]
WORKLOADS = {
    "fixed 1024/256": Workload.fixed(1024, 256),
    "uniform 1024/256 +-50%": Workload(
        input=LengthDist(kind="uniform", mean=1024, range_ratio=0.5), output=LengthDist(kind="uniform", mean=256, range_ratio=0.5)
    ),
    "long 4000/200 +-20%": Workload(
        input=LengthDist(kind="uniform", mean=4000, range_ratio=0.2), output=LengthDist(kind="uniform", mean=200, range_ratio=0.2)
    ),
    "sharegpt-like": Workload(input=sharegpt()[0], output=sharegpt()[1]),
}
# (column, the estimate's field, its statistic, the simulator summary's key, scale)
METRICS = (
    ("TTFT", "ttft_ms", "mean", "mean_ttft_ms", 1.0),
    ("p50", "ttft_ms", "p50", "median_ttft_ms", 1.0),
    ("p90", "ttft_ms", "p90", "p90_ttft_ms", 1.0),
    ("p99", "ttft_ms", "p99", "p99_ttft_ms", 1.0),
    ("ITL", "itl_ms", "mean", "mean_itl_ms", 1.0),
    ("E2E", "e2e_s", "mean", "mean_e2el_ms", 1e3),
    ("E2Ep90", "e2e_s", "p90", "p90_e2el_ms", 1e3),
    ("E2Ep99", "e2e_s", "p99", "p99_e2el_ms", 1e3),
    ("req/s", None, None, "request_throughput", 1.0),
)


def _loads(p: Predictor, cfg, quick: bool):
    burst_rate = p.max_throughput(cfg, num_prompts=1000).req_per_s
    yield "closed", 1, 200
    for c in (16, 64) if quick else (16, 64, 256):
        yield "closed", c, max(200, 4 * c)
    yield "burst", 1000, 1000
    for f in (0.5,) if quick else (0.5, 0.9):
        yield "open", f * burst_rate, max(200, int(60 * f * burst_rate))
    # Past saturation: a run no larger than the cap never queues but fills and empties
    # (core.estimate.fluid); a larger one queues, then drains (latency.overloaded).
    for n in (200,) if quick else (200, 1000):
        yield "past", 2.0 * burst_rate, n


def _ratios(est, sim: dict) -> dict[str, float]:
    out = {}
    for name, attr, stat, key, scale in METRICS:
        e = est.req_per_s if attr is None else getattr(getattr(est, attr), stat) * scale
        s = sim.get(key)
        if e and s and e > 0 and s > 0:
            out[name] = e / s
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer loads (about a minute)")
    ap.add_argument("--engine", default="vllm", help="whose scheduler and profile, in both (vllm, sglang, tensorrt-llm)")
    ap.add_argument("--engine-version", help="e.g. 0.6.3 for vLLM's V0 engine, which does not chunk prefills")
    a = ap.parse_args()
    eng = {"engine": a.engine, "engine_version": a.engine_version}
    per_kind: dict[tuple[str, str], list[float]] = {}
    print(f"{'model':14s} {'gpu':9s} {'workload':24s} {'load':>14s} | " + " ".join(f"{m:>6s}" for m, *_ in METRICS) + "   (est/sim)")
    for model, gpu_name, tp in CASES:
        arch, gpu = load_model(model), get_gpu(gpu_name)
        hw = Hardware(gpu=gpu, num_gpus=tp)
        for wl_name, wl in WORKLOADS.items():
            p = Predictor(arch, gpu, wl, **eng)
            cfg = p.config(tp)
            for kind, v, n in _loads(p, cfg, a.quick):
                run = wl.model_copy(update={"num_prompts": n})
                if kind == "closed":
                    est, load = p.predict(cfg, concurrency=v, num_prompts=n), LoadPoint(concurrency=v, num_prompts=n)
                elif kind == "burst":
                    est, load = p.max_throughput(cfg, num_prompts=n), LoadPoint(concurrency=n, num_prompts=n)
                else:
                    est, load = p.predict(cfg, request_rate=v, num_prompts=n), LoadPoint(request_rate=v, num_prompts=n)
                r = _ratios(est, simulate(arch, hw, cfg, run, load, **eng).summary)
                for m, x in r.items():
                    per_kind.setdefault((kind, m), []).append(abs(math.log(x)))
                cells = " ".join(f"{r[m]:6.2f}" if m in r else "     -" for m, *_ in METRICS)
                print(f"{model.split('/')[-1][:14]:14s} {gpu_name:9s} {wl_name:24s} {kind:>6s} {v:7.3g} | {cells}", flush=True)
    print("\nmedian disagreement, as a ratio (1.00 = the two agree)")
    summary = []
    for kind in ("closed", "burst", "open", "past"):
        cells = []
        for m, *_ in METRICS:
            xs = per_kind.get((kind, m))
            cells.append(f"{m} {math.exp(statistics.median(xs)):.2f}x" if xs else f"{m} -")
        print(f"  {kind:7s} " + ", ".join(cells))
        summary.append(f"{kind}: " + ", ".join(cells))
    print("SUMMARY estimator vs simulator, median disagreement: " + " | ".join(summary))


if __name__ == "__main__":
    main()
