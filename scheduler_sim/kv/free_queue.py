"""The radix tree's free keyed blocks, in the order they were freed (§8.6): a
queue whose members join and leave by whole runs, one list entry per block.

The radix tree (`radix_cache`) evicts whole nodes, and frees a request's
blocks in one batch; it needs of its free blocks `in`, `len`, whole runs
added and removed, a single hit taken out, and (only when no whole node can
go) the least recently freed block. An ordered dict does all that at the
price of two of its own operations per block and per visit (the costliest
per-block work of a Mooncake replay under `sglang`); here a block is free
when `since[block]`, the number of the batch that freed it, is not 0, and
the order is kept as the batches given back (number, blocks), in order: a
batch's entry is current when its block still names that batch, stale once
the block left (entries are never removed one by one; the queue is
compacted when stale entries are three times the live ones).
"""
from __future__ import annotations

from collections import deque
from itertools import compress, repeat
from operator import eq
from typing import Iterator

__all__ = ["FreeQueue"]


class FreeQueue:
    """Free keyed blocks (non-negative integers) in the order freed: the batch
    that freed each block (0: not free) in a list indexed by block number, and
    the batches as given back (see the module docstring). `in`, `len` and
    iteration (least recently freed first) are a container's."""

    __slots__ = ("since", "size", "batches", "next_batch", "front", "entries")

    def __init__(self) -> None:
        # block -> the number of the batch that freed it while free, else 0 (one
        # int object per batch: setting a run of blocks allocates nothing).
        self.since: list[int] = []
        self.size = 0                 # blocks free
        self.batches: deque[tuple[int, list[int]]] = deque()  # (number, blocks)
        self.next_batch = 1
        self.front = 0                # entries of the first batch already consumed
        self.entries = 0              # entries in the batches, stale ones included

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __contains__(self, block: object) -> bool:
        since = self.since
        return type(block) is int and 0 <= block < len(since) and since[block] != 0

    def __iter__(self) -> Iterator[int]:
        since = self.since
        for batch, blocks in self.batches:
            for block in blocks:
                if since[block] == batch:
                    yield block

    def __repr__(self) -> str:
        return f"FreeQueue({list(self)})"

    def reach(self, top: int) -> None:
        """Make room for block numbers up to `top`."""
        if top >= len(self.since):
            self.since.extend(repeat(0, top + 1 - len(self.since)))

    def add_all(self, blocks: list[int]) -> None:
        """`blocks`, none of them free and all within reach (`reach`), join the tail
        in order, as one batch; the list becomes the queue's."""
        if not blocks:
            return
        batch = self.next_batch
        self.next_batch = batch + 1
        # Set in C (a map over the list's own method), no step per block.
        deque(map(self.since.__setitem__, blocks, repeat(batch)), 0)
        self.batches.append((batch, blocks))
        self.size += len(blocks)
        self.entries += len(blocks)
        if self.entries > 4 * self.size + 16384:
            self._compact()

    def all_free(self, blocks: list[int]) -> bool:
        """Whether every one of `blocks` (registered ones: within reach) is free."""
        return 0 not in map(self.since.__getitem__, blocks)

    def count_in(self, blocks: list[int]) -> int:
        """How many of `blocks` are free."""
        since = self.since
        if blocks and max(blocks) < len(since):
            serials = list(map(since.__getitem__, blocks))  # (in C)
            return len(serials) - serials.count(0)
        return sum(1 for b in blocks if b in self)

    def remove_all(self, blocks: list[int]) -> None:
        """Take out `blocks`, every one of them free (a node evicted whole)."""
        deque(map(self.since.__setitem__, blocks, repeat(0)), 0)
        self.size -= len(blocks)

    def remove(self, block: int) -> None:
        """Take free `block` out (a hit: a request holds it again)."""
        if not self.since[block]:
            raise KeyError(block)
        self.since[block] = 0
        self.size -= 1

    def pop_oldest(self) -> int:
        """Take out and return the least recently freed block."""
        since = self.since
        batches = self.batches
        while batches:
            batch, blocks = batches[0]
            for i in range(self.front, len(blocks)):
                block = blocks[i]
                if since[block] == batch:
                    self.front = i + 1
                    since[block] = 0
                    self.size -= 1
                    return block
            batches.popleft()
            self.entries -= len(blocks)
            self.front = 0
        raise KeyError("pop from an empty FreeQueue")

    def _compact(self) -> None:
        """Drop the stale entries: the live blocks, in order, become one new batch
        (same order, so nothing observable changes)."""
        since = self.since
        live: list[int] = []
        for batch, blocks in self.batches:  # (entries consumed already are stale)
            live += compress(blocks, map(eq, map(since.__getitem__, blocks), repeat(batch)))
        batch = self.next_batch
        self.next_batch = batch + 1
        deque(map(since.__setitem__, live, repeat(batch)), 0)
        self.batches = deque([(batch, live)]) if live else deque()
        self.entries = len(live)
        self.front = 0
