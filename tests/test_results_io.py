"""Exports and imports: knee JSON/JSONL/CSV, llm-optimizer's per-run JSONL and aggregated JSON,
vllm bench serve JSON and AIPerf's profile_export_aiperf.json; store safety."""

import csv
import io
import json
import sqlite3

import pytest

from core.errors import BadInput
from core.results.io import export, import_file, parse_import
from core.results.store import StudyStore
from core.sweep import build_spec, create_study
from core.sweep.runner import Runner
from tui.cli import main as knee


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    d = tmp_path_factory.mktemp("io")
    store = StudyStore(d / "knee.db")
    spec = build_spec(
        "Qwen/Qwen3-4B",
        engine="sim",
        server_args="tensor_parallel_size=[1,2];enable_prefix_caching=False",
        client_args="max_concurrency=[8,64];num_prompts=100",
        constraints="e2e_latency:p99<20s;ttft:p90<=2s",
        instance="ml.g6.12xlarge",
    )
    name = create_study(store, spec, "io")
    Runner(store, name).run()
    return d, store, name


def test_knee_json_csv_jsonl_round_trip(swept, tmp_path):
    d, store, name = swept
    orig = {p.point_id: p for p in store.points(name)}
    for fmt, suffix in (("json", "json"), ("jsonl", "jsonl"), ("llm-optimizer", "json")):
        f = tmp_path / f"x-{fmt}.{suffix}"
        export(store, name, fmt, f)
        study, n, detected = import_file(store, f, study=f"back-{fmt}")
        assert n == 4
        back = {p.point_id: p for p in store.points(study)}
        assert back.keys() == orig.keys()
        for k, p in orig.items():
            assert back[k].summary["output_throughput"] == pytest.approx(p.summary["output_throughput"])
            assert back[k].server_args == p.server_args and back[k].client_args == p.client_args
            assert back[k].meets_slo == p.meets_slo
    rows = list(csv.DictReader(io.StringIO(export(store, name, "csv"))))
    assert len(rows) == 4 and float(rows[0]["output_throughput"]) > 0 and rows[0]["server.enable_prefix_caching"] == "False"


def test_llm_optimizer_formats_exactly(swept):
    d, store, name = swept
    rec = json.loads(export(store, name, "jsonl").splitlines()[0])
    assert rec["config"]["server_cmd_args"] == ["--no-enable-prefix-caching", "--tensor-parallel-size=1"]
    r = rec["results"]
    for k in (
        "backend",
        "dataset_name",
        "request_rate",
        "max_concurrency",
        "duration",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "total_output_tokens_retokenized",
        "request_throughput",
        "input_throughput",
        "output_throughput",
        "concurrency",
        "accept_length",
    ):
        assert k in r, k
    for stat in ("mean", "median", "std", "p95", "p99"):
        for m in ("e2e_latency", "ttft", "tpot", "itl"):
            assert f"{stat}_{m}_ms" in r
    assert r["request_rate"] is None  # inf is null
    assert rec["constraints"] == [{"op": "<", "value": 20000.0, "name": "p99_e2e_latency_ms"}, {"op": "<=", "value": 2000.0, "name": "p90_ttft_ms"}]
    assert rec["metadata"] == {"gpu_type": "L4", "gpu_count": 4, "model_tag": "Qwen/Qwen3-4B", "input_tokens": 1024, "output_tokens": 512}
    agg = json.loads(export(store, name, "llm-optimizer"))
    assert set(agg) == {"metadata", "best_configurations", "test_results"}
    assert set(agg["best_configurations"]) == {
        "best_input_throughput",
        "best_output_throughput",
        "best_input_throughput_constrained",
        "best_output_throughput_constrained",
    }
    b = agg["best_configurations"]["best_output_throughput"]
    assert set(b) == {"throughput", "config", "cmd"} and b["throughput"] == max(p.summary["output_throughput"] for p in store.points(name))
    assert "NaN" not in json.dumps(agg) and "Infinity" not in json.dumps(agg)


