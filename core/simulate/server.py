"""A loopback OpenAI-compatible server that plays the simulation in real time.

    python -m core.simulate.server --model Qwen/Qwen3-4B --instance ml.g6.12xlarge --tp 1 --port 8000

It serves what the sweep and the load client talk to on a real vLLM, so the live monitor,
the HTTP client and telemetry can be shown and tested with no GPU:

- ``POST /v1/completions`` and ``POST /v1/chat/completions``, streamed (SSE, vLLM's chunk
  shapes, ``stream_options.include_usage``) or not; ``max_tokens`` tokens are generated
  (as with ``ignore_eos``); prompt + max_tokens over ``max_model_len`` is HTTP 400;
- ``GET /health``, ``GET /v1/models``, ``POST /reset_prefix_cache``; ``GET /version``, the
  release given as ``--engine-version`` (404 without one);
- ``GET /metrics``: Prometheus text with vLLM's names (``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``, token and request counters)
  plus ``knee:simulated 1``.

Every response says it is simulated: the ``x-knee-simulated: true`` header, ``"simulated":
true`` in each JSON body, and ``owned_by: knee-sim`` in the model list.

The engine played in real time is :mod:`core.simulate.live`; the routes,
:mod:`core.simulate.http_api`; this module is the command line.

Bound to 127.0.0.1 only. ``--api-key`` (or ``VLLM_API_KEY``) requires ``Authorization:
Bearer KEY`` on the /v1 routes, as vLLM does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from aiohttp import web

from core.errors import BadInput, KneeError
from core.simulate.feasibility import InfeasibleConfig

# The tests and callers import the server's parts from here too.
from core.simulate.http_api import build_app, chat_text, prompt_tokens
from core.simulate.live import LiveSim
from core.spec.serving import ServerConfig

__all__ = ["LiveSim", "build_app", "chat_text", "main", "prompt_tokens"]

LOCALHOST = ("127.0.0.1", "localhost")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m core.simulate.server", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--instance", default=None, help="SageMaker instance type, e.g. ml.g6.12xlarge")
    p.add_argument("--gpu", default=None)
    p.add_argument("--num-gpus", type=int, default=None)
    p.add_argument("--no-gpu-p2p", action="store_true", help="the GPUs cannot reach each other peer-to-peer (all-reduce through host memory)")
    p.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=int, default=1)
    p.add_argument("--dp", "--data-parallel-size", dest="dp", type=int, default=1)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--quantization", default=None)
    p.add_argument("--dtype", default=None, help="accepted for vLLM compatibility; the model's precision decides")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--enable-prefix-caching", dest="prefix", action="store_true", default=True)
    p.add_argument("--no-enable-prefix-caching", dest="prefix", action="store_false")
    p.add_argument("--engine", default="vllm", help="engine profile of the cost model (vllm, sglang, tensorrt-llm)")
    p.add_argument("--engine-version", default=None)
    p.add_argument("--router", default="least-loaded", choices=("least-loaded", "round-robin"))
    p.add_argument("--scale", type=float, default=1.0, help="virtual seconds per wall second (10 = ten times faster)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY"))
    return p


def _extra_args(unknown: list[str]) -> dict:
    """vLLM arguments this server has no flag for (``--name=value`` or ``--name value``),
    kept in ``extra_args`` so the scheduler can honour those it models (num_scheduler_steps,
    enable_chunked_prefill) and the rest are ignored, as a sweep may pass anything."""
    out: dict = {}
    i = 0
    while i < len(unknown):
        tok = unknown[i]
        if tok.startswith("--"):
            name = tok[2:]
            if "=" in name:
                name, val = name.split("=", 1)
            elif i + 1 < len(unknown) and not unknown[i + 1].startswith("--"):
                val = unknown[i + 1]
                i += 1
            else:
                val = "true"
            out[name.replace("-", "_")] = val
        i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    from core.catalog import load_model, resolve_hardware

    args, unknown = _parser().parse_known_args(argv)
    try:
        if args.host not in LOCALHOST:
            raise BadInput(f"the simulated server binds to 127.0.0.1 only, not {args.host}")
        hw = resolve_hardware(gpu=args.gpu, num_gpus=args.num_gpus, instance=args.instance, gpu_p2p=not args.no_gpu_p2p)
        arch = load_model(args.model)
        config = ServerConfig(
            model=args.model,
            tp=args.tp,
            dp=args.dp,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization,
            quantization=args.quantization,
            kv_cache_dtype=args.kv_cache_dtype,
            enable_prefix_caching=args.prefix,
            extra_args=_extra_args(unknown),
        )

        async def run() -> None:
            sim = LiveSim(arch, hw, config, engine=args.engine, engine_version=args.engine_version, scale=args.scale, router=args.router)
            app = build_app(sim, args.served_model_name or args.model, args.api_key)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", args.port)
            await site.start()
            # What vLLM's custom all-reduce logs at start (core/serve/startup_log.py reads the
            # second): more than two GPUs without NVLink stop it before its peer-to-peer test.
            if config.tp > 2 and not hw.gpu.nvlink:
                print("WARNING (simulated) Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs.", flush=True)
            elif config.tp > 1 and not hw.gpu.p2p:
                print(
                    "WARNING (simulated) Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. "
                    "To silence this warning, specify disable_custom_all_reduce=True explicitly.",
                    flush=True,
                )
            print(
                f"knee simulated server (every number simulated): {args.model} on {hw.label}, TP{config.tp} x DP{config.dp}, "
                f"KV {sim.memory.kv_tokens} tokens/replica, scale {args.scale:g}x, http://127.0.0.1:{args.port}",
                flush=True,
            )
            try:
                await asyncio.Event().wait()
            finally:
                await runner.cleanup()

        asyncio.run(run())
    except InfeasibleConfig as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KneeError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
