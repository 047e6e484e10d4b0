"""Helpers shared by the subcommands: JSON output, argument checks and the yes/no prompt."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from core.errors import BadInput


def _jsonable(o: Any) -> Any:
    if isinstance(o, float) and (math.isinf(o) or math.isnan(o)):
        return None
    if hasattr(o, "model_dump"):
        return o.model_dump(mode="json")
    if isinstance(o, dict):
        return {k: _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    return o


def print_json(obj: Any) -> None:
    json.dump(_jsonable(obj), sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def int_list(text: str, name: str) -> list[int]:
    """``"1,2,4"`` → [1, 2, 4]; a clear error naming the flag otherwise."""
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise BadInput(f"{name} must be a comma-separated list of integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise BadInput(f"{name} must list positive integers, got {text!r}")
    return values


def positive(value: float | None, name: str) -> None:
    if value is not None and value <= 0:
        raise BadInput(f"{name} must be positive, got {value:g}")


def confirm(question: str, yes: bool) -> None:
    """Ask before changing something billable; --yes answers for a script, and without a
    terminal (no one to answer) it refuses rather than hang."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise BadInput("not confirmed: stdin is not a terminal", "pass --yes to confirm non-interactively")
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise BadInput("not confirmed; nothing was changed")
