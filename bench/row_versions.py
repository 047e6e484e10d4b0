"""Which engine release a measurement row is predicted with, and what that release does by
default: the version rules ``bench/rows.py`` applies to every row alike."""

from __future__ import annotations

import re

from core.estimate.params import engine_under_env
from core.spec.engine_defaults import release


def caches_prefixes(row: dict) -> bool:
    """Prefix caching on by default: vLLM's V1 engine (0.8 on; an unknown version is current)
    and SGLang's radix cache."""
    engine = (row.get("engine") or "").lower()
    rel = release(engine_version(row), 2)
    return engine == "sglang" or (engine == "vllm" and (not rel or rel >= (0, 8)))


# The last vLLM release before async scheduling became the default (0.14.0, 2026-01-17).
SYNC_VLLM = "0.13"


# vLLM 0.14.0 came out on 2026-01-17 with async scheduling on by default (PR #27614): a row
# from the month after on, without a version, is taken to run it or later.
ASYNC_FROM = "2026-02"


def engine_version(row: dict) -> str | None:
    """The engine version a row is predicted with: its own; else for vLLM the current release
    (None) where the row's ``date`` is from :data:`ASYNC_FROM` on, and the last release before
    async scheduling (:data:`SYNC_VLLM`) otherwise. The vLLM rows without a version or a date
    were all measured before 0.14: vllmci (Oct 2024), llmpricecompass (Aug 2024), ttgpuref
    (Apr 2025), vllmpr23696 (Aug 2025), kubeai (2025, V1) and smwalk (``pip install vllm`` for
    a post of 19 Dec 2025, when 0.13 was current)."""
    version = row.get("engine_version")
    if not version and (row.get("engine") or "").lower() == "vllm":
        return None if str(row.get("date") or "") >= ASYNC_FROM else SYNC_VLLM
    return version


def engine_of(row: dict) -> str:
    """The engine a row is predicted with: its own, or vLLM's V0 engine where its notes say
    the server was started with ``VLLM_USE_V1=0`` on a release that still had V0 (0.8-0.10;
    :func:`core.estimate.params.engine_under_env`, which a sweep applies to its servers'
    environment the same way)."""
    forced = re.search(r"VLLM_USE_V1=([01])\b", row.get("notes", "") or "")
    env = {"VLLM_USE_V1": forced.group(1)} if forced else {}
    return engine_under_env(row.get("engine") or "vllm", engine_version(row), env)
