"""A loopback OpenAI-compatible server that plays the simulation in real time.

    python -m core.simulate.server --model Qwen/Qwen3-4B --instance ml.g6.12xlarge --tp 1 --port 8000

It serves what the sweep and the load client talk to on a real vLLM, so the live monitor,
the HTTP client and telemetry can be shown and tested with no GPU:

- ``POST /v1/completions`` and ``POST /v1/chat/completions``, streamed (SSE, vLLM's chunk
  shapes, ``stream_options.include_usage``) or not; ``max_tokens`` tokens are generated
  (as with ``ignore_eos``); prompt + max_tokens over ``max_model_len`` is HTTP 400;
- ``GET /health``, ``GET /v1/models``, ``POST /reset_prefix_cache``;
- ``GET /metrics``: Prometheus text with vLLM's names (``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``, token and request counters)
  plus ``knee:simulated 1``.

Every response says it is simulated: the ``x-knee-simulated: true`` header, ``"simulated":
true`` in each JSON body, and ``owned_by: knee-sim`` in the model list.

**Time.** The replicas of :mod:`core.simulate.engine` run in virtual time v = (wall − start)
× ``scale`` (``--scale 10`` plays ten times faster than the simulated GPU). A request is
handed to the scheduler when it arrives (after the API server's per-request overhead, also
scaled); each replica's loop runs one step, sleeps until the wall time its end maps to,
then streams the tokens that step produced. If Python falls behind, the engine clock is
pulled forward to now (it never runs in the past).

**Prompt tokens.** A prompt given as token ids counts exactly; text counts as one token per
4 characters (no tokenizer is loaded). With prefix caching on, the prompt's common prefix
with the first prompt seen stands in for vLLM's block hashes: exact for the shared-prefix
dataset (every prompt starts with the same text), zero for unrelated prompts.

Bound to 127.0.0.1 only. ``--api-key`` (or ``VLLM_API_KEY``) requires ``Authorization:
Bearer KEY`` on the /v1 routes, as vLLM does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
import uuid
from os.path import commonprefix

from aiohttp import web

from core.errors import BadInput, KneeError
from core.estimate.costmodel import CostModel
from core.simulate.engine import DECODE, DONE, FAILED, Replica, Requests
from core.simulate.sim import InfeasibleConfig, _apply_quantization, check_config, scheduler_generation
from core.spec.engine_defaults import with_engine_defaults
from core.spec.serving import ServerConfig

CHARS_PER_TOKEN = 4
LOCALHOST = ("127.0.0.1", "localhost")
# Words the simulated model "generates": one per token, so streamed text has the right
# number of pieces (the client's usage and chunk counts line up).
WORDS = ("the", " model", " is", " simulated", " by", " knee", ",", " and", " every", " token", " here", " is", " virtual", ".")


def prompt_tokens(prompt) -> int:
    """Token count of an OpenAI ``prompt`` (text, token ids, or a one-element list of either)."""
    if isinstance(prompt, list):
        if prompt and all(isinstance(x, int) for x in prompt):
            return len(prompt)
        if len(prompt) == 1:
            return prompt_tokens(prompt[0])
        raise BadInput("batched prompts are not supported by the simulated server")
    if isinstance(prompt, str):
        return max(1, math.ceil(len(prompt) / CHARS_PER_TOKEN))
    raise BadInput("prompt must be text or a list of token ids")


def chat_text(messages) -> str:
    if not isinstance(messages, list) or not messages:
        raise BadInput("messages must be a non-empty list")
    parts = []
    for m in messages:
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list):  # content parts
            c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
        parts.append(f"<|{m.get('role', 'user') if isinstance(m, dict) else 'user'}|>{c or ''}")
    return "\n".join(parts) + "\n<|assistant|>"


class _Stream:
    """What one request's handler waits on: tokens as the engine makes them."""

    __slots__ = ("rid", "queue", "sent", "replica")

    def __init__(self, rid: int, replica: int):
        self.rid = rid
        self.replica = replica
        self.queue: asyncio.Queue = asyncio.Queue()
        self.sent = 0


