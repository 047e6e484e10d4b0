"""``knee recommend --measure N``: the top N finalists measured on SageMaker itself.

Order of work, and why:

1. :func:`cost_estimate` before anything: the caller shows it in its one confirmation.
2. Every finalist is deployed side by side (one thread per ``core.deploy.apply_plan``), since
   a real endpoint takes ~10 minutes to come up and waiting for them one after another would
   bill the first one for the others' start-up.
3. Each is benchmarked in turn with knee's load client through ``sagemaker-runtime``
   streaming (core/recommend/probe.py), one at a time so the client machine measures one
   endpoint at once, and deleted as soon as its numbers are in.
4. Teardown of every name, whatever happened: ``try/finally`` plus SIGINT/SIGTERM turned into
   ``KeyboardInterrupt`` (and ignored, with a line, while tearing down, so a second Ctrl-C
   cannot leave endpoints behind). A deployment in flight is cancelled and rolls back what it
   created; then ``delete_deployment`` runs on every planned name (a no-op where nothing is
   left); what still exists after that is named with the command that deletes it.
5. A caller without signals (the TUI runs this in a worker thread) passes ``cancel``: setting it
   raises :class:`Cancelled` (a KeyboardInterrupt) at the next check, and the same teardown runs.
   Checked every 0.5 s while deploying, and between load points while benchmarking (a load
   point in flight runs to its end).
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

from core.errors import BadInput, RunFailed

Say = Callable[[str], None]
DEPLOY_MINUTES = 15.0  # expected minutes from create to InService (model download and load), per endpoint
DELETE_MINUTES = 2.0


@dataclass(frozen=True)
class DeployOps:
    """The parts of ``core.deploy`` measuring uses, handed in by the caller.

    pyproject's import contract puts ``core.recommend | core.deploy`` in one layer: siblings
    that may not import each other. So this package takes them as an argument;
    ``tui/cli/recommend.py`` ``deploy_ops()`` builds one from ``core.deploy``."""

    build_plan: Callable[..., Any]
    DeploySource: Any
    DeployTarget: Any
    ApplyOptions: Any
    apply_plan: Callable[..., Any]
    delete_deployment: Callable[..., Any]
    describe_deployment: Callable[..., Any]
    make_clients: Callable[..., Any]
    check_region: Callable[[str], None]
    valid_role: Callable[[str], bool]


@dataclass
class MeasureOptions:
    n: int
    role_arn: str | None
    region: str = "us-east-1"
    container: str = "lmi"
    poll_interval_s: float = 15.0
    timeout_s: float = 3600.0
    max_concurrency: int = 256
    min_prompts: int = 32
    max_prompts: int = 1000
    max_probes: int = 6
    storage: str | None = None
    study: str | None = None

    def prompts_for(self, c: int) -> int:
        return max(self.min_prompts, min(self.max_prompts, 4 * c))


@dataclass
class Finalist:
    cand: Any  # core.recommend.rank.Candidate
    plan: Any  # core.deploy.DeployPlan


@dataclass
class CostEstimate:
    usd: float | None  # None when a finalist has no price
    minutes: dict[str, float]  # per endpoint name: expected billed minutes
    unpriced: list[str] = field(default_factory=list)

    def text(self) -> str:
        mins = sum(self.minutes.values())
        if self.usd is None:
            return (
                f"estimated cost: unknown, no price for {', '.join(self.unpriced)} "
                f"({len(self.minutes)} instance(s), about {mins:.0f} instance-minutes in all)"
            )
        return (
            f"estimated cost: ${self.usd:.2f} ({len(self.minutes)} instance(s), about {mins:.0f} instance-minutes "
            f"in all, {DEPLOY_MINUTES:.0f} min each to deploy)"
        )


def check_options(opts: MeasureOptions, ops: DeployOps) -> None:
    """Bad input, named, before anything is planned or created."""
    if opts.n < 1:
        raise BadInput(f"--measure must be at least 1, got {opts.n}", "e.g. --measure 3")
    if not opts.role_arn:
        raise BadInput("--measure needs an execution role", "pass --role arn:aws:iam::<account>:role/<name>")
    if not ops.valid_role(opts.role_arn):
        raise BadInput(f"bad --role {opts.role_arn!r}", "expected arn:aws:iam::<12-digit account>:role/<name>")
    ops.check_region(opts.region)
    if opts.max_concurrency < 1:
        raise BadInput("--measure-max-concurrency must be at least 1")


def plan_finalists(model: str, cands: list, opts: MeasureOptions, ops: DeployOps) -> list[Finalist]:
    """A deployment plan per candidate, one instance each, under distinct names."""
    import hashlib

    from core.recommend.measured_study import server_args_of
    from core.spec.server_args import server_config

    if not cands:
        raise BadInput("no candidate to measure", "loosen --constraints or widen --instances")
    stamp = hashlib.sha1(f"{time.time_ns()}".encode()).hexdigest()[:6]
    out = []
    for i, c in enumerate(cands[: opts.n], 1):
        cfg = server_config(model, server_args_of(c))
        src = ops.DeploySource(
            config=cfg,
            gpu=c.gpu,
            num_gpus=c.tp,
            simulated=True,
            request_throughput=(c.capacity_rps / c.copies) or None,
            output_throughput=(c.output_tok_per_s / c.copies) or None,
            note="the estimator's knee",
        )
        name = f"knee-m{stamp}-{i}-{c.instance.removeprefix('ml.').replace('.', '-')}"[:56].rstrip("-")
        target = ops.DeployTarget(
            instance=c.instance, container=opts.container, region=opts.region, role_arn=opts.role_arn, name=name, instance_count=1
        )
        out.append(Finalist(c, ops.build_plan(src, target)))
    return out


def cost_estimate(finals: list[Finalist], opts: MeasureOptions) -> CostEstimate:
    """Instances × $/h × expected minutes. Every endpoint is billed from its creation until its
    deletion; measurement runs one endpoint after another, so endpoint i also waits for the
    ones before it."""
    minutes: dict[str, float] = {}
    usd = 0.0
    unpriced = []
    waited = 0.0
    for f in finals:
        c = f.cand
        probe_s = opts.prompts_for(max(1, min(c.concurrency, opts.max_concurrency))) / max(c.capacity_rps_low, 1e-3)
        waited += opts.max_probes * probe_s / 60 + (probe_s / 60 if c.instances_needed else 0)
        m = DEPLOY_MINUTES + waited + DELETE_MINUTES
        minutes[f.plan.endpoint_name] = m
        if c.usd_per_hour is None:
            unpriced.append(c.instance)
        else:
            usd += c.usd_per_hour * m / 60
    return CostEstimate(None if unpriced else usd, minutes, unpriced)


class Cancelled(KeyboardInterrupt):
    """The caller set ``cancel``: handled exactly like Ctrl-C (teardown, study "interrupted")."""


def _check(cancel: threading.Event) -> None:
    if cancel.is_set():
        raise Cancelled


def _say_unless_cancelled(cancel: threading.Event, say: Say, line: str) -> None:
    """The benchmark's progress line, which is also where a cancel stops it (between probes)."""
    _check(cancel)
    say(line)


