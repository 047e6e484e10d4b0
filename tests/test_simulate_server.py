"""The loopback OpenAI-compatible server that plays the simulation in real time."""

import asyncio
import json
import socket
import subprocess
import sys
import time

import aiohttp
import pytest
from aiohttp import web

from core.catalog import load_model, resolve_hardware
from core.errors import BadInput
from core.simulate.http_api import WORDS
from core.simulate.server import LiveSim, _extra_args, build_app, chat_text, main, prompt_tokens
from core.spec.serving import ServerConfig

MODEL = "Qwen/Qwen3-4B"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def server():
    """A simulated TP4 Qwen3-4B on 4x L4, played 20x faster than real time."""
    arch = load_model(MODEL)
    hw = resolve_hardware(instance="ml.g6.12xlarge")
    sim = LiveSim(arch, hw, ServerConfig(model=MODEL, tp=4, max_model_len=4096), scale=20.0)
    app = build_app(sim, MODEL, api_key="k3y")
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer k3y"}) as session:
        yield sim, f"http://127.0.0.1:{port}", session
    await runner.cleanup()


async def read_sse(resp):
    """(parsed data messages, arrival times) of an SSE response, until [DONE]."""
    msgs, times, buf = [], [], b""
    async for chunk in resp.content.iter_any():
        buf += chunk
        while b"\n\n" in buf:
            msg, buf = buf.split(b"\n\n", 1)
            assert msg.startswith(b"data: ")
            data = msg[6:]
            if data == b"[DONE]":
                return msgs, times
            msgs.append(json.loads(data))
            times.append(time.monotonic())
    raise AssertionError("stream ended without [DONE]")


async def test_streamed_completion_with_usage_is_labelled_simulated(server):
    sim, url, session = server
    body = {"model": MODEL, "prompt": "x" * 2000, "max_tokens": 40, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        assert resp.status == 200 and resp.headers["x-knee-simulated"] == "true"
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        msgs, times = await read_sse(resp)
    text_msgs = [m for m in msgs if m["choices"]]
    assert len(text_msgs) == 40 and all(m["choices"][0]["text"] for m in text_msgs)
    assert text_msgs[-1]["choices"][0]["finish_reason"] == "length"
    assert msgs[-1]["choices"] == [] and msgs[-1]["usage"] == {"prompt_tokens": 500, "completion_tokens": 40, "total_tokens": 540}
    assert all(m["simulated"] for m in msgs)
    # Tokens are paced by the simulated steps, not sent in one burst.
    assert times[-1] - times[0] > 0.001


async def test_chat_sends_the_role_first_then_content(server):
    sim, url, session = server
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello " * 50}], "max_tokens": 5, "stream": True}
    async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
        msgs, _ = await read_sse(resp)
    assert msgs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [m["choices"][0]["delta"]["content"] for m in msgs[1:]]
    assert len(content) == 5 and all(content)
    assert msgs[-1]["object"] == "chat.completion.chunk"


async def test_non_streamed_completion_and_chat(server):
    sim, url, session = server
    async with session.post(f"{url}/v1/completions", json={"prompt": [1, 2, 3, 4], "max_tokens": 7}) as resp:
        out = await resp.json()
    assert out["usage"] == {"prompt_tokens": 4, "completion_tokens": 7, "total_tokens": 11} and out["simulated"]
    async with session.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}) as resp:
        out = await resp.json()
    assert out["choices"][0]["message"]["role"] == "assistant" and out["usage"]["completion_tokens"] == 3


async def test_health_models_metrics_and_auth(server):
    sim, url, session = server
    async with session.get(f"{url}/health") as r:
        assert r.status == 200
    async with session.get(f"{url}/v1/models") as r:
        m = (await r.json())["data"][0]
    assert m["id"] == MODEL and m["owned_by"] == "knee-sim" and m["max_model_len"] == 4096
    async with aiohttp.ClientSession() as anon:
        async with anon.get(f"{url}/v1/models") as r:
            assert r.status == 401
    # Start some long requests, then scrape: the gauges see them.
    body = {"prompt": "y" * 4000, "max_tokens": 2000, "stream": True}
    tasks = [asyncio.create_task(session.post(f"{url}/v1/completions", json=body)) for _ in range(6)]
    await asyncio.sleep(0.3)
    async with session.get(f"{url}/metrics") as r:
        text = await r.text()
    vals = {line.split("{")[0].split(" ")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line and not line.startswith("#")}
    assert vals["knee:simulated"] == 1
    assert vals["vllm:num_requests_running"] + vals["vllm:num_requests_waiting"] == 6
    assert 0 < vals["vllm:kv_cache_usage_perc"] <= 1
    for t in tasks:
        (await t).close()  # the client walks away: the engine aborts them
    await asyncio.sleep(0.3)
    assert sum(r.running + len(r.waiting) for r in sim.replicas) == 0
    assert all(r.free == r.total_blocks - r.pinned for r in sim.replicas)


