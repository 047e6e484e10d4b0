"""Prompts for the load client: random with exact token lengths, ShareGPT files, shared prefix,
and the synthetic corpus shipped with knee (``core/load/data/corpus.txt``) so nothing downloads.

API::

    tok = load_tokenizer("Qwen/Qwen3-4B" | "/path/to/model" | None)   # Tokenizer (exact or fallback)
    prompts = make_prompts(workload, tok)           # list[Prompt] from a core.spec.Workload
    random_prompts(tok, input=LengthDist, output=LengthDist, n, seed)
    sharegpt_prompts(path, tok, n, seed, output=None)
    shared_prefix_prompts(tok, prefix_len, input=..., output=..., n, seed)
    corpus_prompts(tok, output=..., n, seed)

A :class:`Prompt` holds the text (and optional chat ``messages``), its length in tokens of
the model's tokenizer, and the output length to ask for (``max_tokens``).

Token lengths are of the prompt text encoded **without special tokens**; the server may add
a BOS or a chat template, so the runner records the server's own ``usage.prompt_tokens``
when it reports one.

**Random prompts** are windows of the corpus, cut at token boundaries of the model's
tokenizer, decoded, and re-encoded; a window that does not round-trip to its length is
trimmed or extended (up to a few tries) until it does, so input lengths are exact. Text
rather than random token ids keeps prompts tokenizable by any tokenizer and avoids the
special-token and merge surprises of decoding random ids; each prompt starts at a random
offset, so prompts do not share prefixes by accident (prefix-cache carry-over). A 4-digit
request number leads each random prompt for the same reason.

**Tokenizer fallback.** ``load_tokenizer`` tries a local directory, then the Hugging Face
cache (``local_files_only``), then — only with ``allow_download=True`` — the hub. When none
works it returns a word tokenizer (``exact=False``, ``note`` says so): lengths are then counted
in words and punctuation, roughly 1.3 model tokens each, and prompts are only approximately
the asked length. The note is shown to the user; the server's ``usage`` still gives the true
counts in the results.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from core.errors import BadInput
from core.spec.workload import LengthDist, Workload

CORPUS_PATH = Path(__file__).with_name("data") / "corpus.txt"


@dataclass(slots=True)
class Prompt:
    text: str
    input_tokens: int
    output_tokens: int
    messages: list[dict] | None = None


@dataclass
class Tokenizer:
    """``encode``/``decode`` without special tokens; ``exact`` is False for the word fallback.

    The two functions default to the word fallback; :func:`load_tokenizer` binds a
    ``transformers`` tokenizer's own with its special-token flags fixed."""

    name: str
    exact: bool
    note: str = ""
    _encode: Callable[[str], list[int]] = field(default=lambda text: _word_ids(text), repr=False)
    _decode: Callable[[list[int]], str] = field(default=lambda ids: _word_decode(ids), repr=False)

    def encode(self, text: str) -> list[int]:
        return self._encode(text)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids) -> str:
        return self._decode(list(ids))


# --- word fallback: ids index a vocabulary built from the corpus plus anything seen since ---
_WORD = re.compile(r"\w+|[^\w\s]")
_vocab: dict[str, int] = {}
_inv: list[str] = []


def _word_ids(text: str) -> list[int]:
    out = []
    for w in _WORD.findall(text):
        i = _vocab.get(w)
        if i is None:
            i = _vocab[w] = len(_inv)
            _inv.append(w)
        out.append(i)
    return out


def _word_decode(ids) -> str:
    text = " ".join(_inv[i] for i in ids)
    return re.sub(r" ([^\w\s])", r"\1", text)


def word_tokenizer(note: str = "") -> Tokenizer:
    return Tokenizer(
        name="words (fallback)",
        exact=False,
        note=note or "no tokenizer for the model: counting words and punctuation instead of tokens; prompt lengths are approximate",
    )


def _hf_encoder(hf) -> Callable[[str], list[int]]:
    def encode(text: str) -> list[int]:
        return hf.encode(text, add_special_tokens=False)

    return encode


def _hf_decoder(hf) -> Callable[[list[int]], str]:
    def decode(ids: list[int]) -> str:
        text = hf.decode(ids, skip_special_tokens=True)
        assert isinstance(text, str)  # one sequence of ids decodes to one string (a batch to a list)
        return text

    return decode


