"""The prefix cache's protocol: everything the allocator asks of a cache (§8).

The allocator (`allocator.py`) owns the physical blocks: who holds them, the
plain free blocks, the drain queue, pins and shares. A prefix cache owns the
keyed blocks: which block holds which key (`index`), the free blocks that
keep one (`free_blocks`, handed out only when no plain block is left, in the
cache's own eviction order) and whatever its kind needs to choose them. The
allocator calls a cache only through the methods of `PrefixCache` below,
fetched once when the cache is bound, and never reads its structures; each
kind is one module (`lru_cache`, `vllm_cache`, `radix_cache`, named in
`caches.py`), so a new kind (a host-memory tier below the GPU pool) is one
new module and one line there.

Decisions written down here, since every kind keeps them:
- **Who names a key.** Either the cache names every keyed block's key itself
  (the LRU cache, the radix tree), or, as vLLM's cache does, the requests'
  `BlockKeys` name the keys of blocks in use and the keys travel with freed
  blocks: `release` then says how many of a released table's leading blocks
  carry keys, the allocator carries them (with the blocks) through the
  drain queue, parks them with the cache while the blocks are pinned orphans
  (`keep_orphan_keys`, `orphan_key`), and hands them back with the blocks.
  A cache that names every key itself carries nothing: `release` says 0.
- **Eviction.** `take` is called only when neither a plain free block nor a
  never-used one is left. The cache appends the blocks to the request's
  table itself (one list extended, no copy) and reports each eviction's
  writer when asked to (`track`). An eviction may free more blocks than
  needed (a radix leaf goes whole): those come back as `spare`, plain blocks
  for the allocator's free stack. `evict_until` evicts ahead of need.
- **Freeing.** `give_back` receives blocks nobody holds any more in the
  order they were freed; the cache keeps those with a key and returns the
  plain ones, in order, for the allocator's stack.
- **Look-up.** `find` is read-only (what a router's peek calls on every
  replica); `touch` records a use (the radix tree's stamps) once the
  allocator dropped the blocks nobody may reuse (draining, pinned orphans).
- **Adoption.** `register` may answer (table position, cached block) pairs:
  the request's own copy at that position is to be swapped for the cached
  block (SGLang keeps one copy of a run). The allocator does the swap, since
  holders, shares and free lists are its own.
- **Hot paths** stay inlined where they were (each labelled where it is,
  with the measurement that justifies it), and the allocator fetches the
  bound methods once (`BlockAllocator.bind_cache`), so that the protocol
  costs one call where the allocator used to call its own code.

`NoCache` is the protocol with nothing cached: the allocator holds one when
prefix caching is off, so it never asks whether it has a cache.
"""
from __future__ import annotations

from typing import Callable, Collection, Hashable, Iterable

from ..records.errors import InvariantError
from .block_keys import BlockKeys, interning_table
from .key_index import KeyIndex

__all__ = ["PrefixCache", "NoCache", "Report"]

# (taker's request id, writer's request id, the writer's block number) -> None
Report = Callable[[str, str, int], None]

_NOTHING_CARRIED = (0, ())  # `release`'s answer when no leading block carries its key


