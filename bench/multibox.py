"""Several workers on one PostgreSQL study (issue 14): wall time of a 24-configuration sim
sweep with 1, 2 and 3 workers, the simulated GPU time the same in each.

A throwaway PostgreSQL cluster (tests/support/postgres.py: initdb in a temporary directory,
127.0.0.1 only, a free port) holds one fresh database per run. Each worker is its own process
(``--worker``), joins the study as ``knee sweep --join`` does (core.sweep.workers.join_study,
JoinedRunner) and claims configurations by lease.

The sim engine answers in virtual time (milliseconds), so by itself there would be nothing to
share out. Here each worker's simulator is paced: a launch takes ``sim_launch_s / scale`` wall
seconds and a load point its simulated duration ``/ scale`` — as a GPU box would, ``scale``
times faster. The simulated figures (and GPU time) are those of the plain sim engine, the same
whatever the number of workers; only the wall time changes. Worker start-up (Python imports,
joining) is part of the wall time, as it is on real boxes.

    .venv/bin/python bench/multibox.py [--scale 300] [--workers 1,2,3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

MODEL = "Qwen/Qwen3-4B"
INSTANCE = "ml.g6.12xlarge"  # 4x L4
SERVER = "tensor_parallel_size=[1,2];max_num_seqs=[16,32,48,64,96,128,160,192,256,320,384,512]"  # 24 configurations
CLIENT = "max_concurrency=[8,32];num_prompts=200"  # 2 load points each: 48 points
STUDY = "multibox"


class PacedSim:
    """The sim engine's measurer, taking ``1/scale`` of the simulated time in wall time."""

    def __init__(self, inner, launch_s: float, scale: float):
        self._inner, self._launch_s, self._scale = inner, launch_s, scale

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def check(self, config) -> None:
        self._inner.check(config)
        time.sleep(self._launch_s / self._scale)  # the server's load and warm-up

    def measure(self, ctx, on_progress):
        m = self._inner.measure(ctx, on_progress)
        ctx.cancel.wait(m.duration_s / self._scale)  # a stop still ends it at once
        return m


def worker(url: str, scale: float) -> int:
    from core.results.store import StudyStore
    from core.sweep import build_spec
    from core.sweep.runner import default_measurer
    from core.sweep.workers import JoinedRunner, join_study

    spec = build_spec(MODEL, engine="sim", server_args=SERVER, client_args=CLIENT, instance=INSTANCE)
    store = StudyStore(url)
    try:
        spec, _ = join_study(store, spec, STUDY)
        measurer = PacedSim(default_measurer(spec), spec.engine.sim_launch_s, scale)
        s = JoinedRunner(store, STUDY, spec=spec, measurer=measurer).run()
        return 1 if s.interrupted else 0
    finally:
        store.close()


def one_run(cluster, n: int, scale: float) -> dict:
    from core.results.store import StudyStore

    url = cluster.create_db(f"multibox_{n}")
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, __file__, "--worker", url, "--scale", str(scale)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
        for _ in range(n)
    ]
    errs = [p.communicate(timeout=1800)[1] for p in procs]
    wall = time.perf_counter() - t0
    if any(p.returncode for p in procs):
        raise SystemExit(f"a worker failed: {next(e for p, e in zip(procs, errs) if p.returncode)[-2000:]}")
    store = StudyStore(url)
    try:
        points = store.points(STUDY)
        per_worker = Counter(r["worker"] for r in store.lease_log(STUDY) if r["outcome"] == "done")
        return {
            "workers": n,
            "wall_s": wall,
            "points": len(points),
            "per_worker": sorted(per_worker.values(), reverse=True),
            "gpu_s": sum(p.gpu_seconds for p in points),  # simulated measurement GPU time
            "simulated": all(p.simulated for p in points),
            "status": store.study(STUDY)["status"],
        }
    finally:
        store.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=300.0, help="simulated seconds per wall second (default 300)")
    ap.add_argument("--workers", default="1,2,3", help="worker counts to run (default 1,2,3)")
    ap.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)  # one worker process (internal)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.scale)

    from support import postgres

    why = postgres.why_not()
    if why:
        print(f"bench/multibox.py: cannot run: {why}", file=sys.stderr)
        return 2
    counts = [int(x) for x in a.workers.split(",")]
    cluster = postgres.Cluster().start()
    try:
        print(
            f"{MODEL} on {INSTANCE} (sim engine, paced at {a.scale:g}x), 24 configurations x 2 loads, one PostgreSQL study; "
            f"{os.cpu_count()} CPU cores here"
        )
        rows = [one_run(cluster, n, a.scale) for n in counts]
    finally:
        cluster.destroy()
    print(f"speed-up: wall time against {rows[0]['workers']} worker(s)")
    print(f"{'workers':>7} {'wall s':>8} {'speed-up':>8} {'points':>6} {'sim GPU-h':>9}  configurations per worker")
    for r in rows:
        print(
            f"{r['workers']:>7} {r['wall_s']:>8.1f} {rows[0]['wall_s'] / r['wall_s']:>7.2f}x {r['points']:>6} "
            f"{r['gpu_s'] / 3600:>9.3f}  {'/'.join(map(str, r['per_worker']))}{'' if r['status'] == 'done' else ' (' + r['status'] + ')'}"
        )
    same = len({round(r["gpu_s"], 6) for r in rows}) == 1
    print(f"simulated GPU time the same in every run: {'yes' if same else 'NO'} ({rows[0]['gpu_s']:.0f} GPU-s of measurements, simulated)")
    return 0 if same and all(r["points"] == 48 and r["status"] == "done" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
