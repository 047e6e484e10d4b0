"""The runner's process entry point: ``python -m core.sweep.runner --study NAME``, the store
URL in ``$KNEE_STORAGE_URL`` (out of sight of ``ps``: it may hold a database password).

A detached sweep (:func:`core.sweep.start_detached`) and each worker of a parallel run
(:mod:`core.sweep.coordinator`) are this process; the headless ``knee sweep`` runs the same
:class:`Runner` in its own process. The runner itself is :mod:`core.sweep.run`; its names are
importable from here too, where callers have always imported them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from core.errors import KneeError
from core.results.store import StudyStore
from core.sweep.control import BEAT_S, CONTROL_POLL_S, _Interrupted
from core.sweep.coordinator import STORAGE_ENV
from core.sweep.run import Runner, _arch, _hardware, default_measurer, default_predictor
from core.sweep.summary import RunSummary, summary_dict

_summary_dict = summary_dict  # the name callers (knee sweep, workers.py) import


def run_study(storage: str, study: str, **kw: Any) -> RunSummary:
    """Run (or resume) ``study`` in this process."""
    store = StudyStore(storage, create=False)
    try:
        return Runner(store, study, **kw).run()
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m core.sweep.runner --study NAME``: the detached runner, or a parallel worker."""
    ap = argparse.ArgumentParser(prog="knee-runner")
    ap.add_argument(
        "--storage",
        default=os.environ.get(STORAGE_ENV),
        help=f"study store path or URL (default ${STORAGE_ENV}: how knee passes it, out of sight of ps)",
    )
    ap.add_argument("--study", required=True)
    ap.add_argument("--workspace")
    ap.add_argument("--worker-trial", help="(internal) run only this trial, for a parallel coordinator")
    ap.add_argument("--worker-gpus", help="(internal) the GPUs the worker's trial gets, e.g. 0,1")
    a = ap.parse_args(argv)
    if not a.storage:
        ap.error(f"--storage or ${STORAGE_ENV} is required")
    kw: dict[str, Any] = {"workspace": a.workspace}
    if a.worker_trial is not None:
        kw["worker_trial"] = a.worker_trial
        kw["worker_gpus"] = [int(g) for g in a.worker_gpus.split(",")] if a.worker_gpus else None
    try:
        s = run_study(a.storage, a.study, **kw)
    except KneeError as e:
        print(f"knee runner: error: {e}", file=sys.stderr)
        return e.exit_code
    if a.worker_trial is not None:
        print(json.dumps(summary_dict(s)), flush=True)  # read by the coordinator
    return 130 if s.interrupted else 0


__all__ = [
    "Runner",
    "RunSummary",
    "run_study",
    "main",
    "default_measurer",
    "default_predictor",
    "STORAGE_ENV",
    "BEAT_S",
    "CONTROL_POLL_S",
    "_Interrupted",
    "_summary_dict",
    "_hardware",
    "_arch",
]

if __name__ == "__main__":
    sys.exit(main())
