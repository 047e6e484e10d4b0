"""What the analytic estimator returns for one configuration at one load point, and the
fields every prediction path (steady state, waves, bursts) derives alike."""

from __future__ import annotations

from dataclasses import dataclass

from core.estimate.bands import band, kind_of
from core.estimate.costmodel import Batch, CostModel
from core.estimate.stats import Stats, round_sig
from core.spec.serving import ServerConfig


@dataclass(frozen=True)
class Prediction:
    """One configuration at one load point (whole deployment: all replicas)."""

    tp: int
    dp: int
    max_num_batched_tokens: int
    max_num_seqs: int
    concurrency: float | None  # closed loop (whole deployment)
    request_rate: float | None  # open loop (req/s, whole deployment)
    ttft_ms: Stats
    itl_ms: Stats  # inter-token gaps, pooled over tokens (vllm bench serve's ITL)
    e2e_s: Stats
    tpot_ms: Stats  # per request: (E2E − TTFT) / (O − 1); same mean as itl_ms
    req_per_s: float
    output_tok_per_s: float
    input_tok_per_s: float
    running: float  # sequences in each replica's running batch
    queued: float  # requests waiting per replica (mean)
    limited_by: str  # what caps the running batch: load, max_num_seqs, kv_cache, token_budget
    saturated: bool  # open loop: arrivals exceed what the replica completes
    prefill_chunks: int
    step_ms_mixed: float  # a step carrying prefill chunks (and the decodes)
    step_ms_decode: float  # a pure decode step
    prefill_bottleneck: str
    decode_bottleneck: str
    engine: str = "vllm"  # whose measured residuals give the bands (core/estimate/bands.py)
    kind: str = "dense"  # the model's kind ("moe" or "dense"), which may have bands of its own

    def metrics(self) -> dict[str, float]:
        """Flat keys as ``vllm bench serve`` names them (what SLO constraints read)."""
        out: dict[str, float] = {
            "request_throughput": self.req_per_s,
            "output_throughput": self.output_tok_per_s,
            "total_token_throughput": self.output_tok_per_s + self.input_tok_per_s,
        }
        for name, st, scale in (("ttft", self.ttft_ms, 1.0), ("tpot", self.tpot_ms, 1.0), ("itl", self.itl_ms, 1.0), ("e2el", self.e2e_s, 1000.0)):
            out[f"mean_{name}_ms"] = st.mean * scale
            out[f"median_{name}_ms"] = st.p50 * scale
            for q in ("p50", "p90", "p95", "p99"):
                out[f"{q}_{name}_ms"] = getattr(st, q) * scale
        return out

    def value(self, metric: str, stat: str = "mean") -> float:
        """``metric`` in knee's canonical names (ttft, itl, tpot, e2el in ms; throughputs)."""
        if metric == "ttft":
            return self.ttft_ms.get(stat)
        if metric == "itl":
            return self.itl_ms.get(stat)
        if metric == "tpot":
            return self.tpot_ms.get(stat)
        if metric == "e2el":
            return self.e2e_s.get(stat) * 1000.0
        return self.metrics()[metric]

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {
            "tp": self.tp,
            "dp": self.dp,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "ttft_ms": self.ttft_ms.as_dict(),
            "itl_ms": self.itl_ms.as_dict(),
            "tpot_ms": self.tpot_ms.as_dict(),
            "e2e_s": self.e2e_s.as_dict(),
            "req_per_s": round_sig(self.req_per_s, 4),
            "output_tok_per_s": round_sig(self.output_tok_per_s, 4),
            "input_tok_per_s": round_sig(self.input_tok_per_s, 4),
            "running_per_replica": round_sig(self.running, 3),
            "queued_per_replica": round_sig(self.queued, 3),
            "limited_by": self.limited_by,
            "saturated": self.saturated,
            "prefill_chunks": self.prefill_chunks,
            "step_ms_mixed": round_sig(self.step_ms_mixed, 3),
            "step_ms_decode": round_sig(self.step_ms_decode, 3),
            "prefill_bottleneck": self.prefill_bottleneck,
            "decode_bottleneck": self.decode_bottleneck,
            "percentiles": "approximate (analytic model)",
        }
        # Low/high of each mean from measured residuals (core/estimate/bands.py).
        means = {
            "ttft_ms": self.ttft_ms.mean,
            "itl_ms": self.itl_ms.mean,
            "tpot_ms": self.tpot_ms.mean,
            "e2e_s": self.e2e_s.mean,
            "req_per_s": self.req_per_s,
            "output_tok_per_s": self.output_tok_per_s,
        }
        d["bands"] = {
            k: {e: round_sig(x, 4) for e, x in b.items()} for k, v in means.items() if (b := band(k, v, self.engine, self.kind)) is not None
        }
        return d


def make_prediction(
    cfg: ServerConfig,
    cm: CostModel,
    budget: int,
    seqs: int,
    x: float,
    pf_batch: Batch,
    dec_batch: Batch | None,
    input_len: float,
    output_len: float,
    **fields,
) -> Prediction:
    """A :class:`Prediction` from one replica's figures: what every path derives alike (the
    knobs; the whole deployment's throughputs from a replica's request rate ``x`` and the mean
    request lengths; the bottlenecks of the step prefill chunks ride in and of the pure decode
    step, None when requests have a single output token) plus the path's own ``fields``."""
    dp = cfg.dp
    return Prediction(
        tp=cfg.tp,
        dp=dp,
        max_num_batched_tokens=budget,
        max_num_seqs=seqs,
        req_per_s=x * dp,
        output_tok_per_s=x * dp * output_len,
        input_tok_per_s=x * dp * input_len,
        prefill_bottleneck=cm.breakdown(pf_batch).bottleneck,
        decode_bottleneck=cm.breakdown(dec_batch).bottleneck if dec_batch is not None else "n/a (one output token)",
        engine=cm.engine,
        kind=kind_of(cm.arch.is_moe),
        **fields,
    )
