"""A loopback OpenAI-compatible streaming server with a known cadence, cheap enough to measure a
client against (used by tests/test_load_*.py and bench/client_capacity.py).

    srv = start_cadence_server(ttft=0.050, itl=0.005)          # a subprocess on 127.0.0.1
    ...  # POST {srv.url}/v1/completions or /v1/chat/completions, stream=true
    truth = srv.truth()   # {prompt: {"recv": t, "writes": [t, ...]}}; perf_counter seconds
    srv.stop()

Design, for cost and for truth:

- Raw ``asyncio.Protocol`` with a minimal HTTP/1.1 parser (keep-alive, chunked responses);
  every SSE message is pre-encoded bytes, including its chunk framing, so a token costs one
  heap pop, one ``perf_counter()``, one ``transport.write`` and one heap push.
- One timer drives all streams: token k of a request is due at ``recv + ttft + k·itl``; when
  the timer fires, every due stream is written in one pass (no task per stream).
- **Truth is what the server did**, not the nominal cadence: each write is stamped with
  ``time.perf_counter()`` just before ``transport.write``. On Linux that is CLOCK_MONOTONIC,
  shared by every process, so the client's stamps and these can be subtracted directly.
  Requests are keyed by their prompt text (chat: the last message's content), so tests give
  every request a distinct prompt. ``GET /truth`` returns the log, ``POST /reset`` clears it.
- Runs in its own process so that it never shares an event loop (or the GIL) with the
  client it measures.

Failure modes for the bad-input tests (``mode=``): ``ok``; ``nostream`` (a plain JSON
completion); ``malformed`` (an SSE ``data:`` line that is not JSON); ``broken`` (the
connection closes after 3 tokens); ``nousage`` (no usage chunk); and ``fail_every=N``
(every N-th request gets HTTP 500). ``api_key`` set → 401 without ``Bearer <key>``; a
request for another model than ``model`` → 404 with vLLM's message.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

_clock = time.perf_counter


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


class _Stream:
    __slots__ = ("conn", "n", "k", "writes", "msg", "last", "end", "chat", "mode")

    def __init__(self, conn, n, writes, msg, last, end, mode):
        self.conn = conn
        self.n = n
        self.k = 0
        self.writes = writes
        self.msg = msg
        self.last = last
        self.end = end
        self.mode = mode


class Server:
    def __init__(self, ttft: float, itl: float, model: str, api_key: str | None, mode: str, fail_every: int):
        self.ttft = ttft
        self.itl = itl
        self.model = model
        self.api_key = api_key
        self.mode = mode
        self.fail_every = fail_every
        self.count = 0
        self.heap: list = []
        self.seq = 0
        self.truth: dict[str, dict] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.timer_due = float("inf")
        self.loop = asyncio.get_running_loop()
        common = {"id": "cmpl-cadence", "created": 0, "model": model}
        # Pre-encoded messages: completions and chat, a token, the last token, usage, done.
        self.msgs = {
            "completions": (
                _sse({**common, "object": "text_completion", "choices": [{"index": 0, "text": " tok", "logprobs": None, "finish_reason": None}]}),
                _sse({**common, "object": "text_completion", "choices": [{"index": 0, "text": " end", "logprobs": None, "finish_reason": "length"}]}),
            ),
            "chat": (
                _sse({**common, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": None}]}),
                _sse(
                    {**common, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " end"}, "finish_reason": "length"}]}
                ),
            ),
        }
        self.role_msg = _sse(
            {
                **common,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
            }
        )

    # --- scheduling ---------------------------------------------------------------------
    def add(self, due: float, st: _Stream) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (due, self.seq, st))
        if due < self.timer_due:
            if self.timer is not None:
                self.timer.cancel()
            self.timer_due = due
            self.timer = self.loop.call_later(max(0.0, due - _clock()), self.fire)

    def fire(self) -> None:
        self.timer = None
        self.timer_due = float("inf")
        heap = self.heap
        now = _clock()
        # Serve everything due (a 0.2 ms slack avoids a wake-up for a write due a hair later).
        while heap and heap[0][0] <= now + 0.0002:
            due, _, st = heapq.heappop(heap)
            tr = st.conn.transport
            if tr is None or tr.is_closing():
                continue
            st.k += 1
            if st.mode == "broken" and st.k > 3:
                tr.close()
                continue
            t = _clock()
            st.writes.append(t)
            if st.k >= st.n:
                tr.write(st.last + st.end)
                st.conn.busy = False
            else:
                tr.write(st.msg)
                self.seq += 1
                heapq.heappush(heap, (due + self.itl, self.seq, st))
            now = t
        if heap:
            due = heap[0][0]
            self.timer_due = due
            self.timer = self.loop.call_later(max(0.0, due - _clock()), self.fire)

    # --- requests -----------------------------------------------------------------------
    def handle(self, conn: "_Conn", method: str, path: str, headers: dict, body: bytes) -> None:
        recv = _clock()
        if method == "GET" and path == "/truth":
            return conn.respond(200, json.dumps(self.truth).encode())
        if method == "POST" and path == "/reset":
            self.truth.clear()
            self.count = 0
            return conn.respond(200, b"{}")
        if method == "GET" and path in ("/health", "/v1/health"):
            return conn.respond(200, b"{}")
        if method == "GET" and path == "/v1/models":
            return conn.respond(200, json.dumps({"object": "list", "data": [{"id": self.model, "object": "model"}]}).encode())
        if method != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            return conn.respond(404, b'{"detail":"Not Found"}')
        if self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
            return conn.respond(401, b'{"error":"Unauthorized"}')
        try:
            req = json.loads(body)
        except ValueError:
            return conn.respond(400, b'{"error":{"message":"invalid JSON body","code":400}}')
        if req.get("model") != self.model:
            msg = {"error": {"message": f"The model `{req.get('model')}` does not exist.", "type": "NotFoundError", "param": "model", "code": 404}}
            return conn.respond(404, json.dumps(msg).encode())
        self.count += 1
        if self.fail_every and self.count % self.fail_every == 0:
            return conn.respond(500, b'{"error":{"message":"injected failure","code":500}}')
        chat = path.endswith("chat/completions")
        if chat:
            key = str(req.get("messages", [{}])[-1].get("content", ""))
            n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 16)
        else:
            key = str(req.get("prompt", ""))
            n = int(req.get("max_tokens") or 16)
        n = max(1, n)
        if self.mode == "nostream":
            text = " tok" * n
            payload = {
                "id": "x",
                "object": "text_completion",
                "model": self.model,
                "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1},
            }
            return conn.respond(200, json.dumps(payload).encode())
        conn.start_sse()
        if self.mode == "malformed":
            conn.transport.write(_chunk(b"data: {this is not json\n\n") + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            conn.busy = False
            return
        writes: list[float] = []
        self.truth[key] = {"recv": recv, "writes": writes}
        if chat:
            conn.transport.write(self.role_msg)  # role-only first chunk, as vLLM sends
        msg, last = self.msgs["chat" if chat else "completions"]
        end = b""
        if self.mode != "nousage":
            end += _sse(
                {
                    "id": "cmpl-cadence",
                    "object": "text_completion",
                    "model": self.model,
                    "choices": [],
                    "usage": {"prompt_tokens": len(key.split()) or 1, "completion_tokens": n, "total_tokens": n + 1},
                }
            )
        end += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.add(recv + self.ttft, _Stream(conn, n, writes, msg, last, end, self.mode))


class _Conn(asyncio.Protocol):
    def __init__(self, server: Server):
        self.server = server
        self.transport = None
        self.buf = b""
        self.busy = False

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc):
        self.transport = None

    def data_received(self, data: bytes):
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.buf[:i].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0") or 0)
            if len(self.buf) < i + 4 + n:
                return
            body = self.buf[i + 4 : i + 4 + n]
            self.buf = self.buf[i + 4 + n :]
            parts = head[0].split(" ")
            method, path = parts[0], parts[1] if len(parts) > 1 else "/"
            self.server.handle(self, method, path.split("?")[0], headers, body)

    def respond(self, status: int, body: bytes, ctype: str = "application/json"):
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 500: "Internal Server Error"}.get(status, "X")
        self.transport.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (status, reason.encode(), ctype.encode(), len(body), body)
        )

    def start_sse(self):
        self.busy = True
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n"
        )


async def serve(host: str, port: int, ready, **kw) -> None:
    server = Server(**kw)
    srv = await asyncio.get_running_loop().create_server(lambda: _Conn(server), host, port, backlog=4096, reuse_address=True)
    ready(srv.sockets[0].getsockname()[1])
    async with srv:
        await srv.serve_forever()


@dataclass
class CadenceServer:
    url: str
    proc: subprocess.Popen

    def truth(self) -> dict[str, dict]:
        with urllib.request.urlopen(f"{self.url}/truth", timeout=60) as r:
            return json.loads(r.read())

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/reset", data=b"", method="POST"), timeout=10).read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_cadence_server(
    ttft: float = 0.050,
    itl: float = 0.005,
    *,
    model: str = "cadence",
    api_key: str | None = None,
    mode: str = "ok",
    fail_every: int = 0,
    use_uvloop: bool = False,
) -> CadenceServer:
    """Start the server in a subprocess on 127.0.0.1 and a free port; returns once it listens."""
    root = Path(__file__).resolve().parents[2]
    # Run by path: the name `tests` is taken in site-packages (see support/__init__.py).
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--ttft",
        str(ttft),
        "--itl",
        str(itl),
        "--model",
        model,
        "--mode",
        mode,
        "--fail-every",
        str(fail_every),
    ]
    if use_uvloop:
        cmd.append("--uvloop")
    env = dict(os.environ)
    if api_key:
        env["CADENCE_API_KEY"] = api_key  # not on the command line, where ps would show it
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline().strip()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"cadence server did not start: {line} {proc.stderr.read()[-2000:]}")
    return CadenceServer(url=f"http://127.0.0.1:{int(line.split()[1])}", proc=proc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft", type=float, default=0.050)
    ap.add_argument("--itl", type=float, default=0.005)
    ap.add_argument("--model", default="cadence")
    ap.add_argument("--mode", default="ok", choices=["ok", "nostream", "malformed", "broken", "nousage"])
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--uvloop", action="store_true")
    a = ap.parse_args()

    def ready(port):
        print(f"PORT {port}", flush=True)

    if a.uvloop:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(
        serve(
            "127.0.0.1",
            a.port,
            ready,
            ttft=a.ttft,
            itl=a.itl,
            model=a.model,
            api_key=os.environ.get("CADENCE_API_KEY"),
            mode=a.mode,
            fail_every=a.fail_every,
        )
    )


if __name__ == "__main__":
    main()
