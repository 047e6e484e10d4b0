"""The E2E tail of a finite closed-loop run, the estimator against the simulator's mean over
seeds: a run of n requests reports the percentiles of those n (a p99 of 200 is nearly their
third longest), and its long answers end in a batch that thins once the clients stop
sending. One seed's p99 is one sample of that tail; the mean of several is what to compare.

Grid: Qwen3-4B on ml.g6.12xlarge as TP2 x 2 and TP1 x 1 (4x L4), Llama-3.1-8B on one H100;
concurrency 16/64/128; runs of 1.5x, 3x and 10x the concurrency; the bundled ShareGPT-like
lengths and uniform +-50% (1,024/512). Prints est/sim per case for E2E p50/p90/p99 and out
tok/s, then the median per workload and run length, and a SUMMARY line. No assertions
(tests/test_estimate_finite_run.py asserts the mechanism).

    .venv/bin/python bench/finite_run_tail.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.catalog import load_model, resolve_hardware  # noqa: E402
from core.estimate import Predictor  # noqa: E402
from core.simulate import simulate  # noqa: E402
from core.spec.lengths import sharegpt  # noqa: E402
from core.spec.serving import LoadPoint  # noqa: E402
from core.spec.workload import LengthDist, Workload  # noqa: E402

CASES = [
    ("Qwen/Qwen3-4B", "ml.g6.12xlarge", 2, 2),
    ("Qwen/Qwen3-4B", "ml.g6.12xlarge", 1, 1),
    ("meta-llama/Llama-3.1-8B-Instruct", "ml.p5.48xlarge", 1, 1),
]
RUN_LENGTHS = (1.5, 3.0, 10.0)  # requests per unit of concurrency
# (column, the estimate's statistic, the simulator summary's key)
METRICS = (("E2E p50", "p50", "median_e2el_ms"), ("E2E p90", "p90", "p90_e2el_ms"), ("E2E p99", "p99", "p99_e2el_ms"))


def _workloads() -> dict[str, Workload]:
    inp, out = sharegpt()
    return {
        "sharegpt-like": Workload(input=inp, output=out, dataset="sharegpt"),
        "uniform +-50%": Workload(
            input=LengthDist(kind="uniform", mean=1024, range_ratio=0.5), output=LengthDist(kind="uniform", mean=512, range_ratio=0.5)
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="simulated runs per case, each with its own draw of lengths (default 5)")
    a = ap.parse_args()
    groups: dict[tuple[str, float], list[list[float]]] = {}
    print(
        f"{'workload':14s} {'model':14s} {'layout':6s} {'conc':>4s} {'n':>5s} | "
        + " ".join(f"{m:>7s}" for m, *_ in METRICS)
        + "  out tok/s   (est/sim)"
    )
    for wl_name, wl in _workloads().items():
        for mult in RUN_LENGTHS:
            for model, inst, tp, dp in CASES:
                hw, arch = resolve_hardware(instance=inst), load_model(model)
                for c in (16, 64, 128):
                    n = int(c * mult)
                    run = wl.model_copy(update={"num_prompts": n})
                    p = Predictor(arch, hw.gpu, run)
                    cfg = p.config(tp, dp).model_copy(update={"model": model})
                    est = p.predict(cfg, concurrency=c, num_prompts=n)
                    sims = [
                        simulate(arch, hw, cfg, run.model_copy(update={"seed": s}), LoadPoint(concurrency=c, num_prompts=n)).summary
                        for s in range(a.seeds)
                    ]
                    ratios = [getattr(est.e2e_s, stat) * 1e3 / statistics.fmean(s[key] for s in sims) for _, stat, key in METRICS]
                    ratios.append(est.output_tok_per_s / statistics.fmean(s["output_throughput"] for s in sims))
                    groups.setdefault((wl_name, mult), []).append(ratios)
                    cells = " ".join(f"{r:7.2f}" for r in ratios)
                    print(f"{wl_name:14s} {model.split('/')[-1][:14]:14s} TP{tp}x{dp:<2d} {c:4d} {n:5d} | {cells}  {'':>2s}", flush=True)
    print("\nmedian est/sim per workload and run length (requests per unit of concurrency)")
    summary = []
    for (wl_name, mult), rows in groups.items():
        med = [statistics.median(col) for col in zip(*rows)]
        cells = ", ".join(f"{m} {v:.2f}x" for (m, *_), v in zip(METRICS, med)) + f", out tok/s {med[-1]:.2f}x"
        print(f"  {wl_name:14s} {mult:4.1f}x  {cells}")
        summary.append(f"{wl_name} {mult:g}x: E2E p99 {med[2]:.2f}x")
    print("SUMMARY estimator vs simulator (mean of seeds), finite closed runs: " + " | ".join(summary))


if __name__ == "__main__":
    main()
