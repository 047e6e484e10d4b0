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
- shape: log-normal with sigma 1 (ShareGPT's conversations are heavy-tailed: a median well
  under the mean and a long tail of long requests), 256 deterministic quantiles so every run
  sees the same lengths;
- cut where ``vllm bench serve`` and SGLang's ``bench_serving`` filter single-turn ShareGPT:
  prompts over 1024 tokens and requests over 2048 in all are dropped. The tail matters: the
  longest requests decode nearly alone at the end of a burst and set how long it drains.

Not measured here: the exact quantiles of ShareGPT V3 (the file is not bundled and nothing
here reaches the network); the bench rows that use this shape (``bench/rows.py``) are where
its effect on predictions is checked.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

from core.spec.workload import LengthDist

SHAREGPT_INPUT_MEAN = 230.969
SHAREGPT_OUTPUT_MEAN = 194.523
SHAREGPT_SIGMA = 1.0
SHAREGPT_MAX_PROMPT = 1024
SHAREGPT_MAX_TOTAL = 2048
QUANTILES = 256


@lru_cache(maxsize=1024)
def lognormal(mean: float, sigma: float, cut: float | None = None) -> LengthDist:
    """A log-normal length distribution as :data:`QUANTILES` quantiles, cut at ``cut`` and
    scaled so its mean is ``mean`` (a benchmark's measured mean is after its own filter)."""
    z = [NormalDist().inv_cdf((k + 0.5) / QUANTILES) for k in range(QUANTILES)]
    median = mean / math.exp(sigma**2 / 2)
    vals = [mean] * QUANTILES
    for _ in range(30):  # the cut lowers the mean: raise the median until it is back
        vals = [min(cut or math.inf, max(1.0, median * math.exp(sigma * x))) for x in z]
        got = sum(vals) / len(vals)
        if abs(got - mean) < 1e-3 * mean or (cut and min(vals) >= cut):
            break
        median *= mean / got
    ints = tuple(int(max(1, round(v))) for v in vals)
    return LengthDist(kind="empirical", mean=sum(ints) / len(ints), values=ints)


def sharegpt_input(mean: float | None = None) -> LengthDist:
    """ShareGPT-like prompt lengths about ``mean`` (default the bundled mean), cut at 1024."""
    i = float(mean or SHAREGPT_INPUT_MEAN)
    if i >= SHAREGPT_MAX_PROMPT:  # a mean at or over the cut cannot come from the cut shape
        return LengthDist.of(i)
    return lognormal(i, SHAREGPT_SIGMA, float(SHAREGPT_MAX_PROMPT))


def sharegpt_output(mean: float | None = None, input_mean: float | None = None) -> LengthDist:
    """ShareGPT-like output lengths about ``mean``; the cut leaves room for the prompt's mean
    within the 2048-token request."""
    o = float(mean or SHAREGPT_OUTPUT_MEAN)
    cut = max(4.0, SHAREGPT_MAX_TOTAL - float(input_mean or SHAREGPT_INPUT_MEAN))
    return LengthDist.of(o) if o >= cut else lognormal(o, SHAREGPT_SIGMA, cut)


def sharegpt(input_mean: float | None = None, output_mean: float | None = None) -> tuple[LengthDist, LengthDist]:
    """ShareGPT-like (prompt, output) length distributions (see the module docstring), with
    other means where given."""
    return sharegpt_input(input_mean), sharegpt_output(output_mean, input_mean)
