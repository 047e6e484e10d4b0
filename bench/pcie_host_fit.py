"""The all-reduce staged through host memory (no GPU peer-to-peer): how the published
sources that exercise it agree on its two values, and how each predicts the others.

Sources: every multi-GPU row without GPU peer-to-peer: the SageMaker walkthrough's TP4 runs
on ml.g6.12xlarge (L4, ``smwalk-*``), the TP2 runs on A100-80GB whose vLLM logs say P2P is
unavailable (``dlvllm-*`` with ``gpu_p2p`` false) and the SageMaker benchmark suite's TP4 runs
on ml.g6e.12xlarge (L40S) and ml.g5.12xlarge (A10G) (``smsuite-*``). For each (link_eff,
allreduce_us) on a grid it prints each source's objective (the mean over measured metrics of
min(|log(predicted/measured)|, log 3), bench/fit.py's), each source's best, and each source
judged at the best of the others together (leave-one-source-out).

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
from core.estimate.params import calibrated, calibration

PUBLISHED = Path(__file__).parent / "data" / "published.jsonl"
LINK_EFF = (0.10, 0.13, 0.15, 0.17, 0.19, 0.21, 0.23, 0.26, 0.30)
LATENCY_US = (10, 20, 30, 40, 50, 65, 80, 100)


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
    items = [(row, arch) for row, _, arch in R.with_config(R.load(PUBLISHED), []) if (row.get("tp") or 1) > 1 and not R.gpu_of(row).p2p]
    sources = sorted({row["id"].rsplit("-", 1)[0] for row, _ in items})
    by_source = {s: [it for it in items if it[0]["id"].rsplit("-", 1)[0] == s] for s in sources}
    grid = {
        (e, u): {s: objective(by_source[s], {"interconnect.pcie-host.link_eff": e, "interconnect.pcie-host.allreduce_us": float(u)}) for s in sources}
        for e, u in itertools.product(LINK_EFF, LATENCY_US)
    }
    shipped = calibration()["interconnect"]["pcie-host"]
    print(
        f"rows: {', '.join(f'{s} {len(by_source[s])}' for s in sources)}; shipped link_eff {shipped['link_eff']}, allreduce_us {shipped['allreduce_us']}"
    )
    print(f"objective {'/'.join(sources)}; rows link_eff, columns allreduce_us " + " ".join(f"{u:>14d}" for u in LATENCY_US))
    for e in LINK_EFF:
        print(f"  {e:4.2f} " + " ".join("/".join(f"{grid[(e, u)][s]:.2f}" for s in sources) for u in LATENCY_US))

    def pooled(srcs) -> dict:
        """Each grid point's objective over these sources' rows together."""
        n = {s: len(by_source[s]) for s in srcs}
        return {k: sum(v[s] * n[s] for s in srcs) / max(sum(n.values()), 1) for k, v in grid.items()}

    everyone = pooled(sources)
    best_all = min(everyone, key=everyone.__getitem__)
    print(f"all sources: best {best_all} (objective {everyone[best_all]:.3f}); at the shipped values: {objective(items, {}):.3f}")
    for s in sources:
        others = pooled([o for o in sources if o != s])
        b_own, b_others = min(grid, key=lambda k, s=s: grid[k][s]), min(others, key=others.__getitem__)
        print(f"{s}: best {b_own} (objective {grid[b_own][s]:.3f}); held out, at the others' best {b_others}: {grid[b_others][s]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
