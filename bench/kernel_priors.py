"""Priors for the cost model's GPU efficiencies measured on a GPU, not chosen by people who
had seen the serving rows the fit is later judged on.

``bench/gpu_kernels.py`` measures, with PyTorch alone, the fraction of the datasheet peak that
a decode step's kernels reach on the GPU it runs on; its JSON output for each GPU measured
lives in ``bench/data/kernels-<gpu>.json`` (H100 SXM and H200, 2026-11-24, PyTorch 2.11 +
CUDA 13.0). :func:`measured_priors` turns them into ``bench/fit.py`` priors per architecture:

- ``mfu``: whole compiled prefill layers less their attention, 2048 and 8192 tokens, four
  shapes (``bench/data/prefill-<gpu>.json``, bench/gpu_prefill_layers.py); where a GPU has no
  such file, large GEMMs alone (M >= 4096) on Llama-3.1-8B's four linear shapes;
- ``mfu_fp8``: large FP8 GEMMs alone;
- ``mfu_attn``: causal flash attention on 2-8k-token prefills;
- ``bw_kv``: decode attention over a contiguous KV cache (vLLM's is paged: a little slower);
- ``bw_weights``: the *asymptotic* weight-streaming bandwidth, the slope of
  ``time = bytes / (bw * peak) + floor`` fitted over tensor-parallel shards of the 8B and
  70B layers (M = 1 and 32). The intercept, a per-GEMM floor of ~3-4.5 us, belongs to the
  engine profile's per-layer term, not to bandwidth: a plain median over decode batches
  (0.75-0.78) would fold the floor of an 8B layer into every model's bandwidth.

An architecture with no measured GPU keeps its ``calibration.toml`` prior.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench.gpu_kernels import shard_shapes

DATA = Path(__file__).parent / "data"
# GPU name in the file -> calibration.toml architecture
ARCHITECTURE = {"H100-SXM": "hopper", "H200": "hopper"}


def _shard_bytes(model: str, tp: int) -> int:
    """Bytes of one TP shard's linear weights per layer (bf16), as bench/gpu_kernels.py measured them."""
    return sum(a * b * 2 for a, b in shard_shapes(model, tp))


def asymptotic_bandwidth(doc: dict) -> tuple[float, float] | None:
    """(bandwidth fraction, floor in us per layer) of the least-squares line through the
    shard sweep's per-layer times at decode batches (M <= 32), or None without one."""
    pts = [
        (_shard_bytes(r["model"], r["tp"]), r["us_per_layer"])
        for r in doc.get("rows", [])
        if r.get("what") == "shard_bf16" and r.get("m", 99) <= 32 and "us_per_layer" in r
    ]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)  # us per byte
    floor = my - slope * mx
    gbps = 1.0 / slope / 1e3  # bytes per us -> GB/s
    return gbps / doc["info"]["peaks"]["bandwidth_gbps"], floor


def measured(path: Path) -> dict[str, float]:
    """One kernels file's efficiencies, by calibration.toml field name."""
    doc = json.loads(path.read_text())
    s = doc.get("summary", {})
    out = {f: float(s[f]) for f in ("mfu", "mfu_fp8", "mfu_attn", "bw_kv") if s.get(f)}
    asym = asymptotic_bandwidth(doc)
    if asym:
        out["bw_weights"] = asym[0]
    return out


# Engines whose decode steps run as CUDA graphs of compiled or fused layers, as
# bench/gpu_layer_floor.py measures them: the measured floor is their layer_us prior. TensorRT-LLM
# too: its decode steps replay CUDA graphs (the PyTorch backend's default, and NIM's engines) and
# a layer still launches its GEMMs, attention, all-reduce and fused norms in turn; its hand-set
# 6 us (no measurement behind it) is a sixth of what a graph-captured layer measured, and put
# NIM's TPOT at concurrency 1 15-20% fast. TGI 1.x (no CUDA graphs) and vLLM < 0.6 keep their
# hand-set values.
GRAPH_ENGINES = ("vllm", "vllm-v0", "sglang", "tensorrt-llm")


