"""The step cost model and memory plan: physics that must hold whatever the calibration."""

import pytest

from core.catalog import get_gpu, load_model
from core.estimate import Batch, CostModel, plan_memory


@pytest.fixture(scope="module")
def llama8b():
    return load_model("meta-llama/Llama-3.1-8B")


def test_decode_is_bandwidth_bound_and_grows_with_batch_and_context(llama8b):
    cm = CostModel(llama8b, get_gpu("H100-SXM"))
    one = cm.step_time(Batch.decode(1, 1000))
    floor = llama8b.weight_bytes / 3.35e12  # reading every weight once at peak bandwidth
    assert one > floor
    assert cm.step_time(Batch.decode(64, 1000)) > one
    assert cm.step_time(Batch.decode(64, 8000)) > cm.step_time(Batch.decode(64, 1000))
    assert cm.breakdown(Batch.decode(1, 100)).bottleneck == "memory bandwidth (weights)"


def test_prefill_is_compute_bound_and_faster_with_fp8_on_hopper(llama8b):
    h100 = get_gpu("H100-SXM")
    bf16 = CostModel(llama8b, h100).step_time(Batch.prefill(8192))
    fp8 = CostModel(load_model("meta-llama/Llama-3.1-8B", precision="fp8"), h100).step_time(Batch.prefill(8192))
    assert fp8 < 0.8 * bf16  # FP8 GEMMs: twice the peak, a smaller share of it (mfu_fp8)
    assert CostModel(llama8b, h100).breakdown(Batch.prefill(8192)).bottleneck == "compute (matmuls)"
    # Ampere has no FP8 tensor cores: an FP8 checkpoint runs weight-only (Marlin), which
    # prefills no faster than 16-bit (dequantizing in the GEMM) but decodes faster (half the bytes).
    a100 = get_gpu("A100-80GB")
    fp8 = load_model("meta-llama/Llama-3.1-8B", precision="fp8")
    a_bf16 = CostModel(llama8b, a100).step_time(Batch.prefill(8192))
    a_fp8 = CostModel(fp8, a100).step_time(Batch.prefill(8192))
    assert a_fp8 >= a_bf16
    assert CostModel(fp8, a100).step_time(Batch.decode(1, 500)) < 0.7 * CostModel(llama8b, a100).step_time(Batch.decode(1, 500))


def test_tensor_parallel_pays_for_communication_more_over_pcie():
    arch = load_model("meta-llama/Llama-3.1-8B")
    batch = Batch.decode(32, 1500)
    for gpu, lo, hi in [("H100-SXM", 0.25, 0.75), ("L4", 0.25, 0.95)]:
        g = get_gpu(gpu)
        t1 = CostModel(arch, g, 1).step_time(batch)
        t4 = CostModel(arch, g, 4).step_time(batch)
        assert lo * t1 < t4 < hi * t1  # faster, but not 4x
    nv = CostModel(arch, get_gpu("H100-SXM"), 4).breakdown(batch)
    pcie = CostModel(arch, get_gpu("L4"), 4).breakdown(batch)
    assert pcie.communication > 2 * nv.communication


def test_moe_reads_only_touched_experts():
    mixtral = load_model("mistralai/Mixtral-8x7B-v0.1")
    cm = CostModel(mixtral, get_gpu("H100-SXM"), 2)
    one, many = cm.breakdown(Batch.decode(1, 500)), cm.breakdown(Batch.decode(256, 500))
    # One token touches 2 of 8 experts; 256 tokens touch nearly all of them.
    assert many.linear_memory > 2.5 * one.linear_memory


