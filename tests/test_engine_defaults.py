"""vLLM's own batch defaults (core/spec/engine_defaults.py), by version, GPU and entry point,
as vLLM's EngineArgs.get_batch_defaults chose them (PRs #12369, #17073, #17885)."""

import pytest

from core.spec.engine_defaults import release, vllm_batch_defaults

H100, A100, L4, H200, L40S = ("H100-SXM", 79.6), ("A100-80GB", 79.2), ("L4", 22.0), ("H200", 140.4), ("L40S", 44.5)


@pytest.mark.parametrize("version", ["0.11.0", "0.9.0", "0.10.1.1", None])
def test_current_vllm_serve_admits_1024_on_large_gpus_but_not_a100(version):
    assert vllm_batch_defaults(version, *H100) == (8192, 1024)
    assert vllm_batch_defaults(version, *H200) == (8192, 1024)
    assert vllm_batch_defaults(version, *A100) == (2048, 256)  # PR #17885 put A100 back
    assert vllm_batch_defaults(version, *L4) == (2048, 256)
    assert vllm_batch_defaults(version, *L40S) == (2048, 256)


def test_offline_llm_class_gets_twice_the_token_budget():
    assert vllm_batch_defaults("0.11.0", *H100, offline=True) == (16384, 1024)
    assert vllm_batch_defaults("0.11.0", *L4, offline=True) == (8192, 256)


def test_history():
    assert vllm_batch_defaults("0.8.5", *A100) == (8192, 1024)  # before the A100 exception
    assert vllm_batch_defaults("0.8.3", *H100) == (8192, 256)  # H100/H200 by name, 256 seqs
    assert vllm_batch_defaults("0.8.3", *A100) == (2048, 256)
    assert vllm_batch_defaults("0.7.3", *H100) is None  # V0: the engine profile decides
    assert vllm_batch_defaults("0.5.4", *L4) is None


def test_release_parses_leading_numbers():
    assert release("0.10.2") == (0, 10)
    assert release("0.8.5.post1", 3) == (0, 8, 5)
    assert release("1.0rc1") == (1,)
    assert release(None) == ()


def test_estimator_and_simulator_use_the_gpus_defaults():
    """A plan that sets no batch limits gets vLLM's for its GPU in the estimator and in the
    simulator alike: 1024 sequences on an H100, 256 and a 2048-token budget on an L4."""
    from core.catalog import get_gpu, load_model
    from core.estimate.predict import Predictor
    from core.simulate import simulate
    from core.spec.hardware import Hardware
    from core.spec.serving import LoadPoint, ServerConfig
    from core.spec.workload import Workload

    arch, wl = load_model("Qwen/Qwen3-4B"), Workload.fixed(256, 32)
    h100 = Predictor(arch, get_gpu("H100-SXM"), wl).config(1)
    l4 = Predictor(arch, get_gpu("L4"), wl).config(1)
    assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)
    assert (l4.max_num_batched_tokens, l4.max_num_seqs) == (2048, 256)
    # An explicit setting wins; another engine keeps its profile's defaults.
    assert Predictor(arch, get_gpu("H100-SXM"), wl).config(1, max_num_seqs=64).max_num_seqs == 64
    from core.estimate.params import engine_profile

    sglang = Predictor(arch, get_gpu("L4"), wl, engine="sglang").config(1)
    assert sglang.max_num_batched_tokens == engine_profile("sglang")["default_max_num_batched_tokens"] != 2048

    # 400 prompts at once: an H100 runs them all together (400 < 1024), an L4 at most 256.
    def peak_running(gpu: str) -> float:
        res = simulate(arch, Hardware(gpu=get_gpu(gpu), num_gpus=1), ServerConfig(model=arch.name), wl, LoadPoint(concurrency=400, num_prompts=400))
        return float(max(res.timeseries["running"]))

    assert peak_running("H100-SXM") > 300
    assert peak_running("L4") <= 256
