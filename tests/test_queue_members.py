"""vLLM's queue members kept by key (kv/queue_members.py): flags beside the index's
buckets written a run of keys at a time, other blocks in `loose`."""
from __future__ import annotations

import pytest

from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.key_index import KeyIndex
from scheduler_sim.kv.queue_members import QueueMembers
from scheduler_sim.kv.tail_first import NoKeys
from scheduler_sim.kv.vllm_cache import VllmCache


def small_queue():
    """Buckets of 4 keys: keys 4..7 index blocks 10..13 (bucket 1), key 8 block 14
    (bucket 2), key b"r" block 15. A table [10..15] freed tail first, block 10 still
    held elsewhere: blocks 15, 14, 13, 12, 11 with keys b"r", 8, 7, 6, 5."""
    index = KeyIndex(4)
    assert index.add([4, 5, 6, 7, 8, b"r"], 0, 6, [10, 11, 12, 13, 14, 15]) == []
    order: list = []
    members = QueueMembers(index, lambda: (list(order[0::2]), list(order[1::2])))
    blocks, keys = [15, 14, 13, 12, 11], [b"r", 8, 7, 6, 5]
    members.add(blocks, keys)
    for block, key in zip(blocks, keys):
        order += [block, key]
    return index, members, order


def test_a_freed_table_sets_one_slice_of_flags_per_run_of_keys():
    index, members, order = small_queue()
    assert (dict(members.flags), members.loose, len(members)) == (
        {1: bytearray([0, 1, 1, 1]), 2: bytearray([1, 0, 0, 0])}, {15}, 5)
    assert (12 in members, 10 in members, 15 in members, 99 in members) == (True, False, True, False)
    members.check(order[0::2], order[1::2])


def test_a_look_ups_hits_are_counted_and_taken_by_key():
    """Blocks 10..14 found for keys 4..8: 11..14 are free (4); a hit on 10, 11 takes 11."""
    index, members, order = small_queue()
    assert members.count_found([10, 11, 12, 13, 14], [4, 5, 6, 7, 8]) == 4
    assert members.count_found([10, 11], [4, 5]) == 1
    assert members.hit_found([10, 11], [4, 5]) == {11}
    assert (members.flags[1], len(members)) == (bytearray([0, 0, 1, 1]), 4)
    # Keys that name other blocks than the hint's are answered block by block.
    assert members.count_found([12, 13], [4, 5]) == 2


def test_a_duplicate_is_loose_until_it_takes_its_keys_place():
    """Block 16 also carries key 4 (indexed to 10): loose; evicting blocks 13, 12
    (keys 7, 6) clears their flags and index entries in one walk."""
    index, members, order = small_queue()
    members.add([16], [4])
    assert (members.loose, len(members)) == ({15, 16}, 6)
    members.promote(4, 16)  # the index now names 16 for key 4
    assert (members.loose, members.flags[1]) == ({15}, bytearray([1, 1, 1, 1]))
    index[4] = 16
    members.evict([13, 12], [7, 6], 0)
    assert (index.get(7), index.get(6), members.flags[1], len(members)) == (
        None, None, bytearray([1, 1, 0, 0]), 4)
    members.remove_pairs([15, 14], [b"r", 8])
    assert (members.loose, 2 in members.flags, len(members)) == (set(), False, 2)
    members.remove_pair(16, 4)
    members.remove_pair(11, 5)
    assert (len(members), members.flags) == (0, {})  # (a bucket of no flag goes)


@pytest.mark.parametrize("keyed_by_lookup", [True, False])
def test_the_allocator_counts_its_last_look_ups_hits_by_key(keyed_by_lookup):
    """Pool of 4, blocks of 4: A's 12 rows key blocks 0, 1, 2; A lets go (all three
    free cached). B's look-up finds [0, 1]: both free, counted by key (the look-up's
    own list) or by block (a copy) alike."""
    a = BlockAllocator(4, 4, cache=VllmCache())
    ka = BlockKeys(0, 12, 4, 8, hashes=[1, 2])
    a.grow("A", 12)
    a.register_full_blocks("A", ka, 12)
    a.free_request("A", 0, 0)
    kb = BlockKeys(1, 12, 4, 8, hashes=[1, 2])
    hits = a.lookup(kb, 2)
    assert hits == [0, 1]
    assert a.evictable(hits if keyed_by_lookup else list(hits)) == 2
    a.share("B", hits, kb)
    assert (a.cached_free, a.evictable([0, 1, 2])) == (1, 1)


