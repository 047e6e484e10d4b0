"""The OpenAI-compatible HTTP routes of the simulated server, over a :class:`LiveSim`:
completions and chat completions (streamed as vLLM streams them, or not), health, models,
Prometheus metrics and prefix-cache reset. Every response is labelled simulated."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid

from aiohttp import web

from core.errors import BadInput
from core.simulate.live import CHARS_PER_TOKEN, LiveSim

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

    async def version(_request):
        # vLLM's GET /version; a server playing no particular release (no --engine-version)
        # has none to give, and a sweep then predicts with the current release.
        if not sim.engine_version:
            return web.json_response(
                {"error": "no --engine-version: this simulated server plays the current release"}, status=404, headers=SIM_HEADERS
            )
        return web.json_response({"version": sim.engine_version, "simulated": True}, headers=SIM_HEADERS)

    async def models(_request):
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": model_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "knee-sim",
                        "root": sim.config.model,
                        "max_model_len": sim.max_len,
                        "simulated": True,
                    }
                ],
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
        text: str | None  # the prompt's text; None for a prompt of token ids
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
                {
                    "id": rid_s,
                    "object": "chat.completion" if chat else "text_completion",
                    "created": created,
                    "model": model_name,
                    "choices": [choice],
                    "usage": usage(out),
                    "simulated": True,
                },
                headers=SIM_HEADERS,
            )

        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **SIM_HEADERS})
        await resp.prepare(request)
        out = 0
        try:
            if chat:  # vLLM sends the role first, with empty content
                await resp.write(
                    _sse(
                        {
                            "id": rid_s,
                            "object": obj,
                            "created": created,
                            "model": model_name,
                            "simulated": True,
                            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
                        }
                    )
                )
            while True:
                kind, val = await stream_obj.queue.get()
                if kind == "tokens":
                    # One SSE message per token, as vLLM streams; with --stream-interval, one
                    # message per batch of tokens the engine sends together.
                    per = val if sim.stream_interval > 1 else 1
                    for _ in range(val // per):
                        last = out + per == max_tokens
                        piece = words(out, per)
                        out += per
                        if chat:
                            choice = {"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": "length" if last else None}
                        else:
                            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": "length" if last else None}
                        await resp.write(
                            _sse({"id": rid_s, "object": obj, "created": created, "model": model_name, "simulated": True, "choices": [choice]})
                        )
                elif kind == "done":
                    break
                else:
                    await resp.write(_sse({"object": "error", "message": str(val), "type": "InternalServerError", "code": 500, "simulated": True}))
                    break
            if usage_wanted:
                await resp.write(
                    _sse({"id": rid_s, "object": obj, "created": created, "model": model_name, "simulated": True, "choices": [], "usage": usage(out)})
                )
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
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app
