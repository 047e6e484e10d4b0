"""Leases: several workers (``knee sweep --join``, one per GPU box) on one study.

Each server configuration (trial) of a joined study has a row in ``knee_leases``. A worker
claims the first row, in plan order, that is not done and has no holder or an expired lease
(its holder died); renews it with its heartbeat while it launches and measures; and marks it
done when the configuration is finished. Every claim is also appended to ``knee_lease_log``.

Claiming is one short write transaction that is correct on both stores:

- SQLite: ``BEGIN IMMEDIATE`` takes the database's write lock before the row is read, so two
  workers never read the same free row (a deferred transaction could, and one would then fail
  to upgrade its lock);
- PostgreSQL: ``SELECT ... FOR UPDATE SKIP LOCKED`` locks the row; a worker racing for it
  skips to the next one instead of waiting;
- on both, the UPDATE repeats the claim condition and its rowcount must be 1.

When a dead worker's lease is taken over, the points it stored are kept and the point it had
in flight (``inflight``) is remembered as ``rerun``: when the new holder stores it, the point
is marked as a re-run (``knee_point_hosts.rerun``).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from core.results.store import lease_log_t, leases_t, points_t, studies_t, trials_t
from core.spec.study import canonical_json

TTL_ENV = "KNEE_LEASE_TTL_S"
DEFAULT_TTL_S = 60.0  # as store.RUNNER_STALE_S: a worker silent this long is taken for dead


def lease_ttl() -> float:
    """Seconds a lease lasts without a renewal (``$KNEE_LEASE_TTL_S``, default 60)."""
    try:
        v = float(os.environ.get(TTL_ENV, DEFAULT_TTL_S))
    except ValueError:
        return DEFAULT_TTL_S
    return v if v > 0 else DEFAULT_TTL_S


@dataclass(frozen=True)
class Worker:
    id: str
    host: str
    pid: int

    @classmethod
    def this(cls) -> "Worker":
        host, pid = socket.gethostname(), os.getpid()
        # The nonce tells apart two workers that got the same pid on one host over time.
        return cls(f"{host}:{pid}:{secrets.token_hex(3)}", host, pid)


@dataclass(frozen=True)
class Claim:
    trial_id: int
    trial_key: str
    rerun: str | None = None  # the point a dead holder had in flight (not stored)
    taken_from: str | None = None  # the dead holder's worker id, on a takeover
    taken_from_host: str | None = None


@contextmanager
def _locked(store, study: str, whole: bool = False) -> Iterator[sa.Connection]:
    """One write transaction: on SQLite it holds the write lock from its first statement; on
    PostgreSQL, with ``whole``, it locks the study's row (seeding), else rows are locked as
    they are selected (claims: FOR UPDATE SKIP LOCKED)."""
    with store.engine.connect() as c:
        dialect = c.dialect.name
        if dialect == "sqlite":
            c.exec_driver_sql("BEGIN IMMEDIATE")
        elif whole:
            c.execute(sa.select(studies_t.c.name).where(studies_t.c.name == study).with_for_update())
        yield c
        c.commit()


def seed(store, study: str, plans: Sequence[Any]) -> dict[str, int]:
    """Trial ids and lease rows for every planned configuration (idempotent: the first worker
    creates them, in plan order, and later ones find them). Returns trial_key -> trial_id."""
    with _locked(store, study, whole=True) as c:
        ids = {k: int(i) for k, i in c.execute(sa.select(trials_t.c.trial_key, trials_t.c.trial_id).where(trials_t.c.study == study))}
        have = {int(r[0]) for r in c.execute(sa.select(leases_t.c.trial_id).where(leases_t.c.study == study))}
        nxt = max(ids.values(), default=-1) + 1
        for order, t in enumerate(plans):
            if t.trial_key not in ids:
                c.execute(trials_t.insert().values(
                    study=study, trial_id=nxt, trial_key=t.trial_key, server_args=canonical_json(t.server_args),
                    status="pending", launches=0, predicted=json.dumps(t.predicted, default=str) if t.predicted else None))
                ids[t.trial_key], nxt = nxt, nxt + 1
            tid = ids[t.trial_key]
            if tid not in have:
                c.execute(leases_t.insert().values(study=study, trial_id=tid, trial_key=t.trial_key, ord=order, state="pending", attempts=0))
                have.add(tid)
    return {t.trial_key: ids[t.trial_key] for t in plans}


def _claimable(study: str, now: float):
    return sa.and_(
        leases_t.c.study == study,
        leases_t.c.state != "done",
        sa.or_(leases_t.c.worker.is_(None), leases_t.c.expires_at < now),
    )


def claim(store, study: str, me: Worker, ttl_s: float) -> Claim | None:
    """The next free configuration, now held by ``me``; None when none is free."""
    for _ in range(5):
        now = time.time()
        with _locked(store, study) as c:
            q = sa.select(leases_t).where(_claimable(study, now)).order_by(leases_t.c.ord).limit(1)
            if c.dialect.name == "postgresql":
                q = q.with_for_update(skip_locked=True)
            row = c.execute(q).mappings().first()
            if row is None:
                return None
            prev = row["worker"]  # set: the lease expired, its holder is taken for dead
            rerun = row["inflight"] if prev and row["inflight"] else row["rerun"]
            if rerun and c.execute(sa.select(points_t.c.point_id).where(points_t.c.study == study, points_t.c.point_id == rerun)).first():
                rerun = None  # it was stored after all (the holder died just after)
            got = c.execute(
                leases_t.update()
                .where(_claimable(study, now), leases_t.c.trial_id == row["trial_id"])
                .values(state="running", worker=me.id, host=me.host, pid=me.pid, claimed_at=now, heartbeat_at=now,
                        expires_at=now + ttl_s, inflight=None, rerun=rerun, attempts=leases_t.c.attempts + 1)
            ).rowcount
            if got != 1:
                c.rollback()
                continue  # someone else got it between the read and the write (PostgreSQL only)
            if prev:
                c.execute(
                    lease_log_t.update()
                    .where(lease_log_t.c.study == study, lease_log_t.c.trial_id == row["trial_id"],
                           lease_log_t.c.worker == prev, lease_log_t.c.outcome == "running")
                    .values(outcome="expired", ended_at=row["heartbeat_at"], inflight=row["inflight"])
                )
            c.execute(lease_log_t.insert().values(study=study, trial_id=row["trial_id"], worker=me.id, host=me.host,
                                                  pid=me.pid, claimed_at=now, outcome="running"))
        return Claim(int(row["trial_id"]), row["trial_key"], rerun, prev, row["host"] if prev else None)
    return None


def _mine(study: str, me: Worker, trial_id: int):
    return sa.and_(leases_t.c.study == study, leases_t.c.trial_id == trial_id, leases_t.c.worker == me.id)


def renew(store, study: str, me: Worker, trial_id: int, ttl_s: float, inflight: Any = ...) -> bool:
    """Extend ``me``'s lease (and set the point in flight); False when it is no longer held."""
    now = time.time()
    values: dict[str, Any] = {"heartbeat_at": now, "expires_at": now + ttl_s}
    if inflight is not ...:
        values["inflight"] = inflight
    with store.engine.begin() as c:
        return c.execute(leases_t.update().where(_mine(study, me, trial_id)).values(**values)).rowcount == 1


