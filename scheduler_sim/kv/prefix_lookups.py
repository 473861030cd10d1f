"""The prefix cache as a policy sees it through the allocator (§8): the part of
`BlockAllocator` that looks up a request's cached leading blocks, counts the
free ones among them, and gives keys to the blocks written rows have filled.

Every question goes to the cache through the protocol methods the allocator
bound (`BlockAllocator._use`: `_find`, `_touch`, `_count_free`,
`_count_free_found`, `_register`, `_register_decoded`), so nothing here
knows which kind of cache it talks to, but for one thing: a request whose
registrations vLLM's cache would only count (its `unindexed`, bound as
`_own_keyed`) is counted here, without a call; what it adds is the allocator's own
knowledge: draining and orphaned blocks are not reusable, swapped blocks are
adopted into the table, and with host memory's write-through the prompt's
new keys are queued. The methods below are `BlockAllocator`'s (a base class
of it) and use the attributes its `__init__` and `_use` set.
"""
from __future__ import annotations

from .block_keys import BlockKeys

__all__ = ["PrefixLookups"]


class PrefixLookups:
    """`BlockAllocator`'s look-ups and registrations of prefix-cache keys."""

    def lookup(self, keys: BlockKeys, max_blocks: int) -> list[int]:
        """The longest run of leading blocks whose keys are cached and reusable.

        A block is reusable if somebody holds it or it is free in the cache;
        draining blocks are not. The cache records the use (a radix tree's
        stamps); `share` takes the blocks.

        An answer whose blocks were all held (`evictable` counted none free, and
        none was draining or a pinned orphan) is given again for the same keys
        and limit while the cache's `holds_found` says so (vLLM's: no key
        indexed since the answer was counted, by registration, a request's own
        keys or an heir, no duplicate cached, the last block H still held under
        its key) and nothing drains or is pinned. Why that is the answer again: a holder R of H holds
        it at H's position p (a key fixes its block's position), so R's keys to
        p are the request's; with no duplicate cached, R's blocks before p are
        each the one the index names for its key, and an index entry changes only
        by an eviction (of a free block: R holds these) or a new key (none). So
        every block is still held and indexed, the first key missing still is,
        and none is free. Speed: replaying the Mooncake trace under vllm, a head
        blocked for blocks was looked up again at every step (27,812 look-ups for
        12,031 admissions); 14,656 of the 15,781 repeats are answered so, and the
        trace runs 0.979x the instructions (benchmarks/README.md, "twenty-fourth
        steps", helper pc25).
        """
        kept = self._kept
        if (kept is not None and kept[0] is keys and kept[1] == max_blocks
                and not self._draining_set and not self._orphans
                and self._holds_found(keys, kept[2])):
            hits = self._again = kept[2][:]  # (none free: `evictable` answers 0)
        else:
            found = self._find(keys, max_blocks)
            self._asked = (max_blocks, len(found))
            hits = self._reusable(found)
        if hits:
            self._touch(hits[-1])
        self._found, self._found_keys = hits, keys
        return hits

    def peek(self, keys: BlockKeys, max_blocks: int) -> int:
        """How many leading blocks `lookup` would find, changing nothing (a radix
        tree's recency is left as it was): what a router reads."""
        return len(self._reusable(self._find(keys, max_blocks)))

    def _reusable(self, hits: list[int]) -> list[int]:
        """`hits` up to the first that nobody may reuse: keyed blocks are held,
        free in the cache, draining, or pinned with no owner (the last two are
        not reusable)."""
        if hits and (self._draining_set or self._orphans):
            for i, block in enumerate(hits):
                if block in self._draining_set or block in self._orphans:
                    del hits[i:]
                    break
        return hits

    def evictable(self, blocks: list[int]) -> int:
        """How many of `blocks` are free in the cache (a hit on them uses a free block).
        The answer of the last `lookup` (the policies ask of the hit they just
        looked up) is counted by the keys it was found for."""
        if blocks is self._found:
            if blocks is self._again:
                return 0
            count = self._count_free_found(blocks, self._found_keys)
            limit, length = self._asked
            # Every one held (none free, none draining or pinned orphaned): kept, by
            # a kind that can tell when it no longer holds. The answer kept before
            # goes either way: `holds_found` speaks of the answer counted last.
            self._kept = ((self._found_keys, limit, blocks[:])
                          if not count and length == len(blocks)
                          and self._holds_found is not None else None)
            return count
        return self._count_free(blocks)

    # Keys of a request's own content (`block_keys.OWN_KEY`, its decodes' blocks)
    # are noted by vLLM's cache only as the request's `registered`, once the
    # request is in its `unindexed` (the table and the first block left so) and
    # no writer is tracked (`VllmCache.register`'s first branch: nothing else
    # happens there). The two methods below raise `registered` themselves for
    # such a request, the table read from `unindexed` (the request's own table:
    # the audit checks it), and call the cache only for any other; nor when no
    # block filled since the last registration (vLLM's `register` returns at
    # once then: the dispatch keys each prompt chunk and each request's end again).
    # Speed: replaying the Mooncake trace under vllm, most of the 244,401 calls of
    # `VllmCache.register` (143,421 from the fold, 100,980 from `schedule`) were
    # of this kind (benchmarks/README.md, "twenty-eighth steps", helper kvf30).

    def register_full_blocks(self, rid: str, keys: BlockKeys, rows: int) -> None:
        """Give keys to the blocks of `rid` that `rows` written rows have filled."""
        full = rows // self.block_size
        own = self._own_keyed
        if own is None or full > keys.registered:  # (vLLM's: nothing new, nothing to do)
            left = own.get(rid) if own else None
            if left is not None and self._report is None:  # (see above)
                table = left[0]
                keys.registered = full if full < len(table) else len(table)
            else:
                table = self._tables.get(rid, ())
                swaps = self._register(rid, keys, full if full < len(table) else len(table),
                                       table)
                if swaps:
                    self._adopt(table, swaps)
        if self.host is not None:
            self._queue_prompt_stores(keys)

    def register_decoded(self, rid: str, keys: BlockKeys, rows: int) -> None:
        """Give keys to the blocks that decoding filled (a cache may wait for the
        request to finish: SGLang's tree, so that a retracted request's outputs
        are not kept)."""
        full = rows // self.block_size
        if full <= keys.registered:
            return  # (no block filled since the last registration)
        own = self._own_keyed
        left = own.get(rid) if own else None
        if left is not None and self._report is None:  # (see above)
            table = left[0]
            keys.registered = full if full < len(table) else len(table)
            return
        table = self._tables.get(rid, ())
        swaps = self._register_decoded(rid, keys, full if full < len(table) else len(table),
                                       table)
        if swaps:
            self._adopt(table, swaps)

    def keys_counted(self) -> dict | None:
        """The requests (a mapping by id) whose decoded blocks' keys the cache only
        counts, vLLM's `unindexed`, as `register_decoded` raises their
        `registered` itself (see above); None where every registration is the
        cache's call (another kind, or a report to make). A folded stretch raises
        their counts itself (engine/fast/folding.py), once their tables cover the
        rows: `registered` is then the full blocks, as `register_decoded` sets it."""
        return self._own_keyed if self._report is None else None

    def register_decoded_each(self, filled: list[tuple[str, BlockKeys, int]]) -> None:
        """`register_decoded(rid, keys, rows)` for each of `filled`, in that order: a
        folded stretch's decodes that filled a block (engine/fast/folding.py). A
        request in vLLM's `unindexed` only has its `registered` raised, here, as
        `register_decoded` does it; any other is that call.

        Speed: replaying the Mooncake trace under vllm with prefix caching, folds
        made 143,421 `register_decoded` calls, nearly all for such requests
        (benchmarks/README.md, "twenty-ninth steps", helper fold31)."""
        own = self._own_keyed
        if not own or self._report is not None:
            register = self.register_decoded
            for rid, keys, rows in filled:
                register(rid, keys, rows)
            return
        size = self.block_size
        for rid, keys, rows in filled:
            left = own.get(rid)
            if left is None:
                self.register_decoded(rid, keys, rows)
            else:
                full = rows // size
                if full > keys.registered:
                    n = len(left[0])
                    keys.registered = full if full < n else n

    def _queue_prompt_stores(self, keys: BlockKeys) -> None:
        """With host memory's write-through on, queue the keys given to full blocks of
        the prompt and not written through yet. Blocks that hold outputs wait for
        their request's end or preemption (engine/host_moves.py), whether a dispatch
        or a folded stretch keyed them."""
        if self.host.write_through:
            self.host.pending += keys.unwritten(keys.prompt_tokens // self.block_size)
