"""Which of an evicted request's KV blocks are still cached when it comes back.

vLLM V1 with prefix caching (its default) frees an evicted request's blocks to the back of
the free queue without forgetting what they hold, last block first; allocations take blocks
from the front. Readmitted before the allocations reach them, the request finds its context
cached and computes only what was lost. Recomputed from scratch instead, a prompt longer than
the token budget, admitted on its first chunk, evicted itself for the next one over and over:
GPUStack's 32k-token bursts on an A100 came out at 0.31x the measured throughput, with 1,881
preemptions for 100 requests.
"""

from __future__ import annotations


class EvictedBlocks:
    """The evicted requests' cached blocks on one replica, and the blocks allocated since."""

    def __init__(self, block: int) -> None:
        self.block = block
        self.taken = 0  # blocks allocated from the free queue, ever
        # rid -> (its full blocks, free blocks ahead of them, ``taken`` when it was evicted)
        self._records: dict[int, tuple[int, int, int]] = {}

    def __contains__(self, rid: int) -> bool:
        return rid in self._records

    def evicted(self, rid: int, computed_tokens: int, free_ahead: int) -> None:
        """``rid`` was evicted holding ``computed_tokens``, with ``free_ahead`` blocks
        already in the free queue (before its own)."""
        self._records[rid] = (computed_tokens // self.block, free_ahead, self.taken)

    def cached_blocks(self, rid: int, target: int) -> int:
        """Its blocks still cached, of a context of ``target`` tokens (vLLM computes at
        least the last token): the allocations past the blocks ahead took its last ones."""
        full, ahead, mark = self._records[rid]
        lost = max(0, self.taken - mark - ahead)
        return max(0, min(full - lost, (target - 1) // self.block))

    def forget(self, rid: int) -> None:
        self._records.pop(rid, None)
