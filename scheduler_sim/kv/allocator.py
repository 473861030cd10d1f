"""KV blocks and reservation credits: who holds what, and what is free (§5).

The allocator knows request ids and integers, never request objects. It keeps
three disjoint pools of physical blocks, `held + draining + free ==
num_blocks`, and, apart from them, reservation *credits*: blocks promised to
an admitted request for its whole future (A1, A2). A credit is not an
allocation: blocks leave the free list only when a dispatch writes rows into
them, so a later request can wait while free blocks exist (they are
promised).

Freed blocks drain for `release_delay` (in clock steps) before they are reusable (A4);
with no delay they are free at once.

A block may have several owners (a shared prefix) and may be pinned by an
in-flight transfer (A5, L5). It counts once, as held, while anybody
references or pins it; it drains only when the last owner has let go and
every pin has been acknowledged. So preempting a victim frees only what
nobody else holds, and admission always sees what can really be reused.
Under reservation a credit covers only the blocks a request allocates
itself, never the shared blocks it found in the prefix cache: admission
therefore asks `held + draining + unused credit + needed <= num_blocks`,
which without sharing is `reserved + draining + needed <= num_blocks`.

With prefix caching, free blocks are of two kinds: plain ones, reused first
(last freed, first reused), and blocks that keep a cache key, in the LRU
queue of `prefix_cache.PrefixCache`, handed out only when no plain block is
left. Both count as free.

Which key a block carries is kept one of two ways. In vLLM's cache
(`duplicates`, no `tree`) a request's keyed blocks are always the leading
ones of its table, the first `registered` of its `BlockKeys`, so the
allocator remembers that object per request instead of a key per block; a
freed keyed block carries its key along, through the drain queue or as a
pinned orphan, into the LRU queue. Other modes leave a later block unkeyed
when its key is cached already (or, in SGLang's tree, swap it for the
cached one), so they name each block's key in `PrefixCache.key_of`.

Check-then-act pairs: `can_reserve` / `reserve`, `can_allocate` / `grow`.
`try_grow` is all-or-nothing: a reconstruction that cannot get every block
it needs takes none (L4).
"""
from __future__ import annotations

import threading
import weakref
from collections import deque
from itertools import compress, filterfalse, islice, repeat
from operator import not_

from ..records.errors import InvariantError
from .prefix_cache import BlockKeys, BlockSet, PrefixCache

__all__ = ["BlockAllocator", "blocks_for", "BLOCK_BYTES", "MAX_REQUEST_BLOCKS"]


# About what the allocator keeps per block in use (its table entry and an int),
# and the most blocks one request may hold: a request that could need more (and
# fits in the pool) is refused before the replay, with this arithmetic. (Arrays
# for the tables would take 16 bytes a block, but cost every replay 3% more
# time.)
BLOCK_BYTES = 47
MAX_REQUEST_BLOCKS = 2 ** 22


def _drop_one(counts: dict[int, int], block: int) -> int:
    """One fewer of `block` in `counts` (extra owners, pins), forgotten at zero;
    return what is left."""
    left = counts[block] - 1
    if left:
        counts[block] = left
    else:
        del counts[block]
    return left


class _BlockIds(list):
    """The block numbers handed out so far, as int objects (a list that can be
    referred to weakly)."""

    __slots__ = ("__weakref__",)


_current_ids = weakref.ref(_BlockIds())  # dead at once: the first allocator makes one
# Held while the shared list grows: allocators may run in threads (a sweep on a
# thread pool), and two growing it at once would number blocks twice.
_ids_growing = threading.Lock()


def _block_ids() -> _BlockIds:
    """The int objects of block numbers, shared by every allocator alive now.

    Block numbers above 256 are objects of 28 bytes each; every allocator
    takes its never-used ones from this one list, so that the replicas of a
    fleet, each of which ends up holding every number of its pool in its
    tables, free lists and prefix cache, share one object per number rather
    than one per replica. It grows to the most blocks any allocator has used
    and lives as long as any allocator does."""
    global _current_ids
    ids = _current_ids()
    if ids is None:
        ids = _BlockIds()
        _current_ids = weakref.ref(ids)
    return ids


