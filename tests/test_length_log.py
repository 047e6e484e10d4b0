"""Lengths from the user's own records (``--lengths-from``): a usage log, a CSV, a ``vllm
bench serve`` result; read into the estimate and the recommendation, bad files refused with
one line naming the file and the line."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from core.errors import BadInput
from core.estimate import estimate
from core.recommend import RecommendRequest, recommend
from core.spec.length_log import QUANTILES, read_lengths
from core.spec.plan import Plan

KNEE = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "knee"
MODEL = "Qwen/Qwen3-4B"


def knee(*args):
    return subprocess.run([str(KNEE), *args], capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.fixture
def usage_log(tmp_path) -> Path:
    """2,000 requests as the OpenAI API reports them (a usage object per response)."""
    rng = random.Random(7)
    path = tmp_path / "usage.jsonl"
    with path.open("w") as f:
        for i in range(2000):
            usage = {"prompt_tokens": int(rng.lognormvariate(6.0, 0.8)) + 1, "completion_tokens": int(rng.lognormvariate(5.0, 0.7)) + 1}
            f.write(json.dumps({"id": f"r{i}", "usage": usage}) + "\n")
    return path


def test_every_format_reads_to_the_same_two_distributions(tmp_path, usage_log):
    pairs = [
        (json.loads(line)["usage"]["prompt_tokens"], json.loads(line)["usage"]["completion_tokens"]) for line in usage_log.read_text().splitlines()
    ]
    log = read_lengths(usage_log)
    assert log.requests == 2000 and len(log.input.values) == QUANTILES
    # Quantiles keep the mean within a few percent and the longest request exactly.
    ins, outs = zip(*pairs)
    assert log.input.mean == pytest.approx(sum(ins) / len(ins), rel=0.03)
    assert log.output.mean == pytest.approx(sum(outs) / len(outs), rel=0.03)
    assert (log.input.upper, log.output.upper) == (max(ins), max(outs))

    csv = tmp_path / "u.csv"
    csv.write_text("input_tokens,output_tokens\n" + "".join(f"{a},{b}\n" for a, b in pairs[:100]))
    bench = tmp_path / "result.json"
    bench.write_text(json.dumps({"completed": 100, "input_lens": [a for a, _ in pairs[:100]], "output_lens": [b for _, b in pairs[:100]]}, indent=2))
    flat = tmp_path / "flat.jsonl"
    flat.write_text("".join(json.dumps({"input_len": a, "output_len": b}) + "\n" for a, b in pairs[:100]))
    a, b, c = read_lengths(csv), read_lengths(bench), read_lengths(flat)
    assert a.input == b.input == c.input and a.output == b.output == c.output
    assert sorted(a.input.values) == sorted(x for x, _ in pairs[:100])  # few requests: all kept


@pytest.mark.parametrize(
    "text,name,msg",
    [
        ('{"prompt_tokens": 10, "completion_tokens": 5}\n{"prompt": "x"}\n', "a.jsonl", "a.jsonl line 2: no token counts"),
        ('{"prompt_tokens": 10, "completion_tokens": 0}\n', "b.jsonl", "b.jsonl line 1: token counts must be at least 1, got 10 / 0"),
        ("not json\n", "c.jsonl", "c.jsonl line 1: not JSON"),
        ("input_tokens,output_tokens\n5,x\n", "d.csv", "d.csv line 2: token counts '5' / 'x' are not numbers"),
        ("", "e.jsonl", "e.jsonl: no requests in the file"),
    ],
)
def test_a_bad_file_names_its_line(tmp_path, text, name, msg):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(BadInput) as e:
        read_lengths(path)
    assert msg in str(e.value)


def test_the_estimate_and_the_recommendation_read_the_file(usage_log):
    log = read_lengths(usage_log)
    rep = estimate(Plan(gpu="H100-SXM", num_gpus=1, instance=None), lengths_from=str(usage_log), concurrency=[1, 32])
    assert rep.workload["lengths_from"] == {"path": str(usage_log), "requests": 2000, "cached_tokens": 0.0}
    assert rep.workload["input_len"] == pytest.approx(log.input.mean, rel=0.01)
    fixed = estimate(Plan(gpu="H100-SXM", num_gpus=1, instance=None), concurrency=[1, 32])
    assert rep.best.predictions[0].e2e_s.p99 != fixed.best.predictions[0].e2e_s.p99
    with pytest.raises(BadInput, match="--input-len and --lengths-from both set the lengths"):
        estimate(Plan(), lengths_from=str(usage_log), input_len=100)

    req = RecommendRequest(model=MODEL, instances="ml.g6e.xlarge", lengths_from=str(usage_log), input_len=log.input.mean, output_len=log.output.mean)
    (best,) = recommend(req).best_per_instance
    (default,) = recommend(RecommendRequest(model=MODEL, instances="ml.g6e.xlarge")).best_per_instance
    assert best.capacity_rps > 2 * default.capacity_rps  # 562/187-token requests, not 1024/512
    assert recommend(req).as_dict()["lengths_from"] == str(usage_log)


def test_the_commands_take_lengths_from_and_refuse_a_clash(usage_log, tmp_path):
    out = knee("estimate", "--model", MODEL, "--gpu", "H100-SXM", "--concurrency", "1,8", "--lengths-from", str(usage_log))
    assert out.returncode == 0, out.stderr
    assert f"(means; from {usage_log}, 2,000 requests)" in out.stdout
    rec = knee("recommend", "--model", MODEL, "--instances", "ml.g6e.xlarge", "--lengths-from", str(usage_log), "--json")
    assert rec.returncode == 0 and json.loads(rec.stdout)["lengths_from"] == str(usage_log)
    for cmd in (["estimate", "--gpu", "H100-SXM"], ["recommend"]):
        bad = knee(*cmd, "--model", MODEL, "--lengths-from", str(usage_log), "--dataset", "sharegpt")
        assert bad.returncode == 2 and "Traceback" not in bad.stderr
        assert bad.stderr.strip() == "knee: error: --dataset and --lengths-from both set the lengths (give one of them)"
    missing = knee("estimate", "--model", MODEL, "--gpu", "H100-SXM", "--lengths-from", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "no lengths file at" in missing.stderr


def test_a_plans_lengths_file_reaches_its_estimate_recommendation_and_sweep(usage_log, tmp_path):
    from core.sweep.grammar import combinations
    from core.sweep.space import load_of, sets_from_json
    from tui.data.estimate import build_estimate
    from tui.data.plan_form import check_fields, fields_from_plan
    from tui.data.recommend import request_for, summary
    from tui.data.sweep_control import spec_from_plan

    values = fields_from_plan(Plan())
    plan, errors, hints = check_fields({**values, "lengths_from": str(usage_log)})
    assert not errors and plan is not None and plan.lengths_from == str(usage_log.resolve())
    assert "replace input/output tokens" in hints["lengths_from"]
    _, errors, _ = check_fields({**values, "lengths_from": str(tmp_path / "none.jsonl")})
    assert errors["lengths_from"].startswith("no file at")
    path = tmp_path / "plan.toml"
    plan.save(path)
    assert Plan.load(path).lengths_from == plan.lengths_from

    log = read_lengths(usage_log)
    view = build_estimate(plan)
    w = view.report.workload
    assert w["lengths_from"]["requests"] == 2000 and w["input_len"] == pytest.approx(log.input.mean, rel=0.01)
    assert view.title.endswith(f"· {w['input_len']:.0f}/{w['output_len']:.0f} tok from usage.jsonl")
    req = request_for(plan)  # on the UI thread: names the file, does not read it
    assert req.lengths_from == plan.lengths_from
    rec = recommend(req.__class__(**{**req.__dict__, "instances": "ml.g6e.xlarge"}))  # the worker reads it
    assert (rec.request.input_len, rec.request.output_len) == (log.input.mean, log.output.mean)
    assert summary(rec).startswith(f"Qwen/Qwen3-4B · {log.input.mean:.0f}/{log.output.mean:.0f} tok from file")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    request_for(plan.model_copy(update={"lengths_from": str(bad)}))  # no error before the worker
    with pytest.raises(BadInput, match="bad.jsonl line 1: no token counts"):
        recommend(request_for(plan.model_copy(update={"lengths_from": str(bad)})))
    # The sweep's random prompts take the file's lengths, each answer held to its length
    # even where the plan lets answers end at EOS (the file's answers were served).
    spec = spec_from_plan(plan.model_copy(update={"ignore_eos": False}))
    (first, *_) = combinations(sets_from_json(spec.client_sets))
    assert first["lengths_from"] == plan.lengths_from and "disable_ignore_eos" not in first
    workload, _ = load_of(first, spec)
    assert workload.output == read_lengths(usage_log).output and workload.ignore_eos
    typed = spec_from_plan(plan.model_copy(update={"server_args": "max_num_seqs=[64]", "client_args": "random_input_len=100;max_concurrency=[4]"}))
    assert "lengths_from" not in combinations(sets_from_json(typed.client_sets))[0]  # typed lengths win
    with pytest.raises(BadInput, match="client args lengths_from and random_input_len both set the lengths"):
        load_of({"lengths_from": str(usage_log), "random_input_len": 100}, spec)


async def test_a_real_sweep_point_asks_for_the_files_lengths(tmp_path):
    """Over HTTP, against the loopback simulated server: each request's max_tokens is one of
    the file's answer lengths, held with ignore_eos."""
    from test_sweep_ignore_eos import _bodies_sent

    path = tmp_path / "few.jsonl"
    path.write_text("".join(json.dumps({"prompt_tokens": 20 + 3 * i, "completion_tokens": 4 + i}) + "\n" for i in range(6)))
    bodies = await _bodies_sent({"lengths_from": str(path), "num_prompts": 12, "max_concurrency": 4})
    asked = [b["max_tokens"] for b in bodies if b.get("max_tokens")]
    assert len(asked) >= 12 and set(asked) <= set(range(4, 10)) and len(set(asked)) > 2
    assert all(b.get("ignore_eos") is True for b in bodies)


