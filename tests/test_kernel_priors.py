"""The fit's GPU-measured priors (bench/kernel_priors.py): the per-layer floor of a decode
step, from bench/gpu_layer_floor.py's H100 and H200 files, becomes the layer_us prior of the
engines that run decode as CUDA graphs, and no other engine's."""

from __future__ import annotations

import pytest

from bench.kernel_priors import GRAPH_ENGINES, layer_floors, measured_priors


def test_layer_floor_is_what_a_step_takes_beyond_streaming_its_bytes():
    doc = {
        "info": {"peaks": {"bandwidth_gbps": 1000}},
        "rows": [
            # 10 layers, 8 GB of weights at 0.8 of 1 TB/s = 10 ms, 1 GB of KV at 0.5 = 2 ms:
            # a 12.5 ms step leaves 0.5 ms, 50 us a layer.
            {"what": "layer_floor", "layers": 10, "weight_bytes": 8e9, "kv_bytes": 1e9, "ms_per_step": 12.5},
            {"what": "layer_floor", "shape": "x", "error": "not measured"},
            {"what": "attn_decode", "ms_per_step": 1.0},
        ],
    }
    assert layer_floors(doc, 0.8, 0.5) == [pytest.approx(50.0)]


def test_measured_priors_give_the_graph_engines_the_measured_floor():
    priors = measured_priors()
    floors = {k: v for k, v in priors.items() if k.endswith(".layer_us")}
    assert set(floors) == {f"engine.{e}.layer_us" for e in GRAPH_ENGINES}
    # bench/data/layer-floor-h100.json and -h200.json: medians 38.1 and 39.2 us.
    assert all(v == pytest.approx(38.7, abs=0.1) for v in floors.values())
    assert priors["architecture.hopper.bw_weights"] == pytest.approx(0.847, abs=1e-3)
    # mfu: the whole prefill layer less its attention (bench/data/prefill-h100.json, -h200.json:
    # medians 0.68 and 0.655), not the GEMMs alone (0.678)
    assert priors["architecture.hopper.mfu"] == pytest.approx(0.666, abs=2e-3)
