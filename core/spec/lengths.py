"""Bundled length distributions: what a dataset's requests look like when no file is read.

    from core.spec.lengths import sharegpt
    inp, out = sharegpt()                      # ShareGPT-like prompt and output lengths
    inp, out = sharegpt(output_mean=128)       # same shape, another output mean

The estimator and the simulator need only token lengths, so ``dataset_name=sharegpt``
predicts and simulates with no ShareGPT file; the load client still reads the file (it needs
the prompts' text). The distribution:

- means: 230.969 prompt and 194.523 output tokens, KubeAI's 1000-prompt ShareGPT run with the
  Llama-3 tokenizer (the calibration file's kubeai rows); GPUStack's 1000-prompt runs with
  the Qwen3 tokenizer give 217.4 / 201.6 (bench/data/published.jsonl), within 7%;
- prompts: log-normal with sigma 1 (ShareGPT's conversations are heavy-tailed: a median well
  under the mean and a long tail of long requests), 256 deterministic quantiles so every run
  sees the same lengths;
- answers, two shapes, by whether the client lets the model stop (``to_eos``):
  - the conversations' own reply lengths (knee's client, SGLang's ``bench_serving`` and vLLM's
    throughput benchmark send ``ignore_eos``): the same log-normal;
  - answers the model ended at its EOS, each capped at its reply's length (``vllm bench serve``
    without ``--ignore-eos``, its default): measured, not assumed. ``sharegpt_lengths.json``
    holds the 200 answer lengths of a published run of that client (Llama-3.3-70B-Instruct):
    a fifth under 20 tokens, the median 0.73x the mean, the longest 3.7x (780 tokens), where
    the log-normal's longest of 200 is 8-9x (1,600-1,800). The longest answer decodes nearly
    alone at the end of a finite run and sets how long it drains. Above the sample's 90th
    percentile the shape goes on as an exponential tail with the sample's own mean excess,
    so the longest of a 1,000-prompt run is longer than the longest of 200
    (:func:`_measured_shape`);
- cut where ``vllm bench serve`` and SGLang's ``bench_serving`` filter single-turn ShareGPT:
  prompts over 1024 tokens and requests over 2048 in all are dropped.

Not measured here: the exact quantiles of ShareGPT V3's prompts and replies (the file is not
bundled and nothing here reaches the network), and other models' answers to the same prompts
(a model that rarely stops before the cap, such as a reasoning model, answers closer to the
replies' own lengths).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

from core.spec.workload import LengthDist

SHAREGPT_INPUT_MEAN = 230.969
SHAREGPT_OUTPUT_MEAN = 194.523
SHAREGPT_SIGMA = 1.0
SHAREGPT_MAX_PROMPT = 1024
SHAREGPT_MAX_TOTAL = 2048
QUANTILES = 256
MEASURED_LENGTHS = Path(__file__).with_name("sharegpt_lengths.json")


def _scaled_to_mean(unit: tuple[float, ...], mean: float, scale: float, cut: float | None) -> LengthDist:
    """``unit`` (one length per quantile) times ``scale``, at least 1 and cut at ``cut``,
    the scale raised until the cut values' mean is back at ``mean`` (a benchmark's measured
    mean is after its own filter), as whole tokens."""
    vals = [mean] * len(unit)
    for _ in range(30):
        vals = [min(cut or math.inf, max(1.0, scale * u)) for u in unit]
        got = sum(vals) / len(vals)
        if abs(got - mean) < 1e-3 * mean or (cut and min(vals) >= cut):
            break
        scale *= mean / got
    ints = tuple(int(max(1, round(v))) for v in vals)
    return LengthDist(kind="empirical", mean=sum(ints) / len(ints), values=ints)


@lru_cache(maxsize=1024)
def lognormal(mean: float, sigma: float, cut: float | None = None) -> LengthDist:
    """A log-normal length distribution as :data:`QUANTILES` quantiles, cut at ``cut`` and
    scaled so its mean is ``mean``."""
    unit = tuple(math.exp(sigma * NormalDist().inv_cdf((k + 0.5) / QUANTILES)) for k in range(QUANTILES))
    return _scaled_to_mean(unit, mean, mean / math.exp(sigma**2 / 2), cut)


@lru_cache(maxsize=1)
def _measured_shape() -> tuple[float, ...]:
    """The bundled run's answer lengths at :data:`QUANTILES` quantiles, over their mean: the
    sample's own quantiles (its i-th sorted value at plotting position (i + 0.5) / n,
    linearly between) up to the 90th percentile, and above it an exponential tail with the
    sample's mean excess over that percentile. 200 lengths say little about the longest of
    1,000, which is what a 1,000-prompt burst waits for: the tail goes on past the sample's
    largest as its top tenth decays."""
    sample = json.loads(MEASURED_LENGTHS.read_text())["output_lens"]
    n, mean = len(sample), sum(sample) / len(sample)

    def empirical(p: float) -> float:
        pos = min(max(p * n - 0.5, 0.0), n - 1.0)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        return sample[lo] + (pos - lo) * (sample[hi] - sample[lo])

    knee_p = 0.9
    q90 = empirical(knee_p)
    above = [v for v in sample if v > q90]
    excess = sum(above) / len(above) - q90 if above else 0.0
    out = []
    for k in range(QUANTILES):
        p = (k + 0.5) / QUANTILES
        v = empirical(p) if p <= knee_p else q90 + excess * math.log((1.0 - knee_p) / (1.0 - p))
        out.append(v / mean)
    return tuple(out)


@lru_cache(maxsize=1024)
def answers_at_eos(mean: float, cut: float) -> LengthDist:
    """The measured shape of ShareGPT answers that end at EOS (:func:`_measured_shape`)
    scaled to ``mean``, cut at ``cut``."""
    return _scaled_to_mean(_measured_shape(), mean, mean, cut)


def sharegpt_input(mean: float | None = None) -> LengthDist:
    """ShareGPT-like prompt lengths about ``mean`` (default the bundled mean), cut at 1024."""
    i = float(mean or SHAREGPT_INPUT_MEAN)
    if i >= SHAREGPT_MAX_PROMPT:  # a mean at or over the cut cannot come from the cut shape
        return LengthDist.of(i)
    return lognormal(i, SHAREGPT_SIGMA, float(SHAREGPT_MAX_PROMPT))


def sharegpt_output(mean: float | None = None, input_mean: float | None = None, to_eos: bool = False) -> LengthDist:
    """ShareGPT-like output lengths about ``mean``; the cut leaves room for the prompt's mean
    within the 2048-token request. ``to_eos``: answers the model ended at its EOS, up to the
    conversation's reply length (a client that does not ignore EOS: ``vllm bench serve``'s
    default), the measured shape; else the replies' own lengths (knee's client, SGLang's
    ``bench_serving`` and vLLM's throughput benchmark ignore EOS), the log-normal."""
    o = float(mean or SHAREGPT_OUTPUT_MEAN)
    cut = max(4.0, SHAREGPT_MAX_TOTAL - float(input_mean or SHAREGPT_INPUT_MEAN))
    if o >= cut:
        return LengthDist.of(o)
    return answers_at_eos(o, cut) if to_eos else lognormal(o, SHAREGPT_SIGMA, cut)


