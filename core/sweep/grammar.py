"""llm-optimizer's ``--server-args`` / ``--client-args`` grammar, without its defects.

``KEY[:TYPE]=VALUE`` parts separated by ``;`` (see ``shared/reference/llm-optimizer-compat.md``
section 3). Everything llm-optimizer accepts parses to the same values here; what it gets
wrong is fixed:

- an empty part (a trailing ``;``) is ignored instead of failing;
- ``false``/``true``/``no``/``yes`` for a bool key mean what they say (llm-optimizer turns the
  string ``"false"`` into ``True``);
- bool False is emitted as ``--no-flag`` (llm-optimizer emits nothing, so a default-on flag
  can never be switched off);
- dict and list values are emitted as JSON, not Python repr;
- values are emitted as separate argv items and never re-split, so a value may hold spaces;
- the unknown-type fallback keeps the raw string, as llm-optimizer does.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

from core.errors import BadInput
from core.spec.server_args import config_id, emit_args  # noqa: F401  (re-exported: the grammar's callers)

# ---- known names and types -----------------------------------------------------------------
# Client args are strict in llm-optimizer (predefined/client.py); the same table here.
CLIENT_ARG_TYPES: dict[str, type] = {
    **dict.fromkeys(
        "backend base_url dataset_name dataset_path tokenizer output_file extra_request_body lora_name prompt_suffix host model".split(),
        str,
    ),
    **dict.fromkeys(
        "num_prompts sharegpt_output_len sharegpt_context_len random_input_len random_output_len "
        "max_concurrency seed warmup_requests port gsp_num_groups gsp_prompts_per_group "
        "gsp_system_prompt_len gsp_question_len gsp_output_len".split(),
        int,
    ),
    **dict.fromkeys(
        "random_range_ratio request_rate gsp_system_prompt_partial_randomize_start_min gsp_system_prompt_partial_randomize_start_max".split(),
        float,
    ),
    **dict.fromkeys(
        "output_details disable_tqdm disable_stream return_logprob disable_ignore_eos "
        "apply_chat_template profile pd_separated flush_cache tokenize_prompt "
        "gsp_enable_system_prompt_partial_randomize".split(),
        bool,
    ),
}
# knee's own client knobs (open-loop arrival shape, duration stop, random prompts at the lengths
# of a file of served requests: core/spec/length_log.py), accepted beside
# llm-optimizer's so a sweep file can say everything a LoadPoint holds.
CLIENT_ARG_TYPES.update({"arrival": str, "burstiness": float, "duration_s": float, "lengths_from": str})

# The vLLM server args whose types matter for parsing (bools and numbers that people sweep).
# Server args are non-strict: anything else passes through with its inferred type.
VLLM_ARG_TYPES: dict[str, type] = {
    **dict.fromkeys(
        "tensor_parallel_size tp_size tp pipeline_parallel_size pp_size data_parallel_size dp_size dp "
        "max_num_batched_tokens max_num_seqs max_model_len block_size max_num_partial_prefills "
        "max_long_partial_prefills long_prefill_token_threshold swap_space cpu_offload_gb seed "
        "num_scheduler_steps max_seq_len_to_capture chunked_prefill_size max_running_requests "
        "max_prefill_tokens".split(),
        int,
    ),
    **dict.fromkeys("gpu_memory_utilization mem_fraction_static schedule_conservativeness".split(), float),
    **dict.fromkeys(
        "enable_prefix_caching enable_chunked_prefill enforce_eager disable_log_stats "
        "disable_log_requests trust_remote_code enable_expert_parallel async_scheduling "
        "disable_radix_cache disable_cuda_graph enable_torch_compile".split(),
        bool,
    ),
}

_TYPES = {"int": int, "str": str, "bool": bool, "float": float}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def normalize_name(name: str) -> str:
    """``--max-num-seqs`` → ``max_num_seqs`` (llm-optimizer's KEY normalisation)."""
    name = name.strip()
    if name.startswith("--"):
        name = name[2:]
    return name.replace("-", "_")


@dataclass(frozen=True)
class ArgSet:
    """One part of the grammar: names (several for a ``a*b`` composite) and their values."""

    names: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]  # one tuple per choice, one item per name

    @property
    def key(self) -> str:
        return "*".join(self.names)


def _coerce(value: Any, typ: type | None, name: str, part: str) -> Any:
    if typ is None:
        # Inference: whole-number floats become int (llm-optimizer does the same).
        if isinstance(value, float) and value.is_integer() and value not in (float("inf"), float("-inf")):
            return int(value)
        return value
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise BadInput(f"{name} takes True or False, got {value!r} in {part!r}")
    if typ is int:
        if isinstance(value, bool):
            raise BadInput(f"{name} takes an integer, got {value!r} in {part!r}")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise BadInput(f"{name} takes an integer, got {value!r} in {part!r}")
    if typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise BadInput(f"{name} takes a number, got {value!r} in {part!r}")
    # str: keep dicts/lists as they are (emitted as JSON later); stringify scalars.
    if isinstance(value, (dict, list)):
        return value
    return value if isinstance(value, str) else str(value)


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text  # llm-optimizer's fallback: the raw string is one value