def test_members_by_key_agree_with_the_queue_on_random_hash_id_workloads():
    """Random prompts of hash ids from three prefixes (entries of 8 tokens, blocks of
    4), look-ups cut short at random (later blocks are then duplicates), releases
    with and without a delay, a pool of 24: at every look-up the count by key
    (`evictable` of the look-up's own answer) is the count of its blocks in the
    queue, and the audit (`QueueMembers.check`) passes after every change. Seeded:
    156 look-ups, 68 of them with free blocks, 89 with duplicates cached."""
    import random
    r = random.Random(3)
    a = BlockAllocator(24, 4, cache=VllmCache())
    cache = a.cache
    prefixes = [[1, 2, 3], [1, 2, 7], [9, 10]]
    seen = {"look-ups": 0, "with free blocks": 0, "with duplicates": 0}
    live = []
    for step in range(300):
        a.release_expired(step)
        if live and (r.random() < 0.45 or len(live) > 4):
            a.free_request(live.pop(r.randrange(len(live))), step, r.choice((0, 0, 2)))
            a.audit()
            continue
        hashes = r.choice(prefixes) + [100 + r.randrange(3) for _ in range(r.randrange(3))]
        tokens = 8 * len(hashes) - r.randrange(8)
        keys = BlockKeys(step, tokens, 4, 8, hashes=hashes)
        cut = r.random() < 0.1
        hits = a.lookup(keys, r.randrange(tokens // 4 + 1) if cut else tokens // 4)
        queued = set(cache.queue_items()[0])
        free = a.evictable(hits)
        assert free == sum(1 for block in hits if block in queued) == a.evictable(list(hits))
        seen["look-ups"] += 1
        seen["with free blocks"] += free > 0
        seen["with duplicates"] += bool(cache.others)
        if -(-tokens // 4) - len(hits) + free > a.free:
            continue
        a.share(f"r{step}", hits, keys)
        a.grow(f"r{step}", tokens)
        a.register_full_blocks(f"r{step}", keys, tokens)
        a.audit()
        live.append(f"r{step}")
    assert seen == {"look-ups": 156, "with free blocks": 68, "with duplicates": 89}


def test_a_hit_asked_partly_by_block_leaves_no_stale_set_of_members():
    """A's blocks 0, 1, 2 (keys k, k + 1, k + 2 of one entry) are free. A hit on
    [0, 1, 7] with keys [k, k + 1, k + 1000]: 0 and 1 by their flags; the last key
    names no block, so 7 is asked
    by block alone, through a set made from the queue, which still lists 0 and 1
    (their entries are marked stale after): that set is dropped, and 0 is no member."""
    a = BlockAllocator(8, 4, cache=VllmCache())
    ka = BlockKeys(0, 12, 4, 12, hashes=[5])
    a.grow("A", 12)
    a.register_full_blocks("A", ka, 12)
    a.free_request("A", 0, 0)
    k = ka.keys[0]  # (entries are interned process-wide: k depends on earlier tests)
    assert ka.keys == [k, k + 1, k + 2]

    class Keys:  # (keys k, k + 1, k + 1000, as a `BlockKeys` holds them: runs)
        ints, run_pos, run_key, tail = 3, [0, 2], [k, k + 1000], []
    members = a.cache.free_blocks
    assert a.cache.hits_found([0, 1, 7], Keys) == {0, 1}
    assert (0 in members, 2 in members, len(members), list(members)) == (False, True, 1, [2])
    members.check(*a.cache.queue_items())


def test_a_compact_cache_keeps_its_queue_members_by_key_too():
    """A fleet's replica (compact): entries of 8 tokens, blocks of 4, so buckets of
    2 x COMPACT_ENTRIES_PER_BUCKET = 8 keys. A's 24 rows (hash ids 7, 8, 9) key
    blocks 0..5 with keys k..k+5; A lets go: the six are free, each flagged under
    its key (none loose). B's look-up finds [0, 1, 2, 3], counted and hit by key:
    two free blocks left (4 and 5). C's 8 rows evict them, tail first (5, 4), and
    their flags go with their index entries: no flag, no member left."""
    a = BlockAllocator(6, 4, cache=VllmCache(compact=True))
    members = a.cache.free_blocks
    assert type(members) is QueueMembers
    ka = BlockKeys(0, 24, 4, 8, hashes=[7, 8, 9])
    a.grow("A", 24)
    a.register_full_blocks("A", ka, 24)
    a.free_request("A", 0, 0)
    first = ka.keys[0]
    assert (a.cache.index.width, ka.keys, len(members), members.loose) == (
        8, list(range(first, first + 6)), 6, set())
    assert {(node, off) for node, fb in members.flags.items()
            for off in range(8) if fb[off]} == {divmod(first + i, 8) for i in range(6)}
    kb = BlockKeys(1, 17, 4, 8, hashes=[7, 8, 10])
    hits = a.lookup(kb, 4)
    assert (hits, a.evictable(hits)) == ([0, 1, 2, 3], 4)
    a.share("B", hits, kb)
    assert (len(members), a.audit()) == (2, None)
    a.grow("C", 8)
    assert (a._tables["C"], len(members), members.flags, a.cache.index.get(first + 4)) == (
        [5, 4], 0, {}, None)
    a.audit()


def test_a_run_of_keys_going_down_is_evicted_by_its_first_key():
    """`evict_down(8, [14, 13, 12])`: key 8 is bucket 2's only one (it goes, with its
    count and flags); keys 7, 6 are one slice of bucket 1 (2 of its 4 left). Then
    key 5 alone: bucket 1 keeps block 10 (held, not in the queue) and zero flags.
    A block the index does not name for its key raises KeyError, as `forget` does."""
    index, members, order = small_queue()
    changes = index.changes
    members.evict_down(8, [14, 13, 12])
    assert (index.buckets, index.filled, dict(members.flags), len(members)) == (
        {1: [10, 11, None, None]}, {1: 2}, {1: bytearray([0, 1, 0, 0])}, 2)
    assert (index.changes - changes, index.plain, members.loose) == (1, {b"r": 15}, {15})
    members.evict_down(5, [11])
    assert (index.buckets, index.filled, dict(members.flags), len(members)) == (
        {1: [10, None, None, None]}, {1: 1}, {1: bytearray(4)}, 1)
    with pytest.raises(KeyError):
        members.evict_down(4, [99])


def test_one_block_evicted_clears_its_flag_and_its_index_entry_together():
    """`evict_one`: block 14 (key 8, bucket 2's only key) takes its bucket, count and
    flags along; block 13 (key 7) one slot and one flag of bucket 1; block 15 (key
    b"r") leaves `loose` and the plain keys. Blocks without keys (`NoKeys`) leave
    `loose` through `evict`, no key forgotten (no change to the buckets counted)."""
    index, members, order = small_queue()
    members.evict_one(14, 8)
    assert (2 in index.buckets, 2 in index.filled, 2 in members.flags, len(members)) == (
        False, False, False, 4)
    members.evict_one(13, 7)
    assert (index.buckets[1], index.filled[1], members.flags[1], len(members)) == (
        [10, 11, 12, None], 3, bytearray([0, 1, 1, 0]), 3)
    members.evict_one(15, b"r")
    assert (index.plain, members.loose, len(members)) == ({}, set(), 2)
    with pytest.raises(KeyError):
        members.evict_one(13, 7)  # (forgotten already)
    members.add([20, 21], NoKeys(2))
    changes = index.changes
    members.evict([21, 20], NoKeys(2), 0)
    assert (members.loose, len(members), index.changes) == (set(), 2, changes)


def test_a_take_hands_out_its_runs_straight_into_the_table():
    """Pool of 8, blocks of 4, entries of 16 tokens (one a table): A and then B let
    go of 4 keyed blocks each, two runs ([3, 2, 1, 0] and [7, 6, 5, 4], a `range` of
    keys each). Evicting 5 into a table [9] appends A's run whole, its keys
    forgotten, and B's first block; B's run goes on from its second."""
    a = BlockAllocator(8, 4, cache=VllmCache())
    for rid, entry in (("A", 31), ("B", 32)):
        keys = BlockKeys(0, 16, 4, 16, hashes=[entry])
        a.grow(rid, 16)
        a.register_full_blocks(rid, keys, 16)
        a.free_request(rid, 0, 0)
    cache = a.cache
    run_a, run_b = cache.runs
    assert (run_a[0], run_b[0], type(run_a[1])) == ([3, 2, 1, 0], [7, 6, 5, 4], range)
    table = [9]
    assert cache._pop_oldest_forgetting(5, table) is None
    assert (table, list(cache.runs), run_b[2], cache.ends) == ([9, 3, 2, 1, 0, 7], [run_b], 1, {4: run_b})
    assert (len(cache.free_blocks), len(cache.index)) == (3, 3)
    cache.free_blocks.check(*cache.queue_items())
