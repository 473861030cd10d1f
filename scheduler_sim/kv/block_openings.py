"""Blocks opened together: the part of `BlockAllocator` that grows the tables of
several requests in one call, as a folded stretch of decodes opens them.

A folded stretch (engine/fast/folding.py) opens blocks for the requests whose
folded rows cross a block boundary, one request after another. With prefix
caching and a full pool each of those blocks is an eviction: one `grow`, one
`take` of one block, one `pop_one` and one key forgotten, per request.
`grow_each` takes the blocks of all of them at once, in the order those
`grow` calls would have taken them (the plain stack's top first, then
never-used ids, then the least recently freed cached blocks, evicted as runs
by the cache's `take`), and hands each request its slice: the same ids and
the same `held` (and peak) as growing request by request. It does so only
where that order is all there is to it: a cache
whose `take` evicts exactly the blocks asked for (`PrefixCache.exact_take`:
vLLM's, not the radix tree's, whose leaves may leave spare blocks for the
next request), no eviction reported, no credits; otherwise it calls `grow`
for each. `grow_in_turn` does the same for a folded run of prompt chunks
(engine/fast/chunk_run.py), where one request grows at every step.

Neither raises the step's counts (`step_growth`, `step_evictions`: the blocks
the step being planned took, for its snapshot and its blocked head's report),
as `grow` does: these blocks are the folded steps', and no reader sees the
counts a fold leaves, since every path that plans a step (engine/stepping.py,
engine/fast/) clears them before its policy's call, and a fold under a prefix
cache has no listener. (What a fold left there was no step's counts anyway:
the flight's step's and every folded step's together. The fallback's `grow`
calls raise them, read by nobody either.) Speed: the two counts were a third
of the hand-out's loop; replaying the first 2,000 Mooncake requests under vllm
with prefix caching, 25,526 requests' blocks in 2,173 calls, 0.987x the
instructions without them (benchmarks/README.md, "thirty-first steps", fr35).

The methods below are `BlockAllocator`'s (a base class of it) and
use the attributes its `__init__` sets.
"""
from __future__ import annotations


__all__ = ["BlockOpenings"]


class BlockOpenings:
    """`BlockAllocator`'s growth of several tables at once."""

    def grow_each(self, openings: list[tuple[str, int]]) -> None:
        """`grow(rid, rows)` for each (rid, rows) of `openings` (each request
        once), in that order.

        Speed: replaying the Mooncake trace under vllm with prefix caching,
        folds opened 145,920 blocks this way, each a `grow` evicting one cached
        block (see the module docstring for what is measured). Its loop is
        `grow_in_turn`'s without the blocks earlier entries gave a request (each
        comes once here): calling that instead read 1.0056x the instructions of
        the first 2,000 Mooncake requests (callgrind, 3.9910e9 against 3.9689e9)."""
        if (len(openings) < 2 or not self._shared or self._report is not None
                or self._credits or not self._cache.exact_take):
            grow = self.grow
            for rid, rows in openings:
                grow(rid, rows)
            return
        tables = self._tables
        size = self.block_size
        needs = []
        total = 0
        for rid, rows in openings:
            table = tables.get(rid)
            if table is None:
                table = tables[rid] = []
            need = -(-rows // size) - len(table)
            if need > 0:
                needs.append((table, need))
                total += need
        self._open_needs(openings, needs, total)

    def grow_in_turn(self, openings: list[tuple[str, int]]) -> None:
        """`grow(rid, rows)` for each (rid, rows) of `openings`, in that order, a
        request perhaps several times (its rows rising): the steps of a folded
        chunk run (engine/fast/chunk_run.py), each decode's opening and the
        chunk's blocks step after step, taken at once as `grow_each` takes them.

        Speed: replaying the first 2,000 Mooncake requests under vllm with prefix
        caching, a `grow` a folded step (about 510 evictions each) took 1.015x the
        instructions of one call a run (benchmarks/README.md, "twenty-sixth
        steps", chunk28)."""
        if not self._shared or self._report is not None or self._credits \
                or not self._cache.exact_take:
            grow = self.grow
            for rid, rows in openings:
                grow(rid, rows)
            return
        tables = self._tables
        size = self.block_size
        given: dict[str, int] = {}  # blocks earlier entries give each request
        needs = []
        total = 0
        for rid, rows in openings:
            table = tables.get(rid)
            if table is None:
                table = tables[rid] = []
            had = given.get(rid, 0)
            need = -(-rows // size) - len(table) - had
            if need > 0:
                needs.append((table, need))
                given[rid] = had + need
                total += need
        self._open_needs(openings, needs, total)

    def _open_needs(self, openings: list[tuple[str, int]],
                    needs: list[tuple[list[int], int]], total: int) -> None:
        """Hand each (table, need) of `needs` its blocks, `total` in all, in that
        order (`grow` for each of `openings` if there are none or too few); the
        step's counts left alone (see the module)."""
        plain = self._free
        free = len(plain) + self.num_blocks - self._fresh + len(self._cached_free)
        if not total or total > free:
            grow = self.grow  # (nothing to open, or too much: `grow` raises, with the equation)
            for rid, rows in openings:
                grow(rid, rows)
            return
        # The blocks in the order the `grow` calls would take them.
        taken = self._take_new(total)
        first_cached = len(taken)  # blocks past this one are evictions
        if total > first_cached:
            self._take(None, taken, total - first_cached)  # (no report: no taker named)
        # Mostly one block a request: appended, not a slice added. (Speed: replaying
        # the Mooncake trace under vllm with prefix caching, 159,816 entries in 12,219
        # calls, 70 ms of 2.9 s in this loop before; benchmarks/README.md,
        # "thirtieth steps", helper fd34.)
        at = 0
        for table, need in needs:
            if need == 1:
                table.append(taken[at])
                at += 1
            else:
                end = at + need
                table += taken[at:end]
                at = end
        self.held += total
        if self.held > self.peak_held:
            self.peak_held = self.held