def test_narrow_experts_under_tp_cost_more_than_their_bytes():
    """Each touched expert has a fixed cost (expert_us) beside its bytes: TP8 reads an eighth of
    Qwen3-235B's expert bytes per GPU, but its 128 experts still ramp up on every GPU."""
    from core.estimate.params import calibration, calibrated

    qwen = load_model("Qwen/Qwen3-235B-A22B")
    h100 = get_gpu("H100-SXM")
    batch = Batch.decode(128, 500)  # 128 tokens x top-8 touch nearly all 128 experts
    assert calibration()["architecture"]["hopper"]["expert_us"] > 0
    with calibrated({"architecture.hopper.expert_us": 0.0}):
        bytes_only = [CostModel(qwen, h100, tp).breakdown(batch).linear_memory for tp in (1, 8)]
    with_ramp = [CostModel(qwen, h100, tp).breakdown(batch).linear_memory for tp in (1, 8)]
    assert with_ramp[0] > bytes_only[0] and with_ramp[1] > bytes_only[1]
    # The ramp is the same on every GPU whatever the TP, so TP8 saves less than bytes alone say.
    assert with_ramp[1] / with_ramp[0] > bytes_only[1] / bytes_only[0]
    assert (with_ramp[1] - bytes_only[1]) == pytest.approx(with_ramp[0] - bytes_only[0], rel=0.05)


def test_mla_kv_cache_holds_far_more_tokens_and_block_fp8_runs_slower():
    ds = load_model("deepseek-ai/DeepSeek-R1")
    h200 = get_gpu("H200")
    plan = plan_memory(ds, h200, tp=8, max_model_len=8192)
    # 8 x 141 GB less ~84 GB of FP8 weights per GPU leaves tens of GB per GPU for a 70 KB-per-token
    # latent: several hundred thousand tokens (a per-head cache would hold a third as many).
    assert plan.kv_bytes_per_token == 61 * 576 * 2
    assert plan.kv_tokens > 400_000
    per_tensor = ds.model_copy(update={"quantization": ds.quantization.model_copy(update={"block_scaled": False})})
    prefill = Batch.prefill(4096)
    assert CostModel(ds, h200, 8).step_time(prefill) > CostModel(per_tensor, h200, 8).step_time(prefill)


def test_fp8_experts_take_the_engines_fp8_grouped_gemm_efficiency():
    """FP8 (w8a8) experts compute at moe_mfu_scale_fp8 of a dense FP8 GEMM on engines whose
    grouped kernels are Triton's (vLLM, SGLang); 16-bit experts, TensorRT-LLM's CUTLASS experts
    and FP8 weights run weight-only on Ampere keep moe_mfu_scale."""
    from core.estimate.params import calibrated, calibration

    engines = calibration()["engine"]
    assert engines["vllm"]["moe_mfu_scale_fp8"] < engines["vllm"]["moe_mfu_scale"]
    assert "moe_mfu_scale_fp8" not in engines["tensorrt-llm"]
    ds = load_model("deepseek-ai/DeepSeek-R1")  # block-scaled FP8 experts
    qwen = load_model("Qwen/Qwen3-235B-A22B")  # bf16 experts
    prefill = Batch.prefill(8192)

    def step(arch, gpu, engine, tp=8):
        return CostModel(arch, get_gpu(gpu), tp, engine=engine).breakdown(prefill).linear_compute

    with calibrated({"engine.vllm.moe_mfu_scale_fp8": 0.64, "engine.sglang.moe_mfu_scale_fp8": 0.64}):
        even = {e: step(ds, "H200", e) for e in ("vllm", "sglang")}
        bf16_even, ampere_even = step(qwen, "H200", "vllm"), step(ds, "A100-80GB", "vllm", tp=16)
    for engine in ("vllm", "sglang"):
        # the expert FLOPs cost 0.64 / scale as much; the dense layers' do not change
        slower = step(ds, "H200", engine) / even[engine]
        assert 2.0 < slower < 0.64 / engines[engine]["moe_mfu_scale_fp8"]
    assert step(qwen, "H200", "vllm") == pytest.approx(bf16_even)
    assert step(ds, "A100-80GB", "vllm", tp=16) == pytest.approx(ampere_even)
    # TensorRT-LLM's experts keep moe_mfu_scale: the same prefill computes faster there
    assert step(ds, "H200", "tensorrt-llm") < step(ds, "H200", "vllm") / 2


