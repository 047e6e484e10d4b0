"""Deploy plans offline: container mappings and the dropped-knob check, image URIs from the
pinned sagemaker SDK, sizing and cost, previews, and the command line's plan output and
exit codes. No AWS calls are made here (see test_deploy_moto.py for those)."""

from __future__ import annotations

import ast
import json

import pytest

from core.deploy import (
    DeploySource,
    DeployTarget,
    build_plan,
    check_knobs,
    container_env,
    from_json_file,
    python_snippet,
    render_text,
    requests_json,
    resolve_image,
)
from core.deploy.containers import KNOBS
from core.deploy.secrets import Redactor, SecretRef, mask
from core.errors import BadInput
from core.spec.serving import ServerConfig

TUNED = ServerConfig(
    model="Qwen/Qwen3-8B",
    tp=2,
    dp=2,
    max_num_batched_tokens=4096,
    max_num_seqs=96,
    max_model_len=16384,
    gpu_memory_utilization=0.85,
    quantization="fp8",
    kv_cache_dtype="fp8",
    enable_prefix_caching=False,
)


def _src(**kw) -> DeploySource:
    cfg = kw.pop("config", ServerConfig(model="Qwen/Qwen3-4B", tp=1, max_num_seqs=64, max_num_batched_tokens=4096))
    base = dict(gpu="L4", num_gpus=cfg.tp * cfg.dp, request_throughput=1.5, output_throughput=700.0, trial_id="12")
    base.update(kw)
    return DeploySource(config=cfg, **base)


# ---- container mappings ----------------------------------------------------------------------
def test_lmi_maps_every_knob():
    env, rep = container_env("lmi", TUNED)
    assert env == {
        "HF_MODEL_ID": "Qwen/Qwen3-8B",
        "OPTION_TENSOR_PARALLEL_DEGREE": "2",
        "OPTION_MAX_ROLLING_BATCH_SIZE": "96",
        "OPTION_MAX_NUM_BATCHED_TOKENS": "4096",
        "OPTION_MAX_MODEL_LEN": "16384",
        "OPTION_GPU_MEMORY_UTILIZATION": "0.85",
        "OPTION_QUANTIZE": "fp8",
        "OPTION_KV_CACHE_DTYPE": "fp8",
        "OPTION_ENABLE_PREFIX_CACHING": "false",
        "OPTION_DATA_PARALLEL_SIZE": "2",
    }
    assert {m.knob for m in rep if m.status == "exact"} == set(KNOBS)
    assert len(KNOBS) == 9  # every tuned knob, listed in core.deploy.containers
    assert check_knobs(TUNED, env, rep) == []


def test_lmi_always_sets_rolling_batch_size():
    """LMI's default max_rolling_batch_size fell from 256 to 32 in v17 (async mode); a trial
    that ran vLLM's default 256 must get 256 explicitly."""
    env, _ = container_env("lmi", ServerConfig(model="m/x"))
    assert env["OPTION_MAX_ROLLING_BATCH_SIZE"] == "256"


def test_vllm_maps_every_knob_and_negates_booleans():
    env, rep = container_env("vllm", TUNED)
    assert env == {
        "SM_VLLM_MODEL": "Qwen/Qwen3-8B",
        "SM_VLLM_TENSOR_PARALLEL_SIZE": "2",
        "SM_VLLM_DATA_PARALLEL_SIZE": "2",
        "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096",
        "SM_VLLM_MAX_NUM_SEQS": "96",
        "SM_VLLM_MAX_MODEL_LEN": "16384",
        "SM_VLLM_QUANTIZATION": "fp8",
        "SM_VLLM_GPU_MEMORY_UTILIZATION": "0.85",
        "SM_VLLM_KV_CACHE_DTYPE": "fp8",
        # "false" would omit the flag and leave prefix caching on.
        "SM_VLLM_NO_ENABLE_PREFIX_CACHING": "true",
    }
    assert check_knobs(TUNED, env, rep) == []
    env, _ = container_env(
        "vllm",
        ServerConfig(model="m/x", extra_args={"enforce-eager": True, "enable-chunked-prefill": False, "speculative_config": {"method": "ngram"}}),
    )
    assert env["SM_VLLM_ENFORCE_EAGER"] == "true"
    assert env["SM_VLLM_NO_ENABLE_CHUNKED_PREFILL"] == "true"
    assert json.loads(env["SM_VLLM_SPECULATIVE_CONFIG"]) == {"method": "ngram"}


