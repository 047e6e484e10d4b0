"""OpenAI-compatible streaming target: ``/v1/completions`` and ``/v1/chat/completions`` over SSE.

``OpenAITarget(url, model, api="completions"|"chat", api_key=None, ...)`` implements the
target protocol the runner drives (``open(limit)``, ``close()``, ``send(prompt, rec, t0)``).
``send`` fills one :class:`core.spec.RequestRecord` in place and returns the generated text;
it never raises for anything the server or the network does — those become ``rec.error``.

Timing (``shared/reference/metrics.md`` §1), all ``time.perf_counter() - t0``:

- ``send_time``: immediately before the POST; ``headers_time``: when the status line and
  headers are in; each SSE message is stamped when the read that brought its **first byte**
  returned, before any JSON is parsed.
- ``chunk_times`` hold messages with non-empty ``text`` (completions) or ``delta.content`` /
  ``delta.reasoning_content`` / ``delta.reasoning`` (chat), so a role-only first chat chunk
  never fires TTFT (vllm #15106); ``first_message_time`` keeps vLLM's first-``choices`` stamp
  for parity. One refinement, only with ``per_chunk_usage``: a message whose usage shows new
  completion tokens counts as content even when its text is empty — the detokenizer held the
  text back (a partial UTF-8 sequence, a special token), but the token was generated then.
  Without per-chunk usage knee cannot tell such a message from a non-token one, so it follows
  metrics.md to the letter. ``end_time`` is t_end: ``[DONE]``, or the last message when a stream closes
  cleanly after a ``finish_reason`` without it.

Sampling: ``temperature`` is sent only when given (the server's default otherwise), as
``vllm bench serve`` does since it stopped forcing greedy decoding.

Token counts: the request asks for ``stream_options.include_usage`` and takes OSL from
``usage.completion_tokens``. ISL stays the prompt's own length in the model's tokenizer, as
``vllm bench serve`` counts it (its ``total_input_tokens``); the server's
``usage.prompt_tokens``, which may add a BOS or a chat template, is kept in
``input_tokens_usage`` (the runner uses it instead when the tokenizer was only the fallback). With
``per_chunk_usage=True`` it also asks vLLM for ``continuous_usage_stats`` and gives each
chunk the tokens it really carried (MTP, speculative decoding, bundled first chunks). A
server that reports no usage leaves ``output_tokens_usage`` unset; the runner then
retokenizes the joined text (never chunk by chunk).

The API key travels only in the ``Authorization`` header; it is never put in a record or
an error message.
"""

from __future__ import annotations

import json
import time
from typing import Any

from core.load.datasets import Prompt
from core.load.request_body import streaming_request
from core.load.transport import Transport, TransportError, make_transport
from core.spec.records import RequestRecord

_JSONError: type[ValueError]  # what _loads raises on bad JSON: either module's is a ValueError
try:  # every streamed message is parsed: orjson takes bytes directly and is several times faster
    from orjson import JSONDecodeError as _JSONError
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a pinned dependency
    _loads = json.loads
    _JSONError = ValueError


