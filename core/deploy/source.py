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
        raise BadInput(f"{where}: unknown field(s) {', '.join(sorted(unknown))}",
                       f"known: config, {', '.join(sorted(_SOURCE_FIELDS))}")
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