def load_tokenizer(model: str | None, *, allow_download: bool = False, trust_remote_code: bool = False) -> Tokenizer:
    """The model's tokenizer from ``transformers`` (local path, HF cache, hub if allowed), else
    the word fallback with a note saying why."""
    if not model:
        return word_tokenizer()
    try:
        import os

        # transformers announces at import that PyTorch is missing; knee needs only tokenizers.
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        import transformers  # noqa: F401  (slow import; only when a tokenizer is wanted)
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except Exception as e:  # pragma: no cover - transformers is a dependency
        return word_tokenizer(f"transformers unavailable ({e}); counting words instead of tokens")
    attempts: list[tuple[str, dict]] = []
    if Path(model).expanduser().is_dir():
        attempts.append((str(Path(model).expanduser()), {}))
    else:
        attempts.append((model, {"local_files_only": True}))
        if allow_download:
            attempts.append((model, {}))
    last = ""
    for name, kw in attempts:
        try:
            hf = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code, **kw)
            return Tokenizer(name=name, exact=True, _encode=_hf_encoder(hf), _decode=_hf_decoder(hf))
        except Exception as e:  # noqa: BLE001 - transformers raises OSError, ValueError, hub errors, ...
            # Not silent: the fallback's note below names the error, and the user is told to
            # pass --tokenizer.
            last = type(e).__name__
    where = "the local path" if Path(model).expanduser().is_dir() else "the Hugging Face cache" + (" or the hub" if allow_download else "")
    return word_tokenizer(
        f"no tokenizer for {model!r} in {where} ({last}); counting words instead of tokens, "
        "prompt lengths are approximate (pass --tokenizer PATH for exact lengths)"
    )


@lru_cache(maxsize=1)
def corpus_text() -> str:
    lines = CORPUS_PATH.read_text(encoding="utf-8").splitlines()
    return "\n".join(ln for ln in lines if ln and not ln.startswith("#"))


def corpus_paragraphs() -> list[str]:
    return corpus_text().split("\n")


_corpus_ids_cache: dict[int, np.ndarray] = {}


def _corpus_ids(tok: Tokenizer) -> np.ndarray:
    # Keyed by the function object: one per loaded tokenizer, the shared default for the fallback.
    key = id(tok._encode)
    ids = _corpus_ids_cache.get(key)
    if ids is None:
        ids = _corpus_ids_cache[key] = np.asarray(tok.encode(corpus_text().replace("\n", " ")), dtype=np.int64)
    return ids


