"""vLLM's V0 scheduler (vLLM before 0.8, chunked prefill off), as a :class:`Replica` whose
step differs.

**The V0 scheduler** (vLLM before 0.8, chunked prefill off; ``v0=True``) differs in the
ways that matter for latency: it is *prefill-first* (whenever waiting prompts fit, a step
prefills them whole, and the running decodes wait that step), admits a prompt only when
the blocks for all of it fit above a 1% watermark, and with multi-step scheduling
(``--num-scheduler-steps k``, vLLM 0.6) runs k decode steps per scheduling decision, so a
new request waits for the group to end. Under KV pressure this is why old vLLM kept TTFT
low and let decode throughput collapse (arrivals are prefilled, then running requests are
preempted), where V1 keeps the running batch and makes arrivals wait.
"""

from __future__ import annotations

from core.simulate.engine import Replica
from core.simulate.requests import BLOCK, Requests


class V0Replica(Replica):
    """One engine under the V0 scheduler (``scheduler_steps`` decode steps per decision)."""

    v0 = True

    def __init__(
        self,
        index: int,
        reqs: Requests,
        cost,
        total_blocks: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        prefix_caching: bool,
        on_finish,
        scheduler_steps: int = 1,
    ):
        super().__init__(index, reqs, cost, total_blocks, max_num_seqs, max_num_batched_tokens, prefix_caching, on_finish)
        self.watermark = int(0.01 * total_blocks)  # V0 keeps 1% of blocks free for decodes
        self.scheduler_steps = max(1, int(scheduler_steps))
        self.group_left = 0  # decode steps left in the current multi-step group

    def run_step(self) -> bool:
        """Schedule and run one step at ``self.t``, prefill-first. Returns False when nothing
        could be scheduled (idle)."""
        R = self.reqs
        P, gen = R.P, R.gen
        waiting = self.waiting
        if not self.n_dec:
            self.group_left = 0  # every sequence of the group finished: schedule afresh
        # Prefill-first: waiting prompts, whole, at a scheduling point (not inside a
        # multi-step decode group).
        if waiting and self.group_left == 0:
            sched: list[tuple[int, int]] = []
            tokens = 0
            p_attn = 0.0
            p_kv = 0
            while waiting and self.n_dec + len(sched) < self.max_seqs:
                rid = waiting[0]
                target = P[rid] + gen[rid]
                hit = self._hit(rid, target) if self.prefix_cached else 0
                new = target - hit
                if sched and tokens + new > self.max_tokens:
                    break
                nb = -(-target // BLOCK) - hit // BLOCK
                if nb > self.free - self.watermark:
                    break
                self._admit(rid, hit, nb)
                tokens += new
                p_attn += new * (hit + new * 0.5)
                p_kv += target
                sched.append((rid, new))
            if sched:
                self._run(tokens, p_attn, p_kv, 0, sched)
                return True
        if not self.n_dec:
            return False
        # A decode step (the first of a group of ``scheduler_steps`` with multi-step).
        ds = self.dstep
        need = self.phase[ds % BLOCK]
        while need > self.free:
            if self._preempt(False) < 0:
                break
            need = self.phase[ds % BLOCK]
        self.free -= need
        if self.group_left == 0:
            self.group_left = self.scheduler_steps
        self.group_left -= 1
        self._run(0, 0.0, 0, self.n_dec, ())
        return True


def new_replica(
    index: int,
    reqs: Requests,
    cost,
    total_blocks: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    prefix_caching: bool,
    on_finish,
    *,
    v0: bool = False,
    scheduler_steps: int = 1,
) -> Replica:
    """A replica under the scheduler the engine version runs (see
    :func:`core.simulate.feasibility.scheduler_generation`)."""
    if v0:
        return V0Replica(index, reqs, cost, total_blocks, max_num_seqs, max_num_batched_tokens, prefix_caching, on_finish, scheduler_steps)
    return Replica(index, reqs, cost, total_blocks, max_num_seqs, max_num_batched_tokens, prefix_caching, on_finish)
