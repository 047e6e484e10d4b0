"""How fast the estimate is: one configuration, and a whole suggested space.

    python -m bench.estimate_speed

Budgets (shared/design/architecture.md): one configuration < 20 ms; a full suggested space
< 1 s. "One configuration" is the work the TUI redoes per keystroke for one TP x DP choice:
its memory plan, predictions at the default concurrency levels, its limits (saturation and
SLO bisections) and the prediction at the knee. "A suggested space" is every point a
suggested sweep would measure (TP x DP x max_num_batched_tokens x max_num_seqs x
concurrency), plus the full ``estimate()`` report that produced the suggestion. Model and
catalog loading are excluded (cached once per session); times are the best of several runs.
Also printed: one prediction of each kind, among them finite runs of ShareGPT-like lengths
(open and closed loop), which price when the longest answer ends and how long each decodes.
"""

from __future__ import annotations

import itertools
import time

from core.catalog import get_instance, load_model, resolve_hardware
from core.estimate import Predictor, compute_limits, estimate
from core.spec.lengths import sharegpt
from core.spec.plan import demo_plan
from core.spec.workload import Workload

BUDGET_ONE_MS, BUDGET_SPACE_MS = 20.0, 1000.0


def _best(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main() -> int:
    plan = demo_plan()
    arch = load_model(plan.model)
    hw = resolve_hardware(instance=plan.instance)
    get_instance(plan.instance)
    wl = Workload.fixed(plan.input_len, plan.output_len)
    slo = plan.slo

    def one():
        p = Predictor(arch, hw.gpu, wl)  # fresh: no cached cost model or memory plan
        cfg = p.config(2, 2)
        p.memory(cfg)
        p.curve(cfg, (1, 2, 4, 8, 16, 32, 64, 128, 256))
        lim = compute_limits(p, cfg, slo)
        p.predict(cfg, concurrency=lim.slo_concurrency or lim.saturation)

    report = estimate(plan)
    s = report.suggestion

    def space():
        r = estimate(plan)
        sug = r.suggestion
        p = Predictor(arch, hw.gpu, wl)
        n = 0
        for (tp, dp), mnbt, mns, c in itertools.product(sug.tp_dp, sug.max_num_batched_tokens, sug.max_num_seqs, sug.concurrency):
            p.predict(p.config(tp, dp, max_num_batched_tokens=mnbt, max_num_seqs=mns), concurrency=c)
            n += 1
        return n

    points = len(s.tp_dp) * len(s.max_num_batched_tokens) * len(s.max_num_seqs) * len(s.concurrency)
    t_one = _best(one)
    t_space = _best(space)
    p = Predictor(arch, hw.gpu, wl)
    cfg = p.config(2, 2)
    t_point = _best(lambda: p.predict(cfg, concurrency=64), repeat=50)
    t_open = _best(lambda: p.predict(cfg, request_rate=3.0), repeat=50)
    # A finite run of varying lengths also prices its drain (core.estimate.drain).
    inp, out = sharegpt()
    pg = Predictor(arch, hw.gpu, Workload(input=inp, output=out))
    t_run = _best(lambda: pg.predict(cfg, request_rate=3.0, num_prompts=200), repeat=20)
    # A finite closed run also prices its answers' decode spans (the E2E tail, drain.decode_spans).
    t_closed_run = _best(lambda: pg.predict(cfg, concurrency=64, num_prompts=200), repeat=20)
    print(f"plan: {plan.model} on {hw.label}, {plan.input_len}/{plan.output_len} tokens, {slo}")
    print(f"one prediction (closed loop):  {t_point:8.3f} ms")
    print(f"one prediction (open loop):    {t_open:8.3f} ms")
    print(f"one prediction (a finite open-loop run of 200 ShareGPT-like requests): {t_run:8.3f} ms")
    print(f"one prediction (a finite closed-loop run of 200 ShareGPT-like requests at 64): {t_closed_run:8.3f} ms")
    print(f"one configuration:             {t_one:8.2f} ms   (budget {BUDGET_ONE_MS:g} ms) {'OK' if t_one < BUDGET_ONE_MS else 'OVER'}")
    print(
        f"suggested space ({points} points + estimate report): {t_space:8.2f} ms   (budget {BUDGET_SPACE_MS:g} ms) "
        f"{'OK' if t_space < BUDGET_SPACE_MS else 'OVER'}"
    )
    return 0 if t_one < BUDGET_ONE_MS and t_space < BUDGET_SPACE_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
