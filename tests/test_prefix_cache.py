"""Prefix caching at the allocator level: block keys, the LRU queue of cached free
blocks, hits and evictions (§8, A5), with the conservation audit after every step."""
from __future__ import annotations

from collections import OrderedDict

import pytest

from conftest import req, simulate
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.lru_cache import LruCache
from scheduler_sim.kv.queue_members import QueueMembers
from scheduler_sim.kv.sharing import owner_counts
from scheduler_sim.kv.radix_cache import RadixCache
from scheduler_sim.kv.radix_index import RadixIndex
from scheduler_sim.kv.vllm_cache import VllmCache
from scheduler_sim.records.errors import InvariantError


def key(keys: BlockKeys, i: int):
    """The key of full block i of `keys` (computing the keys before it first)."""
    return keys.ensure(i + 1)[i]

B = 4  # block size used throughout


def keys_of(ids: list[int], index: int = 0, output_ids: list[int] | None = None) -> BlockKeys:
    """Keys of a request whose trace gives its prompt token ids (block size 4)."""
    return BlockKeys(index, len(ids), B, B, prompt_ids=ids, output_ids=output_ids)


def plain_keys(index: int, prompt: int) -> BlockKeys:
    """Keys of a request whose trace gives neither token ids nor block hashes."""
    return BlockKeys(index, prompt, B, B)


def ok(a: BlockAllocator) -> None:
    """held + draining + free == num_blocks, and the full audit passes."""
    assert a.held + a.draining + a.free == a.num_blocks
    a.audit()


def prefill(a: BlockAllocator, rid: str, keys: BlockKeys, rows: int) -> list[int]:
    """Write `rows` rows for `rid` as a dispatch would: allocate, then key the full blocks."""
    a.grow(rid, rows)
    a.register_full_blocks(rid, keys, rows)
    ok(a)
    return list(a.table(rid))


# --- keys ----------------------------------------------------------------------------


def test_equal_prefixes_give_equal_keys_and_the_first_difference_splits_the_chain():
    """Prompts [1..12] and [1..8]+[90..93] share blocks 0 and 1 (equal keys) and differ
    from block 2 on; the request index plays no part when token ids are given."""
    a = keys_of(list(range(1, 13)), index=0)
    b = keys_of(list(range(1, 9)) + [90, 91, 92, 93], index=7)
    assert key(a, 0) == key(b, 0)
    assert key(a, 1) == key(b, 1)
    assert key(a, 2) != key(b, 2)


def test_a_different_earlier_block_changes_every_later_key():
    """Prompts [1..12] and [0,2,3,4]+[5..12] differ only in block 0, yet keys 0, 1 and 2
    all differ: each key chains over its parent's key, not just its own tokens."""
    a = keys_of(list(range(1, 13)))
    b = keys_of([0, 2, 3, 4] + list(range(5, 13)))
    assert [key(a, i) != key(b, i) for i in range(3)] == [True, True, True]
    # The same content under the same parent is the same key (blocks 1 and 2 of b
    # against a copy of b).
    c = keys_of([0, 2, 3, 4] + list(range(5, 13)))
    assert [key(b, i) == key(c, i) for i in range(3)] == [True, True, True]


def test_equal_content_at_different_depths_gets_different_keys():
    """Prompt [7,7,7,7,7,7,7,7]: blocks 0 and 1 hold the same tokens, but block 1's key
    chains over block 0's, so the two keys differ."""
    k = keys_of([7] * 8)
    assert key(k, 0) != key(k, 1)


def test_output_token_ids_extend_the_chain_past_the_prompt():
    """P=4 with outputs [50,51,52,53,54]: block 1 holds outputs 1-4 (rows 4-7), so two
    requests with the same prompt and outputs share key 1; another output 1 splits it."""
    a = keys_of([1, 2, 3, 4], output_ids=[50, 51, 52, 53, 54])
    b = keys_of([1, 2, 3, 4], index=3, output_ids=[50, 51, 52, 53, 99])
    c = keys_of([1, 2, 3, 4], output_ids=[60, 51, 52, 53, 54])
    assert key(a, 1) == key(b, 1)
    assert key(a, 1) != key(c, 1)


def test_keys_from_block_hashes_with_hash_block_size_8_and_block_size_4():
    """hash_block_size 8, block_size 4, P=16, hashes [x, y]: blocks 0 and 1 come from x
    (offsets 3 and 7, so their keys differ), blocks 2 and 3 from y. Hashes [x, z] share
    keys 0 and 1 and differ at 2 and 3; hashes [w, y] differ everywhere (the chain)."""
    xy = BlockKeys(0, 16, B, 8, hashes=["x", "y"])
    xz = BlockKeys(1, 16, B, 8, hashes=["x", "z"])
    wy = BlockKeys(2, 16, B, 8, hashes=["w", "y"])
    xy2 = BlockKeys(3, 16, B, 8, hashes=["x", "y"])
    assert key(xy, 0) != key(xy, 1)
    assert [key(xy, i) == key(xz, i) for i in range(4)] == [True, True, False, False]
    assert [key(xy, i) == key(wy, i) for i in range(4)] == [False, False, False, False]
    assert [key(xy, i) == key(xy2, i) for i in range(4)] == [True, True, True, True]


def test_a_block_past_the_last_full_hash_block_is_unique_to_the_request():
    """hash_block_size 8, P=12, hashes [x]: blocks 0 and 1 (tokens 0-7) come from x and
    match another request with [x]; block 2 (tokens 8-11) has no hash, so its key is
    unique to the request."""
    a = BlockKeys(0, 12, B, 8, hashes=["x"])
    b = BlockKeys(1, 12, B, 8, hashes=["x"])
    assert [key(a, i) == key(b, i) for i in range(3)] == [True, True, False]
    assert key(a, 2) == key(BlockKeys(0, 12, B, 8, hashes=["x"]), 2)


def test_without_ids_or_hashes_keys_are_unique_to_the_request():
    """Two requests (trace positions 0 and 1) with P=8 and no ids never match; the same
    request (position 0) re-finds its own keys, as after a preemption."""
    a, b, again = plain_keys(0, 8), plain_keys(1, 8), plain_keys(0, 8)
    assert [key(a, i) == key(b, i) for i in range(2)] == [False, False]
    assert [key(a, i) == key(again, i) for i in range(2)] == [True, True]


def test_ids_that_python_hashes_alike_get_different_keys():
    """hash(-1) == hash(-2) in Python, and integers equal modulo 2**61 - 1 hash alike: keys
    compare the exact content, so prompts [-1]*4 + [7] and [-2]*4 + [7] share no key, nor
    do ids 5 and 5 + 2**61 - 1, nor hash ids 0 and 2**61 - 1 (or 1 and "1")."""
    m = 2**61 - 1
    assert key(keys_of([-1, -1, -1, -1, 7]), 0) != key(keys_of([-2, -2, -2, -2, 7]), 0)
    assert key(keys_of([5, 1, 2, 3]), 0) != key(keys_of([5 + m, 1, 2, 3]), 0)
    assert key(keys_of([2**70, 1, 2, 3]), 0) != key(keys_of([2**70 + m, 1, 2, 3]), 0)
    assert key(keys_of([2**70, 1, 2, 3]), 0) == key(keys_of([2**70, 1, 2, 3], index=5), 0)
    assert key(BlockKeys(0, 8, B, 8, hashes=[0]), 1) != key(BlockKeys(1, 8, B, 8, hashes=[m]), 1)
    assert key(BlockKeys(0, 8, B, 8, hashes=[1]), 1) != key(BlockKeys(1, 8, B, 8, hashes=["1"]), 1)


def test_colliding_python_hashes_give_no_false_hit_in_a_replay():
    """B=4, prefix caching: a (ids -1 x4, 7) and then b (ids -2 x4, 7) under continuous:
    b finds nothing cached (a builtin-hash key would have given it a's block)."""
    s = simulate([req("a", 0, 5, 1, prompt_token_ids=[-1, -1, -1, -1, 7]),
                  req("b", 2, 5, 1, prompt_token_ids=[-2, -2, -2, -2, 7])],
                 policy="continuous", block_size=4, num_blocks=8, prefix_caching=True)
    assert [(e["id"], e["cached_tokens"]) for e in s.of("admitted")] == [("a", 0), ("b", 0)]


# --- a cache alone ---------------------------------------------------------------------


def test_lru_cache_evict_forgets_the_key_of_the_least_recent_block():
    """Blocks 3 (key k) and 4 (key m) in the LRU, 3 first: evict_one() returns [3] and k
    leaves the index and the block's key."""
    c = LruCache()
    c.index.update({"k": 3, "m": 4})
    c.key_of.update({3: "k", 4: "m"})
    c.free_blocks[3] = None
    c.free_blocks[4] = None
    assert isinstance(c.free_blocks, OrderedDict)
    assert c.evict_one() == [3]
    assert (c.index, c.key_of, list(c.free_blocks)) == ({"m": 4}, {4: "m"}, [4])


