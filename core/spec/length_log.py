"""Request lengths read from the user's own records: a production log, an export of token
usage, or a ``vllm bench serve`` result. Every bundled shape (:mod:`core.spec.lengths`) is a
guess about someone else's traffic; a team that serves a model already knows how long its
prompts are and where its model stops answering.

    from core.spec.length_log import read_lengths
    log = read_lengths("usage.jsonl")          # -> LengthLog(input=..., output=..., requests=...)

What it reads, one request per record:

- JSON lines, one object per request, with the token counts under any of these pairs (or
  inside a ``usage`` object, as the OpenAI API returns them): ``prompt_tokens`` /
  ``completion_tokens``, ``input_tokens`` / ``output_tokens``, ``input_len`` / ``output_len``;
- CSV with a header naming one of the same pairs;
- a JSON object with ``input_lens`` / ``output_lens`` lists (``vllm bench serve
  --save-result --save-detailed``).

A record may also say how many of its prompt tokens the server's prefix cache served
(``prompt_tokens_details.cached_tokens``, as vLLM's and OpenAI's usage report it, or
``cached_tokens``): a log of multi-turn chat or of one long system prompt is mostly that, and
its prefill costs a fraction of its length. Their mean becomes a prefix every prompt shares
(the ``shared-prefix`` dataset: the estimator skips its blocks at prefill, the simulator and
the load generator send it), the rest of each prompt its drawn suffix; means are kept.

The lengths are what was served, so the estimate holds each answer to its length. Input and
output are kept as two distributions (the estimator draws them independently), each reduced
to at most 256 quantiles so a million-line log estimates as fast as the bundled shapes.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from core.errors import BadInput
from core.spec.workload import LengthDist, Workload

PAIRS = (("prompt_tokens", "completion_tokens"), ("input_tokens", "output_tokens"), ("input_len", "output_len"))
QUANTILES = 256
_FIX = "records need prompt_tokens/completion_tokens (or input_tokens/output_tokens, input_len/output_len)"


# A shared prefix shorter than one KV block (16 tokens) is never served from the cache.
MIN_CACHED = 16


@dataclass(frozen=True)
class LengthLog:
    input: LengthDist  # whole prompts
    output: LengthDist
    requests: int
    path: str
    cached: float = 0.0  # mean prompt tokens the prefix cache served (0: none recorded)
    uncached: LengthDist | None = None  # each prompt less its cached tokens, where any were

    def workload(self, num_prompts: int = 1000) -> Workload:
        """The requests as knee runs and prices them: each answer held to its served length;
        cached tokens as a prefix every prompt shares (see the module docstring)."""
        if self.uncached is not None and self.cached >= MIN_CACHED:
            return Workload(
                input=self.uncached, output=self.output, dataset="shared-prefix", shared_prefix_len=round(self.cached), num_prompts=num_prompts
            )
        return Workload(input=self.input, output=self.output, num_prompts=num_prompts)

    def describe(self) -> str:
        cached = f", {self.cached / self.input.mean:.0%} of prompt tokens cached" if self.cached else ""
        return (
            f"lengths from {Path(self.path).name} ({self.requests:,} requests; "
            f"means {self.input.mean:.0f} in / {self.output.mean:.0f} out, longest {self.input.upper:,} / {self.output.upper:,}{cached})"
        )


def refuse_lengths_beside(flags) -> None:
    """BadInput naming every ``(flag, value)`` given (not None) beside ``--lengths-from``: both
    would set the lengths, and silently preferring one hides the other."""
    given = [name for name, v in flags if v is not None]
    if given:
        raise BadInput(f"{', '.join(given)} and --lengths-from both set the lengths", "give one of them")


def read_lengths(path: str | Path) -> LengthLog:
    """Both sides' length distributions from ``path`` (see the module docstring); BadInput
    naming the file, the line and what is wrong."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise BadInput(f"no lengths file at {p}", "pass a JSONL, CSV or vllm bench serve result file")
    text = p.read_text(errors="replace")
    if p.suffix.lower() == ".csv":
        pairs = _from_csv(p, text)
    else:
        pairs = _from_json(p, text)
    if not pairs:
        raise BadInput(f"{p}: no requests in the file", _FIX)
    ins, outs, hits = zip(*pairs)
    cached = sum(hits) / len(hits)
    uncached = _quantiles(tuple(max(1, i - h) for i, h in zip(ins, hits))) if cached else None
    return LengthLog(_quantiles(ins), _quantiles(outs), len(pairs), str(p), cached, uncached)


