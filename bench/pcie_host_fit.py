"""The all-reduce staged through host memory (no GPU peer-to-peer): how the two published
sources that exercise it agree on its two values, and how each predicts the other.

Sources: the SageMaker walkthrough's TP4 runs on ml.g6.12xlarge (L4, ``smwalk-*``) and the
TP2 runs on A100-80GB whose vLLM logs say P2P is unavailable (``dlvllm-*`` with ``gpu_p2p``
false). For each (link_eff, allreduce_us) on a grid it prints each source's objective (the
mean over measured metrics of min(|log(predicted/measured)|, log 3), bench/fit.py's), each
source's best, and each source judged at the other's best (leave-one-source-out).

    python -m bench.pcie_host_fit
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from bench import rows as R
from bench.fit import terms
from bench.knee_predict import predict_knee
from core.errors import KneeError
from core.estimate.costmodel import calibrated, calibration

PUBLISHED = Path(__file__).parent / "data" / "published.jsonl"
SOURCES = ("smwalk", "dlvllm")
LINK_EFF = (0.10, 0.13, 0.15, 0.17, 0.19, 0.21, 0.23, 0.26, 0.30)
LATENCY_US = (20, 30, 40, 50, 65, 80, 100)


def objective(items: list, params: dict[str, float]) -> float:
    total, n = 0.0, 0
    with calibrated(params):
        for row, arch in items:
            meas = {k: v for k, v in R.measured(row).items() if v}
            try:
                pred = predict_knee(row, arch)
            except KneeError:
                pred = None
            total += terms(pred, meas)
            n += len(meas)
    return total / max(n, 1)


def main(argv: list[str] | None = None) -> int:
    rows = [r for r in R.load(PUBLISHED) if r["id"].rsplit("-", 1)[0] in SOURCES and (r.get("tp") or 1) > 1]
    by_source = {s: [(row, arch) for row, _, arch in R.with_config([r for r in rows if r["id"].startswith(s)], [])] for s in SOURCES}
    grid = {
        (e, u): {s: objective(by_source[s], {"interconnect.pcie-host.link_eff": e, "interconnect.pcie-host.allreduce_us": float(u)}) for s in SOURCES}
        for e, u in itertools.product(LINK_EFF, LATENCY_US)
    }
    shipped = calibration()["interconnect"]["pcie-host"]
    print(
        f"rows: {', '.join(f'{s} {len(by_source[s])}' for s in SOURCES)}; shipped link_eff {shipped['link_eff']}, allreduce_us {shipped['allreduce_us']}"
    )
    print("objective smwalk/dlvllm; rows link_eff, columns allreduce_us " + " ".join(f"{u:>9d}" for u in LATENCY_US))
    for e in LINK_EFF:
        print(f"  {e:4.2f} " + " ".join(f"{grid[(e, u)]['smwalk']:.2f}/{grid[(e, u)]['dlvllm']:.2f}" for u in LATENCY_US))
    best = {s: min(grid, key=lambda k, s=s: grid[k][s]) for s in SOURCES}
    for s in SOURCES:
        other = next(o for o in SOURCES if o != s)
        print(f"{s}: best {best[s]} (objective {grid[best[s]][s]:.3f}); held out, at {other}'s best {best[other]}: {grid[best[other]][s]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
