"""A freed table's own keys, tail first (`TailFirstKeys`, kv/key_index.py): runs of
them are found exactly, so vLLM's queue sets and clears their flags without
comparing the blocks; a rebuild of the queue's runs keeps the type
(kv/run_queue.py)."""
from __future__ import annotations

from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.key_index import KeyIndex, TailFirstKeys
from scheduler_sim.kv.queue_members import QueueMembers
from scheduler_sim.kv.sharing import owner_counts
from scheduler_sim.kv.vllm_cache import VllmCache


def test_a_slice_or_copy_of_tail_first_keys_is_a_plain_list():
    keys = TailFirstKeys([8, 7, 6])
    assert (keys == [8, 7, 6], type(keys[1:]), type(list(keys))) == (True, list, list)


def test_tail_first_keys_of_indexed_blocks_set_and_clear_the_same_flags():
    """Buckets of 4: keys 4..8 index blocks 10..14. Blocks 14, 13, 12, 11 join the
    queue with keys 8, 7, 6, 5, as a plain list (each run compared with its bucket)
    and as a freed table's own keys of indexed blocks (not compared): the same flags,
    bucket 1 [0, 1, 1, 1] and bucket 2 [1, 0, 0, 0]. Evicting 13, 12 (keys 7, 6) as
    tail-first keys clears two flags and their index entries."""
    flags = []
    for keys, indexed in (([8, 7, 6, 5], False), (TailFirstKeys([8, 7, 6, 5]), True)):
        index = KeyIndex(4)
        index.add([4, 5, 6, 7, 8], 0, 5, [10, 11, 12, 13, 14])
        members = QueueMembers(index, lambda: ([], []))
        members.add([14, 13, 12, 11], keys, indexed)
        flags.append((dict(members.flags), members.loose, len(members)))
    assert flags[0] == flags[1] == (
        {1: bytearray([0, 1, 1, 1]), 2: bytearray([1, 0, 0, 0])}, set(), 4)
    members.evict([13, 12], TailFirstKeys([7, 6]), 0)
    assert (index.get(7), index.get(6), index.get(5), members.flags[1], len(members)) == (
        None, None, 11, bytearray([0, 1, 0, 0]), 2)


def test_a_table_freed_at_once_carries_its_own_keys_and_one_that_drains_does_not():
    """Pool of 8, blocks of 4, hash entries of 8 tokens (a new interning table, as every
    test has: conftest.py). A's 12 rows key blocks 0, 1,
    2; freed with no delay, they join the queue as one run 2, 1, 0 whose keys are A's
    own, tail first: one run of consecutive keys going down, a `range`. B's 12 rows (other hash ids) take blocks 3, 4, 5 and drain for a
    step: their run's keys are a plain list (the drain queue may merge tables). The
    flags agree with the queue either way (the audit); taking 4 evicts 2, 1, 0 and 5,
    leaving 4 and 3 (B's first two keys)."""
    a = BlockAllocator(8, 4, cache=VllmCache())
    keys = {}
    for rid, hashes in (("A", [1, 2]), ("B", [3, 4])):
        keys[rid] = BlockKeys(0 if rid == "A" else 1, 12, 4, 8, hashes=hashes)
        a.grow(rid, 12)
        a.register_full_blocks(rid, keys[rid], 12)
    ka, kb = keys["A"].keys, keys["B"].keys  # (their values: interned ids, shared)
    a.free_request("A", 0, 0)
    a.free_request("B", 0, 1)
    a.release_expired(1)
    runs = a.cache.runs
    assert [(r[0], type(r[1])) for r in runs] == [([2, 1, 0], range), ([5, 4, 3], list)]
    assert (list(runs[0][1]), runs[1][1]) == (ka[::-1], kb[::-1])
    a.cache.free_blocks.check(*a.cache.queue_items())
    assert a.cache.take("C", [], 4) == (4, ())  # A's three and B's 5: tail first, in order
    assert (a.cache.queue_items(), a.cache.index.get(kb[0])) == (([4, 3], [kb[1], kb[0]]), 3)


def test_a_rebuild_drops_stale_entries_and_keeps_a_freed_tables_own_keys():
    """Runs A [90, 91, 92] (bytes keys), B [69, 68, ..., 0] (keys 169 down to 100, a
    freed table's own), C [0] (key 100: block 0 came back after a hit left its entry in
    B stale). A's first block is evicted (A starts at 1). Hits on 1..68 make 69 stale
    entries against a queue of 3 (> 3 + 64): the runs become A [91, 92], B [69] (its
    key 169 still a freed table's own) and C [0], nothing stale."""
    c = VllmCache()
    c.index.add(list(range(100, 170)), 0, 70, list(range(70)))  # (block b keyed 100 + b)
    c.give_back([], [90, 91, 92], [b"x", b"y", b"z"])
    c.give_back([], list(range(69, -1, -1)), TailFirstKeys(range(169, 99, -1)))
    assert c.pop_one() == (90, b"x")
    c.hit(0)
    c.give_back([], [0], [100])
    for b in range(1, 68):
        c.hit(b)
    assert (c.stale_total, len(c.runs)) == (68, 3)
    c.hit(68)
    assert ([(r[0], type(r[1]), list(r[1]), r[2]) for r in c.runs], c.stale,
            c.stale_total) == ([([91, 92], list, [b"y", b"z"], 0),
                                ([69], TailFirstKeys, [169], 0), ([0], list, [100], 0)], {}, 0)
    c.free_blocks.check(*c.queue_items())
    assert c.queue_items() == ([91, 92, 69, 0], [b"y", b"z", 169, 100])


