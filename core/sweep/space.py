"""The search space of a sweep: server configurations (trials) × load points.

Turns argument dicts into knee's typed models: server args → :class:`ServerConfig` (for the
estimator, the simulator and deploy) and client args → :class:`Workload` + :class:`LoadPoint`.
The raw server args stay what is emitted to the engine, so a name knee does not model still
reaches the server unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.errors import BadInput, bad_input_from
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.study import SweepSpec, canonical_json, make_point_id
from core.spec.lengths import answers_capped, sharegpt
from core.spec.workload import DatasetKind, LengthDist, Workload
from core.tomlfile import read_toml
from core.spec.server_args import SERVER_FIELDS as _SERVER_FIELDS, server_config  # noqa: F401
from core.sweep.grammar import ArgSet, CLIENT_ARG_TYPES, combinations, normalize_name, parse_part

# llm-optimizer's dataset_name values knee runs, and the Workload dataset each one becomes.
_DATASETS: dict[str, DatasetKind] = {
    "random": "random",
    "random-ids": "random",
    "sharegpt": "sharegpt",
    "generated-shared-prefix": "shared-prefix",
}


def sets_to_json(sets: list[ArgSet]) -> list[dict[str, Any]]:
    return [{"names": list(s.names), "values": [list(v) for v in s.values]} for s in sets]


def sets_from_json(data: list[dict[str, Any]]) -> list[ArgSet]:
    return [ArgSet(names=tuple(d["names"]), values=tuple(tuple(v) for v in d["values"])) for d in data]


def load_of(client_args: dict[str, Any], spec: SweepSpec) -> tuple[Workload, LoadPoint]:
    """Client args (llm-optimizer names) → what the load client or the simulator runs."""
    c = client_args
    dataset = c.get("dataset_name", "random")
    if dataset not in _DATASETS:
        raise BadInput(f"dataset_name {dataset!r} is not supported", "use random, random-ids, sharegpt or generated-shared-prefix")
    isl = int(c.get("random_input_len", spec.input_len))
    osl = int(c.get("random_output_len", c.get("sharegpt_output_len", spec.output_len)))
    if isl < 1:
        raise BadInput(f"input length must be at least 1, got {isl}", "set client arg random_input_len or --input-len")
    if osl < 1:
        raise BadInput(f"output length must be at least 1, got {osl}", "set client arg random_output_len or --output-len")
    ratio = c.get("random_range_ratio")
    ignore_eos = not c.get("disable_ignore_eos", False)
    served: Workload | None = None  # the lengths file's requests, where client arg lengths_from names one
    if c.get("lengths_from"):
        # Random prompts at the lengths the user's own requests had (each answer held to its
        # length): the same requests the estimate and the recommendation priced.
        from core.spec.length_log import read_lengths

        clash = [k for k in ("random_input_len", "random_output_len", "random_range_ratio", "sharegpt_output_len") if k in c]
        if dataset != "random" or clash:
            what = clash[0] if clash else f"dataset_name={dataset}"
            raise BadInput(f"client args lengths_from and {what} both set the lengths", "give one of them")
        served = read_lengths(c["lengths_from"]).workload()
        inp, out, ignore_eos = served.input, served.output, True
    elif dataset == "sharegpt":
        # The simulator and the estimator need only lengths: ShareGPT's bundled shape
        # (core/spec/lengths.py), the output's mean replaced where sharegpt_output_len (or
        # random_output_len) sets one; the load client still reads the file's prompts.
        out_mean = c.get("sharegpt_output_len", c.get("random_output_len"))
        inp, out = sharegpt(c.get("random_input_len"), out_mean, to_eos=not ignore_eos)
        if out_mean is not None:
            # The client sets every request's max_tokens to it: with ignore_eos each answer
            # runs that long; without, the model stops at its EOS or there.
            out = LengthDist.of(osl) if ignore_eos else answers_capped(osl, c.get("random_input_len"))
    elif ratio is None or ratio >= 1.0:
        inp, out = LengthDist.of(isl), LengthDist.of(osl)
    else:
        # llm-optimizer (SGLang's client) draws lengths uniformly in [S·ratio, S]; knee's
        # uniform is [mean(1−r), mean(1+r)]. Same interval: mean = S(1+ratio)/2,
        # r = (1−ratio)/(1+ratio). knee's default without the arg is fixed lengths (exact
        # OSL with ignore_eos), not llm-optimizer's 1..S.
        if not 0.0 <= ratio < 1.0:
            raise BadInput(f"random_range_ratio must be in [0, 1], got {ratio}")
        r = (1 - ratio) / (1 + ratio)
        inp = LengthDist(kind="uniform", mean=max(1.0, isl * (1 + ratio) / 2), range_ratio=r)
        out = LengthDist(kind="uniform", mean=max(1.0, osl * (1 + ratio) / 2), range_ratio=r)
    ds = _DATASETS[dataset]
    prefix = int(c.get("gsp_system_prompt_len", 0)) if ds == "shared-prefix" else 0
    if served is not None:
        ds, prefix = served.dataset, served.shared_prefix_len  # a log's cached tokens: a shared prefix
    num_prompts = int(c.get("num_prompts", 1000))
    try:
        workload = Workload(
            input=inp,
            output=out,
            dataset=ds,
            dataset_path=c.get("dataset_path"),
            shared_prefix_len=prefix,
            num_prompts=num_prompts,
            warmup=int(c.get("warmup_requests", spec.warmup)),
            seed=int(c.get("seed", spec.seed)),
            ignore_eos=ignore_eos,
        )
    except ValidationError as e:
        raise bad_input_from(e, "client arg ", _WORKLOAD_ARGS, Workload) from None
    rate = c.get("request_rate")
    if rate is not None and (rate == float("inf") or (isinstance(rate, float) and math.isinf(rate))):
        rate = None
    conc = c.get("max_concurrency")
    if conc is not None and conc < 0:
        # Not "no limit": a negative cap is a typo, and running it unbounded would measure
        # something nobody asked for.
        raise BadInput(f"client arg max_concurrency must be at least 1 (or 0 for no limit), got {conc}")
    if conc == 0:
        # llm-optimizer's estimate emits max_concurrency=0 meaning unlimited; closed loop
        # over every prompt is the same thing.
        conc = num_prompts
    if conc is None and rate is None:
        conc = num_prompts  # llm-optimizer's default: rate inf, no cap → all at once
    try:
        load = LoadPoint(
            concurrency=conc,
            request_rate=rate,
            arrival=c.get("arrival", "poisson"),
            burstiness=float(c.get("burstiness", 1.0)),
            num_prompts=num_prompts,
            duration_s=c.get("duration_s"),
        )
    except ValidationError as e:
        raise bad_input_from(e, "client arg ", _LOAD_ARGS, LoadPoint) from None
    return workload, load


# Workload / LoadPoint field → the client arg that sets it (for one-line errors).
_WORKLOAD_ARGS = {
    "num_prompts": "num_prompts",
    "warmup": "warmup_requests",
    "seed": "seed",
    "shared_prefix_len": "gsp_system_prompt_len",
    "dataset_path": "dataset_path",
    "input": "random_input_len",
    "output": "random_output_len",
}
_LOAD_ARGS = {
    "concurrency": "max_concurrency",
    "request_rate": "request_rate",
    "arrival": "arrival",
    "burstiness": "burstiness",
    "num_prompts": "num_prompts",
    "duration_s": "duration_s",
}


@dataclass
class PointPlan:
    point_id: str
    client_args: dict[str, Any]
    workload: Workload
    load: LoadPoint
    search: str = "grid"


@dataclass
class TrialPlan:
    trial_key: str
    server_args: dict[str, Any]
    config: ServerConfig
    points: list[PointPlan] = field(default_factory=list)
    predicted: dict[str, Any] | None = None
    skip_reason: str | None = None


def client_points(spec: SweepSpec) -> list[dict[str, Any]]:
    return combinations(sets_from_json(spec.client_sets))


def make_point(spec: SweepSpec, server_args: dict[str, Any], client_args: dict[str, Any], search: str = "grid") -> PointPlan:
    wl, lp = load_of(client_args, spec)
    return PointPlan(make_point_id(server_args, client_args), client_args, wl, lp, search)


def plan_trials(spec: SweepSpec) -> list[TrialPlan]:
    """The grid: every server configuration with every client variation (server outer)."""
    out = []
    clients = client_points(spec)
    for sargs in combinations(sets_from_json(spec.server_sets)):
        cfg = server_config(spec.model, sargs)
        t = TrialPlan(canonical_json(sargs), sargs, cfg)
        t.points = [make_point(spec, sargs, cargs) for cargs in clients]
        out.append(t)
    return out


def sim_ignored_args(spec: SweepSpec) -> list[tuple[str, int]]:
    """(name, number of values) of each server arg the simulator cannot honour; empty unless
    the engine is the simulator. Such an arg is not dropped (it stays in the stored server
    args and reaches a real engine), but every simulated point runs as if it were unset."""
    if spec.engine.kind != "sim":
        return []
    return sim_unmodelled(sets_from_json(spec.server_sets))


def sim_unmodelled(server_sets: list) -> list[tuple[str, int]]:
    """(name, number of values) of each parsed server arg the simulator does not model."""
    from core.simulate.feasibility import unmodelled_args

    counts = {n: len(s.values) for s in server_sets for n in s.names}
    return [(n, counts[n]) for n in unmodelled_args(counts, list(_SERVER_FIELDS) + ["disable_radix_cache"])]


def sim_ignored_warning(spec: SweepSpec) -> str | None:
    """One line naming the server args the simulator ignores (None when there are none)."""
    ignored = sim_ignored_args(spec)
    if not ignored:
        return None
    names = ", ".join(n for n, _ in ignored)
    swept = [n for n, k in ignored if k > 1]
    same = f"; the values of {', '.join(swept)} give identical simulated points" if swept else ""
    return (
        f"the simulator does not model server arg{'s' if len(ignored) > 1 else ''} {names}: "
        f"simulated points run as if unset{same} (a real engine gets them: --engine {spec.framework or 'vllm'})"
    )


# ---- GPUs ----------------------------------------------------------------------------------
_PARALLEL_ARGS = ("tensor_parallel_size", "tp_size", "tp", "pipeline_parallel_size", "pp_size", "data_parallel_size", "dp_size", "dp")


def gpus_needed(t: TrialPlan) -> int:
    """GPUs one launch of the trial takes: TP x DP x PP (as the runner pins them)."""
    pp = t.server_args.get("pipeline_parallel_size", t.server_args.get("pp_size", 1)) or 1
    return t.config.num_gpus * int(pp)


def gpu_budget(spec: SweepSpec, detected: list[int] | None = None) -> tuple[int, str] | None:
    """How many GPUs a configuration of this sweep may use, and whose they are: the
    simulated hardware on the simulator, ``engine.gpus`` or this machine's GPUs (``detected``)
    for engines knee launches; None when unknown (an external server, no GPU found)."""
    eng = spec.engine
    if eng.kind == "external":
        return None
    if eng.kind == "sim":
        if not (spec.instance or spec.gpu):
            return None
        from core.catalog import plan_hardware

        hw = plan_hardware(spec)
        return hw.num_gpus, hw.label
    if eng.gpus is not None:
        return len(eng.gpus), f"--gpus {','.join(map(str, eng.gpus))}"
    if detected:
        return len(detected), "this machine"
    return None


def check_gpu_counts(spec: SweepSpec, plans: list[TrialPlan], budget: tuple[int, str] | None) -> None:
    """Refuse a configuration that needs more GPUs than the sweep has, before anything is
    launched or stored (as ``knee estimate`` refuses such a TP); its launch could only fail."""
    if budget is None:
        return
    n, where = budget
    for t in plans:
        need = gpus_needed(t)
        if need > n:
            which = " ".join(f"{k}={v}" for k, v in t.server_args.items() if k in _PARALLEL_ARGS) or f"TP{t.config.tp}"
            raise BadInput(
                f"server arg {which} needs {need} GPUs but {where} has {n}",
                f"TP x DP x PP must be at most {n}",
            )


# ---- knee's sweep file (TOML) --------------------------------------------------------------
def _toml_sets(table: dict[str, Any], side: str) -> list[ArgSet]:
    """``name = value`` or ``name = [choices]``; ``"a*b" = [[1,4],[2,2]]`` for composites.
    A string value may use the llm-optimizer grammar (``"range(1,5)"``, ``"[1,2]"``)."""
    from core.sweep.grammar import VLLM_ARG_TYPES, _coerce

    known = CLIENT_ARG_TYPES if side == "client" else VLLM_ARG_TYPES
    sets = []
    seen: set[str] = set()
    for raw_name, value in table.items():
        for n in raw_name.split("*"):
            if normalize_name(n) in seen:
                raise BadInput(f"{side} arg {normalize_name(n)!r} is given twice in the sweep file")
            seen.add(normalize_name(n))
        if isinstance(value, str):
            sets.append(parse_part(f"{raw_name}={value}", known, side == "client", side))
            continue
        names = tuple(normalize_name(n) for n in raw_name.split("*"))
        if side == "client":
            for n in names:
                if n not in known:
                    raise BadInput(f"unknown client arg {n!r} in the sweep file", "known: " + ", ".join(sorted(known)))
        choices = value if isinstance(value, list) else [value]
        vals = []
        for ch in choices:
            items = tuple(ch) if len(names) > 1 else (ch,)
            if len(items) != len(names):
                raise BadInput(f"each value of {raw_name} must list {len(names)} items, got {ch!r}")
            vals.append(tuple(_coerce(v, known.get(n), n, raw_name) for n, v in zip(names, items)))
        if not vals:
            raise BadInput(f"{raw_name} has an empty list of values in the sweep file")
        from core.sweep.grammar import canonical

        uniq: dict[str, tuple] = {}
        for v in vals:
            uniq.setdefault(canonical(list(v)), v)  # first occurrence wins, order kept
        sets.append(ArgSet(names, tuple(uniq.values())))
    return sets


SWEEP_FILE_KEYS = {
    "model",
    "framework",
    "engine",
    "instance",
    "gpu",
    "num_gpus",
    "constraints",
    "input_len",
    "output_len",
    "strategy",
    "objective",
    "sla",
    "early_stop",
    "parallel",
    "warmup",
    "seed",
    "rest_s",
    "server",
    "client",
    "max_error_fraction",
}


def read_sweep_file(path: str | Path) -> dict[str, Any]:
    """Read a sweep file into keyword arguments for :func:`core.sweep.build_spec`.

    knee's sweep file (TOML; every key optional except ``model``; flags override it)::

        model = "Qwen/Qwen3-4B"
        framework = "vllm"
        instance = "ml.g6.12xlarge"          # or gpu = "L4" + num_gpus = 4
        constraints = "ttft:p95<500ms;e2e_latency:p99<60s"
        strategy = "adaptive"                # grid | adaptive | sla
        objective = "throughput"             # throughput_per_gpu | goodput | latency | cost
        input_len = 1024                     # when the client table does not say
        output_len = 512
        early_stop = false

        [engine]                             # how servers start (EngineSpec fields)
        kind = "vllm"                        # vllm | sglang | custom | external | sim
        python = ".venv-vllm/bin/python"     # or executable / command / container / url
        env = { VLLM_CPU_KVCACHE_SPACE = "1" }
        gpus = [0, 1, 2, 3]
        start_timeout_s = 900

        [server]                             # a list = values to sweep; a scalar = fixed
        tensor_parallel_size = [1, 2, 4]
        max_num_batched_tokens = "range(4096, 16385, 4096)"   # strings use the grammar
        # "tensor_parallel_size*data_parallel_size" = [[1, 4], [2, 2]]  (a composite)
        enable_prefix_caching = false        # emitted as --no-enable-prefix-caching

        [client]                             # llm-optimizer's client arg names (strict)
        max_concurrency = [32, 64, 128]
        num_prompts = 1000
        dataset_name = "random"

        [sla]                                # strategy = "sla"
        knob = "max_concurrency"             # or request_rate
        min = 1
        max = 4096
        tolerance = 0.05
    """
    p = Path(path)
    data = read_toml(p, "sweep file")
    unknown = set(data) - SWEEP_FILE_KEYS
    if unknown:
        raise BadInput(f"unknown key {sorted(unknown)[0]!r} in sweep file {p}", "known: " + ", ".join(sorted(SWEEP_FILE_KEYS)))
    out = dict(data)
    out["server_sets"] = _toml_sets(data.get("server", {}), "server")
    out["client_sets"] = _toml_sets(data.get("client", {}), "client")
    out.pop("server", None)
    out.pop("client", None)
    return out
