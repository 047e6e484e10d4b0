"""The study store: studies, trials, load points, per-request records and the event stream.

One SQLite file per workspace (``.knee/knee.db``, WAL mode, so a TUI reads while a runner
writes) or any SQLAlchemy URL (PostgreSQL lets several GPU boxes share one store).

Why knee's own tables and not Optuna's RDB storage (the design suggests Optuna; these are the
concrete reasons it does not fit as the *store*, checked against optuna 5.0.0):

- Optuna requires every trial of a study to use the same distribution for a parameter name,
  and for categoricals the same choice list. SLA-search probes (concurrencies found by
  bisection) and imported runs carry values outside any declared space, so they could not be
  stored as Optuna trials without lying about the space.
- An Optuna trial is finished once; knee's unit of launch (a server configuration) owns
  several load points that are stored one by one and resumed individually after a crash.
- Per-request records (10^3..10^5 per point) and a live event stream do not belong in trial
  attributes.

Optuna is what knee uses for model-based search where the estimator cannot help: the
adaptive strategy without predictions asks TPE for the next server configuration
(``core.sweep.strategies.AdaptiveStrategy``). The tables here are plain SQLAlchemy Core, so any database
SQLAlchemy supports works, and every write is one short transaction: killing the writer at
any moment loses at most the point in flight.

The module holds the store's queries; the tables are :mod:`core.results.schema` and
:mod:`core.results.lease_tables`, row conversion :mod:`core.results.codec`, the event stream
:mod:`core.results.events` and runner liveness :mod:`core.results.liveness`.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from core.errors import BadInput
from core.results.codec import decode_records, encode_records, encode_trial_values, point_row, point_values, study_dict, trial_row
from core.results.events import EventLog
from core.results.lease_tables import (  # noqa: F401 - lease_log_t, LeaseLost: re-exported (core.sweep.lease, workers)
    LeaseLost,
    WorkerRecords,
    lease_log_t,
    leases_t,
    point_hosts_t,
)
from core.results.liveness import RUNNER_STALE_S, runner_alive, runner_gone, study_status  # noqa: F401 - re-exported for viewers
from core.results.schema import RUNNER_STATES, SCHEMA_VERSION, control_t, meta_t, metadata, points_t, requests_t, studies_t, trials_t
from core.spec.records import RequestRecord
from core.spec.study import PointRow, SweepSpec, TrialRow, canonical_json

DEFAULT_WORKSPACE = ".knee"


def default_storage(workspace: str | os.PathLike | None = None) -> str:
    ws = Path(workspace or os.environ.get("KNEE_WORKSPACE") or DEFAULT_WORKSPACE)
    return str(ws / "knee.db")


def _is_url(s: str) -> bool:
    return "://" in s


def _redacted(url: str) -> str:
    """The URL as messages may show it: a password in it never reaches a terminal or a log."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 — not parseable as a URL: show only its scheme
        return url.split("://", 1)[0] + "://***"


def _check_sqlite_file(path: Path) -> None:
    """Refuse a file that is not a healthy SQLite database, before anything writes to it."""
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            ok = con.execute("PRAGMA quick_check(1)").fetchone()
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise BadInput(
            f"study store {path} is not a readable SQLite database ({e})",
            "it was left untouched; point --workspace or --storage elsewhere, or move the file aside",
        ) from None
    if not ok or ok[0] != "ok":
        raise BadInput(
            f"study store {path} is corrupt ({ok[0] if ok else 'no answer'})",
            "it was left untouched; restore it or point --workspace elsewhere",
        )
    if names and "knee_meta" not in names:
        raise BadInput(f"{path} is a SQLite database but not a knee study store", "point --workspace elsewhere")


def _use_wal(path: Path, wait_s: float = 30.0) -> None:
    """Put the SQLite file in WAL mode, so that readers (the TUI, knee attach) never block the
    runner's writes. Two processes that create one new file at once (two workers started
    together) both read it and then both need it exclusively; SQLite answers one of them
    "database is locked" at once, without its busy timeout (a deadlock it refuses to wait on).
    That one simply tries again."""
    deadline = time.monotonic() + wait_s
    delay = 0.02
    while True:
        con = sqlite3.connect(str(path), timeout=wait_s)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                raise BadInput(f"study store {path} cannot be opened ({e})") from None
        except sqlite3.DatabaseError as e:
            raise BadInput(f"study store {path} cannot be opened ({e})") from None
        finally:
            con.close()
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