def test_tgi_drops_data_parallel_and_the_plan_fails():
    env, rep = container_env("tgi", TUNED)
    problems = check_knobs(TUNED, env, rep)
    assert any(p.startswith("dp=2: dropped") for p in problems)
    with pytest.raises(BadInput, match="tgi container would not run.*dp=2: dropped"):
        build_plan(_src(config=TUNED, num_gpus=4), DeployTarget(instance="ml.g6.12xlarge", container="tgi"))


def test_tgi_maps_a_dp1_config_with_approximations_warned():
    cfg = TUNED.model_copy(update={"dp": 1})
    plan = build_plan(_src(config=cfg), DeployTarget(instance="ml.g6.12xlarge", container="tgi"))
    env = plan.environment
    assert env["SM_NUM_GPUS"] == "2" and env["MAX_TOTAL_TOKENS"] == "16384" and env["HF_MODEL_QUANTIZE"] == "fp8"
    assert env["KV_CACHE_DTYPE"] == "fp8" and env["PREFIX_CACHING"] == "0"
    assert any("maintenance mode" in w for w in plan.warnings)
    assert any(w.startswith("max_num_seqs=96 maps only approximately") for w in plan.warnings)
    with pytest.raises(BadInput, match="quantization=mxfp4: dropped"):
        build_plan(
            _src(config=cfg.model_copy(update={"quantization": "mxfp4", "model": "openai/gpt-oss-20b", "tp": 1})),
            DeployTarget(instance="ml.g6e.xlarge", container="tgi"),
        )


def test_check_catches_a_knob_clobbered_after_mapping():
    env, rep = container_env("lmi", TUNED)
    env["OPTION_MAX_ROLLING_BATCH_SIZE"] = "32"  # as if something later overwrote it
    assert check_knobs(TUNED, env, rep) == ["max_num_seqs: OPTION_MAX_ROLLING_BATCH_SIZE is '32' in the environment, expected '96'"]
    env, rep = container_env("lmi", TUNED)
    rep = [m for m in rep if m.knob != "kv_cache_dtype"]
    assert check_knobs(TUNED, env, rep) == ["kv_cache_dtype: not mapped by this container"]


def test_extra_args_may_not_shadow_a_knob():
    with pytest.raises(BadInput, match="duplicates the tuned knob max_num_seqs"):
        container_env("vllm", ServerConfig(model="m/x", extra_args={"max-num-seqs": 8}))
    with pytest.raises(BadInput, match="duplicates the tuned knob enable_prefix_caching"):
        container_env("lmi", ServerConfig(model="m/x", extra_args={"no-enable-prefix-caching": True}))


# ---- images -----------------------------------------------------------------------------------
def test_image_uris_resolve_offline_from_the_sdk():
    lmi = resolve_image("lmi", "us-east-1", "0.34.0")
    assert lmi.uri == "763104351884.dkr.ecr.us-east-1.amazonaws.com/djl-inference:0.34.0-lmi16.0.0-cu128" and not lmi.cuda13
    assert resolve_image("lmi", "eu-west-1", "0.36.0").uri.endswith("djl-inference:0.36.0-lmi27.0.0-cu130")
    vllm = resolve_image("vllm", "us-east-1", "0.30.0")
    assert vllm.uri.endswith("/vllm:0.30.0-gpu-py312-cu130-ubuntu24.04-sagemaker") and vllm.cuda13
    tgi = resolve_image("tgi", "us-east-1", "3.3.6")
    assert tgi.uri.endswith("huggingface-pytorch-tgi-inference:2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04")
    assert "sagemaker-core 2.27.0" in tgi.source
    with pytest.raises(BadInput, match="unknown region 'mars-north-1'"):
        resolve_image("lmi", "mars-north-1")
    with pytest.raises(BadInput, match="unknown vllm image version '9.9.9'"):
        resolve_image("vllm", "us-east-1", "9.9.9")