def test_a_compact_cache_sets_a_freed_tables_flags_as_a_lone_engines_does():
    """A fleet's replica's cache (compact: its runs' keys packed), given a freed
    table's own keys with no duplicate cached: blocks 3, 2, 1, 0 (keys 103 down to
    100; buckets of 32: bucket 3, offsets 7 down to 4) are flagged there, nothing
    loose, the run packed. With duplicates cached (blocks 8, 9 also keyed 100, 101,
    whose index names 0 and 1) a freed run is compared with the index: 9, 8 are
    loose, their keys' flags not set."""
    c = VllmCache(compact=True)
    c.index.add([100, 101, 102, 103], 0, 4, [0, 1, 2, 3])
    c.give_back([], [3, 2, 1, 0], TailFirstKeys([103, 102, 101, 100]))
    assert (c.free_blocks.flags[3][4:8], c.free_blocks.loose, len(c.free_blocks),
            type(c.runs[0][1]).__name__) == (bytearray([1, 1, 1, 1]), set(), 4, "array")
    c.free_blocks.check(*c.queue_items())
    d = VllmCache(compact=True)
    d.index.add([100, 101], 0, 2, [0, 1])
    d.others.update({100: [8], 101: [9]})
    d.give_back([], [9, 8], TailFirstKeys([101, 100]))
    assert (d.free_blocks.flags.get(3, bytearray(32))[4:6], d.free_blocks.loose) == (
        bytearray([0, 0]), {8, 9})


def test_a_freed_tables_pieces_join_the_queue_in_one_call_as_they_would_one_by_one():
    """Buckets of 4: keys 4..9 index blocks 10..15. A freed table, tail first: blocks
    21, 20 without keys (`NoKeys`), then 15..11 with keys 9..5 and 10 with key 4 (two
    runs going down, `range`s). `add_runs` sets what `add` piece by piece sets: bucket
    2 (keys 8..11) [1, 1, 0, 0] made first (the top key first), bucket 1 [1, 1, 1, 1];
    21 and 20 loose; 8 members. Not `indexed`, each piece is compared (`add`): the
    same."""
    from scheduler_sim.kv.tail_first import NoKeys
    parts = [[21, 20], [15, 14, 13, 12, 11], [10]]
    pieces = [NoKeys(2), range(9, 4, -1), range(4, 3, -1)]
    got = []
    for way in ("one by one", "at once", "at once, compared"):
        index = KeyIndex(4)
        index.add([4, 5, 6, 7, 8, 9], 0, 6, [10, 11, 12, 13, 14, 15])
        members = QueueMembers(index, lambda: ([], []))
        if way == "one by one":
            for part, piece in zip(parts, pieces):
                members.add(part, piece, True)
        else:
            members.add_runs(parts, pieces, way == "at once")
        got.append((list(members.flags.items()), members.loose, len(members)))
    assert got[0] == got[1] == got[2] == (
        [(2, bytearray([1, 1, 0, 0])), (1, bytearray([1, 1, 1, 1]))], {20, 21}, 8)


def test_a_release_with_shared_blocks_queues_the_rest_as_runs_and_keeps_the_order():
    """Pool of 8, blocks of 4, hash entries of 8 tokens. A's 16 rows (entries 1, 2)
    key blocks 0..3; B's prompt (entries 1, 3) finds 0 and 1 and writes 4, 5. A
    released: B owns its first two blocks too (`owned_lead` 2), so only 3, 2 join
    the queue, one run of A's keys going down; 0 and 1 lose their extra owner. B
    released: 5, 4 (entry 3's keys) and then 1, 0 (entry 1's), two runs, after A's.
    The queue, least recently freed first: 3, 2, 5, 4, 1, 0."""
    a = BlockAllocator(8, 4, cache=VllmCache())
    ka = BlockKeys(0, 16, 4, 8, hashes=[1, 2])
    kb = BlockKeys(1, 16, 4, 8, hashes=[1, 3])
    a.grow("A", 16)
    a.register_full_blocks("A", ka, 16)
    hits = a.lookup(kb, 4)
    assert hits == [0, 1]
    a.share("B", hits, kb)
    a.grow("B", 16)
    a.register_full_blocks("B", kb, 16)
    assert (a.table("A"), a.table("B"), owner_counts(a._extra)) == ([0, 1, 2, 3], [0, 1, 4, 5], {0: 1, 1: 1})
    assert a.cache.owned_lead([3, 2, 1, 0], a._extra) == 2
    assert a.free_request("A", 0, 0, ended=True) == 2
    assert (owner_counts(a._extra), [(r[0], type(r[1])) for r in a.cache.runs]) == ({}, [([3, 2], range)])
    assert a.free_request("B", 0, 0, ended=True) == 4
    runs = a.cache.runs
    assert [(r[0], type(r[1])) for r in runs] == [
        ([3, 2], range), ([5, 4], range), ([1, 0], range)]
    assert [list(r[1]) for r in runs] == [
        ka.keys[3:1:-1], kb.keys[3:1:-1], kb.keys[1::-1]]
    a.cache.free_blocks.check(*a.cache.queue_items())
    assert a.cache.queue_items()[0] == [3, 2, 5, 4, 1, 0]
