"""Starting, stopping and resuming sweeps from the app, UI-free.

A sweep always runs in its own process (``core.sweep.start_detached``, its own session), so
closing the app or losing the terminal never stops it; the app only follows the study store.

Pause and continue are requests in the store (``StudyStore.request_state``), so they reach a
runner on any machine that shares it: a paused runner finishes and stores the point in
flight, then waits with its server up. Stop asks the same way and, for a runner on this
machine, also sends SIGTERM (no wait for the next poll); either way the runner tears its
server down and marks the study interrupted. Resume starts a new runner that measures only
what is missing. ``knee sweep --pause/--continue/--stop`` call the same methods.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.results.store import StudyStore, default_storage
from core.spec.plan import Plan
from core.spec.study import EngineSpec, SweepSpec

# Plan objectives → the sweep's objective names.
OBJECTIVES = {"max_throughput": "throughput", "min_cost": "cost", "min_latency": "latency"}


def spec_from_plan(plan: Plan) -> SweepSpec:
    """The sweep a plan asks for; an empty search space takes the estimator's suggestion."""
    from core.sweep import build_spec

    server_args, client_args = plan.server_args, plan.client_args
    if not server_args.strip() or not client_args.strip():
        from core.estimate import estimate

        sug = estimate(plan).suggestion
        if sug is None:
            raise BadInput("no configuration fits this hardware, so there is nothing to sweep", "see the Estimate screen for the reason")
        server_args = server_args or sug.server_args
        client_args = client_args or sug.client_args
    lengths_args = ("lengths_from", "random_input_len", "random_output_len", "random_range_ratio", "sharegpt_output_len")
    if plan.lengths_from and not any(a in client_args for a in lengths_args):
        # The plan's own requests' lengths, unless the client args set lengths of their own.
        client_args = f"{client_args.rstrip().rstrip(';')};lengths_from={plan.lengths_from}"
    if not plan.ignore_eos and not plan.lengths_from and "disable_ignore_eos" not in client_args:
        # The plan lets the model stop (its answers end at EOS): so does the sweep's client.
        # A client arg that says otherwise wins; it was typed on purpose.
        client_args = f"{client_args.rstrip().rstrip(';')};disable_ignore_eos=true"
    if plan.engine == "sagemaker":
        raise BadInput("the sweep runner does not measure SageMaker endpoints yet", "use the sim, vllm or external engine")
    url = {"url": plan.url} if plan.engine == "external" else {}
    engine = EngineSpec(kind=plan.engine, version=plan.engine_version, **url)
    return build_spec(
        plan.model,
        engine=engine,
        server_args=server_args,
        client_args=client_args,
        constraints=plan.constraints,
        instance=plan.instance,
        gpu=plan.gpu,
        num_gpus=plan.num_gpus,
        gpu_p2p=plan.gpu_p2p,
        input_len=plan.input_len,
        output_len=plan.output_len,
        objective=OBJECTIVES.get(plan.objective, "throughput"),
    )


class SweepControl:
    """Start, stop and resume runners on one study store."""

    def __init__(self, storage: str | os.PathLike | None = None, store: StudyStore | None = None) -> None:
        self.storage = str(storage or (store.url if store is not None else default_storage()))
        self._store = store

    @property
    def store(self) -> StudyStore:
        # Opened on first use: the app must not create .knee/ just by starting.
        if self._store is None:
            self._store = StudyStore(self.storage)
        return self._store

    def exists(self) -> bool:
        return "://" in self.storage or Path(self.storage).exists()

    def start(self, plan: Plan) -> str:
        """Create a study for ``plan`` and start its runner; returns the study's name."""
        from core.sweep import create_study, start_detached

        spec = spec_from_plan(plan)
        name = create_study(self.store, spec)
        start_detached(self.storage, name)
        return name

    def latest(self) -> str | None:
        if not self.exists():
            return None
        return self.store.latest_study()

    def requested(self, study: str) -> str:
        """What the store asks the study's runner to do: run, pause or stop."""
        return self.store.requested_state(study)

    def _row(self, study: str) -> dict[str, Any]:
        row = self.store.study(study)
        if row is None:
            raise BadInput(f"no study named {study!r} in {self.storage}", "see knee results --list")
        return row

    def check_runner(self, study: str, verb: str) -> dict[str, Any]:
        """The study's row; BadInput naming why when no runner works on it to ``verb``."""
        from core.sweep import runner_alive

        row = self._row(study)
        # "created": a detached runner that has not started yet reads the request when it does.
        if row.get("status") != "created" and not runner_alive(row):
            status = row.get("status")
            if status == "running":
                status = "running, but its runner is gone"
            hint = None if status in ("done", "imported") else f"knee sweep --resume --study {study} starts it again"
            raise BadInput(f"study {study!r} has no runner to {verb} ({status})", hint)
        return row

    def pause(self, study: str) -> bool:
        """Ask the runner to pause after the load point in flight; False if already asked."""
        self.check_runner(study, "pause")
        if self.requested(study) == "pause":
            return False
        self.store.request_state(study, "pause")
        return True

    def proceed(self, study: str) -> bool:
        """Ask a paused runner to continue; False if it was not paused."""
        self.check_runner(study, "continue")
        if self.requested(study) != "pause":
            return False
        self.store.request_state(study, "run")
        return True

    def stop(self, study: str) -> bool:
        """Interrupt the runner (it stores nothing half-done and can be resumed); False when
        no runner is working on the study."""
        from core.sweep import runner_alive

        row = self.store.study(study) or {}
        alive = runner_alive(row)
        if not alive and row.get("status") != "created":
            return False
        self.store.request_state(study, "stop")
        if alive and row.get("runner_host") == socket.gethostname():
            try:
                os.kill(row["runner_pid"], signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass  # gone, or not ours to signal: the request in the store still reaches it
        return True

    def resume(self, study: str) -> None:
        from core.sweep import runner_alive, start_detached

        row = self._row(study)
        if runner_alive(row):
            raise BadInput(f"study {study!r} is already running")
        self.store.request_state(study, "run")  # a stale pause or stop is not for the new runner
        start_detached(self.storage, study)