def test_cuda13_images_get_an_inference_ami_and_cu128_ones_do_not():
    src = _src()
    new = build_plan(src, DeployTarget(instance="ml.g6.12xlarge", container="vllm"))
    assert new.inference_ami_version == "al2-ami-sagemaker-inference-gpu-3-1"
    assert new.calls[1].params["ProductionVariants"][0]["InferenceAmiVersion"] == "al2-ami-sagemaker-inference-gpu-3-1"
    old = build_plan(src, DeployTarget(instance="ml.g6.12xlarge", container="lmi", image_version="0.34.0"))
    assert old.inference_ami_version is None
    assert "InferenceAmiVersion" not in old.calls[1].params["ProductionVariants"][0]


# ---- sizing and cost -------------------------------------------------------------------------
def test_tp1_on_four_gpus_is_four_inference_component_copies_with_cost():
    plan = build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge", container="lmi", target_rps=5))
    s = plan.sizing
    assert plan.style == "inference-components"
    assert (s.copies_per_instance, s.gpus_per_copy, s.instance_count, s.total_copies) == (4, 1, 1, 4)
    assert s.capacity_rps == pytest.approx(6.0)
    assert s.price_per_hour == pytest.approx(5.752) and s.price_date == "2026"
    # $/h ÷ (copies × tok/s × 3600) × 1e6
    assert s.cost_per_1m_output_tokens == pytest.approx(5.752 / (4 * 700 * 3600) * 1e6)
    ic = plan.calls[-1].params
    assert ic["RuntimeConfig"] == {"CopyCount": 4}
    req = ic["Specification"]["ComputeResourceRequirements"]
    assert req["NumberOfAcceleratorDevicesRequired"] == 1.0 and req["MinMemoryRequiredInMb"] >= 128
    assert req["NumberOfCpuCoresRequired"] * 4 <= plan.instance.vcpus
    assert req["MinMemoryRequiredInMb"] * 4 <= plan.instance.host_memory_gib * 1024
    assert "ModelName" not in plan.calls[1].params["ProductionVariants"][0]
    assert plan.calls[1].params["ExecutionRoleArn"].startswith("arn:aws:iam::<ACCOUNT_ID>")


def test_instance_count_follows_the_target_rate():
    plan = build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge", target_rps=13))  # 6 req/s per instance
    assert plan.sizing.instance_count == 3 and plan.sizing.total_copies == 12
    assert plan.sizing.cost_per_hour == pytest.approx(3 * 5.752)
    assert plan.calls[1].params["ProductionVariants"][0]["ManagedInstanceScaling"]["MinInstanceCount"] == 3
    # Exactly at capacity needs no extra instance.
    assert build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge", target_rps=12)).sizing.instance_count == 2
    fixed = build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge", target_rps=13, instance_count=1))
    assert fixed.sizing.instance_count == 1 and any("below the target" in w for w in fixed.warnings)
    with pytest.raises(BadInput, match="needs the trial's request throughput"):
        build_plan(_src(request_throughput=None), DeployTarget(instance="ml.g6.12xlarge", target_rps=5))


