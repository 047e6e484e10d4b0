"""How a finite benchmark run ends: with its last answer, which with lengths that vary is the
longest request's, decoding nearly alone once no new requests come (open loops, whose
arrivals stop, and closed loops, whose clients have sent their last). Bursts price their
drain in :func:`core.estimate.waves.burst`.

The same drain sets the tail of a short closed run's E2E (:func:`decode_spans`): its long
answers finish in a batch that thins, so they decode faster than the steady state's tokens.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from core.estimate.costmodel import CostModel
from core.estimate.stats import length_classes
from core.estimate.steady import Shape, State


Drain = tuple[list[float], Callable[[float], float]]


def drain_profile(shape: Shape, cm: CostModel, st: State, per_token_s: float) -> Drain:
    """The output length classes (sorted), and the seconds to decode a number of tokens from
    the moment no new request comes: the steady batch times the share of its requests
    (length-biased, as those in flight are) with more than that many tokens left."""
    lengths = sorted(length_classes(shape.output))
    m = len(lengths)
    O = sum(lengths) / m
    # above[i]: the lengths' sum from the i-th (sorted) on, for E[(O - k)+] by bisection.
    above = [0.0] * (m + 1)
    for i in range(m - 1, -1, -1):
        above[i] = above[i + 1] + lengths[i]
    I = shape.input_len
    top = lengths[-1]
    dk = max(top / 128.0, 1.0)
    drain = [0.0]  # seconds to decode k x dk tokens from the start of the drain
    k = 0.0
    while k < top:
        i = bisect_right(lengths, k)
        left = (above[i] - k * (m - i)) / m
        b = max(1.0, st.n * left / O) if O > 0 else 1.0
        step = cm.step_seconds(0.0, 0.0, 0.0, b, b * (I + O / 2.0), 0.0) + per_token_s
        drain.append(drain[-1] + dk * step)
        k += dk

    def through_drain(tokens: float) -> float:
        i = min(tokens / dk, len(drain) - 1.0)
        lo = int(i)
        hi = min(lo + 1, len(drain) - 1)
        return drain[lo] + (i - lo) * (drain[hi] - drain[lo])

    return lengths, through_drain


def _decode_seconds(o: float, start: float, span: float, per_token: float, through_drain: Callable[[float], float]) -> float:
    """Seconds a request of ``o`` tokens decodes from ``start``: at the steady state's pace
    while requests still come (until ``span``), through the drain after."""
    done_by_span = max(span - start, 0.0) / per_token if per_token > 0 else o
    if done_by_span >= o:
        return o * per_token
    if start >= span:
        return through_drain(o)
    return span - start + through_drain(o - done_by_span)


def last_answer(
    shape: Shape, cm: CostModel, st: State, span: float, n_run: float, before_decode: float, per_token_s: float, profile: Drain | None = None
) -> float:
    """Expected seconds from a finite run's first request to its last answer, when output
    lengths vary: the latest of ``n_run`` requests' ends, each sent at random within
    ``span`` and decoding its own length, not the mean request's end after the last
    arrival. Once the arrivals stop the batch thins and the long requests decode nearly
    alone (as a burst drains, :func:`core.estimate.waves.burst`); with ShareGPT-like
    lengths at a high rate that drain, not the arrivals, sets the run's length.

    ``before_decode``: a request's seconds from arrival to its first token; ``per_token_s``:
    the client's cost of streaming each token; ``profile``: :func:`drain_profile` of the
    same arguments, where the caller has it already."""
    lengths, through_drain = profile or drain_profile(shape, cm, st, per_token_s)
    per_token = st.tpot + per_token_s
    arrivals = [span * (i + 0.5) / 16 for i in range(16)]
    ends = [a + before_decode + _decode_seconds(o, a + before_decode, span, per_token, through_drain) for o in lengths for a in arrivals]
    # The latest of n_run independent ends: P(max <= t) = F(t)^n over the ends' mixture.
    # Below the share F = 1e-12 ** (1 / n) the factor 1 - F^n is 1 to 12 digits and the sum
    # telescopes: start there.
    ends.sort()
    count = len(ends)
    start = min(count - 1, int(count * 1e-12 ** (1.0 / max(n_run, 1.0))))
    expected = ends[start]
    for i in range(start + 1, count):
        expected += (ends[i] - ends[i - 1]) * (1.0 - (i / count) ** n_run)
    return expected


def decode_spans(
    shape: Shape, cm: CostModel, st: State, span: float, first_share: float, before_decode: float, per_token_s: float, profile: Drain | None = None
) -> list[tuple[float, float]]:
    """(seconds from a request's first token to its last, weight) over a finite closed run's
    requests, sorted: ``first_share`` of them sent at its start, the rest spread over the
    ``span`` in which the clients send them; each decodes its own length at the steady
    pace while requests still come, and through the thinning batch after. In a run only a
    few times the concurrency long, most long answers end in that drain: the simulator's
    p99 E2E of ShareGPT-like lengths at 1.5x the concurrency was 0.58x what the steady pace
    gives (``bench/estimate_vs_sim.py``). ``profile``: as :func:`last_answer`'s."""
    lengths, through_drain = profile or drain_profile(shape, cm, st, per_token_s)
    # Eight send times (last_answer's sixteen would double the time; the sweep and the
    # TUI predict many points).
    per_token = st.tpot + per_token_s
    later = max(1.0 - first_share, 0.0)
    sends = [(0.0, first_share)] + [(span * (i + 0.5) / 8, later / 8) for i in range(8)]
    w = 1.0 / len(lengths)
    out = [
        (_decode_seconds(max(o - 1.0, 0.0), a + before_decode, span, per_token, through_drain), w * share)
        for o in lengths
        for a, share in sends
        if share > 0
    ]
    out.sort()
    return out
