"""Results: the study store, Pareto/knee/best, exports and imports.

For the deploy step, :func:`recommend` gives the chosen configuration as a
:class:`core.spec.ServerConfig` with the measured point it was chosen by.
"""

from __future__ import annotations

from typing import Any

from core.results.analysis import best, knee, pareto
from core.results.store import StudyStore, default_storage


def recommend(
    store: StudyStore, study: str, objective: str | None = None, constraints: str | None = None, point_id: str | None = None
) -> tuple[Any, Any] | None:
    """(ServerConfig, PointRow) of the best point under the study's SLOs (or of ``point_id``);
    None when no point meets them. ``PointRow.summary`` holds the measured metrics
    (``output_throughput``, ``p99_e2el_ms``, ...), ``PointRow.client_args`` the load it
    was measured at, ``PointRow.simulated`` whether the numbers came from the simulator."""
    from core.results.io import study_meta
    from core.spec.slo import parse_constraints
    from core.spec.server_args import server_config

    row = store.study(study)
    if row is None:
        from core.errors import BadInput

        raise BadInput(f"no study named {study!r}")
    points = store.points(study)
    if point_id is not None:
        chosen = next((p for p in points if p.point_id == point_id), None)
    else:
        meta = study_meta(store, study)
        if objective is None and row.get("spec"):
            from core.spec.study import SweepSpec

            objective = SweepSpec.model_validate_json(row["spec"]).objective
        slo = parse_constraints(constraints if constraints is not None else meta.get("constraints"))
        chosen = best(points, objective or "throughput", slo, (row.get("info") or {}).get("price_per_gpu_hour"))
    if chosen is None:
        return None
    return server_config(row["model"], chosen.server_args), chosen


__all__ = ["StudyStore", "default_storage", "pareto", "knee", "best", "recommend"]
