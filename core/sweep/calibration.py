"""Calibration from the study's own measurements: knee's numbers converge to the user's machine.

The estimator prices a step from datasheet peaks and published measurements; the machine a
sweep runs on is none of those. After every measured point the runner hands it to a
:class:`StudyCalibration`, which fits the hardware's step profile again (the linear step
model of :mod:`core.simulate.profiles`: a fixed cost per step, a cost per sequence, a cost
per computed token, and the request overhead) from every closed-loop point measured so far
on this hardware and engine, one fit per tensor-parallel degree (TP changes what a step
costs; ``max_num_seqs`` or the token budget do not). The rest of the study is then predicted
again by the scheduler simulation priced with that profile.

Stages, as points arrive for a TP degree:
- none measured: the base predictor's numbers (the estimator), unchanged;
- one concurrency measured: the base prediction scaled by measured/predicted throughput and
  TPOT at that point (a profile needs two concurrencies to separate the fixed and the
  per-sequence cost);
- two or more: the fitted profile through the simulator.

The calibration is plain data (:meth:`StudyCalibration.as_dict`), stored in the study's info
and exported with it; ``knee estimate --calibrate-from STUDY`` rebuilds it with
:meth:`from_dict` to predict other concurrencies, knobs and lengths on the same machine.
"""

from __future__ import annotations

import hashlib
import logging
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, TypeGuard

from core.errors import BadInput
from core.simulate import simulate
from core.simulate.profiles import MeasuredPoint, StepProfile, fit_step_profile
from core.spec.serving import LoadPoint, ServerConfig
from core.spec.workload import Workload

log = logging.getLogger(__name__)

# Keys of a vllm-bench summary that a calibrated prediction replaces.
_THROUGHPUT_KEYS = ("output_throughput", "request_throughput", "total_token_throughput", "request_goodput")
_TPOT_KEYS = tuple(f"{s}_{m}_ms" for s in ("mean", "median", "p90", "p95", "p99") for m in ("tpot", "itl"))


@dataclass
class Observation:
    """One measured closed-loop point, reduced to what a fit reads."""

    tp: int
    concurrency: int
    input_len: int
    output_len: int
    ttft_s: float
    tpot_s: float
    output_throughput: float
    server_args: dict[str, Any] = field(default_factory=dict)
    in_flight: float | None = None  # requests the client held in flight on average (the summary's "concurrency")


def _positive(v: Any) -> TypeGuard[float]:
    """A finite number above zero (a summary's value may be missing, NaN or 0)."""
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def observation(server_args: dict[str, Any], client_args: dict[str, Any], summary: dict[str, Any]) -> Observation | None:
    """The fit's view of a measured point; None where it cannot inform one (open loop, no
    TPOT observed, nothing completed)."""
    conc = client_args.get("max_concurrency")
    done = summary.get("completed") or 0
    ttft, tpot, thr = summary.get("mean_ttft_ms"), summary.get("mean_tpot_ms"), summary.get("output_throughput")
    if client_args.get("request_rate") not in (None, "inf", float("inf")) or not conc or done <= 0:
        return None
    if not (_positive(ttft) and _positive(tpot) and _positive(thr)):
        return None
    isl = round((summary.get("total_input_tokens") or 0) / done)
    osl = round((summary.get("total_output_tokens") or 0) / done)
    if isl <= 0 or osl <= 1:
        return None
    tp = int(server_args.get("tensor_parallel_size") or server_args.get("tp") or 1)
    held = summary.get("concurrency")
    return Observation(
        tp,
        int(conc),
        isl,
        osl,
        _server_ttft(summary, ttft, tpot, osl) / 1e3,
        tpot / 1e3,
        float(thr),
        dict(server_args),
        float(held) if _positive(held) else None,
    )


def _server_ttft(summary: dict[str, Any], ttft_ms: float, tpot_ms: float, osl: int) -> float:
    """The point's TTFT as the server gave it. Where some requests' tokens all reached the
    client in one read (``tpot_unobserved``: a client starved of CPU beside the server), their
    decode sits inside their TTFT, and the mean TTFT is not the server's: measured on the
    2-core box at c=1, 131 ms where 58% of requests came in one read, against 23 ms with the
    client on a core of its own. Their E2E is still right (the last token's arrival), so the
    TTFT the E2E implies with the observed decode rate replaces it."""
    e2e = summary.get("mean_e2el_ms")
    if not summary.get("tpot_unobserved") or not _positive(e2e):
        return ttft_ms
    implied = e2e - (osl - 1) * tpot_ms
    return implied if 0 < implied < ttft_ms else ttft_ms


