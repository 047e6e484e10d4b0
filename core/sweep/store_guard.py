"""A shared study store that goes away for a while.

A PostgreSQL server restarted for maintenance, or a network blip between a GPU box and the
database, must not cost a worker its configuration, let alone its stored points: every store
call of a worker waits such an outage out, retrying, up to $KNEE_STORE_OUTAGE_S (default
120 s); past that the worker stops with one line (its points stay stored; the same command
rejoins). Each store call is one transaction, so a retry repeats it whole: one cut before the
commit left nothing, and the writes a worker makes are idempotent (a point is replaced by
its id, a lease is renewed or claimed by condition) should a commit's answer be what was lost.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from core.errors import RunFailed

OUTAGE_ENV = "KNEE_STORE_OUTAGE_S"
DEFAULT_OUTAGE_S = 120.0


def outage_budget() -> float:
    try:
        v = float(os.environ.get(OUTAGE_ENV, DEFAULT_OUTAGE_S))
    except ValueError:
        return DEFAULT_OUTAGE_S
    return v if v >= 0 else DEFAULT_OUTAGE_S


class StoreUnreachable(RunFailed):
    """The shared store stayed unreachable longer than the outage budget (exit code 1)."""


def is_outage(e: BaseException) -> bool:
    """Whether ``e`` means the store cannot be reached now (not that a statement is wrong)."""
    if isinstance(e, sa.exc.DBAPIError) and e.connection_invalidated:
        return True
    if isinstance(e, sa.exc.InterfaceError):
        return True
    if isinstance(e, sa.exc.OperationalError):
        # SQLite reports a missing table as an OperationalError too: there only a lock waits.
        msg = str(e.orig).lower()
        return "sqlite" not in type(e.orig).__module__ or "locked" in msg or "busy" in msg
    return False


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


class StoreGuard:
    """A :class:`StudyStore` whose calls wait out an outage of the store (module docstring). Attribute
    reads pass through; ``call(fn, ...)`` guards any function of the store (the lease ones).
    Thread-safe: the runner's control thread and its main thread share one outage."""

    def __init__(self, store, budget_s: float | None = None, notice: Callable[[str], None] | None = None):
        self._store = store
        self._budget = outage_budget() if budget_s is None else budget_s
        self._notice = notice or (lambda msg: None)
        self._lock = threading.Lock()
        self._down_since: float | None = None

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._store, name)
        if callable(v) and not name.startswith("_") and name != "close":
            return functools.partial(self.call, v)
        return v

    def call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        delay = 0.1
        while True:
            try:
                out = fn(*args, **kw)
            except Exception as e:
                if not is_outage(e):
                    raise
                now = time.monotonic()
                with self._lock:
                    if self._down_since is None:
                        self._down_since = now
                        self._notice(
                            f"the study store {self._store.shown_url} is unreachable ({_first_line(e)}); "
                            f"waiting up to {self._budget:.0f} s for it (${OUTAGE_ENV})"
                        )
                    down_s = now - self._down_since
                if down_s >= self._budget:
                    raise StoreUnreachable(
                        f"the study store {self._store.shown_url} has been unreachable for over {self._budget:.0f} s ({_first_line(e)}); "
                        "this worker stops: the points stored are kept, and the same command joins the study again"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            if self._down_since is not None:
                with self._lock:
                    if self._down_since is not None:
                        self._notice(f"the study store is back after {time.monotonic() - self._down_since:.0f} s; going on")
                        self._down_since = None
            return out


# ---- following a joined study from any box (knee results, knee attach) ----------------------
