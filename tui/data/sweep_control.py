"""Starting, stopping and resuming sweeps from the app, UI-free.

A sweep always runs in its own process (``core.sweep.start_detached``, its own session), so
closing the app or losing the terminal never stops it; the app only follows the study store.
Stop sends SIGTERM to the runner, which tears its server down and marks the study
interrupted; resume starts a new runner that measures only what is missing.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

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
            raise BadInput("no configuration fits this hardware, so there is nothing to sweep",
                           "see the Estimate screen for the reason")
        server_args = server_args or sug.server_args
        client_args = client_args or sug.client_args
    if plan.engine == "sagemaker":
        raise BadInput("the sweep runner does not measure SageMaker endpoints yet", "use the sim, vllm or external engine")
    engine = EngineSpec(kind=plan.engine, url=plan.url) if plan.engine == "external" else EngineSpec(kind=plan.engine)
    return build_spec(
        plan.model,
        engine=engine,
        server_args=server_args,
        client_args=client_args,
        constraints=plan.constraints,
        instance=plan.instance,
        gpu=plan.gpu,
        num_gpus=plan.num_gpus,
        input_len=plan.input_len,
        output_len=plan.output_len,
        objective=OBJECTIVES.get(plan.objective, "throughput"),
    )


class SweepControl:
    """Start, stop and resume runners on one study store."""

    def __init__(self, storage: str | os.PathLike | None = None) -> None:
        self.storage = str(storage or default_storage())
        self._store: StudyStore | None = None

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

    def runner_pid(self, study: str) -> int | None:
        row = self.store.study(study) or {}
        return row.get("runner_pid")

    def stop(self, study: str) -> bool:
        """Interrupt the runner (it stores nothing half-done and can be resumed)."""
        pid = self.runner_pid(study)
        if not pid:
            return False
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    def resume(self, study: str) -> None:
        from core.sweep import runner_alive, start_detached

        row = self.store.study(study)
        if row is None:
            raise BadInput(f"no study named {study!r}")
        if runner_alive(row):
            raise BadInput(f"study {study!r} is already running")
        start_detached(self.storage, study)
