"""Kernel receive timestamps for :class:`core.load.rawhttp.RawTransport` (plain TCP on
Linux): a non-blocking socket with ``SO_TIMESTAMPNS`` read with ``recvmsg`` from a
``loop.add_reader`` callback, each read stamped with the time the kernel received it,
converted to ``perf_counter``. Why and how: :mod:`core.load.rawhttp`'s docstring."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import sys
import time
from typing import Protocol

from core.load.rawhttp_conn import _Conn


class _ReadPool(Protocol):
    """What the socket uses of its RawTransport: the shared receive buffer and the read
    counters (a protocol, so this module need not import rawhttp, which imports it)."""

    _rbufs: list[bytearray]
    _rview: memoryview
    _kernel_reads: int
    _user_reads: int


_clock = time.perf_counter
_wall_ns = time.time_ns

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
    best: tuple[int, float, int] | None = None  # (span, perf_counter, wall) of the closest pair
    for _ in range(3):
        w1 = _wall_ns()
        m = _clock()
        w2 = _wall_ns()
        span = w2 - w1
        if span < 20_000:
            return m, w1 + span // 2
        if best is None or span < best[0]:
            best = (span, m, w1 + span // 2)
    assert best is not None  # three tries ran and none returned, so the first one set it
    return best[1], best[2]


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

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, conn: _Conn, pool: _ReadPool, stamped: bool):
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
