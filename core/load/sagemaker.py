"""SageMaker endpoint target: ``sagemaker-runtime`` ``InvokeEndpointWithResponseStream``.

``SageMakerTarget(endpoint, model="", fmt="vllm"|"lmi", api="completions"|"chat",
region=None, inference_component=None, endpoint_url=None, ...)`` implements the same
target protocol as :class:`core.load.openai.OpenAITarget`, so a deployed endpoint is
benchmarked by the same runner, metrics and CLI (``knee bench --sagemaker-endpoint NAME``).

Container formats:

- ``vllm`` — the SageMaker vLLM container and LMI's OpenAI-compatible handler: the body is
  the OpenAI completions/chat payload and the payload parts carry the same SSE stream, so
  they go through the same :class:`core.load.openai.SSEParser` (parts may split messages
  anywhere; the parser stamps each message at the arrival of its first byte).
- ``lmi`` — DJL LMI rolling batch with the ``jsonlines`` output formatter: the body is
  ``{"inputs": prompt, "parameters": {"max_new_tokens": n, ...}}`` and each line is
  ``{"token": {"id", "text", ...}}``, one generated token per line; the last line may carry
  ``generated_text`` and ``details``. Lines prefixed ``data:`` are accepted too.

boto3 is synchronous, so each request runs on a worker thread (a pool as large as the
concurrency); stamps are ``time.perf_counter()`` in that thread when botocore hands over a
payload part — the same clock as everything else. Errors (throttling, ``ModelStreamError``,
a missing endpoint, expired credentials) become the request's ``error``. Credentials come
from the usual AWS chain and never appear in records or messages.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from core.load.datasets import Prompt
from core.load.openai import SSEParser
from core.load.request_body import streaming_request
from core.spec.records import RequestRecord


class _LMIParser:
    """jsonlines from LMI: one token per ``{"token": ...}`` line."""

    def __init__(self, rec: RequestRecord, t0: float):
        self.rec = rec
        self.t0 = t0
        self.buf = b""
        self.pending_t = 0.0
        self.texts: list[str] = []
        self.finished = False

    def feed(self, t_abs: float, data: bytes) -> bool:
        rec = self.rec
        t = t_abs - self.t0
        if not self.buf:
            self.pending_t = t
        self.buf += data
        first = True
        while True:
            i = self.buf.find(b"\n")
            if i < 0:
                break
            line, self.buf = self.buf[:i].strip(), self.buf[i + 1 :]
            mt = self.pending_t if first else t
            first = False
            if line.startswith(b"data:"):
                line = line[5:].strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                rec.error = f"malformed LMI stream: line is not JSON ({line[:80]!r})"
                return True
            if not isinstance(obj, dict):
                continue
            if "error" in obj and "token" not in obj:
                rec.error = f"server error in stream: {obj['error']}"
                return True
            rec.end_time = mt
            tok = obj.get("token")
            if isinstance(tok, dict):
                if rec.first_message_time is None:
                    rec.first_message_time = mt
                special = bool(tok.get("special"))
                text = tok.get("text") or ""
                if not special:
                    rec.chunk_times.append(mt)
                    rec.chunk_tokens.append(1)
                    self.texts.append(text)
                    if text and rec.first_output_time is None:
                        rec.first_output_time = mt
            if obj.get("generated_text") is not None or obj.get("details"):
                self.finished = True
                details = obj.get("details") or {}
                if isinstance(details, dict) and details.get("generated_tokens") is not None:
                    rec.output_tokens_usage = int(details["generated_tokens"])
        if self.buf and not first:
            self.pending_t = t
        return False

    def text(self) -> str:
        return "".join(self.texts)

    def finish(self, now: float) -> str:
        rec = self.rec
        if self.buf.strip() and rec.error is None:
            self.feed(now + self.t0, b"\n")
        if rec.error is None:
            if rec.end_time is None:
                rec.end_time = now
            rec.output_tokens = rec.output_tokens_usage if rec.output_tokens_usage is not None else len(rec.chunk_times)
        return "".join(self.texts)


def stream_parser(fmt: str, rec: RequestRecord, t0: float, *, chat: bool, per_chunk_usage: bool = False) -> SSEParser | _LMIParser:
    """The parser for one ``InvokeEndpointWithResponseStream`` body: ``fmt`` "lmi" for
    token lines (LMI jsonlines, TGI's ``data:{"token": ...}`` events), anything else for an
    OpenAI SSE stream. Both expose ``feed(t_abs, bytes) -> done``, ``text()`` and
    ``finish(now)``. The one SageMaker stream parser: ``knee bench`` and the deploy smoke
    test both read streams through it."""
    if fmt == "lmi":
        return _LMIParser(rec, t0)
    return SSEParser(rec, t0, chat=chat, per_chunk_usage=per_chunk_usage)


class SageMakerTarget:
    def __init__(
        self,
        endpoint: str,
        model: str = "",
        fmt: str = "vllm",
        api: str = "completions",
        region: str | None = None,
        *,
        inference_component: str | None = None,
        endpoint_url: str | None = None,
        ignore_eos: bool = True,
        per_chunk_usage: bool = False,
        temperature: float | None = None,
        timeout_s: float | None = 3600,
        client=None,
    ):
        from core.errors import BadInput

        if fmt not in ("vllm", "lmi"):
            raise BadInput(f"unknown SageMaker container format {fmt!r}", "use vllm or lmi")
        self.endpoint = endpoint
        self.model = model
        self.fmt = fmt
        self.api = api
        self.region = region
        self.inference_component = inference_component
        self.endpoint_url = endpoint_url
        self.ignore_eos = ignore_eos
        self.per_chunk_usage = per_chunk_usage
        self.temperature = temperature
        self.timeout_s = timeout_s
        self.name = f"sagemaker-{fmt}"
        self.transport_name = "boto3"
        self._client = client
        self._pool: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"SageMakerTarget({self.endpoint!r}, fmt={self.fmt!r})"

    def _make_client(self):
        import boto3
        from botocore.config import Config

        cfg = Config(
            read_timeout=self.timeout_s or 3600,
            connect_timeout=30,
            retries={"max_attempts": 1, "mode": "standard"},  # a retried request would hide an error
            max_pool_connections=max(10, self._limit),
        )
        return boto3.client("sagemaker-runtime", region_name=self.region, endpoint_url=self.endpoint_url, config=cfg)

    async def open(self, limit: int) -> None:
        self._limit = max(1, limit)
        if self._client is None:
            self._client = self._make_client()
        self._pool = ThreadPoolExecutor(max_workers=self._limit, thread_name_prefix="knee-sm")

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def body(self, prompt: Prompt) -> bytes:
        if self.fmt == "lmi":
            params: dict[str, Any] = {"max_new_tokens": prompt.output_tokens, "details": True}
            if self.temperature:
                params.update(do_sample=True, temperature=self.temperature)
            if self.ignore_eos:
                params["ignore_eos"] = True
            return json.dumps({"inputs": prompt.text, "parameters": params, "stream": True}).encode()
        # max_tokens for chat as well (not max_completion_tokens), as this target always sent.
        b = streaming_request(
            prompt,
            api=self.api,
            model=self.model or None,
            temperature=self.temperature,
            per_chunk_usage=self.per_chunk_usage,
            ignore_eos=self.ignore_eos,
            chat_max_key="max_tokens",
        )
        return json.dumps(b).encode()

    def _invoke(self, body: bytes, rec: RequestRecord, t0: float):
        """Runs on a worker thread: the whole streamed request."""
        clock = time.perf_counter
        parser = stream_parser(self.fmt, rec, t0, chat=self.api == "chat", per_chunk_usage=self.per_chunk_usage)
        kw: dict[str, Any] = {"EndpointName": self.endpoint, "Body": body, "ContentType": "application/json"}
        if self.inference_component:
            kw["InferenceComponentName"] = self.inference_component
        rec.wall_start_ns = time.time_ns()
        rec.send_time = clock() - t0
        try:
            resp = self._client.invoke_endpoint_with_response_stream(**kw)
            rec.headers_time = clock() - t0
            rec.status = int(resp.get("ResponseMetadata", {}).get("HTTPStatusCode") or 200)
            for event in resp["Body"]:
                part = event.get("PayloadPart")
                if part is None:
                    continue
                if parser.feed(clock(), part.get("Bytes", b"")):
                    break
        except Exception as e:  # botocore ClientError, EventStreamError, connection errors
            rec.error = _describe_aws_error(e)
            return parser.text()
        return parser.finish(clock() - t0)

    async def send(self, prompt: Prompt, rec: RequestRecord, t0: float) -> str:
        assert self._pool is not None, "open() the target first"
        rec.input_tokens = prompt.input_tokens
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._invoke, self.body(prompt), rec, t0)

    async def preflight(self) -> None:
        """One short request; raises BadInput for a missing endpoint, credentials, access."""
        from core.errors import BadInput

        await self.open(1)
        rec = RequestRecord(index=-1, send_time=0.0)
        try:
            await self.send(Prompt("Hello", 1, 2), rec, time.perf_counter())
        finally:
            await self.close()
        if rec.error is None:
            return
        e = rec.error
        if "credentials" in e.lower():
            raise BadInput(
                f"no AWS credentials for SageMaker endpoint {self.endpoint!r} ({e})", "configure AWS credentials (aws configure, AWS_PROFILE)"
            )
        if "not found" in e.lower() or "ValidationError" in e:
            raise BadInput(f"SageMaker endpoint {self.endpoint!r}: {e}", "check --sagemaker-endpoint and --region")
        if "AccessDenied" in e or "UnrecognizedClient" in e or "ExpiredToken" in e:
            raise BadInput(f"SageMaker refused the request: {e}", "check the AWS credentials' permissions")
        raise BadInput(f"a test request to SageMaker endpoint {self.endpoint!r} failed: {e}")


def _describe_aws_error(e: Exception) -> str:
    resp = getattr(e, "response", None)
    if isinstance(resp, dict) and "Error" in resp:
        err = resp["Error"]
        return f"{err.get('Code', type(e).__name__)}: {err.get('Message', '')}".strip()
    name = type(e).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return f"{name}: no AWS credentials"
    return f"{name}: {e}"
