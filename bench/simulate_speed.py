"""How fast the simulator runs (issue 5 budgets: a 1,000-request trial < 200 ms; the
27-trial walkthrough sweep < 5 s, on one core).

The walkthrough: Qwen/Qwen3-4B on ml.g6.12xlarge (4x L4), 1024 in / 512 out, 1000 prompts,
TP {1, 2, 4} x max_num_batched_tokens {4096, 8192, 16384} x concurrency {32, 64, 128}.
Prints each trial's wall time and its simulated figures (labelled simulated), then the
totals against the budgets. ``--profile`` adds a cProfile of the sweep.

    .venv/bin/python bench/simulate_speed.py [--repeat 3] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.catalog import load_model, resolve_hardware  # noqa: E402
from core.simulate import simulate  # noqa: E402
from core.spec.serving import LoadPoint, ServerConfig  # noqa: E402
from core.spec.workload import Workload  # noqa: E402

MODEL = "Qwen/Qwen3-4B"
TPS = (1, 2, 4)
MBTS = (4096, 8192, 16384)
CONCS = (32, 64, 128)


def sweep(arch, hw, wl, verbose: bool):
    rows = []
    t_all = time.perf_counter()
    for tp in TPS:
        for mbt in MBTS:
            for c in CONCS:
                cfg = ServerConfig(model=MODEL, tp=tp, max_num_batched_tokens=mbt)
                t0 = time.perf_counter()
                r = simulate(arch, hw, cfg, wl, LoadPoint(concurrency=c))
                dt = time.perf_counter() - t0
                rows.append((tp, mbt, c, dt, r))
                if verbose:
                    s = r.summary
                    print(
                        f"  TP{tp} mbt={mbt:<5d} c={c:<3d} {dt * 1000:6.1f} ms  steps={r.steps:<6d} "
                        f"[simulated] {s['request_throughput']:5.2f} req/s  {s['output_throughput']:6.0f} tok/s  "
                        f"TTFT mean {s['mean_ttft_ms']:7.0f} ms  E2E p99 {s['p99_e2el_ms'] / 1000:6.1f} s  "
                        f"preempt={r.preemptions}"
                    )
    return rows, time.perf_counter() - t_all


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="sweeps to time (best is reported)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    arch = load_model(MODEL)
    hw = resolve_hardware(instance="ml.g6.12xlarge")
    wl = Workload.fixed(1024, 512, num_prompts=1000)
    simulate(arch, hw, ServerConfig(model=MODEL), Workload.fixed(64, 8, num_prompts=10), LoadPoint(concurrency=4))

    print(f"walkthrough sweep: {MODEL} on {hw.label}, 1024 in / 512 out, 1000 prompts, 27 trials")
    gc.collect()
    rows, best = sweep(arch, hw, wl, verbose=True)
    trial_best = [dt for *_, dt, _ in rows]
    for _ in range(args.repeat - 1):
        gc.collect()
        again, total = sweep(arch, hw, wl, verbose=False)
        best = min(best, total)
        trial_best = [min(a, row[3]) for a, row in zip(trial_best, again)]
    # Each trial's best of the repeats: the machine is shared, so the minimum is the figure.
    per_trial = sorted(trial_best)
    worst = per_trial[-1]

    thr = {(tp, mbt, c): r.summary["output_throughput"] for tp, mbt, c, _, r in rows}
    p99 = {(tp, mbt, c): r.summary["p99_e2el_ms"] for tp, mbt, c, _, r in rows}
    tp4_beats_tp1 = all(thr[4, m, c] > thr[1, m, c] for m in MBTS for c in CONCS)
    p99_grows = all(p99[t, m, 32] < p99[t, m, 64] < p99[t, m, 128] for t in TPS for m in MBTS)
    saturates = all(thr[t, m, 128] / thr[t, m, 64] < thr[t, m, 64] / thr[t, m, 32] for t in TPS for m in MBTS)

    print()
    print(
        f"1,000-request trial (best of {args.repeat} each): median {per_trial[len(per_trial) // 2] * 1000:.0f} ms, worst {worst * 1000:.0f} ms"
        f"  (budget < 200 ms: {'ok' if worst < 0.2 else 'OVER'})"
    )
    print(f"27-trial sweep: best of {args.repeat} {best:.2f} s  (budget < 5 s: {'ok' if best < 5 else 'OVER'})")
    print(
        f"trade-offs [simulated]: TP4 > TP1 throughput everywhere: {tp4_beats_tp1}; "
        f"p99 E2E grows with concurrency: {p99_grows}; throughput saturates: {saturates}"
    )

    if args.profile:
        import cProfile
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        sweep(arch, hw, wl, verbose=False)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