@pytest.mark.parametrize(
    "model, gpu, tp, kv",
    [
        ("meta-llama/Llama-3.1-8B", "H100-SXM", 1, "auto"),  # dense
        ("meta-llama/Llama-3.1-8B", "L4", 4, "fp8"),  # TP over PCIe, fp8 KV cache
        ("mistralai/Mixtral-8x7B-v0.1", "H100-SXM", 2, "auto"),  # MoE
        ("openai/gpt-oss-20b", "H100-SXM", 1, "auto"),  # MoE with sliding-window layers
        ("deepseek-ai/DeepSeek-V3", "H200", 8, "auto"),  # MLA, block-scaled FP8
        ("mistralai/Mistral-7B-v0.1", "A100-80GB", 2, "auto"),  # sliding window
    ],
)
def test_breakdown_parts_add_up_to_step_seconds(model, gpu, tp, kv):
    """breakdown() restates the terms of the inlined step_seconds (the simulator's hot
    path); both must price every part of a step alike."""
    from core.estimate.costmodel import _softmax

    cm = CostModel(load_model(model), get_gpu(gpu), tp, kv)
    batches = [
        Batch.decode(1, 100),
        Batch.decode(256, 3000),
        Batch.prefill(8192),
        Batch.prefill(512, context_before=2048, seqs=3),
        Batch(prefill_tokens=1024, prefill_attn=1024 * 700.0, prefill_kv=1400.0, prefill_seqs=2, decode_seqs=40, decode_context=40 * 1800.0),
    ]
    for b in batches:
        bd = cm.breakdown(b)
        assert bd.total == cm.step_time(b)
        recombined = (
            _softmax(bd.linear_compute, bd.linear_memory)
            + max(bd.attention_compute, bd.attention_memory)
            + bd.communication
            + bd.overhead
            + bd.streaming
        )
        assert recombined == pytest.approx(bd.total, rel=1e-12)
        assert min(bd.linear_compute, bd.linear_memory, bd.attention_memory, bd.overhead) > 0
        assert (bd.communication > 0) == (tp > 1)


def test_memory_plan_llama70b_bf16_does_not_fit_one_h100():
    plan = plan_memory(load_model("meta-llama/Llama-3.1-70B"), get_gpu("H100-SXM"), 1)
    assert not plan.fits
    assert "141.1 GB" in plan.reason and "TP1" in plan.reason
    plan4 = plan_memory(load_model("meta-llama/Llama-3.1-70B"), get_gpu("H100-SXM"), 4, max_model_len=8192)
    assert plan4.fits and plan4.kv_tokens > 100_000


@pytest.mark.parametrize("tp, utilization, logged_tokens", [(1, 0.25, 93_872), (1, 0.5, 464_848), (2, 0.25, 450_192), (2, 0.5, 1_192_160)])
def test_memory_plan_reproduces_the_kv_cache_vllm_logged(tp, utilization, logged_tokens):
    """vLLM 0.10.1 on an A100 80GB, Qwen2-7B-Instruct (Qwen2.5-7B's dimensions), max_model_len
    16384, its default 2048-token budget and 256 sequences: "GPU KV cache size" from the
    startup logs of dennislee22/vLLM-benchmarking (log/vllm-7B-*gpuA10080GB-*GRAM*.log).
    knee reserved the CUDA context too and came out 0.72 GiB (13-27k tokens) short in all four."""
    plan = plan_memory(
        load_model("Qwen/Qwen2.5-7B"), get_gpu("A100-80GB"), tp, gpu_memory_utilization=utilization, max_model_len=16384, max_num_batched_tokens=2048
    )
    assert plan.kv_tokens == pytest.approx(logged_tokens, rel=0.01)


def test_memory_plan_kv_capacity_scales_with_tp_and_kv_dtype():
    arch, l4 = load_model("Qwen/Qwen3-4B"), get_gpu("L4")
    p1 = plan_memory(arch, l4, 1, max_model_len=4096)
    p4 = plan_memory(arch, l4, 4, max_model_len=4096)
    p1fp8 = plan_memory(arch, l4, 1, max_model_len=4096, kv_dtype="fp8")
    assert p1.fits and p4.kv_tokens > 4 * p1.kv_tokens  # weights shrink per GPU too
    assert p1fp8.kv_tokens == pytest.approx(2 * p1.kv_tokens, rel=0.01)
    assert p1.max_sequences(1536) == p1.kv_tokens // 16 // 96
    tight = plan_memory(arch, l4, 1, max_model_len=10_000_000)
    assert not tight.fits and "max_model_len" in tight.reason


