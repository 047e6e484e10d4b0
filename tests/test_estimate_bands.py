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
    ratios = bands.table()["bands"]
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
    assert "Error bands at the knee" in out and "measured/predicted" in out


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