def test_import_plain_llm_optimizer_jsonl(tmp_path):
    rec = {
        "config": {
            "client_args": {"max_concurrency": 64, "num_prompts": 1000},
            "server_args": {"max_num_seqs": 128},
            "server_cmd_args": ["--max-num-seqs=128"],
        },
        "results": {
            "backend": "vllm",
            "max_concurrency": 64,
            "request_rate": None,
            "duration": 100.0,
            "completed": 1000,
            "output_throughput": 5000.0,
            "request_throughput": 10.0,
            "input_throughput": 10240.0,
            "p99_e2e_latency_ms": 9000.0,
            "mean_ttft_ms": 120.0,
            "p99_ttft_ms": 400.0,
        },
        "cmd": "vllm serve m --max-num-seqs=128",
        "constraints": [{"op": "<", "value": 500.0, "name": "p99_ttft_ms"}],
        "metadata": {"gpu_type": "H100", "gpu_count": 1, "model_tag": "meta-llama/Llama-3.1-8B-Instruct", "input_tokens": 1024, "output_tokens": 512},
    }
    f = tmp_path / "runs.jsonl"
    f.write_text(json.dumps(rec) + "\n\n" + json.dumps({**rec, "config": {**rec["config"], "server_args": {"max_num_seqs": 256}}}) + "\n")
    store = StudyStore(tmp_path / "knee.db")
    study, n, fmt = import_file(store, f)
    assert (study, n, fmt) == ("import-runs", 2, "llm-optimizer-jsonl")
    p = store.points(study)[0]
    assert p.summary["p99_e2el_ms"] == 9000.0 and p.source == "llm-optimizer" and p.meets_slo is True
    assert p.summary["total_token_throughput"] == 15240.0
    assert store.study(study)["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    # another model into the same study is refused
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({**rec, "metadata": {**rec["metadata"], "model_tag": "Qwen/Qwen3-4B"}}) + "\n")
    with pytest.raises(BadInput, match="holds results for"):
        import_file(store, other, study=study)


def test_import_vllm_bench_serve_json(tmp_path):
    data = {
        "date": "20261121-120000",
        "backend": "openai",
        "model_id": "Qwen/Qwen3-4B",
        "tokenizer_id": "Qwen/Qwen3-4B",
        "num_prompts": 200,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 16,
        "duration": 20.5,
        "completed": 200,
        "failed": 0,
        "total_input_tokens": 204800,
        "total_output_tokens": 102400,
        "request_throughput": 9.75,
        "output_throughput": 4995.1,
        "total_token_throughput": 14985.4,
        "mean_ttft_ms": 88.1,
        "median_ttft_ms": 80.2,
        "p99_ttft_ms": 210.0,
        "mean_tpot_ms": 3.1,
        "p99_e2el_ms": 1900.0,
    }
    f = tmp_path / "bench.json"
    f.write_text(json.dumps(data))
    fmt, model, pts, _ = parse_import(f, "x")
    assert fmt == "vllm-bench" and model == "Qwen/Qwen3-4B"
    assert pts[0].client_args == {"max_concurrency": 16, "num_prompts": 200} and pts[0].summary["p99_e2el_ms"] == 1900.0
    assert pts[0].source == "vllm-bench"


def test_import_aiperf_profile_export(tmp_path):
    data = {
        "request_throughput": {"unit": "requests/sec", "avg": 13.16},
        "request_latency": {"unit": "ms", "avg": 6550.3, "p50": 5799.9, "p90": 8594.2, "p99": 9381.6, "std": 1171.1},
        "time_to_first_token": {"unit": "ms", "avg": 1588.8, "p50": 787.5, "p95": 4051.4},
        "inter_token_latency": {"unit": "ms", "avg": 51.8, "p99": 55.9},
        "output_token_throughput": {"unit": "tokens/sec", "avg": 1274.6},
        "benchmark_duration": {"unit": "sec", "avg": 15.2},
        "request_count": {"unit": "requests", "avg": 200.0},
        "total_isl": {"unit": "tokens", "avg": 110000.0},
        "total_osl": {"unit": "tokens", "avg": 19370.0},
        "input_config": {"endpoint": {"model_names": ["openai/gpt-oss-20b"], "type": "chat"}, "loadgen": {"concurrency": 100}},
    }
    f = tmp_path / "profile_export_aiperf.json"
    f.write_text(json.dumps(data))
    store = StudyStore(tmp_path / "knee.db")
    study, n, fmt = import_file(store, f)
    assert fmt == "aiperf" and n == 1
    s = store.points(study)[0].summary
    assert s["mean_e2el_ms"] == 6550.3 and s["median_e2el_ms"] == 5799.9 and s["p90_e2el_ms"] == 8594.2
    assert s["p95_ttft_ms"] == 4051.4 and s["mean_tpot_ms"] == 51.8  # AIPerf ITL is vLLM's TPOT
    assert s["output_throughput"] == 1274.6 and s["completed"] == 200 and s["duration"] == 15.2
    assert store.points(study)[0].client_args == {"max_concurrency": 100}
    assert store.study(study)["model"] == "openai/gpt-oss-20b"


