"""When no TP degree fits, knee says what would: the fewest GPUs of the same type and the
instances that have them, or a lighter weight format on the GPUs given. Each suggestion is
checked by estimating it."""

import json

from core.estimate.report import estimate
from tui.cli import main

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"


def _advice(report) -> str:
    assert report.nothing_fits and report.as_dict()["nothing_fits"] == report.nothing_fits
    assert not any("fits" in n for n in report.notes), report.notes  # said once, in its own field
    return report.nothing_fits


def test_a_model_too_big_for_the_box_gets_the_box_and_the_format_it_fits():
    """Llama-3.1-70B in bf16 on ml.g5.12xlarge (4x A10G): 35.3 GB of weights per GPU at TP4
    against 21.7 GB. It fits on 8 A10Gs (ml.g5.48xlarge) or, on these 4, in FP8."""
    r = estimate(model=LLAMA_70B, instance="ml.g5.12xlarge", input_len=2000, output_len=300)
    assert not r.configs
    line = _advice(r)
    assert line.startswith(f"{LLAMA_70B}'s weights need 35.3 GB per GPU even at TP4, where A10G offers 21.7 GB")
    assert "8x A10G (TP8" in line and "ml.g5.48xlarge" in line and "FP8 weights" in line
    # Both suggestions hold when estimated.
    bigger = estimate(model=LLAMA_70B, instance="ml.g5.48xlarge", input_len=2000, output_len=300)
    assert any(c.config.tp == 8 for c in bigger.configs)
    fp8 = estimate(model=LLAMA_70B, instance="ml.g5.12xlarge", input_len=2000, output_len=300, precision="fp8")
    assert any(c.config.tp == 4 for c in fp8.configs)


def test_a_kv_cache_short_of_the_context_says_so_and_what_fits():
    """Llama-3.1-8B on one L4 at its full 131,072-token context: the weights fit, the KV
    cache does not hold one sequence of that length; two L4s do."""
    r = estimate(model="meta-llama/Llama-3.1-8B-Instruct", gpu="L4", num_gpus=1, max_model_len=131072)
    line = _advice(r)
    assert line.startswith("even at TP1, the KV cache holds") and "max_model_len=131072" in line
    assert "it fits on 2x L4 (TP2" in line and "ml.g6.12xlarge" in line


def test_a_model_no_box_or_format_can_hold_says_that_too():
    r = estimate(model="meta-llama/Llama-3.1-405B-Instruct", gpu="L4", num_gpus=1, input_len=100, output_len=100)
    assert _advice(r).endswith("it fits neither on up to 16 of them nor with 4-bit weights")


def test_the_command_prints_the_advice_on_one_line(capsys):
    assert main(["estimate", "--model", LLAMA_70B, "--instance", "ml.g5.12xlarge"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Nothing fits: ")]
    assert len(lines) == 1 and "ml.g5.48xlarge" in lines[0] and "no TP degree" not in lines[0]


def test_recommend_names_the_nearest_miss_of_an_instance_it_excludes(capsys):
    """An instance whose every TP degree misses is excluded with its largest degree's reason
    (the nearest miss), not one reason per degree."""
    args = ["recommend", "--model", LLAMA_70B, "--input-len", "2000", "--output-len", "300", "--target-rps", "3", "--json"]
    assert main(args) == 0
    why = {e["instance"]: e["excluded"] for e in json.loads(capsys.readouterr().out)["excluded"]}
    assert why["ml.g5.12xlarge"] == (
        "does not fit: weights need 35.3 GB per GPU at TP4, but A10G offers 21.7 GB at gpu_memory_utilization 0.9 "
        "— use more GPUs (higher TP) or a quantized model"
    )
