"""What a deployment starts from: one server configuration and what it was measured to do.

The study store (``core/results``) is where trials live. Deploy needs only a small slice of a
trial, captured here as :class:`DeploySource`, so this package does not depend on the
store's schema: the store (or a JSON file, or command-line flags) produces a
``DeploySource`` and everything downstream works from that.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import BadInput
from core.spec.serving import ServerConfig


class DeploySource(BaseModel):
    """One measured (or simulated) configuration, as deploy needs it.

    Throughputs are per *replica*: one server launched with ``config`` (``config.tp ×
    config.dp`` GPUs), at the load point the user chose as the operating point (typically
    the highest load that met the SLOs)."""

    model_config = ConfigDict(frozen=True)

    config: ServerConfig
    gpu: str | None = None  # GPU model the trial ran on ("L4"); None if unknown
    num_gpus: int | None = Field(default=None, ge=1)  # GPUs the replica used
    request_throughput: float | None = Field(default=None, gt=0)  # req/s per replica
    output_throughput: float | None = Field(default=None, gt=0)  # output tok/s per replica
    simulated: bool = False
    trial_id: str | None = None
    study: str | None = None
    note: str = ""  # e.g. "c=32, meets e2e:p99<60s"

    @property
    def label(self) -> str:
        where = f" on {self.num_gpus or self.config.num_gpus}x {self.gpu}" if self.gpu else ""
        kind = "simulated" if self.simulated else "measured"
        tid = f"trial {self.trial_id}" if self.trial_id else "configuration"
        return f"{tid} ({kind}{where})"


def from_json_file(path: str | Path) -> DeploySource:
    """Read a :class:`DeploySource` from JSON. Besides the model's own layout, accept a flat
    object whose server knobs sit at the top level next to ``gpu`` and the throughputs, as
    hand-written files tend to be."""
    p = Path(path).expanduser()
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise BadInput(f"{p} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{p} is not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise BadInput(f"{p} does not hold a JSON object")
    return from_dict(raw, where=str(p))


_SOURCE_FIELDS = set(DeploySource.model_fields) - {"config"}


def from_dict(raw: dict[str, Any], where: str = "input") -> DeploySource:
    data = dict(raw)
    if "config" not in data:
        cfg = {k: data.pop(k) for k in list(data) if k in ServerConfig.model_fields}
        data["config"] = cfg
    unknown = set(data) - _SOURCE_FIELDS - {"config"}
    if unknown:
        raise BadInput(f"{where}: unknown field(s) {', '.join(sorted(unknown))}", f"known: config, {', '.join(sorted(_SOURCE_FIELDS))}")
    try:
        return DeploySource.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise BadInput(f"{where}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


class TrialStore(Protocol):
    """What deploy needs from the study store: one call that turns a trial id into a
    :class:`DeploySource` (its server config, the hardware it ran on and its throughput at
    the chosen operating point), raising ``BadInput`` for an unknown id."""

    def deploy_source(self, trial_id: str) -> DeploySource: ...


def from_trial(store: TrialStore, trial_id: str) -> DeploySource:
    src = store.deploy_source(trial_id)
    if not isinstance(src, DeploySource):  # a store returning a dict is accepted too
        src = from_dict(dict(src), where=f"trial {trial_id}")
    return src


def from_study(store: Any, trial_id: str | int, study: str | None = None, to_config: Any = None) -> DeploySource:
    """A :class:`DeploySource` from the study store's rows, by duck typing (``store.spec``,
    ``store.trials``, ``store.points``, ``store.latest_study``) so that this package does
    not pin the store's schema. The operating point is the trial's best load point by
    request throughput among those that met the SLOs (all ok points when none did).
    ``to_config(model, server_args)`` defaults to the sweep's own mapping."""
    if to_config is None:
        from core.spec.server_args import server_config as to_config

    study = study or store.latest_study()
    if not study:
        raise BadInput("the study store has no studies", "run a sweep first, or pass --from-json")
    try:
        tid = int(trial_id)
    except (TypeError, ValueError):
        raise BadInput(f"trial id must be a number, got {trial_id!r}") from None
    trial = next((t for t in store.trials(study) if t.trial_id == tid), None)
    if trial is None:
        raise BadInput(f"no trial {tid} in study {study!r}", "see `knee results`")
    spec = store.spec(study)
    points = [p for p in store.points(study) if p.trial_id == tid and p.status == "ok"]
    good = [p for p in points if p.meets_slo]
    pool = good or points
    best = max(pool, key=lambda p: p.summary.get("request_throughput") or 0.0, default=None)
    cfg = to_config(spec.model, trial.server_args)
    gpu = spec.gpu
    if spec.instance:
        from core.catalog import get_instance

        gpu = get_instance(spec.instance).gpu
    note = ""
    if best is not None:
        load = ", ".join(f"{k}={v}" for k, v in sorted(best.client_args.items()))
        note = f"at {load}" + ("" if best.meets_slo is None else (", meets the SLOs" if best.meets_slo else ", misses the SLOs"))
    s = best.summary if best is not None else {}
    return DeploySource(
        config=cfg,
        gpu=gpu,
        num_gpus=cfg.num_gpus,
        request_throughput=s.get("request_throughput") or None,
        output_throughput=s.get("output_throughput") or None,
        simulated=bool(best.simulated) if best is not None else False,
        trial_id=str(tid),
        study=study,
        note=note,
    )
