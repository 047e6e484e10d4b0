"""The client side of a simulated load point, and the event loop that interleaves it with
the replicas of :mod:`core.simulate.engine`.

:class:`SimClient` holds the client's view of every request (send, schedule, when it saw the
last token), its concurrency cap and timeout, the API server's per-request and per-token
costs, and the router over data-parallel replicas; :meth:`SimClient.run` steps whichever
comes first, the next client event or the replica whose clock is earliest. What the load
point sends, and when, is :func:`core.simulate.sim.simulate_detailed`'s to decide.
"""

from __future__ import annotations

import heapq
import math
from typing import Callable

from core.simulate.engine import Replica
from core.simulate.requests import DONE, FAILED, PENDING, Requests


class SimClient:
    """The client, the router and the replicas of one load point."""

    def __init__(self, reqs: Requests, replicas: list[Replica], cost, max_len: int, router: str):
        self.reqs = reqs
        self.replicas = replicas
        self.api_s = cost.request_overhead_s
        self.tok_s = cost.output_token_overhead_s
        # The fewest seconds between two sends (a fitted profile's client_send_s; 0 for the
        # cost model): where the client shares the host's CPUs with the server it cannot send
        # faster, and a slot waits for its turn before the request (and its clock) starts.
        self.send_s = getattr(cost, "client_send_s", 0.0)
        self._next_send = -math.inf
        self.max_len = max_len
        self.router = router
        self._rr = 0
        self.events: list[tuple[float, int, int, int]] = []  # (time, tie, kind, rid)
        self._tie = 0
        self.send: list[float] = []
        self.sched: list[float | None] = []
        self.client_end: list[float] = []  # when the client saw the last token (or the error)
        self.measured: list[int] = []  # request ids of the load point, in send/schedule order
        self.in_flight = 0
        self.cap = 1 << 62
        self.client_queue: list[int] = []  # FIFO via index
        self._cq_head = 0
        self.timeout = math.inf  # client request timeout (s after send)
        self.after_finish: Callable[[int, float], None] | None = None

    def create(self, prompt_len: int, output_len: int, prefix_len: int, measured: bool) -> int:
        rid = self.reqs.add(prompt_len, output_len, prefix_len)
        self.send.append(math.nan)
        self.sched.append(None)
        self.client_end.append(math.nan)
        if measured:
            self.measured.append(rid)
        return rid

    def cancel_in_flight(self, t: float) -> None:
        """The load point's grace period is over: the client cancels what is still running."""
        R = self.reqs
        for rid in self.measured:
            if not math.isnan(self.send[rid]) and R.state[rid] not in (DONE, FAILED):
                self.give_up(rid, t, "cancelled after the grace period")

    def fail(self, rid: int, t: float, reason: str) -> None:
        """A request that never reaches the engine fails at ``t`` (the client sees it then)."""
        R = self.reqs
        R.state[rid] = FAILED
        R.error[rid] = reason
        R.end[rid] = t
        self.finished(rid, t)

    def give_up(self, rid: int, t: float, reason: str) -> None:
        """The client abandons an unfinished request: one still in the API server never
        reaches the engine; one on the engine is aborted there (freeing its KV cache)."""
        R = self.reqs
        if R.state[rid] == PENDING:
            self.fail(rid, t, reason)
        else:
            self.replicas[R.replica[rid]].abort(rid, t, reason)

    # Event kinds: 0 = the schedule wants to send, 1 = the request reaches the engine,
    # 2 = the client has received the whole response, 3 = the client's timeout fires.
    def push(self, t: float, kind: int, rid: int) -> None:
        self._tie += 1
        heapq.heappush(self.events, (t, self._tie, kind, rid))

    def do_send(self, rid: int, t: float) -> None:
        if self.send_s > 0:
            t = max(t, self._next_send)
            self._next_send = t + self.send_s
        self.send[rid] = t
        self.in_flight += 1
        self.push(t + self.api_s, 1, rid)
        if self.timeout < math.inf:
            self.push(t + self.timeout, 3, rid)

    def time_out(self, rid: int, t: float) -> None:
        R = self.reqs
        st = R.state[rid]
        if st == DONE or st == FAILED:
            return
        self.give_up(rid, t, f"timeout: no complete response within {self.timeout:g} s")

    def want_send(self, rid: int, t: float) -> None:
        if self.in_flight < self.cap:
            self.do_send(rid, t)
        else:
            self.client_queue.append(rid)

    def arrive(self, rid: int, t: float) -> None:
        R = self.reqs
        if R.state[rid] == FAILED:  # timed out before it got here
            return
        if R.P[rid] + R.O[rid] > self.max_len:
            self.fail(rid, t, (f"HTTP 400: prompt ({R.P[rid]} tokens) plus max_tokens ({R.O[rid]}) exceeds max_model_len {self.max_len}"))
            return
        reps = self.replicas
        if len(reps) == 1:
            rep = reps[0]
        elif self.router == "round-robin":
            rep = reps[self._rr % len(reps)]
            self._rr += 1
        else:  # least-loaded: fewest running + waiting, ties to the lowest index
            rep = min(reps, key=Replica.load)
        if not rep.has_work and rep.t < t:
            rep.t = t  # an idle engine picks the request up at once
        rep.enqueue(rid, t)

    def finished(self, rid: int, t: float) -> None:
        """A request completed or failed on the engine at engine time ``t``; the client
        sees its last token (and frees its slot) once the API server has streamed it."""
        R = self.reqs
        end = t + R.O[rid] * self.tok_s if R.state[rid] == DONE else t
        deadline = self.send[rid] + self.timeout
        if end > deadline:
            # Finished within the step that straddled the client's deadline: the client had
            # already given up, so it is a timeout all the same.
            R.state[rid] = FAILED
            R.error[rid] = f"timeout: no complete response within {self.timeout:g} s"
            end = deadline
        self.client_end[rid] = end
        self.push(end, 2, rid)

    def client_done(self, rid: int, end: float) -> None:
        self.in_flight -= 1
        if self.after_finish is not None:
            self.after_finish(rid, end)
        if self._cq_head < len(self.client_queue) and self.in_flight < self.cap:
            nxt = self.client_queue[self._cq_head]
            self._cq_head += 1
            self.do_send(nxt, end)

    def run(self, sample_dt: float, series: dict[str, list]) -> None:
        events = self.events
        reps = self.replicas
        single = reps[0] if len(reps) == 1 else None
        next_sample = 0.0
        st, sr, sw, sk = series["t"], series["running"], series["waiting"], series["kv_usage"]
        total_blocks = sum(r.total_blocks for r in reps)
        pop = heapq.heappop
        while True:
            if single is not None:
                # (inlined Replica.has_work: this loop runs once per engine step)
                rep = single if (single.n_dec or single.prefilling or single.waiting) else None
            else:
                rep = None
                for r in reps:
                    if r.has_work and (rep is None or r.t < rep.t):
                        rep = r
            if events and (rep is None or events[0][0] <= rep.t):
                t, _, kind, rid = pop(events)
                if kind == 0:
                    self.want_send(rid, t)
                elif kind == 1:
                    self.arrive(rid, t)
                elif kind == 2:
                    self.client_done(rid, t)
                elif kind == 3:
                    self.time_out(rid, t)
                else:
                    self.cancel_in_flight(t)
                continue
            if rep is None:
                break
            if not rep.run_step():
                # Nothing fits even on an empty engine: the head request can never run.
                rep.fail_head("request needs more KV cache than the engine has")
                continue
            if rep.t >= next_sample:
                next_sample = rep.t + sample_dt
                st.append(rep.t)
                if single is not None:
                    sr.append(single.n_dec + len(single.prefilling))
                    sw.append(len(single.waiting))
                    sk.append((single.total_blocks - single.free) / single.total_blocks)
                else:
                    sr.append(sum(r.running for r in reps))
                    sw.append(sum(len(r.waiting) for r in reps))
                    sk.append(sum(r.used_blocks for r in reps) / total_blocks)
