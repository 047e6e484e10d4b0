import pytest

from core.catalog import plan_hardware

from core.errors import BadInput
from core.spec import parse_constraints


def test_llm_optimizer_grammar_with_units():
    slo = parse_constraints("ttft:p95<500ms;e2e_latency:p99<60s;itl<20")
    keys = [(c.key, c.op, c.value) for c in slo.constraints]
    assert keys == [("p95_ttft_ms", "<", 500.0), ("p99_e2el_ms", "<", 60000.0), ("mean_itl_ms", "<", 20.0)]
    assert slo.holds({"p95_ttft_ms": 400, "p99_e2el_ms": 59000, "mean_itl_ms": 19})
    assert slo.violations({"p95_ttft_ms": 600, "p99_e2el_ms": 1, "mean_itl_ms": 1}) == ["ttft:p95<500ms"]


def test_inclusive_operators_and_throughput_goals():
    slo = parse_constraints("ttft:median<=0.2s; request_throughput>=5")
    assert slo.holds({"median_ttft_ms": 200.0, "request_throughput": 5.0})
    assert not slo.holds({"median_ttft_ms": 200.1, "request_throughput": 5.0})
    assert slo.holds({"median_ttft_ms": 1, "request_throughput": 5}) and not slo.holds({"median_ttft_ms": 1})


@pytest.mark.parametrize("bad", ["ttft 500", "ttft:p42<1s", "speed<3", "ttft<fast", "ttft<5parsecs"])
def test_malformed_constraints(bad):
    with pytest.raises(BadInput):
        parse_constraints(bad)


def test_plan_round_trip_and_validation(tmp_path):
    from core.spec.plan import Plan, demo_plan

    plan = demo_plan()
    assert plan_hardware(plan).num_gpus == 4 and plan.slo.constraints[0].key == "p99_e2el_ms"
    path = tmp_path / "plan.toml"
    plan.save(path)
    assert Plan.load(path) == plan
    path.write_text("[plan]\ninput_len = -5\n")
    with pytest.raises(BadInput, match="input_len"):
        Plan.load(path)


def test_plan_on_gpus_reloads_without_the_default_instance(tmp_path):
    from core.spec.plan import Plan

    plan = Plan(instance=None, gpu="H100", num_gpus=2, precision=None)
    path = tmp_path / "gpu-plan.toml"
    plan.save(path)
    again = Plan.load(path)
    assert again == plan and again.instance is None and plan_hardware(again).gpu.name == "H100-SXM"
