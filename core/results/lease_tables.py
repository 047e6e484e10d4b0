"""The several-workers tables (``knee sweep --join``; the logic is :mod:`core.sweep.lease`):
leases on configurations, the claim log, and who stored each point and ran each launch.

Each table is new, so a store made before them gains them without a migration. They hang on
:data:`core.results.schema.metadata`; :class:`WorkerRecords` is the store's read side of them.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from core.results.schema import metadata

# One row per server configuration of a joined study: who holds it, until when. A worker
# claims a row whose holder is NULL or whose lease expired (the holder died), renews it with
# its heartbeat, and marks it done when the configuration is finished.
leases_t = sa.Table(
    "knee_leases",
    metadata,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("trial_id", sa.Integer, primary_key=True),
    sa.Column("trial_key", sa.Text, nullable=False),
    sa.Column("ord", sa.Integer, nullable=False),  # claim order (the plan's)
    sa.Column("state", sa.String(20), nullable=False),  # pending|running|done
    sa.Column("worker", sa.String(200)),  # host:pid:nonce of the holder; NULL when free
    sa.Column("host", sa.String(200)),
    sa.Column("pid", sa.Integer),
    sa.Column("claimed_at", sa.Float),
    sa.Column("heartbeat_at", sa.Float),
    sa.Column("expires_at", sa.Float),
    sa.Column("inflight", sa.String(40)),  # the load point being measured (not stored yet)
    sa.Column("rerun", sa.String(40)),  # the point a dead holder had in flight: marked when stored
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
)
# Every claim, append-only: who held which configuration from when to when, and how it ended
# (running|done|released|expired|lost). Two live workers never hold one configuration at once.
lease_log_t = sa.Table(
    "knee_lease_log",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study", sa.String(200), nullable=False, index=True),
    sa.Column("trial_id", sa.Integer, nullable=False),
    sa.Column("worker", sa.String(200), nullable=False),
    sa.Column("host", sa.String(200)),
    sa.Column("pid", sa.Integer),
    sa.Column("claimed_at", sa.Float, nullable=False),
    sa.Column("ended_at", sa.Float),
    sa.Column("outcome", sa.String(20), nullable=False),
    sa.Column("inflight", sa.String(40)),  # expired: the point its holder had in flight
)
# Who stored each point (any runner): host, pid, worker, and whether it is a re-run of a point
# that was in flight on a worker that died. Written in the point's own transaction.
point_hosts_t = sa.Table(
    "knee_point_hosts",
    metadata,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("point_id", sa.String(40), primary_key=True),
    sa.Column("worker", sa.String(200)),
    sa.Column("host", sa.String(200)),
    sa.Column("pid", sa.Integer),
    sa.Column("rerun", sa.Boolean, nullable=False, default=False),
)
# Where each launch of a configuration ran: host, GPU type and count, engine and its version
# (the sim engine gives its simulated hardware). One row per trial and worker.
trial_hosts_t = sa.Table(
    "knee_trial_hosts",
    metadata,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("trial_id", sa.Integer, primary_key=True),
    sa.Column("worker", sa.String(200), primary_key=True),
    sa.Column("host", sa.String(200)),
    sa.Column("gpu_type", sa.String(100)),
    sa.Column("gpu_count", sa.Integer),
    sa.Column("engine", sa.String(40)),
    sa.Column("engine_version", sa.String(200)),
    sa.Column("simulated", sa.Boolean),
    sa.Column("recorded_at", sa.Float),
)


class LeaseLost(Exception):
    """A worker's lease on a configuration expired and another worker took it over: the
    point it measured is not stored (the new holder measures it)."""


class WorkerRecords:
    """Who ran what in a study (several workers): the read side of these tables, and the one
    write a single runner makes too (:meth:`record_trial_host`). Part of :class:`StudyStore`,
    which provides ``engine``."""

    engine: sa.engine.Engine

    def point_hosts(self, study: str) -> dict[str, dict[str, Any]]:
        """point_id -> {worker, host, pid, rerun} for the points whose storer was recorded."""
        with self.engine.connect() as c:
            rows = c.execute(sa.select(point_hosts_t).where(point_hosts_t.c.study == study)).mappings().all()
        return {r["point_id"]: {k: r[k] for k in ("worker", "host", "pid")} | {"rerun": bool(r["rerun"])} for r in rows}

    def record_trial_host(self, study: str, trial_id: int, worker: str, **values: Any) -> None:
        """Where a launch of ``trial_id`` ran (host, gpu_type, gpu_count, engine, engine_version, simulated)."""
        with self.engine.begin() as c:
            c.execute(
                trial_hosts_t.delete().where(trial_hosts_t.c.study == study, trial_hosts_t.c.trial_id == trial_id, trial_hosts_t.c.worker == worker)
            )
            c.execute(trial_hosts_t.insert().values(study=study, trial_id=trial_id, worker=worker, recorded_at=time.time(), **values))

    def trial_hosts(self, study: str) -> list[dict[str, Any]]:
        with self.engine.connect() as c:
            rows = (
                c.execute(
                    sa.select(trial_hosts_t).where(trial_hosts_t.c.study == study).order_by(trial_hosts_t.c.trial_id, trial_hosts_t.c.recorded_at)
                )
                .mappings()
                .all()
            )
        return [dict(r) for r in rows]

    def leases(self, study: str) -> list[dict[str, Any]]:
        """The configurations of a joined study and who holds each (empty for other studies)."""
        with self.engine.connect() as c:
            rows = c.execute(sa.select(leases_t).where(leases_t.c.study == study).order_by(leases_t.c.ord)).mappings().all()
        return [dict(r) for r in rows]

    def lease_log(self, study: str) -> list[dict[str, Any]]:
        """Every claim of a configuration in a joined study, oldest first."""
        with self.engine.connect() as c:
            rows = c.execute(sa.select(lease_log_t).where(lease_log_t.c.study == study).order_by(lease_log_t.c.seq)).mappings().all()
        return [dict(r) for r in rows]
