"""The radix tree's `node_at` named at each node's ends (kv/radix_cache.py,
kv/free_queue.py `ends_only`, `holder`, `runs`), on tiny hand-computed cases:
pool of 10, blocks of 4 tokens, hash entries of 8 (2 blocks each)."""
from __future__ import annotations

import itertools

import pytest

from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.radix_cache import RadixCache
from scheduler_sim.records.errors import InvariantError


def _hashed(index: int, hashes: list[int]) -> BlockKeys:
    """A request of 24 prompt tokens with hash ids per 8 tokens, blocks of 4."""
    return BlockKeys(index, 24, 4, 8, hashes=hashes)


def _freed_a() -> tuple[BlockAllocator, RadixCache]:
    """A writes 26 rows into blocks [0..6]: its 6 prompt blocks are node 0, named
    at blocks 0 and 5 only; freed, 6 is plain and node 0 is free whole."""
    a = BlockAllocator(10, 4, cache=RadixCache())
    a.grow("A", 26)
    a.register_full_blocks("A", _hashed(0, [1, 2, 3]), 26)
    a.free_request("A", 0, 0)
    return a, a.cache


def test_a_new_node_is_named_at_its_ends_and_found_by_its_middle_blocks():
    """Node 0 = [0..5]: `node_at` is [0, -, -, -, -, 0] and node 0 is in `ends_only`;
    a middle block's node is found in its blocks (3 -> 0), a plain block has none;
    `node_of` is every block's; the audit passes."""
    a, c = _freed_a()
    assert (c.node_at, list(c.ends_only)) == ([0, None, None, None, None, 0], [0])
    assert (c._node(3), c._node(6), c._node(9), c.node_of) == (
        0, None, None, {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 0})
    assert (list(c.free_blocks), 3 in c.free_blocks, 6 in c.free_blocks) == (
        [5, 4, 3, 2, 1, 0], True, False)
    a.audit()


def test_a_look_up_that_ends_in_a_middle_block_splits_its_node_named_at_the_ends():
    """B (entries 1, 2, 9) finds [0..3], ending at block 3, a middle block of node 0:
    the split's head, node 1 = [0..3], is named at 0 and 3 and joins `ends_only`;
    node 0 keeps [4, 5], named at 4 now. B shares the hit (a whole node: a count,
    no block asked), counts it registered and writes [6, 7] (node 2, two blocks:
    named whole, not in `ends_only`) and [8] plain; freed, node 1, then 2, are given back a node at a
    time. Evicting node 0 drops it from `ends_only`."""
    a, c = _freed_a()
    kb = _hashed(1, [1, 2, 9])
    hits = a.lookup(kb, 6)
    assert hits == [0, 1, 2, 3]
    assert (c.node_at, sorted(c.ends_only)) == ([1, None, None, 1, 0, 0], [0, 1])
    assert (a.evictable(hits), c.count_free([0, 1]), sorted(c.ends_only)) == (4, 2, [0, 1])
    a.share("B", hits, kb)
    kb.registered = 4  # (as a replay counts a hit)
    a.grow("B", 26)
    a.register_full_blocks("B", kb, 26)
    assert (a.table("B"), c.node_at[6:8], sorted(c.ends_only)) == (
        [0, 1, 2, 3, 6, 7, 8], [2, 2], [0, 1])
    a.audit()
    a.free_request("B", 0, 0)
    assert list(c.free_blocks) == [5, 4, 7, 6, 3, 2, 1, 0]
    a.audit()
    a.evict_until(4)  # (2 plain blocks, so one node of 2 goes)
    assert (sorted(c.nodes), sorted(c.ends_only)) == ([1, 2], [1])
    a.audit()


def test_a_node_named_whole_splits_into_a_head_named_whole():
    """Node 0 named at every block first (`write_ends_only`): B's look-up splits it
    after block 3, and the head (node 1) is named at every block too."""
    a, c = _freed_a()
    c.free_blocks.write_ends_only()
    assert (c.node_at, c.ends_only) == ([0, 0, 0, 0, 0, 0], {})
    assert a.lookup(_hashed(1, [1, 2, 9]), 6) == [0, 1, 2, 3]
    assert (c.node_at, c.ends_only) == ([1, 1, 1, 1, 0, 0], {})
    a.audit()


def test_hits_on_part_of_a_node_name_every_node_first():
    """A hit on [0, 1, 2], part of node 0 (no look-up split it): the node is held in
    part from now on, so every node in `ends_only` is named whole before the
    blocks are asked one by one; the three leave the free queue and node 0 is
    loose. Counting [0, 1, 2] free before is a count per node (no naming)."""
    a, c = _freed_a()
    assert (c.count_free([0, 1, 2]), list(c.ends_only)) == (3, [0])
    assert c.hits([0, 1, 2]) == {0, 1, 2}
    assert (c.node_at, c.ends_only, list(c.free_blocks), c.nodes[0][7]) == (
        [0, 0, 0, 0, 0, 0], {}, [5, 4, 3], True)


def test_blocks_not_of_that_shape_are_counted_a_block_at_a_time():
    """`runs` of [0..5] is one run; of [0..3] one leading part; of [1, 2] (not from a
    node's first block), [0, 2] (not the node's) and [6] (plain) none: counting
    those names every node first."""
    a, c = _freed_a()
    runs = c.free_blocks.runs
    assert ([n for _, n in runs([0, 1, 2, 3, 4, 5])], [n for _, n in runs([0, 1, 2, 3])],
            runs([1, 2]), runs([0, 2]), runs([6])) == ([6], [4], None, None, None)
    assert (c.count_free([1, 2]), c.ends_only) == (2, {})
    assert c.count_free([6]) == 0