def _parse_range(text: str, part: str) -> list[int]:
    inner = text.strip()[len("range(") :]
    if not inner.endswith(")"):
        raise BadInput(f"unclosed range(...) in {part!r}", "write range(start, stop[, step])")
    try:
        nums = [int(x) for x in inner[:-1].split(",")]
        values = list(range(*nums))
    except (ValueError, TypeError):
        raise BadInput(f"range() takes 1 to 3 integers, in {part!r}") from None
    if not values:
        raise BadInput(f"{text.strip()} is empty in {part!r}", "remember the stop is exclusive")
    return values


def parse_part(part: str, known: dict[str, type], strict: bool, side: str) -> ArgSet:
    if "=" not in part:
        raise BadInput(f"{side} arg {part.strip()!r} must contain '='", "write KEY=VALUE or KEY=[V1,V2]")
    lhs, raw = part.split("=", 1)
    lhs = lhs.strip()
    annot: tuple[type | None, ...] | None = None
    if ":" in lhs:
        lhs, tname = lhs.rsplit(":", 1)
        tname = tname.strip()
        if tname.startswith("("):
            names_t = [t.strip() for t in tname.strip("()").split(",") if t.strip()]
        else:
            names_t = [tname]
        try:
            annot = tuple(_TYPES[t] for t in names_t)
        except KeyError:
            raise BadInput(f"unknown type in {part.strip()!r}", "use int, str, bool or float") from None
    names = tuple(normalize_name(n) for n in lhs.split("*"))
    if not all(names):
        raise BadInput(f"empty argument name in {part.strip()!r}")
    if strict:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise BadInput(
                f"unknown {side} arg {unknown[0]!r}",
                "known: " + ", ".join(sorted(known)),
            )
    if annot is not None and len(annot) != len(names):
        raise BadInput(f"{part.strip()!r} names {len(names)} arguments but {len(annot)} types")
    text = raw.strip()
    if text.startswith("range("):
        choices: list[Any] = list(_parse_range(text, part))
    else:
        lit = _literal(raw) if text else raw
        choices = list(lit) if isinstance(lit, list) else [lit]
    if not choices:
        raise BadInput(f"{part.strip()!r} has an empty list of values")
    values = []
    for choice in choices:
        if len(names) > 1:
            if not isinstance(choice, (list, tuple)) or len(choice) != len(names):
                raise BadInput(
                    f"each value of {'*'.join(names)} must be a tuple of {len(names)}, got {choice!r}",
                    f"e.g. {'*'.join(names)}=[(1,4),(2,2)]",
                )
            items = tuple(choice)
        else:
            items = (choice,)
        typed = tuple(_coerce(v, (annot[i] if annot else known.get(n)), n, part.strip()) for i, (n, v) in enumerate(zip(names, items)))
        values.append(typed)
    # Duplicate choices would run the same point twice; keep the first.
    seen_keys: set[str] = set()
    unique = []
    for v in values:
        k = canonical(list(v))  # dict values are unhashable; compare their canonical JSON
        if k not in seen_keys:
            seen_keys.add(k)
            unique.append(v)
    return ArgSet(names=names, values=tuple(unique))


def parse_args(texts: str | list[str] | None, side: str = "server", framework: str | None = "vllm") -> list[ArgSet]:
    """Parse one or several (repeated flag) argument strings into argument sets."""
    if texts is None:
        return []
    if isinstance(texts, str):
        texts = [texts]
    joined = ";".join(t for t in texts if t is not None)
    strict = side == "client"
    known = CLIENT_ARG_TYPES if strict else (VLLM_ARG_TYPES if framework else {})
    sets: list[ArgSet] = []
    seen: set[str] = set()
    for part in re.split(";+", joined):
        if not part.strip():
            continue  # llm-optimizer fails on the empty part a trailing ';' leaves
        s = parse_part(part, known, strict, side)
        for n in s.names:
            if n in seen:
                raise BadInput(f"{side} arg {n!r} is given twice", "give each name once, with a list of values")
            seen.add(n)
        sets.append(s)
    return sets


def combinations(sets: list[ArgSet]) -> list[dict[str, Any]]:
    """The Cartesian product, as flat name → value dicts (composites flattened)."""
    if not sets:
        return [{}]
    out = []
    for combo in itertools.product(*(s.values for s in sets)):
        d: dict[str, Any] = {}
        for s, vals in zip(sets, combo):
            d.update(zip(s.names, vals))
        out.append(d)
    return out


def canonical(args: dict[str, Any] | list[Any]) -> str:
    """Canonical JSON of an argument dict (or of one choice's list of values, to find duplicates):
    the stable identity used for resume (llm-optimizer's str()-based config_id changes when a
    value goes through JSON; this does not)."""
    return json.dumps(_jsonable(args), sort_keys=True, separators=(",", ":"))


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return None
    return v
