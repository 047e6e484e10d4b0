"""Bundled model configurations load offline and describe the model their card publishes
(parameter count within 2% of the card's), so common models never need the network."""

from __future__ import annotations

import pytest

from core.catalog import load_model

# Published parameter counts (billions), from each model's Hugging Face card.
CARDS = {
    "microsoft/Phi-3-medium-4k-instruct": 14.0,  # model card: 14B
    "mistralai/Mistral-7B-Instruct-v0.2": 7.24,  # model card: 7.24B
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": 8.03,  # an alias of Llama-3.1-8B; the Hub counts 8,030,261,248
    "Qwen/Qwen3-14B": 14.8,
    "Qwen/Qwen3-32B": 32.8,
    "Qwen/Qwen3-8B": 8.2,
    "Qwen/Qwen3-4B": 4.0,
    "Qwen/Qwen2.5-3B": 3.09,
    "Qwen/Qwen2.5-7B": 7.61,
    "Qwen/Qwen2.5-14B": 14.7,
    "Qwen/Qwen2.5-32B": 32.5,
    "meta-llama/Llama-3.2-3B": 3.21,
    "meta-llama/Llama-3.1-8B": 8.03,
    "Qwen/Qwen3-0.6B": 0.6,
    "Qwen/Qwen3-1.7B": 1.7,
    "Qwen/Qwen3-235B-A22B": 235.0,
    "Qwen/Qwen3-235B-A22B-FP8": 235.0,
    "Qwen/Qwen3-30B-A3B-FP8": 30.5,
    "Qwen/Qwen3-32B-FP8": 32.8,
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": 480.0,
    "Qwen/Qwen3-30B-A3B-Instruct-2507": 30.5,
    "Qwen/Qwen2.5-72B-Instruct": 72.7,
    "deepseek-ai/DeepSeek-V3": 671.0,
    "deepseek-ai/DeepSeek-R1": 671.0,
    "deepseek-ai/DeepSeek-R1-0528": 671.0,
    "mistralai/Mixtral-8x22B-v0.1": 141.0,
    "mistralai/Mistral-7B-Instruct-v0.3": 7.25,
    "meta-llama/Llama-3.1-405B": 405.0,
    "MiniMaxAI/MiniMax-M2.5": 229.0,
    "deepseek-ai/DeepSeek-V2-Lite": 15.7,
    "mistralai/Mistral-Nemo-Instruct-2407": 12.2,
    "01-ai/Yi-34B": 34.4,
    "01-ai/Yi-1.5-34B": 34.4,
    "google/gemma-2-9b": 9.24,  # ties its embeddings though its config.json omits the key
    "microsoft/Phi-3-mini-4k-instruct": 3.8,
    # Added for issue 11. Where the config's source also counts the checkpoint's tensors, that
    # count is used (Qwen2-7B-Instruct, Qwen2.5-3B-Instruct, QwQ-32B); else the card's size.
    "Qwen/Qwen2-7B-Instruct": 7.62,
    "Qwen/Qwen2.5-7B-Instruct": 7.61,
    "Qwen/Qwen2.5-3B-Instruct": 3.09,
    "Qwen/QwQ-32B": 32.76,
    "meta-llama/Llama-3.1-70B-Instruct": 70.6,
    "zai-org/GLM-5": 744.0,
    "zai-org/GLM-5.1": 744.0,
    # Falcon-7B ties lm_head to the input embedding; the Hub's pytorch_model.bin.index.json
    # (total_size 14,434,379,520 bytes = 7.22B bf16 values) stores the tied matrix twice,
    # so 7.22B - 65024 x 4544 = 6.92B distinct parameters.
    "tiiuae/falcon-7b": 6.92,
    "tiiuae/falcon-7b-instruct": 6.92,
    "zai-org/GLM-4.5-Air": 106.0,
    "zai-org/GLM-4.5-Air-FP8": 106.0,
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": 109.0,
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": 400.0,
    "Qwen/Qwen2.5-0.5B": 0.494,  # the source's weight table: 494,032,768
    "Qwen/Qwen2.5-0.5B-Instruct": 0.494,
    "Qwen/Qwen2.5-1.5B": 1.54,
    "Qwen/Qwen2.5-1.5B-Instruct": 1.544,  # the source's weight table: 1,543,714,304
    "google/gemma-2-2b": 2.61,
    "meta-llama/Llama-3.2-1B-Instruct": 1.24,
    "meta-llama/Meta-Llama-3-8B": 8.03,
    "01-ai/Yi-1.5-6B": 6.06,
    "deepseek-ai/deepseek-llm-7b-base": 6.91,
    # The card says "14B" (rounded); 40 layers of 5120 with a 100,352-token vocabulary and
    # untied embeddings give 14.66B, pinned here so a bad copy of the config still fails.
    "microsoft/phi-4": 14.66,
    # An alias of Qwen2.5-32B: the Hub's safetensors total for the distill, 32,763,876,352,
    # equals Qwen2.5-32B's shapes (knee leaves out only the 458,752 q/k/v bias values).
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": 32.76,
    # Added on 2026-11-27 (see core/catalog/data/model-aliases.md).
    "mistralai/Mixtral-8x22B-Instruct-v0.1": 141.0,  # model card: 141B (vocab 32768, the base's is 32000)
    "nvidia/Llama-3.1-70B-Instruct-FP8": 70.6,  # an FP8 alias of Llama-3.1-70B-Instruct
    "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic": 109.0,  # an FP8 alias of Llama-4-Scout
    "lmsys/vicuna-7b-v1.5": 6.74,  # an alias of Llama-2-7b-hf (6,738,415,616 with its shapes)
    "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF": 70.6,  # an alias of Llama-3.1-70B-Instruct
    # Added from stored copies of the published config.json (see core/catalog/data/model-aliases.md).
    # The vendored model.safetensors.index.json beside the config: 61,064,245,248 bf16 bytes.
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": 30.5,  # model card: 30.5B in total
    "microsoft/Phi-4-mini-instruct": 3.8,  # "3.8B" (executorch README); tied 200,064-token embedding
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": 1.7,  # the name's 1.7B; tied embeddings
    "ibm-granite/granite-3.3-8b-instruct": 8.17,  # "8b"; the source's tensor shapes give 8.17B (tied)
    "tiiuae/Falcon3-7B-Instruct": 7.46,  # "7B"; the source's tensor shapes give 7.46B (untied)
    "allenai/OLMo-2-1124-7B-Instruct": 7.3,  # "7B"; the source's shapes give 7.30B (q/k norms left out)
}