def test_cached_prompt_tokens_become_a_shared_prefix_that_prefills_for_free(tmp_path):
    """A chat log whose usage says 80% of each prompt came from the prefix cache: the mean
    cached count becomes a prefix every prompt shares, the rest each prompt's suffix (the
    mean prompt kept); its TTFT is priced on the uncached part; the sweep sends that prefix."""
    from core.spec.study import SweepSpec
    from core.sweep.space import load_of

    rng = random.Random(3)
    hit, miss = tmp_path / "chat.jsonl", tmp_path / "plain.jsonl"
    with hit.open("w") as h, miss.open("w") as m:
        for _ in range(500):
            p, o = int(rng.lognormvariate(7.5, 0.5)) + 50, int(rng.lognormvariate(5.0, 0.6)) + 1
            usage = {"prompt_tokens": p, "completion_tokens": o}
            m.write(json.dumps({"usage": usage}) + "\n")
            h.write(json.dumps({"usage": {**usage, "prompt_tokens_details": {"cached_tokens": int(p * 0.8) // 16 * 16}}}) + "\n")
    log = read_lengths(hit)
    assert 0.75 < log.cached / log.input.mean < 0.8 and read_lengths(miss).cached == 0
    wl = log.workload()
    assert (wl.dataset, wl.shared_prefix_len) == ("shared-prefix", round(log.cached))
    assert wl.input.mean + wl.prepended_len == pytest.approx(log.input.mean, rel=0.02)
    assert read_lengths(miss).workload().dataset == "random"

    def ttft(path):
        rep = estimate(Plan(gpu="H100-SXM", num_gpus=1, instance=None), lengths_from=str(path), concurrency=[1])
        return rep, rep.best.predictions[0].ttft_ms.mean

    (cached_rep, with_cache), (_, without) = ttft(hit), ttft(miss)
    assert with_cache < 0.6 * without
    assert cached_rep.workload["lengths_from"]["cached_tokens"] == pytest.approx(log.cached, abs=0.1)
    swept, _ = load_of({"lengths_from": str(hit), "max_concurrency": 4}, SweepSpec(model=MODEL))
    assert (swept.dataset, swept.shared_prefix_len) == ("shared-prefix", wl.shared_prefix_len)

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt_tokens": 10, "completion_tokens": 5, "cached_tokens": 12}) + "\n")
    with pytest.raises(BadInput, match="bad.jsonl line 1: cached_tokens 12 is not between 0 and the prompt's 10"):
        read_lengths(bad)
