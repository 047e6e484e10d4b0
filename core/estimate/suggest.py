"""A suggested search space around the predicted knee, as knee and llm-optimizer arguments.

What a sweep should measure, from the estimate:

- TP x DP pairs that use every GPU and fit in memory, best predicted first;
- ``max_num_batched_tokens``: the engine default, half and double it (a smaller budget
  shortens the mixed steps decodes wait through, a larger one shortens TTFT), never below
  the prompt length rounded up to a power of two when the engine cannot chunk prompts;
- ``max_num_seqs``: powers of two around the running batch at the SLO-limited concurrency;
- concurrency levels around the knee: from half to one and a half times the highest
  concurrency meeting the SLOs (or the saturation concurrency when no SLO bounds it).

Emitted in llm-optimizer's ``--server-args``/``--client-args`` grammar, both for
``knee sweep`` and for ``llm-optimizer`` itself. Note the two clients' length conventions:
knee (like ``vllm bench serve``) draws lengths in [S(1−r), S(1+r)], llm-optimizer in [S·r, S],
so a fixed length is r = 0 for knee and r = 1 for llm-optimizer.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field


def _pow2_at_least(x: float) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def _pow2_at_most(x: float) -> int:
    p = 1
    while p * 2 <= x:
        p *= 2
    return p


@dataclass(frozen=True)
class Suggestion:
    tp_dp: list[tuple[int, int]]
    max_num_batched_tokens: list[int]
    max_num_seqs: list[int]
    concurrency: list[int]
    num_prompts: int
    server_args: str
    client_args: str
    knee_command: str
    llm_optimizer_command: str
    why: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "tp_dp": [list(p) for p in self.tp_dp],
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "concurrency": self.concurrency,
            "num_prompts": self.num_prompts,
            "server_args": self.server_args,
            "client_args": self.client_args,
            "knee_command": self.knee_command,
            "llm_optimizer_command": self.llm_optimizer_command,
            "why": self.why,
        }


def batched_tokens_values(default_budget: int, input_len: float, chunked: bool) -> list[int]:
    floor = 2048 if chunked else max(2048, _pow2_at_least(input_len))
    vals = sorted({max(floor, default_budget // 2), max(floor, default_budget), max(floor, default_budget * 2)})
    return vals


def seqs_values(per_replica_running: float, cap: float) -> list[int]:
    target = max(8.0, min(per_replica_running, cap, 1024.0))
    p = 2 ** round(math.log2(target))  # the nearest power of two
    vals = sorted({max(8, p // 2), max(8, p), min(2048, p * 2)})
    return vals


def concurrency_values(knee: int) -> list[int]:
    knee = max(1, knee)
    vals = sorted({max(1, round(knee * f)) for f in (0.5, 0.75, 1.0, 1.25, 1.5)})
    return vals


def render(
    *,
    model: str,
    hardware_flags: str,
    num_gpus: int,
    tp_dp: list[tuple[int, int]],
    budgets: list[int],
    seqs: list[int],
    concurrency: list[int],
    input_len: int,
    output_len: int,
    range_ratio: float,
    constraints: str,
    why: list[str],
    dataset: str = "random",
    stream_intervals: list[int] | None = None,
    ignore_eos: bool = True,
    lengths_from: str | None = None,
) -> Suggestion:
    pairs = ",".join(f"({t},{d})" for t, d in tp_dp)
    server = (
        f"tensor_parallel_size*data_parallel_size:(int,int)=[{pairs}];"
        f"max_num_batched_tokens=[{','.join(map(str, budgets))}];"
        f"max_num_seqs=[{','.join(map(str, seqs))}]"
    )
    if stream_intervals:
        server += f";stream_interval=[{','.join(map(str, stream_intervals))}]"
    num_prompts = max(1000, 2 * max(concurrency))
    conc = ",".join(map(str, concurrency))
    if lengths_from:
        # The user's own requests' lengths (knee's client arg; llm-optimizer's client keeps the means).
        knee_client = f"lengths_from={lengths_from}"
    elif dataset == "sharegpt":
        # The sweep's simulator takes ShareGPT's bundled lengths; a real run reads the file.
        knee_client = "dataset_name=sharegpt;dataset_path=ShareGPT_V3_unfiltered_cleaned_split.json"
    else:
        knee_client = f"dataset_name=random;random_input_len={input_len};random_output_len={output_len}"
        if range_ratio:
            knee_client += f";random_range_ratio={range_ratio:g}"
    knee_client += f";max_concurrency=[{conc}];num_prompts={num_prompts}"
    # llm-optimizer's client draws lengths in [S*r, S]: r = 1 means fixed lengths.
    if range_ratio:
        lo_in, lo_out = int(round(input_len * (1 + range_ratio))), int(round(output_len * (1 + range_ratio)))
        r = (1 - range_ratio) / (1 + range_ratio)
    else:
        lo_in, lo_out, r = input_len, output_len, 1.0
    lo_client = (
        f"dataset_name=random;random_input_len={lo_in};random_output_len={lo_out};random_range_ratio={r:g};"
        f"max_concurrency=[{conc}];num_prompts={num_prompts}"
    )
    if dataset == "sharegpt":  # llm-optimizer's default dataset is ShareGPT
        lo_client = f"dataset_name=sharegpt;max_concurrency=[{conc}];num_prompts={num_prompts}"
    if not ignore_eos:
        # The plan lets the model stop: both clients must too, or they measure other answers.
        knee_client += ";disable_ignore_eos=true"
        lo_client += ";disable_ignore_eos=true"
    cons = f" --constraints {shlex.quote(constraints)}" if constraints else ""
    knee_cmd = (
        f"knee sweep --model {shlex.quote(model)} {hardware_flags} --server-args {shlex.quote(server)} --client-args {shlex.quote(knee_client)}{cons}"
    )
    lo_cmd = (
        f"llm-optimizer --framework vllm --model {shlex.quote(model)} --gpus {num_gpus} "
        f"--server-args {shlex.quote(server)} --client-args {shlex.quote(lo_client)}{cons}"
    )
    return Suggestion(
        tp_dp=tp_dp,
        max_num_batched_tokens=budgets,
        max_num_seqs=seqs,
        concurrency=concurrency,
        num_prompts=num_prompts,
        server_args=server,
        client_args=knee_client,
        knee_command=knee_cmd,
        llm_optimizer_command=lo_cmd,
        why=why,
    )
