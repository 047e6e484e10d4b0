"""HTTP transport for the streaming client: the one place that knows which library moves bytes.

Everything above this module sees :class:`Transport`: ``open()``, ``close()`` and
``post_stream(url, body, headers)``, an async context manager giving a :class:`Stream`
(``status``, ``content_type``, ``chunks()`` — raw bytes as they come off the socket — and
``read_all()`` for error bodies). Timestamps are taken by the caller when ``chunks()`` yields,
so the transport must hand bytes over as soon as they arrive, never waiting to fill a buffer.

Implementations (``make_transport(kind, ...)``):

- ``"raw"`` — knee's own HTTP/1.1 client (:mod:`core.load.rawhttp`): stamps each read with
  the kernel's receive time (SO_TIMESTAMPNS, plain TCP on Linux; else when the loop first sees
  the bytes) and feeds the SSE parser there, no task switch per chunk.
- ``"httpx-aiohttp"`` — the httpx API over ``httpx_aiohttp.AiohttpTransport`` with knee's own
  aiohttp session (one connector sized to the concurrency, 10 MB read buffer).
- ``"aiohttp"`` — the same aiohttp session used directly, without the httpx layer.
- ``"httpx"`` — httpx's default transport (httpcore). Kept only so the benchmark can show
  why it is not the default: its pool stalls under concurrency (encode/httpx#3215).

``DEFAULT_TRANSPORT`` is chosen by ``bench/client_capacity.py`` (see its output and the
comment beside the constant). Traps handled here (``shared/reference/metrics.md`` §9):
aiohttp's 64 KB default ``read_bufsize`` collapses throughput at long context (vllm #39963),
so it is 10 MB; the connector limit is never below the concurrency, or the client would
queue requests invisibly (vllm #54101); keep-alive connections are reused through one
connector per process (port exhaustion).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

import aiohttp

# The protocols and the error live in transport_api (shared with rawhttp without a cycle);
# callers have always imported them from here.
from core.load.transport_api import Stream, Transport, TransportError  # noqa: F401 - re-exported

if TYPE_CHECKING:  # httpx is imported when an httpx transport opens, not with this module
    import httpx

READ_BUFSIZE = 10 * 1024 * 1024
TRANSPORTS = ("raw", "aiohttp", "httpx-aiohttp", "httpx")
# Chosen by measurement (bench/client_capacity.py, 2-core box, loopback cadence server, 1 ms
# between tokens, quiet machine): raw, stamping with the kernel's receive time, sustained
# 119,900 tok/s (128 streams) at p99 timestamp error 0.005 ms; aiohttp (stamping when its
# reader coroutine resumes) 59,500 tok/s at p99 0.3 ms and 6.9 ms at 128 streams; the httpx
# API adds a per-chunk wrapper on top of aiohttp (never under 1 ms at p99 there), and httpx's
# own transport collapses under concurrency (encode/httpx#3215); vllm bench serve 29,000.
DEFAULT_TRANSPORT = "raw"


def _session(limit: int, timeout_s: float | None) -> aiohttp.ClientSession:
    # limit_per_host=0: the per-host default (0 = unlimited) must not cap below `limit`.
    connector = aiohttp.TCPConnector(limit=max(limit, 1), limit_per_host=0, ttl_dns_cache=300, keepalive_timeout=60)
    return aiohttp.ClientSession(
        connector=connector,
        read_bufsize=READ_BUFSIZE,
        timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s or 30.0, 30.0)),
        auto_decompress=False,
        # Secrets ride in headers per request; never let aiohttp pick up env proxies/netrc.
        trust_env=False,
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (aiohttp.ClientConnectorError, ConnectionRefusedError)):
        return f"cannot connect: {exc}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


class _AiohttpStream:
    def __init__(self, resp: aiohttp.ClientResponse):
        self._resp = resp
        self.status = resp.status
        self.content_type = resp.headers.get("Content-Type", "")

    headers_time = None

    async def pump(self, feed) -> None:
        # readany(): whatever bytes the socket has delivered, without waiting for more; the
        # stamp is taken when this coroutine resumes (aiohttp offers no earlier hook).
        read = self._resp.content.readany
        clock = time.perf_counter
        while True:
            data = await read()
            if not data or feed(clock(), data):
                return

    async def read_all(self) -> bytes:
        return await self._resp.read()


class AiohttpTransport:
    name = "aiohttp"

    def __init__(self, limit: int, timeout_s: float | None = None):
        self.limit = limit
        self.timeout_s = timeout_s
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        if self.session is None:
            self.session = _session(self.limit, self.timeout_s)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    @contextlib.asynccontextmanager
    async def post_stream(self, url: str, body: bytes, headers: dict[str, str]):
        assert self.session is not None, "open() the transport first"
        try:
            async with self.session.post(url, data=body, headers=headers) as resp:
                yield _AiohttpStream(resp)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise TransportError(_describe(e)) from None


class _HttpxStream:
    def __init__(self, resp):
        self._resp = resp
        self.status = resp.status_code
        self.content_type = resp.headers.get("content-type", "")

    headers_time = None

    async def pump(self, feed) -> None:
        clock = time.perf_counter
        async for data in self._resp.aiter_raw():
            if data and feed(clock(), data):
                return

    async def read_all(self) -> bytes:
        return await self._resp.aread()


class HttpxTransport:
    """httpx's API; over knee's aiohttp session (``via_aiohttp``) or httpx's own pool."""

    def __init__(self, limit: int, timeout_s: float | None = None, via_aiohttp: bool = True):
        self.limit = limit
        self.timeout_s = timeout_s
        self.via_aiohttp = via_aiohttp
        self.name = "httpx-aiohttp" if via_aiohttp else "httpx"
        self.client: httpx.AsyncClient | None = None
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        import httpx

        if self.client is not None:
            return
        limits = httpx.Limits(max_connections=max(self.limit, 1), max_keepalive_connections=max(self.limit, 1))
        timeout = httpx.Timeout(self.timeout_s, connect=min(self.timeout_s or 30.0, 30.0))
        if self.via_aiohttp:
            from httpx_aiohttp import AiohttpTransport as _HA

            self._session = _session(self.limit, self.timeout_s)
            transport = _HA(client=self._session, limits=limits)
            self.client = httpx.AsyncClient(transport=transport, timeout=timeout, trust_env=False)
        else:
            self.client = httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @contextlib.asynccontextmanager
    async def post_stream(self, url: str, body: bytes, headers: dict[str, str]):
        import httpx

        assert self.client is not None, "open() the transport first"
        try:
            async with self.client.stream("POST", url, content=body, headers=headers) as resp:
                yield _HttpxStream(resp)
        except (httpx.TransportError, aiohttp.ClientError, OSError, TimeoutError) as e:
            raise TransportError(_describe(e)) from None


def make_transport(kind: str | None, limit: int, timeout_s: float | None = None) -> Transport:
    kind = kind or DEFAULT_TRANSPORT
    if kind == "raw":
        from core.load.rawhttp import RawTransport

        return RawTransport(limit, timeout_s)
    if kind == "aiohttp":
        return AiohttpTransport(limit, timeout_s)
    if kind == "httpx-aiohttp":
        return HttpxTransport(limit, timeout_s, via_aiohttp=True)
    if kind == "httpx":
        return HttpxTransport(limit, timeout_s, via_aiohttp=False)
    from core.errors import BadInput

    raise BadInput(f"unknown transport {kind!r}", f"use one of {', '.join(TRANSPORTS)}")
