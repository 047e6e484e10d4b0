"""A published-measurement row in the schema of shared/calibration/measurements.jsonl, for the
accuracy benches' tests: llmperf-05 (Llama-3-8B on an A10G, vLLM 0.4.3, closed loop)."""

GOOD = {
    "id": "good-1",
    "source": "llmperf test row",
    "model": "meta-llama/Meta-Llama-3-8B-Instruct",
    "gpu": "A10G",
    "num_gpus": 1,
    "tp": 1,
    "replicas": 1,
    "engine": "vllm",
    "engine_version": "0.4.3",
    "precision": "bf16",
    "kv_dtype": "auto",
    "workload": {
        "input_len": 550,
        "output_len": 177.1,
        "dataset": "other",
        "concurrency": 16,
        "request_rate": None,
        "batch_size": None,
        "mode": "online-concurrency",
    },
    "metrics": {"ttft_ms": 302.75, "itl_ms": None, "e2e_s": None, "req_per_s": 1.6368, "output_tok_per_s": 289.87},
    "stat": "mean",
    "notes": "llmperf closed-loop fixed concurrency",
}


def row(id_: str, **workload) -> dict:
    """GOOD under another id, with some workload fields replaced."""
    return {**GOOD, "id": id_, "workload": {**GOOD["workload"], **workload}}
