"""Calibration from measurements on the real vLLM CPU server (issue 11 item 4): a real sweep
of 2 server configurations x 3 concurrencies, run by knee's own runner. Asserts the mechanism
with bounds noise cannot reach: a refit after every point that can inform one, predictions
that move toward what was measured (judged on output throughput: the uncalibrated estimate
prices the CPU host from nominal figures and is 100-300% off; calibrated 15-80%, measured), the profile stored with the
study, and `knee estimate --calibrate-from` reloading it. How close the calibrated numbers come
is a figure for bench/calibration.py, not an assertion here."""

from __future__ import annotations

import json
import statistics

import pytest

from core.results.store import StudyStore
from core.spec.study import EngineSpec
from core.sweep import build_spec, create_study
from core.sweep.calibration import ape, observation
from core.sweep.runner import Runner
from test_sweep_realvllm import VLLM_ENV

pytestmark = [pytest.mark.realvllm, pytest.mark.slow]


def test_a_real_sweep_learns_its_machine(tmp_path, vllm_python, tiny_model_dir, capsys):
    engine = EngineSpec(kind="vllm", python=str(vllm_python), env=VLLM_ENV, start_timeout_s=300, request_timeout_s=120)
    spec = build_spec(
        str(tiny_model_dir),
        engine=engine,
        server_args="max_num_seqs=[4,16];max_model_len=2048;dtype=bfloat16",
        client_args="max_concurrency=[1,2,4];num_prompts=32;random_input_len=64;random_output_len=64",
    )
    db = tmp_path / "knee.db"
    store = StudyStore(db)
    name = create_study(store, spec, "calib")
    events: list[dict] = []
    Runner(store, name, workspace=tmp_path, on_event=lambda kind, d: events.append(d) if kind == "calibration" else None).run()
    points = sorted(store.points(name, status="ok"), key=lambda p: p.started_at)
    assert len(points) == 6

    # One calibration event per measured point, in order; a refit exactly when the points so
    # far that can inform a fit (closed loop, TPOT observed) span two concurrencies or more.
    assert [e["point_id"] for e in events] == [p.point_id for p in points]
    seen: set[int] = set()
    for e, p in zip(events, points):
        informative = observation(p.server_args, p.client_args, p.summary) is not None
        if informative:
            seen.add(p.client_args["max_concurrency"])
        assert e["refitted"] == (informative and len(seen) >= 2), (e, seen)
        assert e["measured"]["output_throughput"] == pytest.approx(p.summary["output_throughput"])
    assert events[-1]["refits"] >= 1

    # Predictions made before each point, once a profile exists, are closer to the measurement
    # than the uncalibrated estimate. Judged on output throughput, the point's aggregate: the
    # per-request TPOT of this tiny model on CPU is ~1 ms and at c=4 its tokens reach the client
    # in bursts after a long TTFT (measured 0.3-0.7 ms against 1.2-1.4 ms at c=1-2), so a TPOT
    # comparison is noise; the throughput gap is 2-4x (uncalibrated 100-300% off, calibrated
    # 15-80%, measured). TPOT is printed, not asserted.
    fitted = [e for e in events if e["stage"] == "profile" and e["measured"]["output_throughput"]]
    assert len(fitted) >= 2
    tput = lambda e, key: ape(e[key]["output_throughput"], e["measured"]["output_throughput"])  # noqa: E731
    uncal = statistics.median(tput(e, "uncalibrated") for e in fitted)
    calib = statistics.median(tput(e, "predicted") for e in fitted)
    tpot = [(e["uncalibrated"]["mean_tpot_ms"], e["predicted"]["mean_tpot_ms"], e["measured"]["mean_tpot_ms"]) for e in fitted]
    print(
        f"output tok/s median APE over {len(fitted)} points: uncalibrated {uncal:.1%}, calibrated {calib:.1%}; "
        f"TPOT ms (uncalibrated, calibrated, measured): {tpot}"
    )
    assert calib < uncal

    # The profile is stored with the study and reloads through knee estimate.
    stored = store.study(name)["info"]["calibration"]
    assert stored["profiles"]["1"]["step_s"] > 0 and stored["refits"] == events[-1]["refits"]
    from tui.cli import main

    capsys.readouterr()
    assert main(["estimate", "--calibrate-from", name, "--storage", str(db), "--concurrency", "1,8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    block = out["calibrated"][0]
    assert (out["input_len"], out["output_len"]) == (64, 64)  # the lengths the study measured
    assert block["tp"] == 1 and block["profile"]["step_ms"] == pytest.approx(stored["profiles"]["1"]["step_s"] * 1e3)
    c1, c8 = block["points"]
    assert c1["concurrency"] == 1 and c8["concurrency"] == 8
    assert c8["output_throughput"] > c1["output_throughput"] > 0  # batching: more sequences, more tokens per second
