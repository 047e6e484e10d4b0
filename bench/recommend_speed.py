"""How long `knee recommend` takes over the whole catalog (issue 13: under 2 s), in-process
and as a fresh command (imports included). Prints the figures; no assertions.

    .venv/bin/python bench/recommend_speed.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARGS = [
    "--model",
    "Qwen/Qwen3-4B",
    "--input-len",
    "1024",
    "--output-len",
    "512",
    "--constraints",
    "e2e_latency:p99<60s",
    "--target-rps",
    "5",
    "--goal",
    "cost",
    "--json",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    from core.catalog import instances
    from core.recommend import RecommendRequest, recommend

    req = RecommendRequest(model="Qwen/Qwen3-4B", constraints="e2e_latency:p99<60s", target_rps=5)
    inproc = []
    for _ in range(a.rounds):
        t = time.perf_counter()
        rec = recommend(req)
        inproc.append(time.perf_counter() - t)
    cmd = []
    knee = str(Path(sys.executable).with_name("knee"))
    for _ in range(a.rounds):
        t = time.perf_counter()
        subprocess.run([knee, "recommend", *ARGS], check=True, capture_output=True)
        cmd.append(time.perf_counter() - t)
    print(f"catalog: {len(instances())} instance types; {len(rec.ranked)} layouts ranked, {len(rec.excluded)} instance types excluded")
    print(f"recommend() in-process: median {statistics.median(inproc):.3f} s (min {min(inproc):.3f}, max {max(inproc):.3f}) over {a.rounds}")
    print(f"knee recommend ... --json as a command: median {statistics.median(cmd):.3f} s (min {min(cmd):.3f}, max {max(cmd):.3f})")


if __name__ == "__main__":
    main()
