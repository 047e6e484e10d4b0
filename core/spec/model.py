"""A transformer's architecture, read from a Hugging Face ``config.json``, and the
parameter, byte and FLOP counts the estimator needs.

Counts follow the modules vLLM actually runs: gated (SwiGLU) MLPs use three matrices, MoE
layers hold ``num_experts`` experts of ``moe_intermediate_size`` of which ``top_k`` run per
token (plus shared experts), ``head_dim`` is taken from the config when given (Qwen3 and
gpt-oss set it independently of hidden/heads), and tied embeddings are counted once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Bytes per weight for each storage format. Group-quantized int4 (AWQ/GPTQ, group 128)
# carries a 16-bit scale and zero per group; MXFP4 carries one 8-bit scale per 32 values.
WEIGHT_BYTES = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 4.0 / 128,
    "awq": 0.5 + 4.0 / 128,
    "gptq": 0.5 + 4.0 / 128,
    "mxfp4": 0.5 + 1.0 / 32,
    "nvfp4": 0.5 + 1.0 / 16,
}
# Other spellings of those formats that users, configs and vLLM's ``--quantization`` use.
# Ambiguous names (``compressed-tensors``, ``bitsandbytes``: the bit width is in the
# checkpoint) are not here; they are read from the checkpoint's own config.
PRECISION_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8-e4m3": "fp8",
    "fp8-dynamic": "fp8",
    "w8a8-fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "modelopt": "fp8",
    "w8a8": "int8",
    "w8a16": "int8",
    "int8-w8a8": "int8",
    "experts_int8": "int8",
    "w4a16": "int4",
    "awq_marlin": "awq",
    "int4-awq": "awq",
    "awq-int4": "awq",
    "gptq_marlin": "gptq",
    "int4-gptq": "gptq",
    "gptq-int4": "gptq",
    "modelopt_fp4": "nvfp4",
    "fp4": "nvfp4",
}


def precision_key(name: str | None) -> str | None:
    """The key of :data:`WEIGHT_BYTES` that ``name`` spells (case-insensitive, through
    :data:`PRECISION_ALIASES`), or None for a name knee does not know."""
    p = (name or "").strip().lower()
    p = PRECISION_ALIASES.get(p, p)
    return p if p in WEIGHT_BYTES else None


KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "int8": 1.0}


class Quantization(BaseModel):
    """How the weights are stored. ``scope`` says which weights the format applies to:
    ``linear`` (all projection matrices; embeddings and lm_head stay 16-bit, as
    llm-compressor, AWQ and GPTQ checkpoints do) or ``experts`` (MoE experts only, as
    gpt-oss's MXFP4 checkpoint does)."""

    model_config = ConfigDict(frozen=True)

    method: str = "bf16"  # a key of WEIGHT_BYTES
    scope: Literal["linear", "experts", "all"] = "linear"
    # FP8 with one scale per 128x128 weight block (DeepSeek-V3's recipe, ``weight_block_size``)
    # rather than per tensor or per channel: the GEMM rescales every K block.
    block_scaled: bool = False

    @property
    def bytes_per_weight(self) -> float:
        return WEIGHT_BYTES[self.method]

    @property
    def compute_precision(self) -> str:
        """The matmul precision the engine runs: FP8 W8A8 on hardware that has it; int4
        and MXFP4 kernels dequantize into 16-bit matmuls."""
        return {"fp8": "fp8", "int8": "int8"}.get(self.method, "bf16")


class ModelArch(BaseModel):
    """The parts of a model's architecture that decide memory and speed."""

    model_config = ConfigDict(frozen=True)

    name: str
    model_type: str = "llama"
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = 4096
    tie_embeddings: bool = False
    gated_mlp: bool = True
    attention_bias: bool = False
    # MoE: zero experts means dense.
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    moe_layers: tuple[int, ...] = ()  # indices of layers whose MLP is MoE
    # Attention windows: layers listed here attend to the last ``sliding_window`` tokens.
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] = ()
    # Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2): a token's keys and values are
    # cached as one compressed latent of kv_lora_rank + qk_rope_head_dim values per layer,
    # shared by every head, so tensor parallelism replicates it instead of splitting it.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    dtype: str = "bf16"  # checkpoint dtype of unquantized weights
    quantization: Quantization = Quantization()

    # ---- structure -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and bool(self.moe_layers)

    @property
    def num_moe_layers(self) -> int:
        return len(self.moe_layers) if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def num_full_attention_layers(self) -> int:
        return self.num_layers - len(self.sliding_layers)

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def kv_values_per_token_layer(self, tp: int = 1) -> int:
        """KV-cache values one GPU of a TP group holds per token per attention layer: keys
        and values of its share of the KV heads (all of them when there are fewer heads than
        GPUs), or MLA's whole latent, which every GPU keeps (vLLM's MLA backends)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * -(-self.num_kv_heads // tp) * self.head_dim

    def attention_flops_per_pair(self, decode: bool = False) -> float:
        """FLOPs of one query-key pair in one layer, all heads (QK^T and PV, 2 per MAC).
        MLA prefills as ordinary attention over up-projected keys and values, but decodes
        with the up-projections absorbed into the query and output (FlashMLA and vLLM's other
        MLA backends): each head then attends over the whole latent, several times the work."""
        if not self.is_mla:
            return 4.0 * self.q_dim
        if decode:
            return 2.0 * self.num_heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        return 2.0 * self.num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim)

    # ---- parameter counts ---------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = h * self.q_lora_rank + self.q_lora_rank * self.num_heads * qk if self.q_lora_rank else h * self.num_heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + self.num_heads * self.v_head_dim * h
        n = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.attention_bias:
            n += self.q_dim + 2 * self.kv_dim + h
        return n

    @property
    def _mlp_mats(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def dense_mlp_params(self) -> int:
        return self._mlp_mats * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        return self._mlp_mats * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_expert_params(self) -> int:
        return self._mlp_mats * self.hidden_size * self.shared_expert_intermediate_size

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_embeddings else self.vocab_size * self.hidden_size

    @property
    def norm_params(self) -> int:
        return (2 * self.num_layers + 1) * self.hidden_size

    @property
    def params_attention(self) -> int:
        return self.num_layers * self.attention_params_per_layer

    @property
    def params_experts_total(self) -> int:
        return self.num_moe_layers * self.num_experts * self.expert_params

    @property
    def params_mlp_always(self) -> int:
        """MLP weights every token uses: dense layers, shared experts and routers."""
        moe = self.num_moe_layers * (self.shared_expert_params + self.router_params)
        return self.num_dense_layers * self.dense_mlp_params + moe

    @property
    def params_total(self) -> int:
        return (
            self.params_attention
            + self.params_mlp_always
            + self.params_experts_total
            + self.embedding_params
            + self.lm_head_params
            + self.norm_params
        )

    @property
    def params_experts_active(self) -> int:
        return self.num_moe_layers * self.experts_per_token * self.expert_params

    @property
    def params_active(self) -> int:
        """Parameters one token's forward pass multiplies by: everything except unused
        experts and the input embedding table (a lookup, not a matmul). OpenAI's gpt-oss
        figures use this convention."""
        return (
            self.params_attention
            + self.params_mlp_always
            + self.params_experts_active
            + self.lm_head_params
            + (self.embedding_params if self.tie_embeddings else 0)
            + self.norm_params
        )

    @property
    def params_active_with_embeddings(self) -> int:
        """Active parameters counting the input embedding too, the convention of Qwen's
        and Mistral's model cards."""
        extra = 0 if self.tie_embeddings else self.embedding_params
        return self.params_active + extra

    @property
    def params_matmul_dense(self) -> int:
        """Matmul weights every token reads (per token FLOPs = 2 × this + experts)."""
        return self.params_attention + self.params_mlp_always + (self.lm_head_params or self.embedding_params)

    # ---- bytes ----------------------------------------------------------------------------
    def _bytes(self, n: int, quantized: bool) -> float:
        b = self.quantization.bytes_per_weight if quantized else WEIGHT_BYTES.get(self.dtype, 2.0)
        return n * b

    @property
    def weight_bytes_experts(self) -> float:
        """Bytes of all routed experts."""
        return self._bytes(self.params_experts_total, self.quantization.scope in ("linear", "experts", "all"))

    @property
    def weight_bytes_dense(self) -> float:
        """Bytes every token reads from (attention, dense MLPs, shared experts, routers,
        norms) — everything but routed experts and embedding tables."""
        linear_q = self.quantization.scope in ("linear", "all")
        return self._bytes(self.params_attention + self.params_mlp_always, linear_q) + self._bytes(self.norm_params, False)

    @property
    def weight_bytes_embeddings(self) -> float:
        q = self.quantization.scope == "all"
        return self._bytes(self.embedding_params + self.lm_head_params, q)

    @property
    def weight_bytes(self) -> float:
        return self.weight_bytes_dense + self.weight_bytes_experts + self.weight_bytes_embeddings

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> float:
        """KV bytes one token holds across the full-attention layers."""
        return self.num_full_attention_layers * self.kv_values_per_token_layer() * kv_element_bytes(kv_dtype, self)

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "type": self.model_type,
            "params_total": self.params_total,
            "params_active": self.params_active,
            "layers": self.num_layers,
            "hidden": self.hidden_size,
            "heads": f"{self.num_heads} q, latent KV {self.kv_lora_rank}+{self.qk_rope_head_dim}"
            if self.is_mla
            else f"{self.num_heads} q / {self.num_kv_heads} kv x {self.head_dim}",
            "weights": self.quantization.method,
        }
        if self.is_moe:
            out["experts"] = f"{self.experts_per_token} of {self.num_experts} in {self.num_moe_layers} layers"
        if self.sliding_layers:
            out["sliding_window"] = f"{self.sliding_window} on {len(self.sliding_layers)} layers"
        return out


def kv_element_bytes(kv_dtype: str, arch: ModelArch) -> float:
    if kv_dtype in ("auto", None, ""):
        # vLLM's "auto" stores KV in the activation dtype (16-bit even for fp8/int4 weights).
        return KV_BYTES.get(arch.dtype, 2.0)
    try:
        return KV_BYTES[kv_dtype]
    except KeyError:
        from core.errors import BadInput

        raise BadInput(f"unknown KV-cache dtype {kv_dtype!r}", "use auto, bf16, fp16 or fp8") from None
