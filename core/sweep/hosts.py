"""Where a launch of a configuration runs: host, GPU type and count, engine and its version.

Used by every runner (``Runner._record_host``), single or joined; in its own module so that
the runner does not import the joined worker (core/sweep/workers.py), which subclasses it.
"""

from __future__ import annotations

import json
import re
import socket
from typing import Any

from core.serve import localhttp


def _knee_version() -> str:
    try:
        from importlib.metadata import version

        return version("knee")
    except Exception:
        return "unknown"


def trial_host(runner: Any, trial, server, reported: str | None = None) -> dict[str, Any]:
    """Host, GPU type and count, engine and version of a launch, where known; ``reported`` is
    what the server answered to GET /version (``reported_version``), asked once per launch."""
    spec = runner.spec
    out: dict[str, Any] = {"host": socket.gethostname(), "engine": spec.engine.kind, "simulated": spec.engine.kind == "sim"}
    if spec.engine.kind == "sim":
        hw = getattr(runner.measurer, "hardware", None)
        out.update(gpu_type=hw.gpu.name if hw else spec.gpu, gpu_count=trial.config.num_gpus, engine_version=f"knee-sim {_knee_version()}")
        return out
    gpus = runner._trial_gpus
    if gpus:
        out["gpu_count"] = len(gpus)
        try:
            import pynvml

            pynvml.nvmlInit()
            try:
                name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(gpus[0]))
                out["gpu_type"] = name.decode() if isinstance(name, bytes) else str(name)
                drv = pynvml.nvmlSystemGetDriverVersion()
                out["engine_version"] = f"driver {drv.decode() if isinstance(drv, bytes) else drv}"
            finally:
                pynvml.nvmlShutdown()
        except Exception:
            pass
    if reported:
        out["engine_version"] = f"{spec.engine.kind} {reported}" + (f", {out['engine_version']}" if out.get("engine_version") else "")
    return out


def reported_version(server) -> str | None:
    """The version a running vLLM or SGLang server reports (GET /version), else None."""
    if server is None or not getattr(server, "base_url", None):
        return None
    try:  # localhttp: core must not import httpx
        headers = {"Authorization": f"Bearer {server.api_key}"} if server.api_key else {}
        status, body = localhttp.get(server.base_url.rstrip("/") + "/version", headers=headers, timeout_s=2.0)
        v = json.loads(body).get("version") if status == 200 else None
    except Exception:  # noqa: BLE001 - an engine without the endpoint: the version stays unknown
        return None
    return str(v) if v else None


def names_release(version: str | None) -> bool:
    """Whether a reported version names a release: a source build without release tags reports
    setuptools-scm's fallback (0.1.devN, 0.0.0), which says nothing about the release."""
    return bool(version) and not re.match(r"0\.[01]\b", str(version))
