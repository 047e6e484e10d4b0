"""The GPU and SageMaker-instance catalogs: bundled TOML, overridable by the user.

Overrides live in ``$KNEE_CATALOG`` or ``~/.config/knee/catalog.toml`` with the same
``[gpus.NAME]`` and ``[instances."ml.x"]`` tables; an entry there replaces the bundled fields
it names and may add new GPUs or instances.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from core.errors import BadInput
from core.spec.hardware import GPU, Hardware, Instance
from core.tomlfile import read_toml


def _user_catalog_path() -> Path | None:
    env = os.environ.get("KNEE_CATALOG")
    if env:
        return Path(env)
    p = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "knee" / "catalog.toml"
    return p if p.exists() else None


def _merge(base: dict, override: dict) -> dict:
    out = {k: dict(v) for k, v in base.items()}
    for name, fields in override.items():
        out.setdefault(name, {}).update(fields)
        if "price_per_hour" in fields and "price_source" not in fields:
            out[name]["price_source"] = "user override"
            out[name]["uncertain"] = [u for u in out[name].get("uncertain", []) if u != "price_per_hour"]
    return out


@lru_cache(maxsize=4)
def _load(user_path: str | None) -> tuple[dict[str, GPU], dict[str, Instance]]:
    data = resources.files("core.catalog").joinpath("data")
    gpus_raw = tomllib.loads(data.joinpath("gpus.toml").read_text())["gpus"]
    inst_raw = tomllib.loads(data.joinpath("instances.toml").read_text())["instances"]
    if user_path:
        user = read_toml(user_path, "catalog override", "fix it or unset KNEE_CATALOG")
        gpus_raw = _merge(gpus_raw, user.get("gpus", {}))
        inst_raw = _merge(inst_raw, user.get("instances", {}))
    try:
        gpus = {n: GPU(name=n, **f) for n, f in gpus_raw.items()}
        insts = {n: Instance(name=n, **f) for n, f in inst_raw.items()}
    except ValidationError as e:
        err = e.errors()[0]
        raise BadInput(f"catalog entry is invalid: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    for inst in insts.values():
        if inst.gpu not in gpus:
            raise BadInput(f"instance {inst.name} names unknown GPU {inst.gpu!r}", "add it under [gpus]")
    return gpus, insts


def catalog() -> tuple[dict[str, GPU], dict[str, Instance]]:
    p = _user_catalog_path()
    return _load(str(p) if p else None)


def gpus() -> dict[str, GPU]:
    return catalog()[0]


def instances() -> dict[str, Instance]:
    return catalog()[1]


def _norm(s: str) -> str:
    return s.lower().replace("_", "-").replace(" ", "-")


def get_gpu(name: str) -> GPU:
    table = gpus()
    wanted = _norm(name)
    for gpu in table.values():
        if wanted == _norm(gpu.name) or wanted in (_norm(a) for a in gpu.aliases):
            return gpu
    close = difflib.get_close_matches(name, list(table), n=3, cutoff=0.3)
    hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(table)}"
    raise BadInput(f"unknown GPU {name!r}", hint + " Add your own in ~/.config/knee/catalog.toml")


def get_instance(name: str) -> Instance:
    table = instances()
    key = name if name.startswith("ml.") else f"ml.{name}"
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else "see `knee catalog instances`"
    raise BadInput(f"unknown SageMaker instance type {name!r}", hint)


def instance_gpu(inst: Instance) -> GPU:
    """The GPU spec as it sits in ``inst``: without peer-to-peer where the instance has none
    (``gpu_p2p = false``: its all-reduce goes through host memory)."""
    g = get_gpu(inst.gpu)
    return g if inst.gpu_p2p else g.model_copy(update={"p2p": False})


def resolve_hardware(gpu: str | None = None, num_gpus: int | None = None, instance: str | None = None) -> Hardware:
    """Hardware from ``--instance`` or ``--gpu``/``--num-gpus``."""
    if instance:
        inst = get_instance(instance)
        if num_gpus is not None and num_gpus != inst.num_gpus:
            raise BadInput(f"{inst.name} has {inst.num_gpus} GPUs, not {num_gpus}", "drop --num-gpus")
        g = instance_gpu(inst)
        if gpu and get_gpu(gpu).name != g.name:
            raise BadInput(f"{inst.name} has {g.name} GPUs, not {gpu}", "drop --gpu")
        return Hardware(gpu=g, num_gpus=inst.num_gpus, instance=inst)
    if not gpu:
        raise BadInput("no hardware given", "pass --instance ml.g6.12xlarge or --gpu L4 --num-gpus 4")
    if num_gpus is not None and num_gpus < 1:
        raise BadInput(f"--num-gpus must be at least 1, got {num_gpus}")
    return Hardware(gpu=get_gpu(gpu), num_gpus=num_gpus or 1)