# MoE models: (active billions from the card, knee's count that matches the card's convention).
# Meta counts Llama 4's 17B with both embedding tables; Z.ai's 12B for GLM-4.5-Air leaves out
# the input embedding and the LM head (6.7% below params_active, which keeps the LM head), and
# is given to two digits, so it is checked within 5%.
MOE_ACTIVE = {
    "zai-org/GLM-4.5-Air": (12.0, lambda a: a.params_active - a.lm_head_params, 0.05),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": (17.0, lambda a: a.params_active_with_embeddings, 0.02),
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": (17.0, lambda a: a.params_active_with_embeddings, 0.02),
    # The card's "3.3B activated" counts both embedding tables (3.35B; 3.04B without them).
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": (3.3, lambda a: a.params_active_with_embeddings, 0.02),
}


@pytest.mark.parametrize("model,billions", sorted(CARDS.items()))
def test_bundled_config_matches_the_published_size(model, billions, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    arch = load_model(model)
    assert arch.params_total / 1e9 == pytest.approx(billions, rel=0.02)


def test_every_bundled_config_loads_offline(monkeypatch):
    """Every bundled file (those without a card size above included) parses into an
    architecture with attention heads, so a bad copy fails here rather than in a user's run."""
    from core.catalog.models import bundled_models

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    names = bundled_models()
    assert len(names) >= 60  # issue 11
    for name in names:
        arch = load_model(name)
        assert arch.params_total > 1e8, name
        assert arch.num_kv_heads >= 1 and arch.head_dim >= 1, name


@pytest.mark.parametrize("model", sorted(MOE_ACTIVE))
def test_bundled_moe_active_parameters_match_the_card(model, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    billions, count, tolerance = MOE_ACTIVE[model]
    arch = load_model(model)
    assert arch.is_moe
    assert count(arch) / 1e9 == pytest.approx(billions, rel=tolerance)


def test_moe_layer_layouts_follow_the_config(monkeypatch):
    """GLM-4.5's first_k_dense_replace keeps layer 0 dense; Llama 4 interleaves MoE layers
    every interleave_moe_layer_step (Maverick: odd layers, whose dense neighbours use
    intermediate_size_mlp) and gives every MoE layer one shared expert."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    glm = load_model("zai-org/GLM-4.5-Air")
    assert glm.moe_layers == tuple(range(1, 46))
    assert glm.shared_expert_intermediate_size == glm.moe_intermediate_size == 1408
    maverick = load_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert maverick.moe_layers == tuple(range(1, 48, 2))
    assert maverick.intermediate_size == 16384 and maverick.moe_intermediate_size == 8192
    assert maverick.shared_expert_intermediate_size == 8192
    scout = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert scout.moe_layers == tuple(range(48)) and scout.num_experts == 16


def test_falcon_7b_reads_as_multi_query(monkeypatch):
    """The old (RefinedWebModel) Falcon-7B config: multi_query means one KV head, n_head and
    n_layer name the shape, and the MLP is a plain 4x GELU."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    falcon = load_model("tiiuae/falcon-7b-instruct")
    assert (falcon.num_layers, falcon.num_heads, falcon.num_kv_heads, falcon.head_dim) == (32, 71, 1, 64)
    assert falcon.intermediate_size == 4 * 4544 and not falcon.gated_mlp and falcon.tie_embeddings


def test_every_model_in_the_published_benchmarks_is_bundled():
    """Each row of bench/data/published.jsonl finds its architecture in the bundled catalog
    (the harness's own lookup), so no held-out row is skipped for a missing config (issue 11:
    the GLM-4.5-Air rows were)."""
    import json
    from pathlib import Path

    from bench.rows import resolve

    path = Path(__file__).resolve().parents[1] / "bench" / "data" / "published.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert any(r["model"] == "zai-org/GLM-4.5-Air" for r in rows)
    missing = sorted({ref for ref, cfg, _ in map(resolve, rows) if cfg is None})
    assert missing == []