class StudyCalibration:
    """Refits the step profile from a study's measured points and predicts with it.

    ``config_of(server_args)`` turns stored server arguments into a :class:`ServerConfig`
    (the sweep's own parser); ``base(cfg, workload, load)`` is the uncalibrated predictor
    (the estimator's), used until a profile is fitted; ``kv_tokens`` sets the KV cache directly where it is not
    planned from GPU memory (vLLM on CPU)."""

    def __init__(self, arch, hardware, config_of, *, base=None, kv_tokens: int | None = None, name: str = "study"):
        self.arch = arch
        self.base = base  # (cfg, workload, load) -> uncalibrated vllm-bench keys, or None
        self.hardware = hardware
        self.config_of = config_of
        self.kv_tokens = kv_tokens
        self.name = name
        self.observations: list[Observation] = []
        self.profiles: dict[int, StepProfile] = {}
        self.refits = 0
        # Each server configuration's own (throughput, TPOT) factors over its TP's profile
        # (:meth:`_launch_factors`), by :func:`_launch_key`; stored with the profiles.
        self.launches: dict[str, tuple[float, float]] = {}

    # -- learning ---------------------------------------------------------------------------

    def observe(self, server_args: dict[str, Any], client_args: dict[str, Any], summary: dict[str, Any]) -> bool:
        """Add one measured point; refit its TP degree's profile. True when a profile was
        (re)fitted from it."""
        obs = observation(server_args, client_args, summary)
        if obs is None:
            return False
        self.observations.append(obs)
        return self._refit(obs.tp)

    def _refit(self, tp: int) -> bool:
        group = [o for o in self.observations if o.tp == tp]
        if len({o.concurrency for o in group}) < 2:
            return False
        points = [
            MeasuredPoint(
                o.concurrency,
                o.input_len,
                o.output_len,
                o.ttft_s,
                o.tpot_s,
                config=self.config_of(o.server_args),
                req_per_s=o.output_throughput / o.output_len,
                in_flight=o.in_flight,
            )
            for o in group
        ]
        try:
            profile = fit_step_profile(points, self.arch, self.hardware, points[0].config, kv_tokens=self.kv_tokens, name=f"{self.name}-tp{tp}")
        except (BadInput, ValueError, ZeroDivisionError) as e:
            # Noisy points can drive the fit's refinement off (a NaN cost, measured once on a
            # loaded box): the study keeps its last good profile rather than stop the sweep.
            log.warning("calibration: no refit for TP%d from %d points: %s", tp, len(points), e)
            return False
        if not all(
            math.isfinite(v) and v >= 0 for v in (profile.step_s, profile.seq_s, profile.token_s, profile.request_overhead_s, profile.client_send_s)
        ):
            log.warning("calibration: refit for TP%d gave a non-finite or negative cost (%s); kept the last profile", tp, profile)
            return False
        self.profiles[tp] = profile
        self.refits += 1
        # The new profile moves every launch's factors; each configuration once, not once
        # per point (each factor replays all of that configuration's points).
        configs = {_launch_key(c): c for c in (self.config_of(o.server_args) for o in group)}
        for key, cfg in configs.items():
            self.launches[key] = self._launch_factors(cfg, profile)
        return True

    # -- predicting -------------------------------------------------------------------------

    def stage(self, tp: int) -> str:
        """``profile`` (fitted), ``scaled`` (one concurrency measured) or ``none``."""
        if tp in self.profiles:
            return "profile"
        return "scaled" if any(o.tp == tp for o in self.observations) else "none"

    def predict(self, cfg: ServerConfig, workload: Workload, load: LoadPoint) -> dict[str, float]:
        """vllm-bench keys predicted for ``load`` on ``cfg``, calibrated as far as the study's
        points allow ({} where nothing can be said)."""
        profile = self.profiles.get(cfg.tp)
        if profile is not None:
            try:
                out = simulate(self.arch, self.hardware, cfg, workload, load, cost=profile, kv_tokens=self.kv_tokens).summary
            except BadInput as e:  # the simulator refuses a configuration a real server would refuse
                log.info("calibration: %s", e)
                return {}
            pred = {k: float(v) for k, v in out.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            _scale(pred, *self.launches.get(_launch_key(cfg), (1.0, 1.0)))
            pred["calibrated"] = 1.0
            return pred
        base = dict(self.base(cfg, workload, load) or {}) if self.base else {}
        obs = [o for o in self.observations if o.tp == cfg.tp]
        if not obs or not base:
            return base
        # One concurrency measured: scale by measured over predicted at that point.
        o = obs[-1]
        ref = self.base(self.config_of(o.server_args), Workload.fixed(o.input_len, o.output_len), LoadPoint(concurrency=o.concurrency)) or {}
        thr_k = o.output_throughput / ref["output_throughput"] if ref.get("output_throughput") else 1.0
        tpot_k = o.tpot_s * 1e3 / ref["mean_tpot_ms"] if ref.get("mean_tpot_ms") else 1.0
        _scale(base, thr_k, tpot_k)
        base["calibrated"] = 0.5
        return base

    def _launch_factors(self, cfg: ServerConfig, profile: StepProfile) -> tuple[float, float]:
        """Throughput and TPOT factors of this server configuration's own measured points
        over what the profile (fitted on every point of the TP degree) predicts for them.
        The profile carries what all launches share; a launch also has its own speed, which no
        cost model sees (CUDA-graph sizes set by max_num_seqs on a GPU; process placement, and
        the client's share of the cores, on a CPU box). Replayed on this VM's seven stored
        two-launch runs (bench/calibration.py --points), the median of their calibrated out
        tok/s errors went 23.5% -> 16.1% and TPOT 12.0% -> 11.2%; shrinking the factor toward 1
        by one or two pseudo-points did worse (19.9/14.1%, 22.1/13.4%)."""
        thr, tpot = [], []
        for o in self.observations:
            if o.tp != cfg.tp or self.config_of(o.server_args) != cfg:
                continue
            wl = Workload.fixed(o.input_len, o.output_len, num_prompts=max(4 * o.concurrency, 16))
            try:
                ref = simulate(
                    self.arch, self.hardware, cfg, wl, LoadPoint(concurrency=o.concurrency), cost=profile, kv_tokens=self.kv_tokens
                ).summary
            except BadInput:
                continue
            if _positive(ref.get("output_throughput")):
                thr.append(math.log(o.output_throughput / ref["output_throughput"]))
            if _positive(ref.get("mean_tpot_ms")):
                tpot.append(math.log(o.tpot_s * 1e3 / ref["mean_tpot_ms"]))
        return _geomean(thr), _geomean(tpot)

    # -- storing ----------------------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kv_tokens": self.kv_tokens,
            "hardware": self.hardware.gpu.name if self.hardware is not None else None,
            "refits": self.refits,
            "points": len(self.observations),
            # Seconds as fitted (exact round trip); StepProfile.as_dict() is the display form.
            "profiles": {str(tp): asdict(p) for tp, p in sorted(self.profiles.items())},
            "launches": {k: list(v) for k, v in sorted(self.launches.items())},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], arch, hardware, config_of, base=None) -> StudyCalibration:
        cal = cls(arch, hardware, config_of, base=base, kv_tokens=d.get("kv_tokens"), name=d.get("name", "study"))
        for tp, p in (d.get("profiles") or {}).items():
            cal.profiles[int(tp)] = StepProfile(**p)
        cal.launches = {k: (float(v[0]), float(v[1])) for k, v in (d.get("launches") or {}).items()}
        cal.refits = int(d.get("refits", 0))
        return cal