async def test_too_long_and_bad_requests_are_400(server):
    sim, url, session = server
    async with session.post(f"{url}/v1/completions", json={"prompt": "z" * 16000, "max_tokens": 100}) as r:
        assert r.status == 400 and "maximum context length" in (await r.json())["message"]
    async with session.post(f"{url}/v1/completions", data=b"{nope") as r:
        assert r.status == 400
    async with session.post(f"{url}/v1/completions", json={"model": "other", "prompt": "a"}) as r:
        assert r.status == 404


async def test_concurrent_streams_share_the_batch(server):
    sim, url, session = server
    body = {"prompt": "w" * 1024, "max_tokens": 64, "stream": True}

    async def one():
        async with session.post(f"{url}/v1/completions", json=body) as resp:
            msgs, _ = await read_sse(resp)
            return len([m for m in msgs if m["choices"]])

    counts = await asyncio.gather(*(one() for _ in range(16)))
    assert counts == [64] * 16
    assert sim.counters["success"] == 16 and sim.counters["generation_tokens"] == 16 * 64


def test_prompt_token_counting():
    assert prompt_tokens([5, 6, 7]) == 3
    assert prompt_tokens("abcdefgh") == 2
    assert prompt_tokens(["abcd"]) == 1
    with pytest.raises(BadInput):
        prompt_tokens(["a", "b"])
    assert chat_text([{"role": "user", "content": "hi"}]).endswith("<|assistant|>")


def test_unknown_vllm_flags_become_extra_args():
    assert _extra_args(["--num-scheduler-steps=8", "--enforce-eager", "--swap-space", "4"]) == {
        "num_scheduler_steps": "8",
        "enforce_eager": "true",
        "swap_space": "4",
    }


def test_binds_to_loopback_only(capsys):
    assert main(["--model", MODEL, "--instance", "ml.g6.12xlarge", "--host", "0.0.0.0"]) == 2
    assert "127.0.0.1 only" in capsys.readouterr().err


def test_out_of_memory_config_exits_with_the_reason(capsys):
    assert main(["--model", "meta-llama/Llama-3.1-70B", "--gpu", "L4", "--num-gpus", "1"]) == 1
    assert "out of memory" in capsys.readouterr().err


def test_runs_as_a_module_and_answers():
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "core.simulate.server",
            "--model",
            MODEL,
            "--instance",
            "ml.g6.12xlarge",
            "--tp",
            "2",
            "--port",
            str(port),
            "--scale",
            "50",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        import urllib.request

        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    assert r.status == 200
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.monotonic() < deadline
                time.sleep(0.2)
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=json.dumps({"prompt": "q" * 400, "max_tokens": 8}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read())["usage"]["completion_tokens"] == 8
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_knees_own_load_client_measures_the_simulated_server(server):
    """The real load path end to end: core.load's client, SSE parser and metrics."""
    from core.load.datasets import make_prompts, word_tokenizer
    from core.load.openai import OpenAITarget
    from core.load.runner import run_load
    from core.spec.serving import LoadPoint
    from core.spec.workload import Workload

    sim, url, _ = server
    prompts = make_prompts(Workload.fixed(300, 48, num_prompts=24), word_tokenizer())
    target = OpenAITarget(url, MODEL, api_key="k3y")
    res = await run_load(target, prompts, LoadPoint(concurrency=8, num_prompts=24))
    s = res.summary
    assert s["completed"] == 24 and s["failed"] == 0
    assert s["total_output_tokens"] == 24 * 48
    assert all(r.output_tokens == 48 and len(r.chunk_times) == 48 for r in res.records)
    assert s["mean_ttft_ms"] > 0 and s["mean_tpot_ms"] > 0
    assert sim.counters["success"] == 24


async def test_stream_interval_sends_tokens_in_messages_of_that_many():
    """``--stream-interval 4`` (vLLM's and SGLang's flag): the first token at once, then four
    tokens a message, the rest with the last; the usage still counts every token."""
    arch = load_model(MODEL)
    hw = resolve_hardware(instance="ml.g6.12xlarge")
    cfg = ServerConfig(model=MODEL, tp=4, max_model_len=4096, extra_args=_extra_args(["--stream-interval", "4"]))
    sim = LiveSim(arch, hw, cfg, scale=20.0)
    runner = web.AppRunner(build_app(sim, MODEL), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        body = {"model": MODEL, "prompt": "x" * 400, "max_tokens": 10, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
        async with aiohttp.ClientSession() as session, session.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as resp:
            msgs, _ = await read_sse(resp)
    finally:
        await runner.cleanup()
    texts = [m["choices"][0]["text"] for m in msgs if m["choices"]]
    pieces = [WORDS[i % len(WORDS)] for i in range(10)]
    assert texts == ["".join(pieces[a:b]) for a, b in ((0, 1), (1, 5), (5, 9), (9, 10))]
    assert msgs[-1]["usage"]["completion_tokens"] == 10
