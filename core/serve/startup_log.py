"""What a server's startup log says about the machine, beyond being ready.

vLLM tests peer-to-peer access between the GPUs of a tensor-parallel group when it starts
(SGLang runs the same test, inherited with vLLM's custom all-reduce) and, where the GPUs
cannot reach each other, logs:

    Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test
    failed. To silence this warning, specify disable_custom_all_reduce=True explicitly.

Every all-reduce then goes through NCCL staged in host memory (the cost model's
``pcie-host`` interconnect), NVLink or not: 34 published vLLM TP2 runs on such A100s decode
about twice as slowly as with P2P (``bench/data/published.jsonl``, dlvllm-*). A sweep that
reads the line predicts the rest of its study for the machine it runs on.

vLLM runs that test only where its custom all-reduce could run: more than two GPUs without
NVLink stop it earlier ("not supported on more than two PCIe-only GPUs"), so on those boxes
the log cannot tell, and the instance's catalogue entry (or ``--no-gpu-p2p``) decides.
"""

from __future__ import annotations

from pathlib import Path

NO_GPU_P2P = "lacks GPU P2P capability"
# The line comes while the engine starts, long before the first request; a log that has
# grown past this (access lines, debug output) is not searched further.
_HEAD_BYTES = 8 * 2**20


def lacks_gpu_p2p(log_text: str) -> bool:
    """Whether the engine said its GPUs cannot reach each other peer-to-peer."""
    return NO_GPU_P2P in log_text


def log_lacks_gpu_p2p(log_path: str | Path | None) -> bool:
    """:func:`lacks_gpu_p2p` on the start of a server's log file (False without one)."""
    if not log_path:
        return False
    try:
        with open(log_path, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except OSError:
        return False
    return lacks_gpu_p2p(head.decode("utf-8", "replace"))