def blocks_for(rows: int, block_size: int) -> int:
    """Blocks needed to hold `rows` token rows: ceil(rows / block_size)."""
    return -(-rows // block_size)


class BlockAllocator:
    """Physical blocks (held, draining, free) and reservation credits, by request id."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False,
                 compact: bool = False) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Plain free blocks that have been used before (a stack), and the next
        # never-used block id: so a pool of a billion blocks costs nothing until
        # its blocks are used, and unused ids are handed out lowest first.
        self._free: list[int] = []
        self._fresh = 0
        self._ids = _block_ids()  # never-used ids are taken from here (shared objects)
        # `compact` (a replica of a fleet): the prefix cache spends some time to
        # take less memory (`PrefixCache`: its queue's set as a `BlockSet`, its
        # index fitted to its size).
        self.cache = PrefixCache(compact) if prefix_caching else None
        # A block in a table has one owner, plus `_extra[block]` more when it is
        # shared; `_pins[block]` pins when pinned; `_orphans` are pinned blocks
        # nobody owns any more (held until unpinned). Blocks neither shared nor
        # pinned cost nothing here, so blocks come and go in whole slices.
        self._extra: dict[int, int] = {}
        self._pins: dict[int, int] = {}
        self._orphans: set[int] = set()
        # True once blocks may be shared or pinned (prefix caching, `share`,
        # `pin`): the plain free and draining blocks are then also kept as sets,
        # to tell a held block from one nobody holds.
        self._shared = prefix_caching
        self._plain_set: set[int] = set()
        self._draining_set: set[int] = set()
        self._pin_sets: dict[int, list[int]] = {}
        self._next_pin = 0
        self._tables: dict[str, list[int]] = {}
        self._credits: dict[str, int] = {}
        self._grown: dict[str, int] = {}   # blocks a credited request allocated itself
        # (expiry tick, blocks, keyed blocks, their keys): the last two only in
        # vLLM's cache, where the keys of blocks nobody holds travel with them.
        self._drain: deque[tuple[int, list[int], list[int], list]] = deque()
        # vLLM's cache: the BlockKeys of each request whose table starts with
        # keyed blocks (the first `registered` of them, each with its key), and
        # the keys of pinned orphans that carry one.
        self._runs: dict[str, BlockKeys] = {}
        self._orphan_keys: dict[int, bytes] = {}
        # vLLM's cache: the position in its tables of each block given extra
        # owners by `share` (a stale entry for a block that has none is harmless:
        # `share` rewrites it before the block has extra owners again).
        self._shared_at: dict[int, int] = {}
        self.held = 0
        self.draining = 0
        self.reserved = 0
        self.granted = 0  # sum of _grown: the part of the credits already allocated
        self.peak_reserved = 0
        self.peak_held = 0
        # Cached blocks each request evicted since the engine last cleared this:
        # lets a snapshot show the pool as it was before the step allocated.
        self.step_evictions: dict[str, int] = {}
        self.step_growth: dict[str, int] = {}
        self._on_evict = None  # (taker, writer, block number) -> None, when tracked

    # --- views ----------------------------------------------------------------

    @property
    def free(self) -> int:
        """Blocks that can be handed out right now (cached ones included)."""
        cache = self.cache
        return (len(self._free) + self.num_blocks - self._fresh
                + (len(cache.lru) if cache is not None else 0))

    @property
    def cached_free(self) -> int:
        """Free blocks that still carry a cache key (evicted only when needed)."""
        return len(self.cache.lru) if self.cache is not None else 0

    def table(self, rid: str) -> list[int]:
        """The block ids a request holds, in row order (empty if none)."""
        return list(self._tables.get(rid, ()))

    def credit(self, rid: str) -> int:
        """The credit (in blocks) a request holds, 0 if none."""
        return self._credits.get(rid, 0)

    def next_expiry(self) -> int | None:
        """The tick at which the oldest draining blocks become free, if any drain."""
        return self._drain[0][0] if self._drain else None

    def track_evictions(self, report) -> None:
        """Call `report(taker id, writer id, block number)` whenever a cached block is
        handed out again (prefix caching only)."""
        if self.cache is not None:
            self.cache.writers = {}
            self._on_evict = report

    # --- credits (A1, A2) -----------------------------------------------------

    def committed(self) -> int:
        """Blocks spoken for: held or draining now, or promised by unused credit."""
        return self.held + self.draining + self.reserved - self.granted

    def can_reserve(self, blocks: int) -> bool:
        """True if a credit of `blocks` more still fits in num_blocks (A3)."""
        return self.committed() + blocks <= self.num_blocks

    def reserve(self, rid: str, blocks: int) -> None:
        """Give request `rid` a credit of `blocks` (call `can_reserve` first)."""
        if rid in self._credits:
            raise InvariantError(f"request {rid!r} already holds a credit of "
                                 f"{self._credits[rid]} blocks")
        self._credits[rid] = blocks
        self._grown[rid] = 0
        self.reserved += blocks
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        if self.committed() > self.num_blocks:
            raise InvariantError(self._commit_equation() + " is false")

    def release_credit(self, rid: str) -> int:
        """Drop whatever credit `rid` holds; return its size."""
        blocks = self._credits.pop(rid, 0)
        self.reserved -= blocks
        self.granted -= self._grown.pop(rid, 0)
        return blocks

    # --- physical blocks --------------------------------------------------------

    def can_allocate(self, blocks: int) -> bool:
        """True if `blocks` free blocks exist now."""
        return blocks <= self.free

    def blocks_to_grow(self, rid: str, rows: int) -> int:
        """New blocks request `rid` needs so that its table covers `rows` rows."""
        have = len(self._tables.get(rid, ()))
        need = -(-rows // self.block_size)
        return need - have if need > have else 0

    def grow(self, rid: str, rows: int) -> int:
        """Allocate blocks so that `rid`'s table covers `rows` rows; return how many.

        Under reservation the blocks it allocates may never exceed its credit
        (A3); running out of free blocks here is a bug of the policy that asked.
        """
        table = self._tables.get(rid)
        if table is None:
            table = self._tables[rid] = []
        need = -(-rows // self.block_size) - len(table)
        if need <= 0:
            return 0
        free = self.free
        if need > free:
            raise InvariantError(
                f"request {rid!r} needs {need} new blocks but free({free}) < {need}: "
                f"held({self.held}) + draining({self.draining}) + free({free}) "
                f"== num_blocks({self.num_blocks})")
        credit = self._credits.get(rid)
        if credit is not None:
            grown = self._grown[rid] + need
            if grown > credit:
                raise InvariantError(
                    f"request {rid!r}: allocated({grown}) <= credit({credit}) is false")
            self._grown[rid] = grown
            self.granted += need
        plain = self._free
        if need == 1 and plain and not self._shared:  # a decode opening a block
            table.append(plain.pop())
        else:
            # Plain blocks from the top of the stack, then never-used ids (lowest
            # first), then cached blocks, evicted.
            reuse = need if need <= len(plain) else len(plain)
            if reuse:
                taken = plain[-reuse:]
                del plain[-reuse:]
                taken.reverse()
                table.extend(taken)
                if self._shared:
                    self._plain_set.difference_update(taken)
            rest = need - reuse
            if rest:
                fresh = self.num_blocks - self._fresh
                if fresh > rest:
                    fresh = rest
                if fresh:
                    start = self._fresh
                    end = self._fresh = start + fresh
                    ids = self._ids
                    if end > len(ids):
                        with _ids_growing:
                            if end > len(ids):
                                ids.extend(range(len(ids), end))
                    table.extend(ids[start:end])
                if rest > fresh:
                    evicted = (self._evict_lru(rid, table, rest - fresh) if not self.cache._tree
                               else self._evict_nodes(rid, table, rest - fresh))
                    self.step_evictions[rid] = self.step_evictions.get(rid, 0) + evicted
        self.held += need
        if self.held > self.peak_held:
            self.peak_held = self.held
        self.step_growth[rid] = self.step_growth.get(rid, 0) + need
        return need

    def open_block(self, rid: str, rows: int) -> int:
        """`grow(rid, rows)` for a decode whose row `rows - 1` starts a block: the
        common case, one plain block for an unshared table, inline; anything else
        through `grow`."""
        table = self._tables.get(rid)
        if table is not None and len(table) * self.block_size >= rows:
            return 0  # (the policy grew it already)
        plain = self._free
        if (self._shared or not plain or table is None
                or len(table) * self.block_size + 1 != rows):
            return self.grow(rid, rows)
        credit = self._credits.get(rid)
        if credit is not None:
            grown = self._grown[rid] + 1
            if grown > credit:
                return self.grow(rid, rows)  # raises, with the equation
            self._grown[rid] = grown
            self.granted += 1
        table.append(plain.pop())
        held = self.held = self.held + 1
        if held > self.peak_held:
            self.peak_held = held
        growth = self.step_growth
        growth[rid] = growth.get(rid, 0) + 1
        return 1

    def _evict_lru(self, rid: str, table: list[int], count: int) -> int:
        """Take the `count` least recently freed cached blocks for `rid`, forgetting
        their keys (PrefixCache.evict, for a run of blocks at once)."""
        cache = self.cache
        lru = cache.lru
        if cache.runs is not None and count == 1 and self._on_evict is None:
            # vLLM's cache, one block (a decode opening a block): inline.
            block, key = cache.pop_one()
            index = cache.index
            if index[key] == block and key not in cache.others:
                del index[key]
            else:
                cache.forget_key(block, key)
            table.append(block)
            return 1
        if cache.runs is not None:  # vLLM's cache (never a tree here): the queue in runs
            taken, keys = cache.pop_oldest(count)
        else:
            if count == len(lru):
                taken = list(lru)
                lru.clear()
            else:
                taken = list(islice(lru, count))
                deque(map(lru.__delitem__, taken), 0)
            keys = list(map(cache.key_of.pop, taken))
        index = cache.index
        others = cache.others
        if not others:  # one block per key: each is its key's index entry
            deque(map(index.__delitem__, keys), 0)
        else:
            for block, key in zip(taken, keys):
                if index[key] == block and key not in others:
                    del index[key]
                else:
                    cache.forget_key(block, key)
        table.extend(taken)
        if self._on_evict is not None:
            for block in taken:
                writer = cache.writer(block)
                if writer is not None:
                    self._on_evict(rid, writer[0], writer[1])
        return count

    def _evict_nodes(self, rid: str, table: list[int], count: int) -> int:
        """Take `count` blocks by evicting whole cached nodes of the radix tree; the
        rest of a node evicted becomes plain free blocks, taken next. Returns the
        evictions (one per node evicted)."""
        cache = self.cache
        plain = self._free
        plain_set = self._plain_set
        evicted = 0
        for _ in range(count):
            if plain:
                block = plain.pop()
                plain_set.discard(block)
            else:
                gone = cache.evict()
                block = gone[0]
                rest = gone[1:]
                plain.extend(reversed(rest))
                plain_set.update(rest)
                evicted += 1
                if self._on_evict is not None:
                    writer = cache.writer(block)
                    if writer is not None:
                        self._on_evict(rid, writer[0], writer[1])
            table.append(block)
        return evicted

    def evict_until(self, blocks: int) -> int:
        """Evict cached free blocks until `blocks` free blocks carry no key, or
        none is cached; return how many lost their key. (SGLang does this after
        a retraction, ahead of need; nobody takes the blocks yet, so no eviction
        is reported.)"""
        cache = self.cache
        if cache is None:
            return 0
        plain = self._free
        lru = cache.lru
        gone_total = 0
        while lru and len(plain) + self.num_blocks - self._fresh < blocks:
            gone = cache.evict()
            for block in gone:
                cache.writer(block)
            plain.extend(reversed(gone))
            self._plain_set.update(gone)
            gone_total += len(gone)
        return gone_total

    def try_grow(self, rid: str, rows: int) -> bool:
        """All-or-nothing `grow`: allocate every block needed for `rows`, or none (L4)."""
        if not self.can_allocate(self.blocks_to_grow(rid, rows)):
            return False
        self.grow(rid, rows)
        return True

    def _become_shared(self) -> None:
        """From now on blocks may have several owners or pins: keep the plain free
        and draining blocks as sets too."""
        if not self._shared:
            self._shared = True
            self._plain_set = set(self._free)
            self._draining_set = {b for _, blocks, keyed, _ in self._drain
                                   for b in blocks + keyed}

    def _held(self, block: int) -> bool:
        """Whether somebody owns or pins `block` (shared mode)."""
        return (0 <= block < self._fresh and block not in self._plain_set
                and block not in self._draining_set
                and (self.cache is None or block not in self.cache.lru))

    def share(self, rid: str, blocks: list[int], keys: BlockKeys | None = None) -> None:
        """Append blocks found in the cache or held by others to `rid`'s table.

        Each gets one more owner; a cached free block leaves the LRU queue and
        is held again. In vLLM's cache a shared block's key stays known only
        through its owners, so there `blocks` must be what `lookup(keys, ...)`
        found for `rid`'s empty table: they become its first registered blocks.
        """
        self._become_shared()
        cache = self.cache
        at = None
        if cache is not None and cache.duplicates and not cache.tree and blocks:
            if keys is None or self._tables.get(rid):
                raise InvariantError(
                    f"request {rid!r} shares cached blocks without their keys, or "
                    "after blocks of its own (vLLM's cache keys a table's leading blocks)")
            keys.ensure(len(blocks))
            keys.registered = len(blocks)
            self._runs[rid] = keys
            at = self._shared_at
        extra = self._extra
        orphans = self._orphans
        lru = cache.lru if cache is not None else {}
        hit = cache.hit if cache is not None and cache.runs is not None else lru.__delitem__
        for i, block in enumerate(blocks):
            if block in lru:
                hit(block)
                self.held += 1
            elif block in orphans:
                orphans.remove(block)  # pinned, and owned again
                self._orphan_keys.pop(block, None)  # its new owner's keys name it
            elif self._held(block):
                extra[block] = extra.get(block, 0) + 1
                if at is not None:
                    at[block] = i
            elif 0 <= block < self._fresh:
                raise InvariantError(f"block {block} is shared by {rid!r} but "
                                     "nobody holds it and it is not cached")
            else:
                raise InvariantError(f"block {block} is shared by {rid!r} but was never "
                                     "allocated")
        if self.held > self.peak_held:
            self.peak_held = self.held
        self._tables.setdefault(rid, []).extend(blocks)

    def pin(self, blocks: list[int]) -> int:
        """Pin held blocks for an in-flight transfer; return the pin's handle.

        A pinned block stays held, even with no owner left, until `unpin`
        (the transfer's drain acknowledgement).
        """
        self._become_shared()
        pins = self._pins
        for block in blocks:
            if not self._held(block):
                raise InvariantError(f"block {block} is pinned but nobody holds it")
            pins[block] = pins.get(block, 0) + 1
        handle = self._next_pin
        self._next_pin += 1
        self._pin_sets[handle] = list(blocks)
        return handle

    def unpin(self, handle: int, now: int, delay: int) -> int:
        """Acknowledge a transfer's drain; blocks nobody holds any more start draining."""
        blocks = self._pin_sets.pop(handle)
        pins = self._pins
        orphan_keys = self._orphan_keys
        orphans = []
        keyed = []
        keys = []
        for block in blocks:
            if not _drop_one(pins, block):
                if block in self._orphans:
                    self._orphans.remove(block)
                    key = orphan_keys.pop(block, None)
                    if key is None:
                        orphans.append(block)
                    else:
                        keyed.append(block)
                        keys.append(key)
        self._drain_blocks(orphans, now, delay, keyed, keys)
        return len(orphans) + len(keyed)

    def free_request(self, rid: str, now: int, delay: int) -> int:
        """Release `rid`'s credit and block references; return the blocks sent to drain.

        Blocks are dereferenced tail first; a block nobody references or pins
        any more drains until `now + delay` (A4).
        """
        self.release_credit(rid)
        self.step_evictions.pop(rid, None)
        self.step_growth.pop(rid, None)
        table = self._tables.pop(rid, None)
        run = self._runs.pop(rid, None) if self._runs else None
        if not table:
            return 0
        table.reverse()  # tail first
        # vLLM's cache: the table's first `registered` blocks carry their keys,
        # the last ones of the reversed table.
        count = run.registered if run is not None else 0
        if count:
            split = len(table) - count
            keyed = table[split:]
            keys = run.keys[count - 1::-1]
            del table[split:]
        else:
            keyed = keys = ()
        extra = self._extra
        if extra:
            shared = extra.keys() & table  # blocks somebody else owns too
            if shared:
                for block in shared:
                    _drop_one(extra, block)
                table = list(filterfalse(shared.__contains__, table))
            if not keyed:
                shared = None
            elif len(extra) < len(keyed) and extra.keys() <= self._shared_at.keys():
                # vLLM's cache: a block with extra owners sits at the same position
                # in every table that holds it (its key fixes the position), noted
                # when it was shared; so look at those positions only.
                top = len(keyed) - 1
                at = self._shared_at
                shared = set()
                for block in extra:
                    i = top - at[block]
                    if i >= 0 and keyed[i] == block:
                        shared.add(block)
            else:
                shared = extra.keys() & keyed
            if shared:
                for block in shared:  # _drop_one, inline: often thousands
                    left = extra[block] - 1
                    if left:
                        extra[block] = left
                    else:
                        del extra[block]
                # Usually the blocks others own too are the table's leading ones
                # (hits are prefixes): the tail of `keyed`, cut off in one slice.
                cut = len(keyed) - len(shared)
                if shared.issuperset(islice(keyed, cut, None)):
                    keyed = keyed[:cut]
                    keys = keys[:cut]
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
                    self._orphan_keys.update(
                        (block, key) for block, key, kept in zip(keyed, keys, keep) if not kept)
                    keyed = list(compress(keyed, keep))
                    keys = list(compress(keys, keep))
                    self._orphans.update(pinned_keyed)
            if pinned:
                self._orphans.update(pinned)
                table = list(filterfalse(pinned.__contains__, table))
        self._drain_blocks(table, now, delay, keyed, keys)
        return len(table) + len(keyed)

    def _give(self, blocks: list[int], keyed=(), keys=()) -> None:
        """Return blocks to the free pools, in the order they were freed.

        Plain blocks go on top of a stack, as vLLM prepends them to its free
        queue: the latest batch freed is reused first and, within a batch, the
        block freed first (a request's tail). Cached blocks join the LRU tail
        in order, so a request's tail blocks are evicted before its prefix.
        In vLLM's cache `blocks` are plain and `keyed` carry `keys` (a list,
        kept as one run of the queue, so nobody may change it later); otherwise
        `key_of` tells which of `blocks` are cached.
        """
        cache = self.cache
        if cache is None:
            self._free.extend(reversed(blocks))
            if self._shared:
                self._plain_set.update(blocks)
            return
        if cache.duplicates and not cache.tree:
            if keyed:
                cache.push_run(keyed, keys)
            if blocks:
                self._free.extend(reversed(blocks))
                self._plain_set.update(blocks)
            return
        keyed = list(map(cache.key_of.__contains__, blocks))
        if all(keyed):
            cache.lru.update(zip(blocks, repeat(None)))
            plain = ()
        else:
            cache.lru.update(zip(compress(blocks, keyed), repeat(None)))
            plain = list(compress(blocks, map(not_, keyed)))
        if cache.tree:
            cache.offer_blocks(blocks)
        if plain:
            self._free.extend(reversed(plain))
            self._plain_set.update(plain)

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

    # --- prefix caching (§8) -----------------------------------------------

    def lookup(self, keys: BlockKeys, max_blocks: int) -> list[int]:
        """The longest run of leading blocks whose keys are cached and reusable.

        A block is reusable if somebody holds it or it waits in the LRU queue;
        draining blocks are not. Read-only: `share` takes the blocks.
        """
        cache = self.cache
        if cache is None or max_blocks <= 0:
            return []
        # Keyed blocks are held, free in the LRU queue, draining, or pinned with no
        # owner (the last two are not reusable).
        # In growing slices, keys computed only as far as looked up, so that a long
        # prompt with a short hit costs little.
        get = cache.index.get
        hits: list[int] = []
        start, step = 0, 16
        while start < max_blocks:
            end = start + step if start + step < max_blocks else max_blocks
            found = list(map(get, keys.ensure(end)[start:end]))
            if None in found:
                hits += found[:found.index(None)]
                break
            hits += found
            start, step = end, step * 4
        unusable = self._draining_set or self._orphans
        if unusable:
            for i, block in enumerate(hits):
                if block in self._draining_set or block in self._orphans:
                    del hits[i:]
                    break
        if cache.tree and hits:
            cache.split_after(hits[-1])
            cache.touch_path(hits[-1])
        return hits

    def peek(self, keys: BlockKeys, max_blocks: int) -> int:
        """How many leading blocks `lookup` would find, changing nothing (a radix
        tree's recency is left as it was): what a router reads."""
        cache = self.cache
        if cache is None:
            return 0
        tree, cache.tree = cache.tree, False
        try:
            return len(self.lookup(keys, max_blocks))
        finally:
            cache.tree = tree

    def evictable(self, blocks: list[int]) -> int:
        """How many of `blocks` sit in the free LRU queue (a hit on them uses a free block)."""
        if self.cache is None:
            return 0
        lru = self.cache.lru
        if type(lru) is BlockSet:  # (its bytes read here: no call per block)
            flags = lru.flags
            end = len(flags)
            return sum(1 for b in blocks if b < end and flags[b])
        return sum(1 for b in blocks if b in lru)

    def register_full_blocks(self, rid: str, keys: BlockKeys, rows: int) -> None:
        """Give keys to the blocks of `rid` that `rows` written rows have filled."""
        cache = self.cache
        if cache is None:
            return
        registered = keys.registered
        self._register(cache, rid, keys, rows)
        if cache.compact:
            cache.added += keys.registered - registered
            cache.fit_index()

    def _register(self, cache: PrefixCache, rid: str, keys: BlockKeys, rows: int) -> None:
        """`register_full_blocks`, the index left to be fitted."""
        full = min(rows // self.block_size, len(self._tables.get(rid, ())))
        start = keys.registered
        if full <= start:
            return
        table = self._tables[rid]
        key_list = keys.ensure(full)
        index = cache.index
        key_of = cache.key_of
        writers = cache.writers
        if cache.runs is not None:  # duplicates, no tree
            # vLLM's cache: every block from `start` on is new to the cache (a
            # lookup shared the keyed ones before it) and takes its key, noted
            # only as this request's `keys.registered`. One look-up per key, in
            # C: a key not cached yet is indexed to this block (the common case,
            # all of them); a key cached already keeps its block, and this one is
            # a duplicate.
            self._runs[rid] = keys
            if full == start + 1 and writers is None:  # one block (a decode filled it)
                key = key_list[start]
                block = table[start]
                if index.setdefault(key, block) != block:
                    cache.others.setdefault(key, []).append(block)
                keys.registered = full
                return
            new_keys = key_list[start:full]
            new_blocks = table[start:full]
            found = list(map(index.setdefault, new_keys, new_blocks))
            if found != new_blocks:
                others = cache.others
                for key, block, cached in zip(new_keys, new_blocks, found):
                    if cached != block:
                        others.setdefault(key, []).append(block)
            if writers is not None:
                for i in range(start, full):
                    writers[table[i]] = (rid, i)
            keys.registered = full
            return
        duplicates = cache.duplicates
        tree = cache.tree
        if not tree and writers is None:
            # One look-up per key, in C: a key not cached yet is indexed to this
            # request's block (the common case, all of them); a key cached already
            # keeps its block, and this one is left unkeyed.
            new_keys = key_list[start:full]
            new_blocks = table[start:full]
            found = list(map(index.setdefault, new_keys, new_blocks))
            if found == new_blocks:
                key_of.update(zip(new_blocks, new_keys))
            else:
                for key, block, cached in zip(new_keys, new_blocks, found):
                    if cached == block:
                        key_of[block] = key
            keys.registered = full
            return
        new_blocks = []
        first_new = None
        for i in range(start, full):
            key = key_list[i]
            if key not in index:
                block = table[i]
                index[key] = block
                key_of[block] = key
                new_blocks.append(block)
                if first_new is None:
                    first_new = i
                if writers is not None:
                    writers[block] = (rid, i)
            elif tree and table[i] not in key_of:
                self._adopt(table, i, index[key])
            elif duplicates and table[i] not in key_of:
                block = table[i]
                cache.others.setdefault(key, []).append(block)
                key_of[block] = key
                if writers is not None:
                    writers[block] = (rid, i)
        if tree:
            if new_blocks:
                # One leaf for the run, cut where the prompt ends: SGLang splits
                # a request's insert there so that its outputs go first.
                parent = index.get(key_list[first_new - 1]) if first_new else None
                cut = keys.prompt_tokens // self.block_size - first_new
                if 0 < cut < len(new_blocks):
                    cache.add_run(new_blocks[:cut], parent)
                    parent, new_blocks = new_blocks[cut - 1], new_blocks[cut:]
                cache.add_run(new_blocks, parent)
            last = index.get(key_list[full - 1])
            if last is not None:
                cache.split_after(last)  # the run may end inside a cached node
                cache.touch_path(last)
        keys.registered = full

    def register_decoded(self, rid: str, keys: BlockKeys, rows: int) -> None:
        """Give keys to the blocks that decoding filled, except in SGLang's tree
        (`tree` mode), which takes decoded tokens only when the request finishes
        (`register_full_blocks` then): a retracted request's outputs are not kept."""
        cache = self.cache
        if cache is None or cache.tree or rows // self.block_size <= keys.registered:
            return  # (the last: no block filled since the last registration)
        self.register_full_blocks(rid, keys, rows)

    def _adopt(self, table: list[int], i: int, cached: int) -> None:
        """SGLang's insert keeps one copy of a run: a request that wrote a block
        the cache already holds (another request computed it in the same step)
        takes the cached block, and its own copy is freed."""
        lru = self.cache.lru
        if cached in lru:
            del lru[cached]
            self.held += 1
        elif cached in self._draining_set or cached in self._orphans:
            return  # not reusable: keep the request's own copy
        else:
            self._extra[cached] = self._extra.get(cached, 0) + 1
        own = table[i]
        table[i] = cached
        extra = self._extra
        if own in extra:
            _drop_one(extra, own)
        elif own in self._pins:
            self._orphans.add(own)
        else:
            self.held -= 1
            self._free.append(own)
            self._plain_set.add(own)

    # --- invariants (A3) --------------------------------------------------------

    def _commit_equation(self) -> str:
        return (f"held({self.held}) + draining({self.draining}) + unused credit"
                f"({self.reserved - self.granted}) <= num_blocks({self.num_blocks})")

    def check(self) -> None:
        """The O(1) conservation check run at every boundary (A3)."""
        cache = self.cache
        free = (len(self._free) + self.num_blocks - self._fresh
                + (len(cache.lru) if cache is not None else 0))
        if self.held + self.draining + free != self.num_blocks:
            raise InvariantError(
                f"held({self.held}) + draining({self.draining}) + free({free}) "
                f"== num_blocks({self.num_blocks}) is false")
        if self.reserved + self.draining > self.num_blocks:
            raise InvariantError(f"reserved({self.reserved}) + draining({self.draining}) "
                                 f"<= num_blocks({self.num_blocks}) is false")
        if self.held + self.draining + self.reserved - self.granted > self.num_blocks:
            raise InvariantError(self._commit_equation() + " is false")

    def audit(self) -> None:
        """The full O(blocks) check used by tests: counters agree with the tables."""
        self.check()
        credits = sum(self._credits.values())
        if credits != self.reserved:
            raise InvariantError(f"sum of credits({credits}) == reserved({self.reserved}) is false")
        grown = sum(self._grown.values())
        if grown != self.granted:
            raise InvariantError(f"sum of grown({grown}) == granted({self.granted}) is false")
        referenced = {b for table in self._tables.values() for b in table}
        pinned = {b for blocks in self._pin_sets.values() for b in blocks}
        if len(referenced | pinned) != self.held:
            raise InvariantError(
                f"referenced or pinned blocks({len(referenced | pinned)}) == "
                f"held({self.held}) is false")
        for block in referenced:
            owners = sum(t.count(block) for t in self._tables.values())
            if owners != 1 + self._extra.get(block, 0):
                raise InvariantError(f"block {block}: owners({owners}) == "
                                     f"1 + extra({self._extra.get(block, 0)}) is false")
        if any(b not in referenced for b in self._extra):
            raise InvariantError("a block with extra owners is in no table")
        pin_counts: dict[int, int] = {}
        for blocks in self._pin_sets.values():
            for b in blocks:
                pin_counts[b] = pin_counts.get(b, 0) + 1
        if pin_counts != self._pins:
            raise InvariantError(f"pins({self._pins}) == pins of the handles({pin_counts}) "
                                 "is false")
        if self._orphans != set(pinned) - referenced:
            raise InvariantError(f"orphans({sorted(self._orphans)}) == pinned blocks in no "
                                 f"table({sorted(set(pinned) - referenced)}) is false")
        if self._shared and (self._plain_set != set(self._free) or self._draining_set != {
                b for _, blocks, keyed, _ in self._drain for b in blocks + keyed}):
            raise InvariantError("the plain free and draining sets disagree with their queues")
        for rid, credit in self._credits.items():
            if self._grown[rid] > credit:
                raise InvariantError(
                    f"request {rid!r}: allocated({self._grown[rid]}) <= credit({credit}) is false")
        draining = sum(len(b) + len(k) for _, b, k, _ in self._drain)
        if draining != self.draining:
            raise InvariantError(f"drain queue({draining}) == draining({self.draining}) is false")
        free = set(self._free) | (set(self.cache.lru) if self.cache is not None else set())
        if len(free) + self.num_blocks - self._fresh != self.free or \
                any(b >= self._fresh for b in free):
            raise InvariantError(f"distinct free blocks({len(free)}) + never used "
                                 f"({self.num_blocks - self._fresh}) == free({self.free}) is false")
        if free & (referenced | pinned):
            raise InvariantError("a free block is still referenced or pinned")
        if self.cache is not None:
            cache = self.cache
            key_of = cache.key_of
            if cache.duplicates and not cache.tree:
                try:
                    in_runs = cache.runs_order()
                except ValueError as e:
                    raise InvariantError(str(e)) from None
                if len(in_runs) != len(cache.lru) or set(in_runs) != cache.lru:
                    raise InvariantError("the LRU queue's runs disagree with its blocks")
                key_of = self._keys_in_runs()
                if cache.key_of:
                    raise InvariantError("vLLM's cache names block keys in key_of")
                if len(key_of) != len(cache.index) + sum(map(len, cache.others.values())):
                    raise InvariantError(
                        f"keyed blocks({len(key_of)}) == indexed blocks and duplicates"
                        f"({len(cache.index) + sum(map(len, cache.others.values()))}) is false")
            elif any(key is not None for key in cache.lru.values()) or self._runs \
                    or self._orphan_keys or any(k for _, _, k, _ in self._drain):
                raise InvariantError("block keys kept outside key_of out of vLLM's cache")
            for key, block in cache.index.items():
                if key_of.get(block) != key:
                    raise InvariantError(f"cache index and block keys disagree on block {block}")
            for key, blocks in cache.others.items():
                if key not in cache.index or any(key_of.get(b) != key for b in blocks):
                    raise InvariantError(f"cache duplicates and block keys disagree on key "
                                         f"{key!r}")

    def _keys_in_runs(self) -> dict:
        """vLLM's cache, for `audit`: the key of every keyed block, gathered from
        the tables' leading blocks, the drain queue, the pinned orphans and the
        LRU queue, each block with one key wherever it is named."""
        key_of: dict = {}

        def note(block, key, where):
            if key_of.setdefault(block, key) != key:
                raise InvariantError(f"block {block} has two keys ({where})")

        for rid, run in self._runs.items():
            table = self._tables.get(rid)
            if table is None or not run.registered <= min(len(table), len(run.keys)):
                raise InvariantError(f"request {rid!r}: registered({run.registered}) <= "
                                     f"its blocks and keys is false")
            for block, key in zip(table, run.keys[:run.registered]):
                note(block, key, f"in the table of {rid!r}")
        for rid, table in self._tables.items():
            run = self._runs.get(rid)
            if any(b in key_of for b in table[run.registered if run is not None else 0:]):
                raise InvariantError(f"request {rid!r} holds a keyed block past its keyed "
                                     "leading blocks")
        for _, _, keyed, keys in self._drain:
            if len(keyed) != len(keys):
                raise InvariantError("draining keyed blocks and their keys differ in number")
            for block, key in zip(keyed, keys):
                note(block, key, "draining")
        if not self._orphan_keys.keys() <= self._orphans:
            raise InvariantError("a pinned orphan's key outlived the orphan")
        for block, key in self._orphan_keys.items():
            note(block, key, "pinned")
        for block, key in zip(*self.cache.queue_items()):
            if key is None:
                raise InvariantError(f"free cached block {block} has no key in the LRU queue")
            note(block, key, "free")
        return key_of
