"""A minimal HTTP/1.1 client on ``asyncio.Protocol``, made for timing streamed responses.

Why it exists (measured in ``bench/client_capacity.py``): with aiohttp or httpx, every piece
of a streamed body travels parser → ``StreamReader`` buffer → future → coroutine resume
before knee can stamp it, so under many streams the stamps lag the socket and a token costs
a coroutine switch. Here ``data_received`` — the loop's first sight of the bytes — stamps
them and hands them straight to the SSE parser (``feed(t, data)``); the request's coroutine
sleeps until the response is over. One stamp per socket read, no per-chunk task switch.

Scope, deliberately small: ``POST`` with a body, HTTP/1.1 keep-alive, responses with
``Content-Length``, ``Transfer-Encoding: chunked`` or close-delimited bodies, plain TCP or
TLS (``https://``), one pool of at most ``limit`` connections per (host, port, scheme).
No redirects, proxies, compression or HTTP/2 — a benchmark endpoint needs none of them.
Anything unexpected from the server becomes a :class:`TransportError` for that request.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl as _ssl
import time
from collections import deque
from urllib.parse import urlsplit

from core.load.transport import TransportError

_clock = time.perf_counter
_MAX_HEAD = 64 * 1024


class _Conn(asyncio.Protocol):
    """One connection; carries one request/response at a time."""

    def __init__(self, pool: "RawTransport"):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reset()

    def _reset(self):
        self.head = b""
        self.in_head = True
        self.status = 0
        self.headers: dict[str, str] = {}
        self.headers_time: float | None = None
        self.chunked = False
        self.remaining = -1  # bytes left of a Content-Length body; -1 = until close
        self.chunk_left = 0  # bytes left in the current chunk (+2 for its CRLF)
        self.chunk_head = b""
        self.in_trailer = False
        self.keep_alive = True
        self.feed = None  # feed(t, data) -> bool, while streaming
        self.body: list[tuple[float, bytes]] | None = None  # buffered (arrival, data) until pump()
        self.headers_fut: asyncio.Future | None = None
        self.done_fut: asyncio.Future | None = None
        self.stop_feeding = False

    # --- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc):
        self.closed = True
        self.transport = None
        if self.remaining == -1 and not self.in_head and not self.chunked:
            self._complete()  # close-delimited body: the close is the end
            return
        err = TransportError(f"connection closed by the server mid-response{f' ({exc})' if exc else ''}")
        for fut in (self.headers_fut, self.done_fut):
            if fut is not None and not fut.done():
                fut.set_exception(err)

    def data_received(self, data: bytes):
        t = _clock()  # the stamp: first sight of these bytes
        if self.in_head:
            self.head += data
            i = self.head.find(b"\r\n\r\n")
            if i < 0:
                if len(self.head) > _MAX_HEAD:
                    self._fail("response headers too large")
                return
            data = self.head[i + 4 :]
            if not self._parse_head(self.head[:i]):
                return
            self.headers_time = t
            self.in_head = False
            if self.headers_fut is not None and not self.headers_fut.done():
                self.headers_fut.set_result(None)
            if not data and not (self.remaining == 0):
                return
        if self.chunked:
            self._chunked(t, data)
        else:
            self._plain(t, data)

    # --- body framing ---------------------------------------------------------------------
    def _deliver(self, t: float, data: bytes):
        if not data:
            return
        if self.body is not None:
            self.body.append((t, data))
        elif self.feed is not None and not self.stop_feeding:
            if self.feed(t, data):
                self.stop_feeding = True  # the parser is done; the rest is drained and dropped

    def _plain(self, t: float, data: bytes):
        if self.remaining == -1:
            self._deliver(t, data)
            return
        take = data[: self.remaining]
        self.remaining -= len(take)
        self._deliver(t, take)
        if self.remaining == 0:
            self._complete()

    def _chunked(self, t: float, data: bytes):
        pos, n = 0, len(data)
        while pos < n:
            if self.in_trailer:
                self.chunk_head += data[pos:]
                pos = n
                # trailers end with an empty line; no trailers: just CRLF after the 0 chunk
                if self.chunk_head.startswith(b"\r\n") or b"\r\n\r\n" in self.chunk_head:
                    self._complete()
                return
            if self.chunk_left == 0:
                j = data.find(b"\r\n", pos)
                if j < 0:
                    self.chunk_head += data[pos:]
                    return
                line = self.chunk_head + data[pos:j]
                self.chunk_head = b""
                pos = j + 2
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self._fail(f"bad chunk size line {line[:40]!r}")
                    return
                if size == 0:
                    self.in_trailer = True
                    continue
                self.chunk_left = size + 2  # data + CRLF
                continue
            take = min(self.chunk_left, n - pos)
            piece = data[pos : pos + take]
            pos += take
            self.chunk_left -= take
            # Strip the chunk's trailing CRLF (it may be split across reads).
            if self.chunk_left < 2:
                piece = piece[: len(piece) - (2 - self.chunk_left)]
            self._deliver(t, piece)

    def _parse_head(self, head: bytes) -> bool:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            self._fail(f"not an HTTP response: {lines[0][:60]!r}")
            return False
        try:
            self.status = int(parts[1])
        except ValueError:
            self._fail(f"bad status line {lines[0][:60]!r}")
            return False
        h = self.headers
        for line in lines[1:]:
            k, _, v = line.partition(":")
            h[k.strip().lower()] = v.strip()
        self.chunked = "chunked" in h.get("transfer-encoding", "").lower()
        if not self.chunked and "content-length" in h:
            try:
                self.remaining = int(h["content-length"])
            except ValueError:
                self._fail("bad Content-Length")
                return False
        conn = h.get("connection", "").lower()
        self.keep_alive = parts[0] != "HTTP/1.0" and conn != "close"
        if self.remaining == -1 and not self.chunked:
            self.keep_alive = False
        if self.remaining == 0:
            self._complete()
        return True

    def _complete(self):
        if self.done_fut is not None and not self.done_fut.done():
            self.done_fut.set_result(None)

    def _fail(self, why: str):
        err = TransportError(why if why.startswith("timed out") else f"bad HTTP response: {why}")
        self.keep_alive = False
        for fut in (self.headers_fut, self.done_fut):
            if fut is not None and not fut.done():
                fut.set_exception(err)
        if self.transport is not None:
            self.transport.close()


class _RawStream:
    def __init__(self, conn: _Conn):
        self._c = conn
        self.status = conn.status
        self.content_type = conn.headers.get("content-type", "")
        self.headers_time = conn.headers_time

    async def pump(self, feed) -> None:
        c = self._c
        c.feed = feed
        # Bytes that came with the headers were buffered; hand them over first.
        pending, c.body = c.body or [], None
        for t, data in pending:
            if feed(t, data):
                c.stop_feeding = True
                break
        await c.done_fut

    async def read_all(self) -> bytes:
        await self._c.done_fut
        return b"".join(d for _, d in self._c.body or [])


class RawTransport:
    name = "raw"

    def __init__(self, limit: int, timeout_s: float | None = None):
        self.limit = max(limit, 1)
        self.timeout_s = timeout_s
        self._idle: dict[tuple, deque[_Conn]] = {}
        self._sem: asyncio.Semaphore | None = None
        self._all: set[_Conn] = set()
        self._ssl: _ssl.SSLContext | None = None

    async def open(self) -> None:
        self._sem = asyncio.Semaphore(self.limit)

    async def close(self) -> None:
        for c in list(self._all):
            if c.transport is not None:
                c.transport.close()
        self._all.clear()
        self._idle.clear()

    async def _connect(self, key) -> _Conn:
        scheme, host, port = key
        ssl_ctx = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = _ssl.create_default_context()
            ssl_ctx = self._ssl
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Conn(self), host, port, ssl=ssl_ctx), timeout=min(self.timeout_s or 30.0, 30.0)
            )
        except (OSError, asyncio.TimeoutError) as e:
            if isinstance(e, asyncio.TimeoutError):
                raise TransportError(f"cannot connect to {host}:{port}: timed out") from None
            raise TransportError(f"cannot connect to {host}:{port}: {e.strerror or e}") from None
        self._all.add(conn)
        return conn

    @contextlib.asynccontextmanager
    async def post_stream(self, url: str, body: bytes, headers: dict[str, str]):
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise TransportError(f"unsupported URL {url!r} (use http:// or https://)")
        key = (u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80))
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        host_hdr = u.hostname if u.port is None else f"{u.hostname}:{u.port}"
        head = [f"POST {path} HTTP/1.1", f"Host: {host_hdr}", f"Content-Length: {len(body)}", "User-Agent: knee"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        assert self._sem is not None, "open() the transport first"
        async with self._sem:
            idle = self._idle.setdefault(key, deque())
            loop = asyncio.get_running_loop()
            for attempt in (0, 1):
                conn = None
                while idle:
                    c = idle.pop()
                    if not c.closed and c.transport is not None and not c.transport.is_closing():
                        conn = c
                        break
                    self._all.discard(c)
                reused = conn is not None
                if conn is None:
                    conn = await self._connect(key)
                conn._reset()
                conn.body = []  # buffer until the caller decides between pump() and read_all()
                conn.headers_fut = loop.create_future()
                conn.done_fut = loop.create_future()
                conn.transport.write(request)
                # One timer handle, not wait_for(): the headers wait is on the hot path.
                hdr_timer = None
                if self.timeout_s:
                    hdr_timer = loop.call_later(self.timeout_s, conn._fail, "timed out waiting for response headers")
                try:
                    await conn.headers_fut
                    break
                except TransportError:
                    self._discard(conn)
                    # A kept-alive connection the server closed while idle: retry once, fresh.
                    if reused and attempt == 0 and conn.headers_time is None:
                        continue
                    raise
                finally:
                    if hdr_timer is not None:
                        hdr_timer.cancel()
            ok = False
            timer = None
            try:
                stream = _RawStream(conn)
                if self.timeout_s:
                    # Bound the whole response, not only the headers.
                    timer = loop.call_later(self.timeout_s, conn._fail, "timed out reading the response")
                yield stream
                ok = conn.done_fut.done() and not conn.done_fut.cancelled() and conn.done_fut.exception() is None
            finally:
                if timer is not None:
                    timer.cancel()
                if conn.done_fut.done() and not conn.done_fut.cancelled():
                    conn.done_fut.exception()  # retrieved, so asyncio does not log it
                if ok and conn.keep_alive and not conn.closed:
                    conn.feed = None
                    conn.body = None
                    idle.append(conn)
                else:
                    self._discard(conn)

    def _discard(self, conn: _Conn) -> None:
        self._all.discard(conn)
        for fut in (conn.headers_fut, conn.done_fut):
            if fut is not None and fut.done() and not fut.cancelled():
                fut.exception()
        if conn.transport is not None:
            conn.transport.close()
