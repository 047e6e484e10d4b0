"""A minimal HTTP/1.1 client on ``asyncio.Protocol``, made for timing streamed responses.

Why it exists (measured in ``bench/client_capacity.py``): with aiohttp or httpx, every piece
of a streamed body travels parser → ``StreamReader`` buffer → future → coroutine resume
before knee can stamp it, so under many streams the stamps lag the socket and a token costs
a coroutine switch. Here ``data_received`` — the loop's first sight of the bytes — stamps
them and hands them straight to the SSE parser (``feed(t, data)``); the request's coroutine
sleeps until the response is over. One stamp per socket read, no per-chunk task switch.

**Kernel receive timestamps** (plain ``http://`` on Linux). A stamp taken in user space, even
in ``data_received``, is the time the client *got around to* reading: when the machine is busy
or the client has many streams to serve, the process is off the CPU or behind in its loop and
every stamp of that spell is late (measured on a 2-core box: p99 ITL error 2.5-540 ms at 256
streams under load, against < 1 ms wanted). So for plain TCP this module makes its own
non-blocking socket, turns on ``SO_TIMESTAMPNS`` and reads it with ``recvmsg`` from a
``loop.add_reader`` callback (asyncio and uvloop alike): each read carries, in a control
message, the time the *kernel* received the data (on loopback: the moment the server's
``write`` reached the network stack). That makes the stamps independent of when the client
is scheduled — an accuracy advantage over ``vllm bench serve`` and AIPerf, which stamp in
user space when their coroutine resumes. What it cannot undo: TCP merges segments that queue
up unread into one and keeps the newest segment's stamp, so when one connection goes unread
for longer than the server's inter-token gap, the earlier tokens of that read share the later
stamp (still never later than a user-space stamp would be).

The kernel stamp is CLOCK_REALTIME; everything above uses ``perf_counter``
(CLOCK_MONOTONIC). Each read converts with both clocks sampled right then:
``t = perf_counter_now - (time_now - kernel_ts)``, i.e. "how long ago the kernel got it"
subtracted from now — so only the read's own age depends on REALTIME, and slewing between
runs cannot accumulate. Where the option or the control message is missing (not Linux, a
kernel that refuses it) the read is stamped in user space instead, and the transport counts
which kind each read got (``timestamps``: ``"kernel"``, ``"user"`` or ``"mixed"``), reported
in the client's health. TLS (``https://``) stays on asyncio's ``create_connection`` with
user-space stamps: the TLS layer sits between the socket and the bytes.

Scope, deliberately small: ``POST`` with a body, HTTP/1.1 keep-alive, responses with
``Content-Length``, ``Transfer-Encoding: chunked`` or close-delimited bodies, plain TCP or
TLS (``https://``), one pool of at most ``limit`` connections per (host, port, scheme).
No redirects, proxies, compression or HTTP/2 — a benchmark endpoint needs none of them.
Anything unexpected from the server becomes a :class:`TransportError` for that request.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl as _ssl
from collections import deque
from urllib.parse import urlsplit

# The connection protocol and the kernel-stamped socket live beside this module; the
# constants are imported by name so tests can switch kernel stamps off here
# (monkeypatch rawhttp._SO_TIMESTAMPNS), where the pool reads them.
from core.load.rawhttp_conn import _Conn
from core.load.rawhttp_socket import _ANC_SIZE, _READ_SIZE, _SO_TIMESTAMPNS, _KernelStampedSocket, _numeric_addr
from core.load.transport_api import TransportError


class _RawStream:
    def __init__(self, conn: _Conn, done: asyncio.Future):
        # done: the connection's done_fut for this request (post_stream set it; passed in typed).
        self._c = conn
        self._done = done
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
        await self._done

    async def read_all(self) -> bytes:
        await self._done
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
        # Kernel receive timestamps for plain TCP where the platform has them (module docstring).
        self.kernel_timestamps = _SO_TIMESTAMPNS is not None and _ANC_SIZE > 0 and hasattr(socket.socket, "recvmsg_into")
        self._rbuf = bytearray(_READ_SIZE)
        self._rview = memoryview(self._rbuf)
        self._rbufs = [self._rbuf]
        self._primer: socket.socket | None = None
        self._kernel_reads = 0
        self._user_reads = 0  # reads on the recvmsg path that came without a kernel stamp

    @property
    def timestamps(self) -> str:
        """Which stamps the reads so far carried: "kernel", "user" or "mixed" (some of each).
        The asyncio path (TLS, or no kernel support) stamps in user space and is not counted."""
        if self._kernel_reads and not self._user_reads:
            return "kernel"
        if self._kernel_reads:
            return "mixed"
        return "user"

    async def open(self) -> None:
        self._sem = asyncio.Semaphore(self.limit)
        if self.kernel_timestamps and self._primer is None:
            assert _SO_TIMESTAMPNS is not None  # kernel_timestamps is only set when it is
            # Linux stamps received packets only while some socket asks for it, and the first
            # such socket turns stamping on through a deferred work item: packets in the
            # meantime carry no time. Asking here, before any connection, lets that settle
            # while the pool connects; the socket is kept so it stays on for the whole run.
            try:
                self._primer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self._primer.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            except OSError:
                if self._primer is not None:
                    self._primer.close()
                self._primer = None

    async def close(self) -> None:
        if self._primer is not None:
            self._primer.close()
            self._primer = None
        for c in list(self._all):
            if c.transport is not None:
                c.transport.close()
        self._all.clear()
        self._idle.clear()

    async def _connect(self, key) -> _Conn:
        scheme, host, port = key
        if scheme == "http" and self.kernel_timestamps:
            return await self._connect_stamped(host, port)
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

    async def _connect_stamped(self, host: str, port: int) -> _Conn:
        assert _SO_TIMESTAMPNS is not None  # only called when kernel_timestamps is set
        loop = asyncio.get_running_loop()
        limit = min(self.timeout_s or 30.0, 30.0)
        try:
            async with asyncio.timeout(limit):
                infos = _numeric_addr(host, port) or await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                last: OSError | None = None
                for family, type_, proto, _, addr in infos:
                    sock = socket.socket(family, type_, proto)
                    try:
                        sock.setblocking(False)
                        await loop.sock_connect(sock, addr)
                    except OSError as e:
                        sock.close()
                        last = e
                        continue
                    except BaseException:
                        sock.close()
                        raise
                    break
                else:
                    raise last or OSError(f"no address for {host}")
        except (OSError, asyncio.TimeoutError) as e:
            if isinstance(e, asyncio.TimeoutError):
                raise TransportError(f"cannot connect to {host}:{port}: timed out") from None
            raise TransportError(f"cannot connect to {host}:{port}: {e.strerror or e}") from None
        stamped = True
        try:
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            stamped = False  # reads stay on this path, stamped in user space (and counted so)
        conn = _Conn(self)
        try:
            _KernelStampedSocket(loop, sock, conn, self, stamped)
        except BaseException:
            sock.close()
            raise
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
                found = None
                while idle:
                    c = idle.pop()
                    if not c.closed and c.transport is not None and not c.transport.is_closing():
                        found = c
                        break
                    self._all.discard(c)
                reused = found is not None
                conn = found if found is not None else await self._connect(key)
                conn._reset()
                conn.body = []  # buffer until the caller decides between pump() and read_all()
                conn.headers_fut = loop.create_future()
                conn.done_fut = done = loop.create_future()
                transport = conn.transport
                assert transport is not None, "a connection just opened or found open has its transport"
                transport.write(request)
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
                stream = _RawStream(conn, done)
                if self.timeout_s:
                    # Bound the whole response, not only the headers.
                    timer = loop.call_later(self.timeout_s, conn._fail, "timed out reading the response")
                yield stream
                ok = done.done() and not done.cancelled() and done.exception() is None
            finally:
                if timer is not None:
                    timer.cancel()
                if done.done() and not done.cancelled():
                    done.exception()  # retrieved, so asyncio does not log it
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
