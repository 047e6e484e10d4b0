import json

import pytest

from core.catalog import bundled_models, load_model
from core.catalog.bundled import bundled_config
from core.catalog.models import arch_from_config
from core.errors import BadInput


def rel(a, b):
    return abs(a - b) / b


@pytest.mark.parametrize(
    "model,total,active,convention",
    [
        # Published figures. Publishers count "active" differently: OpenAI's gpt-oss card
        # leaves out the input embedding (a lookup, not a matmul), while Qwen's and
        # Mistral's cards include it; knee reports both and is checked against each.
        ("mistralai/Mixtral-8x7B-v0.1", 46.7e9, 12.9e9, "with_embeddings"),
        ("Qwen/Qwen3-30B-A3B", 30.5e9, 3.3e9, "with_embeddings"),
        ("openai/gpt-oss-20b", 20.9e9, 3.6e9, "compute"),
        ("openai/gpt-oss-120b", 116.8e9, 5.1e9, "compute"),
        # DeepSeek-V3's card: 671B total, 37B activated (MLA's low-rank projections counted).
        ("deepseek-ai/DeepSeek-V3", 671e9, 37e9, "with_embeddings"),
    ],
)
def test_moe_total_and_active_within_2_percent(model, total, active, convention):
    arch = load_model(model)
    assert arch.is_moe
    assert rel(arch.params_total, total) < 0.02
    got = arch.params_active if convention == "compute" else arch.params_active_with_embeddings
    assert rel(got, active) < 0.02


def test_dense_models():
    llama = load_model("meta-llama/Llama-3.1-70B")
    assert rel(llama.params_total, 70.6e9) < 0.02 and not llama.is_moe
    assert llama.num_kv_heads == 8 and llama.head_dim == 128
    qwen = load_model("Qwen/Qwen3-4B")
    assert qwen.tie_embeddings and qwen.head_dim == 128  # explicit head_dim (hidden/heads = 80)
    assert rel(qwen.params_total, 4.02e9) < 0.02


def test_quantization_and_kv_dtype():
    oss = load_model("openai/gpt-oss-20b")
    assert oss.quantization.method == "mxfp4" and oss.quantization.scope == "experts"
    assert 12e9 < oss.weight_bytes < 15e9  # ~13 GB checkpoint
    assert oss.sliding_window == 128 and len(oss.sliding_layers) == 12
    llama = load_model("meta-llama/Llama-3.1-8B", precision="fp8")
    assert llama.quantization.method == "fp8"
    assert rel(llama.weight_bytes, 9.1e9) < 0.05  # linear layers in FP8, embeddings in BF16
    assert llama.kv_bytes_per_token("fp8") == llama.kv_bytes_per_token("auto") / 2
    awq = load_model("meta-llama/Llama-3.1-8B", precision="awq")
    assert awq.weight_bytes < 0.45 * load_model("meta-llama/Llama-3.1-8B").weight_bytes


def test_alias_resolves_to_shared_architecture():
    assert "nvidia/Llama-3.1-8B-Instruct-FP8" in bundled_models()
    assert load_model("nvidia/Llama-3.1-8B-Instruct-FP8").hidden_size == 4096


def test_a_requantized_alias_carries_its_own_weight_format():
    """A re-quantization has its original's dimensions, not its weights: the alias names its
    format, so `--model Qwen/Qwen3-14B-FP8` plans 16 GB of weights, not the bf16 original's 30;
    --precision still wins. Distillations with the same dimensions are plain aliases."""
    bf16 = load_model("Qwen/Qwen3-14B")
    fp8 = load_model("Qwen/Qwen3-14B-FP8")
    assert (fp8.quantization.method, fp8.quantization.block_scaled) == ("fp8", True)  # Qwen's 128x128 blocks
    assert fp8.hidden_size == bf16.hidden_size and rel(fp8.weight_bytes, 0.55 * bf16.weight_bytes) < 0.05
    assert load_model("Qwen/Qwen3-32B-AWQ").quantization.method == "awq"
    assert load_model("TheBloke/Llama-2-70B-GPTQ").quantization.method == "gptq"
    assert load_model("Qwen/Qwen3-14B-FP8", precision="bf16").weight_bytes == bf16.weight_bytes
    r1 = load_model("deepseek-ai/DeepSeek-R1-Distill-Llama-8B")
    assert r1.quantization.method == "bf16" and rel(r1.params_total, 8.03e9) < 0.01


def test_a_float32_checkpoint_is_served_in_16_bits():
    # Gemma 2's configs say float32; vLLM's --dtype auto casts such weights down to 2 bytes.
    gemma = load_model("google/gemma-2-9b")
    assert gemma.quantization.method == "bf16" and rel(gemma.weight_bytes, 2 * 9.24e9) < 0.02
    assert rel(load_model("google/gemma-2-9b", precision="fp32").weight_bytes, 2 * gemma.weight_bytes) < 0.001


