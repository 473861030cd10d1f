"""The radix tree's free keyed blocks, in the order they were freed (§8.6): a
queue whose members join and leave by whole runs, one list entry per block.

The radix tree (`radix_cache`) evicts whole nodes, and frees a request's
blocks in one batch; it needs of its free blocks `in`, `len`, whole runs
added and removed, a single hit taken out, and (only when no whole node can
go) the least recently freed block. An ordered dict does all that at the
price of two of its own operations per block and per visit (the costliest
per-block work of a Mooncake replay under `sglang`); here a block is free
when `since[block]`, the number of the batch that freed it, is not 0, and
the order is kept as the batches given back, in order, each with its blocks
and how many of them are still free in it: a batch's entry is current when
its block still names that batch, stale once the block left (entries are
never removed one by one; a batch goes when none of its blocks is left).
"""
from __future__ import annotations

from collections import Counter, deque
from itertools import compress, repeat
from operator import eq
from typing import Iterator

__all__ = ["FreeQueue"]


class FreeQueue:
    """Free keyed blocks (non-negative integers) in the order freed: the batch
    that freed each block (0: not free) in a list indexed by block number, and
    the batches as given back (see the module docstring). `in`, `len` and
    iteration (least recently freed first) are a container's."""

    __slots__ = ("since", "size", "batches", "next_batch", "entries")

    def __init__(self) -> None:
        # block -> the number of the batch that freed it while free, else 0 (one
        # int object per batch: setting a run of blocks allocates nothing).
        self.since: list[int] = []
        self.size = 0  # blocks free
        # number -> [its blocks, how many are still free in it, entries scanned by
        # `pop_oldest`], oldest first (a dict keeps the order batches came in).
        self.batches: dict[int, list] = {}
        self.next_batch = 1
        self.entries = 0  # entries in the batches kept, stale ones included

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __contains__(self, block: object) -> bool:
        since = self.since
        return type(block) is int and 0 <= block < len(since) and since[block] != 0

    def __iter__(self) -> Iterator[int]:
        since = self.since
        for batch, (blocks, _, _) in list(self.batches.items()):
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
        self.batches[batch] = [blocks, len(blocks), 0]
        self.size += len(blocks)
        self.entries += len(blocks)
        if self.entries > 8 * self.size + 65536:
            self._compact()  # (blocks left free long ago keep their batches)

    def remove_all_if_free(self, blocks: list[int]) -> bool:
        """Take out `blocks` (within reach) if every one of them is free (a node
        evicted whole); whether they were."""
        since = self.since
        if not since[blocks[0]] or not since[blocks[-1]]:
            return False  # (a held node, usually: no look at its other blocks)
        batch_of = list(map(since.__getitem__, blocks))  # (in C)
        if 0 in batch_of:
            return False
        deque(map(since.__setitem__, blocks, repeat(0)), 0)
        self.size -= len(blocks)
        first = batch_of[0]
        if batch_of.count(first) == len(batch_of):  # (a node's blocks: one batch, usually)
            self._left(first, len(batch_of))
        else:
            for batch, count in Counter(batch_of).items():
                self._left(batch, count)
        return True

    def count_in(self, blocks: list[int]) -> int:
        """How many of `blocks` are free."""
        since = self.since
        if blocks and max(blocks) < len(since):
            batch_of = list(map(since.__getitem__, blocks))  # (in C)
            return len(batch_of) - batch_of.count(0)
        return sum(1 for b in blocks if b in self)

    def remove(self, block: int) -> None:
        """Take free `block` out (a hit: a request holds it again)."""
        batch = self.since[block]
        if not batch:
            raise KeyError(block)
        self.since[block] = 0
        self.size -= 1
        self._left(batch, 1)

    def pop_oldest(self) -> int:
        """Take out and return the least recently freed block."""
        since = self.since
        for batch, entry in self.batches.items():
            blocks = entry[0]
            for i in range(entry[2], len(blocks)):
                block = blocks[i]
                if since[block] == batch:
                    entry[2] = i + 1
                    since[block] = 0
                    self.size -= 1
                    self._left(batch, 1)
                    return block
        raise KeyError("pop from an empty FreeQueue")

    def _left(self, batch: int, count: int) -> None:
        """`count` blocks of `batch` are no longer free; a batch with none left goes."""
        entry = self.batches[batch]
        entry[1] -= count
        if not entry[1]:
            del self.batches[batch]
            self.entries -= len(entry[0])

    def _compact(self) -> None:
        """Drop the stale entries: the live blocks, in order, become one new batch
        (same order, so nothing observable changes)."""
        since = self.since
        live: list[int] = []
        for batch, (blocks, _, _) in self.batches.items():
            live += compress(blocks, map(eq, map(since.__getitem__, blocks), repeat(batch)))
        batch = self.next_batch
        self.next_batch = batch + 1
        deque(map(since.__setitem__, live, repeat(batch)), 0)
        self.batches = {batch: [live, len(live), 0]} if live else {}
        self.entries = len(live)