def layer_floors(doc: dict, bw_weights: float, bw_kv: float) -> list[float]:
    """Microseconds per layer that each whole decode step of ``doc`` (bench/gpu_layer_floor.py)
    took beyond streaming its weights at ``bw_weights`` and its KV cache at ``bw_kv`` of the
    peak bandwidth: what knee's ``layer_us`` stands for."""
    bw = doc["info"]["peaks"]["bandwidth_gbps"] * 1e9
    return [
        (r["ms_per_step"] * 1e-3 - r["weight_bytes"] / (bw_weights * bw) - r["kv_bytes"] / (bw_kv * bw)) / r["layers"] * 1e6
        for r in doc.get("rows", [])
        if r.get("what") == "layer_floor" and "ms_per_step" in r
    ]


def gpu_efficiencies(data: Path = DATA) -> dict[str, dict[str, float]]:
    """Per measured GPU (its name in the files), the efficiencies its files give, by
    calibration.toml field name: ``kernels-<gpu>.json``'s, with ``mfu`` from
    ``prefill-<gpu>.json`` where there is one."""
    own: dict[str, dict[str, float]] = {}
    for path in sorted(data.glob("kernels-*.json")):
        gpu = json.loads(path.read_text()).get("info", {}).get("gpu", "")
        if gpu not in ARCHITECTURE:
            continue
        own[gpu] = measured(path)
        prefill = data / path.name.replace("kernels-", "prefill-")
        if prefill.exists():
            # A whole compiled prefill layer less its attention (bench/gpu_prefill_layers.py) is
            # what knee's mfu prices; the GEMMs alone reach a little more.
            steps = [r["mfu_step_less_attn"] for r in json.loads(prefill.read_text()).get("rows", []) if "mfu_step_less_attn" in r]
            if steps:
                own[gpu]["mfu"] = statistics.median(steps)
    return own


def gpu_layer_floors(own: dict[str, dict[str, float]], data: Path = DATA) -> dict[str, list[float]]:
    """Per GPU with a ``layer-floor-<gpu>.json``, :func:`layer_floors` of its steps against
    that GPU's own bandwidth fractions (``own``: :func:`gpu_efficiencies`)."""
    out = {}
    for path in sorted(data.glob("layer-floor-*.json")):
        doc = json.loads(path.read_text())
        gpu = doc.get("info", {}).get("gpu", "")
        eff = own.get(gpu)
        if eff and "bw_weights" in eff and "bw_kv" in eff:
            out[gpu] = layer_floors(doc, eff["bw_weights"], eff["bw_kv"])
    return out


def measured_priors(data: Path = DATA) -> dict[str, float]:
    """``architecture.<arch>.<field>`` -> the mean over that architecture's measured GPUs, and
    ``engine.<graph engine>.layer_us`` -> the mean over GPUs of each one's median layer floor."""
    own = gpu_efficiencies(data)
    per: dict[str, list[float]] = {}
    for gpu, eff in own.items():
        for f, v in eff.items():
            per.setdefault(f"architecture.{ARCHITECTURE[gpu]}.{f}", []).append(v)
    floors = [statistics.median(fl) for fl in gpu_layer_floors(own, data).values() if fl]
    if floors:
        for engine in GRAPH_ENGINES:
            per[f"engine.{engine}.layer_us"] = [statistics.fmean(floors)]
    return {k: round(statistics.fmean(v), 3) for k, v in per.items()}


if __name__ == "__main__":
    own = gpu_efficiencies()
    for p in sorted(DATA.glob("kernels-*.json")):
        doc = json.loads(p.read_text())
        asym = asymptotic_bandwidth(doc)
        eff = own.get(doc.get("info", {}).get("gpu", ""), {})
        print(p.name, {k: round(v, 3) for k, v in eff.items()}, f"GEMM floor {asym[1]:.1f} us/layer" if asym else "")
    for gpu, fl in gpu_layer_floors(own).items():
        print(f"{gpu}: layer floor median {statistics.median(fl):.1f} us ({min(fl):.1f}-{max(fl):.1f} over {len(fl)} steps)")
    print("priors", measured_priors())
