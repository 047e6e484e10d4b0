"""Several workers on one study: ``knee sweep <args> --storage URL --study NAME --join``.

The first worker creates the study from its arguments; later ones join it and run the stored
spec (a worker whose arguments differ is refused, naming the difference, and so is one whose
GPU type or count differs from the study's, unless ``--allow-mixed-hardware``). Each worker claims
one server configuration at a time with a lease (:mod:`core.sweep.lease`), runs it as the
single runner does (launch, measure, store every point at once) and renews the lease with
its heartbeat. Pause, continue and stop are the study's (``knee_control``): every worker reads
them before each load point and claim, and a stop also while a point runs.

Every store call of a worker waits out an outage of the shared store (``store_guard.StoreGuard``).

The adaptive strategy decides across workers from the shared store: each claim asks it for the
next configuration given every point any worker stored (:mod:`core.sweep.shared_adaptive`).

Left for later (issue 14): Pareto coloured by host class.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from core.errors import BadInput
from core.results.store import LeaseLost, StudyStore
from core.serve import process as proc_mod
from core.spec.study import SweepSpec
from core.sweep import lease, shared_adaptive
from core.sweep.run import Runner
from core.sweep.control import BEAT_S, CONTROL_POLL_S, _Interrupted
from core.sweep.strategies import make_strategy
from core.sweep.summary import RunSummary
from core.sweep.summary import summary_dict as _summary_dict
from core.sweep.store_guard import StoreGuard

# Engine settings that belong to the box, not the study: they may differ between workers.
LOCAL_ENGINE_FIELDS = ("gpus", "python", "executable", "container", "env", "port")
# The box's hardware (the simulator runs on it; a real engine's cost and estimates use it):
# compared as hardware (``hardware_difference``), not as arguments.
HARDWARE_FIELDS = ("instance", "gpu", "num_gpus")
_FLAG = {
    "server_sets": "--server-args",
    "client_sets": "--client-args",
    "constraints": "--constraints",
    "model": "--model",
    "instance": "--instance",
    "gpu": "--gpu",
    "num_gpus": "--num-gpus",
    "strategy": "--strategy",
    "input_len": "--input-len",
    "output_len": "--output-len",
    "objective": "--objective",
    "engine.kind": "--engine",
}


def _short(v: Any, n: int = 90) -> str:
    s = json.dumps(v, default=str, separators=(",", ":"))
    return s if len(s) <= n else s[: n - 3] + "..."


def spec_differences(stored: SweepSpec, given: SweepSpec) -> list[str]:
    """What differs between a study's spec and a joining worker's, one phrase each."""
    a, b = stored.model_dump(mode="json"), given.model_dump(mode="json")
    for f in HARDWARE_FIELDS:
        a.pop(f, None), b.pop(f, None)
    ea, eb = a.pop("engine"), b.pop("engine")
    for f in LOCAL_ENGINE_FIELDS:
        ea.pop(f, None), eb.pop(f, None)
    pairs = [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b))]
    pairs += [(f"engine.{k}", ea.get(k), eb.get(k)) for k in sorted(set(ea) | set(eb))]
    return [f"{_FLAG.get(k, k)}: the study has {_short(x)}, this worker {_short(y)}" for k, x, y in pairs if x != y]


def local_spec(stored: SweepSpec, given: SweepSpec) -> SweepSpec:
    """The stored spec with this box's own engine settings (its GPUs, its vLLM install) and
    hardware (what the simulator runs on)."""
    local = {f: getattr(given.engine, f) for f in LOCAL_ENGINE_FIELDS}
    hw = {f: getattr(given, f) for f in HARDWARE_FIELDS}
    return stored.model_copy(update={"engine": stored.engine.model_copy(update=local), **hw})


def box_hardware(spec: SweepSpec) -> dict[str, Any]:
    """The GPU type and count a worker runs on: the simulated hardware for the sim engine
    (its --instance or --gpu/--num-gpus), else what NVML sees on its --gpus (all by default)."""
    if spec.engine.kind == "sim":
        from core.sweep.runner import _hardware

        hw = _hardware(spec)
        return {"gpu_type": hw.gpu.name if hw else None, "gpu_count": hw.num_gpus if hw else None, "simulated": True}
    if spec.engine.kind == "external":
        return {"gpu_type": None, "gpu_count": None, "simulated": False}  # someone else's server
    from core.serve.engines import detect_gpus

    gpus = spec.engine.gpus if spec.engine.gpus is not None else detect_gpus()
    names: list[str] = []
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            for i in gpus:
                n = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                names.append(n.decode() if isinstance(n, bytes) else str(n))
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass  # no NVML binding: the count alone is compared
    return {"gpu_type": "+".join(sorted(set(names))) or (None if gpus else "none"), "gpu_count": len(gpus), "simulated": False}


def _hw_label(hw: dict[str, Any]) -> str:
    kind = hw.get("gpu_type") or "unknown GPU"
    count = hw.get("gpu_count")
    label = "no GPU" if kind == "none" or count == 0 else (f"{count}x {kind}" if count is not None else kind)
    return label + (" (simulated)" if hw.get("simulated") else "")


def hardware_difference(study_hw: dict[str, Any], mine: dict[str, Any]) -> str | None:
    """How this worker's hardware differs from the study's, in words; None when it does not
    (an unknown side, a GPU type NVML could not name, is not a difference)."""
    diffs = []
    if study_hw.get("gpu_count") is not None and mine.get("gpu_count") is not None and study_hw["gpu_count"] != mine["gpu_count"]:
        diffs.append("GPU count")
    if study_hw.get("gpu_type") and mine.get("gpu_type") and study_hw["gpu_type"] != mine["gpu_type"]:
        diffs.append("GPU type")
    if not diffs:
        return None
    return f"{' and '.join(diffs)} {'differ' if len(diffs) > 1 else 'differs'}: the study runs on {_hw_label(study_hw)}, this worker on {_hw_label(mine)}"


def join_study(store: StudyStore, spec: SweepSpec, name: str, allow_mixed_hardware: bool = False) -> tuple[SweepSpec, bool]:
    """Create study ``name`` from ``spec`` (first worker) or check ``spec`` against it (later
    ones): the same arguments, and the same hardware (GPU type and count) unless
    ``allow_mixed_hardware``. Returns (the spec this worker runs, whether it created the study)."""
    import sqlalchemy as sa

    from core.results.store import runner_alive
    from core.sweep import create_study

    if spec.parallel:
        raise BadInput("--join and --parallel do not mix", "run one worker per GPU set with --gpus instead")
    mine = box_hardware(spec)
    if store.study(name) is None:
        try:
            # The join marker and the hardware go in with the row itself: a worker that joins
            # a moment later must never see the study without them.
            create_study(store, spec, name, extra_info={"join": True, "hardware": mine})
            return spec, True
        except (BadInput, sa.exc.IntegrityError):
            pass  # another worker created it a moment ago: join it
    row = store.study(name)
    if row is None or not row.get("spec"):
        raise BadInput(f"study {name!r} was imported; there is nothing to run")
    info = row.get("info") or {}
    stored = store.spec(name)
    diffs = spec_differences(stored, spec)
    if diffs:
        more = f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else ""
        raise BadInput(f"cannot join study {name!r}: {diffs[0]}{more}", "join with the study's own arguments, or pick another --study")
    if not info.get("join") and runner_alive(row):
        raise BadInput(
            f"study {name!r} is being run by a single runner (pid {row['runner_pid']} on {row.get('runner_host')}), not by --join workers",
            "wait for it, or stop it and start the workers with --join",
        )
    study_hw = info.get("hardware")
    if not isinstance(study_hw, dict):  # a study a single runner created (or an earlier knee, which kept a label here)
        study_hw = box_hardware(stored)
    differs = hardware_difference(study_hw, mine)
    if differs and not allow_mixed_hardware:
        raise BadInput(
            f"cannot join study {name!r}: {differs}", "run this worker on hardware like the study's, or pass --allow-mixed-hardware to join anyway"
        )
    if not info.get("join") or not isinstance(info.get("hardware"), dict) or (differs and not info.get("mixed_hardware")):
        store.set_study(name, info={**info, "join": True, "hardware": study_hw, **({"mixed_hardware": True} if differs else {})})
    return local_spec(stored, spec), False


def _stderr_notice(msg: str) -> None:
    print(f"knee: {msg}", file=sys.stderr, flush=True)


class JoinedRunner(Runner):
    """A worker of a joined study: claims configurations by lease until none is left."""

    def __init__(
        self,
        store: StudyStore,
        study: str,
        *,
        spec: SweepSpec | None = None,
        ttl_s: float | None = None,
        notice: Callable[[str], None] | None = None,
        **kw: Any,
    ):
        self.me = lease.Worker.this()
        # Every store call waits out an outage of the shared store (store_guard.StoreGuard); what it
        # says about one goes to ``notice`` (the command line: one line on stderr).
        # (A StoreGuard passes for the StudyStore it wraps: it forwards every method.)
        guarded: Any = store if isinstance(store, StoreGuard) else StoreGuard(store, notice=notice or _stderr_notice)
        self.ttl_s = ttl_s or lease.lease_ttl()
        self._held: int | None = None
        self._rerun: str | None = None
        self._lost = False
        # The control thread renews the lease the main thread holds: a renewal that fails
        # counts only while that configuration is still the one held (not one just finished).
        self._hold_lock = threading.Lock()
        super().__init__(guarded, study, spec=spec, **kw)
        self._beat_every = min(BEAT_S, self.ttl_s / 4)

    @property
    def worker_id(self) -> str:
        return self.me.id

    def emit(self, kind: str, /, **data: Any) -> None:
        super().emit(kind, **{"worker": self.me.id, **data})

    def _beat(self) -> None:
        now = time.time()
        if now - self._last_beat < self._beat_every:
            return
        self._last_beat = now
        self._db(lease.beat_study, self.study, self.me)
        tid = self._held
        if tid is not None and not self._db(lease.renew, self.study, self.me, tid, self.ttl_s):
            with self._hold_lock:
                if self._held == tid:
                    self._lost = True
                    self.cancel.set()  # a load client stops sending; the point is not stored

    def _checkpoint(self, trial_id: int | None = None, server_up: bool = False) -> None:
        super()._checkpoint(trial_id, server_up)
        if self._lost:
            raise LeaseLost(f"lease on trial {trial_id} lost")

    def _point_begin(self, tid: int, point) -> None:
        if not self._db(lease.renew, self.study, self.me, tid, self.ttl_s, inflight=point.point_id):
            self._lost = True
            raise LeaseLost(f"lease on trial {tid} lost")

    def _save_point(self, row, records=None, keep_chunks: bool = True) -> None:
        meta = {"worker": self.me.id, "host": self.me.host, "pid": self.me.pid, "rerun": row.point_id == self._rerun}
        self.store.save_point(row, records, keep_chunks=keep_chunks, worker=meta, lease={"worker": self.me.id, "ttl_s": self.ttl_s})

    def run(self) -> RunSummary:
        t0 = time.monotonic()
        old = self._install()
        try:
            if self.spec.strategy == "adaptive":
                shared_adaptive.work(self)  # each claim asks the strategy, given every stored point
            else:
                self._work_in_plan_order()
            self.summary.wall_s = time.monotonic() - t0
            self.emit("worker_done", **_summary_dict(self.summary))
            if not self._db(lease.remaining, self.study) and self._db(lease.finish_study, self.study):
                self._finish_control()
                self.emit("study_done", **_summary_dict(self.summary))
            return self.summary
        except (_Interrupted, KeyboardInterrupt):
            self.cancel.set()
            self._stop_server()
            self._release()
            self.summary.interrupted = True
            self.summary.wall_s = time.monotonic() - t0
            stopped = self._stop_requested and not self._interrupt_signal
            name = self._interrupt_name(stopped)
            last = stopped or not self._db(lease.others_alive, self.study, self.me)
            if last:
                self.store.set_study(self.study, status="interrupted", runner_pid=None)
            self.emit("study_interrupted" if last else "worker_interrupted", signal=name, **_summary_dict(self.summary))
            return self.summary
        finally:
            self._watch_done.set()
            self._stop_server()
            self._release()
            for s, h in old.items():
                signal.signal(s, h)

    def _work_in_plan_order(self) -> None:
        """grid and sla: claim the configurations in plan order until none is left."""
        strategy = make_strategy(self.spec, self.predictor)
        skipped = {t.trial_key for t, _ in strategy.skipped}
        stored = {t.trial_key: t.status for t in self.store.trials(self.study)}
        for t, reason in strategy.skipped:
            if stored.get(t.trial_key) != "skipped":
                self._store_skipped(t, reason)
        plans = [t for t in strategy.plans if t.trial_key not in skipped]
        ids = self._db(lease.seed, self.study, plans)
        by_id = {ids[t.trial_key]: t for t in plans}
        self._announce(strategy)
        while True:
            self._checkpoint()
            c = self._db(lease.claim, self.study, self.me, self.ttl_s, only=by_id)
            if c is None:
                if not self._db(lease.remaining, self.study, only=by_id):
                    break  # what is left (if anything) is for workers that planned it
                time.sleep(CONTROL_POLL_S)  # the rest is held by live workers: one may die
                self._beat()
                continue
            self._run_claim(c, by_id[c.trial_id])

    def _announce(self, strategy) -> None:
        """This worker is in (its configurations seeded): beat, watch the controls, say so."""
        if self.store.requested_state(self.study) == "stop" and not self._db(lease.others_alive, self.study, self.me):
            self.store.request_state(self.study, "run")  # left by workers that are gone
        self._beat()
        self._start_watch()
        self._emit_started(strategy, resumed_points=len(self.store.points(self.study)), host=self.me.host)

    def _db(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """A lease function on the store, waiting out an outage of it."""
        return self.store.call(fn, self.store, *args, **kw)

    def _release(self) -> None:
        if self._held is not None:
            tid, self._held = self._held, None
            try:
                lease.end(self.store, self.study, self.me, tid, "released")
            except Exception:
                pass  # it expires on its own

    def _run_claim(self, c: lease.Claim, trial, strategy=None) -> None:
        self._held, self._rerun, self._lost = c.trial_id, c.rerun, False
        if c.taken_from:
            self.emit("lease_taken_over", trial_id=c.trial_id, from_worker=c.taken_from, rerun_point=c.rerun)
            if c.taken_from_host == self.me.host:  # its server may still run here: end it
                for tid, pid in self.store.server_pids(self.study):
                    if tid == c.trial_id:
                        proc_mod.kill_stale_group(pid, tag=self._tag(tid))
                        self.store.update_trial(self.study, tid, server_pid=None)
        if strategy is None:  # grid, sla: a fresh strategy per configuration; its stored points replay into it
            strategy = make_strategy(self.spec, self.predictor)
            trial = next(t for t in strategy.plans if t.trial_key == trial.trial_key)
        done = {p.point_id: p for p in self.store.points(self.study) if p.status in ("ok", "failed")}
        try:
            self._run_trial(strategy, trial, done)
        except LeaseLost:
            self._stop_server()
            with self._hold_lock:
                self._held, self._lost = None, False
            self._db(lease.end, self.study, self.me, c.trial_id, "lost")
            self.emit("lease_lost", trial_id=c.trial_id)
            if not (self._interrupt_signal or self._stop_requested):
                self.cancel.clear()
            return
        with self._hold_lock:
            self._held = None
        self._db(lease.end, self.study, self.me, c.trial_id, "done")


def run_worker(storage: str, study: str, **kw: Any) -> RunSummary:
    store = StudyStore(storage, create=False)
    try:
        return JoinedRunner(store, study, **kw).run()
    finally:
        store.close()


__all__ = ["JoinedRunner", "join_study", "spec_differences", "local_spec", "box_hardware", "hardware_difference", "run_worker"]