@dataclass
class MeasureResult:
    study: str
    rows: list  # core.recommend.measured_study.MeasuredRow, ranked by measured numbers
    leftovers: list[str]


@contextmanager
def interrupts_as_keyboard(say: Say):
    """SIGINT and SIGTERM raise KeyboardInterrupt in the main thread (so ``finally`` runs).
    Yields a function that switches to ignoring them, with a line, for the teardown."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def raise_(_signum, _frame):
        raise KeyboardInterrupt

    def ignore(_signum, _frame):
        say("interrupt ignored: deleting the endpoints first (they cost money while they run)")

    def protect() -> None:
        for s in old:
            signal.signal(s, ignore)

    for s in old:
        signal.signal(s, raise_)
    try:
        yield protect
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _deploy_all(
    finals: list[Finalist], clients, opts: MeasureOptions, ops: DeployOps, cancel: threading.Event, say: Say, protect: Callable[[], None]
) -> None:
    last_wait: dict[str | None, float] = {}

    def progress(ev) -> None:
        if ev.status in ("start", "done", "failed", "rollback") or ev.step == "rollback":
            say(f"  {ev.message}")
        elif ev.status == "wait" and time.monotonic() - last_wait.get(ev.resource, -1e9) >= 60:
            # A real endpoint takes minutes: one line a minute per resource says it is alive.
            last_wait[ev.resource] = time.monotonic()
            say(f"  {ev.message}")

    def one(f: Finalist):
        say(f"deploying {f.plan.endpoint_name} ({f.cand.instance}, TP{f.cand.tp} x {f.cand.copies})")
        o = ops.ApplyOptions(poll_interval_s=opts.poll_interval_s, timeout_s=opts.timeout_s, cancel=cancel)
        r = ops.apply_plan(f.plan, confirmed=True, clients=clients, progress=progress, options=o)
        say(f"ready: {f.plan.endpoint_name} after {r.elapsed_s:.0f} s")
        return r

    pool = futures.ThreadPoolExecutor(max_workers=len(finals), thread_name_prefix="knee-deploy")
    jobs = {pool.submit(one, f): f for f in finals}
    try:
        pending = set(jobs)
        while pending:
            # A timeout keeps the main thread able to take SIGINT (and a caller's cancel) between waits.
            done, pending = futures.wait(pending, timeout=0.5, return_when=futures.FIRST_EXCEPTION)
            _check(cancel)  # before the failures: a cancelled deployment fails because it was cancelled
            for j in done:
                if j.exception() is not None:
                    f = jobs[j]
                    raise RunFailed(f"deploying {f.plan.endpoint_name} ({f.cand.instance}) failed: {j.exception()}")
    finally:
        if any(not j.done() for j in jobs):
            protect()  # from here on a second Ctrl-C must not cut the rollbacks short
            cancel.set()  # the others roll back what they created; then teardown removes the rest
            say("stopping the deployments in flight")
        futures.wait(jobs)
        pool.shutdown(wait=True)


def teardown(names: list[str], clients, opts: MeasureOptions, ops: DeployOps, say: Say) -> list[str]:
    """Delete every name; return what is still there."""
    o = ops.ApplyOptions(poll_interval_s=opts.poll_interval_s, timeout_s=opts.timeout_s)
    left: list[str] = []
    for name in names:
        try:
            res = ops.delete_deployment(name, confirmed=True, region=opts.region, clients=clients, options=o)
            if res.deleted:
                say(f"deleted {name} ({len(res.deleted)} resource(s))")
            st = ops.describe_deployment(name, region=opts.region, clients=clients)
            if st.endpoint or st.inference_components or st.models or st.endpoint_configs:
                left.append(name)
        except Exception as e:  # keep going: leave as little behind as possible
            say(f"could not delete {name}: {e}")
            left.append(name)
    return left


def leftover_lines(left: list[str], region: str) -> list[str]:
    return (
        (
            [f"LEFT BEHIND (still billed): {', '.join(left)}; delete with:"]
            + [f"  knee deploy delete --name {n} --region {region} --yes" for n in left]
        )
        if left
        else []
    )


def measure(
    req,
    finals: list[Finalist],
    opts: MeasureOptions,
    ops: DeployOps,
    *,
    clients=None,
    store=None,
    say: Say = print,
    protect: Callable[[], None] = lambda: None,
    cancel: threading.Event | None = None,
) -> MeasureResult:
    """Deploy, benchmark, store and delete (see the module docstring). The caller has shown
    :func:`cost_estimate` and the user agreed. Raises RunFailed (after teardown) when a
    deployment fails; KeyboardInterrupt (or :class:`Cancelled`, once ``cancel`` is set) passes
    through after teardown."""
    from core.load.datasets import load_tokenizer, make_prompts
    from core.load.sagemaker import SageMakerTarget
    from core.recommend.measured_study import create_study, measured_row, rank_measured, store_finalist
    from core.recommend.probe import bench_endpoint
    from core.results import StudyStore, default_storage
    from core.spec.slo import parse_constraints

    clients = clients or ops.make_clients(opts.region)
    store = store or StudyStore(opts.storage or default_storage())
    study = opts.study or f"sagemaker-{time.strftime('%Y%m%d-%H%M%S')}"
    create_study(store, study, req, opts.region, [f.cand for f in finals])
    slo = parse_constraints(req.constraints)
    names = [f.plan.name for f in finals]
    alive = set(names)
    cancel = cancel if cancel is not None else threading.Event()
    rows = []
    status = "failed"
    # Prompts first: nothing is billed yet, and a problem here creates nothing.
    # The ranked requests' lengths, as random tokens: a ShareGPT plan is measured on its shape
    # (the file's text is not needed to load an endpoint), each answer held to its drawn length
    # (ignore_eos), so the lengths measured are the lengths predicted.
    wl = req.workload(num_prompts=opts.max_prompts)
    wl = wl.model_copy(update={"dataset": "random" if wl.dataset == "sharegpt" else wl.dataset, "ignore_eos": True})
    prompts = make_prompts(wl, load_tokenizer(req.model))
    try:
        _deploy_all(finals, clients, opts, ops, cancel, say, protect)
        for f in finals:
            _check(cancel)
            c, p = f.cand, f.plan
            fmt = "lmi" if p.container == "lmi" else "vllm"
            target = SageMakerTarget(p.endpoint_name, model=req.model, fmt=fmt, region=opts.region, inference_component=p.inference_component_name)
            say(
                f"benchmarking {p.endpoint_name} ({c.instance}, TP{c.tp} x {c.copies}): SLA search from c={min(max(1, c.concurrency), opts.max_concurrency)}"
            )
            share = req.target_rps / c.instances_needed if req.target_rps and c.instances_needed else None
            bench = bench_endpoint(
                target,
                prompts,
                slo,
                seed=max(1, c.concurrency),
                cap=opts.max_concurrency,
                prompts_per_probe=opts.prompts_for,
                max_probes=opts.max_probes,
                target_rps=share,
                say=lambda s: _say_unless_cancelled(cancel, say, "  " + s),
            )
            tid = store_finalist(store, study, c, p.endpoint_name, bench)
            rows.append(measured_row(c, tid, bench, req.target_rps))
            say(f"deleting {p.endpoint_name}")
            left = teardown([p.name], clients, opts, ops, say)
            if not left:
                alive.discard(p.name)
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        say("interrupted: tearing down")
        raise
    finally:
        protect()
        if status != "done":
            cancel.set()
        leftovers = teardown([n for n in names if n in alive], clients, opts, ops, say) if alive else []
        for line in leftover_lines(leftovers, opts.region):
            say(line)
        store.set_study(study, status=status)
    return MeasureResult(study, rank_measured(rows, req.goal, req.target_rps), leftovers)
