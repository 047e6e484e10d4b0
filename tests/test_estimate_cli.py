"""`knee estimate` through the installed command, and the report behind it."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from core.errors import BadInput
from core.estimate import estimate

KNEE = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "knee"
ACCEPT = [
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
]


def knee(*args, env=None):
    e = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([str(KNEE), *args], capture_output=True, text=True, timeout=120, env=e)


def test_acceptance_command_shows_every_section():
    r = knee(*ACCEPT)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for section in ("Memory plan per GPU", "Limits", "Predictions", "bottlenecks", "Suggested search space"):
        assert section in out
    for tp in ("TP1 ", "TP2 ", "TP4 "):
        assert tp in out
    assert "max c: e2e_latency:p99<60s" in out
    assert "llm-optimizer --framework vllm --model Qwen/Qwen3-4B" in out
    assert "--constraints 'e2e_latency:p99<60s'" in out
    assert "knee sweep --model Qwen/Qwen3-4B --instance ml.g6.12xlarge" in out
    assert "memory bandwidth" in out and "compute" in out


def test_json_report():
    r = knee(*ACCEPT, "--concurrency", "1,8,32", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["hardware"]["num_gpus"] == 4 and d["hardware"]["gpu"] == "L4"
    assert [m["tp"] for m in d["memory"]] == [1, 2, 4]
    cfg = d["configs"][0]
    assert [p["concurrency"] for p in cfg["predictions"]] == [1, 8, 32]
    assert {"ttft_ms", "itl_ms", "e2e_s", "req_per_s", "prefill_bottleneck", "decode_bottleneck"} <= set(cfg["predictions"][0])
    assert cfg["limits"]["slo"][0]["constraint"] == "e2e_latency:p99<60s"
    sug = d["suggestion"]
    assert sug["tp_dp"] and all(t * dp == 4 for t, dp in sug["tp_dp"])
    assert "tensor_parallel_size*data_parallel_size:(int,int)=" in sug["server_args"]


def test_no_gpu_p2p_all_reduces_through_the_host(tmp_path):
    """--no-gpu-p2p (or gpu_p2p = false in a plan) on NVLink GPUs: TP2's all-reduces go through
    host memory, so the same configuration is slower and the report says why."""
    args = ("estimate", "--model", "Qwen/Qwen2.5-7B", "--gpu", "A100-80GB", "--num-gpus", "2", "--tp", "2", "--concurrency", "32", "--json")
    linked, host = knee(*args), knee(*args, "--no-gpu-p2p")
    assert linked.returncode == 0 and host.returncode == 0, host.stderr
    fast, slow = json.loads(linked.stdout), json.loads(host.stdout)
    assert slow["configs"][0]["predictions"][0]["itl_ms"]["mean"] > 1.3 * fast["configs"][0]["predictions"][0]["itl_ms"]["mean"]
    assert any("no GPU peer-to-peer" in n for n in slow["notes"]) and not any("peer-to-peer" in n for n in fast["notes"])
    plan = tmp_path / "plan.toml"
    plan.write_text('[plan]\nmodel = "Qwen/Qwen2.5-7B"\ninstance = ""\ngpu = "A100-80GB"\nnum_gpus = 2\ngpu_p2p = false\n')
    from_plan = knee("estimate", "--plan", str(plan), "--tp", "2", "--concurrency", "32", "--json")
    assert from_plan.returncode == 0, from_plan.stderr
    assert json.loads(from_plan.stdout)["configs"][0]["predictions"][0]["itl_ms"]["mean"] == pytest.approx(
        slow["configs"][0]["predictions"][0]["itl_ms"]["mean"]
    )


def test_no_ignore_eos_reads_sharegpt_answers_at_eos():
    """--no-ignore-eos (a client like ``vllm bench serve`` by default): ShareGPT answers end at
    the model's EOS, whose measured longest is half the replies' own, so the p99 E2E at a
    busy concurrency is shorter with the same means and throughput; the text and the JSON say
    which."""
    args = ("estimate", "--model", "Qwen/Qwen3-4B", "--gpu", "H100-SXM", "--dataset", "sharegpt", "--concurrency", "64")
    replies, at_eos = knee(*args, "--json"), knee(*args, "--json", "--no-ignore-eos")
    assert replies.returncode == 0 and at_eos.returncode == 0, at_eos.stderr
    r, e = json.loads(replies.stdout), json.loads(at_eos.stdout)
    assert (r["workload"]["ignore_eos"], e["workload"]["ignore_eos"]) == (True, False)
    assert e["workload"]["output_len"] == pytest.approx(r["workload"]["output_len"], rel=0.01)
    pr, pe = r["configs"][0]["predictions"][0], e["configs"][0]["predictions"][0]
    assert pe["req_per_s"] == pytest.approx(pr["req_per_s"], rel=0.05)
    assert pe["e2e_s"]["p99"] < 0.8 * pr["e2e_s"]["p99"]
    assert "answers end at EOS" in knee(*args, "--no-ignore-eos").stdout
    fixed = knee("estimate", "--model", "Qwen/Qwen3-4B", "--gpu", "H100-SXM", "--concurrency", "8", "--json", "--no-ignore-eos")
    assert fixed.returncode == 0 and json.loads(fixed.stdout)["workload"]["ignore_eos"] is False


def test_tp_and_knobs_flags_and_plan_file(tmp_path):
    r = knee(
        "estimate",
        "--model",
        "meta-llama/Llama-3.1-8B",
        "--gpu",
        "H100-SXM",
        "--num-gpus",
        "2",
        "--tp",
        "1",
        "--max-num-seqs",
        "64",
        "--max-num-batched-tokens",
        "4096",
        "--concurrency",
        "4,512",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [(c["tp"], c["dp"]) for c in d["configs"]] == [(1, 2)]
    assert d["configs"][0]["max_num_seqs"] == 64
    assert d["configs"][0]["predictions"][1]["limited_by"] == "max_num_seqs"
    plan = tmp_path / "plan.toml"
    # Written by hand: Plan.save drops instance=None, and loading brings the default back.
    plan.write_text(
        '[plan]\nmodel = "Qwen/Qwen3-8B"\ninstance = ""\ngpu = "L40S"\nnum_gpus = 2\n'
        'input_len = 2000\noutput_len = 100\nconstraints = "ttft:p95<1s"\n'
    )
    r = knee("estimate", "--plan", str(plan), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["workload"]["input_len"] == 2000 and d["constraints"] == "ttft:p95<1s" and d["hardware"]["gpu"] == "L40S"


def test_model_that_fits_nowhere_reports_the_reason():
    r = knee("estimate", "--model", "meta-llama/Llama-3.1-70B", "--gpu", "H100-SXM")
    assert r.returncode == 0, r.stderr
    assert "NO" in r.stdout and "141.1 GB per GPU at TP1" in r.stdout and "Nothing fits" in r.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--model", "nobody/no-such-model", "--gpu", "L4"], "unknown model"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "Z9000"], "unknown GPU"),
        (["--model", "Qwen/Qwen3-4B", "--instance", "ml.q9.huge"], "unknown SageMaker instance"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--constraints", "ttft:p95 500ms"], "no operator"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--constraints", "ttft:p42<5"], "unknown statistic"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--input-len", "-5"], "--input-len must be positive"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--output-len", "0"], "--output-len must be positive"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--concurrency", "1,-8"], "--concurrency"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--num-gpus", "2", "--tp", "4"], "TP4 needs 4 GPUs"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--engine", "teapot"], "unknown engine"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--engine-version", "banana"], "--engine-version must be a release number such as 0.10.1"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--kv-cache-dtype", "fp3"], "unknown KV-cache dtype"),
        (["--model", "Qwen/Qwen3-4B"], "no hardware given"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--input-len", "100000"], "exceed"),
        (["--model", "Qwen/Qwen3-4B", "--gpu", "L4", "--input-len", "3000", "--max-model-len", "2048"], "exceed --max-model-len"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    r = knee("estimate", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_corrupt_config_json_is_bad_input(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 4096, "num_hidden')
    r = knee("estimate", "--model", str(tmp_path), "--gpu", "L4")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "not valid JSON" in r.stderr
    (tmp_path / "config.json").write_text('{"architectures": ["Nope"]}')
    r = knee("estimate", "--model", str(tmp_path), "--gpu", "L4")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_report_api_for_the_tui():
    rep = estimate()  # the demo plan
    assert rep.instance == "ml.g6.12xlarge" and rep.constraints == "e2e_latency:p99<60s"
    assert rep.best is not None and rep.best.limits.slo_feasible
    assert rep.best.cost_per_1m_output_tokens > 0
    s = rep.suggestion
    knee_c = rep.best.at_knee.concurrency
    assert min(s.concurrency) < knee_c < max(s.concurrency)
    assert all(mp.fits for mp in rep.memory)
    json.dumps(rep.as_dict())
    with pytest.raises(BadInput):
        estimate(model="Qwen/Qwen3-4B", gpu="L4", num_gpus=3, tp=3)  # 32 heads do not split over 3


QWEN3_4B = Path("/work/shared/model-configs/Qwen--Qwen3-4B.json")


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"num_attention_heads": 0}, "num_attention_heads = 0, must be a positive integer"),
        ({"num_attention_heads": 0, "head_dim": None}, "num_attention_heads = 0, must be a positive integer"),
        ({"num_key_value_heads": 0}, "num_key_value_heads = 0, must be a positive integer"),
        ({"num_key_value_heads": 5}, "num_key_value_heads = 5 must divide num_attention_heads = 32"),
        ({"hidden_size": -2560}, "hidden_size = -2560, must be a positive integer"),
        ({"num_hidden_layers": 0}, "num_hidden_layers = 0, must be a positive integer"),
        ({"head_dim": 0}, "head_dim = 0, must be a positive integer"),
        ({"vocab_size": "lots"}, 'vocab_size = "lots" is not an integer'),
        ({"intermediate_size": 0}, "intermediate_size = 0, must be a positive integer"),
        ({"num_hidden_layers": None}, "lacks num_hidden_layers"),
    ],
)
def test_impossible_architecture_in_config_json_is_one_line(tmp_path, change, needle):
    cfg = json.loads(QWEN3_4B.read_text()) if QWEN3_4B.exists() else None
    if cfg is None:
        pytest.skip("shared model configs not present")
    for k, v in change.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = knee("estimate", "--model", str(tmp_path), "--instance", "ml.g6.12xlarge")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "config.json" in lines[0], r.stderr


def test_latent_attention_models_on_vllm_carry_the_known_gap():
    """DeepSeek-family estimates on vLLM say that published runs measured well below them
    (a note, not a factor in the numbers); SGLang's, which published runs match, do not."""
    vllm = estimate(model="deepseek-ai/DeepSeek-R1", gpu="H200", num_gpus=8, concurrency=[8], engine="vllm")
    sglang = estimate(model="deepseek-ai/DeepSeek-R1", gpu="H200", num_gpus=8, concurrency=[8], engine="sglang")
    llama = estimate(model="meta-llama/Llama-3.1-8B", gpu="H200", num_gpus=1, concurrency=[8], engine="vllm")
    assert any("latent-attention" in n for n in vllm.notes)
    assert not any("latent-attention" in n for n in sglang.notes + llama.notes)