def _from_json(p: Path, text: str) -> list[tuple[int, int, int]]:
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n{" not in stripped.rstrip():
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, dict) and "input_lens" in whole:
            ins, outs = whole.get("input_lens") or [], whole.get("output_lens") or []
            if len(ins) != len(outs):
                raise BadInput(f"{p}: input_lens has {len(ins)} entries and output_lens {len(outs)}", "save the run with --save-detailed")
            return [(*_checked(p, i + 1, a, b), 0) for i, (a, b) in enumerate(zip(ins, outs))]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadInput(f"{p} line {n}: not JSON ({e.msg})", "one JSON object per line, or a .csv file with a header") from None
        if not isinstance(rec, dict):
            raise BadInput(f"{p} line {n}: not a JSON object", _FIX)
        usage = rec.get("usage")
        out.append(_pair(p, n, usage if isinstance(usage, dict) else rec))
    return out


def _from_csv(p: Path, text: str) -> list[tuple[int, int, int]]:
    rows = csv.DictReader(text.splitlines())
    return [_pair(p, n, rec) for n, rec in enumerate(rows, 2)]


def _pair(p: Path, n: int, rec: dict) -> tuple[int, int, int]:
    """(prompt, answer, cached prompt tokens) of one record."""
    for a, b in PAIRS:
        if a in rec and b in rec:
            i, o = _checked(p, n, rec[a], rec[b])
            return i, o, _cached(p, n, rec, i)
    raise BadInput(f"{p} line {n}: no token counts", _FIX)


def _cached(p: Path, n: int, rec: dict, prompt: int) -> int:
    details = rec.get("prompt_tokens_details") or rec.get("input_tokens_details")
    raw = details.get("cached_tokens") if isinstance(details, dict) else rec.get("cached_tokens")
    if raw is None or raw == "":
        return 0
    try:
        hit = int(float(raw))
    except (TypeError, ValueError):
        raise BadInput(f"{p} line {n}: cached_tokens {raw!r} is not a number", "a count of prompt tokens, or leave it out") from None
    if not 0 <= hit <= prompt:
        raise BadInput(f"{p} line {n}: cached_tokens {hit} is not between 0 and the prompt's {prompt}", "a count of prompt tokens, or leave it out")
    return hit


def _checked(p: Path, n: int, a, b) -> tuple[int, int]:
    try:
        i, o = int(float(a)), int(float(b))
    except (TypeError, ValueError):
        raise BadInput(f"{p} line {n}: token counts {a!r} / {b!r} are not numbers", _FIX) from None
    if i < 1 or o < 1:
        raise BadInput(f"{p} line {n}: token counts must be at least 1, got {i} / {o}", "drop requests that failed or returned nothing")
    return i, o


def _quantiles(values: tuple[int, ...]) -> LengthDist:
    """All the values (sorted) up to :data:`QUANTILES` of them, else that many quantiles at
    plotting positions (k + 0.5) / QUANTILES, the longest kept as the last: the longest
    request sets a finite run's drain and the context it must fit."""
    s = sorted(values)
    if len(s) <= QUANTILES:
        vals = tuple(s)
    else:
        vals = tuple(s[min(len(s) - 1, int((k + 0.5) / QUANTILES * len(s)))] for k in range(QUANTILES - 1)) + (s[-1],)
    return LengthDist(kind="empirical", mean=sum(vals) / len(vals), values=vals)