def end(store, study: str, me: Worker, trial_id: int, outcome: str) -> None:
    """``done``: the configuration is finished; ``released``: free it for the next worker
    (this one stops); ``lost``: it was taken over, only the log changes."""
    now = time.time()
    with store.engine.begin() as c:
        if outcome == "done":
            c.execute(leases_t.update().where(_mine(study, me, trial_id)).values(state="done", inflight=None, rerun=None, heartbeat_at=now, expires_at=None))
        elif outcome == "released":
            c.execute(leases_t.update().where(_mine(study, me, trial_id)).values(
                state="pending", worker=None, host=None, pid=None, inflight=None, expires_at=None))
        c.execute(
            lease_log_t.update()
            .where(lease_log_t.c.study == study, lease_log_t.c.trial_id == trial_id, lease_log_t.c.worker == me.id, lease_log_t.c.outcome == "running")
            .values(outcome=outcome, ended_at=now)
        )


def remaining(store, study: str) -> int:
    """Configurations not done yet (held or free)."""
    with store.engine.connect() as c:
        return int(c.execute(sa.select(sa.func.count()).select_from(leases_t).where(leases_t.c.study == study, leases_t.c.state != "done")).scalar())


def others_alive(store, study: str, me: Worker) -> bool:
    """Whether another worker holds an unexpired lease on ``study``."""
    with store.engine.connect() as c:
        return bool(c.execute(sa.select(sa.func.count()).select_from(leases_t).where(
            leases_t.c.study == study, leases_t.c.state == "running", leases_t.c.worker.is_not(None),
            leases_t.c.worker != me.id, leases_t.c.expires_at >= time.time())).scalar())


def beat_study(store, study: str, me: Worker) -> None:
    """The study row names a live worker (viewers and ``--pause`` go by it) and is running."""
    with store.engine.begin() as c:
        c.execute(studies_t.update().where(studies_t.c.name == study, studies_t.c.status != "done").values(
            status="running", runner_pid=me.pid, runner_host=me.host, heartbeat_at=time.time()))


def finish_study(store, study: str) -> bool:
    """Mark the study done; True for the one worker that did it (it announces the end)."""
    with store.engine.begin() as c:
        return c.execute(studies_t.update().where(studies_t.c.name == study, studies_t.c.status != "done").values(
            status="done", runner_pid=None)).rowcount == 1
