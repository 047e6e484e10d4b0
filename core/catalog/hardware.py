"""The GPU and SageMaker-instance catalogs: bundled TOML, overridable by the user.

Overrides live in ``$KNEE_CATALOG`` or ``~/.config/knee/catalog.toml`` with the same
``[gpus.NAME]`` and ``[instances."ml.x"]`` tables; an entry there replaces the bundled fields
it names and may add new GPUs or instances.

An instance's own price is for its ``price_region`` (us-east-1 unless it says otherwise); prices
for other regions sit in ``[instances."ml.x".regions.<region>]`` tables with the same price
fields, and :func:`instances_in` picks them.
"""

from __future__ import annotations

import difflib
import os
import re
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


_PRICE_FIELDS = ("price_per_hour", "price_date", "price_source", "uncertain", "notes")


def _merge(base: dict, override: dict) -> dict:
    out = {k: dict(v) for k, v in base.items()}
    for name, fields in override.items():
        # A user's [instances."ml.x".regions.R] adds to the bundled regions instead of erasing them.
        mine = {r: {"price_source": "user override", **f} for r, f in fields.get("regions", {}).items() if isinstance(f, dict)}
        regions = {**out.get(name, {}).get("regions", {}), **fields.get("regions", {}), **mine}
        out.setdefault(name, {}).update(fields)
        if regions:
            out[name]["regions"] = regions
        if "price_per_hour" in fields and "price_source" not in fields:
            out[name]["price_source"] = "user override"
            out[name]["uncertain"] = [u for u in out[name].get("uncertain", []) if u != "price_per_hour"]
    return out


