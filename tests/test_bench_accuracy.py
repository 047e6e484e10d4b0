"""The accuracy benches (``bench/accuracy.py``, ``bench/sim_accuracy.py``) on a few rows in
the schema of ``shared/calibration/measurements.jsonl``: a row they cannot predict (an
``online-concurrency`` row whose concurrency is null, an ``online-rate`` row without a rate,
an unknown mode) is skipped with its reason and the rest still run; ``--json`` writes exactly
one JSON document on stdout, the summary inside it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.published_rows import GOOD, row as _row

ROOT = Path(__file__).resolve().parents[1]

ROWS = [
    _row("no-conc", concurrency=None),
    GOOD,
    _row("no-rate", mode="online-rate", concurrency=None, request_rate=None),
    _row("bad-mode", mode="warp-speed"),
    {**GOOD, "id": "no-config", "model": "acme/unknown-model-7b"},
    # Rows whose server cannot be built: each is skipped with its reason, none stops the bench.
    {**GOOD, "id": "bad-precision", "precision": "int3"},
    {**GOOD, "id": "bad-gpu", "gpu": "MI300X"},
    {**GOOD, "id": "bad-tp", "tp": 1.5},
    {**GOOD, "id": "bad-len", "workload": {**GOOD["workload"], "output_len": 0}},
    {**GOOD, "id": "no-metrics", "metrics": None},
]
REASONS = {
    "no-conc": "online-concurrency row without a concurrency",
    "no-rate": "online-rate row without a request_rate",
    "bad-mode": "unknown mode 'warp-speed'",
    "no-config": "no bundled config for acme/unknown-model-7b",
    "bad-precision": "unknown precision 'int3'",
    "bad-gpu": "unknown GPU 'MI300X'",
    "bad-tp": "tp 1.5 is not a positive integer",
    "bad-len": "workload output_len 0 is not a positive number",
    "no-metrics": "no metrics object",
}


@pytest.fixture
def rows_path(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return p


def test_rows_names_what_a_row_lacks():
    from bench.rows import unpredictable

    assert unpredictable(GOOD) is None
    assert unpredictable(_row("x", concurrency=None)) == "online-concurrency row without a concurrency (null)"
    assert "not a positive number" in unpredictable(_row("x", concurrency="many"))
    assert "not a positive number" in unpredictable(_row("x", concurrency=0))
    assert unpredictable(_row("x", mode="offline-max-throughput", concurrency=None)) is None
    assert unpredictable({**GOOD, "workload": None}) == "unknown mode None"


def test_a_row_without_gpu_peer_to_peer_all_reduces_through_the_host():
    from bench.rows import gpu_of

    a100 = {**GOOD, "gpu": "A100-80GB", "tp": 2, "num_gpus": 2}
    assert gpu_of(a100).interconnect == "nvlink"
    assert gpu_of({**a100, "gpu_p2p": False}).interconnect == "pcie-host"


def test_accuracy_skips_rows_it_cannot_predict_and_goes_on(rows_path, capsys):
    from bench import accuracy

    assert accuracy.main([str(rows_path), "--json"]) == 0
    out = capsys.readouterr().out
    rep = json.loads(out)  # the whole of stdout is one document
    skipped = {s["id"]: s["reason"] for s in rep["skipped"]}
    assert set(skipped) == set(REASONS)
    for id_, why in REASONS.items():
        assert why in skipped[id_]
    assert [r["id"] for r in rep["rows"]] == ["good-1"] and rep["rows"][0]["knee"]["req_per_s"] > 0
    s = rep["summary"]
    assert s["rows"] == len(ROWS) and s["predicted"] == 1 and s["skipped"] == len(REASONS)
    assert "SUMMARY" in s["line"] and f"on 1 rows ({len(REASONS)} skipped)" in s["line"]

    assert accuracy.main([str(rows_path)]) == 0
    text = capsys.readouterr().out
    for id_, why in REASONS.items():
        assert any(line.strip().startswith(f"{id_}: ") and why in line for line in text.splitlines()), id_
    assert text.rstrip().splitlines()[-1].startswith("SUMMARY")
    assert accuracy.main([str(rows_path), "--quiet"]) == 0
    assert "no-conc: online-concurrency row without a concurrency" in capsys.readouterr().out


def test_sim_accuracy_skips_rows_it_cannot_simulate_and_goes_on(rows_path, capsys):
    from bench import sim_accuracy

    assert sim_accuracy.main([str(rows_path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    skipped = {s["id"]: s["reason"] for s in rep["skipped"]}
    # bad-mode is not an online row: the simulator's bench leaves it out before anything else.
    for id_ in set(REASONS) - {"bad-mode"}:
        assert REASONS[id_] in skipped[id_]
    assert [r["id"] for r in rep["rows"]] == ["good-1"] and rep["simulated"] == 1
    assert rep["rows"][0]["simulated"]["req_per_s"] > 0
    assert rep["median_ape"]["req_per_s_n"] == 1

    assert sim_accuracy.main([str(rows_path)]) == 0
    text = capsys.readouterr().out
    assert "no-conc     skipped: online-concurrency row without a concurrency (null)" in text
    assert f"1 simulated, {len(REASONS) - 1} skipped" in text


@pytest.mark.parametrize("module", ["bench.accuracy", "bench.sim_accuracy"])
def test_json_stdout_is_one_document_and_a_missing_file_is_one_line(module, rows_path, tmp_path):
    p = subprocess.run([sys.executable, "-m", module, str(rows_path), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)  # fails on anything printed before or after the document
    assert {s["id"] for s in doc["skipped"]} >= {"no-conc", "no-rate"}
    p = subprocess.run([sys.executable, "-m", module, str(tmp_path / "none.jsonl"), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "does not exist" in p.stderr and "Traceback" not in p.stderr


def test_accuracy_reports_only_the_sources_asked_for(rows_path, capsys):
    """--sources keeps the rows whose id prefix is listed (the cases issue 11 names), so a
    subset's figures re-run from the command line."""
    from bench import accuracy

    assert accuracy.main([str(rows_path), "--json", "--sources", "good"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rep["rows"]] == ["good-1"] and rep["skipped"] == [] and rep["summary"]["rows"] == 1


def test_a_row_whose_source_gives_no_prompt_length_is_marked_and_summed_apart(tmp_path, capsys):
    """A source that does not publish its prompt length gets ShareGPT's mean: the row is
    predicted, says so, and the median over rows with published lengths leaves it out."""
    from bench import accuracy

    unknown = {**GOOD, "id": "nolen-1", "workload": {**GOOD["workload"], "input_len": None}}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(unknown) + "\n")
    assert accuracy.main([str(path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    marks = {r["id"]: r["assumed_lengths"] for r in rep["rows"]}
    assert marks == {"good-1": [], "nolen-1": ["input"]}
    s = rep["summary"]
    assert s["assumed_lengths"] == 1 and s["knee"]["output_tok_per_s_n"] == 2 and s["knee_published_lengths"]["output_tok_per_s_n"] == 1
    assert accuracy.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "input length not published: ShareGPT's mean assumed" in out and "rows with published lengths" in out
    from bench import sim_accuracy

    assert sim_accuracy.main([str(path), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert {r["id"]: r["assumed_lengths"] for r in sim["rows"]} == marks and sim["assumed_lengths"] == 1
    assert sim["median_ape_published_lengths"]["output_tok_per_s_n"] == 1


def test_a_cycled_prompt_pool_is_cached_only_while_the_cache_holds_it():
    from bench.rows import pool_resident, prompt_pool, workload

    # The previous request of a prompt is still running: a hit, however small the cache.
    assert pool_resident(100, running=128, input_len=1000, output_len=1000, kv_tokens=0)
    # Few running, room to spare: the pool's 100 prompts stay in the free blocks.
    assert pool_resident(100, running=10, input_len=600, output_len=250, kv_tokens=100_000)
    # The running batch fills the cache: the pool cycles through more than is left (LRU misses).
    assert not pool_resident(100, running=65, input_len=1083, output_len=1448, kv_tokens=119_000)

    perf = _row("perf", mode="online-rate", concurrency=None, request_rate=4.0)
    perf["notes"] = "inference-perf vs live vLLM; open-loop constant-rate arrivals"
    assert prompt_pool(perf) == 100 and prompt_pool(GOOD) == 0
    isl = perf["workload"]["input_len"]
    cached, missed = workload(perf, True), workload(perf, False)
    assert cached.prepended_len == int(isl) - 1  # the whole prompt but its last token
    assert missed.prepended_len == 100  # the system prompt alone
    assert workload(GOOD).prepended_len == 0


def test_a_one_prompt_vllm_benchmark_measures_the_prompt_its_test_run_cached():
    from bench.rows import first_prompt_cached, workload

    one = _row("one", mode="single-request", concurrency=None)
    one["notes"] = "Client: vllm benchmarks/benchmark_serving.py --dataset-name random, 1 prompts, request rate inf"
    one["engine_version"] = "0.10.1.1"
    assert first_prompt_cached(one)
    assert workload(one).prepended_len == int(one["workload"]["input_len"]) - 1
    assert not first_prompt_cached({**one, "notes": one["notes"].replace("1 prompts", "50 prompts")})  # one request of 50
    assert not first_prompt_cached({**one, "engine_version": "0.6.3"})  # V0: no prefix caching by default
    assert not first_prompt_cached({**one, "notes": "llmperf, 1 prompts"})  # a client without the test run


def test_a_kv_cache_the_server_logged_sizes_the_predicted_server():
    """A row quoting vLLM's "Available KV cache memory: 6.77 GiB" (and no utilization) is
    predicted with that cache, not the one vLLM's default 0.9 would leave (about 2 GiB for
    Qwen2-72B at TP2 on A100s); a stated utilization wins over the log."""
    from bench import rows as R
    from bench.knee_predict import _predict

    notes = "2 GPUs, available KV cache memory 6.77 GiB per GPU. 30 prompts, request rate inf"
    row = {
        **GOOD,
        "id": "kv-1",
        "model": "Qwen/Qwen2.5-72B-Instruct",
        "gpu": "A100-80GB",
        "num_gpus": 2,
        "tp": 2,
        "engine_version": "0.10.1",
        "notes": notes,
        "workload": {**GOOD["workload"], "mode": "offline-max-throughput", "concurrency": None, "input_len": 1024.0, "output_len": 1024.0},
    }
    arch = R.resolve(row)[2]
    _, p, cfg = _predict(row, arch, R.gpu_of(row), True)
    assert abs(p.memory(cfg).kv_bytes / 2**30 - 6.77) < 0.01
    default = {**row, "notes": "2 GPUs. 30 prompts, request rate inf"}
    _, p0, cfg0 = _predict(default, arch, R.gpu_of(default), True)
    assert p0.memory(cfg0).kv_bytes / 2**30 < 3.0
    stated = {**row, "notes": notes + ", gpu_memory_utilization=0.92"}
    assert R.stated_kv_bytes(stated["notes"]) is None


def test_a_stated_length_spread_is_the_clients_distribution():
    """Random lengths a source states a spread for are drawn as its client drew them; with
    fixed lengths a closed loop of equal requests stays in lockstep in the simulator."""
    from bench.rows import lengths

    row = {**GOOD, "source": "https://example.org/post", "workload": {**GOOD["workload"], "dataset": "random"}}
    spread = lengths({**row, "notes": "each with ~20k input tokens (+-15% variance)"}, 20000.0, "input")
    assert (spread.kind, spread.range_ratio, spread.upper) == ("uniform", 0.15, 23000)
    up_to = lengths({**row, "notes": "(random_range_ratio=0.0: lengths drawn uniformly up to the configured length)"}, 500.0, "output")
    assert (up_to.kind, up_to.range_ratio, up_to.upper) == ("uniform", 1.0, 1000)
    assert lengths({**row, "notes": "fixed 1024 tokens"}, 1024.0, "input").kind == "fixed"


def test_a_closed_loop_of_spread_lengths_does_not_queue_in_waves():
    """The vllmfp8kv case: 20k-token prompts at concurrency 8 on an H100. With the source's
    +-15% spread the arrivals scatter and a prompt rarely waits behind another's prefill, so
    the median TTFT is near one prompt's own prefill (measured 0.76 s), where fixed lengths
    keep every wave's eight prompts queued behind one another (2.0 s simulated)."""
    from bench.sim_accuracy import simulate_row

    notes = "vllm bench serve, 150 prompts at concurrency 8, each with ~20k input tokens and ~2k output tokens (+-15% variance)"
    row = {
        **GOOD,
        "id": "spread-1",
        "source": "https://example.org/post",
        "model": "meta-llama/Llama-3.1-8B",
        "gpu": "H100-SXM",
        "engine_version": "0.11.0",
        "stat": "median",
        "notes": notes,
        "workload": {**GOOD["workload"], "dataset": "random", "input_len": 20000.0, "output_len": 2000.0, "concurrency": 8},
        # Throughputs consistent with 2000-token answers (GOOD's imply 177: answers ended early).
        "metrics": {**GOOD["metrics"], "req_per_s": 0.2, "output_tok_per_s": 400.0},
    }
    spread, _ = simulate_row(row)
    fixed, _ = simulate_row({**row, "notes": notes.replace(" (+-15% variance)", "")})
    assert spread["ttft_ms"] < 0.6 * fixed["ttft_ms"]


@pytest.mark.parametrize(("name", "count"), [("heldout.jsonl", 57), ("heldout2.jsonl", 76), ("heldout3.jsonl", 60), ("heldout4.jsonl", 36)])
def test_the_held_out_file_is_predicted_or_skipped_with_a_reason(name, count, capsys):
    """bench/data/heldout*.jsonl (rows no parameter was fitted on, the check each model change
    is judged by): every row is either predicted or listed with why not, by both benches, and
    no held-out row repeats a row the parameters were fitted on."""
    from bench import accuracy, sim_accuracy

    path = ROOT / "bench" / "data" / name
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == count
    fitted = ROOT / "bench" / "data" / "published.jsonl"
    fitted_sources = {json.loads(line)["source"].split()[0] for line in fitted.read_text().splitlines() if line.strip()}
    assert not fitted_sources & {r["source"].split()[0] for r in rows}
    assert accuracy.main([str(path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    predicted, skipped = {r["id"] for r in rep["rows"]}, {s["id"]: s["reason"] for s in rep["skipped"]}
    assert predicted | set(skipped) == set(ids) and not predicted & set(skipped)
    assert all(why for why in skipped.values()) and len(predicted) >= 0.9 * count
    assert all(r["knee"]["output_tok_per_s"] or r["knee"]["ttft_ms"] for r in rep["rows"])
    assert sim_accuracy.main([str(path), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    online = {r["id"] for r in rows if r["workload"]["mode"].startswith("online")}
    assert {r["id"] for r in sim["rows"]} | {s["id"] for s in sim["skipped"]} == online


def test_a_random_run_whose_answers_ended_at_eos_is_read_at_the_length_it_generated():
    """``vllm bench serve`` random prompts without ``--ignore-eos``: max_tokens 128, the
    model stopped at 100 on average (mrah4090's output tok/s over req/s). The row is read
    at 100 with lengths spread up to 128 (no lockstep); a run that generated what it was
    configured, or whose req/s is too coarse to divide, keeps the configured length."""
    from bench.rows import mean_lengths, stopped_early, workload

    wl = {"input_len": 256, "output_len": 128, "dataset": "random", "concurrency": 8, "mode": "online-concurrency"}
    early = {"workload": wl, "metrics": {"req_per_s": 3.78, "output_tok_per_s": 377.0}}
    assert stopped_early(early) == pytest.approx(99.7, abs=0.1)
    assert mean_lengths(early) == (256.0, pytest.approx(99.7, abs=0.1))
    out = workload(early).output
    assert out.kind == "uniform" and out.mean == pytest.approx(99.7, abs=0.1) and out.upper <= 128

    full = {"workload": wl, "metrics": {"req_per_s": 3.0, "output_tok_per_s": 380.0}}
    coarse = {"workload": wl, "metrics": {"req_per_s": 0.02, "output_tok_per_s": 1.7}}
    sharegpt = {"workload": {**wl, "dataset": "sharegpt"}, "metrics": early["metrics"]}
    for row in (full, coarse, sharegpt):
        assert stopped_early(row) is None and mean_lengths(row)[1] == 128.0
    assert workload(full).output.kind == "fixed"


def test_a_row_longer_than_its_models_context_is_skipped_with_the_reason(tmp_path, capsys):
    """No server runs a request longer than the model's context (``knee estimate`` refuses
    it too): both benches list such a row with why, and predict the rest."""
    from bench import accuracy, sim_accuracy

    long = {**GOOD, "id": "toolong-1", "workload": {**GOOD["workload"], "input_len": 1_000_000}}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(long) + "\n")
    assert accuracy.main([str(path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rep["rows"]] == ["good-1"]
    assert (
        [s["id"] for s in rep["skipped"]] == ["toolong-1"]
        and "exceed" in rep["skipped"][0]["reason"]
        and "context of 8192" in rep["skipped"][0]["reason"]
    )
    assert sim_accuracy.main([str(path), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert [s["id"] for s in sim["skipped"]] == ["toolong-1"] and "exceed" in sim["skipped"][0]["reason"]


def test_a_row_of_a_checkpoint_knee_knows_is_predicted_as_that_checkpoint():
    """An FP8 checkpoint row names its base in ``architecture_of`` (the rows predate the
    bundled aliases); where knee knows the checkpoint itself, the benches ask for it, as a
    user's ``knee estimate`` of that name would: Qwen's FP8 releases scale per 128x128 block."""
    from bench.rows import resolve

    row = {**GOOD, "model": "Qwen/Qwen3-14B-FP8", "architecture_of": "Qwen/Qwen3-14B", "precision": "fp8"}
    ref, _, arch = resolve(row)
    assert ref == "Qwen/Qwen3-14B-FP8"
    assert arch.quantization.method == "fp8" and arch.quantization.block_scaled
    # A checkpoint knee does not know keeps the architecture the row names.
    ref, _, arch = resolve({**row, "model": "acme/Qwen3-14B-FP8-private"})
    assert ref == "Qwen/Qwen3-14B" and not arch.quantization.block_scaled


def test_a_sharegpt_run_reads_answers_at_eos_only_where_its_client_let_the_model_stop():
    """``vllm bench serve`` sends ``ignore_eos`` only when asked, so its ShareGPT answers end
    at the model's EOS (the measured shape, whose longest answer is half the replies'); SGLang's
    ``bench_serving`` and vLLM's throughput benchmark ignore EOS (the replies' own lengths),
    and so does a source that names no client. "no --ignore-eos" is not ``--ignore-eos``."""
    from bench.row_workload import answers_to_eos, lengths

    wl = {**GOOD["workload"], "dataset": "sharegpt", "input_len": 215.0, "output_len": 200.0}
    vllm = {**GOOD, "source": "https://example.org/post", "workload": wl, "notes": "vllm bench serve --dataset-name sharegpt, 200 prompts"}
    cases = {
        "vllm bench serve --dataset-name sharegpt, 200 prompts": True,
        "benchmark_serving.py, no --ignore-eos (generation may stop at EOS)": True,
        "benchmark_serving.py --ignore-eos": False,
        "python -m sglang.bench_serving --dataset-name sharegpt": False,
        "python -m sglang.bench_serving --disable-ignore-eos": True,
        "benchmark_throughput.py: 200 ShareGPT prompts": False,
        "a blog's table": False,
    }
    for notes, to_eos in cases.items():
        assert answers_to_eos({**vllm, "notes": notes}) is to_eos, notes
    at_eos = lengths(vllm, 200.0, "output", 215.0)
    replies = lengths({**vllm, "notes": "sglang.bench_serving"}, 200.0, "output", 215.0)
    assert at_eos.mean == pytest.approx(200.0, rel=0.01) and replies.mean == pytest.approx(200.0, rel=0.01)
    assert max(at_eos.values) < 0.6 * max(replies.values)
