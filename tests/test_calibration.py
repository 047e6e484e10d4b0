"""Calibration from the study's own measurements (core/sweep/calibration.py).

The "machine" here is the simulator priced with a known step profile (deterministic, so the
assertions are about the mechanism, not about noise): its points are fed to a
StudyCalibration whose base predictor is the estimator for an L4, a machine it is not. The
real-vLLM tier (tests/test_calibration_realvllm.py) does the same against the real server.
"""

from __future__ import annotations

import pytest

from core.catalog import load_model
from core.simulate import simulate
from core.simulate.profiles import StepProfile, cpu_hardware
from core.spec.serving import LoadPoint
from core.spec.workload import Workload
from core.sweep.calibration import StudyCalibration, _launch_key, median_ape, observation
from core.sweep.space import server_config

MODEL = "Qwen/Qwen3-4B"
TRUE = StepProfile("machine", step_s=6e-3, seq_s=9e-4, token_s=2e-5, request_overhead_s=0.05)
KV = 1 << 20
ISL, OSL = 128, 64


@pytest.fixture(scope="module")
def arch():
    return load_model(MODEL)


def measured(arch, hw, args, c):
    cfg = server_config(MODEL, args)
    s = simulate(arch, hw, cfg, Workload.fixed(ISL, OSL, num_prompts=4 * c), LoadPoint(concurrency=c), cost=TRUE, kv_tokens=KV).summary
    return {"max_concurrency": c}, s


def base_predictor(arch):
    """The uncalibrated prediction: the same simulator priced by the estimator's L4 cost model."""
    from core.catalog import resolve_hardware

    l4 = resolve_hardware(gpu="L4", num_gpus=1)

    def base(cfg, workload, load):
        return simulate(arch, l4, cfg, workload, load).summary

    return base


def test_observation_keeps_closed_loop_points_with_a_tpot(arch):
    hw = cpu_hardware()
    client, s = measured(arch, hw, {"max_num_seqs": 8}, 4)
    o = observation({"max_num_seqs": 8}, client, s)
    assert o is not None and o.concurrency == 4 and (o.input_len, o.output_len) == (ISL, OSL) and o.tp == 1
    assert observation({}, {"request_rate": 2.0, "max_concurrency": 4}, s) is None  # open loop: not fitted
    assert observation({}, client, {**s, "mean_tpot_ms": None}) is None  # TPOT unobserved


def test_a_point_whose_tokens_came_in_one_read_is_fitted_on_the_ttft_its_e2e_implies(arch):
    """A request whose tokens all reached the client in one read (a starved client) carries
    its decode in its TTFT; its E2E is still right. Such a point's TTFT is the one its E2E
    and observed decode rate imply (measured on the 2-core box: 131 ms read, 13 implied);
    a point with every decode observed keeps its own."""
    client, s = measured(arch, cpu_hardware(), {"max_num_seqs": 8}, 1)
    clean = observation({}, client, s)
    assert clean.ttft_s == pytest.approx(s["mean_ttft_ms"] / 1e3)
    starved = {**s, "tpot_unobserved": 111, "mean_ttft_ms": 130.9, "mean_tpot_ms": 3.0, "mean_e2el_ms": 202.2}
    o = observation({}, client, starved)
    assert o.ttft_s == pytest.approx((202.2 - (OSL - 1) * 3.0) / 1e3) and o.tpot_s == pytest.approx(3.0e-3)
    # An E2E that implies no sensible TTFT (none left, or more than was read) changes nothing.
    assert observation({}, client, {**starved, "mean_e2el_ms": 150.0}).ttft_s == pytest.approx(0.1309)
    assert observation({}, client, {**starved, "mean_e2el_ms": 400.0}).ttft_s == pytest.approx(0.1309)