@lru_cache(maxsize=4)
def _load(user_path: str | None) -> tuple[dict[str, GPU], dict[str, Instance], dict[str, dict[str, dict]]]:
    data = resources.files("core.catalog").joinpath("data")
    gpus_raw = tomllib.loads(data.joinpath("gpus.toml").read_text())["gpus"]
    inst_raw = tomllib.loads(data.joinpath("instances.toml").read_text())["instances"]
    if user_path:
        user = read_toml(user_path, "catalog override", "fix it or unset KNEE_CATALOG")
        gpus_raw = _merge(gpus_raw, user.get("gpus", {}))
        inst_raw = _merge(inst_raw, user.get("instances", {}))
    # Regional prices stay beside the Instance (its model has no field for them) until asked for.
    regional = {n: f.pop("regions", {}) for n, f in inst_raw.items()}
    for n, regions in regional.items():
        for region, fields in regions.items():
            unknown = set(fields) - set(_PRICE_FIELDS) if isinstance(fields, dict) else set()
            if not isinstance(fields, dict) or unknown:
                raise BadInput(
                    f"catalog entry {n}.regions.{region} may hold only {', '.join(_PRICE_FIELDS)}",
                    f"remove {', '.join(sorted(unknown)) or 'it'}",
                )
    try:
        gpus = {n: GPU(name=n, **f) for n, f in gpus_raw.items()}
        insts = {n: Instance(name=n, **f) for n, f in inst_raw.items()}
    except ValidationError as e:
        err = e.errors()[0]
        raise BadInput(f"catalog entry is invalid: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    for inst in insts.values():
        if inst.gpu not in gpus:
            raise BadInput(f"instance {inst.name} names unknown GPU {inst.gpu!r}", "add it under [gpus]")
    return gpus, insts, regional


def _loaded():
    p = _user_catalog_path()
    return _load(str(p) if p else None)


def catalog() -> tuple[dict[str, GPU], dict[str, Instance]]:
    return _loaded()[:2]


def instances_in(region: str | None) -> dict[str, Instance]:
    """The instances priced for ``region`` (None: as bundled). An instance without a price for
    that region is left unpriced rather than given another region's price, since regions differ
    and a wrong price silently reorders a cost ranking."""
    _, insts, regional = _loaded()
    if region is None:
        return insts
    out = {}
    for name, inst in insts.items():
        fields = regional.get(name, {}).get(region)
        if fields is not None:
            base = {**inst.model_dump(), "price_date": None, "price_source": "bundled default", "uncertain": []}
            try:
                out[name] = Instance(**{**base, **fields, "price_region": region})
            except ValidationError as e:
                err = e.errors()[0]
                raise BadInput(f"catalog entry {name}.regions.{region}.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        elif inst.price_region == region:
            out[name] = inst
        else:
            out[name] = inst.model_copy(
                update={
                    "price_per_hour": None,
                    "price_date": None,
                    "price_region": region,
                    "price_source": f"no {region} price in the catalog",
                }
            )
    return out


def regions() -> list[str]:
    """Every region the catalog has a price for, bundled default first."""
    _, insts, regional = _loaded()
    found = {i.price_region for i in insts.values() if i.price_per_hour is not None}
    found |= {r for rs in regional.values() for r in rs}
    return sorted(found, key=lambda r: (r != "us-east-1", r))


def gpus() -> dict[str, GPU]:
    return catalog()[0]


def instances() -> dict[str, Instance]:
    return catalog()[1]


def _norm(s: str) -> str:
    return s.lower().replace("_", "-").replace(" ", "-")


_VENDOR = re.compile(r"(?i)^(?:nvidia|tesla|geforce)[\s_-]+")
# The memory technology a device name ends with ("H100 80GB HBM3", "H200 141GB HBM3e"): it
# names no other part, so the name without it is looked up too.
_MEMORY_KIND = re.compile(r"(?i)[\s_-]+(?:hbm\d*e?|gddr\d*x?)$")


def _lookup(table: dict[str, GPU], name: str) -> GPU | None:
    wanted = _norm(name)
    for gpu in table.values():
        if wanted == _norm(gpu.name) or wanted in (_norm(a) for a in gpu.aliases):
            return gpu
    return None


def get_gpu(name: str) -> GPU:
    """The catalog's GPU for a name, an alias, or the device name NVML and nvidia-smi
    report ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L4"): the vendor
    prefix dropped, then, for such a device name only, its first word ("H100"); a name
    without the vendor but ending with its memory's kind ("H100 80GB HBM3") without that."""
    table = gpus()
    gpu = _lookup(table, name)
    seen, bare = name.strip(), _VENDOR.sub("", name.strip())
    while gpu is None and bare != seen:  # a device name: vendor prefixes stripped
        gpu = _lookup(table, bare) or _lookup(table, bare.split(" ")[0])
        seen, bare = bare, _VENDOR.sub("", bare)
    if gpu is None and _MEMORY_KIND.search(bare):  # "H100 80GB HBM3" without its vendor: "H100 80GB"
        gpu = _lookup(table, _MEMORY_KIND.sub("", bare))
    if gpu is not None:
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
    (``gpu_p2p = false``: its all-reduce goes through host memory), over a host path its GPUs
    share where the instance says so (``gpu_host_link_shared = true``)."""
    g = get_gpu(inst.gpu)
    return g if inst.gpu_p2p else g.model_copy(update={"p2p": False, "host_link_shared": inst.gpu_host_link_shared})


def resolve_hardware(gpu: str | None = None, num_gpus: int | None = None, instance: str | None = None, gpu_p2p: bool = True) -> Hardware:
    """Hardware from ``--instance`` or ``--gpu``/``--num-gpus``; ``gpu_p2p=False`` for a box
    whose GPUs cannot reach each other peer-to-peer (NCCL then stages every all-reduce through
    host memory, NVLink or not)."""
    hw = _resolve_hardware(gpu, num_gpus, instance)
    return hw if gpu_p2p else hw.model_copy(update={"gpu": hw.gpu.model_copy(update={"p2p": False})})


def _resolve_hardware(gpu: str | None, num_gpus: int | None, instance: str | None) -> Hardware:
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
