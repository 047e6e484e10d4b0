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
import ipaddress
import socket
import ssl as _ssl
import struct
import sys
import time
from collections import deque
from urllib.parse import urlsplit

from core.load.transport import TransportError

_clock = time.perf_counter
_wall_ns = time.time_ns
_MAX_HEAD = 64 * 1024

# SO_TIMESTAMPNS: Python 3.11's socket module does not export it; 35 is its value on Linux
# (asm-generic and x86; the "old" timespec form, two native longs — 16 bytes on 64-bit).
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35) if sys.platform.startswith("linux") else None
_TIMESPEC = struct.Struct("@ll")
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
# One receive buffer shared by every connection of a transport: reads happen one at a time on
# the loop's thread, and each read's bytes are copied out (small) before the next.
_READ_SIZE = 256 * 1024  # as asyncio's socket transport reads


def _clocks_together() -> tuple[float, int]:
    """(perf_counter, time_ns) read at one moment, as far as user space can tell: the wall
    clock is read on both sides of the monotonic one and the pair kept only when the two wall
    reads are close (< 20 µs), else read again (3 tries, then the closest pair). Read one after
    the other, a preemption between them (milliseconds on a busy machine) would be added to
    every kernel stamp's age and move the stamp that much *earlier* — before the server even
    wrote the bytes (seen in tests/test_load_cadence.py's lower bound on a loaded box)."""
    best = None
    for _ in range(3):
        w1 = _wall_ns()
        m = _clock()
        w2 = _wall_ns()
        span = w2 - w1
        if span < 20_000:
            return m, w1 + span // 2
        if best is None or span < best[0]:
            best = (span, m, w1 + span // 2)
    return best[1], best[2]


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
        # asyncio path (TLS, or no kernel stamps): the stamp is the loop's first sight of the bytes
        self.received(_clock(), data)

    def received(self, t: float, data: bytes):
        """Bytes that arrived at ``t`` (perf_counter; kernel receive time where known)."""
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
        # The chunks' payloads of one read share its stamp, so they go to the parser joined, in
        # one call: the framing is HTTP's business, not the stream's (the parser splits SSE
        # messages itself), and a read often holds several tokens' chunks.
        out: list[bytes] = []
        end = self._unchunk(data, out)
        if out:
            self._deliver(t, out[0] if len(out) == 1 else b"".join(out))
        if end is True:
            self._complete()
        elif end:
            self._fail(end)

    def _unchunk(self, data: bytes, out: list[bytes]) -> bool | str | None:
        """Append ``data``'s chunk payloads to ``out``; True at the last chunk's end, a reason
        on bad framing, None to wait for more."""
        pos, n = 0, len(data)
        while pos < n:
            if self.in_trailer:
                self.chunk_head += data[pos:]
                # trailers end with an empty line; no trailers: just CRLF after the 0 chunk
                return self.chunk_head.startswith(b"\r\n") or b"\r\n\r\n" in self.chunk_head or None
            if self.chunk_left == 0:
                j = data.find(b"\r\n", pos)
                if j < 0:
                    self.chunk_head += data[pos:]
                    return None
                line = self.chunk_head + data[pos:j] if self.chunk_head else data[pos:j]
                self.chunk_head = b""
                pos = j + 2
                try:
                    size = int(line.split(b";", 1)[0] if b";" in line else line, 16)  # int() strips spaces
                except ValueError:
                    return f"bad chunk size line {line[:40]!r}"
                if size == 0:
                    self.in_trailer = True
                    continue
                self.chunk_left = size + 2  # data + CRLF
                continue
            take = min(self.chunk_left, n - pos)
            left = self.chunk_left - take
            self.chunk_left = left
            # Strip the chunk's trailing CRLF (it may be split across reads).
            stop = pos + take - (2 - left if left < 2 else 0)
            if stop > pos:
                out.append(data[pos:stop])
            pos += take
        return None

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


def _numeric_addr(host: str, port: int) -> list | None:
    """getaddrinfo's answer for an IP literal, without a resolver round trip (which on uvloop
    goes through a thread pool) for each of the pool's connections."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.version == 4:
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port))]
    return [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (host, port, 0, 0))]


class _KernelStampedSocket:
    """The part of ``asyncio.Transport`` that :class:`_Conn` uses, over a non-blocking socket
    read with ``recvmsg`` so that each read brings the kernel's receive time along."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, conn: _Conn, pool: "RawTransport", stamped: bool):
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._conn = conn
        self._pool = pool
        self._stamped = stamped  # SO_TIMESTAMPNS accepted; else every read is user-stamped
        self._out = bytearray()  # unsent request bytes (large prompts), flushed when writable
        self._closing = False
        conn.connection_made(self)
        loop.add_reader(self._fd, self._on_readable)

    def get_extra_info(self, name, default=None):
        return self._sock if name == "socket" else default

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes) -> None:
        if self._closing or not data:
            return
        if not self._out:
            try:
                n = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as e:
                self._lost(e)
                return
            if n == len(data):
                return
            data = data[n:]
            self._loop.add_writer(self._fd, self._on_writable)
        self._out += data

    def _on_writable(self) -> None:
        try:
            n = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        del self._out[:n]
        if not self._out:
            self._loop.remove_writer(self._fd)

    def _on_readable(self) -> None:
        pool = self._pool
        try:
            n, anc, _flags, _addr = self._sock.recvmsg_into(pool._rbufs, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        if n == 0:
            self._lost(None)  # EOF: no data, no stamp to count
            return
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(cdata) >= _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack_from(cdata)
                now, wall_ns = _clocks_together()
                age_ns = wall_ns - (sec * 1_000_000_000 + nsec)
                # a REALTIME step backwards would make it negative: keep "now"
                t = now - age_ns * 1e-9 if age_ns > 0 else now
                pool._kernel_reads += 1
                break
        else:
            t = _clock()
            pool._user_reads += 1
        self._conn.received(t, bytes(pool._rview[:n]))

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._detach()
        # As asyncio's transports do: connection_lost comes on a later loop turn.
        self._loop.call_soon(self._conn.connection_lost, None)

    def _lost(self, exc: BaseException | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._detach()
        self._conn.connection_lost(exc)

    def _detach(self) -> None:
        # Unregister before closing, or the loop would poll a dead (or reused) descriptor.
        self._loop.remove_reader(self._fd)
        if self._out:
            self._loop.remove_writer(self._fd)
            self._out.clear()
        self._sock.close()


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
