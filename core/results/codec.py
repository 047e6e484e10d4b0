"""Row <-> record conversion for the study store: JSON columns, trial and point rows, and the
columnar, compressed per-request records.

Pure functions with no database access, so the store's queries (:mod:`core.results.store`)
read as queries and each encoding rule lives once.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from core.spec.records import RequestRecord
from core.spec.study import PointRow, TrialRow, canonical_json

if TYPE_CHECKING:  # rows as the store's queries return them; this module never touches the database
    from sqlalchemy import RowMapping


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


def dumps(o: Any) -> str:
    """JSON for a text column: NaN and inf become null, numpy scalars plain numbers."""
    return json.dumps(_clean(o), default=str, allow_nan=False)


# ---- studies ------------------------------------------------------------------------------
def study_dict(row: RowMapping) -> dict[str, Any]:
    d = dict(row)
    d["info"] = json.loads(d["info"] or "{}")
    return d


# ---- trials -------------------------------------------------------------------------------
def encode_trial_values(values: dict[str, Any]) -> dict[str, Any]:
    """Column values for a trial update: ``gpus`` and ``predicted`` as JSON text."""
    out = dict(values)
    for k in ("gpus", "predicted"):
        if k in out and out[k] is not None and not isinstance(out[k], str):
            out[k] = dumps(out[k])
    return out


def trial_row(row: RowMapping) -> TrialRow:
    d = dict(row)
    d.pop("server_pid", None)  # bookkeeping for stale-server cleanup, not part of a trial
    d["server_args"] = json.loads(d["server_args"])
    d["gpus"] = json.loads(d["gpus"]) if d["gpus"] else None
    d["predicted"] = json.loads(d["predicted"]) if d["predicted"] else None
    d["launches"] = d["launches"] or 0
    return TrialRow(**d)


# ---- load points --------------------------------------------------------------------------
def point_values(point: PointRow) -> dict[str, Any]:
    """Column values of a point, less its keys (study, point_id) and storage order (seq)."""
    return dict(
        trial_id=point.trial_id,
        trial_key=point.trial_key,
        server_args=canonical_json(point.server_args),
        client_args=canonical_json(point.client_args),
        status=point.status,
        reason=point.reason,
        summary=dumps(point.summary),
        telemetry=dumps(point.telemetry),
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


def point_row(row: RowMapping) -> PointRow:
    d = dict(row)
    d.pop("seq")
    for k in ("server_args", "client_args", "summary", "telemetry"):
        d[k] = json.loads(d[k]) if d[k] else {}
    d["violations"] = json.loads(d["violations"]) if d["violations"] else []
    d["gpu_seconds"] = d["gpu_seconds"] or 0.0
    d["simulated"] = bool(d["simulated"])
    d["summary"] = {k: (float("nan") if v is None else v) for k, v in d["summary"].items()}
    return PointRow(**d)


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
    return zlib.compress(dumps(cols).encode(), 6)


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
