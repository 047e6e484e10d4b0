"""Async scheduling (vLLM >= 0.14): the engine forms step N+1's batch when step N starts, so a
request that reaches a busy engine during step N gets its first step at N+2, one step later
than under a scheduler that decides at each step's start. An idle engine takes a request at
once either way. The estimator adds the same step (``State.align``'s ``ahead``)."""

import pytest

from core.catalog import load_model, resolve_hardware
from core.estimate.costmodel import CostModel
from core.simulate.engine import Replica
from core.simulate.requests import Requests

STEP = 0.01


class _ConstantStep:
    """Every step takes 10 ms, whatever it carries: the arithmetic below stays exact."""

    def step_seconds(self, *_args) -> float:
        return STEP


def _first_token_of_late_arrival(schedules_ahead: bool) -> float:
    reqs = Requests([64, 64], [20, 5], [0, 0])
    rep = Replica(0, reqs, _ConstantStep(), 1000, 8, 2048, False, lambda rid, t: None, schedules_ahead=schedules_ahead)
    rep.enqueue(0, 0.0)
    assert rep.run_step() and rep.t == pytest.approx(STEP)  # request 0's prefill: step 1
    assert rep.run_step() and rep.t == pytest.approx(2 * STEP)  # its first decode: step 2
    rep.enqueue(1, 1.5 * STEP)  # request 1 arrives in the middle of step 2
    while reqs.tfirst[1] == 0.0:
        assert rep.run_step()
    return reqs.tfirst[1]


def test_a_request_arriving_mid_step_waits_one_step_more_when_the_engine_schedules_ahead():
    # Deciding at each step's start: request 1 joins step 3 and has its token at its end.
    assert _first_token_of_late_arrival(False) == pytest.approx(3 * STEP)
    # Scheduling ahead: step 3 was formed when step 2 began, before request 1 came.
    assert _first_token_of_late_arrival(True) == pytest.approx(4 * STEP)


def test_an_idle_engine_takes_a_request_at_once_even_when_it_schedules_ahead():
    reqs = Requests([64], [5], [0])
    rep = Replica(0, reqs, _ConstantStep(), 1000, 8, 2048, False, lambda rid, t: None, schedules_ahead=True)
    rep.t = 0.5
    rep.enqueue(0, 0.5)
    assert rep.run_step()
    assert reqs.tfirst[0] == pytest.approx(0.5 + STEP)


def test_vllm_from_0_14_schedules_ahead_and_earlier_releases_do_not():
    arch = load_model("Qwen/Qwen3-4B")
    gpu = resolve_hardware(gpu="H100-SXM", num_gpus=1).gpu
    assert CostModel(arch, gpu, engine="vllm", engine_version="0.15.1").steps_ahead == 1
    assert CostModel(arch, gpu, engine="vllm", engine_version="0.11.0").steps_ahead == 0
    assert CostModel(arch, gpu, engine="sglang", engine_version="0.5.6").steps_ahead == 0


def test_the_estimator_waits_the_step_ahead_only_when_the_engine_is_busy():
    from core.estimate.steady import State

    st = State(
        n=8,
        k=1,
        steps=100,
        n_mixed=1,
        t_mixed=STEP,
        t_pure=STEP,
        cycle=100 * STEP,
        prefill=STEP,
        tpot=STEP,
        frac_mixed=0.01,
        prefill_tokens_step=64,
        decodes_mixed=7,
        decodes_pure=8,
    )
    assert st.align(7) == pytest.approx(0.5 * STEP)  # half the step in flight
    assert st.align(7, ahead=1) == pytest.approx(1.5 * STEP)  # and the step already formed
    assert st.align(7, group=8) == pytest.approx(4 * STEP)  # multi-step: half the group
    assert st.align(0, ahead=1) == 0.0  # an idle engine starts at once
