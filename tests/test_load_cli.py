"""`knee bench`: bad input gives one clear line and exit 2 (never a traceback); a good run
prints vllm bench serve keys."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.cadence_server import start_cadence_server
from tui.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def server():
    srv = start_cadence_server(0.005, 0.001, api_key="k-123")
    yield srv
    srv.stop()


def bench(capsys, *argv):
    rc = main(["bench", "--no-progress", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc, err, *needles):
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.startswith("knee: error:")]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in err


def test_good_run_json_has_vllm_keys(server, capsys):
    rc, out, err = bench(
        capsys,
        "--url",
        server.url,
        "--model",
        "cadence",
        "--api-key",
        "k-123",
        "--concurrency",
        "2",
        "--num-prompts",
        "6",
        "--input-len",
        "16",
        "--output-len",
        "5",
        "--json",
    )
    assert rc == 0, err
    res = json.loads(out)
    for key in (
        "completed",
        "failed",
        "duration",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "request_goodput",
        "mean_ttft_ms",
        "median_tpot_ms",
        "p99_itl_ms",
        "std_e2el_ms",
        "p99_chunk_itl_ms",
    ):
        assert key in res, key
    assert res["completed"] == 6 and res["total_output_tokens"] == 30
    assert "k-123" not in out and "k-123" not in err


def test_result_file_and_detailed_arrays(server, capsys, tmp_path):
    f = tmp_path / "res.json"
    rc, out, err = bench(
        capsys,
        "--url",
        server.url + "/v1",
        "--model",
        "cadence",
        "--api-key",
        "k-123",
        "--num-prompts",
        "3",
        "--input-len",
        "8",
        "--output-len",
        "4",
        "--result-file",
        str(f),
        "--save-detailed",
        "--api",
        "chat",
    )
    assert rc == 0, err
    assert "Successful requests:" in out
    res = json.loads(f.read_text())
    assert res["output_lens"] == [4, 4, 4] and len(res["ttfts"]) == 3 and res["errors"] == ["", "", ""]


def test_unreachable_url(capsys):
    rc, out, err = bench(capsys, "--url", "http://127.0.0.1:9", "--model", "m")
    assert_one_line_error(rc, err, "cannot reach http://127.0.0.1:9", "is the server running")


def test_missing_api_key_is_401(server, capsys):
    rc, out, err = bench(capsys, "--url", server.url, "--model", "cadence")
    assert_one_line_error(rc, err, "HTTP 401", "--api-key")


def test_wrong_api_key(server, capsys):
    rc, out, err = bench(capsys, "--url", server.url, "--model", "cadence", "--api-key", "nope")
    assert_one_line_error(rc, err, "HTTP 401", "rejected")
    assert "nope" not in err


def test_wrong_model_lists_served_models(server, capsys):
    rc, out, err = bench(capsys, "--url", server.url, "--model", "gpt-9", "--api-key", "k-123")
    assert_one_line_error(rc, err, "model 'gpt-9' is not served", "served: cadence")


@pytest.mark.parametrize("mode, needle", [("nostream", "did not stream"), ("malformed", "malformed SSE")])
def test_server_that_does_not_stream_or_breaks_sse(capsys, mode, needle):
    srv = start_cadence_server(0.005, 0.001, mode=mode)
    try:
        rc, out, err = bench(capsys, "--url", srv.url, "--model", "cadence")
    finally:
        srv.stop()
    assert_one_line_error(rc, err, needle)


def test_missing_dataset_file(server, capsys, tmp_path):
    rc, out, err = bench(capsys, "--url", server.url, "--model", "cadence", "--dataset", "sharegpt", "--dataset-path", str(tmp_path / "nope.json"))
    assert_one_line_error(rc, err, "does not exist")


@pytest.mark.parametrize(
    "content, needle",
    [("{not json", "not valid JSON"), ('[{"conversations": []}]', "no usable conversations"), ('"just a string"', "not a list")],
)
def test_malformed_dataset_file(server, capsys, tmp_path, content, needle):
    f = tmp_path / "bad.json"
    f.write_text(content)
    rc, out, err = bench(capsys, "--url", server.url, "--model", "cadence", "--dataset", "sharegpt", "--dataset-path", str(f))
    assert_one_line_error(rc, err, needle)


def test_sharegpt_file_runs(server, capsys, tmp_path):
    f = tmp_path / "sg.json"
    conv = [{"conversations": [{"from": "human", "value": f"question {i} about tokens"}, {"from": "gpt", "value": "a b c d"}]} for i in range(5)]
    f.write_text(json.dumps(conv))
    rc, out, err = bench(
        capsys,
        "--url",
        server.url,
        "--model",
        "cadence",
        "--api-key",
        "k-123",
        "--dataset",
        "sharegpt",
        "--dataset-path",
        str(f),
        "--num-prompts",
        "5",
        "--json",
    )
    assert rc == 0, err
    res = json.loads(out)
    assert res["completed"] == 5 and res["total_output_tokens"] == 5 * 4  # reply length (word fallback)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--model", "m"], "needs a target"),
        (["--url", "127.0.0.1:8000", "--model", "m"], "must start with http"),
        (["--url", "http://x", "--model", "m", "--concurrency", "0"], "--concurrency must be at least 1"),
        (["--url", "http://x", "--model", "m", "--request-rate", "-1"], "--request-rate must be positive"),
        (["--url", "http://x", "--model", "m", "--goodput", "ttft<fast"], "constraint"),
        (["--url", "http://x", "--model", "m", "--dataset", "shared-prefix"], "--prefix-len"),
        (["--url", "http://x", "--model", "m", "--inference-component", "ic"], "pass --sagemaker-endpoint"),
    ],
)
def test_bad_flags(capsys, argv, needle):
    rc, out, err = bench(capsys, *argv)
    assert_one_line_error(rc, err, needle)


def test_installed_command_prints_no_traceback():
    # The real entry point, in a fresh process: unreachable URL -> exit 2, one line.
    p = subprocess.run(
        [sys.executable, "-m", "tui", "bench", "--url", "http://127.0.0.1:9", "--model", "m", "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert p.stderr.count("knee: error:") == 1


def test_lengths_from_sends_the_files_lengths(server, capsys, tmp_path):
    """--lengths-from: random prompts at the lengths of the user's own requests; the result
    counts exactly the file's answer lengths (each held with ignore_eos)."""
    log = tmp_path / "usage.jsonl"
    log.write_text("".join(json.dumps({"prompt_tokens": 20 + i, "completion_tokens": 3 + i}) + "\n" for i in range(4)))
    common = ["--url", server.url, "--model", "cadence", "--api-key", "k-123", "--concurrency", "2", "--num-prompts", "8", "--seed", "1"]
    rc, out, err = bench(capsys, *common, "--lengths-from", str(log), "--json", "--save-detailed")
    assert rc == 0, err
    res = json.loads(out)
    assert res["completed"] == 8 and set(res["output_lens"]) <= {3, 4, 5, 6} and len(set(res["output_lens"])) > 1
    rc, _, err = bench(capsys, *common, "--lengths-from", str(log), "--output-len", "5")
    assert_one_line_error(rc, err, "--output-len and --lengths-from both set the lengths")