# --- the allocator with prefix caching -----------------------------------------------


def test_freed_hashed_blocks_join_the_lru_tail_first_and_are_evicted_in_that_order():
    """A prefills 12 rows into blocks [0,1,2] (all full, keyed); freeing A dereferences
    the tail first, so the LRU is [2,1,0]. B, growing 3 blocks with the 2 plain blocks
    3 and 4 taken first (num_blocks 5), then evicts 2 (A's tail) first, and C's next
    block evicts 1."""
    a = BlockAllocator(5, B, cache=LruCache())
    ka = plain_keys(0, 12)
    assert prefill(a, "A", ka, 12) == [0, 1, 2]
    assert a.free_request("A", 0, 0) == 3
    ok(a)
    assert list(a.cache.free_blocks) == [2, 1, 0]
    assert (a.free, a.cached_free) == (5, 3)
    a.grow("B", 12)
    ok(a)
    assert a.table("B") == [3, 4, 2]
    assert list(a.cache.free_blocks) == [1, 0]
    a.grow("C", 1)
    ok(a)
    assert a.table("C") == [1]
    assert list(a.cache.free_blocks) == [0]


def test_hashed_blocks_keep_their_key_until_handed_out_again():
    """A's keyed blocks [0,1] freed into the LRU are still found by A's keys (lookup
    [0,1]); after B takes block 1 (LRU order [1,0], no plain block left in a pool of 2),
    key 1 is gone: lookup finds [0] only, and block 1 carries no key."""
    a = BlockAllocator(2, B, cache=LruCache())
    ka = plain_keys(0, 8)
    prefill(a, "A", ka, 8)
    a.free_request("A", 0, 0)
    ok(a)
    assert a.lookup(plain_keys(0, 8), 2) == [0, 1]
    a.grow("B", 1)
    ok(a)
    assert a.table("B") == [1]
    assert 1 not in a.cache.key_of
    assert a.lookup(plain_keys(0, 8), 2) == [0]


def test_unhashed_free_blocks_are_reused_before_cached_ones():
    """A writes 6 rows into [0,1]: block 0 is full (keyed), block 1 is partial (plain).
    Freed, block 1 joins the plain pool and block 0 the LRU; the next grow of one block
    takes 1, and leaves cached block 0 in the LRU (pool of 2)."""
    a = BlockAllocator(2, B, cache=LruCache())
    prefill(a, "A", plain_keys(0, 6), 6)
    a.free_request("A", 0, 0)
    ok(a)
    assert (list(a.cache.free_blocks), a.cached_free, a.free) == ([0], 1, 2)
    a.grow("B", 4)
    ok(a)
    assert a.table("B") == [1]
    assert list(a.cache.free_blocks) == [0]
    assert a.lookup(plain_keys(0, 6), 1) == [0]


def test_a_hit_takes_the_block_out_of_the_middle_of_the_lru():
    """A's blocks [0,1,2] freed give LRU [2,1,0]; a hit on block 1 (share) removes it from
    the middle, leaving [2,0] in order, and moves it from free to held (1 held, 2 free)."""
    a = BlockAllocator(3, B, cache=LruCache())
    prefill(a, "A", plain_keys(0, 12), 12)
    a.free_request("A", 0, 0)
    assert isinstance(a.cache.free_blocks, OrderedDict)  # O(1) removal from the middle
    a.share("B", [1])
    ok(a)
    assert list(a.cache.free_blocks) == [2, 0]
    assert (a.held, a.free, a.cached_free) == (1, 2, 2)
    assert a.table("B") == [1]
    assert a.evictable([0, 1, 2]) == 2


def test_sharing_a_held_block_counts_it_once():
    """B shares A's held block 0: refs 2, held stays 1 (A5); A's release frees nothing
    (blocks_freed 0), B's release then puts it in the LRU."""
    a = BlockAllocator(3, B, cache=LruCache())
    prefill(a, "A", plain_keys(0, 4), 4)
    a.share("B", [0])
    ok(a)
    assert (a.held, a.free) == (1, 2)
    assert a.free_request("A", 0, 0) == 0
    ok(a)
    assert (a.held, a.cached_free) == (1, 0)
    assert a.free_request("B", 0, 0) == 1
    ok(a)
    assert (a.held, a.cached_free, list(a.cache.free_blocks)) == (0, 1, [0])


def test_lookup_stops_at_the_first_miss():
    """A's keyed blocks [0,1,2] are freed (LRU [2,1,0]); a share-and-free of one block
    moves it to the LRU tail. Pool 1: LRU [2,0,1], two one-block grows evict 2 then 0,
    so lookup of A's keys misses at key 0 and returns []. Pool 2: LRU [1,0,2], one grow
    evicts 1, so lookup returns [0] and stops, although block 2 still holds key 2."""
    a = BlockAllocator(3, B, cache=LruCache())
    ka = plain_keys(0, 12)
    prefill(a, "A", ka, 12)
    a.free_request("A", 0, 0)
    # Take block 1 out of the cache by hand-ordering the LRU: share, then evict it.
    a.share("X", [1])
    a.free_request("X", 0, 0)       # 1 rejoins at the tail: LRU [2, 0, 1]
    ok(a)
    assert list(a.cache.free_blocks) == [2, 0, 1]
    a.grow("B", 4)                  # evicts 2
    a.grow("C", 4)                  # evicts 0
    ok(a)
    assert (a.table("B"), a.table("C")) == ([2], [0])
    assert a.lookup(plain_keys(0, 12), 3) == []     # block 0 missing: stop at once
    # A second pool: only the middle block is evicted.
    a = BlockAllocator(3, B, cache=LruCache())
    prefill(a, "A", plain_keys(0, 12), 12)
    a.free_request("A", 0, 0)       # LRU [2, 1, 0]
    a.share("X", [2])
    a.free_request("X", 0, 0)       # LRU [1, 0, 2]
    a.grow("B", 4)                  # evicts 1
    ok(a)
    assert a.table("B") == [1]
    assert a.lookup(plain_keys(0, 12), 3) == [0]    # block 2 is cached but after the miss


@pytest.mark.parametrize("compact", [False, True])
def test_vllm_cache_carries_keys_through_the_drain_and_pins_without_key_of(compact):
    """vLLM's cache (duplicates), pool of 4, delay 1: A keys [0,1,2]; B shares hits [0,1]
    (registered 2); a pin holds [1,2]. A's free drains nothing (0, 1 are B's too, 2 is a
    pinned orphan); B's drains 0 (1 is now an orphan); the unpin drains 1 and 2. Released
    at 1, the LRU is [0,1,2] with each block's key beside it (the cache names no key per
    block: no key_of; the pinned orphans' keys were kept aside meanwhile), and A's keys
    find all three; after fresh block 3 goes, the next grow evicts 0, key 0
    leaves the index and the lookup misses at once."""
    a = BlockAllocator(4, B, cache=VllmCache(compact))
    ka = keys_of(list(range(12)))
    assert prefill(a, "A", ka, 12) == [0, 1, 2]
    kb = keys_of(list(range(12)), 1)
    hits = a.lookup(kb, 2)
    assert hits == [0, 1]
    a.share("B", hits, kb)
    assert kb.registered == 2
    handle = a.pin([1, 2])
    ok(a)
    assert a.free_request("A", 0, 1) == 0
    ok(a)
    assert (a.held, a.draining, sorted(a._orphans)) == (3, 0, [2])
    assert a.free_request("B", 0, 1) == 1
    ok(a)
    assert (a.held, a.draining, sorted(a._orphans)) == (2, 1, [1, 2])
    assert a.cache.orphan_keys == {2: key(ka, 2), 1: key(ka, 1)}
    assert a.unpin(handle, 0, 1) == 2
    ok(a)
    assert a.cache.orphan_keys == {}
    assert (a.held, a.draining, a.lookup(ka, 3)) == (0, 3, [])
    assert a.release_expired(1) == 3
    ok(a)
    assert list(zip(*a.cache.queue_items())) == [(0, key(ka, 0)), (1, key(ka, 1)), (2, key(ka, 2))]
    assert not hasattr(a.cache, "key_of")
    assert a.lookup(ka, 3) == [0, 1, 2]
    a.grow("C", 4)
    a.grow("D", 4)
    ok(a)
    assert (a.table("C"), a.table("D"), a.cache.queue_items()[0]) == ([3], [0], [1, 2])
    assert a.cache.index == {key(ka, 1): 1, key(ka, 2): 2}
    assert a.lookup(ka, 3) == []


