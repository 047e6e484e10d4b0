"""Memory plan of one replica: weights, reserves and the KV cache that is left.

vLLM budgets ``gpu_memory_utilization × visible memory`` per GPU. From that it takes the
weights (split over TP), the peak activations of a profile run at ``max_num_batched_tokens``,
memory outside PyTorch (CUDA context, NCCL buffers) and the CUDA-graph pool; what remains is
the KV cache, in blocks shared by all sequences. A configuration fits when its KV cache holds
at least one sequence of ``max_model_len`` tokens (vLLM refuses to start otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.spec.hardware import GIB, GPU
from core.spec.model import ModelArch, kv_element_bytes
from core.spec.serving import ServerConfig

BLOCK_TOKENS = 16  # vLLM's default KV block size


@dataclass(frozen=True)
class MemoryPlan:
    tp: int
    gpu: str
    visible_bytes: float  # per GPU
    budget_bytes: float  # per GPU, visible × gpu_memory_utilization
    weight_bytes: float  # per GPU
    activation_bytes: float  # per GPU, peak of the profile run
    runtime_bytes: float  # per GPU: non-torch memory and the CUDA-graph pool
    kv_bytes: float  # per GPU
    kv_bytes_per_token: float  # per GPU, full-attention layers
    kv_tokens: int  # per replica: tokens of context the cache holds
    max_model_len: int
    fits: bool
    reason: str | None

    def max_sequences(self, tokens_per_sequence: float) -> int:
        """How many sequences of this many tokens the KV cache holds at once."""
        if not self.fits or tokens_per_sequence <= 0:
            return 0
        blocks = self.kv_tokens // BLOCK_TOKENS
        per_seq = -(-int(tokens_per_sequence) // BLOCK_TOKENS)
        return int(blocks // max(per_seq, 1))

    def as_dict(self) -> dict[str, object]:
        gb = 1e9
        return {
            "tp": self.tp,
            "fits": self.fits,
            "reason": self.reason,
            "weights_gb_per_gpu": round(self.weight_bytes / gb, 2),
            "activations_gb_per_gpu": round(self.activation_bytes / gb, 2),
            "runtime_gb_per_gpu": round(self.runtime_bytes / gb, 2),
            "kv_cache_gb_per_gpu": round(max(self.kv_bytes, 0) / gb, 2),
            "budget_gb_per_gpu": round(self.budget_bytes / gb, 2),
            "kv_tokens": self.kv_tokens,
            "max_model_len": self.max_model_len,
        }


def plan_memory(
    arch: ModelArch,
    gpu: GPU,
    tp: int = 1,
    *,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    kv_dtype: str = "auto",
) -> MemoryPlan:
    max_model_len = max_model_len or arch.max_position_embeddings
    visible = gpu.usable_bytes
    budget = visible * gpu_memory_utilization
    weights = arch.weight_bytes / tp

    # Peak activations of the profile run: the widest MLP intermediate (gate and up
    # projections together), a few hidden-state buffers, and fp32 logits for the sampled
    # sequences. MoE layers hold the routed copy of the tokens too.
    tokens = max_num_batched_tokens
    inter = max(arch.intermediate_size if arch.num_dense_layers else 0, arch.moe_intermediate_size * max(arch.experts_per_token, 1) // 2)
    mlp = tokens * 3 * inter / tp * 2
    hidden = tokens * arch.hidden_size * 2 * 4
    logits = min(max_num_seqs, tokens) * arch.vocab_size * 4 * 2 / tp
    activations = mlp + hidden + logits
    # Memory outside PyTorch's pool that vLLM charges to the budget: its profiler measures
    # the growth after start-up, so the CUDA context (~0.5 GiB) is not in it, nor is the
    # CUDA-graph pool, captured after the KV cache is allocated (both come on top of
    # gpu_memory_utilization). What is left is NCCL's buffers with TP. vLLM 0.10.1's logs on
    # an A100 80GB (dennislee22/vLLM-benchmarking, Qwen2-7B at utilization 0.25 and 0.5):
    # budget - weights - KV = 0.55 GiB at TP1 and 0.67-0.68 GiB at TP2, against these
    # activations' 0.56 and 0.31 GiB; knee reserved 0.75 GiB more and its KV cache came out
    # 0.72 GiB short in all four logs.
    runtime = (0.35 if tp > 1 else 0.0) * GIB

    kv_bytes = budget - weights - activations - runtime
    token_layer = arch.kv_values_per_token_layer(tp) * kv_element_bytes(kv_dtype, arch)
    per_token = arch.num_full_attention_layers * token_layer
    # Sliding-window layers hold at most a window per sequence; charge them to the tokens of
    # a full-length sequence so capacity stays conservative.
    if arch.sliding_layers and arch.sliding_window:
        window_share = len(arch.sliding_layers) * token_layer * min(1.0, arch.sliding_window / max_model_len)
        per_token += window_share
    kv_tokens = int(max(kv_bytes, 0) // per_token) if per_token else 0
    kv_tokens -= kv_tokens % BLOCK_TOKENS

    reason = None
    gb = 1e9
    if weights + runtime >= budget:
        reason = (
            f"weights need {weights / gb:.1f} GB per GPU at TP{tp}, but {gpu.name} offers "
            f"{budget / gb:.1f} GB at gpu_memory_utilization {gpu_memory_utilization:g}" + " — use more GPUs (higher TP) or a quantized model"
        )
    elif kv_bytes <= 0:
        reason = (
            f"weights ({weights / gb:.1f} GB) and activations at max_num_batched_tokens={max_num_batched_tokens} "
            f"({activations / gb:.1f} GB) leave no room for the KV cache on {gpu.name} at TP{tp}"
        )
    elif kv_tokens < max_model_len:
        reason = (
            f"the KV cache holds {kv_tokens} tokens at TP{tp}, fewer than max_model_len={max_model_len} — "
            "lower max_model_len, raise TP, or use an fp8 KV cache"
        )
    return MemoryPlan(
        tp=tp,
        gpu=gpu.name,
        visible_bytes=visible,
        budget_bytes=budget,
        weight_bytes=weights,
        activation_bytes=activations,
        runtime_bytes=runtime,
        kv_bytes=kv_bytes,
        kv_bytes_per_token=per_token,
        kv_tokens=max(kv_tokens, 0),
        max_model_len=max_model_len,
        fits=reason is None,
        reason=reason,
    )


def plan_config_memory(arch: ModelArch, gpu: GPU, config: ServerConfig, default_max_model_len: int | None = None) -> MemoryPlan:
    """:func:`plan_memory` at a server configuration's own knobs (the engine's defaults where
    it leaves them unset; ``default_max_model_len``, else the model's, for max_model_len)."""
    return plan_memory(
        arch,
        gpu,
        config.tp,
        gpu_memory_utilization=config.gpu_memory_utilization,
        max_model_len=config.max_model_len or default_max_model_len,
        max_num_batched_tokens=config.batched_tokens,
        max_num_seqs=config.seqs,
        kv_dtype=config.kv_cache_dtype,
    )