def test_all_reduce_cost_follows_the_interconnect_not_the_architecture():
    """An A10G (Ampere, PCIe) all-reduces like an L4 (Ada, PCIe), not like an A100 (Ampere,
    NVLink): calibration.toml's [interconnect.pcie] moves both PCIe GPUs and neither NVLink one."""
    from core.estimate.params import calibrated

    arch = load_model("meta-llama/Llama-3.1-8B")
    batch = Batch.decode(64, 1000)
    gpus = ("A10G", "L4", "A100-80GB", "H100-SXM")
    base = {g: CostModel(arch, get_gpu(g), 4).step_time(batch) for g in gpus}
    with calibrated({"interconnect.pcie.allreduce_us": 300.0}):
        slow = {g: CostModel(arch, get_gpu(g), 4).step_time(batch) for g in gpus}
    assert slow["A10G"] > base["A10G"] * 1.05 and slow["L4"] > base["L4"] * 1.05
    assert slow["A100-80GB"] == base["A100-80GB"] and slow["H100-SXM"] == base["H100-SXM"]


def test_instances_without_peer_to_peer_all_reduce_through_the_host():
    """Multi-GPU g5/g6/g6e have no GPU peer-to-peer (instances.toml gpu_p2p = false): their
    GPUs all-reduce through [interconnect.pcie-host], slower than the same GPUs with it."""
    from core.catalog import resolve_hardware

    g6 = resolve_hardware(instance="ml.g6.12xlarge").gpu
    box = resolve_hardware(gpu="L4", num_gpus=4).gpu
    assert (g6.interconnect, box.interconnect) == ("pcie-host", "pcie")
    assert g6.host_link_shared  # its GPUs share one path to host memory (instances.toml)
    assert resolve_hardware(instance="ml.g6.xlarge").gpu.interconnect == "pcie"  # one GPU: nothing to share
    assert resolve_hardware(instance="ml.p4d.24xlarge").gpu.interconnect == "nvlink"
    arch = load_model("Qwen/Qwen3-4B")
    batch = Batch.decode(128, 400)
    assert CostModel(arch, g6, 4).step_time(batch) > 1.2 * CostModel(arch, box, 4).step_time(batch)
    assert CostModel(arch, g6, 1).step_time(batch) == CostModel(arch, box, 1).step_time(batch)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_api_server_streaming_paces_a_large_batch_only(engine):
    """Each running sequence's token goes out through one API server process (vLLM's API
    server; SGLang's tokenizer manager): a step of many short decodes is paced by that (and
    the bottleneck says so), a small batch is not."""
    from core.estimate.params import calibrated

    arch, gpu = load_model("Qwen/Qwen3-4B"), get_gpu("H100-SXM")
    with calibrated({f"engine.{engine}.stream_token_us": 100.0}):
        cm = CostModel(arch, gpu, engine=engine)
    small, large = Batch.decode(8, 300.0), Batch.decode(1000, 300.0)
    assert cm.breakdown(small).streaming == 0.0
    big = cm.breakdown(large)
    assert big.total == pytest.approx(1000 * 100e-6) and big.streaming > 0
    assert big.bottleneck == "API server (token streaming)"


def test_async_scheduling_hides_host_work_behind_the_gpu_step():
    """vLLM from 0.14 schedules the next step while the GPU runs this one: a step costs the
    longer of host and GPU time, not their sum; the breakdown still adds up to the step."""
    from core.estimate.costmodel import _softmax
    from core.estimate.params import engine_profile

    assert engine_profile("vllm", "0.15.1")["async_scheduling"] == 1
    assert not engine_profile("vllm", "0.11.0").get("async_scheduling")
    arch, gpu = load_model("Qwen/Qwen3-4B"), get_gpu("H100-SXM")
    sync, overlapped = CostModel(arch, gpu, 1, engine_version="0.11.0"), CostModel(arch, gpu, 1, engine_version="0.15.1")
    host, seq = engine_profile("vllm", "0.11.0")["step_us"] * 1e-6, engine_profile("vllm", "0.11.0")["seq_us"] * 1e-6
    small, big = Batch.decode(1, 100), Batch.decode(256, 256 * 3000)
    for b in (small, big):
        saved = sync.step_time(b) - overlapped.step_time(b)
        # The host's step_us and seq_us overlap: the saving is the host work, or the GPU work
        # if that is the shorter, never more than either.
        assert 0 < saved <= host + b.decode_seqs * seq + 1e-12
        bd = overlapped.breakdown(b)
        recombined = _softmax(bd.linear_compute, bd.linear_memory) + max(bd.attention_compute, bd.attention_memory)
        recombined += bd.communication + bd.overhead + bd.streaming
        assert recombined == pytest.approx(bd.total, rel=1e-12)
    # A big decode step is GPU-bound: the whole host part hides behind it.
    assert sync.step_time(big) - overlapped.step_time(big) == pytest.approx(host + 256 * seq, rel=1e-9)