@pytest.mark.parametrize("compact", [False, True])
def test_vllm_cache_queue_in_runs_takes_a_hits_entries_off_its_runs_end(compact):
    """vLLM's cache, pool of 3: A's blocks [0,1,2] freed make the run [2,1,0]. B hits
    [0,1], the end of that run: their entries are taken off it (the run [2]), none
    left stale; B frees them as the run [1,0]; the queue is [2,1,0] in order. C's 8
    rows evict 2 (A's run is consumed), then 1 from B's run: C holds [2,1], the queue
    is [0] (B's run at position 1), and keys 1 and 2 of A left the index."""
    a = BlockAllocator(3, B, cache=VllmCache(compact))
    assert type(a.cache.free_blocks) is QueueMembers  # (a compact cache's too)
    ka = plain_keys(0, 12)
    assert prefill(a, "A", ka, 12) == [0, 1, 2]
    a.free_request("A", 0, 0)
    ok(a)
    assert [[list(r[0]), r[2]] for r in a.cache.runs] == [[[2, 1, 0], 0]]
    kb = plain_keys(0, 12)
    hits = a.lookup(kb, 2)
    assert hits == [0, 1]
    a.share("B", hits, kb)
    ok(a)
    assert (a.cache.stale, a.cache.stale_total, a.cache.queue_items()[0]) == ({}, 0, [2])
    assert [[list(r[0]), list(r[1]), r[2]] for r in a.cache.runs] == [[[2], [key(ka, 2)], 0]]
    a.free_request("B", 0, 0)
    ok(a)
    assert [[list(r[0]), r[2]] for r in a.cache.runs] == [[[2], 0], [[1, 0], 0]]
    assert list(zip(*a.cache.queue_items())) == [(2, key(ka, 2)), (1, key(ka, 1)), (0, key(ka, 0))]
    assert a.cached_free == 3
    a.grow("C", 8)
    ok(a)
    assert a.table("C") == [2, 1]
    assert [[list(r[0]), r[2]] for r in a.cache.runs] == [[[1, 0], 1]]
    assert (a.cache.stale, a.cache.stale_total, a.cache.queue_items()[0]) == ({}, 0, [0])
    assert a.cache.index == {key(ka, 0): 0}


def test_vllm_cache_runs_are_rebuilt_once_stale_entries_outnumber_the_queue():
    """One run of blocks 0..69 (block b keyed 100 + b); hits on 0..66 leave 67 stale
    entries for a queue of 3 (67 <= 3 + 64: kept); the hit on 67 makes 68 > 2 + 64, so
    the runs become the queue [68, 69] with nothing stale; popping 1 gives block 68 and
    its key 168."""
    c = VllmCache()
    assert c.give_back([], list(range(70)), range(100, 170)) == []
    for b in range(67):
        c.hit(b)
    assert (c.stale_total, len(c.runs), c.queue_items()[0]) == (67, 1, [67, 68, 69])
    c.hit(67)
    assert ([[list(r[0]), r[2]] for r in c.runs], c.stale, c.stale_total) == (
        [[[68, 69], 0]], {}, 0)
    assert c.pop_oldest(1) == ([68], [168])
    assert (list(zip(*c.queue_items())), c.free_blocks) == ([(69, 169)], {69})


def test_vllm_cache_runs_pack_integer_keys_and_keep_other_keys_as_a_run_of_their_own():
    """In a compact cache (a fleet's replica), a batch [7, 6, 5, 4] freed with keys
    [b"r0:3", b"r0:2", 101, 100] (a request's own output keys first, as a freed
    table's tail has them) makes two runs: [7, 6] with the list of bytes keys and
    [5, 4] with the array('q') [101, 100]. A batch of integer keys only is one packed
    run; one with an int past 64 bits keeps its list. Popping 3 crosses the first two
    runs and gives plain int keys; the queue reads back the same keys whatever their
    packing. A cache that is not compact keeps each batch as one run, keys as given."""
    from array import array
    plain = VllmCache()
    plain.give_back([], [7, 6, 5, 4], [b"r0:3", b"r0:2", 101, 100])
    assert [(r[0], r[1]) for r in plain.runs] == [([7, 6, 5, 4], [b"r0:3", b"r0:2", 101, 100])]
    c = VllmCache(compact=True)
    c.give_back([], [7, 6, 5, 4], [b"r0:3", b"r0:2", 101, 100])
    c.give_back([], [3, 2], [200, 201])
    c.give_back([], [1], [2 ** 70])
    assert [(r[0], type(r[1]), list(r[1])) for r in c.runs] == [
        ([7, 6], list, [b"r0:3", b"r0:2"]), ([5, 4], array, [101, 100]),
        ([3, 2], array, [200, 201]), ([1], list, [2 ** 70])]
    assert c.queue_items() == ([7, 6, 5, 4, 3, 2, 1],
                               [b"r0:3", b"r0:2", 101, 100, 200, 201, 2 ** 70])
    taken, keys = c.pop_oldest(3)
    assert (taken, keys, type(keys)) == ([7, 6, 5], [b"r0:3", b"r0:2", 101], list)
    assert [(r[0], list(r[1]), r[2]) for r in c.runs] == [
        ([5, 4], [101, 100], 1), ([3, 2], [200, 201], 0), ([1], [2 ** 70], 0)]


def test_vllm_cache_a_rebuild_keeps_each_run_and_its_packing():
    """Compact cache: runs [0..69] (keys 100 + b, packed) and [70, 71] (bytes keys).
    Hits on 0..67 leave 68 stale entries for a queue of 4 (68 <= 4 + 64: kept); the hit on 68 makes
    69 > 3 + 64, and the rebuild drops them run by run: the runs are [69] (still
    packed) and [70, 71] (still a list)."""
    from array import array
    c = VllmCache(compact=True)
    c.give_back([], list(range(70)), list(range(100, 170)))
    c.give_back([], [70, 71], [b"a", b"b"])
    for b in range(68):
        c.hit(b)
    assert (len(c.runs), c.stale_total) == (2, 68)
    c.hit(68)
    assert ([(r[0], type(r[1]), list(r[1]), r[2]) for r in c.runs], c.stale,
            c.stale_total) == ([([69], array, [169], 0),
                                ([70, 71], list, [b"a", b"b"], 0)], {}, 0)
    assert c.pop_oldest(2) == ([69, 70], [169, b"a"])


@pytest.mark.parametrize("compact", [False, True])
def test_vllm_cache_hits_in_bulk_count_a_second_stale_entry(compact):
    """One run [0..5], block b keyed 100 + b. hits([0, 1, 9]) takes 0 and 1 (9 is not
    queued): stale {0: 1, 1: 1}. 0 comes back as the run [0]; hits([0, 2]) takes 0 and
    2, and 0 now has two stale entries (one in each run): stale {0: 2, 1: 1, 2: 1}, 4
    in all, the queue [3, 4, 5]; 2 of [3, 0, 5, 7] are queued; popping 2 gives 3, 4."""
    c = VllmCache(compact)
    c.give_back([], list(range(6)), list(range(100, 106)))
    assert c.hits([0, 1, 9]) == {0, 1}
    assert (c.stale, c.stale_total) == ({0: 1, 1: 1}, 2)
    c.give_back([], [0], [100])
    assert c.hits([0, 2]) == {0, 2}
    assert (c.stale, c.stale_total, c.queue_items()[0]) == ({0: 2, 1: 1, 2: 1}, 4, [3, 4, 5])
    assert (c.count_free([3, 0, 5, 7]), c.hits([]), c.hits([1, 9])) == (2, set(), set())
    assert c.pop_oldest(2) == ([3, 4], [103, 104])


def test_share_counts_owners_in_bulk_and_refuses_a_block_nobody_holds():
    """Pool of 4, vLLM's cache. A writes [0, 1, 2] (keyed 0..2), B hits A's first two
    (held: one extra owner each), C too (two extra each); A frees (its block 2 joins the
    queue; 0 and 1 stay held by B and C), and D hits all three: 2 leaves the queue
    (held again, no extra owner), 0 and 1 get a third owner. Sharing block 3, never
    allocated, raises; so does sharing block 2 while it drains after D let go."""
    a = BlockAllocator(4, B, cache=VllmCache())
    ka = keys_of(list(range(12)))
    assert prefill(a, "A", ka, 12) == [0, 1, 2]
    for rid in ("B", "C"):
        kb = keys_of(list(range(12)), 1)
        a.share(rid, a.lookup(kb, 2), kb)
    assert owner_counts(a._extra) == {0: 2, 1: 2}
    a.free_request("A", 0, 0)
    ok(a)
    assert (a.cached_free, a.held) == (1, 2)
    kd = keys_of(list(range(12)), 3)
    a.share("D", a.lookup(kd, 3), kd)
    ok(a)
    assert (owner_counts(a._extra), a.cached_free, a.held, a.table("D")) == ({0: 2, 1: 2}, 0, 3, [0, 1, 2])
    with pytest.raises(InvariantError, match="never allocated"):
        a.share("E", [3], plain_keys(1, 4))
    a.free_request("D", 0, 4)  # 2 drains: nobody holds it, and it is not cached
    with pytest.raises(InvariantError, match="nobody holds it"):
        a.share("F", [2], plain_keys(2, 4))


