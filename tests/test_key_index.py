"""vLLM's cache index with integer keys per hash entry (`kv/key_index.py`): exact
buckets for tiny cases, a random sequence of operations against a dict, and the
eviction path that forgets keys where the queue's runs hold them."""
from __future__ import annotations

import random

import pytest

from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv import key_index, key_pieces
from scheduler_sim.kv.key_index import KeyIndex
from scheduler_sim.kv.radix_index import RadixIndex
from scheduler_sim.records.errors import InvariantError
from scheduler_sim.kv.vllm_cache import VllmCache


def test_an_entrys_keys_are_one_bucket_slice_and_other_keys_a_dict():
    """Width 4: keys 6..11 are offsets 2, 3 of bucket 1 and 0..3 of bucket 2; a
    bytes key goes to `plain`. Key 7 again with another block is a duplicate."""
    index = KeyIndex(4)
    keys = [6, 7, 8, 9, 10, 11, b"r0:6"]
    table = [50, 51, 52, 53, 54, 55, 56]
    assert index.add(keys, 0, 7, table) == []
    assert index.buckets == {1: [None, None, 50, 51], 2: [52, 53, 54, 55]}
    assert index.plain == {b"r0:6": 56}
    assert index.add([7, 8], 0, 2, [60, 52]) == [(7, 60)]  # 8 -> 52 already
    assert (index.get(7), index[11], 5 in index, len(index)) == (51, 55, False, 7)
    assert index == {6: 50, 7: 51, 8: 52, 9: 53, 10: 54, 11: 55, b"r0:6": 56}
    # A look-up stops at the first key not indexed.
    assert index.find([6, 7, 8, 9, 10, 11, 12], 0, 7) == ([50, 51, 52, 53, 54, 55], False)
    assert index.find([8, 9, 10, 11, b"r0:6"], 1, 5) == ([53, 54, 55, 56], True)



def test_a_look_up_stops_at_a_gap_at_a_pieces_start_inside_it_or_at_a_missing_bucket():
    """Width 4, blocks 0 (a block that sums to nothing), 5, 6 at keys 0, 1, 2 and 7
    at key 5: each piece a look-up walks ends in one of its three ways."""
    index = KeyIndex(4)
    index.add([0, 1, 2, 5], 0, 4, [0, 5, 6, 7])
    assert index.buckets == {0: [0, 5, 6, None], 1: [None, 7, None, None]}
    # Bucket 0 whole, then a gap inside it (key 3): the blocks before it.
    assert index.find([0, 1, 2, 3, 4], 0, 5) == ([0, 5, 6], False)
    # Bucket 0's slice full, then bucket 1 starting at its gap (key 4).
    assert index.find([1, 2, 4, 5], 0, 4) == ([5, 6], False)
    # Key 5, then a bucket no key has (keys 8, 9): the one block.
    assert index.find([5, 8, 9], 0, 3) == ([7], False)
    assert index.find([0, 1, 2], 0, 3) == ([0, 5, 6], True)

def test_keys_not_consecutive_are_added_one_bucket_run_at_a_time():
    """Keys 1, 2 then 5 (width 4): 1, 2 share bucket 0, 5 is bucket 1 offset 1."""
    index = KeyIndex(4)
    assert index.add([1, 2, 5], 0, 3, [7, 8, 9]) == []
    assert index.buckets == {0: [None, 7, 8, None], 1: [None, 9, None, None]}


