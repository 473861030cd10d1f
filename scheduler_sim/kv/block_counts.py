"""Blocks as counts: the allocator of a lone engine where no block id is ever read.

Which physical block a request holds matters only to something that reads
ids: a prefix cache (keys live on blocks, `Evicted` records name them), host
memory (loads and stores read tables), a fleet (transfers pin tables), a
state callback or the audit (they read tables), a policy from outside the
package (it may), vLLM's `most-blocks` victim rule (it asks for tables) and
a release delay (the drain queue keeps ids). Without all of them every
output depends on block counts alone: how many a request holds, how many are
held, granted, reserved and free. `BlockCounts` is the `BlockAllocator` the
engine builds then (`allocator_for` says when): a request's blocks are a count
from admission to end (`_tables[rid]` is an int), the pool a counter (`free`
is `num_blocks - held`), and the decode cohort's counted blocks
(kv/counted_blocks.py) an int, not a list of ids: no id is pushed or popped.
Every count, check and error is the general allocator's; asking for ids
(`table`, `share`, `pin`, a release delay, a cache) is an `InvariantError`.

Speed: replaying the Azure conversation trace under `continuous`, the general
allocator took 1,660,963 block ids (85.8 a request) off its free stack
(`grow` 19,377 times, `take_counted` 38,893 times), copied the cohort's into
tables (19,366 `give_counted`s) and pushed them all back (19,366
`free_plain`s); counted, the same calls move no id: 4.3% fewer instructions
on its first 2,000 requests (callgrind, whole process: 1.173e9 to 1.122e9;
4.5% under `vllm`, 7.3% on 20,000 generated requests) and 0.914 of the
paired CPU on the whole trace (0.921 under `vllm`, 0.879 on 100,000
generated requests): benchmarks/README.md, "nineteenth steps", dir20.
"""
from __future__ import annotations

from ..records.errors import InvariantError
from .allocator import BlockAllocator

__all__ = ["BlockCounts", "allocator_for"]


def allocator_for(options, release_delay: int, unwatched: bool) -> BlockAllocator:
    """The allocator of an engine with `options` and `release_delay` (in clock steps):
    a `BlockCounts` where no block id is read (`unwatched`: no state callback, no
    audit, not a fleet's replica, a policy of the package's; and no prefix cache,
    no host memory, no release delay, no `most-blocks` victim rule: see the module),
    else a `BlockAllocator`."""
    counts = (unwatched and not release_delay and not options.prefix_caching
              and not options.host and options.victim != "most-blocks")
    return (BlockCounts if counts else BlockAllocator)(options.num_blocks, options.block_size)


