"""What the streaming client and every transport agree on: the :class:`Transport` and
:class:`Stream` protocols and :class:`TransportError`. Its own module so that the
transports (``transport``'s library-backed ones, ``rawhttp``) import it and not each
other: ``transport.make_transport`` picks ``rawhttp``, and ``rawhttp`` needs only this."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol


class TransportError(Exception):
    """Connection-level failure (refused, reset, timed out); the message is user-readable."""


class Stream(Protocol):
    status: int
    content_type: str
    headers_time: float | None  # perf_counter when the headers arrived, if the transport knows

    async def pump(self, feed: Callable[[float, bytes], bool]) -> None:
        """Call ``feed(arrival_perf_counter, data)`` for every piece of the body, in order,
        until it returns True or the body ends."""
        ...

    async def read_all(self) -> bytes: ...


class Transport(Protocol):
    name: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def post_stream(self, url: str, body: bytes, headers: dict[str, str]) -> contextlib.AbstractAsyncContextManager[Stream]: ...