def _launch_key(cfg: ServerConfig) -> str:
    """A server configuration's key in the stored calibration: a digest of all its fields, so
    extra server arguments (an API key among them) are never written out."""
    return hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()[:16]


def _geomean(logs: list[float]) -> float:
    """exp of the mean log-ratio (1 with none)."""
    return math.exp(sum(logs) / len(logs)) if logs else 1.0


def _scale(pred: dict[str, float], thr_k: float, tpot_k: float) -> None:
    for k in _THROUGHPUT_KEYS:
        if k in pred:
            pred[k] *= thr_k
    for k in _TPOT_KEYS:
        if k in pred:
            pred[k] *= tpot_k


def ape(predicted: float | None, measured: float | None) -> float | None:
    """Absolute percentage error of one prediction, None where either side is missing."""
    if predicted is None or not measured:
        return None
    return abs(predicted - measured) / abs(measured)


def median_ape(pairs: list[tuple[float | None, float | None]]) -> float | None:
    errs = [e for e in (ape(p, m) for p, m in pairs) if e is not None]
    return statistics.median(errs) if errs else None


class CalibratedPredictor:
    """The sweep's predictor, calibrated by the study's own points as they are measured.

    Wraps the estimator-backed predictor (``fits``/``predict``, as the strategies call it);
    :meth:`observe` is called by the runner after each stored point. The adaptive strategy's
    ranking and the SLA search's bracket then read calibrated numbers."""

    def __init__(self, base, calibration: StudyCalibration):
        self.base = base
        self.calibration = calibration
        if calibration.base is None and base is not None:
            calibration.base = base.predict

    def fits(self, cfg: ServerConfig, workload: Workload | None = None):
        if self.base is None:
            return True, None, None
        return self.base.fits(cfg, workload)

    def predict(self, cfg: ServerConfig, workload: Workload, load: LoadPoint) -> dict[str, float]:
        return self.calibration.predict(cfg, workload, load)

    def observe(self, server_args: dict[str, Any], client_args: dict[str, Any], summary: dict[str, Any]) -> bool:
        return self.calibration.observe(server_args, client_args, summary)


