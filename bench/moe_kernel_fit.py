"""How well knee's MoE expert term matches grouped GEMMs measured on a GPU, and the two
values it takes from them.

bench/gpu_moe_kernels.py timed one MoE layer's routed GEMMs (gate/up, SiLU, down) for six
models' expert shapes at TP 1, 2, 4 and 8 and 1-8192 tokens on an H100
(bench/data/moe-h100.json). knee's cost model (core/estimate/costmodel.py) charges the same
work as

    softmax(FLOPs / (peak * mfu * moe_mfu_scale),  touched * (expert bytes / (BW * bw_weights) + expert_us))
      + moe_layer_us

This prints, against those timings, the median error of that term with calibration.toml's
values, with the values before this measurement (moe_mfu_scale 0.5, no per-expert time) and
with ``moe_mfu_scale`` and ``expert_us`` fitted to the timings alone (everything else held at
calibration.toml's Hopper and vLLM values). One-token rows are left out: a single token's two
GEMMs are launch floors, which knee charges per layer elsewhere (layer_us).

    python -m bench.moe_kernel_fit [bench/data/moe-h100.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from bench.gpu_moe_kernels import MODELS  # hidden, moe_intermediate, experts, top-k as measured
from core.estimate.params import calibration

DATA = Path(__file__).parent / "data" / "moe-h100.json"


def _terms(doc: dict):
    """FLOPs, bytes of the touched experts, expected experts touched and measured seconds per row
    (tokens >= 8), with knee's expected-touched rule E(1 - (1 - k/E)^T)."""
    flops, nbytes, touched, seconds, names = [], [], [], [], []
    for r in doc["rows"]:
        if r["tokens"] < 8 or "us" not in r:
            continue
        hidden, _, experts, top_k = MODELS[r["model"]]
        width = r["width"]
        n = experts * (1 - (1 - top_k / experts) ** r["tokens"])
        flops.append(2.0 * r["rows"] * 3 * hidden * width)
        nbytes.append(n * 3 * hidden * width * 2)
        touched.append(n)
        seconds.append(r["us"] * 1e-6)
        names.append(f"{r['model']} TP{r['tp']} T={r['tokens']}")
    return np.array(flops), np.array(nbytes), np.array(touched), np.array(seconds), names


def model_seconds(flops, nbytes, touched, *, peak, mfu, bw, bw_weights, moe_mfu_scale, expert_us, moe_layer_us):
    compute = flops / (peak * mfu * moe_mfu_scale)
    memory = nbytes / (bw * bw_weights) + touched * expert_us * 1e-6
    return (compute**4 + memory**4) ** 0.25 + moe_layer_us * 1e-6


def main(argv: list[str] | None = None) -> int:
    path = Path(argv[0]) if argv else DATA
    doc = json.loads(path.read_text())
    flops, nbytes, touched, seconds, _ = _terms(doc)
    cal = calibration()
    hopper, vllm = cal["architecture"]["hopper"], cal["engine"]["vllm"]
    fixed = {
        "peak": doc["info"]["peaks"]["bf16"] * 1e12,
        "mfu": hopper["mfu"],
        "bw": doc["info"]["peaks"]["bandwidth_gbps"] * 1e9,
        "bw_weights": hopper["bw_weights"],
        "moe_layer_us": vllm["moe_layer_us"],
    }

    def predicted(scale: float, expert_us: float) -> np.ndarray:
        return model_seconds(flops, nbytes, touched, moe_mfu_scale=scale, expert_us=expert_us, **fixed)

    def error(scale: float, expert_us: float) -> np.ndarray:
        return np.abs(predicted(scale, expert_us) - seconds) / seconds

    # Least squares on log(predicted/measured), over a grid rather than with an optimizer: two
    # parameters, and the whole surface is cheap to evaluate.
    best = min(
        ((s, c) for s in np.arange(0.30, 1.001, 0.01) for c in np.arange(0.0, 2.001, 0.01)),
        key=lambda p: float(np.sum(np.log(predicted(*p) / seconds) ** 2)),
    )
    print(f"{path.name}: {len(seconds)} grouped-GEMM timings ({doc['info']['device_name']}, torch {doc['info']['torch']})")
    print(f"held: mfu {fixed['mfu']}, bw_weights {fixed['bw_weights']}, moe_layer_us {fixed['moe_layer_us']}")
    for label, (scale, c) in (
        ("before (moe_mfu_scale 0.5, no expert_us)", (0.5, 0.0)),
        (
            f"shipped (moe_mfu_scale {vllm['moe_mfu_scale']}, expert_us {hopper.get('expert_us', 0.0)})",
            (vllm["moe_mfu_scale"], hopper.get("expert_us", 0.0)),
        ),
        (f"fitted to these timings (moe_mfu_scale {best[0]:.2f}, expert_us {best[1]:.2f})", best),
    ):
        e = error(scale, c)
        print(f"  {label:62s} median error {np.median(e) * 100:5.1f}%  p90 {np.percentile(e, 90) * 100:5.1f}%")
    held_out(path.with_name(path.name.replace("moe-", "grouped-")), fixed, (vllm["moe_mfu_scale"], hopper.get("expert_us", 0.0)), best)
    return 0


def held_out(path: Path, fixed: dict, shipped: tuple[float, float], fitted: tuple[float, float]) -> None:
    """The same term against timings it was not fitted to: bench/gpu_grouped_shapes.py's
    grid (128 experts, equal rows per expert, hidden 4096 and 7168, widths 96-2048, 16-512
    rows; bf16 gate/up and down, no activation)."""
    if not path.exists():
        print(f"held-out check skipped: no {path.name}")
        return
    doc = json.loads(path.read_text())
    cells: dict[tuple[int, int, int], float] = {}
    for r in doc["rows"]:
        if "bf16_us" in r:
            key = (r["hidden"], r["width"], r["rows"])
            cells[key] = cells.get(key, 0.0) + r["bf16_us"] * 1e-6
    keys = sorted(cells)
    experts = doc["rows"][0]["experts"]
    flops = np.array([2.0 * m * experts * 3 * h * w for h, w, m in keys])
    nbytes = np.array([experts * 3 * h * w * 2.0 for h, w, _ in keys])
    touched = np.full(len(keys), float(experts))
    seconds = np.array([cells[k] for k in keys])
    print(f"held out: {path.name}, {len(keys)} expert shapes x row counts (not used for the values above)")
    for label, (scale, c) in (("before", (0.5, 0.0)), ("shipped", shipped), ("fitted above", fitted)):
        pred = model_seconds(flops, nbytes, touched, moe_mfu_scale=scale, expert_us=c, **fixed)
        e = np.abs(pred - seconds) / seconds
        print(
            f"  {label:14s} median error {np.median(e) * 100:5.1f}%  p90 {np.percentile(e, 90) * 100:5.1f}%  median predicted/measured {np.median(pred / seconds):.2f}"
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
