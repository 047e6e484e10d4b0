"""``knee results`` names the command of the best configuration: for a simulated study, the
vLLM command that configuration stands for on a GPU, not the simulator's ``sim MODEL``."""

from __future__ import annotations

import shlex

from core.results.analysis import vllm_command
from core.serve.engines import build_argv
from core.spec.study import EngineSpec
from tui.cli import main
from tui.demo import make_demo_study


def test_the_vllm_command_is_what_the_vllm_engine_would_launch():
    args = {"tensor_parallel_size": 4, "max_num_seqs": 128, "enable_prefix_caching": False}
    cmd = vllm_command("Qwen/Qwen3-4B", args)
    assert cmd == "vllm serve Qwen/Qwen3-4B --tensor-parallel-size=4 --max-num-seqs=128 --no-enable-prefix-caching"
    argv, _ = build_argv(EngineSpec(kind="vllm"), None, "Qwen/Qwen3-4B", args, "127.0.0.1", 8000, "key")
    launched = [a for a in argv if a not in ("--host", "127.0.0.1", "--port", "8000")]
    assert shlex.split(cmd) == launched


def test_a_simulated_studys_best_configuration_shows_its_vllm_command(tmp_path, capsys):
    storage = str(tmp_path / "knee.db")
    make_demo_study(storage)
    assert main(["results", "--storage", storage]) == 0
    out = capsys.readouterr().out
    assert "command: sim " not in out
    lines = [line for line in out.splitlines() if "command" in line]
    assert lines == ["  command on a GPU (simulated here): vllm serve Qwen/Qwen3-4B --max-num-seqs=64 --tensor-parallel-size=2"], out


def test_a_simulated_point_carries_its_error_band_in_the_text_and_the_json(tmp_path, capsys):
    """A simulated point is a prediction (issue 11 item 5): ``knee results`` gives the best
    one's band from held-out residuals (its model kind's, else vLLM's, where they held), and
    ``--json`` a low and a high for each of its metrics a band covers."""
    import json

    from core.estimate.bands import band

    storage = str(tmp_path / "knee.db")
    make_demo_study(storage)
    assert main(["results", "--storage", storage]) == 0
    out = capsys.readouterr().out
    assert "  error band (held-out runs): " in out
    assert main(["results", "--storage", storage, "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["simulated"] is True
    tok, b = best["summary"]["output_throughput"], best["bands"]["output_throughput"]
    assert b == band("output_tok_per_s", tok, "vllm", "dense")  # the demo's Qwen3-4B: dense models' band
    rps = best["summary"]["request_throughput"]
    assert best["bands"]["request_throughput"] == band("req_per_s", rps, "vllm", "dense")
    assert best["bands"]["p99_e2el_ms"]["low"] < best["summary"]["p99_e2el_ms"] < best["bands"]["p99_e2el_ms"]["high"]
    assert "completed" not in best["bands"]  # counts have no band
