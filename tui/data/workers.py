"""What the TUI shows of the workers of a joined study (``knee sweep --join``), UI-free.

The per-worker facts come from :func:`core.sweep.lease.worker_status`, the same function
``knee results`` and ``knee attach`` print from, so the screens and the CLI never disagree on
whether a worker is running, finished or presumed dead. This module only shortens them into
table cells, and names each point's hardware class (GPU type x count) for a study that ran
on mixed hardware.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkerView:
    """One row of the Sweep screen's worker table."""

    key: str  # the worker id (host:pid:nonce): stable across polls
    name: str  # host:pid
    state: str  # running, waiting, finished, stopped, silent, presumed dead
    held: str  # "trial 3" (+ the point in flight), or "" when it holds nothing
    heartbeat_s: int | None  # whole seconds, so a poll that changed nothing else is equal
    done: int


def short_state(state: str) -> str:
    """worker_status's sentence, cut to the word a table column has room for (the
    sentence's explanation is in ``knee results``)."""
    for prefix, word in (("presumed dead", "presumed dead"), ("silent", "silent"), ("waiting", "waiting")):
        if state.startswith(prefix):
            return word
    return state


def worker_views(workers: Iterable[dict[str, Any]]) -> tuple[WorkerView, ...]:
    out = []
    for w in workers:
        held = ""
        if w.get("trial_id") is not None:
            held = f"trial {w['trial_id']}" + (" · point in flight" if w.get("inflight") else "")
        age = w.get("heartbeat_age_s")
        out.append(
            WorkerView(
                key=str(w.get("worker") or ""),
                name=f"{w.get('host') or '?'}:{w.get('pid') or '?'}",
                state=short_state(str(w.get("state") or "")),
                held=held,
                heartbeat_s=int(age) if age is not None else None,
                done=int(w.get("configurations_done") or 0),
            )
        )
    return tuple(out)


def read_workers(store, study: str) -> tuple[WorkerView, ...]:
    """The workers of ``study`` now; () for a study nobody joined."""
    from core.sweep.lease import worker_status

    return worker_views(worker_status(store, study))


def hw_class(gpu_type: str | None, gpu_count: int | None) -> str:
    """ "H100 x8": a GPU type and count, the unit mixed-hardware points are told apart by."""
    kind = gpu_type or "unknown GPU"
    return f"{kind} x{gpu_count}" if gpu_count else kind


def point_classes(points: Iterable[Any], point_hosts: dict[str, dict[str, Any]], trial_hosts: Iterable[dict[str, Any]]) -> dict[str, str]:
    """point_id -> hardware class, from who stored the point (knee_point_hosts) and where that
    worker launched the point's configuration (knee_trial_hosts). A point whose storer is not
    recorded takes its configuration's first launch."""
    by_launch: dict[tuple[int, str], str] = {}
    by_trial: dict[int, str] = {}
    for r in trial_hosts:
        label = hw_class(r.get("gpu_type"), r.get("gpu_count"))
        by_launch[(int(r["trial_id"]), str(r.get("worker") or ""))] = label
        by_trial.setdefault(int(r["trial_id"]), label)
    out: dict[str, str] = {}
    for p in points:
        worker = (point_hosts.get(p.point_id) or {}).get("worker") or ""
        label = by_launch.get((p.trial_id, worker)) or by_trial.get(p.trial_id)
        if label:
            out[p.point_id] = label
    return out


def point_host_names(point_hosts: dict[str, dict[str, Any]]) -> dict[str, str]:
    """point_id -> the host column's cell: the host, marked when the point was re-measured
    after the worker that had it in flight died."""
    return {k: f"{v.get('host') or '-'}{' (re-run)' if v.get('rerun') else ''}" for k, v in point_hosts.items()}