class LiveSim:
    """The simulated engine (all replicas) driven by the wall clock."""

    def __init__(self, arch, hardware, config: ServerConfig, *, engine: str = "vllm", engine_version: str | None = None,
                 scale: float = 1.0, router: str = "least-loaded"):
        if not scale > 0:
            raise BadInput(f"--scale must be positive, got {scale}")
        arch = _apply_quantization(arch, config)
        config = with_engine_defaults(config, engine, engine_version, hardware.gpu)
        self.memory = check_config(arch, hardware, config)
        self.cost = CostModel(arch, hardware.gpu, config.tp, config.kv_cache_dtype, engine, engine_version)
        self.config = config
        self.scale = scale
        self.router = router
        self.max_len = self.memory.max_model_len
        self.reqs = Requests([], [], [])
        v0, steps = scheduler_generation(config, engine, engine_version)
        blocks = self.memory.kv_tokens // 16
        max_tokens = config.max_num_batched_tokens or (max(self.max_len, 2048) if v0 else config.batched_tokens)
        self.replicas = [
            Replica(i, self.reqs, self.cost, blocks, config.seqs, max_tokens, config.enable_prefix_caching,
                    self._on_finish, v0=v0, scheduler_steps=steps)
            for i in range(config.dp)
        ]
        self.active: list[dict[int, _Stream]] = [dict() for _ in self.replicas]
        self.wakeups = [asyncio.Event() for _ in self.replicas]
        self._rr = 0
        self.start = time.monotonic()
        self.reference_prompt: str | None = None
        self.counters = {"prompt_tokens": 0, "generation_tokens": 0, "success": 0, "failed": 0}
        self._tasks: list[asyncio.Task] = []

    # ---- clocks ----
    def vnow(self) -> float:
        return (time.monotonic() - self.start) * self.scale

    def wall(self, v: float) -> float:
        return self.start + v / self.scale

    # ---- requests ----
    def _prefix_of(self, text: str | None) -> int:
        if not text or not self.config.enable_prefix_caching:
            return 0
        if self.reference_prompt is None:
            self.reference_prompt = text
            return len(text) // CHARS_PER_TOKEN
        return len(commonprefix([self.reference_prompt, text])) // CHARS_PER_TOKEN

    async def submit(self, n_prompt: int, max_tokens: int, text: str | None) -> _Stream:
        """Hand a request to the scheduler (after the API server's overhead); returns its stream."""
        if n_prompt + max_tokens > self.max_len:
            raise BadInput(
                f"This model's maximum context length is {self.max_len} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the completion)."
            )
        rid = self.reqs.add(n_prompt, max_tokens, min(self._prefix_of(text), n_prompt))
        self.counters["prompt_tokens"] += n_prompt
        await asyncio.sleep(self.cost.request_overhead_s / self.scale)
        reps = self.replicas
        if self.router == "round-robin":
            rep = reps[self._rr % len(reps)]
            self._rr += 1
        else:
            rep = min(reps, key=Replica.load)
        now = self.vnow()
        if not rep.has_work and rep.t < now:
            rep.t = now
        rep.enqueue(rid)
        stream = _Stream(rid, rep.index)
        self.active[rep.index][rid] = stream
        self.wakeups[rep.index].set()
        return stream

    def cancel(self, stream: _Stream) -> None:
        """The client went away: abort the request as vLLM does."""
        if self.reqs.state[stream.rid] not in (DONE, FAILED):
            rep = self.replicas[stream.replica]
            self.active[stream.replica].pop(stream.rid, None)
            rep.abort(stream.rid, rep.t, "client disconnected")

    def _on_finish(self, rid: int, t: float) -> None:
        if self.reqs.state[rid] == DONE:
            self.counters["success"] += 1
        else:
            self.counters["failed"] += 1

    # ---- the engine loops ----
    async def _loop(self, i: int) -> None:
        rep, active, wake = self.replicas[i], self.active[i], self.wakeups[i]
        R = self.reqs
        while True:
            if not rep.has_work:
                wake.clear()
                await wake.wait()
                continue
            now = self.vnow()
            if rep.t < now:
                rep.t = now  # behind the wall clock: the engine cannot step in the past
            if not rep.run_step():
                if rep.waiting and not rep.running:
                    rid = rep.fail_head("request needs more KV cache than the engine has")
                    s = active.pop(rid, None)
                    if s:
                        s.queue.put_nowait(("error", R.error[rid]))
                    continue
                wake.clear()
                await wake.wait()
                continue
            delay = self.wall(rep.t) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            # Stream what this step produced.
            for rid, s in list(active.items()):
                st = R.state[rid]
                made = R.gen[rid] + (rep.dstep - R.s0[rid] if st == DECODE else 0)
                if made > s.sent:
                    s.queue.put_nowait(("tokens", made - s.sent))
                    self.counters["generation_tokens"] += made - s.sent
                    s.sent = made
                if st == DONE:
                    s.queue.put_nowait(("done", None))
                    del active[rid]
                elif st == FAILED:
                    s.queue.put_nowait(("error", R.error[rid]))
                    del active[rid]

    def start_loops(self) -> None:
        self.start = time.monotonic()
        self._tasks = [asyncio.create_task(self._loop(i)) for i in range(len(self.replicas))]

    async def stop_loops(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def reset_prefix_cache(self) -> bool:
        """Forget the cached prefix on idle replicas (vLLM's /reset_prefix_cache)."""
        ok = True
        for rep in self.replicas:
            if rep.has_work:
                ok = False
                continue
            rep.free += rep.pinned
            rep.pinned = 0
            rep.prefix_cached = False
        if ok:
            self.reference_prompt = None
        return ok

    # ---- telemetry ----
    def metrics_text(self, model: str) -> str:
        reps = self.replicas
        running = sum(r.running for r in reps)
        waiting = sum(len(r.waiting) for r in reps)
        total = sum(r.total_blocks for r in reps) or 1
        usage = sum(r.used_blocks - r.pinned for r in reps) / total
        lab = f'{{model_name="{model}",engine="0"}}'
        c = self.counters
        lines = [
            "# HELP knee:simulated 1: every number from this server is simulated.",
            "# TYPE knee:simulated gauge",
            "knee:simulated 1",
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{lab} {running}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{lab} {waiting}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{lab} {usage:.6f}",
            "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage (pre-V1 name). 1 means 100 percent usage.",
            "# TYPE vllm:gpu_cache_usage_perc gauge",
            f"vllm:gpu_cache_usage_perc{lab} {usage:.6f}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemptions.",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{lab} {sum(r.preemptions for r in reps)}",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{lab} {c['prompt_tokens']}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{lab} {c['generation_tokens']}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{model_name="{model}",engine="0",finished_reason="length"}} {c["success"]}',
        ]
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------

SIM_HEADERS = {"x-knee-simulated": "true"}


def _error(status: int, message: str, kind: str = "BadRequestError") -> web.Response:
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status, "simulated": True}
    return web.json_response(body, status=status, headers=SIM_HEADERS)


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def build_app(sim: LiveSim, model_name: str, api_key: str | None = None) -> web.Application:
    @web.middleware
    async def auth(request: web.Request, handler):
        if api_key and request.path.startswith("/v1"):
            if request.headers.get("Authorization", "") != f"Bearer {api_key}":
                return web.json_response({"error": "Unauthorized"}, status=401, headers=SIM_HEADERS)
        return await handler(request)

    app = web.Application(middlewares=[auth])

    async def on_startup(_app):
        sim.start_loops()

    async def on_cleanup(_app):
        await sim.stop_loops()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)

    async def health(_request):
        return web.Response(status=200, headers=SIM_HEADERS)

    async def models(_request):
        return web.json_response(
            {
                "object": "list",
                "data": [{
                    "id": model_name, "object": "model", "created": int(time.time()), "owned_by": "knee-sim",
                    "root": sim.config.model, "max_model_len": sim.max_len, "simulated": True,
                }],
            },
            headers=SIM_HEADERS,
        )

    async def metrics(_request):
        return web.Response(text=sim.metrics_text(model_name), content_type="text/plain", headers=SIM_HEADERS)

    async def reset_prefix_cache(_request):
        sim.reset_prefix_cache()
        return web.Response(status=200, headers=SIM_HEADERS)

    async def generate(request: web.Request, chat: bool):
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "the request body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object")
        if body.get("model") not in (None, model_name, sim.config.model):
            return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        try:
            if chat:
                text = chat_text(body.get("messages"))
                n_prompt = prompt_tokens(text)
                max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
            else:
                if "prompt" not in body:
                    return _error(400, "prompt is required")
                text = body["prompt"] if isinstance(body["prompt"], str) else None
                n_prompt = prompt_tokens(body["prompt"])
                max_tokens = body.get("max_tokens", 16)
            if max_tokens is None:
                max_tokens = sim.max_len - n_prompt  # vLLM's default: the rest of the context
            max_tokens = int(max_tokens)
            if max_tokens < 1:
                return _error(400, f"max_tokens must be at least 1, got {max_tokens}")
            stream_obj = await sim.submit(n_prompt, max_tokens, text)
        except BadInput as e:
            return _error(400, str(e))

        rid_s = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        usage_wanted = bool((body.get("stream_options") or {}).get("include_usage"))
        streaming = bool(body.get("stream"))

        def usage(n_out: int) -> dict:
            return {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}

        def words(start: int, k: int) -> str:
            return "".join(WORDS[(start + j) % len(WORDS)] for j in range(k))

        if not streaming:
            out = 0
            try:
                while True:
                    kind, val = await stream_obj.queue.get()
                    if kind == "tokens":
                        out += val
                    elif kind == "done":
                        break
                    else:
                        return _error(500 if not str(val).startswith("timeout") else 408, str(val), "InternalServerError")
            except asyncio.CancelledError:
                sim.cancel(stream_obj)
                raise
            text_out = words(0, out)
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text_out}, "finish_reason": "length"}
            else:
                choice = {"index": 0, "text": text_out, "logprobs": None, "finish_reason": "length"}
            return web.json_response(
                {"id": rid_s, "object": "chat.completion" if chat else "text_completion", "created": created,
                 "model": model_name, "choices": [choice], "usage": usage(out), "simulated": True},
                headers=SIM_HEADERS,
            )

        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **SIM_HEADERS})
        await resp.prepare(request)
        out = 0
        try:
            if chat:  # vLLM sends the role first, with empty content
                await resp.write(_sse({"id": rid_s, "object": obj, "created": created, "model": model_name, "simulated": True,
                                       "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                                    "finish_reason": None}]}))
            while True:
                kind, val = await stream_obj.queue.get()
                if kind == "tokens":
                    # One SSE message per token, as vLLM streams.
                    for _ in range(val):
                        last = out + 1 == max_tokens
                        piece = WORDS[out % len(WORDS)]
                        out += 1
                        if chat:
                            choice = {"index": 0, "delta": {"content": piece}, "logprobs": None,
                                      "finish_reason": "length" if last else None}
                        else:
                            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": "length" if last else None}
                        await resp.write(_sse({"id": rid_s, "object": obj, "created": created, "model": model_name,
                                               "simulated": True, "choices": [choice]}))
                elif kind == "done":
                    break
                else:
                    await resp.write(_sse({"object": "error", "message": str(val), "type": "InternalServerError",
                                           "code": 500, "simulated": True}))
                    break
            if usage_wanted:
                await resp.write(_sse({"id": rid_s, "object": obj, "created": created, "model": model_name,
                                       "simulated": True, "choices": [], "usage": usage(out)}))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except asyncio.CancelledError:
            sim.cancel(stream_obj)
            raise
        except ConnectionResetError:  # the client went away mid-stream: abort, as vLLM does
            sim.cancel(stream_obj)
        return resp

    async def completions(request):
        return await generate(request, chat=False)

    async def chat_completions(request):
        return await generate(request, chat=True)

    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m core.simulate.server", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--instance", default=None, help="SageMaker instance type, e.g. ml.g6.12xlarge")
    p.add_argument("--gpu", default=None)
    p.add_argument("--num-gpus", type=int, default=None)
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
        hw = resolve_hardware(gpu=args.gpu, num_gpus=args.num_gpus, instance=args.instance)
        arch = load_model(args.model)
        config = ServerConfig(
            model=args.model, tp=args.tp, dp=args.dp, max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization, quantization=args.quantization,
            kv_cache_dtype=args.kv_cache_dtype, enable_prefix_caching=args.prefix, extra_args=_extra_args(unknown),
        )

        async def run() -> None:
            sim = LiveSim(arch, hw, config, engine=args.engine, engine_version=args.engine_version,
                          scale=args.scale, router=args.router)
            app = build_app(sim, args.served_model_name or args.model, args.api_key)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", args.port)
            await site.start()
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
