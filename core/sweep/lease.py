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
from collections.abc import Collection, Iterator, Sequence
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
        ids = {r.trial_key: int(r.trial_id) for r in c.execute(sa.select(trials_t.c.trial_key, trials_t.c.trial_id).where(trials_t.c.study == study))}
        have = {int(r.trial_id) for r in c.execute(sa.select(leases_t.c.trial_id).where(leases_t.c.study == study))}
        nxt = max(ids.values(), default=-1) + 1
        for order, t in enumerate(plans):
            if t.trial_key not in ids:
                c.execute(
                    trials_t.insert().values(
                        study=study,
                        trial_id=nxt,
                        trial_key=t.trial_key,
                        server_args=canonical_json(t.server_args),
                        status="pending",
                        launches=0,
                        predicted=json.dumps(t.predicted, default=str) if t.predicted else None,
                    )
                )
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


def claim(store, study: str, me: Worker, ttl_s: float, only: Collection[int] | None = None) -> Claim | None:
    """The next free configuration, now held by ``me``; None when none is free. ``only``: the
    trial ids this worker can run (its own plan; a worker on other hardware may plan fewer)."""
    for _ in range(5):
        now = time.time()
        with _locked(store, study) as c:
            q = sa.select(leases_t).where(_claimable(study, now))
            if only is not None:
                q = q.where(leases_t.c.trial_id.in_(list(only)))
            q = q.order_by(leases_t.c.ord).limit(1)
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
                .values(
                    state="running",
                    worker=me.id,
                    host=me.host,
                    pid=me.pid,
                    claimed_at=now,
                    heartbeat_at=now,
                    expires_at=now + ttl_s,
                    inflight=None,
                    rerun=rerun,
                    attempts=leases_t.c.attempts + 1,
                )
            ).rowcount
            if got != 1:
                c.rollback()
                continue  # someone else got it between the read and the write (PostgreSQL only)
            if prev:
                c.execute(
                    lease_log_t.update()
                    .where(
                        lease_log_t.c.study == study,
                        lease_log_t.c.trial_id == row["trial_id"],
                        lease_log_t.c.worker == prev,
                        lease_log_t.c.outcome == "running",
                    )
                    .values(outcome="expired", ended_at=row["heartbeat_at"], inflight=row["inflight"])
                )
            c.execute(
                lease_log_t.insert().values(
                    study=study, trial_id=row["trial_id"], worker=me.id, host=me.host, pid=me.pid, claimed_at=now, outcome="running"
                )
            )
        return Claim(int(row["trial_id"]), row["trial_key"], rerun, prev, row["host"] if prev else None)
    return None


def prune(store, study: str, trial_id: int, reason: str) -> bool:
    """Record a configuration the adaptive strategy ruled out: its lease done and its trial
    skipped with ``reason``, in one transaction. Only a configuration never claimed, with no
    point stored: one a worker holds, or a dead one held, is run, not pruned. True for the one
    worker that recorded it (it announces it); several may decide the same prune at once."""
    now = time.time()
    with _locked(store, study) as c:
        got = c.execute(
            leases_t.update()
            .where(_claimable(study, now), leases_t.c.trial_id == trial_id, leases_t.c.attempts == 0)
            .values(state="done", worker=None, host=None, pid=None, expires_at=None, heartbeat_at=now)
        ).rowcount
        if got != 1 or c.execute(sa.select(points_t.c.point_id).where(points_t.c.study == study, points_t.c.trial_id == trial_id)).first():
            c.rollback()
            return False
        c.execute(trials_t.update().where(trials_t.c.study == study, trials_t.c.trial_id == trial_id).values(status="skipped", reason=reason))
    return True


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
            c.execute(
                leases_t.update().where(_mine(study, me, trial_id)).values(state="done", inflight=None, rerun=None, heartbeat_at=now, expires_at=None)
            )
        elif outcome == "released":
            c.execute(
                leases_t.update()
                .where(_mine(study, me, trial_id))
                .values(state="pending", worker=None, host=None, pid=None, inflight=None, expires_at=None)
            )
        c.execute(
            lease_log_t.update()
            .where(
                lease_log_t.c.study == study, lease_log_t.c.trial_id == trial_id, lease_log_t.c.worker == me.id, lease_log_t.c.outcome == "running"
            )
            .values(outcome=outcome, ended_at=now)
        )


