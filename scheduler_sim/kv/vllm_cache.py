"""vLLM's prefix cache: several blocks per key, the LRU queue kept in runs (§8.2).

A block filled with content already cached keeps the key too: `index` names
the first such block still cached (the one a look-up finds), `others` the
rest, in the order they got the key; when the first is evicted the next
takes its place.

Keys are not named per block. A request's keyed blocks are always the
leading ones of its table, the first `registered` of its `BlockKeys`, so the
cache remembers that object per request (`request_keys`), and reads its
integer keys as runs (first key, count), never as a list; a freed keyed
block carries its key along (`release`), through the allocator's drain
queue or as a pinned orphan (`orphan_keys`), into the queue, where a freed
table's runs of keys stay runs (`tail_first`: a `range` going down each).
Keys of a request's own content (`block_keys.OWN_KEY`: its decodes'
blocks, found by nobody else, and by it only once it let go of them) are
not made or indexed as their blocks fill: `unindexed` names the first such
block of each request, and `release` indexes them all as one run (or, once the
request ended, queues them without keys: found by nobody).

Blocks join the queue a request at a time and leave it, but for hits, from
its front, many at once. So the queue is kept as `runs`, one entry
[blocks, their keys, position of the first not yet consumed] per batch
freed, oldest first, which eviction consumes from the front by slices (a
compact cache's runs pack their integer keys: `RunQueue.append_run`); and
`free_blocks` holds the queue's members (membership and size) by key, a
slice of flags per run of keys (`QueueMembers`); a look-up's hits are
counted and taken by the keys they were found for (`count_free_found`,
`hits_found`); a compact cache (a fleet's replica) too, in narrower buckets
(`COMPACT_ENTRIES_PER_BUCKET`). A hit takes its blocks off the runs' ends
where they end runs (`RunQueue._take_ends`); any other leaves its entry
behind, stale: `stale[block]` counts a block's, all ahead of its live entry
(if free again), so eviction skips exactly that many before it takes it.
"""
from __future__ import annotations

from collections import deque
from typing import Hashable

from ..records.errors import InvariantError
from .key_index import KeyIndex
from .prefix_cache import PrefixCache
from .queue_members import QueueMembers
from .run_queue import RunQueue
from .tail_first import TailFirstRuns, tail_first
from .vllm_audit import audit_vllm

__all__ = ["VllmCache"]

_ONE_TAKEN = (1, ())  # `take`'s answer for one block: one eviction, nothing spare


