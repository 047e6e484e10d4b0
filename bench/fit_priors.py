"""What :mod:`bench.fit` fits and where each parameter starts: the fittable fields and their
bounds, the prior (the value a fit is pulled toward, and how hard), and
:func:`parameters`, every fittable parameter with its prior and bounds.

The priors are frozen here (:data:`PRIORS`), not read from ``core/estimate/calibration.toml``:
the file ships fitted values, and a leave-one-source-out fold whose prior were a value fitted
on every source would see its held-out source through it. Where a GPU measured a parameter
(:func:`bench.kernel_priors.measured_priors`: Hopper's efficiencies, the CUDA-graph engines'
per-layer floor), the measurement is its prior instead.
"""

from __future__ import annotations

import math
import os

ARCH_FIELDS = {
    "mfu": (0.2, 1.0),
    "mfu_fp8": (0.2, 1.0),
    "mfu_attn": (0.2, 1.0),
    "bw_weights": (0.2, 1.0),
    "bw_kv": (0.2, 1.0),
}
LINK_FIELDS = {"link_eff": (0.05, 1.0), "allreduce_us": (1.0, 300.0)}
ENGINE_FIELDS = {
    "step_us": (20.0, 10000.0),
    "layer_us": (1.0, 200.0),
    "stream_token_us": (10.0, 1000.0),
    "moe_mfu_scale_fp8": (0.05, 1.0),
}
# Fitted for one engine only: SGLang's time before a request's first token beyond its prefill
# (tokenizer manager, scheduler and detokenizer processes), which no datasheet gives and which
# three published SGLang sources measure (datacrunch, gpustack, sglcookbook).
SINGLE_FIELDS = {"engine.sglang.request_ms": (1.0, 500.0)}
CAP = math.log(3.0)
# The prior: each parameter's hand-set (datasheet / literature) value, with a log-normal
# spread of PRIOR_SIGMA. Moving a parameter by a factor r costs
# PRIOR_WEIGHT * (ln r / PRIOR_SIGMA)^2 / 2, in the objective's units (one capped |log ratio|
# term). Without it a parameter that few training rows touch drifts to a bound on them
# (sglang's step_us to 5000 us on one row, mfu_attn to 0.2 or 1.0) and the held-out source
# pays; see bench/fit.py's docstring for the measured effect.
PRIOR_SIGMA = float(os.environ.get("KNEE_FIT_PRIOR_SIGMA", "0.25"))
PRIOR_WEIGHT = float(os.environ.get("KNEE_FIT_PRIOR_WEIGHT", "4.0"))

# Priors no datasheet or paper pins down get a wide spread: NCCL all-reduce over PCIe, with
# and without peer-to-peer (g5/g6/g6e stage it through host memory), has no published
# per-call figure we trust, so the rows decide.
PRIOR_SIGMA_BY_NAME = {
    "interconnect.pcie.link_eff": 1.0,
    "interconnect.pcie.allreduce_us": 1.0,
    "interconnect.pcie-host.link_eff": 1.0,
    "interconnect.pcie-host.allreduce_us": 1.0,
    "engine.vllm.stream_token_us": 1.0,
    "engine.sglang.stream_token_us": 1.0,
    "interconnect.nvlink.allreduce_us": 1.0,
    "engine.sglang.request_ms": 1.0,
    # Two kernels' timings at narrow widths set these priors; tuned configs and wider experts do better.
    "engine.vllm.moe_mfu_scale_fp8": 0.5,
    "engine.sglang.moe_mfu_scale_fp8": 0.5,
}

