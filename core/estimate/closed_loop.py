"""A closed loop: a client that holds C requests in flight, each sent as the last one ends.

:meth:`core.estimate.predict.Predictor.predict` calls it for a load point given as a
concurrency; fixed lengths, whose requests stay in lock-step, go to
:func:`core.estimate.waves.wave` instead. The running batch is a fixed point of Little's law,
C = X·(API overhead + wait for the next step + residence); past the running cap the excess
queues and waits (C − N)/X.
"""

from __future__ import annotations

import math

from core.estimate.costmodel import CostModel
from core.estimate.drain import decode_spans, drain_profile, last_answer
from core.estimate.latency import finish
from core.estimate.prediction import Prediction
from core.estimate.stats import cv2_len, is_fixed
from core.estimate.steady import Shape, multi_step, steady_state
from core.estimate.waves import prefill_storm
from core.spec.serving import ServerConfig


def closed_loop(
    shape: Shape,
    cfg: ServerConfig,
    cm: CostModel,
    concurrency: float,
    cap: float,
    cap_reason: str,
    budget: int,
    seqs: int,
    cached: float,
    evicts: bool,
    kv_tokens: float,
    num_prompts: int | None,
) -> Prediction:
    """``concurrency``: the whole deployment's (``cfg.dp`` replicas share it); ``evicts``:
    whether a full KV cache makes the engine evict running requests; ``kv_tokens``: one
    replica's KV cache; ``num_prompts``: a finite benchmark run's length (None: the steady
    state production traffic sees)."""
    c = concurrency / cfg.dp
    n = min(c, cap)
    evicting = evicts and c > cap
    ovh = cm.request_overhead_s
    tail = cm.output_token_overhead_s * shape.output_len
    ms = multi_step(cfg)
    st = steady_state(shape, cm, n, budget, cached, evicting)
    for _ in range(8):
        # Little's law: of the C requests a client holds, the engine runs those not in
        # API overhead or waiting for the next step.
        e = ovh + st.align(n - 1, ms, cm.steps_ahead) + st.cycle + tail
        n_new = min(cap, max(min(c, 1.0), c * st.cycle / e))
        if abs(n_new - n) < 1e-3 * max(n, 1.0):
            break
        n = 0.5 * (n + n_new)
        st = steady_state(shape, cm, n, budget, cached, evicting)
    x = st.throughput
    e = ovh + st.align(n - 1, ms, cm.steps_ahead) + st.cycle + tail
    wait = max(0.0, c / x - e) if x > 0 else math.inf
    limited = "load" if n < cap - 1e-6 else cap_reason
    resumed = 0.0
    if limited == "kv_cache" and not shape.chunked and wait > 0:
        # Prefill-first schedulers (vLLM < 0.8) admit a prompt whenever its blocks are
        # free and preempt running sequences when the cache fills: past the KV limit
        # the excess waits as preempted sequences (decode slows), not before the first
        # token. Only what exceeds the prompt-only capacity waits for admission.
        admit = min(float(seqs), kv_tokens / (shape.input_len - cached + 16.0))
        ttft_wait = max(0.0, c - max(admit, n)) / x
        resumed, wait = wait - ttft_wait, ttft_wait
    # A finite benchmark run (num_prompts given) starts with its first C requests at
    # once: their prompts prefill back to back (production traffic has no such start).
    first_wave = (0.0, 0.0)
    run_decode = None
    if num_prompts:
        w = min(c, cap)
        first_wave = (min(1.0, w / max(num_prompts / cfg.dp, 1.0)), prefill_storm(shape, cm, w, budget, cached))
        n_run = num_prompts / cfg.dp
        if n_run > c and x > 0 and not is_fixed(shape.output):
            # The clients send their last requests (n_run - C) / X in; the run lasts until
            # the longest of those still decoding has answered, as the batch thins.
            before = ovh + st.align(n - 1, ms, cm.steps_ahead) + wait + st.prefill
            span = (n_run - c) / x
            # The clients' first requests started together, so the next ones go out only as
            # those end: renewal theory puts the i-th end of C slots started together at
            # (i + C(1 - CV^2)/2) / X (as a burst's queue, Predictor.max_throughput), after
            # their prompts' prefill, back to back (half of it on average).
            late = w * (1.0 - min(cv2_len(shape.output), 1.0)) / (2.0 * x) + first_wave[1] / 2.0
            tok = cm.output_token_overhead_s
            profile = drain_profile(shape, cm, st, tok)  # one drain for the run's end and its tail
            end = late + last_answer(shape, cm, st, span, n_run, before, tok, profile)
            # The same thinning batch decodes the run's long answers faster than the steady
            # state does: the E2E tail of a run a few times the concurrency long.
            run_decode = decode_spans(shape, cm, st, span, c / n_run, before, tok, profile)
            x = min(x, n_run / end)
    return finish(
        shape,
        cfg,
        cm,
        st,
        x,
        wait,
        "fixed",
        limited,
        False,
        concurrency,
        None,
        budget,
        seqs,
        cap,
        resumed=resumed,
        first_wave=first_wave,
        run_decode=run_decode,
        run_requests=num_prompts,
    )