def machine_of(spec) -> tuple[Any, int | None]:
    """(hardware, kv_tokens) a study's points were measured on: the spec's GPU or instance,
    or, for vLLM on CPU (``VLLM_CPU_KVCACHE_SPACE`` in the engine's environment), a CPU host
    whose KV cache is that many GiB. (None, None) where neither is known."""
    from core.catalog import plan_hardware
    from core.simulate.profiles import cpu_hardware

    if spec.instance or spec.gpu:
        return plan_hardware(spec), None
    env = dict(spec.engine.env or {})
    if spec.engine.kind != "sim" and "VLLM_CPU_KVCACHE_SPACE" in env:
        from core.catalog import load_model

        gib = float(env["VLLM_CPU_KVCACHE_SPACE"])
        return cpu_hardware(), int(gib * 2**30 // load_model(spec.model).kv_bytes_per_token())
    return None, None


def for_study(spec, base=None) -> StudyCalibration | None:
    """A fresh calibration for a study's machine (None where the machine is unknown)."""
    from core.catalog import load_model
    from core.sweep.space import server_config

    hardware, kv_tokens = machine_of(spec)
    if hardware is None:
        return None
    return StudyCalibration(load_model(spec.model), hardware, lambda a: server_config(spec.model, a), base=base, kv_tokens=kv_tokens)


def stored(store, study: str) -> StudyCalibration:
    """The calibration a study stored (``knee estimate --calibrate-from``). Raises BadInput
    naming what is missing: the study, or a fitted profile in it."""
    row = store.study(study)
    if row is None:
        raise BadInput(f"no study named {study!r} in {store.shown_url}", "see knee results --list")
    d = (row.get("info") or {}).get("calibration")
    if not d or not d.get("profiles"):
        raise BadInput(
            f"study {study!r} has no fitted calibration",
            "it needs closed-loop points measured at two concurrencies or more on a real engine",
        )
    from core.catalog import load_model
    from core.sweep.space import server_config

    spec = store.spec(study)
    hardware, _ = machine_of(spec)
    if hardware is None:
        raise BadInput(f"study {study!r} does not say which machine it measured", "it was run without --gpu/--instance")
    return StudyCalibration.from_dict(d, load_model(spec.model), hardware, lambda a: server_config(spec.model, a))


def replay(points, calibration: StudyCalibration, workload_of) -> list[dict[str, Any]]:
    """Each stored point in the order it was measured, with what the calibration predicted for
    it just before (``calibrated``) and what the base predictor did (``base``): the live
    sequence again, from the store (the runner's calibration sees the same points in the same
    order, so this is what it predicted). ``workload_of(point)`` gives the point's workload."""
    from core.spec.serving import LoadPoint

    out = []
    for p in sorted((p for p in points if p.status == "ok" and not p.simulated), key=lambda p: p.started_at or 0):
        conc = p.client_args.get("max_concurrency")
        if not conc:
            continue
        cfg, wl, load = calibration.config_of(p.server_args), workload_of(p), LoadPoint(concurrency=int(conc))
        base = calibration.base(cfg, wl, load) if calibration.base else {}
        out.append({"point": p, "base": base or {}, "calibrated": calibration.predict(cfg, wl, load), "stage": calibration.stage(cfg.tp)})
        calibration.observe(p.server_args, p.client_args, p.summary)
    return out


def predict_curve(cal: StudyCalibration, cfg: ServerConfig, input_len: int, output_len: int, concurrencies: list[int]) -> list[dict[str, Any]]:
    """Calibrated predictions for ``cfg`` at each closed-loop concurrency (what
    ``knee estimate --calibrate-from`` prints): the vllm-bench keys plus the stage used."""
    rows = []
    for c in concurrencies:
        wl = Workload.fixed(input_len, output_len, num_prompts=max(4 * c, 16))
        # The simulator's summary has its own (measured, fractional) "concurrency": ours wins.
        rows.append({**cal.predict(cfg, wl, LoadPoint(concurrency=c)), "concurrency": c, "stage": cal.stage(cfg.tp)})
    return rows
