"""The time of one engine step: knee's single cost model.

Both the analytic estimator (``core.estimate.predict``) and the scheduler simulation
(``core.simulate``) ask this module how long one continuous-batching step takes, so the
two can never disagree about the hardware.

A step is described by five numbers (:class:`Batch`) that are sufficient statistics for its
cost, so the simulator can keep them as running sums instead of building lists:

- ``prefill_tokens``: new prompt tokens computed this step (chunked prefill),
- ``prefill_attn``: query–key pairs those tokens attend to, Σ chunk·(context_before + chunk/2),
- ``prefill_kv``: KV tokens read by the prefill attention, Σ (context_before + chunk),
- ``decode_seqs``: sequences generating one token each,
- ``decode_context``: Σ context length over the decoding sequences (KV tokens read).

The time is a roofline per part with efficiencies below peak, plus tensor-parallel
communication and the engine's fixed costs:

    linear  = softmax(FLOPs / (peak·mfu), weight bytes touched / (BW·bw_weights))
    attn    = max(attention FLOPs / (peak·mfu_attn), KV bytes / (BW·bw_kv))
    comm    = 2·layers all-reduces of tokens·hidden·2 bytes, ring over NVLink or PCIe
    fixed   = step + layers·layer + seqs·seq + MoE layers·moe_layer

MoE weights touched grow with the batch: with T tokens routed top-k of E experts, the
expected number of distinct experts per layer is E·(1 − (1 − k/E)^T), and each touched expert
costs its bytes plus a fixed ``expert_us`` (a grouped GEMM's per-group ramp, measured on an
H100), which tensor parallelism does not divide.

Efficiencies (``calibration.toml``) are per GPU architecture, with a separate MFU for FP8
matmuls (a smaller share of a doubled peak); weight-only quantized GEMMs (FP8 on Ampere,
AWQ/GPTQ) and MoE grouped GEMMs run at a stated fraction of a dense GEMM's efficiency (FP8
experts at a fraction of their own, per engine).
Engine profiles carry the fixed costs (per step, layer, sequence, MoE layer, TP worker),
the per-request API costs, and the scheduler facts the predictor needs (chunked prefill or
prefill-only steps, default budgets, how the KV cache is sized).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import BadInput
from core.estimate.params import calibration, engine_profile
from core.spec.hardware import GPU
from core.spec.model import ModelArch, kv_element_bytes

STREAMING = "API server (token streaming)"  # the bottleneck of a step its streaming paces
ACTIVATION_BYTES = 2  # bf16/fp16 activations cross the all-reduce


@dataclass(frozen=True, slots=True)
class Batch:
    prefill_tokens: int = 0
    prefill_attn: float = 0.0
    prefill_kv: float = 0.0
    prefill_seqs: int = 0
    decode_seqs: int = 0
    decode_context: float = 0.0

    @classmethod
    def prefill(cls, tokens: int, context_before: int = 0, seqs: int = 1) -> "Batch":
        """``seqs`` sequences each prefilling ``tokens`` new tokens after ``context_before``."""
        return cls(
            prefill_tokens=tokens * seqs,
            prefill_attn=seqs * tokens * (context_before + tokens / 2),
            prefill_kv=seqs * (context_before + tokens),
            prefill_seqs=seqs,
        )

    @classmethod
    def decode(cls, seqs: int, mean_context: float) -> "Batch":
        return cls(decode_seqs=seqs, decode_context=seqs * mean_context)


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Where one step's time goes (seconds), and what bounds it."""

    linear_compute: float
    linear_memory: float
    attention_compute: float
    attention_memory: float
    communication: float
    overhead: float
    total: float
    # What streaming the step's tokens through the API server adds beyond the engine's own
    # step (0 unless the server, not the GPU, paces the tokens).
    streaming: float = 0.0

    @property
    def bottleneck(self) -> str:
        if self.streaming > 0:
            return STREAMING
        # Compute and memory sides of one part overlap, so each part counts its larger side.
        linear = (
            ("compute (matmuls)", self.linear_compute)
            if self.linear_compute >= self.linear_memory
            else ("memory bandwidth (weights)", self.linear_memory)
        )
        attention = (
            ("compute (attention)", self.attention_compute)
            if self.attention_compute >= self.attention_memory
            else ("memory bandwidth (KV cache)", self.attention_memory)
        )
        parts = [linear, attention, ("tensor-parallel communication", self.communication), ("engine overhead (CPU, launches)", self.overhead)]
        return max(parts, key=lambda p: p[1])[0]


