"""The simulated engine (all replicas of :mod:`core.simulate.engine`) driven by the wall
clock, for the loopback server (:mod:`core.simulate.server`).

**Time.** The replicas of :mod:`core.simulate.engine` run in virtual time v = (wall − start)
× ``scale`` (``--scale 10`` plays ten times faster than the simulated GPU). A request is
handed to the scheduler when it arrives (after the API server's per-request overhead, also
scaled); each replica's loop runs one step, sleeps until the wall time its end maps to,
then streams the tokens that step produced. If Python falls behind, the engine clock is
pulled forward to now (it never runs in the past).

**Prompt tokens.** A prompt given as token ids counts exactly; text counts as one token per
4 characters (no tokenizer is loaded). With prefix caching on, the prompt's common prefix
with the first prompt seen stands in for vLLM's block hashes: exact for the shared-prefix
dataset (every prompt starts with the same text), zero for unrelated prompts.
"""

from __future__ import annotations

import asyncio
import time
from os.path import commonprefix

from core.errors import BadInput
from core.estimate.costmodel import CostModel
from core.simulate.engine import Replica
from core.simulate.requests import DECODE, DONE, FAILED, Requests
from core.simulate.scheduler_v0 import replica_class
from core.simulate.feasibility import apply_quantization, check_config, scheduler_generation
from core.spec.engine_defaults import with_engine_defaults
from core.spec.serving import ServerConfig

CHARS_PER_TOKEN = 4  # a text prompt counts as one token per 4 characters (no tokenizer)


class LiveStream:
    """What one request's handler waits on: tokens as the engine makes them."""

    __slots__ = ("rid", "queue", "sent", "replica")

    def __init__(self, rid: int, replica: int):
        self.rid = rid
        self.replica = replica
        self.queue: asyncio.Queue = asyncio.Queue()
        self.sent = 0


