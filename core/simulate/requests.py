"""Per-request state of one simulation, shared by the replicas of :mod:`core.simulate.engine`,
the client (:mod:`core.simulate.client`) and the live server."""

from __future__ import annotations

BLOCK = 16  # tokens per KV block (vLLM's default block size)

# Request states.
PENDING, WAITING, PREFILL, DECODE, DONE, FAILED = range(6)


class Requests:
    """Per-request state for one simulation, as parallel lists indexed by request id.

    Lists of plain ints beat objects with attributes in CPython's hot loops, and every
    replica shares them (a request lives on one replica, chosen when it arrives).
    """

    __slots__ = (
        "P",
        "O",
        "gen",
        "kv",
        "s0",
        "state",
        "shared",
        "admit",
        "prefix",
        "segs",
        "end",
        "error",
        "replica",
        "tfirst",
        "queued",
    )

    def __init__(self, prompt_lens, output_lens, prefix_lens):
        n = len(prompt_lens)
        self.P = list(prompt_lens)  # prompt tokens
        self.O = list(output_lens)  # output tokens to generate
        self.prefix = list(prefix_lens)  # tokens shared with every other prompt
        self.gen = [0] * n  # tokens generated (for decoders: when they started decoding)
        self.kv = [0] * n  # tokens in KV (for decoders: before their first decode step)
        self.s0 = [0] * n  # step of the first decode (decoders)
        self.state = [PENDING] * n
        self.shared = [0] * n  # blocks this request shares with the prefix cache (never freed by it)
        self.admit = [0] * n  # admission sequence number (preemption picks the latest)
        # Streamed runs: (time of the token that completed a prefill, first decode step,
        # decode tokens); a request preempted and recomputed has several.
        self.segs: list[list[tuple[float, int, int]]] = [[] for _ in range(n)]
        self.tfirst = [0.0] * n  # when the current run's prefill completed
        self.end = [0.0] * n  # engine time of the last token
        self.error: list[str | None] = [None] * n
        self.replica = [-1] * n
        self.queued = [0.0] * n  # when it reached the engine's waiting queue

    def add(self, prompt_len: int, output_len: int, prefix_len: int = 0) -> int:
        """Append one request (the live server's requests arrive one at a time)."""
        self.P.append(prompt_len)
        self.O.append(output_len)
        self.prefix.append(prefix_len)
        self.gen.append(0)
        self.kv.append(0)
        self.s0.append(0)
        self.state.append(PENDING)
        self.shared.append(0)
        self.admit.append(0)
        self.end.append(0.0)
        self.error.append(None)
        self.replica.append(-1)
        self.tfirst.append(0.0)
        self.segs.append([])
        self.queued.append(0.0)
        return len(self.P) - 1
