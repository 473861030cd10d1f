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
(last freed, first reused), and blocks that keep a cache key, held by the
prefix cache and handed out only when no plain block is left. Both count as
free. The allocator asks the cache for everything about keys through the
protocol of `prefix_cache.PrefixCache` (register, take, give back, look up,
release, ...), bound once (`bind_cache`), and never asks which kind of
cache it has: without prefix caching it holds a `NoCache`. Keys a cache
lets the blocks carry (vLLM's) travel with them here, through the drain
queue or parked with the cache while the blocks are pinned orphans.

Check-then-act pairs: `can_reserve` / `reserve`, `can_allocate` / `grow`.
`try_grow` is all-or-nothing: a reconstruction that cannot get every block
it needs takes none (L4).

`BlockAllocator` is written in seven modules, one concern each: this one
(pools, credits, growth, binding the prefix cache), `prefix_lookups` (the
look-ups and registrations a policy asks of the cache), `counted_blocks`
(the decode cohort's new blocks, by count), `block_openings` (several
tables grown at once, as a fold opens blocks), `sharing`
(extra owners, pins, orphans), `freeing` (released tables, the drain queue,
the free pools) and `allocator_audit` (the full check); `block_ids` holds
the block numbers every allocator shares. Where no block id is ever read, the
engine's allocator is `block_counts.BlockCounts`, this one with every block a
count.
"""
from __future__ import annotations

from collections import deque

from ..records.errors import InvariantError
from .allocator_audit import Audit
from .block_ids import block_ids, grow_ids
from .block_openings import BlockOpenings
from .block_keys import BlockKeys
from .counted_blocks import CountedBlocks
from .freeing import Freeing
from .prefix_cache import NoCache, PrefixCache
from .prefix_lookups import PrefixLookups
from .sharing import Owners, Sharing

__all__ = ["BlockAllocator", "blocks_for", "BLOCK_BYTES", "MAX_REQUEST_BLOCKS"]


# About what the allocator keeps per block in use (its table entry and an int),
# and the most blocks one request may hold: a request that could need more (and
# fits in the pool) is refused before the replay, with this arithmetic. (Arrays
# for the tables would take 16 bytes a block, but cost every replay 3% more
# time.)
BLOCK_BYTES = 47
MAX_REQUEST_BLOCKS = 2 ** 22


def blocks_for(rows: int, block_size: int) -> int:
    """Blocks needed to hold `rows` token rows: ceil(rows / block_size)."""
    return -(-rows // block_size)


class BlockAllocator(PrefixLookups, Sharing, Freeing, Audit, CountedBlocks,
                     BlockOpenings):
    """Physical blocks (held, draining, free) and reservation credits, by request id."""

    # Whether each request's blocks are a count, not ids (`block_counts.BlockCounts`):
    # then a counted member that ends keeps its counted blocks until it is freed.
    counts_blocks = False

    def __init__(self, num_blocks: int, block_size: int,
                 cache: PrefixCache | None = None) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Plain free blocks that have been used before (a stack), and the next
        # never-used block id: so a pool of a billion blocks costs nothing until
        # its blocks are used, and unused ids are handed out lowest first.
        self._free: list[int] = []
        self._fresh = 0
        self._ids = block_ids()  # never-used ids are taken from here (shared objects)
        # A block in a table has one owner, plus `_extra[block].count` more when
        # it is shared (counted per run: `sharing.Owners`); `_pins[block]` pins
        # when pinned; `_orphans` are pinned blocks nobody owns any more (held
        # until unpinned). Blocks neither shared nor pinned cost nothing here.
        self._extra: dict[int, Owners] = {}
        self._pins: dict[int, int] = {}
        self._orphans: set[int] = set()
        # True once blocks may be shared or pinned (prefix caching, `share`,
        # `pin`): the plain free and draining blocks are then also kept as sets,
        # to tell a held block from one nobody holds. The plain ones lazily: the
        # set holds the stack's first `_plain_mark` blocks, and the blocks pushed
        # above them join it only when somebody asks (`sharing.Sharing`).
        self._shared = False
        self._plain_set: set[int] = set()
        self._plain_mark = 0
        self._draining_set: set[int] = set()
        self._pin_sets: dict[int, list[int]] = {}
        self._next_pin = 0
        self._tables: dict[str, list[int]] = {}
        self._credits: dict[str, int] = {}
        self._grown: dict[str, int] = {}   # blocks a credited request allocated itself
        # Blocks the decode cohort's members hold by count, granted from their
        # credits (when the policy reserves: `counted_credited`), not yet in their
        # tables (counted_blocks.py).
        self._counted: list[int] = []
        self.counted_credited = True
        # (expiry tick, blocks, keyed blocks, their keys): the last two only for a
        # cache whose keys travel with the blocks nobody holds (`release`).
        self._drain: deque[tuple[int, list[int], list[int], list]] = deque()
        self.held = 0
        self.draining = 0
        self.reserved = 0
        self.granted = 0  # sum of _grown: the part of the credits already allocated
        self.peak_reserved = 0
        self.peak_held = 0
        # Cached blocks each request evicted since the engine last cleared this:
        # lets a snapshot show the pool as it was before the step allocated. (Not
        # raised by a fold's openings, whose steps nobody reads them of:
        # kv/block_openings.py.)
        self.step_evictions: dict[str, int] = {}
        self.step_growth: dict[str, int] = {}
        self._report = None  # (taker, writer, block number) -> None, when tracked
        # Host memory below the pool (kv/host_memory.py), or None: keys given to full
        # blocks are noted for write-through when it writes them.
        self.host = None
        # The prefix cache (None without prefix caching) and, bound once, what
        # the allocator calls of it: a `NoCache` until a cache is bound.
        self.cache: PrefixCache | None = None
        self._use(NoCache())
        if cache is not None:
            self.bind_cache(cache)

    def bind_cache(self, cache: PrefixCache) -> None:
        """Cache prefixes in `cache` (made by `caches.make_cache`): once, before any
        block is handed out. (The engine binds the kind its policy names, after
        building the policy, which may look at the allocator.)"""
        if self.cache is not None or self._fresh or self._tables:
            raise InvariantError("a prefix cache is bound once, before any block is "
                                 "handed out")
        self.cache = cache
        self._become_shared()
        if self._report is not None:
            cache.track(self._report)
        self._use(cache)

    def _use(self, cache: PrefixCache) -> None:
        """Fetch what the allocator calls of `cache` once (no attribute look-up on
        the cache per call)."""
        self._cache = cache
        self._cached_free = cache.free_blocks  # a kind never replaces it
        self._find = cache.find
        self._touch = cache.touch
        self._hit = cache.hit
        self._hits = cache.hits
        self._take = cache.take
        self._give_back = cache.give_back
        self._release = cache.release
        self._register = cache.register
        self._register_decoded = cache.register_decoded
        # vLLM's requests keyed past their shared content (`PrefixLookups._own_keyed`).
        self._own_keyed = getattr(cache, "unindexed", None)
        # False: `register_decoded` does nothing, and the engine skips it.
        self.keys_decoded = cache.keys_decoded
        self._count_free = cache.count_free
        self._count_free_found = cache.count_free_found
        self._hits_found = cache.hits_found
        # The last look-up's answer and the keys it was found for: a cache that
        # keeps its free blocks by key counts that answer's free blocks by key
        # (`evictable`, asked of the hit the policy just looked up).
        self._found: list[int] | None = None
        self._found_keys: BlockKeys | None = None
        # A look-up's answer kept while it provably holds (`PrefixLookups.lookup`):
        # the cache's test (None: a kind that cannot tell), the answer kept, the
        # last look-up's (limit, length before `_reusable`), an answer given again.
        self._holds_found = cache.holds_found
        self._kept: tuple | None = None
        self._asked = (0, -1)
        self._again: list[int] | None = None

    # --- views ----------------------------------------------------------------

    @property
    def free(self) -> int:
        """Blocks that can be handed out right now (cached ones included)."""
        return len(self._free) + self.num_blocks - self._fresh + len(self._cached_free)

    @property
    def cached_free(self) -> int:
        """Free blocks that still carry a cache key (evicted only when needed)."""
        return len(self._cached_free)

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
        handed out again (prefix caching only; a cache bound later is told too)."""
        self._report = report
        self._cache.track(report)

    # --- credits (A1, A2) -----------------------------------------------------

    def committed(self) -> int:
        """Blocks spoken for: held or draining now, or promised by unused credit."""
        return self.held + self.draining + self.reserved - self.granted

    def can_reserve(self, blocks: int) -> bool:
        """True if a credit of `blocks` more still fits in num_blocks (A3)."""
        # (`committed()` written out here and in `reserve`: a call fewer an admission;
        # measured in benchmarks/README.md, "twenty-second steps", az22.)
        return self.held + self.draining + self.reserved - self.granted + blocks <= self.num_blocks

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
        if self.held + self.draining + self.reserved - self.granted > self.num_blocks:
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
        # `self.free`, inlined: 356,586 calls replaying the Mooncake trace under vllm.
        free = len(self._free) + self.num_blocks - self._fresh + len(self._cached_free)
        if need > free:
            raise self._short_of(f"request {rid!r}", need, free)
        self._grow_by(rid, table, need)
        return need

    def _grow_by(self, rid: str, table: list[int], need: int) -> None:
        """Add `need` (> 0, no more than are free) blocks to `rid`'s `table`:
        `grow` once its checks are passed (`try_grow` makes them itself)."""
        credit = self._credits.get(rid)
        if credit is not None:
            grown = self._grown[rid] + need
            if grown > credit:
                raise InvariantError(
                    f"request {rid!r}: allocated({grown}) <= credit({credit}) is false")
            self._grown[rid] = grown
            self.granted += need
        plain = self._free
        if need == 1 and plain:  # a decode opening a block
            table.append(plain.pop())
            if len(plain) < self._plain_mark:  # (it was in the plain set: `_plain_cut`)
                self._plain_cut(len(plain), table[-1:])
        else:
            # Plain or never-used blocks first (`_take_new`: no call when there are
            # none, as when the cache holds every free block), then cached ones.
            rest = need
            if plain or self._fresh < self.num_blocks:
                taken = self._take_new(need)
                table += taken
                rest -= len(taken)
            if rest:  # the rest from the cached blocks, evicted
                evicted, spare = self._take(rid, table, rest)
                if spare:  # blocks an eviction freed beyond the need: plain now
                    plain.extend(reversed(spare))
                self.step_evictions[rid] = self.step_evictions.get(rid, 0) + evicted
        self.held += need
        if self.held > self.peak_held:
            self.peak_held = self.held
        self.step_growth[rid] = self.step_growth.get(rid, 0) + need

    def _take_new(self, count: int) -> list[int]:
        """Up to `count` blocks that carry no key, as growth hands them out: plain
        ones off the top of the free stack (the top first), then never-used ids
        (lowest first); fewer only when cached blocks must be evicted for the
        rest. (`grow`, `take_counted` and `grow_each` all take their blocks here.)"""
        plain = self._free
        reuse = count if count <= len(plain) else len(plain)
        if reuse:
            left = len(plain) - reuse
            if left < self._plain_mark:
                self._plain_cut(left, plain[left:self._plain_mark])
            taken = plain[left:]
            del plain[left:]
            taken.reverse()
        else:
            taken = []
        rest = count - reuse
        if rest:
            fresh = self.num_blocks - self._fresh
            if fresh > rest:
                fresh = rest
            if fresh:
                start = self._fresh
                end = self._fresh = start + fresh
                ids = self._ids
                if end > len(ids):
                    grow_ids(ids, end)
                taken += ids[start:end]
        return taken

    def open_block(self, rid: str, rows: int) -> int:
        """`grow(rid, rows)` for a decode whose row `rows - 1` starts a block: the
        common case, one plain block, inline; anything else through `grow`."""
        table = self._tables.get(rid)
        if table is not None and len(table) * self.block_size >= rows:
            return 0  # (the policy grew it already)
        plain = self._free
        if not plain or table is None or len(table) * self.block_size + 1 != rows:
            return self.grow(rid, rows)
        credit = self._credits.get(rid)
        if credit is not None:
            grown = self._grown[rid] + 1
            if grown > credit:
                return self.grow(rid, rows)  # raises, with the equation
            self._grown[rid] = grown
            self.granted += 1
        table.append(plain.pop())
        if len(plain) < self._plain_mark:  # (it was in the plain set: `_plain_cut`)
            self._plain_cut(len(plain), table[-1:])
        held = self.held = self.held + 1
        if held > self.peak_held:
            self.peak_held = held
        growth = self.step_growth
        growth[rid] = growth.get(rid, 0) + 1
        return 1

    def evict_until(self, blocks: int) -> int:
        """Evict cached free blocks until `blocks` free blocks carry no key, or
        none is cached; return how many lost their key. (SGLang does this after
        a retraction, ahead of need; nobody takes the blocks yet, so no eviction
        is reported.)"""
        plain = self._free
        groups = self._cache.evict_until(blocks - len(plain) - (self.num_blocks - self._fresh))
        gone_total = 0
        for gone in groups:
            plain.extend(reversed(gone))
            gone_total += len(gone)
        return gone_total

    def try_grow(self, rid: str, rows: int) -> bool:
        """All-or-nothing `grow`: allocate every block needed for `rows`, or none (L4)."""
        # `can_allocate(blocks_to_grow(rid, rows))`, inlined (74,108 calls replaying
        # the Mooncake trace under vllm, each a prefill chunk or a decode opening a
        # block).
        # Its need and the free blocks are counted once, here: with a table (every
        # call but a request's first chunk) and a need, the blocks are added without
        # `grow`'s second count of both. (Speed: replaying the first 2,000 Mooncake
        # requests under vllm with prefix caching, 8,670 of the 8,791 calls grew:
        # 0.993x the instructions; benchmarks/README.md, "thirty-first steps", fr35.)
        table = self._tables.get(rid)
        if table is None:
            need = -(-rows // self.block_size)
            if need > 0 and need > (len(self._free) + self.num_blocks - self._fresh
                                    + len(self._cached_free)):
                return False
            self.grow(rid, rows)  # (which makes the table)
            return True
        need = -(-rows // self.block_size) - len(table)
        if need > 0:
            if need > (len(self._free) + self.num_blocks - self._fresh
                       + len(self._cached_free)):
                return False
            self._grow_by(rid, table, need)
        return True

    # --- invariants (A3) --------------------------------------------------------

    def _commit_equation(self) -> str:
        return (f"held({self.held}) + draining({self.draining}) + unused credit"
                f"({self.reserved - self.granted}) <= num_blocks({self.num_blocks})")

    def check(self) -> None:
        """The O(1) conservation check run at every boundary (A3)."""
        free = len(self._free) + self.num_blocks - self._fresh + len(self._cached_free)
        if self.held + self.draining + free != self.num_blocks:
            raise InvariantError(
                f"held({self.held}) + draining({self.draining}) + free({free}) "
                f"== num_blocks({self.num_blocks}) is false")
        if self.reserved + self.draining > self.num_blocks:
            raise InvariantError(f"reserved({self.reserved}) + draining({self.draining}) "
                                 f"<= num_blocks({self.num_blocks}) is false")
        if self.held + self.draining + self.reserved - self.granted > self.num_blocks:
            raise InvariantError(self._commit_equation() + " is false")
