"""The bundled model catalog: configurations copied from the Hugging Face hub
(``data/models/<org>--<name>.json``), the aliases that share one (``data/model-aliases.json``),
and the bundled ids that resemble what a user typed (another case, no organisation, a typo)."""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from importlib import resources
from typing import Any


def _data():
    return resources.files("core.catalog").joinpath("data")


@lru_cache(maxsize=1)
def _aliases() -> dict[str, tuple[str, dict[str, Any] | None]]:
    """Alias repo id → (the bundled repo id whose dimensions it has, the alias's own
    ``quantization_config`` or None). An entry is the target's id, or an object
    ``{"of": target, "quantization_config": {...}}`` for a re-quantization: its weights are
    not the target's, so its format rides with it (a Qwen3 FP8 checkpoint read as its bf16
    original had twice the weight bytes)."""
    out: dict[str, tuple[str, dict[str, Any] | None]] = {}
    for alias, v in json.loads(_data().joinpath("model-aliases.json").read_text()).items():
        out[alias] = (v, None) if isinstance(v, str) else (v["of"], v.get("quantization_config"))
    return out


@lru_cache(maxsize=1)
def bundled_index() -> dict[str, str]:
    """HF repo id → bundled file name, including aliases."""
    index = {}
    for f in _data().joinpath("models").iterdir():
        if f.name.endswith(".json"):
            index[f.name[: -len(".json")].replace("--", "/", 1)] = f.name
    for alias, (target, _) in _aliases().items():
        if target in index:
            index[alias] = index[target]
    return index


def bundled_models() -> list[str]:
    return sorted(bundled_index())


def bundled_config(ref: str) -> dict[str, Any] | None:
    """The bundled config.json of ``ref`` (any case; an alias gets its target's, with its own
    quantization), None when ``ref`` is not bundled."""
    index = bundled_index()
    key = ref if ref in index else next((k for k in index if k.lower() == ref.lower()), None)
    if key is None:
        return None
    cfg = json.loads(_data().joinpath("models").joinpath(index[key]).read_text())
    cfg.pop("_source", None)
    quantized = _aliases().get(key, ("", None))[1]
    if quantized is not None:
        cfg["quantization_config"] = quantized
    return cfg


def close_bundled(ref: str) -> list[str]:
    """Bundled ids that look like ``ref`` (a typo, another case, the name without its
    organisation), best first."""
    ids = bundled_models()
    by_key: dict[str, str] = {}
    for i in ids:
        by_key.setdefault(i.lower(), i)
        by_key.setdefault(i.split("/", 1)[-1].lower(), i)
    # The same name under its organisation first, then the nearest spellings.
    exact = [i for i in ids if i.split("/", 1)[-1].lower() == ref.split("/", 1)[-1].lower()]
    hits = difflib.get_close_matches(ref.lower(), list(by_key), n=6, cutoff=0.75)
    return list(dict.fromkeys(exact + [by_key[h] for h in hits]))[:3]
