"""Bundled model configurations load offline and describe the model their card publishes
(parameter count within 2% of the card's), so common models never need the network."""

from __future__ import annotations

import pytest

from core.catalog import load_model

# Published parameter counts (billions), from each model's Hugging Face card.
CARDS = {
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
}


@pytest.mark.parametrize("model,billions", sorted(CARDS.items()))
def test_bundled_config_matches_the_published_size(model, billions, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    arch = load_model(model)
    assert arch.params_total / 1e9 == pytest.approx(billions, rel=0.02)