def _short(body: bytes, limit: int = 200) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:  # OpenAI-style {"error": {"message": ...}} or {"message": ...} / {"detail": ...}
        obj = json.loads(text)
        if isinstance(obj, dict):
            err = obj.get("error", obj)
            if isinstance(err, dict):
                text = str(err.get("message") or err.get("detail") or err)
            elif err:
                text = str(err)
    except ValueError:
        pass
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class OpenAITarget:
    def __init__(
        self,
        url: str,
        model: str,
        api: str = "completions",
        api_key: str | None = None,
        *,
        transport: str | None = None,
        ignore_eos: bool = True,
        per_chunk_usage: bool = False,
        temperature: float | None = None,
        timeout_s: float | None = 6 * 3600,
        extra_body: dict[str, Any] | None = None,
    ):
        if api not in ("completions", "chat"):
            from core.errors import BadInput

            raise BadInput(f"unknown API {api!r}", "use completions or chat")
        base = url.rstrip("/")
        # Accept http://host:port, .../v1, or the full endpoint URL.
        if base.endswith("/completions"):
            self.endpoint = base
            base = base.rsplit("/v1/", 1)[0] if "/v1/" in base else base
        else:
            if base.endswith("/v1"):
                base = base[:-3]
            self.endpoint = f"{base}/v1/chat/completions" if api == "chat" else f"{base}/v1/completions"
        self.base_url = base
        self.model = model
        self.api = api
        self.name = f"openai-{api}"
        self.ignore_eos = ignore_eos
        self.per_chunk_usage = per_chunk_usage
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._transport_kind = transport
        self._timeout_s = timeout_s
        self.transport: Transport | None = None

    def __repr__(self) -> str:  # never show the key
        return f"OpenAITarget({self.endpoint!r}, model={self.model!r}, api={self.api!r})"

    @property
    def transport_name(self) -> str:
        return self.transport.name if self.transport else (self._transport_kind or "")

    @property
    def timestamps(self) -> str:
        """Where chunk stamps come from: "kernel" (socket receive time, see core.load.rawhttp),
        "user" (when the client read them) or "mixed"."""
        return getattr(self.transport, "timestamps", "user")

    async def open(self, limit: int) -> None:
        self.transport = make_transport(self._transport_kind, limit, self._timeout_s)
        await self.transport.open()

    async def close(self) -> None:
        if self.transport is not None:
            await self.transport.close()

    def body(self, prompt: Prompt) -> bytes:
        b = streaming_request(
            prompt,
            api=self.api,
            model=self.model,
            temperature=self.temperature,
            per_chunk_usage=self.per_chunk_usage,
            ignore_eos=self.ignore_eos,
            chat_max_key="max_completion_tokens",
        )
        b.update(self.extra_body)
        return json.dumps(b).encode()

    async def send(self, prompt: Prompt, rec: RequestRecord, t0: float) -> str:
        """Send one streaming request and fill ``rec``; returns the generated text."""
        assert self.transport is not None, "open() the target first"
        body = self.body(prompt)
        clock = time.perf_counter
        parser = SSEParser(rec, t0, chat=self.api == "chat", per_chunk_usage=self.per_chunk_usage)
        rec.input_tokens = prompt.input_tokens
        rec.wall_start_ns = time.time_ns()
        rec.send_time = clock() - t0
        try:
            async with self.transport.post_stream(self.endpoint, body, self._headers) as s:
                rec.headers_time = s.headers_time - t0 if s.headers_time else clock() - t0
                rec.status = s.status
                if s.status != 200:
                    rec.error = f"HTTP {s.status}: {_short(await s.read_all())}"
                    return ""
                if "text/event-stream" not in s.content_type:
                    rec.error = f"server did not stream (Content-Type {s.content_type or 'missing'}; expected text/event-stream)"
                    return ""
                await s.pump(parser.feed)
        except TransportError as e:
            rec.error = str(e)
            return parser.text()
        except Exception as e:  # a broken stream must never end the run
            rec.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            return parser.text()
        return parser.finish(clock() - t0)


class SSEParser:
    """Incremental SSE parser for OpenAI streams that fills one record.

    ``feed(t, data)`` takes bytes as they arrived and the absolute ``perf_counter`` time of
    their arrival; it returns True once the stream is over (``[DONE]`` or an error). Every
    message is stamped with the arrival time of its **first** byte. ``finish(now)`` settles
    the record (broken-stream error, output tokens) and returns the generated text.
    """

    __slots__ = ("rec", "t0", "chat", "per_chunk_usage", "buf", "pending_t", "texts", "done", "finished", "prev_ct")

    def __init__(self, rec: RequestRecord, t0: float, chat: bool, per_chunk_usage: bool = False):
        self.rec = rec
        self.t0 = t0
        self.chat = chat
        self.per_chunk_usage = per_chunk_usage
        self.buf = b""
        self.pending_t = 0.0  # when the first byte of the partial message in buf arrived
        self.texts: list[str] = []
        self.done = False
        self.finished = False
        self.prev_ct = 0

    def text(self) -> str:
        return "".join(self.texts)

    def feed(self, t_abs: float, data: bytes) -> bool:
        rec = self.rec
        t = t_abs - self.t0
        buf = self.buf
        if buf:
            buf += data
        else:
            buf = data
            self.pending_t = t
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        msg_t = self.pending_t
        chunk_times = rec.chunk_times
        while True:
            i = buf.find(b"\n\n")
            if i < 0:
                break
            msg = buf[:i]
            buf = buf[i + 2 :]
            mt, msg_t = msg_t, t  # later messages in this read began in this read
            # Fast path: one `data: ` line (what vLLM, SGLang, OpenAI send).
            if msg.startswith(b"data: ") and b"\n" not in msg:
                payload = msg[6:]
            else:
                lines = [ln[5:].lstrip(b" ") for ln in msg.split(b"\n") if ln.startswith(b"data:")]
                if not lines:
                    continue  # comment, event: or keep-alive only
                payload = b"\n".join(lines)
            if payload == b"[DONE]":
                rec.end_time = mt
                self.done = True
                self.buf = b""
                return True
            try:
                obj = _loads(payload)
            except (ValueError, _JSONError):
                rec.error = f"malformed SSE: data is not JSON ({_short(payload, 80)!r})"
                self.done = True
                return True
            if not isinstance(obj, dict):
                rec.error = f"malformed SSE: data is not a JSON object ({_short(payload, 80)!r})"
                self.done = True
                return True
            rec.end_time = mt
            choices = obj.get("choices")
            if not choices and "error" in obj:
                err = obj["error"]
                rec.error = f"server error in stream: {err.get('message', err) if isinstance(err, dict) else err}"
                self.done = True
                return True
            usage = obj.get("usage")
            if choices:
                if rec.first_message_time is None:
                    rec.first_message_time = mt
                c = choices[0]
                if self.chat:
                    delta = c.get("delta") or {}
                    text = delta.get("content")
                    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                else:
                    text = c.get("text")
                    reasoning = None
                # Per-chunk usage says how many tokens this message carried; a message with
                # new tokens but empty text (the detokenizer holding back a partial UTF-8
                # sequence or a special token) is still a token, never a role-only chunk.
                new_tokens = 1
                if usage and self.per_chunk_usage:
                    ct = int(usage.get("completion_tokens") or 0)
                    new_tokens = ct - self.prev_ct
                    self.prev_ct = ct
                    is_token = new_tokens > 0 or bool(text or reasoning)
                else:
                    is_token = bool(text or reasoning)
                if is_token:
                    chunk_times.append(mt)
                    rec.chunk_tokens.append(new_tokens)
                    if text:
                        self.texts.append(text)
                        if rec.first_output_time is None:
                            rec.first_output_time = mt
                    if reasoning:
                        self.texts.append(reasoning)
                if c.get("finish_reason"):
                    self.finished = True
            if usage:
                ct = usage.get("completion_tokens")
                if ct is not None:
                    rec.output_tokens_usage = int(ct)
                pt = usage.get("prompt_tokens")
                if pt:
                    rec.input_tokens_usage = int(pt)
        if buf and msg_t != self.pending_t:  # the leftover began in this read
            self.pending_t = t
        self.buf = buf
        return False

    def finish(self, now: float) -> str:
        rec = self.rec
        if rec.error is not None:
            return self.text()
        if not self.done and not self.finished:
            rec.error = "stream ended before [DONE] (broken stream)"
            rec.end_time = None
            return self.text()
        if rec.end_time is None:
            rec.end_time = now
        if rec.output_tokens_usage is not None:
            rec.output_tokens = rec.output_tokens_usage
        else:
            rec.output_tokens = len(rec.chunk_times)  # provisional; the runner retokenizes
        return self.text()