class LiveSim:
    """The simulated engine (all replicas) driven by the wall clock."""

    def __init__(
        self,
        arch,
        hardware,
        config: ServerConfig,
        *,
        engine: str = "vllm",
        engine_version: str | None = None,
        scale: float = 1.0,
        router: str = "least-loaded",
    ):
        if not scale > 0:
            raise BadInput(f"--scale must be positive, got {scale}")
        arch = apply_quantization(arch, config)
        config = with_engine_defaults(config, engine, engine_version, hardware.gpu)
        self.memory = check_config(arch, hardware, config)
        self.cost = CostModel(arch, hardware.gpu, config.tp, config.kv_cache_dtype, engine, engine_version, config.stream_interval)
        self.stream_interval = config.stream_interval
        self.config = config
        self.engine_version = engine_version  # the release played, which GET /version reports
        self.scale = scale
        self.router = router
        self.max_len = self.memory.max_model_len
        self.reqs = Requests([], [], [])
        v0, steps = scheduler_generation(config, engine, engine_version)
        blocks = self.memory.kv_tokens // 16
        max_tokens = config.max_num_batched_tokens or (max(self.max_len, 2048) if v0 else config.batched_tokens)
        self.replicas = [
            replica_class(v0)(
                i,
                self.reqs,
                self.cost,
                blocks,
                config.seqs,
                max_tokens,
                config.enable_prefix_caching,
                self._on_finish,
                scheduler_steps=steps,
                schedules_ahead=self.cost.steps_ahead > 0,
            )
            for i in range(config.dp)
        ]
        self.active: list[dict[int, LiveStream]] = [dict() for _ in self.replicas]
        self.wakeups = [asyncio.Event() for _ in self.replicas]
        self._rr = 0
        self.start = time.monotonic()
        self.reference_prompt: str | None = None
        self.counters = {"prompt_tokens": 0, "generation_tokens": 0, "success": 0, "failed": 0}
        self._tasks: list[asyncio.Task] = []

    # ---- clocks ----
    def vnow(self) -> float:
        return (time.monotonic() - self.start) * self.scale

    def wall(self, v: float) -> float:
        return self.start + v / self.scale

    # ---- requests ----
    def _prefix_of(self, text: str | None) -> int:
        if not text or not self.config.enable_prefix_caching:
            return 0
        if self.reference_prompt is None:
            self.reference_prompt = text
            return len(text) // CHARS_PER_TOKEN
        return len(commonprefix([self.reference_prompt, text])) // CHARS_PER_TOKEN

    async def submit(self, n_prompt: int, max_tokens: int, text: str | None) -> LiveStream:
        """Hand a request to the scheduler (after the API server's overhead); returns its stream."""
        if n_prompt + max_tokens > self.max_len:
            raise BadInput(
                f"This model's maximum context length is {self.max_len} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the completion)."
            )
        rid = self.reqs.add(n_prompt, max_tokens, min(self._prefix_of(text), n_prompt))
        self.counters["prompt_tokens"] += n_prompt
        await asyncio.sleep(self.cost.request_overhead_s / self.scale)
        reps = self.replicas
        if self.router == "round-robin":
            rep = reps[self._rr % len(reps)]
            self._rr += 1
        else:
            rep = min(reps, key=Replica.load)
        now = self.vnow()
        if not rep.has_work and rep.t < now:
            rep.t = now
        rep.enqueue(rid, now)
        stream = LiveStream(rid, rep.index)
        self.active[rep.index][rid] = stream
        self.wakeups[rep.index].set()
        return stream

    def cancel(self, stream: LiveStream) -> None:
        """The client went away: abort the request as vLLM does."""
        if self.reqs.state[stream.rid] not in (DONE, FAILED):
            rep = self.replicas[stream.replica]
            self.active[stream.replica].pop(stream.rid, None)
            rep.abort(stream.rid, rep.t, "client disconnected")

    def _on_finish(self, rid: int, t: float) -> None:
        if self.reqs.state[rid] == DONE:
            self.counters["success"] += 1
        else:
            self.counters["failed"] += 1

    # ---- the engine loops ----
    async def _loop(self, i: int) -> None:
        rep, active, wake = self.replicas[i], self.active[i], self.wakeups[i]
        R = self.reqs
        while True:
            if not rep.has_work:
                wake.clear()
                await wake.wait()
                continue
            now = self.vnow()
            if rep.t < now:
                rep.t = now  # behind the wall clock: the engine cannot step in the past
            if not rep.run_step():
                if rep.waiting and not rep.running:
                    rid = rep.fail_head("request needs more KV cache than the engine has")
                    s = active.pop(rid, None)
                    if s:
                        s.queue.put_nowait(("error", R.error[rid]))
                    continue
                wake.clear()
                await wake.wait()
                continue
            delay = self.wall(rep.t) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            # Stream what this step produced: the first token at once, then every
            # stream_interval tokens, and what is left when the request ends.
            for rid, s in list(active.items()):
                st = R.state[rid]
                made = R.gen[rid] + (rep.dstep - R.s0[rid] if st == DECODE else 0)
                if made > s.sent and (s.sent == 0 or made - s.sent >= self.stream_interval or st == DONE):
                    s.queue.put_nowait(("tokens", made - s.sent))
                    self.counters["generation_tokens"] += made - s.sent
                    s.sent = made
                if st == DONE:
                    s.queue.put_nowait(("done", None))
                    del active[rid]
                elif st == FAILED:
                    s.queue.put_nowait(("error", R.error[rid]))
                    del active[rid]

    def start_loops(self) -> None:
        self.start = time.monotonic()
        self._tasks = [asyncio.create_task(self._loop(i)) for i in range(len(self.replicas))]

    async def stop_loops(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def reset_prefix_cache(self) -> bool:
        """Forget the cached prefix on idle replicas (vLLM's /reset_prefix_cache)."""
        ok = True
        for rep in self.replicas:
            if rep.has_work:
                ok = False
                continue
            rep.free += rep.pinned
            rep.pinned = 0
            rep.prefix_cached = False
        if ok:
            self.reference_prompt = None
        return ok

    # ---- telemetry ----
    def metrics_text(self, model: str) -> str:
        reps = self.replicas
        running = sum(r.running for r in reps)
        waiting = sum(len(r.waiting) for r in reps)
        total = sum(r.total_blocks for r in reps) or 1
        usage = sum(r.used_blocks - r.pinned for r in reps) / total
        lab = f'{{model_name="{model}",engine="0"}}'
        c = self.counters
        lines = [
            "# HELP knee:simulated 1: every number from this server is simulated.",
            "# TYPE knee:simulated gauge",
            "knee:simulated 1",
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{lab} {running}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{lab} {waiting}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{lab} {usage:.6f}",
            "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage (pre-V1 name). 1 means 100 percent usage.",
            "# TYPE vllm:gpu_cache_usage_perc gauge",
            f"vllm:gpu_cache_usage_perc{lab} {usage:.6f}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemptions.",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{lab} {sum(r.preemptions for r in reps)}",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{lab} {c['prompt_tokens']}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{lab} {c['generation_tokens']}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{model_name="{model}",engine="0",finished_reason="length"}} {c["success"]}',
        ]
        return "\n".join(lines) + "\n"