def sharegpt(input_mean: float | None = None, output_mean: float | None = None, to_eos: bool = False) -> tuple[LengthDist, LengthDist]:
    """ShareGPT-like (prompt, output) length distributions (see the module docstring), with
    other means where given."""
    return sharegpt_input(input_mean), sharegpt_output(output_mean, input_mean, to_eos)


def answers_capped(cap: float, input_mean: float | None = None) -> LengthDist:
    """ShareGPT answers that end at EOS or at ``cap`` tokens, whichever comes first: a client
    that fixes every request's ``max_tokens`` (``--sharegpt-output-len``) and lets the model
    stop. The bundled EOS shape at its own mean, each answer cut at the cap (the mean falls
    below the cap's; nothing is rescaled: the model's answers do not lengthen because the
    cap is higher than a reply)."""
    natural = sharegpt_output(None, input_mean, to_eos=True)
    vals = tuple(min(int(cap), v) for v in (natural.values or (int(natural.mean),)))
    return LengthDist(kind="empirical", mean=sum(vals) / len(vals), values=vals)


def request_lengths(
    dataset: str, input_len: float | None, output_len: float | None, range_ratio: float = 0.0, ignore_eos: bool = True
) -> tuple[LengthDist, LengthDist]:
    """The (prompt, output) lengths a plan's workload stands for: ShareGPT's bundled shape
    about the given means (None: the bundled ones; answers at EOS where the client lets the
    model stop), else
    ``input_len`` / ``output_len`` fixed or uniform within ``range_ratio``. One place, so the
    estimate, the recommendation and a measured recommendation read the same requests."""
    if dataset == "sharegpt":
        return sharegpt(input_len, output_len, to_eos=not ignore_eos)
    if input_len is None or output_len is None:
        raise ValueError(f"{dataset} lengths need an input and an output length")
    if range_ratio:
        return (
            LengthDist(kind="uniform", mean=input_len, range_ratio=range_ratio),
            LengthDist(kind="uniform", mean=output_len, range_ratio=range_ratio),
        )
    return LengthDist.of(input_len), LengthDist.of(output_len)


def describe(
    dataset: str,
    input_len: float,
    output_len: float,
    range_ratio: float = 0.0,
    ignore_eos: bool = True,
    short: bool = False,
    source: str | None = None,
) -> str:
    """The requests in words, as every report names them: ``1024 in / 512 out ±20%``, or
    ``ShareGPT-like lengths (means 231 in / 195 out; answers end at EOS)``; ``short`` for a
    title or a one-line summary (``1024/512 tok``, ``ShareGPT 231/195 tok to EOS``).
    ``source``: the lengths file the requests came from (their means), as the report names it."""
    if source:
        if short:
            return f"{input_len:.0f}/{output_len:.0f} tok from {source}"
        return f"lengths from {source} (means {input_len:.0f} in / {output_len:.0f} out)"
    if dataset == "sharegpt":
        if short:
            return f"ShareGPT {input_len:.0f}/{output_len:.0f} tok" + (" to EOS" if not ignore_eos else "")
        eos = "; answers end at EOS" if not ignore_eos else ""
        return f"ShareGPT-like lengths (means {input_len:.0f} in / {output_len:.0f} out{eos})"
    spread = f" ±{range_ratio:.0%}" if range_ratio else ""
    caps = "" if ignore_eos else (", caps" if short else " (caps: the model may stop first)")
    if short:
        return f"{input_len:g}/{output_len:g} tok{spread}{caps}"
    return f"{input_len:g} in / {output_len:g} out{spread}{caps}"