def test_predictions_converge_to_the_machine_point_by_point(arch):
    hw = cpu_hardware()
    configs = [{"max_num_seqs": 8, "max_model_len": 2048}, {"max_num_seqs": 32, "max_model_len": 2048}]
    plan = [(a, c) for a in configs for c in (1, 4, 8, 16)]
    cal = StudyCalibration(arch, hw, lambda a: server_config(MODEL, a), base=base_predictor(arch), kv_tokens=KV)
    stages, uncal, calib = [], [], []
    for i, (args, c) in enumerate(plan):
        cfg = server_config(MODEL, args)
        wl, load = Workload.fixed(ISL, OSL, num_prompts=4 * c), LoadPoint(concurrency=c)
        before = cal.predict(cfg, wl, load)
        client, s = measured(arch, hw, args, c)
        if i >= 3:  # the measure: the points after the first three
            uncal.append((cal.base(cfg, wl, load)["output_throughput"], s["output_throughput"]))
            calib.append((before["output_throughput"], s["output_throughput"]))
        refitted = cal.observe(args, client, s)
        stages.append((cal.stage(1), refitted))
    # No profile from one concurrency; a refit after every point from the second on.
    assert stages[0] == ("scaled", False)
    assert all(st == ("profile", True) for st in stages[1:])
    assert cal.refits == len(plan) - 1
    # The L4 estimate is far from this machine; the calibrated one is close to it.
    assert median_ape(uncal) > 0.5
    assert median_ape(calib) < 0.1
    fitted = cal.profiles[1]
    assert fitted.step_s == pytest.approx(TRUE.step_s, rel=0.2) and fitted.seq_s == pytest.approx(TRUE.seq_s, rel=0.2)


def test_one_point_scales_the_base_prediction_toward_it(arch):
    hw = cpu_hardware()
    args = {"max_num_seqs": 16, "max_model_len": 2048}
    cal = StudyCalibration(arch, hw, lambda a: server_config(MODEL, a), base=base_predictor(arch), kv_tokens=KV)
    cfg = server_config(MODEL, args)
    wl = Workload.fixed(ISL, OSL, num_prompts=16)
    client, s = measured(arch, hw, args, 4)
    before = cal.predict(cfg, wl, LoadPoint(concurrency=4))
    cal.observe(args, client, s)
    after = cal.predict(cfg, wl, LoadPoint(concurrency=4))
    assert cal.stage(1) == "scaled" and after["calibrated"] == 0.5
    assert abs(after["output_throughput"] - s["output_throughput"]) < abs(before["output_throughput"] - s["output_throughput"])
    assert after["output_throughput"] == pytest.approx(s["output_throughput"], rel=1e-6)  # at the measured point itself


def test_a_server_launch_that_runs_slower_than_the_profile_is_predicted_from_its_own_points(arch):
    """The profile is fitted on every point of the TP degree; a launch of one configuration
    also has its own speed (here 30% slower at every cost). Once it has a point, the rest of
    that launch is predicted from it; the other configuration keeps its own factor."""
    hw = cpu_hardware()
    slow = StepProfile("slower launch", step_s=TRUE.step_s * 1.3, seq_s=TRUE.seq_s * 1.3, token_s=TRUE.token_s * 1.3, request_overhead_s=0.05)
    fast_args, slow_args = {"max_num_seqs": 8, "max_model_len": 2048}, {"max_num_seqs": 32, "max_model_len": 2048}
    cal = StudyCalibration(arch, hw, lambda a: server_config(MODEL, a), kv_tokens=KV)
    for c in (1, 4, 8):
        cal.observe(fast_args, *measured(arch, hw, fast_args, c))

    def run_slow(c):
        cfg = server_config(MODEL, slow_args)
        s = simulate(arch, hw, cfg, Workload.fixed(ISL, OSL, num_prompts=4 * c), LoadPoint(concurrency=c), cost=slow, kv_tokens=KV).summary
        return {"max_concurrency": c}, s

    cal.observe(slow_args, *run_slow(2))
    cfg, wl, load = server_config(MODEL, slow_args), Workload.fixed(ISL, OSL, num_prompts=32), LoadPoint(concurrency=8)
    profile_only = simulate(arch, hw, cfg, wl, load, cost=cal.profiles[1], kv_tokens=KV).summary
    calibrated, truth = cal.predict(cfg, wl, load), run_slow(8)[1]
    for key in ("output_throughput", "mean_tpot_ms"):
        assert abs(calibrated[key] - truth[key]) < 0.5 * abs(profile_only[key] - truth[key])
    thr_slow, tpot_slow = cal.launches[_launch_key(cfg)]
    thr_fast, tpot_fast = cal.launches[_launch_key(server_config(MODEL, fast_args))]
    assert thr_slow < 1 < tpot_slow and thr_fast > thr_slow and tpot_fast < tpot_slow
    again = StudyCalibration.from_dict(cal.as_dict(), arch, hw, lambda a: server_config(MODEL, a))
    assert again.launches == cal.launches and again.predict(cfg, wl, load)["output_throughput"] == calibrated["output_throughput"]


