"""A discrete-event simulation of vLLM's scheduler in virtual time.

One :class:`Replica` is one engine (``tp`` GPUs). Every step it does what vLLM V1's
scheduler does (``vllm/v1/core/sched/scheduler.py``; the default since vLLM 0.8), in this
order:

1. **Decodes first.** Every running sequence that has finished its prompt generates one
   token. Each needs a KV slot; a sequence whose KV length is a multiple of 16 needs a new
   block. When the pool runs dry the most recently admitted running request is
   **preempted** (its blocks freed, pushed to the front of the waiting queue, and later
   recomputed: prompt plus the tokens it had generated), as V1 does. With prefix caching
   its full blocks stay cached at the back of the free queue, and a readmission computes
   only what allocations took from them since.
2. **Running prefills** (partially prefilled prompts) get chunks from what is left of the
   token budget (``max_num_batched_tokens`` minus one token per decode): chunked prefill.
3. **Admission.** Waiting requests join, in order, while the budget lasts, fewer than
   ``max_num_seqs`` run, and the pool has the blocks for their first chunk (no preemption
   for a waiting request: V1 stops admitting instead, and admits nobody in a step that
   had to preempt). With prefix caching the shared
   prefix's full blocks are a cache hit and are not computed again.
4. The step's duration comes from :meth:`CostModel.step_seconds` with the five sufficient
   statistics of the batch; the clock advances; every decode and every prefill that just
   completed its prompt emits one token at the end of the step.

**The V0 scheduler** (vLLM before 0.8) is :class:`core.simulate.scheduler_v0.V0Replica`.

**Why it is fast.** Nothing loops over the running batch per step. Decoding sequences are
kept as aggregates: their count, Σ KV length (grows by the count each step), and a
16-slot histogram of "block phase" (a sequence that joined decoding at decode step s0
with KV length k0 needs a new block at decode step s exactly when (s − s0 + k0) % 16 == 0,
so the blocks needed this step are ``phase[s % 16]``). Decode steps have their own
counter (a V0 prefill-only step does not advance it). When a sequence will finish is known
when it starts decoding, so finishes come off a heap keyed by decode step. Token times are
never copied per token: a request's stream is the time of the token its prefill produced
plus a run of consecutive decode steps, stored as (time, first decode step, count) and
sliced from the replica's array of decode-step end times at the end.

Only prefills (a handful per step) and the rare preemption are handled one request at a
time.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

# Callers take the request table and its states from here too.
from core.simulate.evicted import EvictedBlocks
from core.simulate.requests import BLOCK, DECODE, DONE, FAILED, PENDING, PREFILL, WAITING, Requests

__all__ = ["BLOCK", "DECODE", "DONE", "FAILED", "PENDING", "PREFILL", "WAITING", "Replica", "Requests"]


class Replica:
    """One engine: KV block pool, queues and the step loop (vLLM V1's scheduler)."""

    v0 = False  # the V0 subclass preempts by arrival order instead of admission order

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
        *,
        scheduler_steps: int = 1,
        schedules_ahead: bool = False,
    ):
        self.index = index
        self.reqs = reqs
        self.step_seconds = cost.step_seconds
        self.total_blocks = total_blocks
        self.free = total_blocks
        self.max_seqs = max_num_seqs
        self.max_tokens = max_num_batched_tokens
        self.prefix_caching = prefix_caching
        self.prefix_cached = False  # the shared prefix's blocks are in this replica's cache
        self.pinned = 0  # blocks the cached prefix holds for good
        self.on_finish = on_finish  # callback(rid, engine_time) when a request completes
        # Decode steps per scheduling decision: more than 1 only under V0's multi-step
        # scheduling (the V0 subclass reads it); V1 decides every step.
        self.scheduler_steps = max(1, int(scheduler_steps))
        # Async scheduling (vLLM >= 0.14): the next step's batch is formed when this one
        # starts, so a request queued while a step runs joins the step after the next one
        # (:meth:`run_step` admits only what was queued by ``cutoff``).
        self.schedules_ahead = schedules_ahead
        self.cutoff = math.inf

        self.t = 0.0  # engine clock: when the next step may start
        self.step = 0  # steps run
        self.dstep = 0  # decode steps run (the index of the next one)
        self.dends: list[float] = []  # end time of each decode step
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.n_dec = 0
        self.kv_sum = 0  # Σ KV tokens over decoders before the next decode step
        self.phase = [0] * BLOCK
        self.finish_heap: list[tuple[int, int, int]] = []  # (last decode step, admit seq, rid)
        self.victims: list[tuple[int, int, int]] = []  # (-priority, admit seq, rid): preemption order
        self._admit_seq = 0
        self.evicted = EvictedBlocks(BLOCK)  # cached until allocations reach them

        # Statistics.
        self.preemptions = 0
        self.prefix_hits = 0
        self.peak_used = 0
        self.busy_s = 0.0

    # ---- queries the driver and the live server use ----
    @property
    def has_work(self) -> bool:
        return bool(self.n_dec or self.prefilling or self.waiting)

    @property
    def running(self) -> int:
        return self.n_dec + len(self.prefilling)

    @property
    def used_blocks(self) -> int:
        return self.total_blocks - self.free

    def load(self) -> int:
        return self.n_dec + len(self.prefilling) + len(self.waiting)

    def enqueue(self, rid: int, t: float) -> None:
        self.reqs.state[rid] = WAITING
        self.reqs.queued[rid] = t
        self.reqs.replica[rid] = self.index
        self.waiting.append(rid)

    # ---- leaving the running set (preemption, abort): O(log n) plus the request itself ----
    def _release(self, rid: int, decode_allocated: bool) -> None:
        """Take a running request out of the batch and give back its KV blocks.
        ``decode_allocated``: this step's decode blocks were already taken from the pool,
        so a decoding request also gives back the block it got for this step."""
        R = self.reqs
        if R.state[rid] == DECODE:
            kv0, s0 = R.kv[rid], R.s0[rid]
            ds = self.dstep
            kv = kv0 + (ds - s0)  # KV tokens before the next decode step
            self.n_dec -= 1
            self.kv_sum -= kv
            ph = (s0 - kv0) % BLOCK
            self.phase[ph] -= 1
            blocks = -(-kv // BLOCK)
            if decode_allocated and ph == ds % BLOCK:
                blocks += 1
            done = ds - s0  # tokens decoded since it started
            R.segs[rid].append((R.tfirst[rid], s0, done))
            R.gen[rid] += done
        else:  # PREFILL
            blocks = -(-R.kv[rid] // BLOCK)
            self.prefilling.remove(rid)
        self.free += blocks - R.shared[rid]
        R.shared[rid] = 0
        R.kv[rid] = 0
        R.admit[rid] = -1  # invalidates its finish-heap and victim entries

    def _preempt(self, decode_allocated: bool) -> int:
        """Preempt the most recently admitted running request (recompute later); return its
        id, or -1 if nothing runs."""
        R = self.reqs
        state, admit = R.state, R.admit
        victims = self.victims
        while victims:
            _, a, rid = heapq.heappop(victims)
            st = state[rid]
            if (st == PREFILL or st == DECODE) and admit[rid] == a:
                break
        else:
            return -1
        if self.prefix_caching and not self.v0 and not R.shared[rid]:
            self.evicted.evicted(rid, R.kv[rid] + (self.dstep - R.s0[rid]) if st == DECODE else R.kv[rid], self.free)
        self._release(rid, decode_allocated)
        state[rid] = WAITING
        self.waiting.appendleft(rid)
        self.preemptions += 1
        return rid

    def abort(self, rid: int, t: float, reason: str) -> None:
        """The client gave up on ``rid`` (a timeout): vLLM aborts it between steps and frees
        its KV blocks; whatever it computed is wasted."""
        R = self.reqs
        st = R.state[rid]
        self.evicted.forget(rid)
        if st == WAITING:
            self.waiting.remove(rid)
        elif st == PREFILL or st == DECODE:
            self._release(rid, False)
        else:
            return
        R.state[rid] = FAILED
        R.error[rid] = reason
        R.end[rid] = t
        self.on_finish(rid, t)

    def fail_head(self, reason: str) -> int:
        """Fail the request at the head of the queue (it can never be scheduled)."""
        rid = self.waiting.popleft()
        self.reqs.state[rid] = FAILED
        self.reqs.error[rid] = reason
        self.reqs.end[rid] = self.t
        self.on_finish(rid, self.t)
        return rid

    def _admit(self, rid: int, hit: int, nb: int, own: int = 0) -> None:
        """``hit``: prompt tokens found in the cache; ``own``: how many of its blocks were
        the request's own, cached when it was evicted (in the free queue until now, and its
        own again: not pinned like a shared prefix's)."""
        R = self.reqs
        self.waiting.popleft()
        self.free -= nb + own
        self.evicted.taken += nb
        if hit:
            self.prefix_hits += 1
        R.shared[rid] = 0 if own else hit // BLOCK
        R.kv[rid] = hit
        R.state[rid] = PREFILL
        self._admit_seq += 1
        R.admit[rid] = self._admit_seq
        # V1 preempts the request admitted last; V0's FCFS policy the one that arrived
        # last (request ids are in arrival order), so an old request readmitted after a
        # preemption outranks newer arrivals there.
        heapq.heappush(self.victims, (-(rid if self.v0 else self._admit_seq), self._admit_seq, rid))
        self.prefilling.append(rid)

    def _hit(self, rid: int, target: int) -> int:
        """Prefix-cache hit: full blocks of the shared prefix (vLLM always recomputes at
        least the last prompt token)."""
        pre = self.reqs.prefix[rid]
        if not (pre and self.prefix_cached and self.prefix_caching):
            return 0
        # Never more than the cached (pinned) blocks: a request whose shared prefix is
        # longer than the one cached computes the rest itself.
        return min(pre // BLOCK * BLOCK, self.pinned * BLOCK, (target - 1) // BLOCK * BLOCK)

    # ---- one engine step ----
    def run_step(self) -> bool:
        """Schedule and run one step at ``self.t``. Returns False when nothing could be
        scheduled (idle)."""
        R = self.reqs
        P, gen, kvl, state = R.P, R.gen, R.kv, R.state
        ds = self.dstep
        phase = self.phase

        preempted_before = self.preemptions
        # 1) Decodes: one KV slot each; new blocks for those on a block boundary.
        need = phase[ds % BLOCK]
        while need > self.free:
            if self._preempt(False) < 0:
                break
            need = phase[ds % BLOCK]
        self.free -= need
        self.evicted.taken += need
        n_dec = self.n_dec
        budget = self.max_tokens - n_dec

        # 2) Running prefills, then 3) admissions, share what is left of the budget.
        p_tok = 0
        p_attn = 0.0
        p_kv = 0
        sched: list[tuple[int, int]] = []
        if self.prefilling and budget > 0:
            for rid in list(self.prefilling):
                if budget <= 0:
                    break
                if state[rid] != PREFILL:  # preempted while making room for another
                    continue
                c = kvl[rid]
                chunk = P[rid] + gen[rid] - c
                if chunk > budget:
                    chunk = budget
                nb = (c + chunk + BLOCK - 1) // BLOCK - (c + BLOCK - 1) // BLOCK
                ok = True
                while nb > self.free:
                    v = self._preempt(True)
                    if v < 0 or v == rid:
                        ok = False
                        break
                if not ok:
                    break
                self.free -= nb
                self.evicted.taken += nb
                budget -= chunk
                p_tok += chunk
                p_attn += chunk * (c + chunk * 0.5)
                p_kv += c + chunk
                sched.append((rid, chunk))
            n_dec = self.n_dec  # preemption may have removed decoders

        waiting = self.waiting
        # V1 admits no waiting request in a step that had to preempt (the pool is short).
        if waiting and budget > 0 and self.preemptions == preempted_before:
            # A busy engine that schedules ahead formed this batch when the last step began;
            # an idle one schedules the moment a request comes.
            cutoff = self.cutoff if (n_dec or self.prefilling) else math.inf
            queued = R.queued
            while waiting and budget > 0 and self.n_dec + len(self.prefilling) < self.max_seqs:
                rid = waiting[0]
                if queued[rid] > cutoff:
                    break
                target = P[rid] + gen[rid]
                hit = self._hit(rid, target) if self.prefix_cached else 0
                own = self.evicted.cached_blocks(rid, target) if rid in self.evicted else 0
                if own * BLOCK > hit:
                    hit = own * BLOCK
                else:
                    own = 0
                chunk = target - hit
                if chunk > budget:
                    chunk = budget
                nb = (hit + chunk + BLOCK - 1) // BLOCK - hit // BLOCK
                if nb + own > self.free:
                    break
                self.evicted.forget(rid)
                self._admit(rid, hit, nb, own)
                budget -= chunk
                p_tok += chunk
                p_attn += chunk * (hit + chunk * 0.5)
                p_kv += hit + chunk
                sched.append((rid, chunk))

        if not sched and not n_dec:
            return False
        self._run(p_tok, p_attn, p_kv, n_dec, sched)
        return True

    def _run(self, p_tok: int, p_attn: float, p_kv: int, n_dec: int, sched) -> None:
        """Run the scheduled step: advance the clock, emit tokens, retire what finished."""
        R = self.reqs
        P, O, gen, kvl, state = R.P, R.O, R.gen, R.kv, R.state
        phase = self.phase
        used = self.total_blocks - self.free
        if used > self.peak_used:
            self.peak_used = used
        dt = self.step_seconds(p_tok, p_attn, p_kv, n_dec, self.kv_sum + n_dec, len(sched))
        if self.schedules_ahead:
            self.cutoff = self.t
        t = self.t + dt
        self.t = t
        self.busy_s += dt
        self.step += 1

        if n_dec:
            ds = self.dstep
            self.dends.append(t)
            self.dstep = ds + 1
            self.kv_sum += n_dec
            # Decoders whose last token was this step.
            fh = self.finish_heap
            if fh and fh[0][0] == ds:
                admit, shared_l, on_finish = R.admit, R.shared, self.on_finish
                while fh and fh[0][0] == ds:
                    _, a, rid = heapq.heappop(fh)
                    if admit[rid] != a or state[rid] != DECODE:
                        continue  # stale: preempted or aborted since
                    kv0, s0 = kvl[rid], R.s0[rid]
                    k = ds + 1 - s0
                    kv = kv0 + k
                    self.n_dec -= 1
                    self.kv_sum -= kv
                    phase[(s0 - kv0) % BLOCK] -= 1
                    self.free += -(-kv // BLOCK) - shared_l[rid]
                    R.segs[rid].append((R.tfirst[rid], s0, k))
                    gen[rid] += k
                    state[rid] = DONE
                    R.end[rid] = t
                    on_finish(rid, t)

        # Prefills: a chunk that completes the prompt samples one token at the end of the step.
        for rid, chunk in sched:
            if state[rid] != PREFILL:
                continue
            c = kvl[rid] + chunk
            kvl[rid] = c
            pre = R.prefix[rid]
            if pre and not self.prefix_cached and self.prefix_caching and c >= pre // BLOCK * BLOCK > 0:
                # This request computed the shared prefix: its full blocks now stay cached
                # (pinned) for every later request on this replica.
                self.prefix_cached = True
                R.shared[rid] = self.pinned = pre // BLOCK
            if c < P[rid] + gen[rid]:
                continue
            self.prefilling.remove(rid)
            g = gen[rid] + 1
            gen[rid] = g
            if g >= O[rid]:
                R.segs[rid].append((t, 0, 0))
                self.free += -(-c // BLOCK) - R.shared[rid]
                state[rid] = DONE
                R.end[rid] = t
                self.on_finish(rid, t)
                continue
            # Decodes from the next decode step; its stream (this token and the decodes
            # that follow) is recorded as one run when it finishes or is preempted.
            s0 = self.dstep
            R.tfirst[rid] = t
            R.s0[rid] = s0
            state[rid] = DECODE
            self.n_dec += 1
            self.kv_sum += c
            phase[(s0 - c) % BLOCK] += 1
            heapq.heappush(self.finish_heap, (s0 + O[rid] - g - 1, R.admit[rid], rid))
