"""knee's MoE expert term against published fused_moe timings (bench/moe_published.py), and
the FP8 expert efficiency the fit starts from (bench/fit_priors.py)."""

from __future__ import annotations

import json

import pytest

from bench import fit, fit_priors
from bench import moe_published as mp
from core.estimate.params import calibrated, calibration

ROWS = [json.loads(line) for line in mp.DATA.read_text().splitlines() if line.strip()]


def test_every_published_timing_cites_its_source_and_names_what_knee_prices():
    assert len(ROWS) == 71
    for r in ROWS:
        assert r["source"].startswith(("https://github.com/vllm-project/vllm/pull/", "https://github.com/sgl-project/sglang/pull/"))
        assert r["engine"] in ("vllm", "sglang") and r["dtype"] in ("bf16", "fp8-tensor", "fp8-block")
        assert r["us"] > 0 and r["tokens"] >= 1 and r["tp"] >= 1 and r["width"] > 0


def test_the_implied_scale_is_the_one_at_which_knees_term_meets_the_timing():
    row = {
        "gpu": "H100-SXM",
        "engine": "vllm",
        "dtype": "fp8-tensor",
        "hidden": 2048,
        "width": 768,
        "experts": 128,
        "top_k": 8,
        "tp": 1,
        "tokens": 4096,
    }
    with calibrated({"engine.vllm.moe_mfu_scale_fp8": 0.3}):
        cal = calibration()
        timed = {**row, "us": mp.knee_seconds(row, cal) * 1e6}
        assert mp.implied_scale(timed, cal) == pytest.approx(0.3, rel=1e-6)
    # a timing under knee's streaming and fixed time alone implies no compute rate at all
    assert mp.implied_scale({**row, "tokens": 1, "us": 1.0}, calibration()) is None


def test_published_compute_bound_timings_put_fp8_experts_far_below_16_bit_ones():
    cal = calibration()
    bound = [r for r in ROWS if r["tokens"] >= mp.COMPUTE_BOUND_TOKENS]
    fp8 = [mp.implied_scale(r, cal) for r in bound if r["dtype"].startswith("fp8")]
    bf16 = [mp.implied_scale(r, cal) for r in bound if r["dtype"] == "bf16"]
    assert len(fp8) == 5 and len(bf16) == 2
    # vLLM PR 24700: Qwen3-30B-A3B's FP8 experts at 1024-4096 tokens, Mixtral's bf16 at 1024-1536
    assert all(0.13 < s < 0.18 for s in fp8)
    assert all(0.78 < s < 0.88 for s in bf16)


def test_own_h100_timings_of_deepseeks_experts_show_the_same_at_its_tp8_width():
    lines = "\n".join(mp.own_fp8_h100(calibration()))
    assert "TP8 (width 256) fp8  at 8192 tokens: scale 0.17" in lines
    assert "TP1 (width 2048) fp8  at 8192 tokens: scale 0.59" in lines


def test_the_fit_starts_fp8_experts_from_the_kernels_and_leaves_vllm_v0s_alone():
    params = fit.parameters()
    for engine in ("vllm", "sglang"):
        prior, lo, hi = params[f"engine.{engine}.moe_mfu_scale_fp8"]
        assert prior == pytest.approx(0.16) and lo < prior < hi
    assert "engine.vllm-v0.moe_mfu_scale_fp8" in fit_priors.NOT_FITTED
    assert "engine.vllm-v0.moe_mfu_scale_fp8" not in params
    assert calibration()["engine"]["vllm-v0"]["moe_mfu_scale_fp8"] == pytest.approx(0.16)


def test_the_report_prints_each_series_and_the_scales(capsys):
    assert mp.main([]) == 0
    out = capsys.readouterr().out
    assert "71 published fused_moe timings, 8 series" in out
    assert "H100-SXM vllm   fp8-tensor H2048 w768 E128 k8 TP1" in out
    assert "knee's own H100 timings" in out