class BlockCounts(BlockAllocator):
    """`BlockAllocator` with each request's blocks a count and the pool a counter
    (see the module): `_tables` maps a request to the blocks it holds, `_counted`
    is the cohort's counted blocks, and `_free`, `_fresh` and `_ids` stay unused."""

    counts_blocks = True
    # (`Freeing.frees_plainly` is `not self._shared`, and nothing is ever shared
    # here: a class attribute, not a property's call at each end; measured in
    # benchmarks/README.md, "twenty-second steps", az22.)
    frees_plainly = True

    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self._counted = 0  # (an int here: blocks, not ids)

    def bind_cache(self, cache) -> None:
        raise InvariantError("a prefix cache reads block ids: the allocator counts blocks")

    def _no_ids(self, *args) -> None:
        raise InvariantError("block ids are not kept: the allocator counts blocks")

    table = share = pin = _no_ids

    def reclaimable(self, rid: str) -> int:
        return self._tables.get(rid, 0)  # (nothing shared or pinned: every block)

    # --- the pool, a counter -------------------------------------------------

    @property
    def free(self) -> int:
        return self.num_blocks - self.held

    @property
    def counted(self) -> int:
        return self._counted

    def fits_counted(self, blocks: int) -> bool:
        return blocks <= self.num_blocks - self.held

    def check(self) -> None:
        """`BlockAllocator.check`: with no drain queue and the pool a counter,
        `held + free == num_blocks` holds by construction; `held <= num_blocks`
        and the credit equations are checked."""
        if self.held > self.num_blocks:
            raise InvariantError(f"held({self.held}) <= num_blocks({self.num_blocks}) is false")
        if self.reserved > self.num_blocks:
            raise InvariantError(f"reserved({self.reserved}) + draining(0) "
                                 f"<= num_blocks({self.num_blocks}) is false")
        if self.held + self.reserved - self.granted > self.num_blocks:
            raise InvariantError(self._commit_equation() + " is false")

    def audit(self) -> None:
        """The full check: the counters agree with the tables' counts."""
        self.check()
        credits = sum(self._credits.values())
        if credits != self.reserved:
            raise InvariantError(f"sum of credits({credits}) == reserved({self.reserved}) is false")
        counted = self._counted if self.counted_credited else 0
        grown = sum(self._grown.values())
        if grown + counted != self.granted:
            raise InvariantError(f"sum of grown({grown}) + counted({counted}) == "
                                 f"granted({self.granted}) is false")
        tables = sum(self._tables.values())
        if tables + self._counted != self.held:
            raise InvariantError(f"sum of tables({tables}) + counted({self._counted}) == "
                                 f"held({self.held}) is false")

    # --- growth ----------------------------------------------------------------

    def blocks_to_grow(self, rid: str, rows: int) -> int:
        need = -(-rows // self.block_size) - self._tables.get(rid, 0)
        return need if need > 0 else 0

    def grow(self, rid: str, rows: int) -> int:
        """`BlockAllocator.grow`, by count."""
        tables = self._tables
        have = tables.get(rid, 0)
        need = -(-rows // self.block_size) - have
        if need <= 0:
            return 0
        free = self.num_blocks - self.held
        if need > free:
            raise self._short_of(f"request {rid!r}", need, free)
        credit = self._credits.get(rid)
        if credit is not None:
            grown = self._grown[rid] + need
            if grown > credit:
                raise InvariantError(
                    f"request {rid!r}: allocated({grown}) <= credit({credit}) is false")
            self._grown[rid] = grown
            self.granted += need
        tables[rid] = have + need
        held = self.held = self.held + need
        if held > self.peak_held:
            self.peak_held = held
        growth = self.step_growth
        growth[rid] = growth.get(rid, 0) + need
        return need

    open_block = grow  # (`BlockAllocator.open_block`: by count, `grow` is as short)

    def try_grow(self, rid: str, rows: int) -> bool:
        need = -(-rows // self.block_size) - self._tables.get(rid, 0)
        if need > 0 and need > self.num_blocks - self.held:
            return False
        self.grow(rid, rows)
        return True

    # --- the decode cohort's blocks (counted_blocks.py), by count ---------------

    def take_counted(self, blocks: int) -> None:
        """`CountedBlocks.take_counted`, by count."""
        if blocks <= 0:
            return
        held = self.held + blocks
        if held > self.num_blocks:
            raise self._short_of("the decode cohort", blocks, self.num_blocks - self.held)
        self._counted += blocks
        if self.counted_credited:
            self.granted += blocks
        self.held = held
        if held > self.peak_held:
            self.peak_held = held

    def give_counted(self, rid: str, rows: int) -> None:
        """`CountedBlocks.give_counted`, by count."""
        tables = self._tables
        have = tables.get(rid, 0)
        need = -(-rows // self.block_size) - have
        if need <= 0:
            return
        if need > self._counted:
            raise InvariantError(f"request {rid!r} needs {need} counted blocks: "
                                 f"counted({self._counted}) >= {need} is false")
        if self.counted_credited:
            self._charge_counted(rid, need)
        tables[rid] = have + need
        self._counted -= need

    # --- letting go --------------------------------------------------------------

    def free_request(self, rid: str, now: int, delay: int, rows: int = 0,
                     ended: bool = False) -> int:
        if delay:
            raise InvariantError("a release delay drains block ids: the allocator counts blocks")
        return self.free_plain(rid, rows)

    def free_plain(self, rid: str, rows: int = 0) -> int:
        """`Freeing.free_plain`, by count. A decode cohort's member that ended
        (fast/cohort.py's `complete`) was not given its counted blocks: with its
        `rows` written, what they would have covered beyond its count is taken
        from the counted blocks here, as `give_counted` would have, and freed
        with the rest. Speed: one call fewer a member that ends (`give_counted`:
        19,366 on the Azure conversation trace; benchmarks/README.md,
        "nineteenth steps", dir20)."""
        credit = self._credits.pop(rid, 0)
        self.reserved -= credit
        granted = self._grown.pop(rid, 0)
        self.step_evictions.pop(rid, None)
        self.step_growth.pop(rid, None)
        sent = self._tables.pop(rid, 0)
        if rows:
            owed = -(-rows // self.block_size) - sent
            if owed > 0:
                if owed > self._counted:
                    raise InvariantError(f"request {rid!r} needs {owed} counted blocks: "
                                         f"counted({self._counted}) >= {owed} is false")
                if self.counted_credited:
                    granted += owed
                    if granted > credit:
                        raise InvariantError(f"request {rid!r}: allocated({granted}) <= "
                                             f"credit({credit}) is false")
                self._counted -= owed
                sent += owed
        self.granted -= granted
        self.held -= sent
        return sent