def sample_lengths(dist: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths ≥ 1 from a distribution (uniform: vLLM's range-ratio convention)."""
    if dist.kind == "fixed":
        out = np.full(n, round(dist.mean))
    elif dist.kind == "uniform":
        lo = max(1, int(np.floor(dist.mean * (1 - dist.range_ratio))))
        hi = max(lo, int(np.ceil(dist.mean * (1 + dist.range_ratio))))
        out = rng.integers(lo, hi + 1, size=n)
    elif dist.kind == "normal":
        out = np.rint(rng.normal(dist.mean, dist.std, size=n))
    else:
        out = rng.choice(np.asarray(dist.values), size=n)
    return np.maximum(out, 1).astype(np.int64)


def _window(tok: Tokenizer, ids: np.ndarray, start: int, length: int, lead: str = "") -> tuple[str, int]:
    """Text of ``length`` tokens from the corpus at ``start`` (wrapping), exact when possible."""
    lead_n = tok.count(lead) if lead else 0
    want = length - lead_n
    if want <= 0:  # the lead alone is too long: plain corpus text only
        lead, lead_n, want = "", 0, length
    n_ids = len(ids)
    take = want
    text, got = "", 0
    for _ in range(6):
        idx = (start + np.arange(max(take, 0))) % n_ids
        text = lead + tok.decode(ids[idx])
        got = tok.count(text)
        if got == length:
            return text, got
        take += length - got  # re-encoding merged or split tokens: adjust and retry
        if take <= 0:
            break
    return text, got  # rare: the closest we got; the true count is recorded, not the wish


def random_prompts(tok: Tokenizer, input: LengthDist, output: LengthDist, n: int, seed: int = 0, prefix: str = "") -> list[Prompt]:
    # One generator per quantity, so the first k prompts are the same whatever n is.
    ids = _corpus_ids(tok)
    ins = sample_lengths(input, n, np.random.default_rng([seed, 0]))
    outs = sample_lengths(output, n, np.random.default_rng([seed, 1]))
    starts = np.random.default_rng([seed, 2]).integers(0, len(ids), size=n)
    prompts = []
    for i in range(n):
        lead = f"{prefix}{i % 10000:04d} "
        text, got = _window(tok, ids, int(starts[i]), int(ins[i]), lead)
        prompts.append(Prompt(text=text, input_tokens=got, output_tokens=int(outs[i])))
    return prompts


def shared_prefix_prompts(tok: Tokenizer, prefix_len: int, input: LengthDist, output: LengthDist, n: int, seed: int = 0) -> list[Prompt]:
    """Every prompt starts with the same ``prefix_len``-token text, then a random suffix of the
    drawn length (so ISL = prefix + suffix)."""
    if prefix_len < 1:
        raise BadInput("a shared-prefix dataset needs a prefix length ≥ 1", "set --prefix-len")
    rng = np.random.default_rng(seed + 1)
    ids = _corpus_ids(tok)
    prefix, _ = _window(tok, ids, int(rng.integers(0, len(ids))), prefix_len)
    prefix = prefix.rstrip() + "\n"
    suffixes = random_prompts(tok, input, output, n, seed)
    out = []
    for p in suffixes:
        text = prefix + p.text
        out.append(Prompt(text=text, input_tokens=tok.count(text), output_tokens=p.output_tokens))
    return out


def corpus_prompts(tok: Tokenizer, output: LengthDist, n: int, seed: int = 0) -> list[Prompt]:
    """Whole paragraphs of the shipped corpus as prompts (natural lengths), cycled."""
    rng = np.random.default_rng(seed)
    paras = corpus_paragraphs()
    order = rng.permutation(len(paras))
    outs = sample_lengths(output, n, rng)
    return [
        Prompt(text=paras[order[i % len(paras)]], input_tokens=tok.count(paras[order[i % len(paras)]]), output_tokens=int(outs[i])) for i in range(n)
    ]


def _read_sharegpt(path: Path) -> list:
    if not path.exists():
        raise BadInput(f"dataset file {str(path)!r} does not exist", "give a ShareGPT-format JSON or JSONL file")
    if path.is_dir():
        raise BadInput(f"dataset path {str(path)!r} is a directory", "give a ShareGPT-format JSON or JSONL file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read dataset file {str(path)!r}: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as first:  # the ValueError json raises, with msg and lineno
        try:  # JSONL: one conversation per line
            data = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        except ValueError:
            raise BadInput(
                f"dataset file {str(path)!r} is not valid JSON ({first.msg} at line {first.lineno})",
                'expected a ShareGPT list of {"conversations": [{"from": "human", "value": ...}, ...]}',
            ) from None
    if isinstance(data, dict):
        data = data.get("data") or data.get("conversations") and [data] or []
    if not isinstance(data, list):
        raise BadInput(f"dataset file {str(path)!r} is not a list of conversations")
    return data


def sharegpt_prompts(path: str | Path, tok: Tokenizer, n: int, seed: int = 0, output: LengthDist | None = None) -> list[Prompt]:
    """ShareGPT: the first human turn is the prompt; the output length is the first reply's
    token count unless ``output`` fixes it. Entries without two turns are skipped (vLLM's rule);
    the file's order is shuffled with ``seed`` and cycled when ``n`` exceeds it."""
    path = Path(path).expanduser()
    data = _read_sharegpt(path)
    usable: list[tuple[str, str]] = []
    for item in data:
        conv = item.get("conversations") if isinstance(item, dict) else None
        if conv is None and isinstance(item, dict):
            conv = item.get("messages")
        if not isinstance(conv, list) or len(conv) < 2:
            continue
        a, b = conv[0], conv[1]
        if not (isinstance(a, dict) and isinstance(b, dict)):
            continue
        pa, pb = a.get("value", a.get("content")), b.get("value", b.get("content"))
        if isinstance(pa, str) and isinstance(pb, str) and pa.strip():
            usable.append((pa, pb))
    if not usable:
        raise BadInput(
            f"dataset file {str(path)!r} has no usable conversations",
            'each entry needs "conversations" with at least a prompt and a reply',
        )
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(usable))
    outs = sample_lengths(output, n, rng) if output is not None else None
    prompts = []
    for i in range(n):
        pa, pb = usable[order[i % len(usable)]]
        osl = int(outs[i]) if outs is not None else max(1, tok.count(pb))
        prompts.append(Prompt(text=pa, input_tokens=tok.count(pa), output_tokens=osl))
    return prompts


def make_prompts(w: Workload, tok: Tokenizer, n: int | None = None, output_override: bool = False) -> list[Prompt]:
    """Prompts for a :class:`core.spec.Workload` (``n`` defaults to warm-up + num_prompts).
    For ShareGPT, ``output_override`` makes the workload's output distribution replace the
    replies' lengths."""
    n = n if n is not None else w.num_prompts + w.warmup
    if w.dataset == "random":
        return random_prompts(tok, w.input, w.output, n, w.seed)
    if w.dataset == "shared-prefix":
        return shared_prefix_prompts(tok, w.shared_prefix_len, w.input, w.output, n, w.seed)
    if w.dataset == "corpus":
        return corpus_prompts(tok, w.output, n, w.seed)
    if w.dataset == "sharegpt":
        if not w.dataset_path:
            raise BadInput("the sharegpt dataset needs a file", "pass --dataset-path FILE")
        return sharegpt_prompts(w.dataset_path, tok, n, w.seed, w.output if output_override else None)
    raise BadInput(f"unknown dataset {w.dataset!r}", "use random, sharegpt, shared-prefix or corpus")