@pytest.mark.parametrize(
    "content, msg", [("", "empty"), ("{not json", "not JSON"), ('{"hello": 1}', "unknown result format"), ('{"a":1}\n{"b":2}\n', "not llm-optimizer")]
)
def test_bad_import_files(tmp_path, content, msg):
    f = tmp_path / "bad.json"
    f.write_text(content)
    with pytest.raises(BadInput, match=msg):
        parse_import(f, "x")


def test_corrupt_store_is_bad_input_and_untouched(tmp_path, capsys):
    db = tmp_path / "knee.db"
    db.write_bytes(b"this is not a sqlite database at all" * 100)
    before = db.read_bytes()
    assert knee(["results", "--workspace", str(tmp_path)]) == 2
    assert knee(["sweep", "-q", "--model", "Qwen/Qwen3-4B", "--engine", "sim", "--workspace", str(tmp_path)]) == 2
    assert "not a readable SQLite database" in capsys.readouterr().err
    assert db.read_bytes() == before
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("create table t (x)")
    con.commit()
    con.close()
    with pytest.raises(BadInput, match="not a knee study store"):
        StudyStore(other)


def test_results_cli(swept, capsys):
    d, store, name = swept
    assert knee(["results", "--workspace", str(d), "--study", name, "--pareto", "throughput,e2e_latency:p99"]) == 0
    out = capsys.readouterr().out
    assert "[SIMULATED]" in out and "Pareto frontier (output_throughput vs p99_e2el_ms)" in out and "best (throughput" in out
    assert knee(["results", "--workspace", str(d), "--study", name, "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["pareto"]["knee"] is not None and len(j["points"]) == 4 and j["simulated"] is True
    # predicted beside measured, from the estimator, for every point
    assert set(j["predicted"]) == {p["point_id"] for p in j["points"]}
    assert all(v["output_throughput"] > 0 for v in j["predicted"].values())
    assert knee(["results", "--workspace", str(d), "--study", "nope"]) == 2
    assert knee(["results", "--workspace", str(d), "--pareto", "a,b,c"]) == 2


def test_recommend_gives_a_server_config_and_its_measurement(swept):
    from core.results import recommend

    d, store, name = swept
    cfg, point = recommend(store, name)
    assert cfg.model == "Qwen/Qwen3-4B" and cfg.tp == point.server_args["tensor_parallel_size"]
    assert cfg.enable_prefix_caching is False and point.meets_slo and point.summary["output_throughput"] > 0
    cfg2, p2 = recommend(store, name, point_id=store.points(name)[0].point_id)
    assert p2.point_id == store.points(name)[0].point_id
    assert recommend(store, name, constraints="ttft:p99<1ms") is None


def test_sqlalchemy_url_storage(tmp_path):
    store = StudyStore(f"sqlite:///{tmp_path}/url.db")
    store.create_study("u", None, "m")
    assert store.studies()[0]["name"] == "u"


def test_postgres_storage_without_its_driver_names_the_extra(monkeypatch, capsys):
    """--storage postgresql://... without psycopg installed: one line naming the extra that
    installs it, exit 2, and the URL's password is not echoed. (psycopg is made unimportable
    here, so the test holds whether or not the postgres extra is installed.)"""
    import sys

    monkeypatch.setitem(sys.modules, "psycopg", None)
    assert knee(["results", "--storage", "postgresql://knee:s3cret@127.0.0.1:1/studies"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "no module named 'psycopg'" in err and 'pip install -e ".[postgres]"' in err
    assert "s3cret" not in err and "knee:***@127.0.0.1" in err
