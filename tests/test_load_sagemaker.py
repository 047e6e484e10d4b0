"""SageMaker target against a loopback fake of the SageMaker runtime.

moto 5.2.5 implements ``InvokeEndpoint`` but not ``InvokeEndpointWithResponseStream``, so the
fake here speaks the real wire protocol instead: boto3 (real botocore, SigV4 and all) posts to
``/endpoints/{name}/invocations-response-stream`` on 127.0.0.1 and reads an
``application/vnd.amazon.eventstream`` body of ``PayloadPart`` events (prelude, headers,
payload, CRC32s), written with a known cadence. Formats: the vLLM container's SSE (with
messages split across parts at awkward places) and LMI's jsonlines.
"""

import json
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.errors import BadInput
from core.load.datasets import Prompt
from core.load.runner import run_load_sync
from core.load.sagemaker import SageMakerTarget
from core.spec import LoadPoint

TTFT, ITL = 0.020, 0.004


def _event(payload: bytes, kind: str = "PayloadPart", message_type: str = "event", ctype: str = "application/octet-stream") -> bytes:
    hdrs = b""
    name_key = ":event-type" if message_type == "event" else ":exception-type"
    for k, v in ((name_key, kind), (":content-type", ctype), (":message-type", message_type)):
        kb, vb = k.encode(), v.encode()
        hdrs += bytes([len(kb)]) + kb + b"\x07" + struct.pack(">H", len(vb)) + vb
    total = 12 + len(hdrs) + len(payload) + 4
    prelude = struct.pack(">II", total, len(hdrs))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    msg = prelude + hdrs + payload
    return msg + struct.pack(">I", zlib.crc32(msg))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fmt = "vllm"
    fail_mid_stream = False
    seen_bodies: list = []
    seen_components: list = []  # the inference-component header of each invocation (None: none)
    writes: dict = {}  # prompt -> perf_counter of each token's write (the truth)

    def log_message(self, *a):
        pass

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        parts = self.path.strip("/").split("/")
        if len(parts) != 3 or parts[2] != "invocations-response-stream":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if parts[1] != "good":
            msg = json.dumps({"message": f"Endpoint {parts[1]} of account 123456789012 not found."}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("x-amzn-ErrorType", "ValidationError:http://internal.amazon.com/coral/com.amazon.sagemaker/")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        req = json.loads(body)
        type(self).seen_bodies.append(req)
        type(self).seen_components.append(self.headers.get("X-Amzn-SageMaker-Inference-Component"))
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-Amzn-Invoked-Production-Variant", "AllTraffic")
        self.end_headers()
        start = time.perf_counter()
        stamps = type(self).writes.setdefault(req.get("inputs") or req.get("prompt"), [])
        if self.fmt == "lmi":
            n = req["parameters"]["max_new_tokens"]
            for k in range(n):
                _sleep_until(start + TTFT + k * ITL)
                line = {"token": {"id": 7, "text": f" t{k}", "log_prob": -0.5, "special": False}}
                if k == n - 1:
                    line.update(generated_text="...", details={"finish_reason": "length", "generated_tokens": n})
                stamps.append(time.perf_counter())
                self._chunk(_event(json.dumps(line).encode() + b"\n"))
        else:
            n = req["max_tokens"]
            for k in range(n):
                _sleep_until(start + TTFT + k * ITL)
                if self.fail_mid_stream and k == 2:
                    err = json.dumps({"Message": "model crashed", "ErrorCode": "ModelError"}).encode()
                    self._chunk(_event(err, kind="ModelStreamError", message_type="exception", ctype="application/json"))
                    break
                msg = (
                    b"data: "
                    + json.dumps({"choices": [{"index": 0, "text": f" t{k}", "finish_reason": "length" if k == n - 1 else None}]}).encode()
                    + b"\n\n"
                )
                # split each SSE message across two payload parts at an awkward place
                cut = len(msg) // 3
                stamps.append(time.perf_counter())
                self._chunk(_event(msg[:cut]))
                self._chunk(_event(msg[cut:]))
            else:
                usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}}\n\ndata: [DONE]\n\n' % (n, n + 3)
                self._chunk(_event(usage))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _sleep_until(t):
    d = t - time.perf_counter()
    if d > 0:
        time.sleep(d)


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)

    def start(fmt="vllm", fail_mid_stream=False):
        handler = type("H", (_Handler,), {"fmt": fmt, "fail_mid_stream": fail_mid_stream, "seen_bodies": [], "seen_components": [], "writes": {}})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}", handler

    servers = []
    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def prompts(n, osl):
    return [Prompt(f"q{i}", 2, osl) for i in range(n)]