async def list_models(target: OpenAITarget) -> list[str] | None:
    """``GET /v1/models`` ids, or None when the server does not answer it."""
    import aiohttp

    headers = {k: v for k, v in target._headers.items() if k == "Authorization"}
    try:
        async with aiohttp.ClientSession(trust_env=False, timeout=aiohttp.ClientTimeout(total=10)) as s:
            async with s.get(f"{target.base_url}/v1/models", headers=headers) as r:
                if r.status != 200:
                    return None
                data = await r.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return None  # unreachable, or not JSON: the server does not answer it
    if not isinstance(data, dict):
        return None
    models = data.get("data", [])
    if not isinstance(models, list):
        return None
    return [str(m.get("id")) for m in models if isinstance(m, dict)]


async def preflight(target: OpenAITarget, timeout_s: float = 60.0) -> None:
    """One short streaming request before a run. Raises :class:`core.errors.BadInput` with
    what is wrong and how to fix it (unreachable URL, 401, unknown model, no streaming,
    malformed SSE), so ``knee bench`` exits 2 with one line instead of N failed requests."""
    import asyncio

    from core.errors import BadInput

    url = target.base_url
    rec = RequestRecord(index=-1, send_time=0.0)
    await target.open(1)
    try:
        try:
            await asyncio.wait_for(target.send(Prompt("Hello", 1, 2), rec, time.perf_counter()), timeout_s)
        except asyncio.TimeoutError:
            raise BadInput(f"the server at {url} did not answer a test request within {timeout_s:g} s", "check --url") from None
    finally:
        await target.close()
    err = rec.error
    if err is None:
        return
    if err.startswith("cannot connect"):
        raise BadInput(f"cannot reach {url}: {err.removeprefix('cannot connect').lstrip(': ')}", "is the server running? check --url")
    if rec.status in (401, 403):
        raise BadInput(
            f"the server at {url} refused the request ({err})",
            "pass --api-key KEY or set OPENAI_API_KEY" if "Authorization" not in target._headers else "the API key was rejected",
        )
    if rec.status in (400, 404) and "model" in err.lower():
        served = await list_models(target)
        hint = f"served: {', '.join(served)}" if served else "check --model"
        raise BadInput(f"model {target.model!r} is not served at {url} ({err})", hint)
    if rec.status == 404:
        raise BadInput(f"no {target.endpoint.removeprefix(url)} endpoint at {url} ({err})", "check --url and --api")
    if "did not stream" in err:
        raise BadInput(f"{url}: {err}", "knee needs an OpenAI-compatible server that streams (SSE)")
    if err.startswith("malformed SSE"):
        raise BadInput(f"{url} sent a stream knee cannot read: {err}")
    raise BadInput(f"a test request to {url} failed: {err}")
