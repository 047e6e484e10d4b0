"""The requests an estimate prices: a plan's lengths, overridden by what the caller gives.

One precedence for ``knee estimate``, the Estimate screen and the recommendation: a workload
given whole; else a lengths file (the caller's, or the plan's when no length flag is given);
else ShareGPT's bundled shape about the given means; else fixed or uniform lengths.
"""

from __future__ import annotations

from core.errors import BadInput
from core.spec.length_log import LengthLog, read_lengths, refuse_lengths_beside
from core.spec.lengths import request_lengths
from core.spec.plan import Plan
from core.spec.workload import Workload

DATASETS = ("random", "sharegpt", "shared-prefix", "corpus")


def plan_workload(
    plan: Plan,
    workload: Workload | None,
    input_len: float | None,
    output_len: float | None,
    range_ratio: float | None,
    dataset: str | None,
    ignore_eos: bool | None,
    lengths_from: str | None,
) -> tuple[Workload, LengthLog | None]:
    """(the workload, the lengths file read for it or None); a flag set to None takes the
    plan's field. BadInput for an unknown dataset, or a length flag beside a lengths file."""
    dataset_given, dataset = dataset, dataset or plan.dataset
    if dataset not in DATASETS:
        raise BadInput(f"unknown dataset {dataset!r}", "use random or sharegpt")
    ignore_eos = plan.ignore_eos if ignore_eos is None else ignore_eos
    if workload is not None:
        return workload, None
    flags = (("--input-len", input_len), ("--output-len", output_len), ("--range-ratio", range_ratio), ("--dataset", dataset_given))
    if lengths_from is None and all(v is None for _, v in flags):
        lengths_from = plan.lengths_from  # a length flag overrides the plan's file, as any flag its field
    if lengths_from is not None:
        refuse_lengths_beside(flags)
        log = read_lengths(lengths_from)
        # Lengths that were served: each answer is held to its own (no EOS shape on top).
        return log.workload(plan.num_prompts), log
    if dataset == "sharegpt":
        # ShareGPT's bundled length shape (core/spec/lengths.py): no file is read; a given
        # --input-len/--output-len replaces that side's mean.
        inp, out = request_lengths("sharegpt", input_len, output_len, ignore_eos=ignore_eos)
        return Workload(input=inp, output=out, dataset="sharegpt", num_prompts=plan.num_prompts, ignore_eos=ignore_eos), None
    i = input_len if input_len is not None else plan.input_len
    o = output_len if output_len is not None else plan.output_len
    r = range_ratio if range_ratio is not None else plan.range_ratio
    inp, out = request_lengths("random", i, o, r)
    return Workload(input=inp, output=out, num_prompts=plan.num_prompts, ignore_eos=ignore_eos), None