class StudyStore(EventLog, WorkerRecords):
    """Access to one store. Thread-safe; every method is one short transaction. The event
    stream's methods come from :class:`EventLog`, the several-workers reads from
    :class:`WorkerRecords`."""

    def __init__(self, storage: str | os.PathLike | None = None, create: bool = True):
        storage = str(storage) if storage is not None else default_storage()
        self.path: Path | None = None
        if _is_url(storage):
            url = storage
            if url.startswith("sqlite:///"):
                self.path = Path(url[len("sqlite:///") :])
        else:
            self.path = Path(storage)
            url = f"sqlite:///{self.path}"
        if self.path is not None:
            _check_sqlite_file(self.path)
            if not self.path.exists():
                if not create:
                    raise BadInput(f"no study store at {self.path}", "run knee sweep first, or pass --workspace")
                self.path.parent.mkdir(parents=True, exist_ok=True)
            _use_wal(self.path)
            self.engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

            @sa.event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_con, _rec):  # noqa: ANN001
                dbapi_con.execute("PRAGMA synchronous=NORMAL")
                dbapi_con.execute("PRAGMA busy_timeout=30000")
        else:
            try:
                self.engine = sa.create_engine(url, pool_pre_ping=True)
            except ModuleNotFoundError as e:  # the URL's driver is not installed
                fix = (
                    'install the PostgreSQL driver: pip install -e ".[postgres]"'
                    if url.startswith("postgresql")
                    else f"install the Python package {e.name!r}"
                )
                raise BadInput(f"cannot use storage {_redacted(url)!r}: no module named {e.name!r}", fix) from None
            except Exception as e:  # bad URL
                raise BadInput(f"cannot use storage {_redacted(url)!r}: {e}") from None
        self.url = url
        self.shown_url = _redacted(url)
        # Two processes may create the same new store at once (a runner and a viewer): the
        # loser of that race sees "already exists" or a lock, and simply tries again.
        for attempt in range(20):
            try:
                metadata.create_all(self.engine, checkfirst=True)
                with self.engine.begin() as c:
                    row = c.execute(sa.select(meta_t.c.value).where(meta_t.c.key == "schema")).first()
                    if row is None:
                        c.execute(meta_t.insert().values(key="schema", value=str(SCHEMA_VERSION)))
                    elif int(row[0]) > SCHEMA_VERSION:
                        raise BadInput(f"study store {self.shown_url} was written by a newer knee (schema {row[0]})")
                break
            except (sa.exc.OperationalError, sa.exc.IntegrityError) as e:
                msg = str(e.orig).lower()
                if attempt < 19 and ("already exists" in msg or "locked" in msg or "unique" in msg):
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise BadInput(f"study store {self.shown_url} cannot be used: {e.orig}", "it was left untouched") from None
            except sa.exc.DatabaseError as e:
                raise BadInput(f"study store {self.shown_url} cannot be used: {e.orig}", "it was left untouched") from None

    # ---- studies --------------------------------------------------------------------------
    def create_study(self, name: str, spec: SweepSpec | None, model: str, source: str = "knee", info: dict | None = None) -> None:
        with self.engine.begin() as c:
            if c.execute(sa.select(studies_t.c.name).where(studies_t.c.name == name)).first():
                raise BadInput(f"study {name!r} already exists", "pass --resume to continue it, or --study NEW")
            c.execute(
                studies_t.insert().values(
                    name=name,
                    model=model,
                    created_at=time.time(),
                    spec=spec.model_dump_json() if spec else None,
                    status="created" if spec else "imported",
                    source=source,
                    info=json.dumps(info or {}),
                )
            )

    def study(self, name: str) -> dict[str, Any] | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(studies_t).where(studies_t.c.name == name)).mappings().first()
        return study_dict(row) if row else None

    def studies(self) -> list[dict[str, Any]]:
        with self.engine.connect() as c:
            rows = c.execute(sa.select(studies_t).order_by(studies_t.c.created_at)).mappings().all()
        return [study_dict(r) for r in rows]

    def latest_study(self) -> str | None:
        s = self.studies()
        return s[-1]["name"] if s else None

    def spec(self, name: str) -> SweepSpec:
        s = self.study(name)
        if s is None:
            raise BadInput(f"no study named {name!r} in {self.shown_url}", "see knee results --list")
        if not s["spec"]:
            raise BadInput(f"study {name!r} was imported and cannot be run")
        return SweepSpec.model_validate_json(s["spec"])

    def set_study(self, name: str, **values: Any) -> None:
        if "info" in values and isinstance(values["info"], dict):
            values["info"] = json.dumps(values["info"])
        with self.engine.begin() as c:
            c.execute(studies_t.update().where(studies_t.c.name == name).values(**values))

    def claim_runner(self, name: str) -> None:
        self.set_study(name, status="running", runner_pid=os.getpid(), runner_host=socket.gethostname(), heartbeat_at=time.time())

    def heartbeat(self, name: str) -> None:
        self.set_study(name, heartbeat_at=time.time())

    # ---- runner control -------------------------------------------------------------------
    def request_state(self, study: str, state: str) -> None:
        """Ask the study's runner to ``run`` (continue), ``pause`` or ``stop``; it reads this
        between load points (a pause) and about twice a second (a stop)."""
        if state not in RUNNER_STATES:
            raise BadInput(f"unknown runner state {state!r}", f"one of {', '.join(RUNNER_STATES)}")
        by = f"{socket.gethostname()}:{os.getpid()}"
        values = {"requested_state": state, "requested_at": time.time(), "requested_by": by}
        for _ in range(3):
            try:
                with self.engine.begin() as c:
                    if not c.execute(sa.select(studies_t.c.name).where(studies_t.c.name == study)).first():
                        raise BadInput(f"no study named {study!r} in {self.shown_url}", "see knee results --list")
                    if not c.execute(control_t.update().where(control_t.c.study == study).values(**values)).rowcount:
                        c.execute(control_t.insert().values(study=study, **values))
                return
            except sa.exc.IntegrityError:
                continue  # another process inserted the row first: the next try updates it
        raise BadInput(f"could not record the request for study {study!r}")

    def requested_state(self, study: str) -> str:
        """What the runner of ``study`` is asked to do: run (the default), pause or stop."""
        with self.engine.connect() as c:
            row = c.execute(sa.select(control_t.c.requested_state).where(control_t.c.study == study)).first()
        return row[0] if row else "run"

    # ---- trials ---------------------------------------------------------------------------
    def upsert_trial(self, study: str, trial_key: str, server_args: dict[str, Any], **values: Any) -> int:
        """The trial id of ``trial_key`` in ``study`` (created when new); updates ``values``."""
        enc = encode_trial_values(values)
        with self.engine.begin() as c:
            row = c.execute(sa.select(trials_t.c.trial_id).where(trials_t.c.study == study, trials_t.c.trial_key == trial_key)).first()
            if row:
                if enc:
                    c.execute(trials_t.update().where(trials_t.c.study == study, trials_t.c.trial_id == row[0]).values(**enc))
                return int(row[0])
            nxt = c.execute(sa.select(sa.func.coalesce(sa.func.max(trials_t.c.trial_id), -1)).where(trials_t.c.study == study)).scalar()
            assert nxt is not None  # COALESCE of an aggregate: one row, never NULL
            tid = int(nxt) + 1
            enc.setdefault("status", "pending")
            c.execute(trials_t.insert().values(study=study, trial_id=tid, trial_key=trial_key, server_args=canonical_json(server_args), **enc))
            return tid

    def update_trial(self, study: str, trial_id: int, **values: Any) -> None:
        with self.engine.begin() as c:
            c.execute(trials_t.update().where(trials_t.c.study == study, trials_t.c.trial_id == trial_id).values(**encode_trial_values(values)))

    def trials(self, study: str) -> list[TrialRow]:
        with self.engine.connect() as c:
            rows = c.execute(sa.select(trials_t).where(trials_t.c.study == study).order_by(trials_t.c.trial_id)).mappings().all()
        return [trial_row(r) for r in rows]

    def server_pids(self, study: str) -> list[tuple[int, int]]:
        """(trial_id, pid) of servers recorded as live, for cleanup after a killed runner."""
        with self.engine.connect() as c:
            rows = c.execute(
                sa.select(trials_t.c.trial_id, trials_t.c.server_pid).where(trials_t.c.study == study, trials_t.c.server_pid.is_not(None))
            ).all()
        return [(int(r[0]), int(r[1])) for r in rows]  # indexed: mypy types an unpacked Row's items as object

    # ---- points ---------------------------------------------------------------------------
    def save_point(
        self,
        point: PointRow,
        records: Sequence[RequestRecord] | None = None,
        keep_chunks: bool = True,
        worker: dict[str, Any] | None = None,
        lease: dict[str, Any] | None = None,
    ) -> None:
        """Store one finished load point (and its per-request records) in one transaction.

        ``worker`` (worker, host, pid, rerun) says who stored it. ``lease`` (worker, ttl_s) is
        for a worker of a joined study: the point is stored only while that worker still holds
        the lease on the point's configuration (renewed in the same transaction), else
        :class:`LeaseLost` and nothing is written."""
        blob = encode_records(records, keep_chunks) if records is not None else None
        values = point_values(point)
        with self.engine.begin() as c:
            if lease is not None:
                now = time.time()
                held = c.execute(
                    leases_t.update()
                    .where(leases_t.c.study == point.study, leases_t.c.trial_id == point.trial_id, leases_t.c.worker == lease["worker"])
                    .values(heartbeat_at=now, expires_at=now + float(lease["ttl_s"]), inflight=None)
                ).rowcount
                if held != 1:
                    raise LeaseLost(f"lease on trial {point.trial_id} of {point.study!r} lost")
            if worker is not None:
                c.execute(point_hosts_t.delete().where(point_hosts_t.c.study == point.study, point_hosts_t.c.point_id == point.point_id))
                c.execute(
                    point_hosts_t.insert().values(
                        study=point.study,
                        point_id=point.point_id,
                        worker=worker.get("worker"),
                        host=worker.get("host"),
                        pid=worker.get("pid"),
                        rerun=bool(worker.get("rerun")),
                    )
                )
            c.execute(points_t.delete().where(points_t.c.study == point.study, points_t.c.point_id == point.point_id))
            c.execute(requests_t.delete().where(requests_t.c.study == point.study, requests_t.c.point_id == point.point_id))
            seq = c.execute(sa.select(sa.func.coalesce(sa.func.max(points_t.c.seq), -1)).where(points_t.c.study == point.study)).scalar()
            assert seq is not None  # COALESCE of an aggregate: one row, never NULL
            c.execute(points_t.insert().values(study=point.study, point_id=point.point_id, seq=int(seq) + 1, **values))
            if blob is not None and records is not None:  # blob is set exactly when records are
                c.execute(requests_t.insert().values(study=point.study, point_id=point.point_id, n=len(records), blob=blob))

    def points(self, study: str, status: str | None = None) -> list[PointRow]:
        q = sa.select(points_t).where(points_t.c.study == study)
        if status:
            q = q.where(points_t.c.status == status)
        with self.engine.connect() as c:
            rows = c.execute(q.order_by(points_t.c.seq)).mappings().all()
        return [point_row(r) for r in rows]

    def records(self, study: str, point_id: str) -> list[dict[str, Any]]:
        """Per-request records of a point, as dicts (times in seconds from the point start)."""
        with self.engine.connect() as c:
            row = c.execute(sa.select(requests_t.c.blob).where(requests_t.c.study == study, requests_t.c.point_id == point_id)).first()
        return decode_records(row[0]) if row and row[0] else []

    def close(self) -> None:
        self.engine.dispose()
