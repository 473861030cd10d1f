"""Letting go of blocks: the part of `BlockAllocator` that releases a request's
table, drains what nobody holds any more (A4) and gives blocks back to the free
pools.

Blocks are dereferenced tail first; a block somebody else owns or pins stays
held. Freed blocks drain for `release_delay` clock steps (the drain queue:
(expiry tick, blocks, keyed blocks, their keys), the last two for a cache
whose keys travel with the blocks) and are then given back: the cache keeps
the keyed ones, the plain ones go on the free stack. The methods below are
`BlockAllocator`'s (a base class of it) and use the attributes its
`__init__` sets.
"""
from __future__ import annotations

from itertools import compress, filterfalse
from operator import not_

from ..records.errors import InvariantError
from .sharing import move_owners
from .tail_first import tail_first

__all__ = ["Freeing", "leading_shared"]


def leading_shared(reversed_table: list[int], extra: dict[int, int]) -> int:
    """How many leading blocks of a released table (given reversed: they are the
    last ones) are all the blocks with extra owners (`extra`'s keys), or 0 when
    `extra` names some other block too (then the caller intersects the table).

    Why it is exact: a table never holds a block twice (keys are chained, so a
    key fixes a block's position, and a block joins a table by growth, which
    hands out blocks nobody holds, or at the position of its key, by a
    look-up's hits or an adoption); so when the table's first `len(extra)`
    blocks all have extra owners, they are every such block, and no other
    block of the table has any.

    Speed: a look-up's hits are a table's leading blocks, so under SGLang's
    radix tree (whose tables carry no keys: every freed block passes here)
    this is the shape of 11,939 of the 12,044 tables freed replaying the
    Mooncake trace (774 blocks each, 33 shared): about 34 dictionary probes
    instead of intersecting and filtering all 774 (`free_request` was 6.2% of
    that replay's profile, its own time)."""
    end = len(reversed_table)
    want = len(extra)
    if want > end:
        return 0
    lead = 0
    while lead < want and reversed_table[end - 1 - lead] in extra:
        lead += 1
    return lead if lead == want else 0