def test_forgetting_a_freed_tables_tail_first_order_clears_slices():
    """A freed table's keys come last first: 11, 10, 9, 8 clear bucket 2 (then
    dropped), 7, 6 the top of bucket 1; a bytes key leaves `plain`. A window
    whose blocks are not where its keys would put them is taken key by key."""
    index = KeyIndex(4)
    index.add([6, 7, 8, 9, 10, 11, b"x"], 0, 7, [50, 51, 52, 53, 54, 55, 56])
    index.forget([b"x", 11, 10, 9, 8, 7], 0, [56, 55, 54, 53, 52, 51])
    assert (index.buckets, index.plain) == ({1: [None, None, 50, None]}, {})
    with pytest.raises(KeyError):
        index.forget([6], 0, [99])  # block 99 is not key 6's
    index.add([4, 5, 7], 0, 3, [40, 41, 42])
    # 7, 6, 5, 4 would be one window, but key 5's block is listed before 6's.
    index.forget(["pad", 7, 5, 6, 4], 1, [42, 41, 50, 40])
    assert index.buckets == {}


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_agree_with_a_dict(seed):
    """Adds of increasing runs (int keys first, then bytes), finds and forgets in
    random orders: the same answers and contents as a plain dict."""
    rng = random.Random(seed)
    index, model = KeyIndex(rng.choice([1, 2, 4, 32])), {}
    next_block = 0
    for _ in range(300):
        op = rng.random()
        if op < 0.5:
            start = rng.randrange(0, 60)
            keys = sorted(rng.sample(range(start, start + 40), rng.randint(1, 12)))
            keys += [b"k%d" % rng.randrange(20) for _ in range(rng.randint(0, 2))]
            keys = list(dict.fromkeys(keys))
            blocks = list(range(next_block, next_block + len(keys)))
            next_block += len(keys)
            lo = rng.randrange(0, len(keys))
            expected = [(k, b) for k, b in zip(keys[lo:], blocks[lo:])
                        if model.setdefault(k, b) != b]
            assert index.add(keys, lo, len(keys), blocks) == expected
        elif op < 0.75 and model:
            items = rng.sample(sorted(model.items(), key=str), rng.randint(1, len(model)))
            if rng.random() < 0.5:  # tail-first order of one bucket's keys
                items.sort(key=lambda kv: (type(kv[0]) is int, kv[0]), reverse=True)
            for k, _ in items:
                del model[k]
            index.forget(["pad"] + [k for k, _ in items], 1, [b for _, b in items])
        else:
            start = rng.randrange(0, 80)
            keys = list(range(start, start + rng.randint(1, 40)))
            hits = []
            for k in keys:
                if k not in model:
                    break
                hits.append(model[k])
            assert index.find(keys, 0, len(keys)) == (hits, len(hits) == len(keys))
        assert index == model and len(index) == len(model)
        assert all(b is not None for b in index.plain.values())
        assert all(any(x is not None for x in bucket) for bucket in index.buckets.values())
        index.check()  # (the counts of filled slots)


def test_eviction_forgets_keys_in_the_runs_without_copying_them(monkeypatch):
    """Hash entries of 8 tokens, blocks of 4 (width 2). A (entries x, y) and B (x, z)
    prefill 16 rows each in a pool of 6; B shares A's first 2 blocks. A frees, then
    B: the queue is [3, 2, 5, 4, 1, 0]. C (entries w, v) takes 4 blocks: the
    oldest 4 are evicted by `_pop_oldest_forgetting` in one call and their keys
    leave the index by bucket slices."""
    calls = []
    forgetting = VllmCache._pop_oldest_forgetting

    def counting(self, count, table):
        calls.append(count)
        return forgetting(self, count, table)

    monkeypatch.setattr(VllmCache, "_pop_oldest_forgetting", counting)
    monkeypatch.setattr(VllmCache, "ENTRIES_PER_BUCKET", 1)  # a bucket per entry
    a = BlockAllocator(6, 4, cache=VllmCache())
    ka = BlockKeys(0, 16, 4, 8, hashes=["x", "y"])
    kb = BlockKeys(1, 16, 4, 8, hashes=["x", "z"])
    a.grow("A", 16)
    a.register_full_blocks("A", ka, 16)
    hits = a.lookup(kb, 4)
    assert hits == [0, 1]
    a.share("B", hits, kb)
    a.grow("B", 16)
    a.register_full_blocks("B", kb, 16)
    assert (a.table("A"), a.table("B"), a.cache.index.width) == ([0, 1, 2, 3], [0, 1, 4, 5], 2)
    # The buckets are the entries' interned ids (whatever ids the table had given).
    x, y, z = ka.keys[0] // 2, ka.keys[2] // 2, kb.keys[2] // 2
    assert (ka.keys, kb.keys[:2]) == ([2 * x, 2 * x + 1, 2 * y, 2 * y + 1], ka.keys[:2])
    assert a.cache.index.buckets == {x: [0, 1], y: [2, 3], z: [4, 5]}
    a.free_request("A", 0, 0)  # 0, 1 stay B's
    a.free_request("B", 0, 0)
    assert a.cache.queue_items()[0] == [3, 2, 5, 4, 1, 0]
    kc = BlockKeys(2, 16, 4, 8, hashes=["w", "v"])
    a.grow("C", 16)
    assert (calls, a.table("C")) == ([4], [3, 2, 5, 4])
    assert a.cache.index.buckets == {x: [0, 1]}
    a.register_full_blocks("C", kc, 16)
    a.audit()
    w, v = kc.keys[0] // 2, kc.keys[2] // 2
    assert a.cache.index.buckets == {x: [0, 1], w: [3, 2], v: [5, 4]}


