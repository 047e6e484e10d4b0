"""One HTTP/1.1 connection of :class:`core.load.rawhttp.RawTransport`: an
``asyncio.Protocol`` that parses the response head and body (Content-Length, chunked or
close-delimited) and hands each stamped read to the caller's ``feed``. The transport that
moves its bytes is asyncio's (TLS) or :mod:`core.load.rawhttp_socket`'s (kernel stamps)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from core.load.transport_api import TransportError

_clock = time.perf_counter
_MAX_HEAD = 64 * 1024


class _Conn(asyncio.Protocol):
    """One connection; carries one request/response at a time."""

    def __init__(self, pool: object):
        # pool: the RawTransport that owns this connection (not imported: rawhttp imports us).
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
