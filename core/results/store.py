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
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sqlite3
import time
import typing
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from core.errors import BadInput
from core.spec.records import RequestRecord
from core.spec.study import Event, PointRow, SweepSpec, TrialRow, canonical_json

SCHEMA_VERSION = 1
DEFAULT_WORKSPACE = ".knee"

_md = sa.MetaData()
meta_t = sa.Table("knee_meta", _md, sa.Column("key", sa.String(64), primary_key=True), sa.Column("value", sa.Text))
studies_t = sa.Table(
    "knee_studies",
    _md,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("spec", sa.Text),  # SweepSpec JSON (None for imported studies)
    sa.Column("status", sa.String(20), nullable=False),  # created|running|done|interrupted|failed|imported
    sa.Column("source", sa.String(40), nullable=False, default="knee"),
    sa.Column("runner_pid", sa.Integer),
    sa.Column("runner_host", sa.String(200)),
    sa.Column("heartbeat_at", sa.Float),
    sa.Column("info", sa.Text),  # free JSON: hardware label, notes
)
trials_t = sa.Table(
    "knee_trials",
    _md,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("trial_id", sa.Integer, primary_key=True),
    sa.Column("trial_key", sa.Text, nullable=False),
    sa.Column("server_args", sa.Text, nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("cmd", sa.Text),
    sa.Column("log_path", sa.Text),
    sa.Column("launches", sa.Integer, default=0),
    sa.Column("gpus", sa.Text),
    sa.Column("started_at", sa.Float),
    sa.Column("ended_at", sa.Float),
    sa.Column("start_s", sa.Float),
    sa.Column("predicted", sa.Text),
    sa.Column("server_pid", sa.Integer),  # pid of the live server (process-group leader)
    sa.UniqueConstraint("study", "trial_key", name="uq_trial_key"),
)
points_t = sa.Table(
    "knee_points",
    _md,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("point_id", sa.String(40), primary_key=True),
    sa.Column("seq", sa.Integer, nullable=False),  # order of storage
    sa.Column("trial_id", sa.Integer, nullable=False),
    sa.Column("trial_key", sa.Text, nullable=False),
    sa.Column("server_args", sa.Text, nullable=False),
    sa.Column("client_args", sa.Text, nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("summary", sa.Text),
    sa.Column("telemetry", sa.Text),
    sa.Column("simulated", sa.Boolean, default=False),
    sa.Column("source", sa.String(40)),
    sa.Column("search", sa.String(20)),
    sa.Column("started_at", sa.Float),
    sa.Column("ended_at", sa.Float),
    sa.Column("gpu_seconds", sa.Float),
    sa.Column("cmd", sa.Text),
    sa.Column("meets_slo", sa.Boolean),
    sa.Column("violations", sa.Text),
)
requests_t = sa.Table(
    "knee_requests",
    _md,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("point_id", sa.String(40), primary_key=True),
    sa.Column("n", sa.Integer),
    sa.Column("blob", sa.LargeBinary),  # zlib(JSON) of columnar per-request arrays
)
# What the study's runner is asked to do: "run", "pause" (finish the load point in flight,
# then wait) or "stop" (interrupt). A row in the store rather than a signal, so a viewer on
# another machine that shares the store (any SQLAlchemy URL) can pause a runner it cannot
# signal. Its own table, so stores made before it existed gain it without a migration.
control_t = sa.Table(
    "knee_control",
    _md,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("requested_state", sa.String(10), nullable=False),
    sa.Column("requested_at", sa.Float),
    sa.Column("requested_by", sa.String(200)),  # host:pid of whoever asked
)
RUNNER_STATES = ("run", "pause", "stop")
events_t = sa.Table(
    "knee_events",
    _md,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study", sa.String(200), nullable=False, index=True),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("data", sa.Text),
)

# ---- several workers on one study (``knee sweep --join``; the logic is core/sweep/lease.py) ----
# Each table is new, so a store made before them gains them without a migration.
# One row per server configuration of a joined study: who holds it, until when. A worker
# claims a row whose holder is NULL or whose lease expired (the holder died), renews it with
# its heartbeat, and marks it done when the configuration is finished.
leases_t = sa.Table(
    "knee_leases",
    _md,
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
    _md,
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
    _md,
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
    _md,
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


# A runner beats at least every few seconds (``core.sweep.runner.BEAT_S``), also while a
# server starts or a point runs; one silent this long is taken for dead by a viewer on
# another host (the clocks of hosts that share a store are assumed to agree within seconds).
RUNNER_STALE_S = 60.0
_REUSE_SLACK_S = 5.0  # a pid whose process started this long after the last beat was reused


def _proc_stat(pid: int) -> tuple[str, float | None] | None:
    """(state letter, start time in epoch seconds at ~1 s resolution) of process ``pid``,
    where /proc tells; None elsewhere or when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)", which may hold spaces
    except (OSError, IndexError):
        return None
    try:
        ticks = int(fields[19])  # field 22, starttime
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        started = btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        started = None
    return (fields[0] if fields else "?"), started


def runner_gone(row: dict[str, Any], now: float | None = None) -> str | None:
    """Why the runner of a ``running`` study is dead, or None when it looks alive (or the
    study is not running). On the runner's host: its pid is gone, or belongs to a process
    that started after the runner's last heartbeat (a reused pid). From another host: no
    heartbeat for ``RUNNER_STALE_S``."""
    if row.get("status") != "running":
        return None
    pid, host, beat = row.get("runner_pid"), row.get("runner_host"), row.get("heartbeat_at")
    who = f"runner pid {pid} on {host}"
    if not pid:
        return "no runner recorded"
    if host == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"{who} is gone"
        except PermissionError:
            pass  # someone else's process: exists
        st = _proc_stat(pid)
        if st is not None:
            state, started = st
            # Killed but not yet reaped (its parent, e.g. the app that started it, has not
            # waited for it): a zombie answers kill(pid, 0) but runs nothing.
            if state in ("Z", "X", "x"):
                return f"{who} is gone"
            if started is not None and beat and started > beat + _REUSE_SLACK_S:
                return f"{who} is gone (the pid now belongs to another process)"
        return None
    age = (now if now is not None else time.time()) - (beat or 0)
    if age >= RUNNER_STALE_S:
        return f"{who} has not written a heartbeat for {age:.0f} s" if beat else f"{who} never wrote a heartbeat"
    return None


def runner_alive(row: dict[str, Any], now: float | None = None) -> bool:
    """Whether the study's runner looks alive (see :func:`runner_gone`)."""
    return row.get("status") == "running" and bool(row.get("runner_pid")) and runner_gone(row, now) is None


def study_status(row: dict[str, Any], now: float | None = None) -> str:
    """The status a viewer shows: the stored one, except that a ``running`` study whose
    runner died without a word (SIGKILL, power loss) is ``interrupted``; viewers never
    write, so the row keeps ``running`` until a resume claims the study."""
    status = row.get("status") or "unknown"
    if status == "running" and runner_gone(row, now) is not None:
        return "interrupted"
    return status


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


class StudyStore:
    """Access to one store. Thread-safe; every method is one short transaction."""

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
            # WAL: readers (the TUI, knee attach) never block the runner's writes.
            con = sqlite3.connect(str(self.path), timeout=30)
            try:
                con.execute("PRAGMA journal_mode=WAL")
            except sqlite3.DatabaseError as e:
                raise BadInput(f"study store {self.path} cannot be opened ({e})") from None
            finally:
                con.close()
            self.engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

            @sa.event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_con, _rec):  # noqa: ANN001
                dbapi_con.execute("PRAGMA synchronous=NORMAL")
                dbapi_con.execute("PRAGMA busy_timeout=30000")
        else:
            try:
                self.engine = sa.create_engine(url, pool_pre_ping=True)
            except ModuleNotFoundError as e:  # the URL's driver is not installed
                fix = ('install the PostgreSQL driver: pip install -e ".[postgres]"' if url.startswith("postgresql")
                       else f"install the Python package {e.name!r}")
                raise BadInput(f"cannot use storage {_redacted(url)!r}: no module named {e.name!r}", fix) from None
            except Exception as e:  # bad URL
                raise BadInput(f"cannot use storage {_redacted(url)!r}: {e}") from None
        self.url = url
        self.shown_url = _redacted(url)
        # Two processes may create the same new store at once (a runner and a viewer): the
        # loser of that race sees "already exists" or a lock, and simply tries again.
        for attempt in range(20):
            try:
                _md.create_all(self.engine, checkfirst=True)
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
        return self._study_dict(row) if row else None

    @staticmethod
    def _study_dict(row) -> dict[str, Any]:
        d = dict(row)
        d["info"] = json.loads(d["info"] or "{}")
        return d

    def studies(self) -> list[dict[str, Any]]:
        with self.engine.connect() as c:
            rows = c.execute(sa.select(studies_t).order_by(studies_t.c.created_at)).mappings().all()
        return [self._study_dict(r) for r in rows]

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
        enc = _encode_trial_values(values)
        with self.engine.begin() as c:
            row = c.execute(
                sa.select(trials_t.c.trial_id).where(trials_t.c.study == study, trials_t.c.trial_key == trial_key)
            ).first()
            if row:
                if enc:
                    c.execute(trials_t.update().where(trials_t.c.study == study, trials_t.c.trial_id == row[0]).values(**enc))
                return int(row[0])
            nxt = c.execute(sa.select(sa.func.coalesce(sa.func.max(trials_t.c.trial_id), -1)).where(trials_t.c.study == study)).scalar()
            tid = int(nxt) + 1
            enc.setdefault("status", "pending")
            c.execute(
                trials_t.insert().values(
                    study=study, trial_id=tid, trial_key=trial_key, server_args=canonical_json(server_args), **enc
                )
            )
            return tid

    def update_trial(self, study: str, trial_id: int, **values: Any) -> None:
        with self.engine.begin() as c:
            c.execute(
                trials_t.update()
                .where(trials_t.c.study == study, trials_t.c.trial_id == trial_id)
                .values(**_encode_trial_values(values))
            )

    def trials(self, study: str) -> list[TrialRow]:
        with self.engine.connect() as c:
            rows = c.execute(
                sa.select(trials_t).where(trials_t.c.study == study).order_by(trials_t.c.trial_id)
            ).mappings().all()
        out = []
        for r in rows:
            d = dict(r)
            d.pop("server_pid", None)
            d["server_args"] = json.loads(d["server_args"])
            d["gpus"] = json.loads(d["gpus"]) if d["gpus"] else None
            d["predicted"] = json.loads(d["predicted"]) if d["predicted"] else None
            d["launches"] = d["launches"] or 0
            out.append(TrialRow(**d))
        return out

    def server_pids(self, study: str) -> list[tuple[int, int]]:
        """(trial_id, pid) of servers recorded as live, for cleanup after a killed runner."""
        with self.engine.connect() as c:
            rows = c.execute(
                sa.select(trials_t.c.trial_id, trials_t.c.server_pid).where(
                    trials_t.c.study == study, trials_t.c.server_pid.is_not(None)
                )
            ).all()
        return [(int(a), int(b)) for a, b in rows]

    # ---- points ---------------------------------------------------------------------------
    def save_point(self, point: PointRow, records: Sequence[RequestRecord] | None = None, keep_chunks: bool = True,
                   worker: dict[str, Any] | None = None, lease: dict[str, Any] | None = None) -> None:
        """Store one finished load point (and its per-request records) in one transaction.

        ``worker`` (worker, host, pid, rerun) says who stored it. ``lease`` (worker, ttl_s) is
        for a worker of a joined study: the point is stored only while that worker still holds
        the lease on the point's configuration (renewed in the same transaction), else
        :class:`LeaseLost` and nothing is written."""
        blob = encode_records(records, keep_chunks) if records is not None else None
        values = dict(
            trial_id=point.trial_id,
            trial_key=point.trial_key,
            server_args=canonical_json(point.server_args),
            client_args=canonical_json(point.client_args),
            status=point.status,
            reason=point.reason,
            summary=_dumps(point.summary),
            telemetry=_dumps(point.telemetry),
            simulated=point.simulated,
            source=point.source,
            search=point.search,
            started_at=point.started_at,
            ended_at=point.ended_at,
            gpu_seconds=point.gpu_seconds,
            cmd=point.cmd,
            meets_slo=point.meets_slo,
            violations=json.dumps(point.violations),
        )
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
                c.execute(point_hosts_t.insert().values(
                    study=point.study, point_id=point.point_id, worker=worker.get("worker"), host=worker.get("host"),
                    pid=worker.get("pid"), rerun=bool(worker.get("rerun"))))
            c.execute(points_t.delete().where(points_t.c.study == point.study, points_t.c.point_id == point.point_id))
            c.execute(requests_t.delete().where(requests_t.c.study == point.study, requests_t.c.point_id == point.point_id))
            seq = c.execute(sa.select(sa.func.coalesce(sa.func.max(points_t.c.seq), -1)).where(points_t.c.study == point.study)).scalar()
            c.execute(points_t.insert().values(study=point.study, point_id=point.point_id, seq=int(seq) + 1, **values))
            if blob is not None:
                c.execute(requests_t.insert().values(study=point.study, point_id=point.point_id, n=len(records), blob=blob))

    def points(self, study: str, status: str | None = None) -> list[PointRow]:
        q = sa.select(points_t).where(points_t.c.study == study)
        if status:
            q = q.where(points_t.c.status == status)
        with self.engine.connect() as c:
            rows = c.execute(q.order_by(points_t.c.seq)).mappings().all()
        out = []
        for r in rows:
            d = dict(r)
            d.pop("seq")
            for k in ("server_args", "client_args", "summary", "telemetry"):
                d[k] = json.loads(d[k]) if d[k] else {}
            d["violations"] = json.loads(d["violations"]) if d["violations"] else []
            d["gpu_seconds"] = d["gpu_seconds"] or 0.0
            d["simulated"] = bool(d["simulated"])
            d["summary"] = {k: (float("nan") if v is None else v) for k, v in d["summary"].items()}
            out.append(PointRow(**d))
        return out

    def records(self, study: str, point_id: str) -> list[dict[str, Any]]:
        """Per-request records of a point, as dicts (times in seconds from the point start)."""
        with self.engine.connect() as c:
            row = c.execute(
                sa.select(requests_t.c.blob).where(requests_t.c.study == study, requests_t.c.point_id == point_id)
            ).first()
        return decode_records(row[0]) if row and row[0] else []

    # ---- who ran what (several workers; core/sweep/lease.py) -----------------------------
    def point_hosts(self, study: str) -> dict[str, dict[str, Any]]:
        """point_id -> {worker, host, pid, rerun} for the points whose storer was recorded."""
        with self.engine.connect() as c:
            rows = c.execute(sa.select(point_hosts_t).where(point_hosts_t.c.study == study)).mappings().all()
        return {r["point_id"]: {k: r[k] for k in ("worker", "host", "pid")} | {"rerun": bool(r["rerun"])} for r in rows}

    def record_trial_host(self, study: str, trial_id: int, worker: str, **values: Any) -> None:
        """Where a launch of ``trial_id`` ran (host, gpu_type, gpu_count, engine, engine_version, simulated)."""
        with self.engine.begin() as c:
            c.execute(trial_hosts_t.delete().where(trial_hosts_t.c.study == study, trial_hosts_t.c.trial_id == trial_id, trial_hosts_t.c.worker == worker))
            c.execute(trial_hosts_t.insert().values(study=study, trial_id=trial_id, worker=worker, recorded_at=time.time(), **values))

    def trial_hosts(self, study: str) -> list[dict[str, Any]]:
        with self.engine.connect() as c:
            rows = c.execute(sa.select(trial_hosts_t).where(trial_hosts_t.c.study == study).order_by(trial_hosts_t.c.trial_id, trial_hosts_t.c.recorded_at)).mappings().all()
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

    # ---- events ---------------------------------------------------------------------------
    def emit(self, study: str, kind: str, /, **data: Any) -> int:
        with self.engine.begin() as c:
            res = c.execute(events_t.insert().values(study=study, time=time.time(), kind=kind, data=_dumps(data)))
            return int(res.inserted_primary_key[0])

    def events(self, study: str, after: int = 0, limit: int = 10_000, kinds: Sequence[str] | None = None) -> list[Event]:
        q = sa.select(events_t).where(events_t.c.study == study, events_t.c.seq > after)
        if kinds:
            q = q.where(events_t.c.kind.in_(list(kinds)))
        with self.engine.connect() as c:
            rows = c.execute(q.order_by(events_t.c.seq).limit(limit)).mappings().all()
        return [_event(r) for r in rows]

    def follow(self, study: str, after: int = 0, poll_s: float = 0.1, stop_when_done: bool = True) -> Iterator[Event]:
        """Yield events as they are appended (tail -f on the study). Ends after a
        ``study_done``/``study_interrupted`` event when ``stop_when_done``."""
        while True:
            batch = self.events(study, after=after)
            for ev in batch:
                after = ev.seq
                yield ev
                if stop_when_done and ev.kind in ("study_done", "study_interrupted"):
                    return
            if not batch:
                time.sleep(poll_s)

    def last_event_seq(self, study: str) -> int:
        with self.engine.connect() as c:
            return int(c.execute(sa.select(sa.func.coalesce(sa.func.max(events_t.c.seq), 0)).where(events_t.c.study == study)).scalar())

    def close(self) -> None:
        self.engine.dispose()


# Kinds the Event model lists. A newer runner sharing the store may emit kinds this version
# has never heard of: a viewer shows what it knows and must never fail on the rest.
_EVENT_KINDS = frozenset(typing.get_args(Event.model_fields["kind"].annotation))


def _event(r) -> Event:
    fields = {"seq": r["seq"], "study": r["study"], "time": r["time"], "kind": r["kind"], "data": json.loads(r["data"] or "{}")}
    return Event(**fields) if r["kind"] in _EVENT_KINDS else Event.model_construct(**fields)


def _encode_trial_values(values: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    for k in ("gpus", "predicted"):
        if k in out and out[k] is not None and not isinstance(out[k], str):
            out[k] = _dumps(out[k])
    return out


def _clean(o: Any) -> Any:
    if isinstance(o, float) and (o != o or o in (float("inf"), float("-inf"))):
        return None  # JSON has no NaN/inf; read back as NaN (summaries) or null
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.generic):
        return _clean(o.item())
    return o


def _dumps(o: Any) -> str:
    return json.dumps(_clean(o), default=str, allow_nan=False)


# ---- per-request records: columnar, compressed --------------------------------------------
def encode_records(records: Sequence[RequestRecord], keep_chunks: bool = True) -> bytes:
    cols: dict[str, list] = {k: [] for k in ("index", "send", "sched", "isl", "osl", "ttft", "e2e", "end", "error", "status", "osl_usage")}
    chunks: list[str] = []
    for r in records:
        cols["index"].append(r.index)
        cols["send"].append(r.send_time)
        cols["sched"].append(r.scheduled_time)
        cols["isl"].append(r.input_tokens)
        cols["osl"].append(r.output_tokens)
        # chunk_times may be a list or a numpy array (the simulator's); never test its truth.
        n_chunks = len(r.chunk_times)
        cols["ttft"].append(float(r.chunk_times[0]) - r.send_time if n_chunks else None)
        cols["e2e"].append(None if r.end_time is None else r.end_time - r.send_time)
        cols["end"].append(r.end_time)
        cols["error"].append(r.error)
        cols["status"].append(getattr(r, "status", None))
        cols["osl_usage"].append(getattr(r, "output_tokens_usage", None))
        if keep_chunks:
            # Offsets from send in float32 seconds (µs resolution over hours), base64: raw
            # t_chunk lists stay recomputable (metrics.md) at ~4 bytes a chunk.
            ct = np.asarray(r.chunk_times, dtype=np.float64) - r.send_time
            chunks.append(base64.b64encode(ct.astype(np.float32).tobytes()).decode())
    if keep_chunks:
        cols["chunk_offsets_f32"] = chunks
    return zlib.compress(_dumps(cols).encode(), 6)


def decode_records(blob: bytes) -> list[dict[str, Any]]:
    cols = json.loads(zlib.decompress(blob))
    n = len(cols["index"])
    out = []
    chunks = cols.get("chunk_offsets_f32")
    for i in range(n):
        d = {k: cols[k][i] for k in cols if k != "chunk_offsets_f32"}
        if chunks is not None:
            d["chunk_offsets"] = np.frombuffer(base64.b64decode(chunks[i]), dtype=np.float32).astype(float).tolist()
        out.append(d)
    return out
