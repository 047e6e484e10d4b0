"""``disable_ignore_eos`` in a sweep's client args: the load client lets the model stop (no
``ignore_eos`` in the request), and the predictions read ShareGPT answers at EOS."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from aiohttp import web

from core.catalog import load_model, resolve_hardware
from core.simulate.server import LiveSim, build_app
from core.spec.serving import ServerConfig
from core.spec.study import SweepSpec
from core.sweep.measure import HttpMeasurer, PointContext
from core.sweep.space import load_of

MODEL = "Qwen/Qwen3-4B"


def test_disable_ignore_eos_reads_sharegpt_answers_at_eos():
    spec = SweepSpec(model=MODEL)
    at_eos, _ = load_of({"dataset_name": "sharegpt", "max_concurrency": 8, "disable_ignore_eos": True}, spec)
    replies, _ = load_of({"dataset_name": "sharegpt", "max_concurrency": 8}, spec)
    assert (at_eos.ignore_eos, replies.ignore_eos) == (False, True)
    assert at_eos.output.mean == pytest.approx(replies.output.mean, rel=0.01)
    assert max(at_eos.output.values) < 0.6 * max(replies.output.values)


async def _bodies_sent(client_args: dict) -> list[dict]:
    """The request bodies one point of ``client_args`` sends to the loopback simulated server."""
    bodies: list[dict] = []

    @web.middleware
    async def record(request, handler):
        if request.method == "POST":
            bodies.append(json.loads(await request.read()))
        return await handler(request)

    arch = load_model(MODEL)
    cfg = ServerConfig(model=MODEL, tp=4, max_model_len=4096)
    app = build_app(LiveSim(arch, resolve_hardware(instance="ml.g6.12xlarge"), cfg, scale=20.0), MODEL)
    app.middlewares.append(record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        wl, load = load_of(client_args, SweepSpec(model=MODEL))
        ctx = PointContext(model=MODEL, config=cfg, workload=wl, load=load, base_url=f"http://127.0.0.1:{port}", tokenizer="words")
        m = await asyncio.to_thread(HttpMeasurer().measure, ctx, lambda _p: None)
    finally:
        await runner.cleanup()
    assert len(m.records) == client_args["num_prompts"] and all(r.ok for r in m.records)
    return bodies


async def test_the_load_client_sends_ignore_eos_unless_the_sweep_disables_it():
    args = {"dataset_name": "random", "random_input_len": 32, "random_output_len": 8, "num_prompts": 3, "max_concurrency": 3}
    default = await _bodies_sent(args)
    disabled = await _bodies_sent({**args, "disable_ignore_eos": True})
    # the point's three requests, and any probe the client sends first
    assert len(default) >= 3 and len(disabled) >= 3
    assert all(b.get("ignore_eos") is True for b in default)
    assert all("ignore_eos" not in b for b in disabled)
