"""A plan's ``ignore_eos`` (the Plan screen's "answers end" choice) reaches every reader: the
live estimate, its suggested sweep, the sweep started from the plan, the recommendation and
its measured run; and a sweep's ``sharegpt_output_len`` is a cap when the model may stop."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from core.estimate import estimate
from core.recommend import RecommendRequest, recommend
from core.spec.lengths import SHAREGPT_INPUT_MEAN, SHAREGPT_OUTPUT_MEAN, answers_capped, request_lengths
from core.spec.plan import Plan
from core.spec.study import SweepSpec
from core.sweep.grammar import combinations
from core.sweep.space import load_of, sets_from_json
from tui.data.plan_form import check_fields, fields_from_plan
from tui.data.recommend import request_for, summary
from tui.data.sweep_control import spec_from_plan

KNEE = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "knee"
MODEL = "Qwen/Qwen3-4B"


def knee(*args):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(KNEE), *args], capture_output=True, text=True, timeout=120, env=env)


def test_the_plan_keeps_ignore_eos_through_its_file(tmp_path):
    path = tmp_path / "plan.toml"
    Plan(dataset="sharegpt", ignore_eos=False).save(path)
    assert "ignore_eos = false" in path.read_text()
    assert Plan.load(path).ignore_eos is False
    assert Plan().ignore_eos is True  # the default: knee's own client holds every answer


def test_the_plan_form_maps_the_answers_choice_to_ignore_eos():
    values = fields_from_plan(Plan(dataset="sharegpt", ignore_eos=False))
    assert values["answers"] == "at EOS"
    plan, errors, hints = check_fields(values)
    assert not errors and plan is not None and plan.ignore_eos is False
    assert "EOS shape" in hints["answers"]
    plan, _, hints = check_fields({**values, "answers": "to length"})
    assert plan is not None and plan.ignore_eos is True and "ignore_eos" in hints["answers"]
    _, _, hints = check_fields({**values, "answers": "at EOS", "dataset": "random"})
    assert "caps" in hints["answers"]


def test_the_estimate_reads_the_plans_answers_and_its_suggestion_lets_the_model_stop():
    replies = estimate(Plan(dataset="sharegpt", gpu="H100-SXM", num_gpus=1, instance=None))
    at_eos = estimate(Plan(dataset="sharegpt", gpu="H100-SXM", num_gpus=1, instance=None, ignore_eos=False))
    assert (replies.workload["ignore_eos"], at_eos.workload["ignore_eos"]) == (True, False)
    # The measured EOS shape's longest answers are far shorter than the replies' log-normal
    # (1,600-1,800 tokens at 200 prompts against 780): the p99 end-to-end latency falls.
    (r,) = [p for p in replies.best.predictions if p.concurrency == 64]
    (e,) = [p for p in at_eos.best.predictions if p.concurrency == 64]
    assert e.e2e_s.p99 < 0.8 * r.e2e_s.p99
    assert e.output_tok_per_s == pytest.approx(r.output_tok_per_s, rel=0.1)  # same mean answer
    assert "disable_ignore_eos=true" in at_eos.suggestion.client_args
    assert "disable_ignore_eos" not in replies.suggestion.client_args
    assert "disable_ignore_eos=true" in at_eos.suggestion.llm_optimizer_command
    # An explicit argument still overrides the plan.
    assert estimate(Plan(dataset="sharegpt", ignore_eos=False), ignore_eos=True).workload["ignore_eos"] is True


def test_a_sweep_from_the_plan_lets_the_model_stop_unless_its_client_args_say_otherwise():
    def client_of(plan: Plan) -> dict:
        (only,) = combinations(sets_from_json(spec_from_plan(plan).client_sets))
        return only

    base = Plan(dataset="sharegpt", ignore_eos=False, server_args="max_num_seqs=[64]", client_args="max_concurrency=[8];num_prompts=50")
    assert client_of(base)["disable_ignore_eos"] is True
    typed = base.model_copy(update={"client_args": "max_concurrency=[8];disable_ignore_eos=false"})
    assert client_of(typed)["disable_ignore_eos"] is False
    assert "disable_ignore_eos" not in client_of(base.model_copy(update={"ignore_eos": True}))
    # An empty search space takes the estimate's suggestion, which already carries it once.
    suggested = spec_from_plan(Plan(dataset="sharegpt", ignore_eos=False))
    sets = sets_from_json(suggested.client_sets)
    assert sum("disable_ignore_eos" in s.names for s in sets) == 1
    assert all(c["disable_ignore_eos"] is True for c in combinations(sets))


def test_sharegpt_output_len_is_a_cap_when_the_model_may_stop():
    spec = SweepSpec(model=MODEL)
    held, _ = load_of({"dataset_name": "sharegpt", "sharegpt_output_len": 300}, spec)
    capped, _ = load_of({"dataset_name": "sharegpt", "sharegpt_output_len": 300, "disable_ignore_eos": True}, spec)
    assert (held.output.kind, held.output.mean) == ("fixed", 300)
    assert capped.output.upper == 300 and capped.output.mean < 0.6 * 300
    # The cap only cuts: below it the answers are the bundled EOS shape's own.
    uncut = answers_capped(10_000)
    assert sorted(capped.output.values) == sorted(min(300, v) for v in uncut.values)


def test_recommend_ranks_the_plans_workload_shape():
    plan = Plan(dataset="sharegpt", ignore_eos=False, constraints="e2e_latency:p99<20s")
    req = request_for(plan)
    assert (req.dataset, req.ignore_eos) == ("sharegpt", False)
    assert (req.input_len, req.output_len) == (SHAREGPT_INPUT_MEAN, SHAREGPT_OUTPUT_MEAN)
    inp, out = req.lengths()
    assert (inp, out) == request_lengths("sharegpt", None, None, ignore_eos=False)
    kw = dict(model=MODEL, constraints=plan.constraints, instances="ml.g5.xlarge")
    fixed = recommend(RecommendRequest(**kw))
    at_eos = recommend(req.__class__(**{**req.__dict__, "instances": "ml.g5.xlarge"}))
    replies = recommend(RecommendRequest(**kw, dataset="sharegpt", input_len=SHAREGPT_INPUT_MEAN, output_len=SHAREGPT_OUTPUT_MEAN))
    # 1024/512 fixed, ShareGPT answers at EOS and ShareGPT replies are three different loads:
    # short answers serve far more requests; the replies' long tail misses a p99 of 20 s.
    (f,), (e,) = fixed.best_per_instance, at_eos.best_per_instance
    assert e.capacity_rps > 3 * f.capacity_rps
    assert not replies.ranked and "e2e_latency" in replies.excluded[0].reason
    assert "ShareGPT 231/195 tok to EOS" in summary(at_eos)
    d = at_eos.as_dict()
    assert (d["dataset"], d["ignore_eos"], d["range_ratio"]) == ("sharegpt", False, 0.0)


def test_recommend_cli_takes_the_workload_shape_and_rejects_a_bad_one(tmp_path):
    out = knee("recommend", "--model", MODEL, "--instances", "ml.g5.xlarge", "--dataset", "sharegpt", "--no-ignore-eos", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert (d["dataset"], d["ignore_eos"]) == ("sharegpt", False)
    assert d["input_len"] == pytest.approx(SHAREGPT_INPUT_MEAN)
    text = knee("recommend", "--model", MODEL, "--instances", "ml.g5.xlarge", "--range-ratio", "0.5")
    assert text.returncode == 0 and "1024 in / 512 out ±50%" in text.stdout
    bad = knee("recommend", "--model", MODEL, "--range-ratio", "2")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--range-ratio must be in [0, 1]" in bad.stderr
    plan = tmp_path / "p.toml"
    Plan(dataset="sharegpt", ignore_eos=False).save(plan)
    from_plan = knee("estimate", "--plan", str(plan), "--json")
    assert from_plan.returncode == 0, from_plan.stderr
    assert json.loads(from_plan.stdout)["workload"]["ignore_eos"] is False
    assert json.loads(knee("recommend", "--plan", str(plan), "--instances", "ml.g5.xlarge", "--json").stdout)["ignore_eos"] is False


def test_the_estimate_screen_names_the_requests_it_estimated():
    from tui.data.estimate import build_estimate

    assert build_estimate(Plan()).title.endswith("· 1024/512 tok")
    view = build_estimate(Plan(dataset="sharegpt", ignore_eos=False))
    assert "· ShareGPT 231/19" in view.title and view.title.endswith(" tok to EOS")  # the drawn means
    # The roofline is drawn at the lengths estimated, not the plan's unused 1024/512.
    assert build_estimate(Plan(dataset="sharegpt")).roofline != build_estimate(Plan()).roofline


def test_the_estimate_text_says_random_answers_at_eos_are_read_as_caps():
    out = knee("estimate", "--model", MODEL, "--gpu", "H100-SXM", "--concurrency", "8", "--no-ignore-eos")
    assert out.returncode == 0 and "read as their caps" in out.stdout
