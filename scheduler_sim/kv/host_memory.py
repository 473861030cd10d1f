"""A replica's host memory for KV: the tier, the link, the copies under way and
what they moved (issue 25).

`HostMemory` groups what the allocator and the engine share about host memory:
the `HostTier` (what host memory holds), the `HostLink` (when copies end; None
without a cost model, where host memory cannot be sized), the keys written
on the GPU since the last store was issued (`pending`: every full prompt
block that gets a key is written through to host memory when the dispatch
that wrote it ends; engine/host_moves.py stores the rest at a request's end
or preemption), the stores and loads under way (by landing step), and the
counters of the summary. Like the allocator it knows request ids and
integers only.

The survival of resumed requests is counted here too: at each re-admission of
a preempted request, the rows it must rebuild split into those found again
in the GPU prefix cache, those copied back from host memory (cached blocks or
its swapped KV), and those recomputed.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Hashable

from .host_link import OUT, HostLink
from .host_tier import HostTier

__all__ = ["HostMemory", "Load"]


class Load:
    """A copy into the GPU under way: `rows` rows of request `rid` resident when it
    lands (its GPU hit and the `tokens` rows copied), from `source` (`cache`: cached
    blocks, `swap`: its own swapped KV)."""

    __slots__ = ("rid", "source", "blocks", "tokens", "rows", "start", "done")

    def __init__(self, rid: str, source: str, blocks: int, tokens: int, rows: int,
                 start: int, done: int) -> None:
        self.rid, self.source, self.blocks, self.tokens = rid, source, blocks, tokens
        self.rows, self.start, self.done = rows, start, done


class HostMemory:
    """Host memory of one replica: tier, link, loads under way and their counts."""

    def __init__(self, tier: HostTier, link: HostLink | None, write_through: bool,
                 swap: bool, block_bytes: int) -> None:
        self.tier = tier
        self.link = link
        self.write_through = write_through  # full GPU blocks are copied to host memory
        self.swap = swap                    # preemption_mode swap
        self.block_bytes = block_bytes      # a block's KV bytes (all GPUs of the replica)
        self.pending: list[Hashable] = []   # keys written since the last store
        self.storing: deque[int] = deque()  # landing steps of the stores under way
        self.loads: list[tuple[int, int, Load]] = []  # (landing step, order, load)
        self._order = 0
        # Requests admitted with a load, until their step is planned: rid -> (source,
        # blocks, tokens, rows).
        self.parking: dict[str, tuple[str, int, int, int]] = {}
        # Loads that go with the batch being planned (SGLang's), and the exact step
        # the last of them ends: the dispatch ends no earlier.
        self.in_batch: list[Load] = []
        self.batch_until: float | None = None
        self.stores = self.stored_blocks = 0
        self.loads_done = self.loaded_tokens = self.loads_aborted = 0
        self.swap_outs = self.swap_refused = 0
        self.swap_ins = self.swapped_in_tokens = 0
        self.load_wait = 0          # steps requests waited for loads, summed
        self.load_wait_max = 0
        # Survival: rows to rebuild at each resume, split three ways (summed), and
        # how many resumes had each surviving fraction, to 4 decimals (so that the
        # distribution takes at most 10,001 entries however many resumes there are).
        self.resumes = 0
        self.rebuild_gpu = self.rebuild_host = self.rebuild_computed = 0
        self.survival: dict[float, int] = {}

    # --- stores (write-through) -------------------------------------------------

    def issue_stores(self, end: float, land, keys: list | None = None) -> tuple[int, int | None]:
        """Copy the pending keys (or `keys`) not in host memory yet, in one copy that
        starts when the dispatch that wrote them ends (exact step `end`);
        `land(exact, start)` rounds a copy's end to its landing step. Returns the
        blocks copied and the step they land (0, None: nothing to copy)."""
        if keys is None:
            keys, self.pending = self.pending, []
        keys = self.tier.new_keys(keys)
        if not keys:
            return 0, None
        done = land(self.link.copy(OUT, end, len(keys)), int(end))
        self.stored_blocks += self.tier.store(keys, done)
        self.stores += 1
        self.storing.append(done)  # (the OUT link is in order: landings ascend)
        return len(keys), done

    def next_store_landing(self, now: int) -> int | None:
        """The first step after `now` at which a store lands, if any (what a waiting
        request may find in host memory changes then)."""
        storing = self.storing
        while storing and storing[0] <= now:
            storing.popleft()
        return storing[0] if storing else None

    # --- loads --------------------------------------------------------------------

    def start_load(self, load: Load) -> None:
        """`load` is under way; it lands at `load.done`."""
        heapq.heappush(self.loads, (load.done, self._order, load))
        self._order += 1

    def next_landing(self) -> int | None:
        """The step the next load lands, if any is under way."""
        return self.loads[0][0] if self.loads else None

    def landed(self, now: int) -> list[Load]:
        """The loads landing at or before `now`, in landing order (taken off)."""
        out = []
        loads = self.loads
        while loads and loads[0][0] <= now:
            load = heapq.heappop(loads)[2]
            out.append(load)
        return out

    def count_load(self, load: Load, waited: int) -> None:
        """A load landed for a live request that waited `waited` steps for it."""
        self.load_wait += waited
        if waited > self.load_wait_max:
            self.load_wait_max = waited
        if load.source == "swap":
            self.swap_ins += 1
            self.swapped_in_tokens += load.tokens
        else:
            self.loads_done += 1
            self.loaded_tokens += load.tokens

    # --- survival -----------------------------------------------------------------

    def resumed(self, rebuild: int, gpu: int, host: int) -> None:
        """A preempted request is admitted again with `rebuild` rows to restore, `gpu`
        of them found in the GPU prefix cache and `host` copied back."""
        gpu = min(gpu, rebuild)
        host = min(host, rebuild - gpu)
        self.resumes += 1
        self.rebuild_gpu += gpu
        self.rebuild_host += host
        self.rebuild_computed += rebuild - gpu - host
        if rebuild:
            share = round((gpu + host) / rebuild, 4)
            self.survival[share] = self.survival.get(share, 0) + 1
