"""Datasets: exact token lengths with a real tokenizer, the stated fallback, ShareGPT, shared
prefix, the shipped corpus, and arrival schedules."""

import json

import numpy as np
import pytest

from core.errors import BadInput
from core.load.datasets import (
    CORPUS_PATH,
    corpus_prompts,
    load_tokenizer,
    make_prompts,
    random_prompts,
    sample_lengths,
    shared_prefix_prompts,
    sharegpt_prompts,
    word_tokenizer,
)
from core.load.schedule import arrival_times
from core.spec import LengthDist, Workload


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    """A byte-level BPE tokenizer trained here on the shipped corpus (nothing downloaded),
    saved the way a model directory holds one, so AutoTokenizer loads it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    d = tmp_path_factory.mktemp("tok")
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.train([str(CORPUS_PATH)], trainer)
    t.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}))
    return d


def test_random_prompts_have_exact_token_lengths(tok_dir):
    tok = load_tokenizer(str(tok_dir))
    assert tok.exact and not tok.note
    dist = LengthDist(kind="uniform", mean=300, range_ratio=0.5)
    ps = random_prompts(tok, dist, LengthDist.of(64), 40, seed=1)
    lens = [p.input_tokens for p in ps]
    assert all(tok.count(p.text) == p.input_tokens for p in ps)
    assert all(150 <= n <= 450 for n in lens) and len(set(lens)) > 10
    assert len({p.text for p in ps}) == 40  # distinct prompts: no accidental prefix sharing
    # exact even for lengths longer than the corpus (it wraps)
    big = random_prompts(tok, LengthDist.of(60_000), LengthDist.of(1), 1)[0]
    assert big.input_tokens == 60_000 == tok.count(big.text)
    # deterministic for a seed
    assert [p.text for p in random_prompts(tok, dist, LengthDist.of(64), 5, seed=1)] == [p.text for p in ps[:5]]


def test_shared_prefix_prompts_share_the_prefix(tok_dir):
    tok = load_tokenizer(str(tok_dir))
    ps = shared_prefix_prompts(tok, 100, LengthDist.of(50), LengthDist.of(8), 6)
    first_line = {p.text.split("\n", 1)[0] for p in ps}
    assert len(first_line) == 1
    assert tok.count(next(iter(first_line))) in range(99, 102)
    assert all(p.input_tokens == tok.count(p.text) for p in ps)


def test_fallback_tokenizer_is_stated():
    tok = load_tokenizer("no-such-org/no-such-model")
    assert not tok.exact
    assert "counting words" in tok.note and "no-such-org/no-such-model" in tok.note
    ps = random_prompts(tok, LengthDist.of(50), LengthDist.of(5), 3)
    assert all(abs(p.input_tokens - 50) <= 2 for p in ps)


def test_sharegpt_file(tmp_path):
    f = tmp_path / "sg.jsonl"
    rows = [{"conversations": [{"from": "human", "value": f"why {i}?"}, {"from": "gpt", "value": "because " * (i + 1)}]} for i in range(4)]
    rows.append({"conversations": [{"from": "human", "value": "lonely"}]})  # skipped: no reply
    f.write_text("\n".join(json.dumps(r) for r in rows))
    tok = word_tokenizer()
    ps = sharegpt_prompts(f, tok, 8, seed=0)
    assert len(ps) == 8 and {p.text for p in ps} == {f"why {i}?" for i in range(4)}
    assert {p.output_tokens for p in ps} == {1, 2, 3, 4}
    fixed = sharegpt_prompts(f, tok, 4, output=LengthDist.of(9))
    assert {p.output_tokens for p in fixed} == {9}


@pytest.mark.parametrize("content", ["", "[1, 2]", '{"data": 3}'])
def test_sharegpt_bad_files(tmp_path, content):
    f = tmp_path / "x.json"
    f.write_text(content)
    with pytest.raises(BadInput):
        sharegpt_prompts(f, word_tokenizer(), 3)


def test_corpus_and_workload_dispatch(tok_dir):
    tok = load_tokenizer(str(tok_dir))
    ps = corpus_prompts(tok, LengthDist.of(16), 5)
    assert all(p.input_tokens > 20 for p in ps)
    w = Workload.fixed(64, 16, num_prompts=7, warmup=2)
    assert len(make_prompts(w, tok)) == 9
    with pytest.raises(BadInput, match="needs a file"):
        make_prompts(Workload.fixed(8, 8, dataset="sharegpt"), tok)


def test_length_distributions():
    rng = np.random.default_rng(0)
    u = sample_lengths(LengthDist(kind="uniform", mean=100, range_ratio=0.2), 2000, rng)
    assert u.min() >= 80 and u.max() <= 120
    nrm = sample_lengths(LengthDist(kind="normal", mean=50, std=10), 4000, rng)
    assert abs(nrm.mean() - 50) < 1 and nrm.min() >= 1
    emp = sample_lengths(LengthDist(kind="empirical", mean=1, values=(3, 7)), 100, rng)
    assert set(emp) <= {3, 7}


def test_arrival_schedules():
    c = arrival_times(10, 5, "constant")
    assert list(c) == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    p = arrival_times(50, 2000, "poisson", seed=1)
    assert p[-1] == pytest.approx(2000 / 50)  # vLLM's normalisation
    assert np.all(np.diff(p) >= 0)
    # gamma burstiness < 1 is burstier: a larger coefficient of variation of the gaps
    g_b = np.diff(arrival_times(50, 4000, "gamma", burstiness=0.25, seed=2, rescale=False))
    g_p = np.diff(arrival_times(50, 4000, "poisson", seed=2, rescale=False))
    assert g_b.std() / g_b.mean() > 1.5 * g_p.std() / g_p.mean()
    assert abs(g_p.mean() - 1 / 50) < 0.002
    d = arrival_times(20, None, "poisson", duration_s=3.0, seed=3)
    assert d.max() < 3.0 and 40 < len(d) < 80