# The hand-set priors: calibration.toml's values before they were fitted (2026-11-27), except
# five that had already been set on published rows and start from the value before that:
# the host-staged all-reduce (0.13, 60 us: a third of peer-to-peer's efficiency, twice its
# latency), NVLink's all-reduce (5 us, the custom kernels' own latency), SGLang's time before
# the first token (10 ms) and its streaming cost (vLLM's 80 us).
PRIORS = {
    "architecture.hopper.mfu": 0.68,
    "architecture.hopper.mfu_fp8": 0.5,
    "architecture.hopper.mfu_attn": 0.4,
    "architecture.hopper.bw_weights": 0.88,
    "architecture.hopper.bw_kv": 0.75,
    "architecture.ampere.mfu": 0.65,
    "architecture.ampere.mfu_attn": 0.45,
    "architecture.ampere.bw_weights": 0.8,
    "architecture.ampere.bw_kv": 0.6,
    "architecture.ada.mfu": 0.6,
    "architecture.ada.mfu_fp8": 0.5,
    "architecture.ada.mfu_attn": 0.35,
    "architecture.ada.bw_weights": 0.82,
    "architecture.ada.bw_kv": 0.6,
    "architecture.blackwell.mfu": 0.6,
    "architecture.blackwell.mfu_fp8": 0.5,
    "architecture.blackwell.mfu_attn": 0.35,
    "architecture.blackwell.bw_weights": 0.75,
    "architecture.blackwell.bw_kv": 0.55,
    "interconnect.nvlink.link_eff": 0.7,
    "interconnect.nvlink.allreduce_us": 5.0,
    "interconnect.pcie.link_eff": 0.4,
    "interconnect.pcie.allreduce_us": 30.0,
    "interconnect.pcie-host.link_eff": 0.13,
    "interconnect.pcie-host.allreduce_us": 60.0,
    "engine.vllm.step_us": 600.0,
    "engine.vllm.layer_us": 8.0,
    "engine.vllm.stream_token_us": 80.0,
    "engine.vllm-v0.step_us": 1500.0,
    "engine.vllm-v0.layer_us": 15.0,
    "engine.vllm-legacy.step_us": 4000.0,
    "engine.vllm-legacy.layer_us": 40.0,
    "engine.sglang.step_us": 700.0,
    "engine.sglang.layer_us": 10.0,
    "engine.sglang.stream_token_us": 80.0,
    "engine.tensorrt-llm.step_us": 400.0,
    "engine.tensorrt-llm.layer_us": 6.0,
    "engine.sglang.request_ms": 10.0,
    # FP8 experts' grouped GEMMs: vLLM's Triton fused_moe (published) and torch's (knee's H100), python -m bench.moe_published.
    "engine.vllm.moe_mfu_scale_fp8": 0.16,
    "engine.sglang.moe_mfu_scale_fp8": 0.16,
}
# Parameters left at their calibration.toml value, and why.
NOT_FITTED = {
    # Only DeepSeek-R1 on vLLM 0.6-0.7 exercises it (dstackr1, vllmv1feedback: 10 rows), and
    # fitted it runs to its lower bound: one model on one engine version, slow for more than
    # its expert GEMMs, so it keeps the kernels' value (the prior of vLLM's and SGLang's).
    "engine.vllm-v0.moe_mfu_scale_fp8",
}
# Priors measured on a GPU (bench/kernel_priors.py: Hopper's five efficiencies from
# bench/gpu_kernels.py, the per-layer floor from bench/gpu_layer_floor.py, on an H100 and an
# H200) replace the hand-set ones, so leave-one-source-out no longer starts from values people
# chose while looking at those rows. KNEE_FIT_MEASURED_PRIORS=0 goes back to the hand-set
# priors, for comparison.
USE_MEASURED_PRIORS = os.environ.get("KNEE_FIT_MEASURED_PRIORS", "1") != "0"


def prior_cost(value: float, prior: float, name: str = "") -> float:
    """The penalty for moving a parameter from its prior (see :data:`PRIOR_WEIGHT`)."""
    if PRIOR_WEIGHT <= 0:
        return 0.0
    z = math.log(value / prior) / PRIOR_SIGMA_BY_NAME.get(name, PRIOR_SIGMA)
    return PRIOR_WEIGHT * z * z / 2


def parameters() -> dict[str, tuple[float, float, float]]:
    """Every fittable parameter as name -> (prior, lower bound, upper bound); names are
    ``architecture.<arch>.<field>``, ``interconnect.<link>.<field>`` and
    ``engine.<profile>.<field>`` (the keys that :func:`core.estimate.params.calibration_with`
    takes). Which parameters exist follows calibration.toml's sections; a parameter with no
    frozen prior (a section added later) starts from its calibration.toml value."""
    from core.estimate.params import _calibration_file

    from bench.kernel_priors import measured_priors

    cal = _calibration_file()
    priors = {**PRIORS, **(measured_priors() if USE_MEASURED_PRIORS else {})}
    out = {}
    for sec, fields in (("architecture", ARCH_FIELDS), ("interconnect", LINK_FIELDS), ("engine", ENGINE_FIELDS)):
        for name, tab in cal[sec].items():
            for f, (lo, hi) in fields.items():
                key = f"{sec}.{name}.{f}"
                if f in tab and key not in NOT_FITTED:
                    out[key] = (float(priors.get(key, tab[f])), lo, hi)
    for key, (lo, hi) in SINGLE_FIELDS.items():
        sec, name, f = key.split(".")
        out[key] = (float(priors.get(key, cal[sec][name][f])), lo, hi)
    return out
