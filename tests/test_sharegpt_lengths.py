"""dataset=sharegpt predicts and simulates with no file: ShareGPT's bundled length shape
(core/spec/lengths.py) in the estimator, the sweep's workload and the simulator."""

from __future__ import annotations

import pytest

from core.estimate import estimate
from core.spec.lengths import SHAREGPT_INPUT_MEAN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL, SHAREGPT_OUTPUT_MEAN, sharegpt
from core.spec.study import SweepSpec
from core.sweep.space import load_of


def test_bundled_shape_keeps_the_means_and_the_benchmarks_cut():
    inp, out = sharegpt()
    assert inp.kind == out.kind == "empirical"
    assert inp.mean == pytest.approx(SHAREGPT_INPUT_MEAN, rel=0.01)
    assert out.mean == pytest.approx(SHAREGPT_OUTPUT_MEAN, rel=0.01)
    assert max(inp.values) <= SHAREGPT_MAX_PROMPT and max(out.values) <= SHAREGPT_MAX_TOTAL - SHAREGPT_INPUT_MEAN
    # heavy-tailed: the median is well under the mean, the top quantile far above it
    vals = sorted(out.values)
    assert vals[len(vals) // 2] < 0.8 * out.mean and vals[-1] > 3 * out.mean
    # other means keep the shape
    _, o128 = sharegpt(output_mean=128)
    assert o128.mean == pytest.approx(128, rel=0.01) and o128.kind == "empirical"


def test_estimate_with_sharegpt_needs_no_file_and_spreads_latency():
    r = estimate(model="Qwen/Qwen3-4B", gpu="H100-SXM", num_gpus=1, dataset="sharegpt", concurrency=[16])
    assert r.workload["dataset"] == "sharegpt"
    assert r.workload["input_len"] == pytest.approx(SHAREGPT_INPUT_MEAN, rel=0.01)
    fixed = estimate(model="Qwen/Qwen3-4B", gpu="H100-SXM", num_gpus=1, input_len=231, output_len=195, concurrency=[16])
    spread = r.configs[0].predictions[0].e2e_s
    same_means = fixed.configs[0].predictions[0].e2e_s
    # same means, but the long tail makes the p99 E2E much longer than fixed lengths' p99
    assert spread.p99 > 2 * same_means.p99
    assert "dataset_name=sharegpt" in r.suggestion.knee_command


def test_sweep_workload_for_sharegpt_is_the_bundled_shape_and_the_output_length_is_kept():
    spec = SweepSpec(model="Qwen/Qwen3-4B")
    wl, _ = load_of({"dataset_name": "sharegpt", "max_concurrency": 8}, spec)
    assert wl.dataset == "sharegpt" and wl.dataset_path is None
    assert wl.input.kind == "empirical" and wl.input.mean == pytest.approx(SHAREGPT_INPUT_MEAN, rel=0.01)
    wl2, _ = load_of({"dataset_name": "sharegpt", "sharegpt_output_len": 100, "max_concurrency": 8}, spec)
    assert wl2.output.kind == "fixed" and wl2.output.mean == 100


def test_sim_sweep_on_sharegpt_runs_without_a_file_and_requests_vary(tmp_path):
    from core.results.store import StudyStore
    from core.sweep import build_spec, create_study
    from core.sweep.runner import Runner

    store = StudyStore(tmp_path / "knee.db")
    spec = build_spec(
        "Qwen/Qwen3-4B",
        engine="sim",
        server_args="tensor_parallel_size=1",
        client_args="dataset_name=sharegpt;max_concurrency=8;num_prompts=100",
        gpu="H100-SXM",
        num_gpus=1,
    )
    name = create_study(store, spec, "share")
    Runner(store, name).run()
    (point,) = store.points(name)
    assert point.status == "ok" and point.summary["completed"] == 100
    osl = [r["osl"] for r in store.records(name, point.point_id)]
    assert len(set(osl)) > 20 and max(osl) > 3 * (sum(osl) / len(osl))  # ShareGPT's spread, not one length


def test_answers_that_end_at_eos_keep_the_measured_body_and_a_tail_past_its_longest():
    """The bundled answers one model generated to EOS (sharegpt_lengths.json, 200 of them):
    scaled to a mean, its median and its 90th percentile are the sample's, and above that it
    decays as its own top tenth does: the longest of 256 quantiles lies past the sample's
    longest (3.7x its mean) but far short of the replies' log-normal (over 8x)."""
    import json

    from core.spec.lengths import MEASURED_LENGTHS

    sample = sorted(json.loads(MEASURED_LENGTHS.read_text())["output_lens"])
    mean = sum(sample) / len(sample)
    _, eos = sharegpt(output_mean=200, to_eos=True)
    _, replies = sharegpt(output_mean=200)
    vals = sorted(eos.values)
    assert eos.kind == "empirical" and eos.mean == pytest.approx(200, rel=0.01)
    assert vals[len(vals) // 2] / 200 == pytest.approx(sample[len(sample) // 2] / mean, rel=0.05)
    assert vals[int(0.9 * len(vals))] / 200 == pytest.approx(sample[int(0.9 * len(sample))] / mean, rel=0.05)
    assert sample[-1] / mean < vals[-1] / 200 < 6.0 < 8.0 < max(replies.values) / 200
