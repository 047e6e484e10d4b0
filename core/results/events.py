"""A study's event stream: the append-only log a runner writes and viewers follow.

Part of :class:`core.results.store.StudyStore` (as :class:`EventLog`, which needs its
``engine``). Each event read back is a :class:`core.spec.events.StoredEvent`: its ``.event``
is the typed payload (the models of :mod:`core.spec.events`, where the kinds and their fields
are declared).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from core.results.codec import dumps
from core.results.follow import StudyFollower
from core.results.schema import events_t
from core.spec.events import StoredEvent


def event_from_row(r: sa.RowMapping) -> StoredEvent:
    # Any kind reads (a newer runner sharing the store may emit kinds this version has never
    # heard of): a viewer shows what it knows and never fails on the rest.
    return StoredEvent(seq=r["seq"], study=r["study"], time=r["time"], kind=r["kind"], data=json.loads(r["data"] or "{}"))


class EventLog:
    """The event-stream methods of the study store."""

    engine: sa.engine.Engine

    def emit(self, study: str, kind: str, /, **data: Any) -> int:
        with self.engine.begin() as c:
            res = c.execute(events_t.insert().values(study=study, time=time.time(), kind=kind, data=dumps(data)))
            key = res.inserted_primary_key
            assert key is not None  # a single-row INSERT into a table with a primary key
            return int(key[0])

    def events(self, study: str, after: int = 0, limit: int = 10_000, kinds: Sequence[str] | None = None) -> list[StoredEvent]:
        q = sa.select(events_t).where(events_t.c.study == study, events_t.c.seq > after)
        if kinds:
            q = q.where(events_t.c.kind.in_(list(kinds)))
        with self.engine.connect() as c:
            rows = c.execute(q.order_by(events_t.c.seq).limit(limit)).mappings().all()
        return [event_from_row(r) for r in rows]

    def follow(self, study: str, after: int = 0, poll_s: float = 0.1, stop_when_done: bool = True) -> Iterator[StoredEvent]:
        """Yield events as they are appended (tail -f on the study). With ``stop_when_done``
        it ends after the event that ends the study's last run, or once no runner works on
        it (see :meth:`core.results.follow.StudyFollower.events`)."""
        return StudyFollower(self, study, after=after).events(poll_s=poll_s, stop_when_done=stop_when_done)

    def last_event_seq(self, study: str) -> int:
        with self.engine.connect() as c:
            seq = c.execute(sa.select(sa.func.coalesce(sa.func.max(events_t.c.seq), 0)).where(events_t.c.study == study)).scalar()
        assert seq is not None  # COALESCE of an aggregate: one row, never NULL
        return int(seq)