@pytest.mark.parametrize("fmt", ["vllm", "lmi"])
def test_streams_from_sagemaker_formats(fake, fmt):
    url, handler = fake(fmt)
    t = SageMakerTarget("good", model="m", fmt=fmt, endpoint_url=url, region="us-east-1")
    r = run_load_sync(t, prompts(8, 10), LoadPoint(concurrency=4))
    s = r.summary
    assert (s["completed"], s["failed"]) == (8, 0), [x.error for x in r.records]
    assert s["total_output_tokens"] == 80
    true_tpot = []
    for rec in r.records:
        assert len(rec.chunk_times) == 10
        truth = handler.writes[f"q{rec.index}"]
        stamps = [c + r.t0 for c in rec.chunk_times]
        # causality: no token is seen before the server wrote it (same clock, same process)
        assert all(c >= w - 1e-4 for c, w in zip(stamps, truth))
        true_tpot.append((truth[-1] - truth[0]) / 9)
    # TPOT from token counts tracks what the server really did (threads: a loose bound)
    assert s["mean_tpot_ms"] == pytest.approx(1000 * sum(true_tpot) / len(true_tpot), rel=0.5)
    assert set(handler.seen_components) == {None}  # no component asked for, none named
    body = handler.seen_bodies[0]
    if fmt == "lmi":
        assert body["parameters"]["max_new_tokens"] == 10 and body["inputs"].startswith("q")
    else:
        assert body["max_tokens"] == 10 and body["stream"] is True and body["ignore_eos"] is True


def test_model_stream_error_is_a_request_error(fake):
    url, _ = fake("vllm", fail_mid_stream=True)
    t = SageMakerTarget("good", fmt="vllm", endpoint_url=url, region="us-east-1")
    r = run_load_sync(t, prompts(3, 6), LoadPoint(concurrency=3))
    assert r.summary["failed"] == 3
    assert all("ModelStreamError" in rec.error or "model crashed" in rec.error for rec in r.records), [x.error for x in r.records]


def test_missing_endpoint_is_bad_input(fake):
    url, _ = fake("vllm")
    t = SageMakerTarget("nope", fmt="vllm", endpoint_url=url, region="us-east-1")
    import asyncio

    with pytest.raises(BadInput, match="nope.*not found"):
        asyncio.run(t.preflight())
    # during a run it is a per-request error, never a crash
    r = run_load_sync(t, prompts(2, 4), LoadPoint(concurrency=2))
    assert r.summary["failed"] == 2 and all("ValidationError" in x.error for x in r.records)


def test_knee_bench_invokes_an_inference_component(fake, capsys, monkeypatch):
    # What `knee deploy apply` prints for an endpoint with inference components, run as is:
    # every invocation names the component (boto3 sends it as a header).
    from tui.cli import main

    url, handler = fake("lmi")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", url)  # botocore's per-service endpoint variable
    rc = main(
        [
            "bench",
            "--no-progress",
            "--json",
            "--sagemaker-endpoint",
            "good",
            "--inference-component",
            "knee-ic-1",
            "--sagemaker-format",
            "lmi",
            "--region",
            "us-east-1",
            "--model",
            "m",
            "--concurrency",
            "2",
            "--num-prompts",
            "4",
            "--input-len",
            "8",
            "--output-len",
            "5",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert json.loads(out)["completed"] == 4
    assert handler.seen_components and set(handler.seen_components) == {"knee-ic-1"}