def test_stream_interval_where_streaming_paces_the_knee():
    """A small model on SGLang at high load is paced by the tokenizer manager's per-token
    streaming: the suggestion measures --stream-interval, and estimating with it moves the
    knee (fewer messages, more tokens a second); 0 is one line of bad input."""
    base = ["estimate", "--model", "Qwen/Qwen3-0.6B", "--gpu", "H200", "--engine", "sglang", "--input-len", "100", "--output-len", "300", "--json"]
    one = json.loads(knee(*base).stdout)
    best = one["configs"][0]
    assert best["at_knee"]["decode_bottleneck"] == "API server (token streaming)"
    assert "stream_interval=[1,4,8]" in one["suggestion"]["server_args"]
    assert any("stream_interval" in w for w in one["suggestion"]["why"])
    eight = json.loads(knee(*base, "--stream-interval", "8").stdout)
    assert eight["configs"][0]["at_knee"]["output_tok_per_s"] > 2 * best["at_knee"]["output_tok_per_s"]
    assert "stream_interval" not in eight["suggestion"]["server_args"]  # the user chose one
    r = knee(*base[:-1], "--stream-interval", "0")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "knee: error: --stream-interval must be at least 1, got 0 (tokens per streamed message; 1 streams every token)"
    ]


def test_the_plans_server_args_set_the_estimate(tmp_path):
    """What the Plan screen's server args fix, the estimate uses (TP degrees, one-valued knobs,
    either engine's spelling); a swept knob stays at the engine's default and the notes say so;
    a flag still wins over the plan."""
    from core.spec.plan import Plan
    from tui.data.estimate import build_estimate

    fields = dict(model="Qwen/Qwen3-0.6B", instance=None, gpu="H200", num_gpus=2, engine="sglang", input_len=100, output_len=300)
    plain = Plan(**fields)
    plan = Plan(**fields, server_args="tp=[1];max_running_requests=64;stream_interval=8;max_num_batched_tokens=[2048,4096]")
    view = build_estimate(plan)
    assert [(ce.config.tp, ce.config.dp) for ce in view.report.configs] == [(1, 2)]
    best = view.report.configs[0]
    assert best.config.max_num_seqs == 64 and best.config.stream_interval == 8
    assert view.notes[0] == "from the plan's server args: tp=[1], max_running_requests=64, stream_interval=8"
    assert view.notes[1].startswith("max_num_batched_tokens swept in the plan's server args: estimated at the engine's default")
    # One message per 8 tokens: the streaming that paced the default's knee no longer does.
    default = build_estimate(plain).report.configs[0]
    assert default.at_knee.decode_bottleneck == "API server (token streaming)"
    assert best.at_knee.decode_bottleneck != "API server (token streaming)"

    path = tmp_path / "plan.toml"
    path.write_text(
        '[plan]\nmodel = "Qwen/Qwen3-0.6B"\ninstance = ""\ngpu = "H200"\nnum_gpus = 2\nengine = "sglang"\n'
        'input_len = 100\noutput_len = 300\nserver_args = "tp=[1];max_running_requests=64;stream_interval=8"\n'
    )
    d = json.loads(knee("estimate", "--plan", str(path), "--json").stdout)
    assert d["configs"][0]["max_num_seqs"] == 64 and d["notes"][0].startswith("from the plan's server args")
    d = json.loads(knee("estimate", "--plan", str(path), "--max-num-seqs", "128", "--json").stdout)
    assert d["configs"][0]["max_num_seqs"] == 128
    path.write_text(path.read_text().replace("stream_interval=8", "stream_interval=abc"))
    r = knee("estimate", "--plan", str(path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "stream_interval='abc' is not an integer" in r.stderr


def test_the_plans_quantization_prices_the_weights_and_unmodelled_args_are_named(tmp_path):
    """quantization=fp8 in the plan's server args is the precision the estimate prices (it
    was ignored: bf16 predictions for an FP8 sweep); an arg that can change the numbers and
    that the estimate does not model is named in its notes, one that cannot (logging) is not."""
    from core.spec.plan import Plan
    from tui.data.estimate import build_estimate

    fields = dict(model="Qwen/Qwen3-4B", instance="ml.g6e.xlarge")
    bf16 = build_estimate(Plan(**fields))
    fp8 = build_estimate(Plan(**fields, server_args="quantization=fp8;enable_expert_parallel=true;disable_log_stats=true"))
    assert "· fp8 ·" in fp8.model_summary and "· bf16 ·" in bf16.model_summary
    assert fp8.memory[0].plan.weight_bytes < 0.6 * bf16.memory[0].plan.weight_bytes
    assert fp8.notes[0] == "from the plan's server args: quantization=fp8"
    assert fp8.notes[1] == "the estimate does not model server arg enable_expert_parallel: predicted as if unset (a real sweep measures them)"
    assert not any("disable_log_stats" in n for n in fp8.notes)
    path = tmp_path / "plan.toml"
    Plan(**fields, server_args="quantization=fp8").save(path)
    d = json.loads(knee("estimate", "--plan", str(path), "--json").stdout)
    assert d["model"]["weights"] == "fp8"
    assert json.loads(knee("estimate", "--plan", str(path), "--precision", "bf16", "--json").stdout)["model"]["weights"] == "bf16"