def test_a_bucket_spanning_entries_takes_a_run_of_keys_as_one_slice(monkeypatch):
    """Width 8 (two entries of 4 keys): keys 2..5 then 9, 10 are two runs. Adding
    them is two slices, the end of the first run found by one binary search;
    forgetting them tail first (10, 9, 5, 4, 3, 2) is two slices too, the first
    run's end found by one binary search down; a look-up of 2..6 stops at 6."""
    searches = []
    run_up, run_down = key_pieces._run_up, key_index._run_down
    monkeypatch.setattr(key_pieces, "_run_up",
                        lambda *a: searches.append(("up", run_up(*a))) or searches[-1][1])
    monkeypatch.setattr(key_index, "_run_down",
                        lambda *a: searches.append(("down", run_down(*a))) or searches[-1][1])
    index = KeyIndex(8)
    assert index.add([2, 3, 4, 5, 9, 10], 0, 6, [20, 30, 40, 50, 90, 100]) == []
    assert index.buckets == {0: [None, None, 20, 30, 40, 50, None, None],
                             1: [None, 90, 100, None, None, None, None, None]}
    assert searches == [("up", 4)]  # 2..7 was the first guess: 4 keys go on
    # 2..6 are consecutive keys: one slice, stopped at 6 (no block), no search.
    assert index.find([2, 3, 4, 5, 6], 0, 5) == ([20, 30, 40, 50], False)
    assert index.find([9, 10, 11], 0, 3) == ([90, 100], False)
    index.forget([10, 9, 5, 4, 3, 2], 0, [100, 90, 50, 40, 30, 20])
    assert (index.buckets, searches) == ({}, [("up", 4), ("down", 2)])  # 10, 9, (8)


def test_vllms_index_spans_several_entries_unless_compact():
    """Hash entries of 8 tokens, blocks of 4: 2 keys an entry, buckets of
    2 x ENTRIES_PER_BUCKET keys, or 2 x COMPACT_ENTRIES_PER_BUCKET in a compact cache (a fleet's
    replica). A's two new entries are interned one after the other: one run."""
    widths = []
    for compact in (False, True):
        a = BlockAllocator(6, 4, cache=VllmCache(compact))
        ka = BlockKeys(0, 16, 4, 8, hashes=["p", "q"])
        a.grow("A", 16)
        a.register_full_blocks("A", ka, 16)
        first = ka.keys[0]
        assert ka.keys == [first, first + 1, first + 2, first + 3]
        widths.append(a.cache.index.width)
        a.audit()
    assert widths == [2 * VllmCache.ENTRIES_PER_BUCKET, 2 * VllmCache.COMPACT_ENTRIES_PER_BUCKET]


def test_a_look_up_computes_every_key_to_its_limit_then_walks_them_once():
    """Blocks of 2 tokens, hash entries of 8 (4 blocks each): request a's first 30
    blocks are cached. A fresh request b with the same hash ids, looked up as
    far as 39 blocks, finds them, its 39 keys computed first (one run: entries
    8 and 9, new, interned after a's 0 to 7); looked up again, the same 30
    blocks; a limit inside the cached run stops there. A request c with other
    hash ids misses at its first block, its 39 keys computed all the same."""
    hashes = list(range(1000, 1010))
    cache = VllmCache()
    table = list(range(100, 140))
    ka = BlockKeys(0, 80, 2, 8, hashes=hashes)
    cache.register("a", ka, 30, table)
    b = BlockKeys(1, 80, 2, 8, hashes=hashes)
    assert cache.find(b, 39) == table[:30]
    assert (b.known, b.run_pos, b.run_key) == (39, [0], ka.run_key)
    c = BlockKeys(2, 80, 2, 8, hashes=list(range(2000, 2010)))
    assert (cache.find(c, 39), c.known, len(c.run_pos)) == ([], 39, 1)
    assert cache.find(b, 39) == table[:30]
    assert cache.find(b, 25) == table[:25]
    assert cache.find(b, 0) == []


def test_a_buckets_count_of_filled_slots_follows_every_write():
    """Width 8: keys 1..6 added (blocks 10..15) fill 6 slots of bucket 0; adding
    5..7 (15 is 5's already, 99 a duplicate of 6, 17 new) fills one more; a key
    set, set again, set by `setdefault` and deleted moves it by one or not at
    all; keys 8, 9 are bucket 1, counted apart."""
    index = KeyIndex(8)
    assert index.add([1, 2, 3, 4, 5, 6], 0, 6, [10, 11, 12, 13, 14, 15]) == []
    assert index.filled == {0: 6}
    assert index.add([5, 6, 7], 0, 3, [14, 99, 17]) == [(6, 99)]
    assert (index.filled, index.buckets[0]) == ({0: 7}, [None, 10, 11, 12, 13, 14, 15, 17])
    index[0] = 9  # a free slot
    index[0] = 8  # the same slot again: no more filled
    assert (index.setdefault(3, 50), index.setdefault(9, 51), index.filled) == (12, 51, {0: 8, 1: 1})
    del index[9]
    assert (index.filled, index.buckets.keys(), len(index)) == ({0: 8}, {0}, 8)
    index.add([8, 9], 0, 2, [60, 61])
    assert (index.filled, len(index)) == ({0: 8, 1: 2}, 10)
    index.check()