def _softmax(a: float, b: float) -> float:
    # A smooth maximum: near the ridge, compute and memory traffic do not overlap perfectly.
    if a <= 0.0:
        return b
    if b <= 0.0:
        return a
    return (a**4 + b**4) ** 0.25


class CostModel:
    """Step time of one model replica (``tp`` GPUs) of ``arch`` on ``gpu``."""

    def __init__(
        self,
        arch: ModelArch,
        gpu: GPU,
        tp: int = 1,
        kv_dtype: str = "auto",
        engine: str = "vllm",
        engine_version: str | None = None,
        stream_interval: int = 1,
    ):
        if tp < 1:
            raise BadInput(f"tensor parallelism must be at least 1, got {tp}")
        self.arch, self.gpu, self.tp, self.kv_dtype = arch, gpu, tp, kv_dtype
        eff = calibration()["architecture"].get(gpu.architecture) or calibration()["architecture"]["hopper"]
        prof = engine_profile(engine, engine_version)
        self.engine = engine
        self.profile = prof
        speed = prof["speed"]

        precision = arch.quantization.compute_precision
        weight_only = arch.quantization.method not in ("bf16", "fp16", "fp32") and precision == "bf16"
        if precision in ("fp8",) and "fp8" not in gpu.tflops:
            precision = "bf16"  # Ampere runs FP8 checkpoints weight-only (Marlin)
            weight_only = True
        peak = gpu.peak_flops(precision)
        # Weight-only kernels (Marlin, AWQ, GPTQ) dequantize inside the GEMM main loop: they
        # win at small batches (fewer bytes) but run well below 16-bit cuBLAS once compute-bound.
        mfu_scale = eff.get("weight_only_mfu_scale", 0.6) if weight_only else 1.0
        peak16 = gpu.peak_flops("bf16")
        bw = gpu.bandwidth_gbps * 1e9

        # Per-GPU rates (seconds per FLOP / per byte), with efficiencies and engine speed.
        # FP8 GEMMs reach a smaller share of their (doubled) peak than 16-bit ones: the same
        # epilogues and memory traffic weigh twice as much (TRT-LLM's batch-1 prefills give
        # ~0.47 of the FP8 peak on H100 against ~0.69 of the FP16 peak on A100).
        mfu = eff.get("mfu_fp8", eff["mfu"]) if precision == "fp8" else eff["mfu"]
        # Block-scaled FP8 (a scale per 128x128 weight block) runs its GEMMs, and streams its
        # weights, a little slower than per-tensor FP8 (block_fp8_scale, measured on an H100).
        block = eff.get("block_fp8_scale", 1.0) if precision == "fp8" and arch.quantization.block_scaled else 1.0
        mfu_scale *= block
        self._s_per_flop = 1.0 / (peak * mfu * mfu_scale * speed)
        self._s_per_attn_flop = 1.0 / (peak16 * eff["mfu_attn"] * speed)
        self._s_per_weight_byte = 1.0 / (bw * eff["bw_weights"] * block * speed)
        self._s_per_kv_byte = 1.0 / (bw * eff["bw_kv"] * speed)

        # Linear layers: FLOPs per token and bytes per step, split over TP.
        self._dense_bytes = (arch.weight_bytes_dense + arch.weight_bytes_embeddings / 2) / tp
        # Routed experts run as grouped GEMMs of a few rows per expert, well below a dense
        # GEMM's efficiency (the engine's moe_mfu_scale); their FLOPs count that much more.
        moe_scale = prof.get("moe_mfu_scale", 1.0) if arch.is_moe else 1.0
        if arch.is_moe and precision == "fp8":
            # FP8 experts' grouped GEMMs gain little of FP8's doubled peak (narrow experts run
            # slower than in bf16: bench/moe_published.py), so the engine states their own share.
            # (precision is what the GEMMs compute in: FP8 run weight-only on Ampere reads bf16.)
            moe_scale = prof.get("moe_mfu_scale_fp8", moe_scale)
        self._flops_per_token = 2.0 * (arch.params_matmul_dense + arch.params_experts_active / moe_scale) / tp
        self._moe = arch.is_moe
        if self._moe:
            # A touched expert costs its weights' bytes plus a fixed ramp (its tiles start,
            # stream K, drain) whatever its width: under TP every GPU holds a slice of every
            # expert, so the bytes shrink TP-fold and the ramps do not (bench/gpu_moe_kernels.py).
            expert_bytes_layer = arch.weight_bytes_experts / max(arch.num_moe_layers, 1) / arch.num_experts / tp
            self._expert_s = arch.num_moe_layers * (expert_bytes_layer * self._s_per_weight_byte + eff.get("expert_us", 0.0) * 1e-6)
            self._E = arch.num_experts
            self._k_over_E = arch.experts_per_token / arch.num_experts

        # Attention: 2 matmuls (QK^T, PV) of 2 FLOPs per MAC over q_dim per pair, all layers.
        layers = arch.num_layers
        # (MLA decodes with absorbed projections: more FLOPs per pair than it prefills with.)
        self._attn_flops_per_pair = arch.attention_flops_per_pair() * layers / tp
        self._decode_attn_flops_per_pair = arch.attention_flops_per_pair(decode=True) * layers / tp
        # KV heads split over TP, replicated when there are fewer KV heads than GPUs (MLA's latent always).
        kv_token_layer = arch.kv_values_per_token_layer(tp) * kv_element_bytes(kv_dtype, arch)
        self.kv_bytes_per_token_per_gpu = arch.num_full_attention_layers * kv_token_layer
        self._window = arch.sliding_window or 0
        self._window_bytes_per_token = len(arch.sliding_layers) * kv_token_layer

        # Tensor-parallel all-reduce: two per layer; ring moves 2(N-1)/N of the buffer.
        if tp > 1:
            table = calibration()["interconnect"]
            link = table.get(gpu.interconnect) or table["pcie"]
            link_uni = gpu.allreduce_link_gbps * 1e9 / 2 * link["link_eff"]
            if gpu.interconnect == "pcie-host" and gpu.host_link_shared:
                # Staged through host memory over a path the group's GPUs share (a cloud
                # instance's switch uplink): each gets its share, full at TP2, half at TP4.
                link_uni *= 2 / tp
            self._comm_per_token = 2 * layers * (2 * (tp - 1) / tp) * arch.hidden_size * ACTIVATION_BYTES / link_uni
            self._comm_fixed = 2 * layers * link["allreduce_us"] * 1e-6 * (1 + 0.15 * (tp - 2))
        else:
            self._comm_per_token = 0.0
            self._comm_fixed = 0.0

        # Engines that drive TP workers from one process pay a per-worker cost every step
        # (broadcasting the scheduled batch: vLLM < 0.6 with Ray or multiprocessing workers).
        workers = prof.get("tp_worker_us", 0.0) * (tp - 1)
        # Host work per step (scheduling, input prep, the sampler's bookkeeping) apart from the
        # GPU's own fixed cost (launches per layer): an engine with async scheduling overlaps
        # the first with the GPU's step, so a step takes the longer of the two, not their sum.
        self._host = (prof["step_us"] + workers) * 1e-6
        self._gpu_fixed = (prof["layer_us"] * layers + prof["moe_layer_us"] * arch.num_moe_layers) * 1e-6
        self._async = bool(prof.get("async_scheduling", 0))
        # With async scheduling the host schedules step N+1 while the GPU runs step N, so a
        # request that arrives during step N cannot join before N+2: one whole step more
        # between arrival and first token whenever the engine is busy.
        self.steps_ahead = 1 if self._async else 0
        self._per_seq = prof["seq_us"] * 1e-6
        self.request_overhead_s = prof["request_ms"] * 1e-3
        self.output_token_overhead_s = prof["output_token_us"] * 1e-6
        # Before a request's first token: its own overhead and the API server's pass of that
        # token; the other tokens' passes fall in the TPOT (as the simulator streams them), so
        # E2E = TTFT + (O - 1) x TPOT holds with all O passes.
        self.first_token_overhead_s = self.request_overhead_s + self.output_token_overhead_s
        # The API server streams each running sequence's token of every step (detokenize,
        # one SSE event) from one process, overlapped with the GPU: a step cannot deliver its
        # tokens faster than seqs x this, whatever the GPU does.
        # The work is per message: --stream-interval N sends N tokens in one.
        self._stream_s = prof.get("stream_token_us", 0.0) * 1e-6 / max(1, stream_interval)

    # ---- the hot path: plain floats, no allocation (the simulator calls it per step) ----
    # (breakdown() restates its terms for explanations; keep the two in step.)
    def step_seconds(
        self,
        prefill_tokens: float,
        prefill_attn: float,
        prefill_kv: float,
        decode_seqs: float,
        decode_context: float,
        prefill_seqs: float = 0.0,
    ) -> float:
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        weights = self._dense_bytes * self._s_per_weight_byte
        if self._moe:
            weights += self._E * (1.0 - (1.0 - self._k_over_E) ** tokens) * self._expert_s
        linear = _softmax(tokens * self._flops_per_token * self._s_per_flop, weights)
        kv_tokens = decode_context + prefill_kv
        kv_bytes = kv_tokens * self.kv_bytes_per_token_per_gpu
        if self._window:  # sliding-window layers read at most the window per sequence
            kv_bytes += (decode_seqs + prefill_seqs) * self._window * self._window_bytes_per_token
        attn = max(
            (prefill_attn * self._attn_flops_per_pair + decode_context * self._decode_attn_flops_per_pair) * self._s_per_attn_flop,
            kv_bytes * self._s_per_kv_byte,
        )
        comm = tokens * self._comm_per_token + self._comm_fixed
        gpu = linear + attn + comm + self._gpu_fixed
        host = self._host + (decode_seqs + prefill_seqs) * self._per_seq
        engine = (gpu if gpu >= host else host) if self._async else gpu + host
        streamed = (decode_seqs + prefill_seqs) * self._stream_s
        return engine if engine >= streamed else streamed

    def step_time(self, batch: Batch) -> float:
        return self.step_seconds(
            batch.prefill_tokens, batch.prefill_attn, batch.prefill_kv, batch.decode_seqs, batch.decode_context, batch.prefill_seqs
        )

    def breakdown(self, batch: Batch) -> StepBreakdown:
        """The parts of :meth:`step_time`, for explaining the bottleneck."""
        # These terms restate step_seconds' on purpose: step_seconds is the simulator's hot
        # path (one call per engine step), and having it take its terms from a shared helper
        # costs a call and a tuple per step, measured at +50-120 ns a call (10-30%), a
        # percent or two of a simulated sweep. tests/test_costmodel.py
        # (test_breakdown_parts_add_up_to_step_seconds) holds the two definitions together.
        tokens = batch.prefill_tokens + batch.decode_seqs
        linear_memory = self._dense_bytes * self._s_per_weight_byte
        if self._moe:
            linear_memory += self._E * (1.0 - (1.0 - self._k_over_E) ** tokens) * self._expert_s
        kv_bytes = (batch.decode_context + batch.prefill_kv) * self.kv_bytes_per_token_per_gpu
        if self._window:
            kv_bytes += (batch.decode_seqs + batch.prefill_seqs) * self._window * self._window_bytes_per_token
        seqs = batch.decode_seqs + batch.prefill_seqs
        total = self.step_time(batch)
        linear_compute = tokens * self._flops_per_token * self._s_per_flop
        attention_compute = (
            batch.prefill_attn * self._attn_flops_per_pair + batch.decode_context * self._decode_attn_flops_per_pair
        ) * self._s_per_attn_flop
        attention_memory = kv_bytes * self._s_per_kv_byte
        communication = (tokens * self._comm_per_token + self._comm_fixed) if tokens else 0.0
        work = _softmax(linear_compute, linear_memory) + max(attention_compute, attention_memory) + communication
        host = self._host + seqs * self._per_seq
        if self._async and tokens:
            # Only the host work the GPU's step does not cover shows (step_seconds' max).
            host = max(0.0, host - (work + self._gpu_fixed))
        overhead = self._gpu_fixed + host
        engine = work + overhead if tokens > 0 else 0.0
        return StepBreakdown(
            linear_compute=linear_compute,
            linear_memory=linear_memory,
            attention_compute=attention_compute,
            attention_memory=attention_memory,
            communication=communication,
            overhead=overhead,
            total=total,
            # Only a step the streaming paces has any (the two sums differ by rounding).
            streaming=max(0.0, total - engine) if seqs * self._stream_s > engine else 0.0,
        )