def test_the_calibration_round_trips_through_plain_data(arch):
    hw = cpu_hardware()
    cal = StudyCalibration(arch, hw, lambda a: server_config(MODEL, a), kv_tokens=KV)
    args = {"max_num_seqs": 16, "max_model_len": 2048}
    for c in (1, 8):
        cal.observe(args, *measured(arch, hw, args, c))
    d = cal.as_dict()
    again = StudyCalibration.from_dict(d, arch, hw, lambda a: server_config(MODEL, a))
    assert again.profiles == cal.profiles and again.kv_tokens == KV and again.refits == cal.refits
    cfg, wl, load = server_config(MODEL, args), Workload.fixed(ISL, OSL, num_prompts=24), LoadPoint(concurrency=6)
    assert again.predict(cfg, wl, load)["output_throughput"] == cal.predict(cfg, wl, load)["output_throughput"]


def test_a_calibration_event_reads_as_one_line_in_the_text_output_and_the_tui_log(tmp_path):
    from core.results.store import StudyStore
    from core.sweep import build_spec, create_study
    from core.sweep.calibration_learner import calibration_line
    from tui.data.sweep_state import SweepFollower

    d = {
        "point_id": "p1",
        "tp": 1,
        "stage": "profile",
        "refitted": True,
        "refits": 3,
        "uncalibrated": {"output_throughput": 5000.0, "mean_tpot_ms": 0.7},
        "predicted": {"output_throughput": 1416.3, "mean_tpot_ms": 3.1},
        "measured": {"output_throughput": 1023.6, "mean_tpot_ms": 3.33},
    }
    line = calibration_line(d)
    assert line.startswith("calibration (calibrated)") and "1416 vs measured 1024 tok/s (+38%)" in line
    assert "TPOT predicted 3.10 vs measured 3.33 ms (-7%)" in line and "refitted (3 so far)" in line
    store = StudyStore(tmp_path / "knee.db")
    name = create_study(store, build_spec("Qwen/Qwen3-4B", engine="sim", instance="ml.g6.12xlarge"), "c")
    store.emit(name, "calibration", trial_id=7, **d)
    snap = SweepFollower(store, name).poll()
    assert line in snap.events_per_trial[7]


def test_calibrate_from_keeps_the_studys_client_ceiling_unless_asked_for_the_server_alone(tmp_path, arch, capsys):
    """A study whose client could not keep its slots full stored a ceiling on its sends:
    `knee estimate --calibrate-from` predicts with it (what that client measures on that
    machine) and says so; --no-client-ceiling predicts the server alone."""
    import json
    from dataclasses import asdict

    from core.results.store import StudyStore
    from core.sweep import build_spec, create_study
    from tui.cli import main

    db = tmp_path / "knee.db"
    store = StudyStore(db)
    name = create_study(store, build_spec(MODEL, gpu="L4", server_args="max_num_seqs=[16]", client_args="max_concurrency=[1,8]"), "ceiling")
    capped = StepProfile("study-tp1", step_s=6e-3, seq_s=9e-4, token_s=2e-5, request_overhead_s=0.05, client_send_s=0.5)
    store.set_study(name, info={"calibration": {"name": "study", "kv_tokens": KV, "refits": 1, "points": 2, "profiles": {"1": asdict(capped)}}})
    store.close()

    def run(*extra: str) -> int:
        return main(
            ["estimate", "--calibrate-from", name, "--storage", str(db), "--concurrency", "8", "--input-len", "128", "--output-len", "64", *extra]
        )

    assert run() == 0
    text = capsys.readouterr().out
    assert "the study's client sent at most 2.0 requests/s" in text and "--no-client-ceiling" in text
    assert run("--json") == 0
    kept = json.loads(capsys.readouterr().out)["calibrated"][0]["points"][0]["request_throughput"]
    assert run("--json", "--no-client-ceiling") == 0
    alone = json.loads(capsys.readouterr().out)["calibrated"][0]["points"][0]["request_throughput"]
    assert kept <= 2.0 * 1.05 < alone


@pytest.mark.parametrize("flag", [["--dataset", "sharegpt"], ["--range-ratio", "0.2"], ["--lengths-from", "usage.jsonl"], ["--no-ignore-eos"]])
def test_calibrate_from_refuses_a_length_shape_it_would_ignore(tmp_path, capsys, flag):
    """The calibrated curve prices fixed lengths: a shape flag beside --calibrate-from is one
    line and exit 2, not silently dropped."""
    from tui.cli import main

    rc = main(["estimate", "--calibrate-from", "any", "--storage", str(tmp_path / "knee.db"), *flag])
    err = capsys.readouterr().err.strip()
    assert (
        rc == 2
        and err
        == f"knee: error: {flag[0]} cannot be combined with --calibrate-from (the calibrated curve prices fixed lengths: set them with --input-len/--output-len)"
    )