def test_tp_equal_to_gpus_is_a_single_model_endpoint():
    cfg = ServerConfig(model="Qwen/Qwen3-32B", tp=4)
    plan = build_plan(_src(config=cfg), DeployTarget(instance="ml.g6.12xlarge"))
    assert plan.style == "single-model" and plan.inference_component_name is None
    assert [c.operation for c in plan.calls] == ["create_model", "create_endpoint_config", "create_endpoint"]
    v = plan.calls[1].params["ProductionVariants"][0]
    assert v["ModelName"] == plan.model_name and v["ContainerStartupHealthCheckTimeoutInSeconds"] == 1800


def test_forced_single_model_warns_about_idle_gpus():
    plan = build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge", style="single-model"))
    assert plan.sizing.copies_per_instance == 1
    assert any("3 idle" in w for w in plan.warnings)


def test_other_hardware_and_simulation_are_flagged():
    plan = build_plan(_src(gpu="H100", simulated=True), DeployTarget(instance="ml.g6.12xlarge"))
    assert any(w.startswith("measured on H100-SXM, deploying on L4") for w in plan.warnings)
    assert any("simulated" in w for w in plan.warnings)
    assert "simulated" in render_text(plan)
    same = build_plan(_src(gpu="NVIDIA L4"), DeployTarget(instance="ml.g6.12xlarge"))
    assert not any("measured on" in w for w in same.warnings)


@pytest.mark.parametrize(
    "target,message",
    [
        (dict(instance="ml.g6.13xlarge"), "unknown SageMaker instance type 'ml.g6.13xlarge'"),
        (dict(instance="ml.g6.12xlarge", region="xx-nowhere-1"), "unknown region 'xx-nowhere-1'"),
        (dict(instance="ml.g6.12xlarge", role_arn="arn:aws:iam::123:role/x"), "malformed execution role ARN"),
        (dict(instance="ml.g6.12xlarge", name="bad_name!"), "bad deployment name"),
    ],
)
def test_bad_targets(target, message):
    with pytest.raises(BadInput, match=message):
        build_plan(_src(), DeployTarget(**target))


def test_tp_above_the_instance_and_a_model_that_does_not_fit():
    with pytest.raises(BadInput, match="TP=8 is larger than ml.g6.12xlarge's 4 GPU"):
        build_plan(_src(config=ServerConfig(model="Qwen/Qwen3-4B", tp=8)), DeployTarget(instance="ml.g6.12xlarge"))
    with pytest.raises(BadInput, match="does not fit on ml.g6.xlarge: weights need .* GB per GPU at TP1"):
        build_plan(_src(config=ServerConfig(model="meta-llama/Llama-3.1-70B")), DeployTarget(instance="ml.g6.xlarge"))
    # Weights alone over the budget fail even when the source claims it ran there.
    with pytest.raises(BadInput, match="weights need"):
        build_plan(_src(config=ServerConfig(model="Qwen/Qwen3-32B", tp=2)), DeployTarget(instance="ml.g6.12xlarge"))


def test_kv_cache_misfit_fails_an_estimate_but_not_a_measurement():
    """Qwen3-8B at its full 40960-token context: the KV cache left on one L4 holds fewer
    tokens than max_model_len, so vLLM would refuse to start. A simulated trial fails the
    plan; a trial measured on L4 at this TP is trusted, with a warning."""
    cfg = ServerConfig(model="Qwen/Qwen3-8B", tp=1)
    with pytest.raises(BadInput, match="fewer than max_model_len=40960"):
        build_plan(_src(config=cfg, simulated=True), DeployTarget(instance="ml.g6.12xlarge"))
    plan = build_plan(_src(config=cfg, gpu="NVIDIA L4"), DeployTarget(instance="ml.g6.12xlarge"))
    assert any("trusting the measurement" in w for w in plan.warnings)
    ok = build_plan(_src(config=cfg.model_copy(update={"max_model_len": 8192}), simulated=True), DeployTarget(instance="ml.g6.12xlarge"))
    assert not any("fit" in w for w in ok.warnings) and ok.sizing.weights_gib_per_gpu > 7