class PrefixCache:
    """What every prefix cache offers the allocator; the shared parts (the index
    of keys, look-ups by key, writers).

    `free_blocks` is the container of free blocks that keep a key: `len`, `in`
    and iteration (eviction order where the kind keeps one). The allocator
    fetches it once, so a kind never replaces it. `index` maps each cached key
    to the block a look-up finds. `writers` is None, or, once somebody wants
    evictions reported (`track`), the (request id, block number) that wrote
    each keyed block.
    """

    free_blocks: Collection[int]
    # Whether `take` evicts exactly the blocks asked for, never spare ones: then
    # the blocks of several requests may be taken in one call, in order
    # (`BlockAllocator.grow_each`).
    exact_take = False
    # Whether `register_decoded` may key anything: a kind that keys decoded tokens
    # only when the request finishes says False, and the engine does not call it.
    keys_decoded = True
    # `holds_found(keys, hits) -> bool`, of a kind that can tell whether a look-up's
    # held answer still holds: whether `find` answers `hits` again for `keys` (as
    # far as it found them), `hits` being the answer `count_free_found` counted
    # last, every one held then (none free, draining or pinned; nothing drains or
    # is pinned now); the kind notes what it needs when it counts. None: a kind
    # that cannot tell, for which no answer is kept (`PrefixLookups.lookup`).
    holds_found: Callable[[BlockKeys, list[int]], bool] | None = None

    def __init__(self, compact: bool = False) -> None:
        # The interning table of hash entries, kept alive as long as the cache
        # holds keys made from it (see `block_keys`).
        self.entries = interning_table()
        self.index: dict[Hashable, int] = {}
        # A fleet's replica (`compact`): a kind may keep some structures in less
        # memory for some time (vLLM's index in narrower buckets, its queue's keys packed).
        self.compact = compact
        self.writers: dict[int, tuple[str, int]] | None = None
        self.report: Report | None = None

    # --- what the allocator calls ----------------------------------------------

    def track(self, report: Report) -> None:
        """From now on remember who writes each keyed block, and call `report(taker,
        writer, writer's block number)` whenever `take` hands a cached block out."""
        self.writers = {}
        self.report = report

    def register(self, rid: str, keys: BlockKeys, full: int,
                 table: list[int]) -> list[tuple[int, int]] | None:
        """Give keys to `table[keys.registered:full]`, blocks of `rid` that written
        rows filled (`keys` computes their keys), and raise `keys.registered`
        to `full`. Returns None, or (position, cached block) pairs: the request's
        own copy at that position is to be swapped for the cached block."""
        raise NotImplementedError

    def register_decoded(self, rid: str, keys: BlockKeys, full: int,
                         table: list[int]) -> list[tuple[int, int]] | None:
        """`register` for blocks that decoding filled (a kind that keys decoded
        tokens only when the request finishes does nothing)."""
        raise NotImplementedError

    def find(self, keys: BlockKeys, max_blocks: int) -> list[int]:
        """The blocks of the longest run of leading keys cached, at most
        `max_blocks`, changing nothing (whether they may be reused is the
        allocator's to say)."""
        # In growing slices, keys computed only as far as looked up, so that a
        # long prompt with a short hit costs little.
        get = self.index.get
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
        return hits

    def touch(self, block: int) -> None:
        """A look-up found a run that ends at `block` and will use it (the radix
        tree stamps its path; other kinds keep no recency of look-ups)."""

    def count_free(self, blocks: list[int]) -> int:
        """How many of `blocks` are free cached blocks (a hit on them uses a free block)."""
        free = self.free_blocks
        return sum(1 for b in blocks if b in free)

    def hit(self, block: int) -> None:
        """Take free cached `block` out of `free_blocks`: a request holds it again."""
        raise NotImplementedError

    def hits(self, blocks: list[int]) -> set[int]:
        """`hit` for each of `blocks` that is a free cached block, in order;
        return the set of those."""
        free = self.free_blocks
        found = [block for block in blocks if block in free]
        for block in found:
            self.hit(block)
        return set(found)

    def count_free_found(self, blocks: list[int], keys: BlockKeys) -> int:
        """`count_free` for `blocks`, which `find` found for `keys` (a kind that
        keeps its free blocks by key answers a run of keys at a time; one that can
        tell whether an answer still holds notes the moment: `holds_found`)."""
        return self.count_free(blocks)

    def hits_found(self, blocks: list[int], keys: BlockKeys) -> set[int]:
        """`hits` for `blocks`, which `find` found for `keys` (as `count_free_found`)."""
        return self.hits(blocks)

    def on_share(self, rid: str, blocks: list[int], keys: BlockKeys | None,
                 has_blocks: bool) -> None:
        """`rid` (holding blocks already if `has_blocks`) shares `blocks`, found by
        `find` with `keys`, ahead of the allocator's bookkeeping: a cache whose
        keys travel with the requests' `BlockKeys` notes them (and refuses a
        share it cannot key); the others need nothing."""

    def take(self, rid: str, table: list[int], count: int) -> tuple[int, list[int]]:
        """Hand `count` free cached blocks to `rid` (there are that many): evict
        them, forgetting their keys, and append them to `table`. Returns the
        evictions made and the spare blocks evicted beyond `count` (plain now)."""
        raise NotImplementedError

    def evict_one(self) -> list[int]:
        """Forget the keys of the blocks eviction takes next (one free cached
        block, or a cache's unit of them) and return them, in order."""
        raise NotImplementedError

    def evict_until(self, count: int) -> list[list[int]]:
        """Evict free cached blocks, ahead of need, until `count` of them lost
        their keys or none is left; return each eviction's blocks (plain now),
        in order. Nobody takes them yet, so no eviction is reported.

        The default repeats `evict_one` (the next eviction's blocks, forgotten)
        while `free_blocks` holds any, and drops their writers."""
        groups = []
        freed = 0
        free = self.free_blocks
        writers = self.writers
        while free and freed < count:
            gone = self.evict_one()
            if writers is not None:
                for block in gone:
                    writers.pop(block, None)
            groups.append(gone)
            freed += len(gone)
        return groups

    def give_back(self, blocks: list[int], keyed=(), keys=()) -> list[int]:
        """Blocks nobody holds any more, in the order freed (`keyed` carrying
        `keys`, a list kept as it is: nobody may change it later). Keep those
        that have a key; return the plain ones, in order."""
        raise NotImplementedError

    def release(self, rid: str, ended: bool = False) -> tuple[int, object]:
        """`rid` lets go of its table: how many of its leading blocks carry their
        keys along, and (if any do) the request's `BlockKeys`, which knows
        those keys (the allocator reads them tail first: `tail_first`).
        `ended`: the request ended and will never look its keys up again (a
        cache may then spare keys nobody else can match: `VllmCache.release`)."""
        return _NOTHING_CARRIED

    def owned_elsewhere(self, keyed: list[int], extra: dict[int, int]) -> set[int]:
        """Which of `keyed` (a released table's leading blocks, last first) have
        other owners too (`extra` counts the extra owners of shared blocks)."""
        return extra.keys() & keyed

    def owned_lead(self, keyed: list[int], extra: dict[int, int]) -> int | None:
        """How many of `keyed`'s last blocks (a released table's first ones) are
        every block of `keyed` others own too, when the cache knows they are such
        a run; None when it does not (then ask `owned_elsewhere`)."""
        return None

    def keep_orphan_keys(self, pairs: Iterable[tuple[int, Hashable]]) -> None:
        """Keep the carried keys of pinned blocks nobody owns any more: (block, key)."""
        raise InvariantError("a cache that names its keys itself was handed carried keys")

    def orphan_key(self, block: int) -> Hashable | None:
        """Forget and return the key kept for pinned orphan `block`, if any."""
        return None

    def audit(self, tables: dict[str, list[int]], carried: list[tuple[int, Hashable]],
              orphans: set[int]) -> None:
        """The full check of the cache's own invariants (tests, and an engine built
        with `audit=True`), given the requests' tables, the (block, key) pairs the
        allocator carries in its drain queue and its pinned orphans; raises
        InvariantError."""
        raise NotImplementedError

    # --- shared by the kinds ----------------------------------------------------

    def _report_writers(self, rid: str, blocks: list[int]) -> None:
        """Report the writer of each of `blocks` handed to `rid` (tracking on)."""
        writers, report = self.writers, self.report
        for block in blocks:
            writer = writers.pop(block, None)
            if writer is not None:
                report(rid, writer[0], writer[1])

    def _check_index(self, key_of: dict) -> None:
        """`index` names, for each key, a block whose key it is (for `audit`)."""
        if isinstance(self.index, KeyIndex):  # (its counts per bucket)
            try:
                self.index.check()
            except ValueError as e:
                raise InvariantError(str(e)) from None
        for key, block in self.index.items():
            if key_of.get(block) != key:
                raise InvariantError(f"cache index and block keys disagree on block {block}")


class NoCache(PrefixCache):
    """The protocol with nothing cached (prefix caching off): nothing is ever
    keyed, found or evicted, and every block given back is plain."""

    free_blocks = ()

    def __init__(self) -> None:  # (no index, no interning table to keep alive)
        self.writers = None
        self.report = None

    def track(self, report: Report) -> None:
        """Nothing is ever evicted: nothing to report."""

    def register(self, rid, keys, full, table):
        """Nothing is keyed."""
        return None

    register_decoded = register

    def find(self, keys, max_blocks):
        """Nothing is cached."""
        return []

    def count_free(self, blocks):
        """No block is a free cached one."""
        return 0

    def hits(self, blocks):
        """No block is a free cached one."""
        return set()

    def give_back(self, blocks, keyed=(), keys=()):
        """Every block is plain."""
        return blocks

    def evict_until(self, count):
        """Nothing to evict."""
        return []

    def audit(self, tables, carried, orphans):
        """Nothing may carry a key."""
        if carried:
            raise InvariantError("block keys carried without a prefix cache")