def test_a_registration_that_finds_keys_cached_names_every_node_first():
    """B counted nothing registered: its run starts with its hit [0..3], cached
    already, whose blocks are asked one by one: every node is named whole first."""
    a, c = _freed_a()
    kb = _hashed(1, [1, 2, 9])
    a.share("B", a.lookup(kb, 6), kb)
    a.grow("B", 26)
    a.register_full_blocks("B", kb, 26)
    assert (a.table("B"), c.node_at, c.ends_only) == (
        [0, 1, 2, 3, 6, 7, 8], [1, 1, 1, 1, 0, 0, 2, 2], {})
    a.audit()


def test_the_audit_names_a_wrong_entry_and_a_node_held_in_part():
    """A middle block's entry naming another live node, and a table holding part of a
    node in `ends_only`, are each refused."""
    a, c = _freed_a()
    hits = a.lookup(_hashed(1, [1, 2, 9]), 6)  # node 1 = [0..3], node 0 = [4, 5]
    c.node_at[1] = 0
    with pytest.raises(InvariantError, match="node_at names 0 for its block 1"):
        c.audit({}, [], set())
    c.node_at[1] = None
    c.audit({}, [], set())
    with pytest.raises(InvariantError, match="hold 2 of its 4 blocks"):
        c.audit({"B": hits[:2]}, [], set())


_UNUSED_HASH_IDS = itertools.count(1 << 30, 16)


def _held_in_part(pool: int) -> tuple[BlockAllocator, RadixCache]:
    """A's node 0 = [0..5] (its keys one run: a `range`) free; B shares [0, 1],
    part of it (every node named whole first: node 0 loose, [5, 4, 3, 2] free), and
    writes 10 rows ([0, 1, 6], nothing new keyed); C (entries 5, 6) writes 12 rows
    into [7, 8, 9], node 1 (its keys a `range` too), named at 7 and 9 only, in
    `ends_only`."""
    a = BlockAllocator(pool, 4, cache=RadixCache())
    c = a.cache
    # Hash ids no other test uses: the interning table is shared by every key chain
    # alive in the process, and a chain some earlier test interned (and something
    # still holds) keeps its old ids, which need not be one run with the new ones.
    h = next(_UNUSED_HASH_IDS)
    a.grow("A", 26)
    a.register_full_blocks("A", _hashed(0, [h + 1, h + 2, h + 3]), 26)
    a.free_request("A", 0, 0)
    a.share("B", [0, 1], BlockKeys(1, 32, 4, 8, hashes=[h + 1, h + 7, h + 8, h + 9]))
    a.grow("B", 10)
    a.grow("C", 12)
    a.register_full_blocks("C", _hashed(2, [h + 5, h + 6]), 12)
    assert (a.table("B"), a.table("C"), list(c.free_blocks)) == ([0, 1, 6], [7, 8, 9],
                                                                 [5, 4, 3, 2])
    assert (c.node_at, list(c.ends_only), c.nodes[0][7]) == (
        [0, 0, 0, 0, 0, 0, None, 1, None, 1], [1], True)
    assert [(type(c.nodes[n][4]), len(c.nodes[n][4])) for n in (0, 1)] == [(range, 6),
                                                                          (range, 3)]
    a.audit()
    return a, c


def test_a_block_evicted_alone_names_every_node_first():
    """Pool of 10 (`_held_in_part`, no plain block free): C grows to 20 rows, two
    blocks more; no whole node can go (node 0 is held in part, node 1 whole), so
    the least recently freed blocks go alone, 5 then 4 (`pop_oldest`, which names
    node 1 whole first), taken out of node 0 from its end (its keys still a
    range, the first 4)."""
    a, c = _held_in_part(10)
    keys = c.nodes[0][4]
    a.grow("C", 20)
    assert (a.table("C"), list(c.free_blocks), c.ends_only) == ([7, 8, 9, 5, 4], [3, 2], {})
    assert (c.node_at[4:], c.nodes[0][0], c.nodes[0][4]) == (
        [None, None, None, 1, 1, 1], [0, 1, 2, 3], keys[:4])
    assert type(c.nodes[0][4]) is range
    a.audit()


def test_a_table_freed_part_way_through_a_node_names_every_node_first():
    """Pool of 16 (`_held_in_part`): B's table [0, 1, 6], freed tail first, is plain 6
    and then [1, 0], part of node 0: not whole nodes, so every node is named whole
    first (node 1 at 8 too) and each block's entry read (`give`); node 0 is free
    whole again, [1, 0] at the tail."""
    a, c = _held_in_part(16)
    a.free_request("B", 0, 0)
    assert (c.node_at, c.ends_only, list(c.free_blocks), a.free) == (
        [0, 0, 0, 0, 0, 0, None, 1, 1, 1], {}, [5, 4, 3, 2, 1, 0], 13)
    a.audit()


def test_the_free_queues_compaction_names_every_node_first():
    """`_compact` (the free queue's, when stale entries pile up) reads each live
    block's entry: node 0 (`_freed_a`, batch 1) is named whole first, and its
    blocks become batch 2, in the same order."""
    a, c = _freed_a()
    queue = c.free_blocks
    assert (queue.batches, c.node_at, list(c.ends_only)) == (
        {1: [[5, 4, 3, 2, 1, 0], 6, 0]}, [0, None, None, None, None, 0], [0])
    queue._compact()
    assert (queue.batches, queue.entries, c.node_at, c.ends_only, c.nodes[0][6]) == (
        {2: [[5, 4, 3, 2, 1, 0], 6, 0]}, 6, [0, 0, 0, 0, 0, 0], {}, 2)
    assert list(queue) == [5, 4, 3, 2, 1, 0]
    a.audit()
