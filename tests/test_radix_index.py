"""The radix tree's index per hash entry and its freeing a node at a time
(kv/radix_cache.py `RadixIndex`, kv/free_queue.py `FreeQueue.give_nodes`), on tiny
hand-computed cases."""
from __future__ import annotations

import pytest

from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.free_queue import FreeQueue
from scheduler_sim.kv.radix_cache import RadixCache
from scheduler_sim.kv.radix_index import RadixIndex


def test_a_nodes_keys_are_forgotten_a_bucket_slice_at_a_time():
    """Width 4: keys 5, 6, 7 (bucket 1, offsets 1-3) and 8 (bucket 2) and a bytes key,
    blocks 10-14. Forgetting the node [10, 11] clears two places of bucket 1; the
    node [12, 13, 14] clears bucket 1's last (the bucket goes), bucket 2's first (it
    goes) and the bytes key. A key not indexed to its block raises KeyError."""
    index = RadixIndex(4)
    keys = [5, 6, 7, 8, b"r0:4"]
    assert index.add(keys, 0, 5, [10, 11, 12, 13, 14]) == []
    assert (index.buckets, index.plain) == (
        {1: [None, 10, 11, 12], 2: [13, None, None, None]}, {b"r0:4": 14})
    index.forget_node([5, 6], [10, 11])
    assert index.buckets == {1: [None, None, None, 12], 2: [13, None, None, None]}
    index.forget_node([7, 8, b"r0:4"], [12, 13, 14])
    assert (index.buckets, index.plain, len(index)) == ({}, {}, 0)
    index.add([5, 6], 0, 2, [10, 11])
    with pytest.raises(KeyError):
        index.forget_node([5, 6], [10, 99])
    with pytest.raises(KeyError):
        index.forget_node([9], [10])


def test_as_a_dict_update_keys_and_copy():
    """`update`, `keys` and `dict(index)` answer as a dict's."""
    index = RadixIndex(2)
    index.update({3: 7, "k": 8})
    index.update([(4, 9)])
    assert (dict(index), sorted(map(str, index.keys())), index == {3: 7, 4: 9, "k": 8}) == (
        {3: 7, 4: 9, "k": 8}, ["3", "4", "k"], True)


def _hashed(index: int, hashes: list[int]) -> BlockKeys:
    """A request of 24 prompt tokens with hash ids per 8 tokens, blocks of 4."""
    return BlockKeys(index, 24, 4, 8, hashes=hashes)


def test_tables_of_whole_nodes_are_freed_a_node_at_a_time(monkeypatch):
    """Pool of 10, blocks of 4, hash entries of 8 tokens (2 blocks each). A writes 26
    rows into [0..6]: its 6 prompt blocks one node, in 3 buckets of 2 (by slices:
    `add`); freed, 6 is plain and the node free whole. B (entries 1, 2, 9) finds
    [0..3], which splits the node there, and writes [7, 8] into a node of its own
    (registered from 0: its hits lead the run, so per key, not by `add`); freed tail
    first (8 plain, then [7, 6], then [3, 2, 1, 0]) a node at a time, behind A's
    [5, 4]. C (entries 1, 2, 3, as A) shares [0..3], writes its own copies of A's
    [4, 5] and, counted registered as a replay does, registers them by `add`, which
    names both cached: C takes A's 4 and 5 instead (swapped). Both freeings take `give_nodes` (2 calls,
    none refused); evicting everything leaves the index empty."""
    calls, adds = [], []
    give_nodes, add = FreeQueue.give_nodes, RadixIndex.add

    def counted(self, blocks):
        given = give_nodes(self, blocks)
        calls.append(given is not None)
        return given

    def counted_add(self, keys, start, end, blocks):
        adds.append((start, end))
        return add(self, keys, start, end, blocks)

    monkeypatch.setattr(FreeQueue, "give_nodes", counted)
    monkeypatch.setattr(RadixIndex, "add", counted_add)
    a = BlockAllocator(10, 4, cache=RadixCache())
    ka = _hashed(0, [1, 2, 3])
    a.grow("A", 26)
    a.register_full_blocks("A", ka, 26)
    index = a.cache.index
    assert (index.width, sorted(index.buckets.values())) == (2, [[0, 1], [2, 3], [4, 5]])
    a.free_request("A", 0, 0)
    assert (list(a.cache.free_blocks), [info[0] for info in a.cache.nodes.values()]) == (
        [5, 4, 3, 2, 1, 0], [[0, 1, 2, 3, 4, 5]])
    kb = _hashed(1, [1, 2, 9])
    hits = a.lookup(kb, 6)
    assert hits == [0, 1, 2, 3]
    a.share("B", hits, kb)
    a.grow("B", 26)
    a.register_full_blocks("B", kb, 26)
    assert (a.table("B"), [info[0] for info in a.cache.nodes.values()]) == (
        [0, 1, 2, 3, 6, 7, 8], [[4, 5], [0, 1, 2, 3], [6, 7]])
    a.audit()
    a.free_request("B", 0, 0)
    a.audit()
    assert (list(a.cache.free_blocks), calls, adds) == (
        [5, 4, 7, 6, 3, 2, 1, 0], [True, True], [(0, 6)])
    kc = _hashed(2, [1, 2, 3])
    hits = a.lookup(kc, 6)
    assert hits == [0, 1, 2, 3, 4, 5]
    a.share("C", hits[:4], kc)
    kc.registered = 4
    a.grow("C", 24)
    a.register_full_blocks("C", kc, 24)
    a.audit()
    assert (a.table("C"), adds[1:]) == ([0, 1, 2, 3, 4, 5], [(4, 6)])


def test_a_whole_entry_of_a_node_drops_its_bucket():
    """Width 2: keys 2, 3 (the whole bucket 1) and 4 (bucket 2) for blocks 7, 8, 9:
    forgotten, bucket 1 goes by one comparison, bucket 2 by its place; a whole
    bucket holding other blocks than the node's raises KeyError (nothing of it
    cleared but what was checked)."""
    index = RadixIndex(2)
    index.add([2, 3, 4], 0, 3, [7, 8, 9])
    index.forget_node([2, 3, 4], [7, 8, 9])
    assert (index.buckets, len(index)) == ({}, 0)
    index.add([2, 3], 0, 2, [7, 8])
    with pytest.raises(KeyError):
        index.forget_node([2, 3], [8, 7])
    assert index.buckets == {1: [7, 8]}
