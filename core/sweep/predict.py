"""Predictions the adaptive strategy ranks configurations by.

The estimator's analytic predictor (``core.estimate.predict.Predictor``) is used when it is
available: its memory plan decides whether a configuration fits and its steady state gives
the ``vllm bench serve`` keys per load point. The adaptive strategy only needs the *ordering*
and a rough scale to be right — it recalibrates against what it measures — so where the
estimator cannot answer, a small fallback model over the same step cost model is used:

- effective batch ``b`` = min(concurrency, max_num_seqs, sequences the KV cache holds);
- one engine step decodes ``b`` sequences at their mean context and prefills the prompt
  tokens that arrive per step in steady state (``b·ISL/OSL``, capped by the token budget);
- output throughput = b / step; E2E = OSL steps plus the prefill; requests beyond ``b``
  wait their turn (Little's law), which is what breaks a latency SLO at high concurrency.
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Any

from core.errors import KneeError
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.workload import Workload

log = logging.getLogger(__name__)


def _warn_once(seen: set, what: str, e: Exception) -> None:
    """Log an unexpected estimator failure once per kind of error (a sweep asks thousands of
    times; one line says the estimator has a bug and the fallback model is answering). Only
    the parallelism and error are named: a config's extra_args may hold an API key."""
    key = (what, type(e).__name__, str(e))
    if key not in seen:
        seen.add(key)
        log.warning("the estimator failed (%s: %s: %s); the fallback model answers instead", what, type(e).__name__, e)