def remaining(store, study: str, only: Collection[int] | None = None) -> int:
    """Configurations not done yet (held or free); of ``only`` where given."""
    q = sa.select(sa.func.count()).select_from(leases_t).where(leases_t.c.study == study, leases_t.c.state != "done")
    if only is not None:
        q = q.where(leases_t.c.trial_id.in_(list(only)))
    with store.engine.connect() as c:
        return int(c.execute(q).scalar())


def others_alive(store, study: str, me: Worker) -> bool:
    """Whether another worker holds an unexpired lease on ``study``."""
    with store.engine.connect() as c:
        return bool(
            c.execute(
                sa.select(sa.func.count())
                .select_from(leases_t)
                .where(
                    leases_t.c.study == study,
                    leases_t.c.state == "running",
                    leases_t.c.worker.is_not(None),
                    leases_t.c.worker != me.id,
                    leases_t.c.expires_at >= time.time(),
                )
            ).scalar()
        )


def beat_study(store, study: str, me: Worker) -> None:
    """The study row names a live worker (viewers and ``--pause`` go by it) and is running."""
    with store.engine.begin() as c:
        c.execute(
            studies_t.update()
            .where(studies_t.c.name == study, studies_t.c.status != "done")
            .values(status="running", runner_pid=me.pid, runner_host=me.host, heartbeat_at=time.time())
        )


def finish_study(store, study: str) -> bool:
    """Mark the study done; True for the one worker that did it (it announces the end)."""
    with store.engine.begin() as c:
        return (
            c.execute(
                studies_t.update().where(studies_t.c.name == study, studies_t.c.status != "done").values(status="done", runner_pid=None)
            ).rowcount
            == 1
        )


_ENDED = {"done": "idle", "released": "stopped", "lost": "idle", "expired": "presumed dead (its lease expired and was taken over)"}


def worker_status(store, study: str, now: float | None = None) -> list[dict[str, Any]]:
    """Per worker of a joined study, from its leases: host, pid, the configuration it holds and
    the point in flight, its heartbeat's age, configurations done. [] for other studies. A
    worker that holds nothing shows the age of its last claim or release instead."""
    now = time.time() if now is None else now
    leases = store.leases(study)
    if not leases:
        return []
    out: dict[str, dict[str, Any]] = {}
    for r in store.lease_log(study):  # oldest first: the last row says where a worker stands
        w = out.setdefault(
            r["worker"],
            {
                "worker": r["worker"],
                "host": r["host"],
                "pid": r["pid"],
                "configurations_done": 0,
                "trial_id": None,
                "inflight": None,
                "heartbeat_age_s": None,
                "_last": 0.0,
            },
        )
        w["configurations_done"] += r["outcome"] == "done"
        w["_last"] = max(w["_last"], r["ended_at"] or r["claimed_at"] or 0.0)
        w["state"] = _ENDED.get(r["outcome"], "running")
    left = sum(1 for r in leases if r["state"] != "done")
    for w in out.values():
        w["heartbeat_age_s"] = max(0.0, now - w.pop("_last"))
        if w["state"] in ("idle", "running"):
            w["state"] = "finished" if not left else "waiting for a configuration"
    for r in leases:
        held = out.get(r["worker"] or "")
        if r["state"] == "running" and held is not None:
            w = held
            alive = (r["expires_at"] or 0) >= now
            w.update(
                trial_id=r["trial_id"],
                inflight=r["inflight"],
                heartbeat_age_s=max(0.0, now - (r["heartbeat_at"] or now)),
                state="running" if alive else "silent (its lease expired; another worker will take the configuration over)",
            )
    return sorted(out.values(), key=lambda w: (w["host"] or "", w["pid"] or 0))