def test_local_directory(tmp_path):
    cfg = bundled_config("Qwen/Qwen3-8B")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    arch = load_model(str(tmp_path))
    assert rel(arch.params_total, 8.19e9) < 0.02


def test_an_unknown_model_is_refused_with_the_bundled_ids_it_resembles(monkeypatch):
    """`--model Qwen3-8B` (no organisation, which vLLM and SageMaker cannot download) and near
    misses are refused with the bundled ids they resemble, the same name first."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BadInput, match=r"unknown model 'qwen3-8b' \(did you mean Qwen/Qwen3-8B or "):
        load_model("qwen3-8b")
    with pytest.raises(BadInput, match=r"unknown model 'Llama-2-7b-chat' \(did you mean meta-llama/Llama-2-7b-chat-hf"):
        load_model("Llama-2-7b-chat")
    with pytest.raises(BadInput, match=r"not in the HF cache \(did you mean meta-llama/Llama-3.1-8B-Instruct"):
        load_model("meta-llama/Llama-3.1-8B-Instrct")
    with pytest.raises(BadInput, match=r"unknown model 'zzz' \(give a Hugging Face id like"):
        load_model("zzz")


def test_bad_models(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BadInput, match="unknown model"):
        load_model("nobody/no-such-model-xyz")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(BadInput, match="not valid JSON"):
        load_model(str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(BadInput, match="lacks hidden_size"):
        load_model(str(tmp_path))
    with pytest.raises(BadInput, match="unknown precision"):
        load_model("Qwen/Qwen3-4B", precision="fp3")


def test_moe_and_window_counts_are_checked():
    from core.catalog.models import arch_from_config

    base = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000}
    assert arch_from_config(dict(base), "ok").head_dim == 64
    with pytest.raises(BadInput, match="hidden_size = 4 is smaller than num_attention_heads = 8 and there is no head_dim"):
        arch_from_config({**base, "hidden_size": 4}, "tiny")  # hidden // heads = 0 was a head_dim of 0
    assert arch_from_config({**base, "sliding_window": None}, "ok").sliding_window is None
    assert arch_from_config({**base, "sliding_window": False}, "ok").sliding_window is None
    # A MoE with step 0 divided by zero; more experts per token than experts made no sense.
    with pytest.raises(BadInput, match="decoder_sparse_step = 0, must be a positive integer"):
        arch_from_config({**base, "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 0}, "moe")
    with pytest.raises(BadInput, match="num_experts_per_tok = 9 is more than the 8 experts"):
        arch_from_config({**base, "num_experts": 8, "num_experts_per_tok": 9}, "moe")
    with pytest.raises(BadInput, match="num_experts = -1, must be at least 0"):
        arch_from_config({**base, "num_experts": -1}, "moe")
    with pytest.raises(BadInput, match="sliding_window = -4"):
        arch_from_config({**base, "sliding_window": -4, "layer_types": ["sliding_attention"] * 4}, "win")


def test_interleaved_sliding_window_without_layer_types():
    """Gemma 2/3/4 and Cohere2 configs written before ``layer_types`` give only the window;
    their transformers classes slide every layer but each pattern-th, so only those count
    for the full-context KV cache (gemma-2-9b read all 42 layers as global before)."""
    from core.catalog.models import arch_from_config

    gemma2 = load_model("google/gemma-2-9b")
    assert gemma2.sliding_window == 4096 and gemma2.sliding_layers == tuple(range(0, 42, 2))
    assert gemma2.num_full_attention_layers == 21
    base = {"hidden_size": 512, "num_hidden_layers": 12, "num_attention_heads": 8, "vocab_size": 1000, "sliding_window": 512}
    g3 = arch_from_config({**base, "model_type": "gemma3_text"}, "g3")
    assert g3.sliding_layers == (0, 1, 2, 3, 4, 6, 7, 8, 9, 10) and g3.num_full_attention_layers == 2
    assert arch_from_config({**base, "model_type": "cohere2", "sliding_window_pattern": 3}, "c2").num_full_attention_layers == 4
    # Gemma 4 keeps its last layer global even off the pattern (13 layers: 5, 11 and 12).
    g4 = arch_from_config({**base, "num_hidden_layers": 13, "model_type": "gemma4_text"}, "g4")
    assert g4.num_full_attention_layers == 3 and 12 not in g4.sliding_layers
    # An explicit layer_types list still wins over the pattern.
    listed = arch_from_config({**base, "model_type": "gemma3_text", "layer_types": ["full_attention"] * 11 + ["sliding_attention"]}, "g3")
    assert listed.sliding_layers == (11,)
    # A model type with no pattern and no list has no sliding layers: the window is dropped.
    assert arch_from_config({**base, "model_type": "llama"}, "l").sliding_window is None


def test_missing_tie_word_embeddings_follows_the_model_type():
    """A config.json without ``tie_word_embeddings`` gets its transformers config class's
    default: True for Gemma/Gemma2/Gemma3 (and Falcon, Cohere, StarCoder2), False for
    Llama, Mistral, Qwen2 and unknown types; an explicit key always wins."""
    from core.catalog.models import arch_from_config

    base = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000}
    for model_type in ("gemma", "gemma2", "gemma3_text", "falcon", "cohere", "starcoder2"):
        assert arch_from_config({**base, "model_type": model_type}, model_type).tie_embeddings, model_type
    for model_type in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "phi3", "deepseek_v3", "no-such-type"):
        assert not arch_from_config({**base, "model_type": model_type}, model_type).tie_embeddings, model_type
    assert not arch_from_config({**base}, "no model_type").tie_embeddings
    assert not arch_from_config({**base, "model_type": "gemma2", "tie_word_embeddings": False}, "g").tie_embeddings
    assert arch_from_config({**base, "model_type": "llama", "tie_word_embeddings": True}, "l").tie_embeddings
    # A multimodal wrapper: the text model's type decides, unless a key says otherwise.
    wrapped = {"model_type": "gemma3", "text_config": {**base, "model_type": "gemma3_text"}}
    assert arch_from_config(wrapped, "gemma3").tie_embeddings
    assert not arch_from_config({**wrapped, "tie_word_embeddings": False}, "gemma3").tie_embeddings
    tied = arch_from_config({**base, "model_type": "gemma2"}, "g")
    untied = arch_from_config({**base, "model_type": "gemma2", "tie_word_embeddings": False}, "g")
    assert untied.params_total - tied.params_total == base["vocab_size"] * base["hidden_size"]


def test_falcon_attention_and_mlp_follow_transformers():
    """Falcon configs carry ``multi_query: true`` with ``num_kv_heads`` = heads (7B) or a real
    group count (40B, ``new_decoder_architecture``); transformers' FalconAttention uses one KV
    head only for the old decoder. They name no activation: the MLP is gelu, two matrices,
    and the LM head is tied (FalconConfig's defaults)."""
    from core.catalog.models import arch_from_config

    falcon_7b = {
        "model_type": "falcon",
        "hidden_size": 4544,
        "num_attention_heads": 71,
        "num_hidden_layers": 32,
        "num_kv_heads": 71,
        "multi_query": True,
        "new_decoder_architecture": False,
        "vocab_size": 65024,
    }
    a = arch_from_config(falcon_7b, "falcon-7b")
    assert a.num_kv_heads == 1 and not a.gated_mlp and a.tie_embeddings and a.intermediate_size == 4 * 4544
    assert rel(a.params_total, 6.92e9) < 0.01  # the checkpoint's 6.92B tensors (lm_head tied)
    falcon_40b = {
        **falcon_7b,
        "hidden_size": 8192,
        "num_attention_heads": 128,
        "num_hidden_layers": 60,
        "num_kv_heads": 8,
        "new_decoder_architecture": True,
    }
    assert arch_from_config(falcon_40b, "falcon-40b").num_kv_heads == 8
    # An explicit activation still wins.
    assert arch_from_config({**falcon_7b, "activation": "silu"}, "f").gated_mlp


def test_mla_caches_one_latent_per_token_shared_by_every_head():
    """DeepSeek-V3's multi-head latent attention caches kv_lora_rank + qk_rope_head_dim values
    per token per layer (512 + 64), not keys and values per head, and every GPU of a TP group
    keeps the whole latent."""
    ds = load_model("deepseek-ai/DeepSeek-V3")
    assert ds.is_mla and not load_model("meta-llama/Llama-3.1-8B").is_mla
    assert ds.kv_bytes_per_token() == 61 * 576 * 2  # bf16 cache ("auto")
    assert ds.kv_values_per_token_layer(1) == ds.kv_values_per_token_layer(8) == 576
    # Absorbed decode attends over the whole latent in every head: more work per pair than prefill.
    assert ds.attention_flops_per_pair(decode=True) > 3 * ds.attention_flops_per_pair()
    assert ds.quantization.block_scaled  # FP8 with 128x128 weight blocks (weight_block_size)
    llama = load_model("meta-llama/Llama-3.1-8B")
    assert llama.kv_values_per_token_layer(1) == 2 * 8 * 128
    assert llama.kv_values_per_token_layer(16) == 2 * 1 * 128  # 8 KV heads replicated over 16 GPUs
    assert llama.attention_flops_per_pair(decode=True) == llama.attention_flops_per_pair() == 4 * 4096


@pytest.mark.parametrize(
    "spelling, method",
    [
        ("bfloat16", "bf16"),
        ("Float16", "fp16"),
        ("half", "fp16"),
        ("fp8_e4m3", "fp8"),
        ("W8A8", "int8"),
        ("awq_marlin", "awq"),
        ("gptq-int4", "gptq"),
        ("w4a16", "int4"),
        ("modelopt_fp4", "nvfp4"),
    ],
)
def test_a_precision_reads_in_the_spellings_users_and_vllm_use(spelling, method):
    """`--precision bfloat16` (a config's dtype name) or vLLM's `--quantization awq_marlin`
    mean the formats knee prices; the weights come out as the canonical name's."""
    arch = load_model("meta-llama/Llama-3.1-8B", precision=spelling)
    assert arch.quantization.method == method
    assert arch.weight_bytes == load_model("meta-llama/Llama-3.1-8B", precision=method).weight_bytes


def test_compressed_tensors_checkpoints_read_their_weight_type():
    """llm-compressor's configs name the weights' bits and type, never "fp8": RedHatAI's
    FP8-dynamic Scout is fp8 on its experts (its ignore list keeps attention 16-bit) and
    Kimi-K2.5's W4A16 is int4 on its routed experts; both were read as int8 on every linear."""
    scout = load_model("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", offline=True)
    assert (scout.quantization.method, scout.quantization.scope) == ("fp8", "experts")
    kimi = load_model("moonshotai/Kimi-K2.5", offline=True)
    assert (kimi.quantization.method, kimi.quantization.scope) == ("int4", "experts")
    bf16 = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct", offline=True)
    assert 0.5 < scout.weight_bytes / bf16.weight_bytes < 0.6  # experts at 1 byte, attention at 2
    assert load_model("nvidia/Llama-3.1-70B-Instruct-FP8", offline=True).quantization.method == "fp8"  # ModelOpt


def test_a_config_that_leaves_dimensions_to_its_class_gets_the_class_defaults():
    """Gemma 3's multimodal config.json gives its text_config no vocab_size and no context
    length (transformers fills them from Gemma3TextConfig); knee refused the file before."""
    cfg = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "torch_dtype": "bfloat16",
        "text_config": {
            "head_dim": 128,
            "hidden_size": 5376,
            "intermediate_size": 21504,
            "model_type": "gemma3_text",
            "num_attention_heads": 32,
            "num_hidden_layers": 62,
            "num_key_value_heads": 16,
            "sliding_window": 1024,
        },
    }
    arch = arch_from_config(cfg, "gemma-3-27b-it")
    assert (arch.vocab_size, arch.max_position_embeddings) == (262208, 131072)
    assert (len(arch.sliding_layers), arch.num_full_attention_layers) == (52, 10)  # every sixth layer global
    assert 26.5e9 < arch.weight_bytes / 2 < 27.5e9