class Freeing:
    """`BlockAllocator`'s release of tables, drain queue and free pools."""

    def free_request(self, rid: str, now: int, delay: int, rows: int = 0,
                     ended: bool = False) -> int:
        """Release `rid`'s credit and block references; return the blocks sent to drain.

        Blocks are dereferenced tail first; a block nobody references or pins
        any more drains until `now + delay` (A4). (`rows`, the request's rows
        written, is for an allocator that counts blocks, kv/block_counts.py: a
        table of ids knows its blocks.) `ended`: the request ended (it will not
        look its keys up again: told to the cache's `release`; not with pins,
        whose orphans keep a key each).
        """
        if not self._shared and not delay:
            return self.free_plain(rid)
        self.release_credit(rid)
        self.step_evictions.pop(rid, None)
        self.step_growth.pop(rid, None)
        table = self._tables.pop(rid, None)
        count, carried = self._release(rid, ended and not self._pins)
        if not table:
            return 0
        table.reverse()  # tail first
        # The table's first `count` blocks carry their keys (the cache says so),
        # the last ones of the reversed table.
        if count:
            split = len(table) - count
            if split:
                # The few plain tail blocks are cut off the front: the keyed ones,
                # most of the table, stay in its list (no copy of them).
                keyed = table
                table = keyed[:split]
                del keyed[:split]
            else:  # every block carries its key (the common case): no copy
                keyed, table = table, []
            if not delay:
                # Straight back to the free pools, not merged with other tables in
                # the drain queue: the table's own keys as runs going down (no
                # int object per key: `tail_first`), each found exactly (the
                # cache sets and clears their flags without comparing the blocks).
                keys = tail_first(carried, count)
            else:
                keys = carried.keys[count - 1::-1]
        else:
            keyed = keys = ()
        extra = self._extra
        if extra:
            if table:  # (none plain in vLLM's usual release: every block keyed)
                lead = leading_shared(table, extra)
                if lead:  # the table's first `lead` blocks are every shared block
                    move_owners(extra, table[-lead:], -1)  # (one count, as one run)
                    del table[-lead:]  # (the reversed table is this call's own)
                else:
                    shared = extra.keys() & table  # blocks somebody else owns too
                    if shared:
                        move_owners(extra, list(shared), -1)
                        table = list(filterfalse(shared.__contains__, table))
            lead = self._cache.owned_lead(keyed, extra) if keyed else 0
            if lead:
                # The blocks others own too are the table's first `lead` (hits
                # are prefixes: `VllmCache.owned_lead`), the tail of `keyed`:
                # their owners dropped from a slice, then cut off in one.
                cut = len(keyed) - lead
                move_owners(extra, keyed[cut:], -1)  # (one count, as one run)
                del keyed[cut:]  # (both are this call's own)
                del keys[cut:]
            elif lead is None:  # (the cache cannot tell: a duplicate key cached)
                shared = self._cache.owned_elsewhere(keyed, extra)
                if shared:
                    move_owners(extra, list(shared), -1)
                    cut = len(keyed) - len(shared)
                    if shared.issuperset(keyed[cut:]):  # (still the usual shape)
                        del keyed[cut:]
                        del keys[cut:]
                    else:
                        keep = list(map(not_, map(shared.__contains__, keyed)))
                        keyed = list(compress(keyed, keep))
                        keys = list(compress(keys, keep))
        pins = self._pins
        if pins:
            pinned = pins.keys() & table  # owned by nobody now, but pinned: held
            if keyed:
                pinned_keyed = pins.keys() & keyed
                if pinned_keyed:
                    keep = [block not in pinned_keyed for block in keyed]
                    self._cache.keep_orphan_keys(
                        (block, key) for block, key, kept in zip(keyed, keys, keep) if not kept)
                    keyed = list(compress(keyed, keep))
                    keys = list(compress(keys, keep))
                    self._orphans.update(pinned_keyed)
            if pinned:
                self._orphans.update(pinned)
                table = list(filterfalse(pinned.__contains__, table))
        sent = len(table) + len(keyed)  # (counted first: the cache may cut `keyed`)
        self._drain_blocks(table, now, delay, keyed, keys)
        return sent

    @property
    def frees_plainly(self) -> bool:
        """Whether no block was ever shared or pinned (no prefix cache, `share` or
        `pin`): with no release delay, a table freed goes straight back to the free
        stack (`free_plain`), as `free_request` itself decides."""
        return not self._shared

    def free_plain(self, rid: str, rows: int = 0) -> int:
        """`free_request` where nothing is shared or pinned and nothing drains (no
        prefix cache, no release delay): the credit dropped, and the table's blocks
        straight onto the free stack. What the general path does there, in one
        call: `release_credit`, the cache's `release` (nothing carried), the table
        reversed (tail first), `_drain_blocks`, `_give` and the cache's `give_back`
        (every block plain), whose stack takes the reversed table reversed again,
        that is the table in row order. Speed: five calls fewer for every request
        that ends (see benchmarks/README.md, "seventeenth steps ... mil13").
        (`rows`: as for `free_request`.)"""
        self.reserved -= self._credits.pop(rid, 0)
        self.granted -= self._grown.pop(rid, 0)
        self.step_evictions.pop(rid, None)
        self.step_growth.pop(rid, None)
        table = self._tables.pop(rid, None)
        if not table:
            return 0
        sent = len(table)
        self.held -= sent
        self._free.extend(table)
        return sent

    def _give(self, blocks: list[int], keyed=(), keys=()) -> None:
        """Return blocks to the free pools, in the order they were freed.

        Plain blocks go on top of a stack, as vLLM prepends them to its free
        queue: the latest batch freed is reused first and, within a batch, the
        block freed first (a request's tail). The cache keeps the blocks that
        have a key (`keyed` carry `keys`: see `PrefixCache.give_back`), in
        order, so a request's tail blocks are evicted before its prefix.
        """
        plain = self._give_back(blocks, keyed, keys)
        if plain:
            self._free.extend(reversed(plain))  # (above `_plain_mark`: see `sharing`)

    def _drain_blocks(self, blocks: list[int], now: int, delay: int,
                      keyed=(), keys=()) -> None:
        """Move blocks nobody holds from held to draining, free at `now + delay`
        (`keyed`, with `keys`, as for `_give`).

        With no delay they are free at once, so a policy that preempts in the
        middle of a step can reuse the victim's blocks in that same step.
        """
        count = len(blocks) + len(keyed)
        if not count:
            return
        self.held -= count
        if delay == 0:
            self._give(blocks, keyed, keys)
            return
        self.draining += count
        if self._shared:
            self._draining_set.update(blocks)
            self._draining_set.update(keyed)
        expiry = now + delay
        drain = self._drain
        if drain and drain[-1][0] == expiry:
            last = drain[-1]
            last[1].extend(blocks)
            last[2].extend(keyed)
            last[3].extend(keys)
        elif drain and drain[-1][0] > expiry:
            raise InvariantError(f"drain expiry({expiry}) >= last expiry({drain[-1][0]}) is false")
        else:
            drain.append((expiry, blocks, keyed or [], keys or []))

    def release_expired(self, now: int) -> int:
        """Move every draining block whose delay has passed to the free pools."""
        released = 0
        drain = self._drain
        while drain and drain[0][0] <= now:
            _, blocks, keyed, keys = drain.popleft()
            if self._shared:
                self._draining_set.difference_update(blocks)
                self._draining_set.difference_update(keyed)
            self._give(blocks, keyed, keys)
            released += len(blocks) + len(keyed)
        self.draining -= released
        return released
