"""A loopback SageMaker runtime for endpoints that moto created.

moto 5.2.5 has no ``InvokeEndpointWithResponseStream``; like the fake in
``tests/test_load_sagemaker.py`` this one speaks the real wire protocol (boto3 posts to
``/endpoints/{name}/invocations-response-stream`` and reads ``application/vnd.amazon.eventstream``
frames with CRCs). What it adds: it answers only for endpoints (and inference components)
that exist in the moto server running in the same process (``exists(endpoint, ic)`` says
why not), it speaks both bodies knee sends (LMI's ``inputs`` → jsonlines tokens; OpenAI
``prompt``/``messages`` → SSE, the deploy smoke test's chat included), and its per-token time
grows with the requests in flight (``itl_s * (1 + inflight / knee)``), so a load actually
loads it. Point boto3 at it with ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``.
"""

from __future__ import annotations

import json
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


def event_frame(payload: bytes, kind: str = "PayloadPart", message_type: str = "event") -> bytes:
    hdrs = b""
    name_key = ":event-type" if message_type == "event" else ":exception-type"
    for k, v in ((name_key, kind), (":content-type", "application/octet-stream"), (":message-type", message_type)):
        kb, vb = k.encode(), v.encode()
        hdrs += bytes([len(kb)]) + kb + b"\x07" + struct.pack(">H", len(vb)) + vb
    total = 12 + len(hdrs) + len(payload) + 4
    prelude = struct.pack(">II", total, len(hdrs))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    msg = prelude + hdrs + payload
    return msg + struct.pack(">I", zlib.crc32(msg) & 0xFFFFFFFF)


class RuntimeFake:
    def __init__(self, exists: Callable[[str, str | None], str | None], itl_s: float = 0.001, knee: int = 8):
        self.exists = exists
        self.itl_s = itl_s
        self.knee = knee
        self.inflight = 0
        self.lock = threading.Lock()
        self.invocations: list[dict] = []  # endpoint, inference_component, kind (lmi|openai), max_tokens
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _chunk(self, data: bytes):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _error(self, code: int, kind: str, message: str):
                msg = json.dumps({"message": message}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("x-amzn-ErrorType", kind)
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                parts = self.path.strip("/").split("/")
                if len(parts) != 3 or parts[2] != "invocations-response-stream":
                    return self._error(404, "UnknownOperationException", self.path)
                ic = self.headers.get("X-Amzn-SageMaker-Inference-Component")
                why = fake.exists(parts[1], ic)
                if why:
                    return self._error(400, "ValidationError", why)
                req = json.loads(body)
                lmi = "inputs" in req
                n = int(req["parameters"]["max_new_tokens"] if lmi else req.get("max_tokens") or 4)
                with fake.lock:
                    fake.invocations.append({"endpoint": parts[1], "inference_component": ic, "kind": "lmi" if lmi else "openai", "max_tokens": n})
                    fake.inflight += 1
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/vnd.amazon.eventstream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    chat = "messages" in req
                    for k in range(n):
                        time.sleep(fake.itl_s * (1 + fake.inflight / fake.knee))
                        if lmi:
                            line = {"token": {"id": 7, "text": f" t{k}", "special": False}}
                            if k == n - 1:
                                line.update(generated_text="...", details={"finish_reason": "length", "generated_tokens": n})
                            self._chunk(event_frame(json.dumps(line).encode() + b"\n"))
                        else:
                            choice = {"index": 0, "delta": {"content": f" t{k}"}} if chat else {"index": 0, "text": f" t{k}"}
                            self._chunk(event_frame(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"))
                    if not lmi:
                        self._chunk(event_frame(b"data: [DONE]\n\n"))
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (an interrupted run)
                finally:
                    with fake.lock:
                        fake.inflight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def moto_exists(ics: dict, account: str = "123456789012", region: str = "us-east-1"):
    """``exists`` for endpoints in the in-process moto server (and the test's IC dict)."""

    def exists(endpoint: str, ic: str | None) -> str | None:
        from moto.sagemaker.models import sagemaker_backends

        if endpoint not in sagemaker_backends[account][region].endpoints:
            return f"Endpoint {endpoint} of account {account} not found."
        if ic is not None and ics.get(ic, {}).get("InferenceComponentStatus") != "InService":
            return f"Inference component {ic} not in service."
        return None

    return exists
