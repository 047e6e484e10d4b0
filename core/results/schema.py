"""The study store's tables (SQLAlchemy Core): studies, trials, load points, per-request
records, runner control and the event stream.

Tables only, no queries: :mod:`core.results.store` reads and writes them, and
:mod:`core.sweep.lease` works the several-workers tables of :mod:`core.results.lease_tables`,
which hang on the same :data:`metadata` so that one ``create_all`` makes them all.
"""

from __future__ import annotations

import sqlalchemy as sa

SCHEMA_VERSION = 1

metadata = sa.MetaData()  # every knee table, the lease ones included (core/results/lease_tables.py)
meta_t = sa.Table("knee_meta", metadata, sa.Column("key", sa.String(64), primary_key=True), sa.Column("value", sa.Text))
studies_t = sa.Table(
    "knee_studies",
    metadata,
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
    metadata,
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
    metadata,
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
    metadata,
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
    metadata,
    sa.Column("study", sa.String(200), primary_key=True),
    sa.Column("requested_state", sa.String(10), nullable=False),
    sa.Column("requested_at", sa.Float),
    sa.Column("requested_by", sa.String(200)),  # host:pid of whoever asked
)
RUNNER_STATES = ("run", "pause", "stop")
events_t = sa.Table(
    "knee_events",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study", sa.String(200), nullable=False, index=True),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("data", sa.Text),
)