def test_a_cache_is_bound_once_before_any_block_is_handed_out():
    """An allocator without a cache takes one (`bind_cache`) while no block was handed
    out; a second cache, or one bound after block 0 went to r, raises."""
    a = BlockAllocator(4, B)
    assert (a.cache, a.free) == (None, 4)
    a.bind_cache(VllmCache())
    assert type(a.cache) is VllmCache
    with pytest.raises(InvariantError, match="bound once"):
        a.bind_cache(LruCache())
    b = BlockAllocator(4, B)
    b.grow("r", 1)
    with pytest.raises(InvariantError, match="bound once"):
        b.bind_cache(LruCache())
    assert b.cache is None


def test_vllm_cache_refuses_a_share_without_the_requests_keys():
    """vLLM's cache knows a shared block's key only from its sharer's BlockKeys: sharing
    A's cached block 0 without them raises, and so does sharing after own blocks."""
    a = BlockAllocator(3, B, cache=VllmCache())
    ka = plain_keys(0, 8)
    prefill(a, "A", ka, 8)
    with pytest.raises(InvariantError, match="without their keys"):
        a.share("X", [0])
    a.grow("Y", 4)
    with pytest.raises(InvariantError, match="without their keys"):
        a.share("Y", [0], plain_keys(0, 8))
    ok(a)


def test_lookup_honours_max_blocks():
    """With A's three keyed blocks in the LRU, lookup with max_blocks 2 returns [0,1] and
    with max_blocks 0 returns []."""
    a = BlockAllocator(3, B, cache=LruCache())
    prefill(a, "A", plain_keys(0, 12), 12)
    a.free_request("A", 0, 0)
    assert a.lookup(plain_keys(0, 12), 2) == [0, 1]
    assert a.lookup(plain_keys(0, 12), 0) == []


def test_lookup_never_returns_draining_blocks():
    """With release_delay 2, A's keyed blocks freed at tick 0 drain until tick 2: lookup
    finds nothing at tick 1 (draining 2, free 1), then [0,1] once they are released."""
    a = BlockAllocator(3, B, cache=LruCache())
    prefill(a, "A", plain_keys(0, 8), 8)
    assert a.free_request("A", 0, 2) == 2
    ok(a)
    assert (a.held, a.draining, a.free, a.cached_free) == (0, 2, 1, 0)
    assert a.release_expired(1) == 0
    assert a.lookup(plain_keys(0, 8), 2) == []
    assert a.release_expired(2) == 2
    ok(a)
    assert (a.draining, a.free, a.cached_free) == (0, 3, 2)
    assert a.lookup(plain_keys(0, 8), 2) == [0, 1]


