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
from core.simulate.requests import BLOCK


class V0Replica(Replica):
    """One engine under the V0 scheduler (``scheduler_steps`` decode steps per decision)."""

    v0 = True
    group_left = 0  # decode steps left in the current multi-step group (set per instance once used)

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
            watermark = int(0.01 * self.total_blocks)  # V0 keeps 1% of blocks free for decodes
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
                if nb > self.free - watermark:
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


def replica_class(v0: bool) -> type[Replica]:
    """The replica class of the scheduler the engine version runs (``v0`` from
    :func:`core.simulate.feasibility.scheduler_generation`)."""
    return V0Replica if v0 else Replica
