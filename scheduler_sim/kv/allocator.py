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

Check-then-act pairs: `can_reserve` / `reserve`, `can_allocate` / `grow`.
`try_grow` is all-or-nothing: a reconstruction that cannot get every block
it needs takes none (L4).
"""
from __future__ import annotations

from array import array
from collections import deque
from itertools import repeat

from ..records.errors import InvariantError
from .prefix_cache import BlockKeys, PrefixCache

__all__ = ["BlockAllocator", "blocks_for", "BLOCK_BYTES", "MAX_REQUEST_BLOCKS"]


# About what the allocator keeps per block in use (its table entry, an int, and
# its owners and pins, 4 bytes each), and the most blocks one request may hold:
# a request that could need more (and fits in the pool) is refused before the
# replay, with this arithmetic. (Arrays for the tables would take 16 bytes a
# block, but cost every replay 3% more time.)
BLOCK_BYTES = 55
MAX_REQUEST_BLOCKS = 2 ** 22


def blocks_for(rows: int, block_size: int) -> int:
    """Blocks needed to hold `rows` token rows: ceil(rows / block_size)."""
    return -(-rows // block_size)


class BlockAllocator:
    """Physical blocks (held, draining, free) and reservation credits, by request id."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Plain free blocks that have been used before (a stack), and the next
        # never-used block id: so a pool of a billion blocks costs nothing until
        # its blocks are used, and unused ids are handed out lowest first.
        self._free: list[int] = []
        self._fresh = 0
        self.cache = PrefixCache() if prefix_caching else None
        # Per block id below _fresh: owners and pins, 4 bytes each (with the
        # table entry, about BLOCK_BYTES per block in use).
        self._refs = array("i")
        self._pins = array("i")
        # False while every held block has exactly one owner and no pin (no
        # prefix cache, nothing shared or pinned yet): blocks then come and go
        # in whole slices.
        self._shared = prefix_caching
        self._pin_sets: dict[int, list[int]] = {}
        self._next_pin = 0
        self._tables: dict[str, list[int]] = {}
        self._credits: dict[str, int] = {}
        self._grown: dict[str, int] = {}   # blocks a credited request allocated itself
        self._drain: deque[tuple[int, list[int]]] = deque()  # (expiry tick, blocks)
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
        refs = self._refs
        plain = self._free
        if not self._shared:
            # The same blocks as one at a time: plain ones from the top of the
            # stack, then never-used ids, lowest first.
            if need == 1 and plain:  # a decode opening a block: the common case
                block = plain.pop()
                refs[block] = 1
                table.append(block)
                reuse = 1
            else:
                reuse = need if need <= len(plain) else len(plain)
                if reuse:
                    taken = plain[-reuse:]
                    del plain[-reuse:]
                    taken.reverse()
                    for block in taken:
                        refs[block] = 1
                    table.extend(taken)
            fresh = need - reuse
            if fresh:
                start = self._fresh
                self._fresh = start + fresh
                table.extend(range(start, start + fresh))
                refs.extend(repeat(1, fresh))
                self._pins.extend(repeat(0, fresh))
            self.held += need
            if self.held > self.peak_held:
                self.peak_held = self.held
            self.step_growth[rid] = self.step_growth.get(rid, 0) + need
            return need
        evicted = 0
        cache = self.cache
        # Without the radix tree an eviction takes the least recently freed block
        # and forgets its key: inlined here, as most blocks of a long prefix-caching
        # run are taken this way (PrefixCache.evict is the reference).
        lru_pop = cache.lru.popitem if cache is not None and not cache.tree else None
        for _ in range(need):
            if plain:
                block = plain.pop()
            elif self._fresh < self.num_blocks:
                block = self._fresh
                self._fresh += 1
                refs.append(0)
                self._pins.append(0)
            else:
                if lru_pop is not None:
                    block = lru_pop(last=False)[0]
                    key = cache.key_of.pop(block)
                    index = cache.index
                    if index[key] == block and key not in cache.others:
                        del index[key]
                    else:
                        cache.forget_key(block, key)
                else:
                    gone = cache.evict()
                    block = gone[0]
                    plain.extend(reversed(gone[1:]))  # the rest of an evicted node
                evicted += 1
                if self._on_evict is not None:
                    writer = cache.writer(block)
                    if writer is not None:
                        self._on_evict(rid, writer[0], writer[1])
            refs[block] = 1
            table.append(block)
        if evicted:
            self.step_evictions[rid] = self.step_evictions.get(rid, 0) + evicted
        self.held += need
        if self.held > self.peak_held:
            self.peak_held = self.held
        self.step_growth[rid] = self.step_growth.get(rid, 0) + need
        return need

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
            gone_total += len(gone)
        return gone_total

    def try_grow(self, rid: str, rows: int) -> bool:
        """All-or-nothing `grow`: allocate every block needed for `rows`, or none (L4)."""
        if not self.can_allocate(self.blocks_to_grow(rid, rows)):
            return False
        self.grow(rid, rows)
        return True

    def share(self, rid: str, blocks: list[int]) -> None:
        """Append blocks found in the cache or held by others to `rid`'s table.

        Each gets one more reference; a cached free block leaves the LRU queue
        and is held again.
        """
        refs = self._refs
        self._shared = True
        lru = self.cache.lru if self.cache is not None else {}
        for block in blocks:
            if not 0 <= block < self._fresh:
                raise InvariantError(f"block {block} is shared by {rid!r} but was never "
                                     "allocated")
            if refs[block] == 0 and self._pins[block] == 0:
                if block not in lru:
                    raise InvariantError(f"block {block} is shared by {rid!r} but "
                                         "nobody holds it and it is not cached")
                del lru[block]
                self.held += 1
            refs[block] += 1
        if self.held > self.peak_held:
            self.peak_held = self.held
        self._tables.setdefault(rid, []).extend(blocks)

    def pin(self, blocks: list[int]) -> int:
        """Pin held blocks for an in-flight transfer; return the pin's handle.

        A pinned block stays held, even with no owner left, until `unpin`
        (the transfer's drain acknowledgement).
        """
        pins = self._pins
        self._shared = True
        for block in blocks:
            if not 0 <= block < self._fresh or (self._refs[block] == 0 and pins[block] == 0):
                raise InvariantError(f"block {block} is pinned but nobody holds it")
            pins[block] += 1
        handle = self._next_pin
        self._next_pin += 1
        self._pin_sets[handle] = list(blocks)
        return handle

    def unpin(self, handle: int, now: int, delay: int) -> int:
        """Acknowledge a transfer's drain; blocks nobody holds any more start draining."""
        blocks = self._pin_sets.pop(handle)
        orphans = []
        for block in blocks:
            self._pins[block] -= 1
            if self._pins[block] == 0 and self._refs[block] == 0:
                orphans.append(block)
        self._drain_blocks(orphans, now, delay)
        return len(orphans)

    def free_request(self, rid: str, now: int, delay: int) -> int:
        """Release `rid`'s credit and block references; return the blocks sent to drain.

        Blocks are dereferenced tail first; a block nobody references or pins
        any more drains until `now + delay` (A4).
        """
        self.release_credit(rid)
        self.step_evictions.pop(rid, None)
        self.step_growth.pop(rid, None)
        table = self._tables.pop(rid, None)
        if not table:
            return 0
        refs = self._refs
        if not self._shared:
            # Every block is this request's alone: all of them drain, tail first.
            for block in table:
                refs[block] = 0
            table.reverse()
            self._drain_blocks(table, now, delay)
            return len(table)
        pins = self._pins
        drained: list[int] = []
        for block in reversed(table):
            refs[block] -= 1
            if refs[block] == 0 and pins[block] == 0:
                drained.append(block)
        self._drain_blocks(drained, now, delay)
        return len(drained)

    def _give(self, blocks: list[int]) -> None:
        """Return blocks to the free pools, in the order they were freed.

        Plain blocks go on top of a stack, as vLLM prepends them to its free
        queue: the latest batch freed is reused first and, within a batch, the
        block freed first (a request's tail). Cached blocks join the LRU tail
        in order, so a request's tail blocks are evicted before its prefix.
        """
        cache = self.cache
        if cache is None:
            self._free.extend(reversed(blocks))
            return
        key_of = cache.key_of
        lru = cache.lru
        plain = []
        tree = cache.tree
        for block in blocks:
            if block in key_of:
                lru[block] = None
            else:
                plain.append(block)
        if tree:
            cache.offer_blocks(blocks)
        self._free.extend(reversed(plain))

    def _drain_blocks(self, blocks: list[int], now: int, delay: int) -> None:
        """Move blocks nobody holds from held to draining, free at `now + delay`.

        With no delay they are free at once, so a policy that preempts in the
        middle of a step can reuse the victim's blocks in that same step.
        """
        if not blocks:
            return
        self.held -= len(blocks)
        if delay == 0:
            self._give(blocks)
            return
        self.draining += len(blocks)
        expiry = now + delay
        drain = self._drain
        if drain and drain[-1][0] == expiry:
            drain[-1][1].extend(blocks)
        elif drain and drain[-1][0] > expiry:
            raise InvariantError(f"drain expiry({expiry}) >= last expiry({drain[-1][0]}) is false")
        else:
            drain.append((expiry, blocks))

    def release_expired(self, now: int) -> int:
        """Move every draining block whose delay has passed to the free pools."""
        released = 0
        drain = self._drain
        while drain and drain[0][0] <= now:
            _, blocks = drain.popleft()
            self._give(blocks)
            released += len(blocks)
        self.draining -= released
        return released

    # --- prefix caching (§8) -----------------------------------------------

    def lookup(self, keys: BlockKeys, max_blocks: int, count: bool = True) -> list[int]:
        """The longest run of leading blocks whose keys are cached and reusable.

        A block is reusable if somebody holds it or it waits in the LRU queue;
        draining blocks are not. Read-only: `share` takes the blocks.
        """
        cache = self.cache
        if cache is None or max_blocks <= 0:
            return []
        index = cache.index
        refs = self._refs
        lru = cache.lru
        hits = []
        key_list = keys.ensure(max_blocks)
        for i in range(max_blocks):
            block = index.get(key_list[i])
            if block is None or (refs[block] == 0 and block not in lru):
                break
            hits.append(block)
        if cache.tree and hits:
            cache.split_after(hits[-1])
            cache.touch_path(hits[-1])
        if count:
            cache.queried += max_blocks
            cache.hits += len(hits)
        return hits

    def evictable(self, blocks: list[int]) -> int:
        """How many of `blocks` sit in the free LRU queue (a hit on them uses a free block)."""
        if self.cache is None:
            return 0
        lru = self.cache.lru
        return sum(1 for b in blocks if b in lru)

    def register_full_blocks(self, rid: str, keys: BlockKeys, rows: int) -> None:
        """Give keys to the blocks of `rid` that `rows` written rows have filled."""
        cache = self.cache
        if cache is None:
            return
        full = min(rows // self.block_size, len(self._tables.get(rid, ())))
        start = keys.registered
        if full <= start:
            return
        table = self._tables[rid]
        key_list = keys.ensure(full)
        index = cache.index
        key_of = cache.key_of
        writers = cache.writers
        duplicates = cache.duplicates
        tree = cache.tree
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
        if cache is None or cache.tree:
            return
        self.register_full_blocks(rid, keys, rows)

    def _adopt(self, table: list[int], i: int, cached: int) -> None:
        """SGLang's insert keeps one copy of a run: a request that wrote a block
        the cache already holds (another request computed it in the same step)
        takes the cached block, and its own copy is freed."""
        refs = self._refs
        lru = self.cache.lru
        if refs[cached] == 0:
            if cached not in lru:
                return  # draining: keep the request's own copy
            del lru[cached]
            self.held += 1
        refs[cached] += 1
        own = table[i]
        table[i] = cached
        refs[own] -= 1
        if refs[own] == 0 and self._pins[own] == 0:
            self.held -= 1
            self._free.append(own)

    # --- invariants (A3) --------------------------------------------------------

    def _commit_equation(self) -> str:
        return (f"held({self.held}) + draining({self.draining}) + unused credit"
                f"({self.reserved - self.granted}) <= num_blocks({self.num_blocks})")

    def check(self) -> None:
        """The O(1) conservation check run at every boundary (A3)."""
        free = self.free
        if self.held + self.draining + free != self.num_blocks:
            raise InvariantError(
                f"held({self.held}) + draining({self.draining}) + free({free}) "
                f"== num_blocks({self.num_blocks}) is false")
        if self.reserved + self.draining > self.num_blocks:
            raise InvariantError(f"reserved({self.reserved}) + draining({self.draining}) "
                                 f"<= num_blocks({self.num_blocks}) is false")
        if self.committed() > self.num_blocks:
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
            if owners != self._refs[block]:
                raise InvariantError(f"block {block}: owners({owners}) == "
                                     f"refs({self._refs[block]}) is false")
        for rid, credit in self._credits.items():
            if self._grown[rid] > credit:
                raise InvariantError(
                    f"request {rid!r}: allocated({self._grown[rid]}) <= credit({credit}) is false")
        draining = sum(len(b) for _, b in self._drain)
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
            for key, block in self.cache.index.items():
                if self.cache.key_of.get(block) != key:
                    raise InvariantError(f"cache index and block keys disagree on block {block}")
            for key, blocks in self.cache.others.items():
                if key not in self.cache.index or any(
                        self.cache.key_of.get(b) != key for b in blocks):
                    raise InvariantError(f"cache duplicates and block keys disagree on key "
                                         f"{key!r}")
