"""Error bands (issue 11 item 5): every estimator prediction carries a low and a high taken
from measured residuals (core/estimate/bands.json, written by bench.accuracy --bands-out), in
knee estimate's JSON and its text; the bands file is regenerated from measurements."""

from __future__ import annotations

import json

import pytest

from core.estimate import bands
from tui.cli import main

KEYS = ("ttft_ms", "itl_ms", "e2e_s", "req_per_s", "output_tok_per_s")


def test_estimate_json_carries_low_and_high_for_every_prediction(capsys):
    assert main(["estimate", "--model", "Qwen/Qwen3-4B", "--instance", "ml.g6.12xlarge", "--concurrency", "1,16", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    ratios = bands.table()["by_engine"]["vllm"]  # knee estimate's default engine has a band of its own
    for c in d["configs"]:
        for p in [c["at_knee"], *c["predictions"]]:
            means = {
                "ttft_ms": p["ttft_ms"]["mean"],
                "itl_ms": p["itl_ms"]["mean"],
                "e2e_s": p["e2e_s"]["mean"],
                "req_per_s": p["req_per_s"],
                "output_tok_per_s": p["output_tok_per_s"],
            }
            for k in KEYS:
                b = p["bands"][k]
                assert 0 < b["low"] < b["high"]
                assert b["low"] == pytest.approx(means[k] * ratios[k]["low_ratio"], rel=1e-3)
                assert b["high"] == pytest.approx(means[k] * ratios[k]["high_ratio"], rel=1e-3)


def test_estimate_text_shows_the_bands_and_their_source(capsys):
    assert main(["estimate", "--model", "Qwen/Qwen3-4B", "--instance", "ml.g6.12xlarge", "--concurrency", "8"]) == 0
    out = capsys.readouterr().out
    assert "Error bands at the knee" in out and "measured/predicted, vllm rows" in out


def test_an_engine_with_rows_of_its_own_takes_its_own_band_and_the_others_the_pooled_one():
    """vLLM's held-out residuals are narrower than the pooled ones (which 2023 TGI and SGLang
    rows widen); an engine with too few rows, or a metric its rows do not cover, falls back."""
    t = bands.table()
    own, pooled = t["by_engine"]["vllm"]["req_per_s"], t["bands"]["req_per_s"]
    assert own != pooled and own["rows"] >= 50 and own["sources"] >= 4
    for engine in ("vllm", "vllm-async", "sim", "VLLM"):  # a profile name and the simulator count as vLLM
        assert bands.band("req_per_s", 2.0, engine) == {"low": 2.0 * own["low_ratio"], "high": 2.0 * own["high_ratio"]}
    assert (
        bands.band("req_per_s", 2.0, "no-such-engine")
        == bands.band("req_per_s", 2.0)
        == {"low": 2.0 * pooled["low_ratio"], "high": 2.0 * pooled["high_ratio"]}
    )
    trt = t["by_engine"]["tensorrt-llm"]
    assert "output_tok_per_s" in trt and "ttft_ms" not in trt  # too few TensorRT-LLM TTFT rows
    assert bands.ratios("ttft_ms", "trtllm") == t["bands"]["ttft_ms"]
    assert bands.ratios("output_tok_per_s", "trtllm") == trt["output_tok_per_s"]
    assert bands.scope("vllm") == "vllm rows" and bands.scope("tgi") == "all engines' rows"
    assert bands.scope("tensorrt-llm") == "tensorrt-llm rows for out tok/s, all engines' otherwise"
    assert bands.pessimistic("req_per_s", 2.0, "vllm") == pytest.approx(2.0 * own["low_ratio"])


def test_pessimistic_edge_is_the_high_latency_and_the_low_throughput():
    assert bands.pessimistic("ttft_ms", 100.0) == pytest.approx(100.0 * bands.table()["bands"]["ttft_ms"]["high_ratio"])
    assert bands.pessimistic("output_tok_per_s", 100.0) == pytest.approx(100.0 * bands.table()["bands"]["output_tok_per_s"]["low_ratio"])
    assert bands.pessimistic("no_such_metric", 7.0) == 7.0


def test_bands_are_written_from_measured_residuals(tmp_path):
    from bench.bands import write_bands

    rows = [
        {"knee": {"ttft_ms": 100.0, "output_tok_per_s": 10.0}, "measured": {"ttft_ms": 100.0 * (0.5 + i / 20), "output_tok_per_s": 10.0}}
        for i in range(21)
    ]
    doc = write_bands(rows, str(tmp_path / "b.json"), ["x.jsonl"])
    assert json.loads((tmp_path / "b.json").read_text()) == doc
    ttft = doc["bands"]["ttft_ms"]
    assert ttft["rows"] == 21 and ttft["low_ratio"] == pytest.approx(0.6) and ttft["high_ratio"] == pytest.approx(1.4)
    assert doc["bands"]["output_tok_per_s"] == {"low_ratio": 1.0, "high_ratio": 1.0, "rows": 21}
    assert "itl_ms" not in doc["bands"]  # no rows: no band rather than a made-up one
    assert doc["by_engine"] == {}  # no engine named


def test_an_engine_gets_its_own_band_only_from_enough_rows_and_sources(tmp_path):
    from bench.bands import MIN_ROWS, MIN_SOURCES, write_bands

    def rows(engine, n, sources, ratio):
        return [
            {"id": f"s{i % sources}-{i}", "engine_name": engine, "knee": {"req_per_s": 1.0}, "measured": {"req_per_s": ratio * (0.9 + 0.2 * i / n)}}
            for i in range(n)
        ]

    many = rows("vllm", MIN_ROWS, MIN_SOURCES, 1.0)
    one_source = rows("sglang", 3 * MIN_ROWS, 1, 0.5)  # plenty of rows, but one benchmark's
    few = rows("TRT-LLM", MIN_ROWS - 1, MIN_SOURCES, 2.0)
    doc = write_bands(many + one_source + few, str(tmp_path / "b.json"), ["x.jsonl"])
    assert set(doc["by_engine"]) == {"vllm"}
    own = doc["by_engine"]["vllm"]["req_per_s"]
    assert own["rows"] == MIN_ROWS and own["sources"] == MIN_SOURCES and 0.9 < own["low_ratio"] < own["high_ratio"] < 1.1
    assert doc["bands"]["req_per_s"]["rows"] == len(many + one_source + few)  # the pooled band keeps every row


def test_a_summary_key_takes_the_band_of_its_metric():
    """The Pareto view's axes are vllm-bench summary keys: each maps to the band of its
    metric (a p99 takes its mean's ratios), and a key no band covers has none."""
    for key, metric in (
        ("request_throughput", "req_per_s"),
        ("total_token_throughput", "req_per_s"),  # scales with the request rate
        ("output_throughput", "output_tok_per_s"),
        ("tokens_per_s_per_user", "output_tok_per_s"),
        ("output_throughput_per_gpu", "output_tok_per_s"),
        ("p99_e2el_ms", "e2e_s"),
        ("mean_ttft_ms", "ttft_ms"),
        ("p99_itl_ms", "itl_ms"),
        ("median_tpot_ms", "itl_ms"),
    ):
        b = bands.band(metric, 10.0, "vllm")
        assert bands.summary_band(key, 10.0, "vllm") == (b["low"], b["high"]), key
    assert bands.summary_band("completed", 10.0, "vllm") is None