class SurrogatePredictor:
    """The adaptive strategy's surrogate: ``vllm bench serve`` keys predicted per
    configuration and load point, from the estimator where it answers, else from the small
    fallback model of the module docstring. (Not :class:`core.estimate.Predictor`, which it
    wraps.)"""

    def __init__(self, arch, hardware, engine: str = "vllm", engine_version: str | None = None, env: dict[str, str] | None = None):
        self.arch = arch
        self.hardware = hardware
        # Whose step costs and scheduler (core/estimate/params.engine_profile); the servers'
        # environment can pick another engine than the release's default (VLLM_USE_V1=0).
        # Only that variable is kept: the rest of a launch's environment may hold tokens.
        self.engine, self.engine_version = engine, engine_version
        self.env = {k: v for k, v in (env or {}).items() if k == "VLLM_USE_V1"}
        self._warned: set = set()  # estimator failures already logged

    @classmethod
    def for_spec(cls, spec, arch, hardware) -> SurrogatePredictor:
        """The predictor for a study: SGLang's profile for an SGLang sweep, vLLM's for every
        other (the simulator stands in for vLLM), at the version the study knows, in the
        environment its servers start in."""
        return cls(arch, hardware, "sglang" if spec.engine.kind == "sglang" else "vllm", spec.engine.version, spec.engine.env)

    @property
    def profile_engine(self) -> str:
        """The engine the cost model and the estimator price: :attr:`engine`, or vLLM's V0
        where the release and ``VLLM_USE_V1=0`` make it run (core.estimate.params.engine_under_env)."""
        from core.estimate.params import engine_under_env

        return engine_under_env(self.engine, self.engine_version, self.env)

    def use_hardware(self, hardware) -> None:
        """Predict for ``hardware`` from now on (a launch found the machine differs from the
        spec: no GPU peer-to-peer); the cost models and estimators built so far are dropped."""
        self.hardware = hardware
        self._forget()

    def use_engine_version(self, version: str) -> None:
        """Predict for the engine release a launch reported (GET /version) from now on."""
        self.engine_version = version
        self._forget()

    def _forget(self) -> None:
        self.__dict__.pop("_est", None)
        SurrogatePredictor._cost.cache_clear()

    @lru_cache(maxsize=256)
    def _cost(self, tp: int, kv_dtype: str):
        from core.estimate import CostModel

        return CostModel(self.arch, self.hardware.gpu, tp=tp, kv_dtype=kv_dtype, engine=self.profile_engine, engine_version=self.engine_version)

    def fits(self, cfg: ServerConfig, workload: Workload | None = None) -> tuple[bool, str | None, Any]:
        from core.estimate.memory import plan_config_memory

        if cfg.num_gpus > self.hardware.num_gpus:
            return False, f"needs {cfg.num_gpus} GPUs (TP{cfg.tp} x DP{cfg.dp}), the hardware has {self.hardware.num_gpus}", None
        if self.arch.num_heads % cfg.tp:
            return False, f"{self.arch.num_heads} attention heads do not split over TP{cfg.tp}", None
        est = self._estimator(workload) if workload is not None else None
        if est is not None:
            try:
                plan = est.memory(cfg)
                return plan.fits, plan.reason, plan
            except KneeError:
                pass  # a configuration the estimator rejects: the plain memory plan decides
            except Exception as e:  # noqa: BLE001 - an estimator bug must not stop a sweep; it is logged
                _warn_once(self._warned, f"memory plan of TP{cfg.tp} x DP{cfg.dp}", e)
        plan = plan_config_memory(self.arch, self.hardware.gpu, cfg, workload.max_total_len if workload else None)
        return plan.fits, plan.reason, plan

    def _estimator(self, workload: Workload):
        key = workload.model_dump_json()
        cache = self.__dict__.setdefault("_est", {})
        if key not in cache:
            from core.estimate.predict import Predictor as EstimatorPredictor

            try:
                cache[key] = EstimatorPredictor(
                    self.arch, self.hardware.gpu, workload, engine=self.profile_engine, engine_version=self.engine_version
                )
            except KneeError:
                cache[key] = None  # a workload the estimator rejects: the fallback model answers
            except Exception as e:  # noqa: BLE001 - an estimator bug must not stop a sweep; it is logged
                _warn_once(self._warned, "building the estimator for this workload", e)
                cache[key] = None
        return cache[key]

    def predict(self, cfg: ServerConfig, workload: Workload, load: LoadPoint) -> dict[str, float]:
        """``vllm bench serve`` keys predicted for ``load`` on ``cfg`` ({} when it cannot run)."""
        est = self._estimator(workload)
        if est is not None:
            try:
                if cfg.num_gpus > self.hardware.num_gpus or not est.memory(cfg).fits:
                    return {}
                pred = est.predict(cfg, concurrency=load.concurrency, request_rate=load.request_rate, num_prompts=load.num_prompts)
                out = dict(pred.metrics())
                out["request_goodput"] = out["request_throughput"]
                return out
            except KneeError:
                pass  # a load point the estimator rejects: fall through to the small model
            except Exception as e:  # noqa: BLE001 - an estimator bug must not stop a sweep; it is logged
                _warn_once(self._warned, f"prediction of TP{cfg.tp} x DP{cfg.dp}", e)
        return self._fallback(cfg, workload, load)

    def _fallback(self, cfg: ServerConfig, workload: Workload, load: LoadPoint) -> dict[str, float]:
        ok, reason, plan = self.fits(cfg, workload)
        if not ok:
            return {}
        cm = self._cost(cfg.tp, cfg.kv_cache_dtype)
        isl, osl = float(workload.input.mean), float(max(workload.output.mean, 1))
        kv_seqs = plan.max_sequences(isl + osl) if plan is not None else cfg.seqs
        conc = load.concurrency or workload.num_prompts
        b = max(1, min(conc, cfg.seqs, kv_seqs or 1))
        ctx = isl + osl / 2
        prefill_per_step = min(b * isl / osl, max(cfg.batched_tokens - b, 1))
        step = cm.step_seconds(prefill_per_step, prefill_per_step * (isl / 2), prefill_per_step, b, b * ctx)
        step += cm.output_token_overhead_s * b
        # Prefill of one prompt in chunks of the token budget, beside the running decodes.
        chunks = max(1, math.ceil(isl / cfg.batched_tokens))
        ttft = chunks * cm.step_seconds(min(isl, cfg.batched_tokens), isl * isl / 2 / chunks, isl, b, b * ctx) + cm.request_overhead_s
        e2e_service = ttft + (osl - 1) * step
        out_tps = b / step  # each step emits one token per running sequence
        req_tps = b / e2e_service
        if load.request_rate is not None:
            req_tps = min(req_tps, load.request_rate)
            out_tps = min(out_tps, req_tps * osl)
        # Closed loop beyond the batch: each request waits for (conc − b)/b service times.
        wait = max(0.0, (conc - b) / b) * e2e_service if load.request_rate is None else 0.0
        e2e = e2e_service + wait
        out = {
            "output_throughput": out_tps,
            "request_throughput": req_tps,
            "total_token_throughput": req_tps * (isl + osl),
            "mean_ttft_ms": (ttft + wait) * 1000,
            "mean_tpot_ms": step * 1000,
            "mean_itl_ms": step * 1000,
            "mean_e2el_ms": e2e * 1000,
            "effective_batch": b,
        }
        # Percentile shapes of a closed loop are tight; a margin the strategy widens anyway.
        for stat, f in (("median", 1.0), ("p90", 1.1), ("p95", 1.15), ("p99", 1.25)):
            for m in ("ttft", "tpot", "itl", "e2el"):
                out[f"{stat}_{m}_ms"] = out[f"mean_{m}_ms"] * f
        out["request_goodput"] = req_tps
        return out