def test_names_are_idempotent_and_change_with_the_config():
    a = build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge"))
    b = build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge"))
    c = build_plan(_src(config=ServerConfig(model="Qwen/Qwen3-4B", max_num_seqs=32)), DeployTarget(instance="ml.g6.12xlarge"))
    assert a.name == b.name and a.name.startswith("knee-qwen3-4b-") and a.name != c.name
    assert all(len(n) <= 63 for _, n in a.resources)
    named = build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge", name="prod-chat"))
    assert named.resources == [
        ("model", "prod-chat-model"),
        ("endpoint_config", "prod-chat-config"),
        ("endpoint", "prod-chat"),
        ("inference_component", "prod-chat-ic"),
    ]
    tags = {t["Key"]: t["Value"] for t in a.tags}
    assert tags == {"knee:managed-by": "knee", "knee:deployment": a.name, "knee:trial": "12"}
    assert all(c.params["Tags"] == a.tags for c in a.calls)


# ---- previews and secrets -------------------------------------------------------------------------
def test_preview_holds_a_reference_never_the_token(monkeypatch):
    token = "hf_abcdefghijklmnopqrstuvwxyz0123456789"
    monkeypatch.setenv("HF_TOKEN", token)
    plan = build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge", hf_token=SecretRef(kind="env", name="HF_TOKEN")))
    assert plan.environment["HF_TOKEN"] == "<secret env:HF_TOKEN>"
    for text in (render_text(plan), requests_json(plan), python_snippet(plan), plan.model_dump_json()):
        assert token not in text
    snippet = python_snippet(plan)
    ast.parse(snippet)  # a runnable script
    assert "hf_token = os.environ['HF_TOKEN']" in snippet
    assert json.loads(requests_json(plan))[0]["params"]["PrimaryContainer"]["Environment"]["HF_TOKEN"] == "<secret env:HF_TOKEN>"


def test_redactor_and_mask():
    token = "hf_SECRETsecretSECRET123"
    r = Redactor(token)
    assert r(f"error: bad env HF_TOKEN={token} here") == "error: bad env HF_TOKEN=hf_***(24 chars) here"
    assert "SECRET" not in mask(token)


def test_plan_roundtrips_through_json(tmp_path):
    from core.deploy import load_plan, save_preview, with_role

    plan = build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge", container="vllm"))
    path = save_preview(plan, tmp_path / "p.json")
    again = load_plan(str(path))
    assert again == plan
    roled = with_role(again, "arn:aws:iam::123456789012:role/R")
    assert all(c.params.get("ExecutionRoleArn", "arn:aws:iam::123456789012:role/R") == "arn:aws:iam::123456789012:role/R" for c in roled.calls)
    assert not any("no execution role" in w for w in roled.warnings)
    (tmp_path / "junk.json").write_text("{}")
    with pytest.raises(BadInput, match="not a knee deploy plan"):
        load_plan(str(tmp_path / "junk.json"))


def test_source_json_flat_and_nested(tmp_path):
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"model": "Qwen/Qwen3-4B", "tp": 2, "max_num_seqs": 8, "gpu": "L4", "request_throughput": 1.0}))
    src = from_json_file(flat)
    assert src.config.tp == 2 and src.config.max_num_seqs == 8 and src.gpu == "L4"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": "x/y", "tpp": 2}))
    with pytest.raises(BadInput, match="unknown field"):
        from_json_file(bad)
    with pytest.raises(BadInput, match="does not exist"):
        from_json_file(tmp_path / "missing.json")