def _closed_loopback_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _no_proxy_nor_offline(monkeypatch) -> None:
    """The hub asked directly (a proxy variable in the environment would skip the check)."""
    from core.catalog.models import _PROXY_VARS

    for v in (*_PROXY_VARS, "HF_HUB_OFFLINE"):
        monkeypatch.delenv(v, raising=False)


def test_unknown_model_with_the_hub_unreachable_says_so_without_asking_it(monkeypatch):
    """Not bundled, not local, not cached and the hub's host refuses: one line that names the
    unreachable hub, raised before transformers starts its five retries (the hub is a
    loopback port nothing listens on; nothing leaves the machine)."""
    from core.catalog.models import load_config_dict

    port = _closed_loopback_port()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    _no_proxy_nor_offline(monkeypatch)
    with pytest.raises(BadInput) as e:
        load_config_dict("no-such-org/no-such-model-xyz")
    msg = str(e.value)
    assert f"127.0.0.1:{port} is unreachable" in msg and "no-such-org/no-such-model-xyz" in msg
    assert "\n" not in msg


def test_a_hub_endpoint_with_a_bad_port_is_named(monkeypatch):
    from core.catalog.models import load_config_dict

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:notaport")
    _no_proxy_nor_offline(monkeypatch)
    with pytest.raises(BadInput, match="HF_ENDPOINT 'http://127.0.0.1:notaport' has no valid port"):
        load_config_dict("no-such-org/no-such-model-xyz")


def test_behind_a_proxy_the_hub_is_not_checked_directly(monkeypatch):
    """With HTTPS_PROXY (or another proxy variable) set, the hub's host may refuse a direct
    connection and answer through the proxy: knee does not call it unreachable itself."""
    from core.catalog.models import _hub_unreachable

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_loopback_port()}")
    _no_proxy_nor_offline(monkeypatch)
    assert "is unreachable" in (_hub_unreachable() or "")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert _hub_unreachable() is None
