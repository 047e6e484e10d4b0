"""Launch commands per engine, secrets kept out of argv and stores, telemetry parsing."""

import pytest

from core.errors import BadInput
from core.serve.engines import build_argv, launch, redact
from core.serve.process import classify
from core.serve.telemetry import parse_vllm_metrics
from core.spec.study import EngineSpec

ARGS = {"max_num_seqs": 64, "enable_prefix_caching": False, "compilation_config": {"level": 3}}


def test_vllm_default_is_vllm_serve_with_key_in_env_only():
    argv, env = build_argv(EngineSpec(kind="vllm"), "vllm", "Qwen/Qwen3-4B", ARGS, "127.0.0.1", 8123, "SECRET")
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-4B"]
    assert argv[3:7] == ["--host", "127.0.0.1", "--port", "8123"]
    assert argv[7:] == ["--max-num-seqs=64", "--no-enable-prefix-caching", '--compilation-config={"level":3}']
    assert "SECRET" not in " ".join(argv) and env["VLLM_API_KEY"] == "SECRET"


def test_vllm_python_module_executable_container_and_env():
    e = EngineSpec(kind="vllm", python=".venv-vllm/bin/python", env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    argv, env = build_argv(e, "vllm", "/models/tiny model", {}, "127.0.0.1", 9000, "k")
    assert argv[:5] == [".venv-vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/tiny model"]
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    argv, _ = build_argv(
        EngineSpec(kind="vllm", executable="/opt/vllm/bin/vllm", container="docker run --rm --gpus all --network host vllm/vllm-openai:v0.11"),
        "vllm",
        "m",
        {},
        "127.0.0.1",
        1,
        "k",
    )
    assert argv[:6] == ["docker", "run", "--rm", "--gpus", "all", "--network"] and argv[8:10] == ["/opt/vllm/bin/vllm", "serve"]


def test_sglang_and_custom_templates():
    argv, _ = build_argv(EngineSpec(kind="sglang"), "sglang", "m", {"tp_size": 2}, "127.0.0.1", 30000, "KEY")
    assert argv[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", "m"] and argv[-1] == "--tp-size=2"
    assert redact(" ".join(argv), "KEY").count("***") == 1
    argv, env = build_argv(
        EngineSpec(kind="custom", command="my-server --model '{model}' --listen {host}:{port}"), None, "a b", {"x": 1}, "127.0.0.1", 5, "K"
    )
    assert argv == ["my-server", "--model", "a b", "--listen", "127.0.0.1:5", "--x=1"] and env["KNEE_API_KEY"] == "K"
    with pytest.raises(BadInput, match="placeholders"):
        build_argv(EngineSpec(kind="custom", command="srv {nope}"), None, "m", {}, "127.0.0.1", 5, "K")


def test_servers_bind_loopback_only_and_external_needs_a_url(tmp_path):
    with pytest.raises(BadInput, match="127.0.0.1"):
        launch(EngineSpec(kind="vllm", host="0.0.0.0"), "vllm", "m", {}, tmp_path / "log")
    with pytest.raises(BadInput, match="URL"):
        launch(EngineSpec(kind="external"), None, "m", {}, tmp_path / "log")
    s = launch(EngineSpec(kind="external", url="http://10.0.0.5:8000/"), None, "m", {}, tmp_path / "log")
    assert s.base_url == "http://10.0.0.5:8000" and s.process is None


def test_failure_classification():
    assert classify("RuntimeError: CUDA error: out of memory", "crashed_at_start") == "oom"
    assert classify("ValueError: No available memory for the cache blocks.", "crashed_at_start") == "oom"
    assert classify("api_server.py: error: unrecognized arguments: --bogus", "crashed_at_start") == "bad_args"
    assert classify("Segmentation fault", "crashed") == "crashed"


def test_vllm_metrics_parsing():
    text = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 7.0\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42\n'
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions_total{engine="0",model_name="m"} 5.0\n'
        'vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9\n'
    )
    assert parse_vllm_metrics(text) == {"running": 7.0, "waiting": 3.0, "kv_cache_usage": 0.42, "preemptions": 5.0}