def test_engine_profiles_by_version():
    """The profile follows the engine's release: SGLang before 0.4 answers a request faster
    than 0.4 and later (fitted on three published SGLang sources); vLLM 0.14 and later
    overlap the host's step work; unknown versions take the current profile."""
    from core.estimate.params import engine_profile

    assert engine_profile("sglang", "0.3.0")["request_ms"] < engine_profile("sglang", "0.5.6")["request_ms"]
    assert engine_profile("sglang", None) == engine_profile("sglang", "0.5.9")
    assert engine_profile("vllm", "0.14.1").get("async_scheduling") == 1
    assert engine_profile("vllm", None) == engine_profile("vllm", "0.16.0")
    assert engine_profile("vllm", None) != engine_profile("vllm", "0.11.0")


def test_other_spellings_of_an_engine_take_its_profile():
    """Benchmark reports write TensorRT-LLM and TGI several ways; each takes the profile of the
    engine it names (TGI's admission that waits rather than evicts included), and a name knee
    has no profile for is refused with the names it knows."""
    from core.errors import BadInput
    from core.estimate.params import engine_profile

    for name in ("trtllm", "TRT-LLM", "tensorrt_llm", "TensorRT-LLM"):
        assert engine_profile(name, "1.0.0") == engine_profile("tensorrt-llm", "1.0.0")
    tgi = engine_profile("text-generation-inference", "1.0.3")
    assert tgi == engine_profile("tgi", "1.0.3")
    assert tgi["evicts_when_full"] == 0 and engine_profile("vllm", "0.5.0")["evicts_when_full"] == 1
    with pytest.raises(BadInput, match="unknown engine 'lmdeploy'") as e:
        engine_profile("lmdeploy")
    assert "tensorrt-llm, nim or tgi" in e.value.hint


def test_no_peer_to_peer_stages_all_reduce_through_the_host_even_on_nvlink():
    """A box without GPU P2P (vLLM: "Custom allreduce is disabled because your platform lacks
    GPU P2P capability") all-reduces through host memory over the PCIe slot, NVLink or not;
    on a cloud instance whose GPUs share that host path each gets 2/TP of it, on a box whose
    GPUs have their own slots (8x RTX 4090 without P2P) each keeps its own."""
    a100 = get_gpu("A100-80GB")
    no_p2p = a100.model_copy(update={"p2p": False})
    assert a100.interconnect == "nvlink" and no_p2p.interconnect == "pcie-host"
    assert no_p2p.allreduce_link_gbps == 64.0 < a100.allreduce_link_gbps
    arch = load_model("Qwen/Qwen2.5-7B")
    batch = Batch.decode(64, 1000)
    nvlink = CostModel(arch, a100, 2).breakdown(batch).communication
    host = CostModel(arch, no_p2p, 2).breakdown(batch).communication
    assert host > 3 * nvlink
    # The per-token part of a TP4 group's host-staged all-reduce: the ring's 1.5x the bytes of
    # TP2's, and on a shared host path each GPU at half the share of it, so 3x per token.
    big = Batch.decode(512, 1000)

    def per_token(gpu, tp):
        return CostModel(arch, gpu, tp).breakdown(big).communication - CostModel(arch, gpu, tp).breakdown(Batch.decode(1, 1000)).communication

    shared = no_p2p.model_copy(update={"host_link_shared": True})
    assert per_token(shared, 4) == pytest.approx(3 * per_token(shared, 2), rel=0.01)
    assert per_token(no_p2p, 4) == pytest.approx(1.5 * per_token(no_p2p, 2), rel=0.01)
    assert per_token(shared, 2) == pytest.approx(per_token(no_p2p, 2), rel=0.01)  # TP2: the whole path either way
