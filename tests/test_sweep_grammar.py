"""llm-optimizer's --server-args/--client-args grammar, and its defects fixed."""

import pytest

from core.errors import BadInput
from core.sweep.grammar import canonical, combinations, config_id, emit_args, parse_args


def values(text, side="server"):
    return {s.key: list(s.values) for s in parse_args(text, side=side)}


def test_lists_ranges_scalars_and_composites():
    v = values(
        "max_num_seqs=[64,128,256];max_num_batched_tokens=range(8192,32769,8192);tp_size*dp_size:(int,int)=[(1,4),(2,2),(4,1)];model_path=Qwen/Qwen3-8B"
    )
    assert v["max_num_seqs"] == [(64,), (128,), (256,)]
    assert v["max_num_batched_tokens"] == [(8192,), (16384,), (24576,), (32768,)]
    assert v["tp_size*dp_size"] == [(1, 4), (2, 2), (4, 1)]
    assert v["model_path"] == [("Qwen/Qwen3-8B",)]  # literal_eval fails → the raw string


def test_key_normalisation_and_repeated_flags_join():
    sets = parse_args(["--max-num-seqs=[1,2]", "enable-prefix-caching=True"], side="server")
    assert [s.names for s in sets] == [("max_num_seqs",), ("enable_prefix_caching",)]
    assert len(combinations(sets)) == 2


def test_trailing_and_doubled_semicolons_are_ignored():
    # llm-optimizer fails on the empty part a trailing ';' leaves.
    assert values("max_num_seqs=[1,2];;")["max_num_seqs"] == [(1,), (2,)]


def test_false_means_false_and_emits_no_flag():
    v = values("enable_prefix_caching=false;enforce_eager:bool=[True,False]")
    assert v["enable_prefix_caching"] == [(False,)]  # llm-optimizer: bool("false") is True
    assert v["enforce_eager"] == [(True,), (False,)]
    assert emit_args({"enable_prefix_caching": False, "enforce_eager": True}) == ["--no-enable-prefix-caching", "--enforce-eager"]


def test_json_values_and_spaces_stay_one_argv_item():
    v = values('compilation_config={"level": 3};served_model_name=["my model"]')
    argv = emit_args({"compilation_config": v["compilation_config"][0][0], "served_model_name": v["served_model_name"][0][0]})
    assert argv == ['--compilation-config={"level":3}', "--served-model-name=my model"]


def test_types_from_annotation_and_known_tables():
    v = values("gpu_memory_utilization=[0.85,0.9];max_model_len=4096.0;x:str=[1,2]")
    assert v["gpu_memory_utilization"] == [(0.85,), (0.9,)]
    assert v["max_model_len"] == [(4096,)] and isinstance(v["max_model_len"][0][0], int)
    assert v["x"] == [("1",), ("2",)]


def test_client_args_are_strict_and_typed():
    v = values("max_concurrency=[16,32];num_prompts=1000;random_range_ratio=0.95;dataset_name=random", side="client")
    assert v["max_concurrency"] == [(16,), (32,)] and v["random_range_ratio"] == [(0.95,)]
    with pytest.raises(BadInput, match="unknown client arg 'concurency'"):
        parse_args("concurency=[1]", side="client")


@pytest.mark.parametrize(
    "bad, msg",
    [
        ("max_num_seqs", "must contain '='"),
        ("max_num_seqs=range(1,x)", "range"),
        ("max_num_seqs=range(5,1)", "empty"),
        ("tp*dp=[1,2]", "tuple of 2"),
        ("x:complex=1", "unknown type"),
        ("enforce_eager=maybe", "True or False"),
        ("max_num_seqs=[1];max_num_seqs=[2]", "given twice"),
        ("max_num_seqs=[]", "empty list"),
    ],
)
def test_malformed_grammar_is_bad_input(bad, msg):
    with pytest.raises(BadInput, match=msg):
        parse_args(bad, side="server")


def test_config_id_matches_llm_optimizer_and_canonical_ids_are_stable():
    assert (
        config_id({"num_prompts": 1000, "max_concurrency": 64}, {"max_num_seqs": 128})
        == "client_max_concurrency-64-num_prompts-1000_server_max_num_seqs-128"
    )
    assert config_id({}, {}) == "default"
    assert canonical({"b": 1, "a": (1, 2)}) == canonical({"a": [1, 2], "b": 1})
    assert canonical({"r": float("inf")}) == '{"r":null}'
