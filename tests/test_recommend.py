"""knee recommend (issue 13): the estimator across the catalog, through the real CLI, offline."""

from __future__ import annotations

import json

import pytest

from core.catalog import instances
from tui.cli import main

WALKTHROUGH = ["--model", "Qwen/Qwen3-4B", "--input-len", "1024", "--output-len", "512", "--constraints", "e2e_latency:p99<60s", "--target-rps", "5"]


def run_json(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["recommend", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_walkthrough_goal_ranks_the_catalog_with_every_field(capsys):
    d = run_json(capsys, *WALKTHROUGH, "--goal", "cost")
    rows, excluded = d["rows"], d["excluded"]
    # Every catalog instance type is either ranked or excluded with a reason.
    assert {r["instance"] for r in rows} | {e["instance"] for e in excluded} == set(instances())
    assert len(instances()) >= 25
    for r in rows:
        assert {"instance", "layout", "instances_needed", "usd_per_hour", "usd_per_1m_output_tokens", "capacity_rps"} <= set(r)
        cap = r["capacity_rps"]
        assert 0 < cap["low"] < cap["value"] < cap["high"]
        assert r["instances_needed"] * cap["low"] >= 5 > (r["instances_needed"] - 1) * cap["low"]  # sized on the low edge
        assert r["usd_per_hour_total"] == pytest.approx(r["usd_per_hour"] * r["instances_needed"], rel=1e-3)
    totals = [r["usd_per_hour_total"] for r in rows]
    assert totals == sorted(totals)  # goal cost with a target: cheapest fleet first
    assert all(e["excluded"] for e in excluded)
    assert any(e["excluded"].startswith("price unknown") for e in excluded)


def test_throughput_goal_ranks_unpriced_instances_too(capsys):
    d = run_json(capsys, *WALKTHROUGH, "--goal", "throughput")
    assert len(d["rows"]) >= 25  # every instance type the model fits on, priced or not
    lows = [r["capacity_rps"]["low"] for r in d["rows"]]
    assert lows == sorted(lows, reverse=True)


def test_the_g6_12xlarge_row_agrees_with_knee_estimate(capsys):
    d = run_json(capsys, *WALKTHROUGH, "--goal", "cost", "--instances", "ml.g6.12xlarge", "--all-layouts")
    capsys.readouterr()
    assert (
        main(
            [
                "estimate",
                "--model",
                "Qwen/Qwen3-4B",
                "--instance",
                "ml.g6.12xlarge",
                "--input-len",
                "1024",
                "--output-len",
                "512",
                "--constraints",
                "e2e_latency:p99<60s",
                "--json",
            ]
        )
        == 0
    )
    est = json.loads(capsys.readouterr().out)
    by_layout = {(r["layout"]["tp"], r["layout"]["copies"]): r for r in d["rows"]}
    assert len(by_layout) == len([c for c in est["configs"] if c["limits"]["slo_feasible"]])
    for c in est["configs"]:
        r = by_layout[(c["tp"], c["dp"])]
        assert r["capacity_rps"]["value"] == pytest.approx(c["at_knee"]["req_per_s"], rel=1e-3)
        assert r["output_tok_per_s"] == pytest.approx(c["at_knee"]["output_tok_per_s"], rel=1e-3)


def test_a_70b_model_in_bf16_excludes_every_single_gpu_instance_with_the_reason(capsys):
    d = run_json(capsys, "--model", "meta-llama/Llama-3.1-70B", "--constraints", "e2e_latency:p99<60s", "--target-rps", "5")
    single = {n for n, i in instances().items() if i.num_gpus == 1}
    excluded = {e["instance"]: e["excluded"] for e in d["excluded"]}
    assert single <= set(excluded)
    assert all(excluded[n].startswith("does not fit") and "GB" in excluded[n] for n in single)
    assert not {r["instance"] for r in d["rows"]} & single


def test_text_output_ranks_and_lists_exclusions(capsys):
    capsys.readouterr()
    # Llama-3.1-70B in bf16: the g6 sizes whose GPUs cannot hold it are listed as excluded.
    assert (
        main(
            ["recommend", "--model", "meta-llama/Llama-3.1-70B", "--constraints", "e2e_latency:p99<60s", "--target-rps", "5", "--instances", "ml.g6*"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "ml.g6.12xlarge" in out and "Excluded" in out and "does not fit" in out and "low edge" in out


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--instances", "ml.nope*"], "no instance type matches"),
        (["--target-rps", "-1"], "--target-rps must be positive"),
        (["--region", "eu-west-1"], "no prices for region 'eu-west-1'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, msg):
    capsys.readouterr()
    assert main(["recommend", "--model", "Qwen/Qwen3-4B", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_second_region_ranks_on_its_own_prices(capsys):
    """us-west-2 prices come from its own table; an instance without one there is excluded
    with the region named, never priced with us-east-1's."""
    capsys.readouterr()
    assert main(["recommend", *WALKTHROUGH, "--region", "us-west-2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["rows"] and all(r["price_note"].startswith("us-west-2") for r in d["rows"] if r.get("price_note"))
    unpriced = {e["instance"]: e["excluded"] for e in d["excluded"] if "price unknown" in e["excluded"]}
    assert unpriced and all("in us-west-2" in why for why in unpriced.values())


def test_p_family_prices_found_rank_and_the_unfound_stay_excluded(capsys):
    """The P-family prices found for issue 13 (p4de, p5.4xlarge: a dated 2026 us-east-1 list
    price) put those types in the cost ranking; the types with no price found anywhere
    (p5e, p6-b200) stay excluded as price unknown, never guessed; p5en keeps its us-east-2
    price, named as such."""
    d = run_json(capsys, *WALKTHROUGH, "--goal", "cost", "--instances", "ml.p*", "--all-layouts")
    priced = {r["instance"]: r["usd_per_hour"] for r in d["rows"]}
    assert priced["ml.p4de.24xlarge"] == pytest.approx(31.5641) and priced["ml.p5.4xlarge"] == pytest.approx(7.912)
    unpriced = {e["instance"] for e in d["excluded"] if e["excluded"].startswith("price unknown")}
    assert {"ml.p5e.48xlarge", "ml.p6-b200.48xlarge"} <= unpriced
    p5en = next(r for r in d["rows"] if r["instance"] == "ml.p5en.48xlarge")
    assert p5en["usd_per_hour"] == pytest.approx(72.795) and p5en["price_note"].startswith("us-east-2")
    table = instances()
    for name in ("ml.p4de.24xlarge", "ml.p5.4xlarge"):
        inst = table[name]
        assert inst.price_date == "2026-09-27" and "70282000957" in inst.price_source and "price_per_hour" in inst.uncertain
    # The GPUs and counts the ranking sizes with: 8x H200 (p5e, p5en), 8x B200, 1x H100.
    assert {n: (table[n].gpu, table[n].num_gpus) for n in ("ml.p5e.48xlarge", "ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "ml.p5.4xlarge")} == {
        "ml.p5e.48xlarge": ("H200", 8),
        "ml.p5en.48xlarge": ("H200", 8),
        "ml.p6-b200.48xlarge": ("B200", 8),
        "ml.p5.4xlarge": ("H100-SXM", 1),
    }