@pytest.mark.parametrize("order, counts", [
    # tail first, as a freed table goes: 3 slices
    ([[7, 6, 5], [4, 3], [2, 1, 0]], [{0: 5}, {0: 3}, {}]),
    # head first: one key a slice (keys going up), then the rest in one call
    ([[0], [1, 2], [7, 6, 5, 4, 3]], [{0: 7}, {0: 5}, {}]),
    # the middle, then both ends (two runs in one call)
    ([[4, 3], [7, 6, 5, 2, 1, 0]], [{0: 6}, {}]),
    # one key at a time by `del`, last the first key
    ([[3], [5], [7], [6], [4], [2], [1], [0]],
     [{0: 7}, {0: 6}, {0: 5}, {0: 4}, {0: 3}, {0: 2}, {0: 1}, {}]),
])
def test_a_bucket_emptied_by_pieces_in_any_order_goes_with_its_count(order, counts):
    """Keys 0..7 (width 8, blocks 100..107) forgotten a piece at a time: after
    each piece the count is the slots still filled; the bucket and its count go
    with the last block, whichever piece clears it, and the audit passes."""
    for by_del in (False, True):
        index = KeyIndex(8)
        index.add(list(range(8)), 0, 8, list(range(100, 108)))
        seen = []
        for piece in order:
            if by_del:
                for key in piece:
                    del index[key]
            else:
                index.forget(piece, 0, [100 + key for key in piece])
            index.check()
            seen.append(dict(index.filled))
        assert (seen, index.buckets, len(index)) == (counts, {}, 0)


def test_a_forgotten_pieces_flags_are_cleared_with_its_slots():
    """A member's flags (`QueueMembers.flags`, beside bucket 0) are cleared by the
    slice `forget` clears (2, 1), and go with the bucket when it empties."""
    from scheduler_sim.kv.queue_members import QueueMembers

    index = KeyIndex(4)
    index.add([0, 1, 2, 3], 0, 4, [10, 11, 12, 13])
    members = QueueMembers(index, lambda: ([], []))
    members.add([13, 12, 11, 10], [3, 2, 1, 0], True)
    assert (members.flags, members.size) == ({0: bytearray(b"\x01\x01\x01\x01")}, 4)
    members.evict([12, 11], [2, 1], 0)
    assert (members.flags, index.filled, members.size) == ({0: bytearray(b"\x01\x00\x00\x01")},
                                                           {0: 2}, 2)
    members.evict([13, 10], [3, 0], 0)
    assert (members.flags, index.filled, index.buckets, members.size) == ({}, {}, {}, 0)


def test_the_audit_checks_the_counts_and_the_radix_tree_keeps_none():
    """A count off by one fails `check`, and a cache's audit with it; the radix
    tree's index (buckets of one entry) keeps no counts, and `len` and `check`
    read its buckets."""
    a = BlockAllocator(6, 4, cache=VllmCache())
    ka = BlockKeys(0, 16, 4, 8, hashes=["x", "y"])
    a.grow("A", 16)
    a.register_full_blocks("A", ka, 16)
    a.audit()
    index = a.cache.index
    node = ka.keys[0] // index.width
    assert index.filled == {node: 4}
    index.filled[node] = 3
    equation = f"bucket {node}: filled slots(4) == counted(3) > 0 is false"
    with pytest.raises(ValueError) as raised:
        index.check()
    assert str(raised.value) == equation
    with pytest.raises(InvariantError) as raised:  # (the sum is off: the keyed count says so)
        a.audit()
    assert str(raised.value).endswith(
        "keyed blocks(4) == indexed blocks, duplicates and unindexed (3) is false")
    index.filled[node + 1] = 1  # the sum right again, one count in a bucket that is not
    with pytest.raises(InvariantError) as raised:
        a.audit()
    assert str(raised.value) == equation
    radix = RadixIndex(4)
    radix.add([1, 2, 5], 0, 3, [7, 8, 9])
    assert (radix.filled, len(radix)) == (None, 3)
    radix.forget_node([1, 2], [7, 8])
    radix.check()
    assert (radix.buckets, len(radix)) == ({1: [None, 9, None, None]}, 1)
    radix.buckets[0] = [None] * 4  # an empty bucket left behind
    with pytest.raises(ValueError) as raised:
        radix.check()
    assert str(raised.value) == "bucket 0: filled slots(0) == counted(0) > 0 is false"