class VllmCache(RunQueue, PrefixCache):
    """Several blocks per key; keys carried by the requests and the freed blocks."""

    # The index's buckets of integer keys span this many hash entries (`KeyIndex`).
    # A request's new entries are interned one after the other, so their keys are
    # one run of consecutive integers: on the Mooncake trace under vllm, 8.65
    # million keys registered come in 36,307 such runs but 290,700 entries, and
    # 8.49 million forgotten in 87,316 runs going down. Registration, look-up and
    # eviction then take a slice per run within a bucket rather than per entry.
    # Speed: 32 entries (1,024 keys on Mooncake) where it was 8 (chosen when a
    # bucket's runs cost more around them): the whole trace's runs cut at
    # buckets 336,365 -> 203,667 pieces, buckets made 42,619 -> 17,422, each
    # a longer copy of its `None`s; the first 2,000 requests 0.990x the
    # instructions (16 entries 0.993x, 64 1.000x), the first 4,000 0.994x
    # (benchmarks/README.md, "twenty-second steps", helper pc22).
    ENTRIES_PER_BUCKET = 32
    # A compact cache (a fleet's replica, where memory is what grows) keeps fewer:
    # a wide bucket mostly empty costs its width in slots. It kept one entry a
    # bucket, and its queue's members as a byte a block (a Python step per block
    # freed and evicted); one entry a bucket cuts every run of keys at each entry,
    # so that by key they cost as much again. Measured (Mooncake, `vllm`, 64
    # replicas): the first 2,000 requests under prefix-affinity 9.9125e9
    # instructions that way, 8.8117e9 by key in buckets of 4 entries, 8.7101e9 of
    # 8; the whole trace under round-robin peaked at 134 MB, 142.5 and 146.
    COMPACT_ENTRIES_PER_BUCKET = 4
    exact_take = True  # (`take` evicts exactly the blocks asked for: one key each)

    def __init__(self, compact: bool = False) -> None:
        super().__init__(compact)
        # Integer keys (a trace's hash entries) indexed per entry (key_index.py).
        self.index: KeyIndex = KeyIndex()
        self.others: dict[Hashable, list[int]] = {}
        # The queue's members by key (queue_members.py: a slice of flags per run
        # of keys, where a set took an insert and a delete per block), in a
        # compact cache too (where a `BlockSet`, a byte a block, took a Python
        # step per block freed and evicted: see COMPACT_ENTRIES_PER_BUCKET).
        members = QueueMembers(self.index, self.queue_items)
        self.free_blocks = members
        self._enqueue = members.add
        self._dequeue = members.remove_pairs
        self._dequeue_one = members.remove_pair
        self.runs: deque[list] = deque()
        self.stale: dict[int, int] = {}
        self.ends: dict[int, list] = {}  # a run's last block -> the run (`_take_ends`)
        self.stale_total = self.emptied = 0  # (emptied: runs hits emptied, `_take_ends`)
        # The BlockKeys of each request whose table starts with keyed blocks; the
        # keys of pinned orphans that carry one.
        self.request_keys: dict[str, object] = {}
        # Request id -> (its table, its first block registered but not indexed):
        # the blocks from there to its `registered` carry keys of its own, indexed
        # when it lets go of them (`register`, `release`).
        self.unindexed: dict[str, tuple[list[int], int]] = {}
        self.orphan_keys: dict[int, Hashable] = {}
        self.indexed = 0  # calls that gave keys a block in the index (`holds_found`)
        self.counted_at = -1  # `indexed` at the last `count_free_found`

    # --- the protocol -------------------------------------------------------------

    def register(self, rid, keys, full, table):
        """Every block from `keys.registered` on is new to the cache (a look-up
        shared the keyed ones before it) and takes its key, noted only as the
        request's `keys.registered`. A key not cached yet is indexed to this
        block (the common case, all of them); a key cached already keeps its
        block, and this one is a duplicate."""
        start = keys.registered
        if full <= start:
            return None
        writers = self.writers
        if 0 <= keys.own_from <= start:
            # Keys of the request's own content (its decodes' blocks), which no other request
            # can look up (`block_keys.OWN_KEY`), and this one only once it let go of its
            # table: indexed then (`release`), as one run from the first block left so
            # (`unindexed`). Speed: replaying the Mooncake trace under vllm, 192,531 of the
            # 219,594 registrations that key blocks key only such blocks (150,387 of them one
            # block, a decode's): each was a key made, an index entry and a duplicate test here
            # (benchmarks/README.md, "nineteenth steps", helper pc20). (`PrefixLookups` does
            # this branch's work itself for a request in `unindexed`, no writers: keep alike.)
            unindexed = self.unindexed
            if rid not in unindexed:
                unindexed[rid] = (table, start)
                self.request_keys[rid] = keys
            if writers is not None:
                for i in range(start, full):
                    writers[table[i]] = (rid, i)
            keys.registered = full
            return None
        if keys.known < full:  # (the keys not known yet, as runs: no list)
            keys.ensure(full, False)
        index = self.index
        if keys.hashes is not None and not index.buckets:
            # Buckets of integer keys as wide as several hash entries' blocks
            # (fewer in a compact cache: see COMPACT_ENTRIES_PER_BUCKET).
            slots = -(-keys.hash_block_size // keys.block_size)
            index.set_width(slots * (self.COMPACT_ENTRIES_PER_BUCKET if self.compact
                                     else self.ENTRIES_PER_BUCKET))
        self.request_keys[rid] = keys
        # A slice per run of keys within a bucket (`KeyIndex.add`, the keys read
        # as runs).
        duplicates = index.add(keys, start, full, table)
        self.indexed += 1
        if duplicates:
            others = self.others
            for key, block in duplicates:
                others.setdefault(key, []).append(block)
        if writers is not None:
            for i in range(start, full):
                writers[table[i]] = (rid, i)
        keys.registered = full
        return None

    register_decoded = register

    def find(self, keys, max_blocks):
        """The blocks of the longest run of leading keys cached (see the protocol):
        every key up to `max_blocks` computed (a registration would compute them
        soon: the prompt's), then one walk over them, each hash entry's keys one
        slice of the index (`KeyIndex.find`).

        Speed: was in growing slices (16 blocks, then 4 times as many), keys
        computed only as far as looked up: replaying the Mooncake trace under
        vllm, 24,112 of its 27,812 look-ups computed keys, in 54,804 slices
        (an `ensure` and a `KeyIndex.find` each); now one of each, at 0.984x
        the instructions of the first 2,000 requests (benchmarks/README.md,
        "nineteenth steps", helper pc20)."""
        if keys.known < max_blocks:  # (not past the entries it made new: `ensure_new`)
            max_blocks = keys.ensure_new(max_blocks)
        return self.index.find(keys, 0, max_blocks)[0]

    def holds_found(self, keys, hits):
        """Whether `find` answers `hits` (all held at the last `count_free_found`) again
        for `keys`: nothing indexed since that count, no duplicate cached, and the last
        of them still held under its key (the proof: `PrefixLookups.lookup`)."""
        return (self.counted_at == self.indexed and not self.others
                and (not hits or self.free_blocks.held(hits[-1], keys.key_at(len(hits) - 1))))

    def on_share(self, rid, blocks, keys, has_blocks):
        """A shared block's key stays known only through its owners: `blocks` must
        be what a look-up with `keys` found for `rid`'s empty table; they become
        its first registered blocks."""
        if keys is None or has_blocks:
            raise InvariantError(
                f"request {rid!r} shares cached blocks without their keys, or "
                "after blocks of its own (vLLM's cache keys a table's leading blocks)")
        if keys.known < len(blocks):  # (known already at every share replaying Mooncake)
            keys.ensure(len(blocks), False)
        keys.registered = len(blocks)
        self.request_keys[rid] = keys

    def hit(self, block: int) -> None:
        """Take free cached `block` out of the queue (a hit): its entry in `runs`
        becomes stale. Once stale entries and emptied runs outnumber the queue,
        `runs` is rebuilt (`RunQueue._rebuild_if_stale`)."""
        free = self.free_blocks
        free.remove(block)  # (by block alone: read from the queue)
        stale = self.stale
        stale[block] = stale.get(block, 0) + 1
        self.stale_total += 1
        self._rebuild_if_stale()
        free.changed()

    def hits(self, blocks):
        """`hit` for every free cached block among `blocks`, in bulk (set operations
        in C: replaying the Mooncake trace under vllm, 12,333 admissions share
        615,217 blocks, 207,161 of them free cached ones); return them as a set."""
        free = self.free_blocks
        found = self._hit_stale(set(free.take_blocks(blocks)))  # (keys read from the queue)
        free.changed()
        return found

    def hits_found(self, blocks, keys):
        """`hits` for `blocks`, which a look-up found for `keys` (a `BlockKeys`): a
        slice of the queue's flags per run of keys (`QueueMembers.hit_found`)."""
        free = self.free_blocks
        found = free.hit_found(blocks, keys)
        if found:  # (those not taken off the runs' ends are left behind, stale)
            self._hit_stale(self._take_ends(blocks, found))
        free.changed()
        return found

    def _hit_stale(self, found):
        """The queue entries of blocks a hit took out (`found`) become stale."""
        if not found:
            return found
        stale = self.stale
        again = stale.keys() & found  # blocks with stale entries already: one more each
        for block in again:
            stale[block] += 1
        stale.update(dict.fromkeys(found - again if again else found, 1))
        self.stale_total += len(found)
        self._rebuild_if_stale()
        return found

    def count_free(self, blocks):
        """How many of `blocks` are in the queue (by block alone: a set of the
        queue's blocks, made once while it is unchanged)."""
        free = self.free_blocks
        return sum(1 for block in blocks if block in free)

    def count_free_found(self, blocks, keys):
        """`count_free` for `blocks`, which a look-up found for `keys` (a
        `BlockKeys`): a count of a slice of the queue's flags per run of keys."""
        self.counted_at = self.indexed  # (the moment `holds_found` speaks of)
        return self.free_blocks.count_found(blocks, keys)

    def take(self, rid, table, count):
        """Evict the `count` least recently freed blocks into `table`: one eviction
        each; a duplicate takes an evicted block's place in the index."""
        if count == 1 and self.report is None:
            # One block (a decode opening a block), inlined from the lines
            # below and `forget_key`: 140,776 of the 209,727 takes replaying the
            # Mooncake trace under vllm (measured with `register`'s inline, above).
            # (the queue's flag and the index's slot cleared together,
            # `QueueMembers.evict_one`, with no duplicate cached)
            others = self.others
            block, key = self.pop_one(not others)
            if others:
                self.forget_key(block, key)
            table.append(block)
            return _ONE_TAKEN
        index = self.index
        others = self.others
        if not others and count < self.free_blocks.size:
            # One block per key, each its key's index entry: forgotten run by run
            # as the queue gives them, no list of their keys made, each run's
            # blocks straight into `table`.
            self._pop_oldest_forgetting(count, table)
        else:
            taken, keys = self.pop_oldest(count)
            if not others:
                index.forget(keys, 0, taken)
            else:
                for block, key in zip(taken, keys):
                    if key is None:  # (a block without a key: `release` of an ended request)
                        continue
                    if index[key] == block and key not in others:
                        del index[key]
                    else:
                        self.forget_key(block, key)
            table.extend(taken)
        if self.report is not None:
            self._report_writers(rid, table[len(table) - count:])
        return count, ()

    def evict_until(self, count):
        """Evict least recently freed blocks, one at a time (see the protocol)."""
        groups = []
        writers = self.writers
        while self.free_blocks and len(groups) < count:
            (block,), (key,) = self.pop_oldest(1)
            self.forget_key(block, key)
            if writers is not None:
                writers.pop(block, None)
            groups.append([block])
        return groups

    def give_back(self, blocks, keyed=(), keys=()):
        """`keyed` join the queue's tail as one run with their `keys`; `blocks`
        are plain."""
        if keyed:
            # With no duplicate cached, each block is its key's in the index: a
            # freed table's own keys set a run's flags without comparing
            # (`QueueMembers.add`), in a compact cache (a fleet's replica) too.
            # Speed: 64 replicas on the first 2,000 Mooncake requests took 0.987x
            # (prefix-affinity) and 0.983x (round-robin) the instructions of
            # comparing (benchmarks/README.md, "twelfth steps", helper flt8).
            indexed = not self.others
            if type(keys) is not TailFirstRuns:
                self._enqueue(keyed, keys, indexed)
                self.append_run(keyed, keys)
                return blocks
            # A freed table's keys as runs (`tail_first`): each run of keys going
            # down (a `range`) and the tail's keys join the queue as runs of
            # their own, in the same order, all in two calls.
            pieces = keys.pieces
            self.free_blocks.add_runs(self.append_runs(keyed, pieces), pieces, indexed)
        return blocks

    def release(self, rid, ended=False):
        """The request's registered leading blocks carry their keys: its
        `BlockKeys`, read as runs by the allocator (`tail_first`). The blocks
        `register` left unindexed (keys of its own content, `block_keys.OWN_KEY`)
        are indexed now, the first moment anyone (the request itself, after a
        preemption) could look them up; if it `ended`, nobody ever can, so their
        keys are neither made nor indexed: they join the queue as blocks cached
        without a key (`tail_first.NoKeys`), in the same order, evicted and
        counted as before, and nothing is forgotten for them.

        Speed (`ended`): replaying the Mooncake trace under vllm, about 255,000
        such blocks (3% of those freed) cost about 1 us each in all, made,
        indexed, held in `QueueMembers.loose` and forgotten key by key: 5-7% of
        the run (benchmarks/README.md, "twenty-second steps", helpers pc22 and
        pc23)."""
        keys = self.request_keys.pop(rid, None) if self.request_keys else None
        if keys is None:
            return 0, ()
        if self.unindexed:
            left = self.unindexed.pop(rid, None)
            if left is not None:
                if ended:
                    count = keys.registered
                    return count, tail_first(keys, count, count - left[1])
                self._index_own(keys, *left)
        return keys.registered, keys

    def _index_own(self, keys, table, start) -> None:
        """Index the keys of `table[start:keys.registered]`, blocks `register` left
        unindexed (keys of the request's own content, bytes), as `register`
        would have one by one: a key cached already keeps its block, and this
        one is a duplicate, after any before it."""
        end = keys.registered
        if keys.known < end:
            keys.ensure(end, False)
        ints = keys.ints  # (`start` is past every integer key: own keys only)
        fresh = keys.tail[start - ints:end - ints]
        blocks = table[start:end]
        found = list(map(self.index.plain.setdefault, fresh, blocks))
        self.indexed += 1
        if found != blocks:
            others = self.others
            for key, block, cached in zip(fresh, blocks, found):
                if cached != block:
                    others.setdefault(key, []).append(block)

    def owned_elsewhere(self, keyed, extra):
        """Which of `keyed` (a released table's first blocks, last first) others
        own too: a run of its last blocks (`owned_lead`) but with duplicates."""
        if self.others:
            return extra.keys() & keyed
        lead = self.owned_lead(keyed, extra)
        return set(keyed[len(keyed) - lead:]) if lead else set()

    def owned_lead(self, keyed, extra):
        """With no duplicate key cached, the blocks of `keyed` (a released table's
        leading blocks, last first) others own too are the table's first h blocks
        for some h (the tail of `keyed`): h, found by a binary search (None with
        a duplicate cached). Why a run: another owner got a block at position i
        by sharing what a look-up found, the blocks indexed to keys 0 to i (a key
        fixes a block's position), this table's own unless one was a duplicate,
        which stays in `others` while both are held.

        Speed: was a block -> position dict written per shared block (615,217 in
        12,333 shares, Mooncake under vllm) and a step per block at each release:
        about 3% of that replay's samples; now a few `in` tests, h at most the
        blocks with extra owners (about 40 against 33 shared of 772 keyed), tried
        first; a count, not a set of the blocks, which the allocator drops from a
        slice (the first 2,000 requests 0.985x the instructions with
        `add_runs`: benchmarks/README.md, "twenty-ninth steps", helper rel31)."""
        if self.others:
            return None
        top = len(keyed) - 1
        hi = len(extra)
        if hi > top + 1:
            hi = top + 1
        if not hi or keyed[top - hi + 1] in extra:  # (the block at position hi - 1)
            return hi
        lo = 0  # blocks at positions below lo have other owners
        hi -= 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if keyed[top - mid + 1] in extra:  # (the block at position mid - 1)
                lo = mid
            else:
                hi = mid - 1
        return lo

    def keep_orphan_keys(self, pairs):
        """Keep the (block, key) pairs of pinned blocks nobody owns any more."""
        self.orphan_keys.update(pairs)

    def orphan_key(self, block):
        """Forget and return the key kept for pinned orphan `block`, if any."""
        return self.orphan_keys.pop(block, None)

    audit = audit_vllm  # the cache's full check (vllm_audit.py)

    def forget_key(self, block: int, key) -> None:
        """Drop `block`'s `key`; a duplicate of it takes its place in the index
        (None: a block without a key, `release` of an ended request, nothing to drop)."""
        if key is None:
            return
        others = self.others
        if self.index[key] == block:
            rest = others.get(key)
            if rest:
                self.index[key] = heir = rest.pop(0)
                self.indexed += 1
                self.free_blocks.promote(key, heir)  # (a free heir's moves to its key)
                if not rest:
                    del others[key]
            else:
                del self.index[key]
        else:
            rest = others[key]
            rest.remove(block)
            if not rest:
                del others[key]
