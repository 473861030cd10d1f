"""Host memory for KV: what a replica keeps below its GPU pool (issue 25).

`HostTier` owns the blocks of host memory given to KV (`host_kv_gib`), in
two uses that share it:
- **cached blocks**, by key (the same keys the GPU prefix cache uses,
  `block_keys`): copies of full blocks written from the GPU (write-through,
  `kv/host_link.py` times the copies). A key becomes findable once its copy
  has landed (`ready`). When the tier is full the least recently used key
  goes (LRU: a store or a hit makes a key the most recent). This is what
  vLLM's offloading connector (CPU backend, LRU) and SGLang's HiCache host
  pool keep.
- **swapped requests**: a preempted request's blocks under `preemption_mode
  swap`, by request id, until they are copied back. They are never evicted;
  making room for them evicts cached keys (a cache is disposable, a swapped
  request's KV is not), and when even that is not enough the swap is refused
  (the victim is recomputed instead).

Everything here is integers and keys; times are clock steps. `audit` checks
`cached + swapped <= capacity` and that the swap counts add up.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Hashable, Iterable

from ..records.errors import InvariantError

__all__ = ["HostTier"]


class HostTier:
    """Host-memory KV blocks: cached keys (LRU) and swapped requests' blocks."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        # key -> the step its copy lands (findable from then on); oldest use first.
        self.cached: OrderedDict[Hashable, int] = OrderedDict()
        # request id -> (blocks, the step its swap-out copy lands, the rows they hold).
        self.swapped: dict[str, tuple[int, int, int]] = {}
        self.swap_blocks = 0
        self.evicted = 0        # cached keys dropped to make room
        self.peak_used = 0

    @property
    def used(self) -> int:
        """Blocks of host memory in use (cached and swapped)."""
        return len(self.cached) + self.swap_blocks

    def _note_peak(self) -> None:
        used = len(self.cached) + self.swap_blocks
        if used > self.peak_used:
            self.peak_used = used

    def _evict(self, room: int) -> None:
        """Drop least recently used keys until `room` blocks are free (or no key is
        left)."""
        cached = self.cached
        while cached and self.capacity - len(cached) - self.swap_blocks < room:
            cached.popitem(last=False)
            self.evicted += 1

    # --- cached blocks ----------------------------------------------------------

    def new_keys(self, keys: Iterable[Hashable]) -> list[Hashable]:
        """The keys of `keys` not cached here (what a store must copy), in order,
        each once."""
        cached = self.cached
        seen: set = set()
        out = []
        for key in keys:
            if key not in cached and key not in seen:
                seen.add(key)
                out.append(key)
        return out

    def store(self, keys: list[Hashable], ready: int) -> int:
        """Keep `keys` (none cached yet), findable from step `ready`, evicting the
        least recently used as needed; returns how many were kept (a key finds no
        room only when every block is swapped)."""
        self._evict(len(keys))
        room = self.capacity - len(self.cached) - self.swap_blocks
        kept = keys if room >= len(keys) else keys[:max(room, 0)]
        cached = self.cached
        for key in kept:
            cached[key] = ready
        self._note_peak()
        return len(kept)

    def match(self, keys: list[Hashable], now: int) -> int:
        """How many leading `keys` are cached with their copy landed by `now`."""
        cached = self.cached
        n = 0
        for key in keys:
            ready = cached.get(key)
            if ready is None or ready > now:
                break
            n += 1
        return n

    def touch(self, keys: list[Hashable]) -> None:
        """A hit on `keys`: they become the most recently used."""
        move = self.cached.move_to_end
        for key in keys:
            move(key)

    # --- swapped requests -------------------------------------------------------

    def reserve_swap(self, rid: str, blocks: int, ready: int, rows: int) -> bool:
        """Take `blocks` for preempted `rid`'s KV (`rows` rows), its copy landing at
        `ready`, evicting cached keys as needed; False (nothing taken) if they cannot
        fit."""
        if rid in self.swapped:
            raise InvariantError(f"request {rid!r} swapped out while its swapped KV is still "
                                 "in host memory")
        if blocks > self.capacity - self.swap_blocks:
            return False
        self._evict(blocks)
        self.swapped[rid] = (blocks, ready, rows)
        self.swap_blocks += blocks
        self._note_peak()
        return True

    def release_swap(self, rid: str) -> int:
        """`rid`'s swapped blocks are let go (copied back, or given up); returns them."""
        blocks = self.swapped.pop(rid)[0]
        self.swap_blocks -= blocks
        return blocks

    # --- invariants ---------------------------------------------------------------

    def audit(self) -> None:
        """Host blocks are conserved: cached + swapped <= capacity, and the swap count
        is the sum of the swapped requests' blocks."""
        swapped = sum(entry[0] for entry in self.swapped.values())
        if swapped != self.swap_blocks:
            raise InvariantError(f"host swap_blocks({self.swap_blocks}) == sum of swapped "
                                 f"requests' blocks({swapped}) is false")
        if len(self.cached) + self.swap_blocks > self.capacity:
            raise InvariantError(f"host cached({len(self.cached)}) + swapped"
                                 f"({self.swap_blocks}) <= capacity({self.capacity}) is false")