def test_a_held_block_is_found_by_another_request_with_the_same_prompt():
    """A holds [0,1,2] for prompt [1..12]; B with the same ids finds [0,1] (max 2 blocks:
    (12-1)//4), and sharing them adds no held block: held 3, free 1 (pool of 4)."""
    a = BlockAllocator(4, B, cache=LruCache())
    ids = list(range(1, 13))
    prefill(a, "A", keys_of(ids), 12)
    hits = a.lookup(keys_of(ids, index=1), (12 - 1) // B)
    assert hits == [0, 1]
    assert a.evictable(hits) == 0
    a.share("B", hits)
    ok(a)
    assert (a.held, a.free) == (3, 1)


def test_conservation_holds_after_every_step_of_a_mixed_sequence():
    """Grow, register, share, free with and without delay, release and evict on a pool of
    5: held + draining + free == 5 and audit() passes after each step (checked in
    `prefill`/`ok`), and the final pools are exact."""
    a = BlockAllocator(5, B, cache=LruCache())
    ids = list(range(1, 9))
    prefill(a, "A", keys_of(ids), 8)                 # A [0,1] keyed
    a.share("B", a.lookup(keys_of(ids, 1), 1))       # B shares block 0
    ok(a)
    prefill(a, "B", keys_of(ids, 1), 6)              # B grows block 2 (rows 4-5)
    assert a.table("B") == [0, 2]
    a.free_request("A", 0, 1)                        # only block 1 drains (0 shared)
    ok(a)
    assert (a.held, a.draining, a.free) == (2, 1, 2)
    a.release_expired(1)                             # block 1 -> LRU
    ok(a)
    assert (a.held, a.draining, a.free, a.cached_free) == (2, 0, 3, 1)
    a.grow("C", 12)                                  # plain 3, 4, then evicts 1
    ok(a)
    assert a.table("C") == [3, 4, 1]
    a.free_request("B", 1, 0)                        # 2 plain, 0 keyed -> LRU
    a.free_request("C", 1, 0)
    ok(a)
    assert (a.held, a.draining, a.free) == (0, 0, 5)


def test_evicted_records_say_whose_cached_block_was_handed_out():
    """Lab 04's trace (vllm, 9 blocks of 4, A: P=8 N=18, L: P=12 N=10 with ids): L is
    preempted at tick 9 with 5 keyed blocks. Each time A needs a block afterwards the LRU
    head goes, L's tail first: at 9 A takes L's block 4 (rows 16-19), at 13 block 3, at 17
    block 2. The admission_blocked record at those ticks shows free after A's block
    (4, 3, 2) with step_allocated 1, one less than the snapshot's free (5, 4, 3)."""
    ids = list(range(100, 112))
    s = simulate([req("A", 0, 8, 18, prompt_token_ids=list(range(1, 9))),
                  req("L", 0, 12, 10, prompt_token_ids=ids,
                      output_token_ids=list(range(200, 210)))],
                 policy="vllm", block_size=4, num_blocks=9, token_budget=32,
                 prefix_caching=True)
    evicted = [(e["tick"], e["id"], e["written_by"], e["block"]) for e in s.of("evicted")]
    assert evicted[:3] == [(9, "A", "L", 4), (13, "A", "L", 3), (17, "A", "L", 2)]
    for tick, free in ((9, 4), (13, 3), (17, 2)):
        [blocked] = s.at(tick, "admission_blocked")
        [snapshot] = s.at(tick, "snapshot")
        assert (blocked["free"], blocked["step_allocated"]) == (free, 1)
        assert snapshot["free"] == free + 1
    [quiet] = s.at(10, "admission_blocked")
    assert "step_allocated" not in quiet  # nothing allocated before the admission at 10


def test_tree_mode_evicts_a_single_block_when_no_whole_node_is_free():
    """Tree mode, one node [3, 4] (keys k, m) of which block 3 is still held: no node
    can go whole, so evict() takes the LRU head, block 4, forgets its key and takes it
    out of the node, which keeps block 3 and key k."""
    c = RadixCache()
    c.index.update({"k": 3, "m": 4})
    c._new_node([3, 4], ["k", "m"], None, 0)
    assert c.give_back([4]) == ()
    assert c.evict_one() == [4]
    assert (c.index, c.key_of, list(c.free_blocks)) == ({"k": 3}, {3: "k"}, [])
    assert [(info[0], info[4]) for info in c.nodes.values()] == [([3], ["k"])]
    assert c.node_of == {3: 0}


def test_tree_mode_evicts_a_free_leaf_node_whole():
    """Tree mode, node 0 = [1, 2] with child node 1 = [5, 6], all free: the child is the
    only leaf and goes whole (both keys forgotten); then node 0 is a leaf and goes."""
    c = RadixCache()
    for block, key in ((1, "a"), (2, "b"), (5, "c"), (6, "d")):
        c.index[key] = block
    parent = c._new_node([1, 2], ["a", "b"], None, 0)
    c._new_node([5, 6], ["c", "d"], parent, 0)
    assert c.give_back([1, 2, 5, 6]) == ()
    assert c.evict_one() == [5, 6]
    assert c.index == {"a": 1, "b": 2}
    assert c.evict_one() == [1, 2]
    assert (c.index, c.nodes, list(c.free_blocks)) == ({}, {}, [])


def test_tree_mode_cuts_a_run_where_the_prompt_ends():
    """Tree mode, B=1, P=2 (ids 1, 2) with outputs 7, 8: one registration of all 4 blocks
    (a recompute writes prompt and outputs at once) makes two nodes, [prompt] and
    [outputs], as SGLang inserts the prompt separately. Freed, the outputs node is the
    only leaf: evicting ahead of 2 plain blocks takes it whole, and the prompt stays
    cached (2 blocks found)."""
    a = BlockAllocator(4, 1, cache=RadixCache())
    keys = BlockKeys(0, 2, 1, 1, prompt_ids=[1, 2], output_ids=[7, 8, 9])
    a.grow("a", 4)
    a.register_full_blocks("a", keys, 4)
    assert sorted(info[0] for info in a.cache.nodes.values()) == [[0, 1], [2, 3]]
    a.free_request("a", 0, 0)
    assert (a.evict_until(2), a.cached_free) == (2, 2)
    ok(a)
    again = BlockKeys(1, 2, 1, 1, prompt_ids=[1, 2], output_ids=[7, 8, 9])
    assert a.lookup(again, 2) == [0, 1]


# --- runs: registration, eviction and lookups of several blocks at once -------------


def test_a_run_with_keys_already_cached_keeps_the_later_blocks_as_duplicates():
    """vLLM's cache (duplicates), pool of 6, block size 4. A writes [1..8] into blocks
    [0,1] (keyed). B writes the same 8 tokens and 4 more into [2,3,4] before looking
    anything up: its first two keys are cached already, so the index keeps A's blocks
    and B's 2 and 3 become duplicates of them; its third key is new and indexed to 4."""
    a = BlockAllocator(6, B, cache=VllmCache())
    ids = [1, 2, 3, 4, 5, 6, 7, 8]
    ka, kb = keys_of(ids, 0), keys_of(ids + [9, 9, 9, 9], 1)
    assert prefill(a, "A", ka, 8) == [0, 1]
    assert prefill(a, "B", kb, 12) == [2, 3, 4]
    index, others = a.cache.index, a.cache.others
    assert [index[key(kb, i)] for i in range(3)] == [0, 1, 4]
    assert others == {key(kb, 0): [2], key(kb, 1): [3]}


def test_evicting_a_run_promotes_each_duplicate_in_turn():
    """Continuing: A frees [0,1] (LRU [1,0]), then B frees [2,3,4] (LRU [1,0,4,3,2]).
    C takes 1 never-used block (5) and 3 evicted ones, 1, 0, 4: A's blocks leave, so
    the duplicates 3 and 2 become the index entries of the first two keys, and the
    third key is forgotten. A lookup of B's chain finds [2, 3]."""
    a = BlockAllocator(6, B, cache=VllmCache())
    ids = [1, 2, 3, 4, 5, 6, 7, 8]
    ka, kb = keys_of(ids, 0), keys_of(ids + [9, 9, 9, 9], 1)
    prefill(a, "A", ka, 8)
    prefill(a, "B", kb, 12)
    a.free_request("A", 0, 0)
    a.free_request("B", 0, 0)
    assert a.cache.queue_items()[0] == [1, 0, 4, 3, 2]
    a.grow("C", 16)
    ok(a)
    assert a.table("C") == [5, 1, 0, 4]
    assert a.step_evictions["C"] == 3
    assert a.cache.others == {}
    assert a.lookup(keys_of(ids + [9, 9, 9, 9], 2), 3) == [2, 3]


def test_vllm_cache_a_freed_table_keeps_its_leading_blocks_that_others_hold():
    """vLLM's cache, pool of 8, block size 4. A writes [1..12] into [0,1,2]; B finds
    [0,1], then writes 4 rows of its own into [3,4] (block 3 a duplicate of A's 2).
    A frees: 0 and 1 stay held by B, only 2 joins the queue with its key. B frees its
    table tail first, [4,3,1,0], each with its key; nobody holds two owners any more."""
    a = BlockAllocator(8, B, cache=VllmCache())
    ids = list(range(1, 13))
    ka, kb = keys_of(ids, 0), keys_of(ids + [20, 21, 22, 23], 1)
    assert prefill(a, "A", ka, 12) == [0, 1, 2]
    hits = a.lookup(kb, 2)
    assert hits == [0, 1]
    a.share("B", hits, kb)
    assert prefill(a, "B", kb, 16) == [0, 1, 3, 4]
    assert owner_counts(a._extra) == {0: 1, 1: 1}
    assert a.free_request("A", 0, 0) == 1
    ok(a)
    assert (owner_counts(a._extra), a.held) == ({}, 4)
    assert list(zip(*a.cache.queue_items())) == [(2, key(ka, 2))]
    assert a.free_request("B", 0, 0) == 4
    ok(a)
    assert list(zip(*a.cache.queue_items())) == [
        (2, key(ka, 2)), (4, key(kb, 3)), (3, key(kb, 2)), (1, key(kb, 1)), (0, key(kb, 0))]


def test_vllm_cache_a_freed_table_keeps_a_later_block_that_another_holds():
    """vLLM's cache, pool of 4. A writes [1..8] into [0,1]; B writes the same rows into
    [2,3] (duplicates). A frees (queue [1,0]); X's 4 rows evict 1, so key 1 is B's 3.
    C finds [0,3] (block 0 out of the queue, 3 shared with B). B frees: its second
    block stays held by C, its first (2, key 0) joins the queue. C frees [3,0]; a
    lookup finds A's 0 (indexed before B's duplicate 2) and B's 3."""
    a = BlockAllocator(4, B, cache=VllmCache())
    ids = [1, 2, 3, 4, 5, 6, 7, 8]
    ka, kb, kc = keys_of(ids, 0), keys_of(ids, 1), keys_of(ids, 2)
    assert prefill(a, "A", ka, 8) == [0, 1]
    assert prefill(a, "B", kb, 8) == [2, 3]
    a.free_request("A", 0, 0)
    a.grow("X", 4)
    ok(a)
    assert a.table("X") == [1]
    hits = a.lookup(kc, 2)
    assert hits == [0, 3]
    a.share("C", hits, kc)
    ok(a)
    assert a.free_request("B", 0, 0) == 1
    ok(a)
    assert (owner_counts(a._extra), a.held) == ({}, 3)
    assert list(zip(*a.cache.queue_items())) == [(2, key(ka, 0))]
    assert a.free_request("C", 0, 0) == 2
    ok(a)
    assert list(zip(*a.cache.queue_items())) == [(2, key(ka, 0)), (3, key(ka, 1)), (0, key(ka, 0))]
    assert a.lookup(kc, 2) == [0, 3]  # key 0: A's block, indexed before B's


def test_a_pinned_block_whose_owners_left_is_held_and_never_a_hit_until_unpinned():
    """Pool of 3. A writes [1..4] into block 0 (keyed); a transfer pins it; A frees: 0
    blocks drain (pinned, owned by nobody), held stays 1, and a lookup of the same
    prompt finds nothing (the block is not reusable). Unpinned with no delay it goes
    to the LRU queue (keyed) and is found again."""
    a = BlockAllocator(3, B, cache=LruCache())
    ids = [1, 2, 3, 4, 5]
    prefill(a, "A", keys_of(ids, 0), 4)
    handle = a.pin([0])
    assert a.free_request("A", 0, 0) == 0
    ok(a)
    assert (a.held, a.free, a.cached_free) == (1, 2, 0)
    assert a.lookup(keys_of(ids, 1), 1) == []
    assert a.unpin(handle, 1, 0) == 1
    ok(a)
    assert (a.held, a.free, a.cached_free) == (0, 3, 1)
    assert a.lookup(keys_of(ids, 1), 1) == [0]


def test_sharing_after_blocks_drained_while_nothing_was_shared():
    """Without a cache, pool of 4: a holds [0,1], b holds [2]; b frees with a delay of 2
    (block 2 drains). Then c shares a's block 0 (the first sharing): held stays 2, and
    block 0 has two owners; sharing the draining block 2 is refused with its number.
    a frees: only block 1 drains; c frees at 3: block 0 drains."""
    a = BlockAllocator(4, B)
    a.grow("a", 8)
    a.grow("b", 4)
    assert a.free_request("b", now=0, delay=2) == 1
    a.share("c", [0])
    assert (a.held, a.draining) == (2, 1)
    a.audit()
    try:
        a.share("d", [2])
    except InvariantError as exc:
        assert "block 2" in str(exc)
    else:
        raise AssertionError("sharing a draining block was accepted")
    assert a.free_request("a", now=1, delay=2) == 1
    assert a.free_request("c", now=3, delay=2) == 1
    a.audit()


def test_open_block_takes_one_plain_block_or_defers_to_grow():
    """Pool of 4, blocks of 4, a credit of 2 blocks for r. r writes 4 rows (block 0),
    frees nothing; its row 4 opens a block (1 taken, inline). Asking again for 5 rows
    opens nothing (grow's answer, 0); a third block would exceed the credit: the
    equation."""
    a = BlockAllocator(4, B)
    a.reserve("r", 2)
    a.grow("r", 4)
    assert a.open_block("r", 5) == 1
    assert (a.table("r"), a.held, a.granted) == ([0, 1], 2, 2)
    assert a.open_block("r", 5) == 0
    try:
        a.open_block("r", 9)
    except InvariantError as exc:
        assert "allocated(3) <= credit(2) is false" in str(exc)
    else:
        raise AssertionError("growing past the credit was accepted")


def test_hash_keys_resume_and_chain_into_output_ids():
    """hash_block_size 8, P=8, hashes [x], outputs given as ids [1, 2, 3, 4]: block 2
    (the outputs) chains from block 1's hash key, so it matches another request with
    the same hash and outputs and not one whose hash differs. Keys computed one at a
    time are the keys computed at once."""
    a = BlockKeys(0, 8, B, 8, hashes=["x"], output_ids=[1, 2, 3, 4])
    b = BlockKeys(1, 8, B, 8, hashes=["x"], output_ids=[1, 2, 3, 4])
    c = BlockKeys(2, 8, B, 8, hashes=["y"], output_ids=[1, 2, 3, 4])
    assert [key(a, i) == key(b, i) for i in range(3)] == [True, True, True]
    assert [key(a, i) == key(c, i) for i in range(3)] == [False, False, False]
    step = BlockKeys(3, 16, B, 8, hashes=["x", "y"])
    for i in range(1, 5):
        step.ensure(i)
    assert step.keys == BlockKeys(4, 16, B, 8, hashes=["x", "y"]).ensure(4)


# --- interned hash entries, and vLLM's cache one block at a time ------------------------

@pytest.fixture
def fresh_entries(monkeypatch):
    """A new interning table for the test (ids from 0), whatever other tests left alive."""
    from scheduler_sim.kv import block_keys
    monkeypatch.setattr(block_keys, "_current_entries", block_keys.weakref.ref(
        block_keys._Entries()))
    return block_keys


def test_hash_entries_are_interned_in_order_and_keys_count_blocks_within_an_entry(
        fresh_entries):
    """A new table; hash_block_size 8, block size 4 (2 keys per entry id), P=16.
    [x, y]: entries x (id 0) and x.y (id 1), keys 0*2+0, 0*2+1, 1*2+0, 1*2+1.
    [x, z]: x is id 0 again, x.z is new (id 2): keys [0, 1, 4, 5]. [w, y]: w (id 3)
    and w.y (id 4; not x.y's id, the chain differs): [6, 7, 8, 9]. [x, y] again makes
    no new entry. Hash ids 1, "1", True and -1, 2**64 are five different entries, and
    integer hash ids chain like the others."""
    xy = BlockKeys(0, 16, B, 8, hashes=["x", "y"])
    assert xy.ensure(4) == [0, 1, 2, 3]
    assert BlockKeys(1, 16, B, 8, hashes=["x", "z"]).ensure(4) == [0, 1, 4, 5]
    assert BlockKeys(2, 16, B, 8, hashes=["w", "y"]).ensure(4) == [6, 7, 8, 9]
    assert BlockKeys(3, 16, B, 8, hashes=["x", "y"]).ensure(4) == [0, 1, 2, 3]
    assert len(xy.entries) == 5
    firsts = [BlockKeys(4, 8, B, 8, hashes=[h]).ensure(1)[0] for h in (1, "1", True, -1, 2 ** 64)]
    assert firsts == [10, 12, 14, 16, 18]
    assert BlockKeys(5, 8, B, 8, hashes=[-1]).ensure(2) == [16, 17]
    # Integer hash ids chain too: [1, 2] is 1 (id 5), 1.2 (id 10); [3, 2] is 3 (11), 3.2 (12).
    assert BlockKeys(6, 16, B, 8, hashes=[1, 2]).ensure(4) == [10, 11, 20, 21]
    assert BlockKeys(7, 16, B, 8, hashes=[3, 2]).ensure(4) == [22, 23, 24, 25]


def test_consecutive_entry_ids_give_their_keys_as_one_range(fresh_entries, monkeypatch):
    """hash_block_size 8, block size 4 (2 keys per entry id), a new table. [a, b, c]
    interns ids 0, 1, 2 (consecutive: one range), in two calls (blocks 0-2, then
    3-5: entry 1's second key starts the second range); [a, d, b] finds a (0) and
    interns a.d (3), a.d.b (4): ids 0, 3, 4 are two runs, a range each, 0-1 and 6-9."""
    made = []

    class CountingRange:  # (the ranges `ensure` makes, by their bounds)
        def __new__(cls, low, high):
            made.append((low, high))
            return range(low, high)

    monkeypatch.setattr(fresh_entries, "range", CountingRange, raising=False)
    abc = BlockKeys(0, 24, B, 8, hashes=["a", "b", "c"])
    assert abc.ensure(3) == [0, 1, 2]
    assert abc.ensure(6) == [0, 1, 2, 3, 4, 5]
    assert made == [(0, 3), (3, 6)]
    assert BlockKeys(1, 24, B, 8, hashes=["a", "d", "b"]).ensure(6) == [0, 1, 6, 7, 8, 9]
    assert made[2:] == [(0, 2), (6, 10)]


def test_runs_of_consecutive_entry_ids_keep_the_first_entry_skipped_and_the_last_cut(
        fresh_entries):
    """hash_block_size 8, block size 4 (2 keys per entry id). [a, b] interns 0, 1 and
    [e] 2; [a, b, f, g], P=28 (7 blocks): ids 0, 1, 3, 4, two runs. Its first key
    alone ([0]), then the rest: the first run resumes at key 1 (keys 1-3), the second
    ends a key short of its last entry (6-8, not 9)."""
    ab = BlockKeys(0, 16, B, 8, hashes=["a", "b"])  # (kept: the table lives with them)
    e = BlockKeys(1, 8, B, 8, hashes=["e"])
    assert (ab.ensure(4), e.ensure(2)) == ([0, 1, 2, 3], [4, 5])
    keys = BlockKeys(2, 28, B, 8, hashes=["a", "b", "f", "g"])
    assert keys.ensure(1) == [0]
    assert keys.ensure(7) == [0, 1, 2, 3, 6, 7, 8]


def test_interned_keys_when_the_block_size_does_not_divide_hash_block_size(fresh_entries):
    """hash_block_size 6, block size 4 (ceil(6/4) = 2 keys per entry id), P=12, [x, y]:
    block 0 ends at token 3 (entry x, offset 3: slot 0), block 1 at token 7 (entry x.y,
    offset 1: slot 0), block 2 at token 11 (x.y, offset 5: slot 1): keys [0, 2, 3],
    the same one block at a time."""
    assert BlockKeys(0, 12, B, 6, hashes=["x", "y"]).ensure(3) == [0, 2, 3]
    step = BlockKeys(1, 12, B, 6, hashes=["x", "y"])
    for i in range(1, 4):
        step.ensure(i)
    assert step.keys == [0, 2, 3]


def test_the_interning_table_lives_as_long_as_a_cache_that_holds_its_keys(fresh_entries):
    """A cache, then [u] and [x] interned (ids 0 and 1) by chains that are gone by the
    time [x] is looked up again: the cache keeps the table, so [x] is still id 1 and its
    cached block is found. (A table dropped with the chains would give [x] id 0.)"""
    import gc
    a = BlockAllocator(4, B, cache=VllmCache())
    BlockKeys(0, 8, B, 8, hashes=["u"]).ensure(2)
    kx = BlockKeys(1, 8, B, 8, hashes=["x"])
    assert prefill(a, "A", kx, 8) == [0, 1]
    assert kx.keys == [2, 3]
    a.free_request("A", 0, 0)
    del kx
    gc.collect()
    again = BlockKeys(2, 8, B, 8, hashes=["x"])
    assert again.ensure(2) == [2, 3]
    assert a.lookup(again, 2) == [0, 1]


@pytest.mark.parametrize("compact", [False, True])
def test_vllm_cache_one_block_evictions_take_the_queue_s_order_and_empty_the_runs(compact):
    """vLLM's cache, pool of 4, block size 4. A's [0,1,2] freed: the run [2,1,0]. B
    finds [0] (its entry is taken off the run's end: [2,1]). X writes 4 rows into 3
    and frees it (run [3]), then B frees 0 (run [0]): the queue is 2, 1, 3, 0.
    One-block growths (decodes opening a block) take 2, 1, 3, then 0; each key
    leaves the index, and no run is left."""
    a = BlockAllocator(4, B, cache=VllmCache(compact))
    ka = plain_keys(0, 12)
    assert prefill(a, "A", ka, 12) == [0, 1, 2]
    a.free_request("A", 0, 0)
    kb = plain_keys(0, 12)
    assert a.lookup(kb, 1) == [0]
    a.share("B", [0], kb)
    assert prefill(a, "X", plain_keys(1, 4), 4) == [3]
    a.free_request("X", 0, 0)
    a.free_request("B", 0, 0)
    ok(a)
    assert (a.cache.stale, [list(r[0]) for r in a.cache.runs]) == ({}, [[2, 1], [3], [0]])
    for rows, table in ((1, [2]), (5, [2, 1]), (9, [2, 1, 3]), (13, [2, 1, 3, 0])):
        assert a.grow("C", rows) == 1
        ok(a)
        assert a.table("C") == table
    assert (a.cache.index, list(a.cache.runs), a.cache.stale, a.cache.stale_total) == (
        {}, [], {}, 0)


@pytest.mark.parametrize("compact", [False, True])
def test_vllm_cache_a_one_block_eviction_that_empties_the_queue_drops_the_runs(compact):
    """vLLM's cache, pool of 3: A's [0,1,2] freed (run [2,1,0]); B finds [0] and keeps
    it (taken off the run's end). Two one-block growths take 2 and 1: the queue is
    empty, and so are the runs and their ends (as taking the whole queue at once
    leaves them; a stale entry left is dropped too: tests/test_stale_entries.py)."""
    a = BlockAllocator(3, B, cache=VllmCache(compact))
    ka = plain_keys(0, 12)
    assert prefill(a, "A", ka, 12) == [0, 1, 2]
    a.free_request("A", 0, 0)
    kb = plain_keys(0, 12)
    a.share("B", a.lookup(kb, 1), kb)
    assert (a.grow("C", 1), a.grow("C", 5)) == (1, 1)
    ok(a)
    assert (a.table("C"), len(a.cache.free_blocks), list(a.cache.runs), a.cache.stale,
            a.cache.stale_total, a.cache.ends) == ([2, 1], 0, [], {}, 0, {})


@pytest.mark.parametrize("compact", [False, True])
def test_vllm_cache_a_decode_that_fills_a_cached_block_keeps_it_as_a_duplicate(compact):
    """vLLM's cache, pool of 4, block size 4: A writes [1..8] into [0,1]; B writes [1..4]
    into 2 and then, a row at a time as decodes do, [5..8] into 3: block 2 and then
    block 3 (registered alone) are duplicates of A's 0 and 1."""
    a = BlockAllocator(4, B, cache=VllmCache(compact))
    ids = [1, 2, 3, 4, 5, 6, 7, 8]
    ka, kb = keys_of(ids, 0), keys_of(ids[:4], 1, output_ids=ids[4:])
    assert prefill(a, "A", ka, 8) == [0, 1]
    assert prefill(a, "B", kb, 4) == [2]
    for rows in range(5, 9):
        a.grow("B", rows)
        a.register_decoded("B", kb, rows)
        ok(a)
    assert a.table("B") == [2, 3]
    assert [a.cache.index[key(kb, i)] for i in range(2)] == [0, 1]
    assert a.cache.others == {key(kb, 0): [2], key(kb, 1): [3]}


@pytest.mark.parametrize("compact", [False, True])
def test_vllm_cache_a_freed_table_drops_only_its_own_blocks_extra_owners(compact):
    """vLLM's cache, pool of 12, block size 4. A writes 12 rows into [0,1,2]; D writes
    other 12 rows into [3,4,5]. B finds A's [0,1]; E finds D's [3,4]; F finds A's [0].
    Extra owners: 0 twice, 1, 3 and 4 once (D's blocks sit at A's positions 0 and 1:
    not A's). A frees: 0 keeps one extra owner, 1 none; 3 and 4 keep theirs, and only
    A's 2 joins the queue."""
    a = BlockAllocator(12, B, cache=VllmCache(compact))
    ka = keys_of(list(range(1, 13)), 0)
    kd = keys_of(list(range(101, 113)), 1)
    assert prefill(a, "A", ka, 12) == [0, 1, 2]
    assert prefill(a, "D", kd, 12) == [3, 4, 5]
    for rid, index, ids, n in (("B", 2, range(1, 13), 2), ("E", 3, range(101, 113), 2),
                               ("F", 4, range(1, 13), 1)):
        keys = keys_of(list(ids), index)
        a.share(rid, a.lookup(keys, n), keys)
    ok(a)
    assert owner_counts(a._extra) == {0: 2, 1: 1, 3: 1, 4: 1}
    assert a.free_request("A", 0, 0) == 1
    ok(a)
    assert owner_counts(a._extra) == {0: 1, 3: 1, 4: 1}
    assert list(zip(*a.cache.queue_items())) == [(2, key(ka, 2))]


def test_vllm_cache_owned_elsewhere_is_a_run_of_leading_blocks_found_by_a_search():
    """Pool of 12, block size 4. A writes 16 rows into [0,1,2,3]; B finds [0,1,2], C
    finds [0]: A's released leading blocks, last first, are [3,2,1,0], and those
    others own are its first three ({0,1,2}); with only C left, its first one."""
    a = BlockAllocator(12, B, cache=VllmCache())
    ids = list(range(1, 17))
    assert prefill(a, "A", keys_of(ids, 0), 16) == [0, 1, 2, 3]
    for rid, index, n in (("B", 1, 3), ("C", 2, 1)):
        keys = keys_of(ids, index)
        a.share(rid, a.lookup(keys, n), keys)
    assert (owner_counts(a._extra), a.cache.others) == ({0: 2, 1: 1, 2: 1}, {})
    assert a.cache.owned_elsewhere([3, 2, 1, 0], a._extra) == {0, 1, 2}
    assert a.cache.owned_lead([3, 2, 1, 0], a._extra) == 3
    assert a.cache.owned_lead([3, 2, 1, 0], {0: 1, 1: 1, 2: 1, 7: 1}) == 3  # (7: not A's)
    assert a.cache.owned_lead([2, 1, 0], a._extra) == 3  # (every block, at most `extra`'s)
    a.free_request("B", 0, 0)
    ok(a)
    assert a.cache.owned_elsewhere([3, 2, 1, 0], a._extra) == {0}
    assert a.cache.owned_lead([3, 2, 1, 0], a._extra) == 1
    assert a.cache.owned_elsewhere([3, 2, 1, 0], {}) == set()
    assert a.cache.owned_lead([3, 2, 1, 0], {}) == 0


def test_vllm_cache_owned_elsewhere_agrees_with_the_intersection_on_random_shares():
    """Random prompts from three prefixes, look-ups cut short at random (so runs get
    duplicates), releases with and without a delay, in a pool of 24: at every release
    the search (no duplicate cached) and the intersection (duplicates) give what
    `extra.keys() & keyed` gives. Seeded: 38 releases search, finding 88 blocks owned
    elsewhere; 119 have duplicates cached (a run cut short by a draining block, or by
    the look-up's limit, writes its later blocks again)."""
    import random
    r = random.Random(5)
    a = BlockAllocator(24, B, cache=VllmCache())
    cache = a.cache
    real = cache.owned_elsewhere
    real_lead = cache.owned_lead
    seen = {"search": 0, "found by the search": 0, "duplicates": 0}

    def checked(keyed, extra):
        got = real(keyed, extra)
        assert got == extra.keys() & keyed
        assert cache.others  # (asked only when the search cannot tell)
        seen["duplicates"] += 1
        return got

    def checked_lead(keyed, extra):
        got = real_lead(keyed, extra)
        if got is None:
            assert cache.others
            return got
        assert set(keyed[len(keyed) - got:]) == extra.keys() & keyed
        seen["search"] += 1
        seen["found by the search"] += got
        return got

    cache.owned_elsewhere = checked
    cache.owned_lead = checked_lead
    prefixes = [list(range(1, 13)), list(range(1, 9)) + [50, 51, 52, 53], list(range(60, 72))]
    live = []
    for step in range(400):
        now = step
        a.release_expired(now)
        if live and (r.random() < 0.45 or len(live) > 5):
            a.free_request(live.pop(r.randrange(len(live))), now, r.choice((0, 0, 2)))
            ok(a)
            continue
        ids = r.choice(prefixes) + [100 + r.randrange(3) for _ in range(r.randrange(9))]
        keys = keys_of(ids, step)
        rid = f"r{step}"
        cut = r.random() < 0.05  # (a look-up cut short: the blocks after it duplicates)
        hits = a.lookup(keys, r.randrange(len(ids) // B + 1) if cut else len(ids) // B)
        if len(ids) // B + 1 - len(hits) > a.free:
            continue
        a.share(rid, hits, keys)
        prefill(a, rid, keys, len(ids))
        live.append(rid)
    assert seen == {"search": 38, "found by the search": 88, "duplicates": 119}


def test_tree_mode_heap_of_candidates_stays_bounded_and_keeps_the_order():
    """Tree mode, two free leaves under no parent: node 0 = [1] (key a) and node 1 =
    [2] (key b). 200 look-ups alternate between them, ending on node 0, each pushing
    a fresh (stamp, node) entry: without a rebuild the heap would hold 202 entries;
    it is rebuilt past 2 x 2 nodes + SLACK (64) = 68, so it never exceeds 68.
    Stamps: look-up k (k = 1..200) gives stamp k; node 1 last got 199, node 0 got
    200, so node 1 is evicted first, then node 0."""
    c = RadixCache()
    c.index.update({"a": 1, "b": 2})
    c._new_node([1], ["a"], None, 0)
    c._new_node([2], ["b"], None, 0)
    assert c.give_back([1, 2]) == ()
    sizes = []
    for k in range(1, 201):
        c.touch_path(2 if k % 2 else 1)
        sizes.append(len(c.candidates))
    assert max(sizes) == 68
    assert [info[3] for info in c.nodes.values()] == [200, 199]
    assert c.evict_one() == [2]
    assert c.evict_one() == [1]
    assert (c.index, c.nodes) == ({}, {})


class _Keys:
    """A request's keys given outright, all of other kinds than integers (so `tail`,
    as a `BlockKeys` holds them); `ensure` notes how far it was asked."""

    found = None  # (`BlockKeys.found`: the radix tree's kept answer)
    ints = 0
    run_pos: list = []
    run_key: list = []

    def __init__(self, keys: list) -> None:
        self.keys, self.tail, self.asked = keys, keys, []

    def ensure(self, count: int, listed: bool = True) -> list:
        self.asked.append(count)
        return self.keys

    def span(self, start: int, stop: int) -> list:
        return self.keys[start:stop]


class _CountedIndex(RadixIndex):
    """An index that counts its look-ups (of keys other than integers: the tree's
    `find` reads the buckets of integer keys itself)."""

    gets = 0

    def get(self, key, default=None):
        self.gets += 1
        return super().get(key, default)


def _walked(c: RadixCache, keys: list, max_blocks: int) -> tuple[list, list, list, int, list]:
    """The radix tree's find and the index walk's (`PrefixCache.find`) on the same keys,
    the slices each asked keys for, and the tree's index look-ups."""
    counted = _CountedIndex()
    counted.update(dict(c.index))
    c.index = counted
    mine, theirs = _Keys(keys), _Keys(keys)
    found = c.find(mine, max_blocks)
    gets = c.index.gets
    return found, super(RadixCache, c).find(theirs, max_blocks), mine.asked, gets, theirs.asked


def test_tree_mode_find_walks_node_by_node_as_the_index_would_key_by_key():
    """Node 0 = [1, 2, 3] (keys a b c) over node 1 = [4, 5] (d e). Keys a b c d x find
    [1, 2, 3, 4] with 3 index look-ups (a, d, and x, which differs inside node 1 and
    is not cached) where the index walk makes 5; at most 2 blocks: [1, 2], 1 look-up.
    With node 2 = [100..113] (z0..z13) under node 1, 25 keys are asked in a slice of
    16, then up to 25, as the index walk asks them; the second slice begins inside
    node 2, at z11, which the walk goes on with (its next key is the request's):
    4 look-ups (a, d, z0, z14) for 19 blocks.
    The first key unknown: nothing, 1 look-up."""
    c = RadixCache()
    c.index.update({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5})
    parent = c._new_node([1, 2, 3], ["a", "b", "c"], None, 0)
    c._new_node([4, 5], ["d", "e"], parent, 0)
    keys = ["a", "b", "c", "d", "x"] + [f"y{i}" for i in range(15)]
    assert _walked(c, keys, 20) == ([1, 2, 3, 4], [1, 2, 3, 4], [16], 3, [16])
    assert _walked(c, keys, 2) == ([1, 2], [1, 2], [2], 1, [2])
    long = ["a", "b", "c", "d", "e"] + [f"z{i}" for i in range(20)]
    c.index.update({f"z{i}": 100 + i for i in range(14)})
    c._new_node(list(range(100, 114)), [f"z{i}" for i in range(14)], 1, 0)
    found = [1, 2, 3, 4, 5] + list(range(100, 114))
    assert _walked(c, long, 25) == (found, found, [16, 25], 4, [16, 25])
    # The same with w in place of z11: looked up afresh where the slice begins (not
    # cached): 16 blocks, 4 look-ups (a, d, z0, w).
    cut = long[:16] + ["w"] + long[17:]
    assert _walked(c, cut, 25) == (found[:16], found[:16], [16, 25], 4, [16, 25])
    assert _walked(c, ["q", "a"], 2) == ([], [], [2], 1, [2])


def test_tree_mode_find_across_a_gap_in_a_node_is_the_index_walk():
    """Node 0 = [1, 2, 4] (keys a b d: a run registered while c was cached in block 3,
    node 1): keys a b c d e find 1, 2 in node 0, 3 in node 1, then 4 at position 2 of
    node 0 (4 look-ups: a, c, d, e), the index walk's [1, 2, 3, 4]."""
    c = RadixCache()
    c.index.update({"a": 1, "b": 2, "c": 3, "d": 4})
    c._new_node([1, 2, 4], ["a", "b", "d"], None, 0)
    c._new_node([3], ["c"], None, 0)
    assert _walked(c, ["a", "b", "c", "d", "e"], 5) == ([1, 2, 3, 4], [1, 2, 3, 4], [5], 4,
                                                         [5])


def test_tree_mode_find_gives_a_kept_answer_again_while_it_holds():
    """Node 0 = [1, 2, 3] (a b c) over node 1 = [4, 5] (d e); keys a b c d x y.
    At most 6 blocks: [1, 2, 3, 4] by a walk (ensure asked 6; nodes 0 and 1
    entered; it stops at x), then again from the kept answer (nothing asked, no
    look-up but x's: 1 get), a copy each time. At most 5: a walk. Node 1 split
    after 4 (node 2 = [4] over node 1 = [5]): kept. x cached in block 6, node 3
    under node 2: a walk finds 6 too. Block 6 freed and node 3 evicted: a walk,
    [1, 2, 3, 4]. Another tree's look-up: a walk, then the first tree's. x cached
    again (block 7, node 4): a walk; block 1 freed while no leaf is free, taken
    out of node 0 alone (`_detach`: nodes 0, 2 and 4 still exist): a walk, []."""
    c = RadixCache()
    c.index = _CountedIndex()
    c.index.update({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5})
    parent = c._new_node([1, 2, 3], ["a", "b", "c"], None, 0)
    c._new_node([4, 5], ["d", "e"], parent, 0)
    keys = _Keys(["a", "b", "c", "d", "x", "y"])
    first = c.find(keys, 6)
    assert (first, keys.asked, c.found_again, c.index.gets) == ([1, 2, 3, 4], [6], 0, 3)
    assert keys.found[2:5] == ([1, 2, 3, 4], [0, 1], "x")
    first.append(99)  # (the caller's to change: the kept answer is a copy)
    assert (c.find(keys, 6), keys.asked, c.found_again, c.index.gets) == (
        [1, 2, 3, 4], [6], 1, 4)
    assert (c.find(keys, 5), keys.asked, c.found_again) == ([1, 2, 3, 4], [6, 5], 1)
    assert (c.find(keys, 6), c.found_again) == ([1, 2, 3, 4], 1)
    assert (c.find(keys, 6), c.found_again) == ([1, 2, 3, 4], 2)
    c.split_after(4)
    assert (c.nodes[2][0], c.nodes[1][0], c.nodes[1][1]) == ([4], [5], 2)
    assert (c.find(keys, 6), c.found_again) == ([1, 2, 3, 4], 3)
    c.index.update({"x": 6})
    c._new_node([6], ["x"], 2, 0)
    assert (c.find(keys, 6), c.found_again) == ([1, 2, 3, 4, 6], 3)
    assert (c.find(keys, 6), c.found_again) == ([1, 2, 3, 4, 6], 4)
    assert c.give_back([6]) == () and c.evict_one() == [6]
    assert (c.find(keys, 6), c.found_again) == ([1, 2, 3, 4], 4)
    assert (c.find(keys, 6), c.found_again) == ([1, 2, 3, 4], 5)
    other = RadixCache()
    assert (other.find(keys, 6), other.found_again) == ([], 0)
    assert (c.find(keys, 6), c.found_again) == ([1, 2, 3, 4], 5)  # (kept by `other` now)
    assert (c.find(keys, 6), c.found_again) == ([1, 2, 3, 4], 6)
    c.index.update({"x": 7})
    c._new_node([7], ["x"], 2, 0)
    assert (c.find(keys, 6), c.found_again) == ([1, 2, 3, 4, 7], 6)
    assert c.give_back([1]) == () and c.evict_one() == [1]
    assert (c.nodes[0][0], c.detached, sorted(c.nodes)) == ([2, 3], 1, [0, 1, 2, 4])
    assert (c.find(keys, 6), c.found_again) == ([], 6)