# ---- command line ------------------------------------------------------------------------------------
def _cli(argv, capsys):
    from tui.cli import main

    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def trial_json(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    p = tmp_path / "trial.json"
    p.write_text(_src().model_dump_json())
    return str(p)


@pytest.mark.parametrize("container,var", [("lmi", "OPTION_MAX_ROLLING_BATCH_SIZE=64"), ("vllm", "SM_VLLM_MAX_NUM_SEQS=64")])
def test_cli_acceptance_plan(container, var, trial_json, capsys):
    rc, out, err = _cli(["deploy", "plan", "--from-json", trial_json, "--instance", "ml.g6.12xlarge", "--container", container], capsys)
    assert rc == 0, err
    assert "inference components: 4 copies per instance" in out
    assert "per 1M output tokens" in out and "price us-east-1, 2026" in out
    assert var in out and '"operation": "create_inference_component"' in out and "sm.create_model(**model)" in out


def test_cli_plan_json(trial_json, capsys):
    rc, out, err = _cli(
        ["deploy", "plan", "--from-json", trial_json, "--instance", "ml.g6.12xlarge", "--json", "--max-num-seqs", "128", "--target-rps", "10"], capsys
    )
    assert rc == 0
    plan = json.loads(out)
    assert plan["sizing"]["copies_per_instance"] == 4 and plan["sizing"]["instance_count"] == 2
    assert plan["environment"]["OPTION_MAX_ROLLING_BATCH_SIZE"] == "128"  # the flag overrides the file
    assert [c["operation"] for c in plan["calls"]] == ["create_model", "create_endpoint_config", "create_endpoint", "create_inference_component"]


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--instance", "ml.nope.xlarge"], "unknown SageMaker instance type"),
        (["--instance", "ml.g6.12xlarge", "--tp", "8"], "TP=8 is larger"),
        (["--instance", "ml.g6.12xlarge", "--region", "xx-nowhere-1"], "unknown region"),
        (["--instance", "ml.g6.12xlarge", "--role", "not-an-arn"], "malformed execution role ARN"),
        (["--instance", "ml.g6.xlarge", "--model", "meta-llama/Llama-3.1-70B"], "does not fit"),
        (["--instance", "ml.g6.12xlarge", "--tp", "0"], "--tp must be at least 1"),
        (["--instance", "ml.g6.12xlarge", "--hf-token-env", "KNEE_NO_SUCH_VAR"], "that variable is not set"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(extra, message, trial_json, capsys):
    rc, out, err = _cli(["deploy", "plan", "--from-json", trial_json, *extra], capsys)
    assert rc == 2 and message in err and err.count("\n") == 1 and out == ""


def test_cli_plan_from_flags_and_missing_source(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, out, err = _cli(
        ["deploy", "plan", "--model", "Qwen/Qwen3-4B", "--tp", "2", "--instance", "ml.g6.12xlarge", "--container", "vllm", "--brief"], capsys
    )
    assert rc == 0 and "2 copies per instance" in out and "Requests" not in out
    assert "no output-token throughput" in out
    rc, out, err = _cli(["deploy", "plan", "--instance", "ml.g6.12xlarge"], capsys)
    assert rc == 2 and "nothing to deploy" in err


def test_cli_trial_without_a_store_is_one_line_exit_2(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no .knee here
    rc, out, err = _cli(["deploy", "plan", "--trial", "12", "--instance", "ml.g6.12xlarge"], capsys)
    assert rc == 2 and err.startswith("knee: error:") and err.count("\n") == 1


def test_cli_aws_commands_check_region_and_credentials_offline(capsys, monkeypatch, tmp_path):
    """An unknown region or missing credentials is exit 2 before any request; the
    credential chain is kept off the network (no instance metadata lookup)."""
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens; never reached
    rc, out, err = _cli(["deploy", "delete", "--name", "x", "--region", "us-est-1", "--yes"], capsys)
    assert rc == 2 and "unknown region 'us-est-1'" in err and "us-east-1" in err
    rc, out, err = _cli(["deploy", "status", "--name", "x", "--region", "us-east-1"], capsys)
    assert rc == 2 and "no AWS credentials" in err


def test_from_study_picks_the_best_point_that_met_the_slos():
    """The store adapter over duck-typed rows (the store's schema is not pinned here)."""
    from types import SimpleNamespace as NS

    from core.deploy import from_study

    def point(tid, rps, tps, meets, c):
        return NS(
            trial_id=tid,
            status="ok",
            meets_slo=meets,
            simulated=True,
            client_args={"max_concurrency": c},
            summary={"request_throughput": rps, "output_throughput": tps},
        )

    store = NS(
        latest_study=lambda: "s1",
        spec=lambda study: NS(model="Qwen/Qwen3-4B", instance="ml.g6.12xlarge", gpu=None),
        trials=lambda study: [NS(trial_id=3, server_args={"tp": 1, "max_num_seqs": 64})],
        points=lambda study: [
            point(3, 0.6, 300.0, True, 16),
            point(3, 0.8, 400.0, True, 32),
            point(3, 1.2, 600.0, False, 64),
            point(4, 9.0, 9000.0, True, 64),
        ],
    )
    src = from_study(store, "3", to_config=lambda model, args: ServerConfig(model=model, **args))
    assert (src.request_throughput, src.output_throughput, src.gpu, src.num_gpus) == (0.8, 400.0, "L4", 1)
    assert src.simulated and src.trial_id == "3" and src.study == "s1" and "max_concurrency=32" in src.note
    with pytest.raises(BadInput, match="no trial 7"):
        from_study(store, 7, to_config=lambda model, args: ServerConfig(model=model, **args))


def test_a_simulated_trial_is_sized_on_the_pessimistic_edge_of_its_band():
    """Issue 11 item 5: a prediction sizes the endpoint on the low edge of its throughput band
    (core/estimate/bands.py), a measurement on itself; the plan says which."""
    from core.estimate.bands import pessimistic

    measured = build_plan(_src(), DeployTarget(instance="ml.g6.12xlarge", target_rps=12))
    predicted = build_plan(_src(simulated=True), DeployTarget(instance="ml.g6.12xlarge", target_rps=12))
    assert measured.sizing.sized_on == "measured" and measured.sizing.request_throughput_per_copy == 1.5
    edge = pessimistic("req_per_s", 1.5, "vllm", "dense")  # the simulator stands in for vLLM, which deploy serves
    assert edge < 1.5 and predicted.sizing.request_throughput_per_copy == pytest.approx(edge)
    assert predicted.sizing.instance_count > measured.sizing.instance_count
    assert "pessimistic edge" in predicted.sizing.sized_on and "pessimistic edge" in render_text(predicted)


def test_a_simulated_moe_trial_is_sized_on_moe_models_band(monkeypatch):
    """A MoE model's simulated throughput takes MoE models' own band where the bands file
    keeps one (knee's published MoE misses are wider than its dense ones), and the plan says
    whose rows it came from; a dense model's takes the band it had."""
    from core.estimate import bands

    shipped = bands.table()
    moe_band = {"low_ratio": 0.3, "high_ratio": 1.2, "rows": 90, "sources": 8, "held_out_coverage": 0.92}
    monkeypatch.setattr(bands, "table", lambda: {**shipped, "by_kind": {"moe": {"req_per_s": moe_band}}})
    moe = ServerConfig(model="Qwen/Qwen3-30B-A3B", tp=4, max_num_seqs=64, max_num_batched_tokens=4096)
    plan = build_plan(_src(config=moe, simulated=True), DeployTarget(instance="ml.g6.12xlarge", target_rps=12))
    assert plan.sizing.request_throughput_per_copy == pytest.approx(1.5 * 0.3)
    assert "MoE models' rows" in plan.sizing.sized_on
    dense = build_plan(_src(simulated=True), DeployTarget(instance="ml.g6.12xlarge", target_rps=12))
    assert dense.sizing.request_throughput_per_copy == pytest.approx(bands.pessimistic("req_per_s", 1.5, "vllm", "dense"))
