"""The Plan form as plain strings: parse, check each field, and build a :class:`Plan`.

Every check here is cheap (pydantic, the constraint and argument grammars, catalog lookups),
so it runs on each keystroke. Resolving the model can reach the Hugging Face hub and runs in
a worker instead (see ``tui.screens.plan``).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError

from core.catalog import get_gpu, get_instance, resolve_hardware
from core.errors import KneeError
from core.spec.engine_defaults import checked_release
from core.spec.plan import Plan
from core.spec.slo import parse_constraints
from core.sweep.grammar import combinations, parse_args
from core.sweep.plan_estimate import estimate_args
from core.sweep.space import sim_unmodelled

# Field ids in form order; the form widgets use the same ids.
TEXT_FIELDS = (
    "model",
    "hardware",
    "input_len",
    "output_len",
    "range_ratio",
    "dataset_path",
    "lengths_from",
    "num_prompts",
    "constraints",
    "min_request_rate",
    "url",
    "endpoint_name",
    "engine_version",
    "server_args",
    "client_args",
)
CHOICE_FIELDS = {
    "dataset": ("random", "sharegpt", "shared-prefix", "corpus"),
    "arrival": ("concurrency", "poisson", "constant", "gamma"),
    "objective": ("max_throughput", "min_cost", "min_latency"),
    "engine": ("sim", "vllm", "sglang", "custom", "external", "sagemaker"),
    "answers": ("to length", "at EOS"),
}
# The "answers" choice is Plan.ignore_eos: does the client hold every answer to its length?
_IGNORE_EOS = {"to length": True, "at EOS": False}
# "2x A100-80GB no-p2p": GPUs that cannot reach each other peer-to-peer (Plan.gpu_p2p).
_NO_P2P = re.compile(r"[\s,;]+no[-_ ]?p2p\s*$", re.IGNORECASE)
_GPU_COUNT = re.compile(r"^\s*(?:(\d+)\s*[x×*]\s*(.+?)|(.+?)\s*[x×*]\s*(\d+))\s*$", re.IGNORECASE)


def hardware_text(plan: Plan) -> str:
    text = plan.instance if plan.instance else f"{plan.num_gpus or 1}x {plan.gpu}"
    return text if plan.gpu_p2p else f"{text} no-p2p"


def parse_hardware(text: str) -> dict[str, object]:
    """``ml.g6.12xlarge`` → an instance; ``4x L4`` / ``L4x4`` / ``H100`` → GPU and count; a
    trailing ``no-p2p`` → GPUs without peer-to-peer. Raises :class:`BadInput` (via the catalog)
    naming what is unknown."""
    t = text.strip()
    no_p2p = _NO_P2P.search(t)
    return {**_parse_machine(t[: no_p2p.start()] if no_p2p else t), "gpu_p2p": not no_p2p}


def _parse_machine(t: str) -> dict[str, object]:
    if not t:
        from core.errors import BadInput

        raise BadInput("no hardware given", "type a SageMaker instance (ml.g6.12xlarge) or GPUs (4x L4)")
    # Instance names, with or without the "ml." prefix ("g6.12xlarge" is not 12 GPUs).
    if t.startswith("ml.") or "xlarge" in t:
        inst = get_instance(t)
        return {"instance": inst.name, "gpu": None, "num_gpus": None}
    m = _GPU_COUNT.match(t)
    if m:
        count, name = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        gpu = get_gpu(name.strip())
        return {"instance": None, "gpu": gpu.name, "num_gpus": int(count)}
    gpu = get_gpu(t)
    return {"instance": None, "gpu": gpu.name, "num_gpus": 1}


def hardware_hint(plan: Plan) -> str:
    """One line about the hardware: GPUs, memory and the dated price where there is one."""
    hw = resolve_hardware(gpu=plan.gpu, num_gpus=plan.num_gpus, instance=plan.instance, gpu_p2p=plan.gpu_p2p)
    line = f"{hw.num_gpus}x {hw.gpu.name} · {hw.gpu.memory_gb:g} GB · {hw.gpu.bandwidth_gbps:g} GB/s · {hw.gpu.link}"
    if not hw.gpu.p2p and hw.num_gpus > 1:
        line += " · no GPU P2P"
    inst = hw.instance
    if inst and inst.price_per_hour:
        dated = f", {inst.price_date}" if inst.price_date else ""
        line += f" · ${inst.price_per_hour:.2f}/h ({inst.price_region}{dated})"
    return line


def _answers_hint(ignore_eos: bool, dataset: str) -> str:
    if ignore_eos:
        return "the client sends ignore_eos: every answer runs to its length"
    if dataset == "sharegpt":
        return "the model may stop first (vllm bench serve's default): ShareGPT's measured EOS shape"
    return "the model may stop first: knee has no shape for these answers, so their lengths are caps"


def fields_from_plan(plan: Plan) -> dict[str, str]:
    def s(v: object) -> str:
        return "" if v is None else f"{v:g}" if isinstance(v, float) else str(v)

    return {
        "model": plan.model,
        "hardware": hardware_text(plan),
        "input_len": s(plan.input_len),
        "output_len": s(plan.output_len),
        "range_ratio": s(plan.range_ratio),
        "dataset_path": s(plan.dataset_path),
        "lengths_from": s(plan.lengths_from),
        "num_prompts": s(plan.num_prompts),
        "constraints": plan.constraints,
        "min_request_rate": s(plan.min_request_rate),
        "url": s(plan.url),
        "endpoint_name": s(plan.endpoint_name),
        "engine_version": s(plan.engine_version),
        "server_args": plan.server_args,
        "client_args": plan.client_args,
        "dataset": plan.dataset,
        "arrival": plan.arrival,
        "objective": plan.objective,
        "engine": plan.engine,
        "answers": "to length" if plan.ignore_eos else "at EOS",
    }


def _int(text: str, name: str, lo: int = 1) -> int:
    try:
        v = int(text.strip().replace("_", ""))
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {text.strip()!r}") from None
    if v < lo:
        raise ValueError(f"{name} must be at least {lo}")
    return v


def _float(text: str, name: str, lo: float = 0.0, hi: float | None = None) -> float:
    try:
        v = float(text.strip())
    except ValueError:
        raise ValueError(f"{name} must be a number, got {text.strip()!r}") from None
    if v < lo or (hi is not None and v > hi):
        raise ValueError(f"{name} must be between {lo:g} and {hi:g}" if hi is not None else f"{name} must be at least {lo:g}")
    return v


def check_fields(values: dict[str, str]) -> tuple[Plan | None, dict[str, str], dict[str, str]]:
    """Check every field; return the plan (or None), errors by field and hints by field.

    Hints are the positive side of validation: what a good value resolved to (the GPUs and
    price of an instance, the number of configurations a search space holds)."""
    errors: dict[str, str] = {}
    hints: dict[str, str] = {}
    data: dict[str, object] = {}

    def check(field: str, fn) -> None:
        try:
            fn()
        except (KneeError, ValueError) as e:
            errors[field] = str(e)

    def model() -> None:
        if not values.get("model", "").strip():
            raise ValueError("type a Hugging Face model id or a local path")
        data["model"] = values["model"].strip()

    def hardware() -> None:
        data.update(parse_hardware(values.get("hardware", "")))

    check("model", model)
    check("hardware", hardware)
    check("input_len", lambda: data.__setitem__("input_len", _int(values.get("input_len", ""), "input length")))
    check("output_len", lambda: data.__setitem__("output_len", _int(values.get("output_len", ""), "output length")))
    check("range_ratio", lambda: data.__setitem__("range_ratio", _float(values.get("range_ratio", "") or "0", "range ratio", 0.0, 1.0)))
    check("num_prompts", lambda: data.__setitem__("num_prompts", _int(values.get("num_prompts", ""), "prompts")))

    def dataset_path() -> None:
        p = values.get("dataset_path", "").strip()
        if p:
            if not Path(p).expanduser().is_file():
                raise ValueError(f"no file at {p}")
            data["dataset_path"] = p

    check("dataset_path", dataset_path)

    def lengths_from() -> None:
        p = values.get("lengths_from", "").strip()
        if p:
            if not Path(p).expanduser().is_file():
                raise ValueError(f"no file at {p}")
            # Stored absolute: a sweep started from the plan runs in its own process.
            data["lengths_from"] = str(Path(p).expanduser().resolve())
            hints["lengths_from"] = "its lengths replace input/output tokens, range ratio and the dataset's shape"

    check("lengths_from", lengths_from)

    def constraints() -> None:
        slo = parse_constraints(values.get("constraints", ""))
        data["constraints"] = values.get("constraints", "").strip()
        hints["constraints"] = "; ".join(str(c) for c in slo.constraints) or "no latency goals"

    check("constraints", constraints)

    def min_rate() -> None:
        t = values.get("min_request_rate", "").strip()
        data["min_request_rate"] = _float(t, "minimum request rate") if t else None

    check("min_request_rate", min_rate)

    engine = values.get("engine", "sim")

    def url() -> None:
        u = values.get("url", "").strip()
        if engine == "external" and not u:
            raise ValueError("the external engine needs the server's URL, e.g. http://127.0.0.1:8000")
        if u and not re.match(r"^https?://[^\s/]+", u):
            raise ValueError(f"{u!r} is not an http(s) URL")
        data["url"] = u or None

    def endpoint() -> None:
        e = values.get("endpoint_name", "").strip()
        if engine == "sagemaker" and not e:
            raise ValueError("the sagemaker engine needs an endpoint name")
        data["endpoint_name"] = e or None

    def version() -> None:
        v = checked_release(values.get("engine_version"))
        data["engine_version"] = v
        if engine in ("sim", "vllm"):
            hints["engine_version"] = f"predicted as vLLM {v}" if v else "predicted as the current vLLM release"

    check("url", url)
    check("endpoint_name", endpoint)
    check("engine_version", version)

    def args(side: str) -> None:
        text = values.get(f"{side}_args", "").strip()
        if text:
            sets = parse_args(text, side=side)
            n = len(combinations(sets))
            hints[f"{side}_args"] = f"{n} combination{'s' if n != 1 else ''}"
            if side == "server" and (taken := estimate_args(text).used):
                hints["server_args"] += f" · estimated with {', '.join(taken)}"
            ignored = sim_unmodelled(sets) if side == "server" and engine == "sim" else []
            if ignored:
                # The args stay in the plan (a real engine gets them); the simulator runs as if unset.
                hints["server_args"] += f" · the simulator does not model {', '.join(n for n, _ in ignored)}"
        elif side == "server":
            hints["server_args"] = "empty: knee suggests a search space from the estimate"
        data[f"{side}_args"] = text

    check("server_args", lambda: args("server"))
    check("client_args", lambda: args("client"))

    for name in CHOICE_FIELDS:
        if name != "answers":
            data[name] = values.get(name) or Plan.model_fields[name].default
    data["ignore_eos"] = _IGNORE_EOS.get(values.get("answers") or "to length", True)
    hints["answers"] = _answers_hint(bool(data["ignore_eos"]), str(data.get("dataset")))
    if data.get("lengths_from"):
        hints["answers"] = "the lengths file's answers were served: each is held to its length"

    if "hardware" not in errors:
        try:
            hints["hardware"] = hardware_hint(Plan(**{k: data.get(k) for k in ("instance", "gpu", "num_gpus", "gpu_p2p")}))
        except KneeError as e:  # pragma: no cover - parse_hardware already resolved it
            errors["hardware"] = str(e)
    if errors:
        return None, errors, hints
    try:
        return Plan(**data), errors, hints
    except ValidationError as e:
        for err in e.errors():
            field = str(err["loc"][0]) if err["loc"] else "model"
            errors[field if field in values else "model"] = err["msg"]
        return None, errors, hints
