"""A request's keys as runs (kv/block_keys.py: `run_pos`, `run_key`, `tail`; the
list `keys` made only when asked), read as runs by vLLM's index
(kv/key_index.py `_pieces`) and handed to its queue tail first as runs
(kv/tail_first.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.key_index import KeyIndex
from scheduler_sim.kv.key_pieces import _pieces
from scheduler_sim.kv.tail_first import NoKeys, TailFirstRuns, tail_first
from scheduler_sim.kv.vllm_cache import VllmCache


def runs(ints, run_pos, run_key, tail):
    """Keys as a `BlockKeys` holds them (what the readers of runs read)."""
    return SimpleNamespace(ints=ints, run_pos=run_pos, run_key=run_key, tail=tail)


# Keys 10, 11, 12, 20, 21, b"x" (blocks 0 to 5): two runs and a key of another kind.
KEYS = runs(5, [0, 3], [10, 20], [b"x"])
LISTED = [10, 11, 12, 20, 21, b"x"]


def test_a_requests_keys_are_runs_and_a_list_only_when_asked():
    """Entries of 8 tokens, blocks of 4 (2 keys an entry). A: hash ids 9100001 and
    9100002, new, interned e and e + 1: 4 blocks, one run 2e .. 2e + 3, no list made.
    B: 9100001 then 9100003 (e, then e + 2) and 8 prompt tokens past its hash ids:
    runs 2e, 2e + 1 and 2e + 4, 2e + 5, then its own keys b"r7:4", b"r7:5"."""
    a = BlockKeys(6, 16, 4, 8, hashes=[9100001, 9100002])
    a.ensure(4, False)
    e2 = a.run_key[0]
    assert (a.known, a.ints, a.run_pos, a.tail, a.key_list) == (4, 4, [0], [], None)
    assert a.keys == [e2, e2 + 1, e2 + 2, e2 + 3]
    b = BlockKeys(7, 24, 4, 8, hashes=[9100001, 9100003])
    b.ensure(3, False)
    listed = b.keys  # (made now: kept up to date from now on)
    b.ensure(6, False)
    assert (b.run_pos, b.run_key, b.tail) == ([0, 2], [e2, e2 + 4], [b"r7:4", b"r7:5"])
    assert listed is b.keys
    assert listed == [e2, e2 + 1, e2 + 4, e2 + 5, b"r7:4", b"r7:5"]
    assert [b.key_at(i) for i in range(6)] == listed
    assert b.ensure(2) is listed and b.known == 6


def test_the_index_reads_runs_as_it_reads_the_list():
    """Buckets of 4: keys 10, 11 | 12 | 20, 21 of blocks 1 to 4 are three pieces
    (bucket 2 at 2, bucket 3 at 0, bucket 5 at 0), then b"x" of block 5; adding and
    finding with the runs or the list leave and find the same."""
    assert _pieces(KEYS, 1, 6, 4) == ([(1, 2, 3, 1), (2, 3, 0, 1), (3, 5, 0, 2)], 5, [b"x"])
    assert _pieces(KEYS, 0, 4, 4) == ([(0, 2, 2, 2), (2, 3, 0, 1), (3, 5, 0, 1)], 4, [])
    assert _pieces(LISTED, 1, 6, 4) == _pieces(KEYS, 1, 6, 4)
    blocks = [30, 31, 32, 33, 34, 35]
    found = []
    for keys in (KEYS, LISTED):
        index = KeyIndex(4)
        index.add([11], 0, 1, [99])  # (key 11 cached already: block 31 a duplicate)
        dupes = index.add(keys, 0, 6, blocks)
        found.append((dupes, dict(index.items()), index.find(keys, 0, 6),
                      index.find(keys, 2, 4)))
    assert found[0] == found[1] == (
        [(11, 31)], {10: 30, 11: 99, 12: 32, 20: 33, 21: 34, b"x": 35},
        ([30, 99, 32, 33, 34, 35], True), ([32, 33], True))


def test_a_freed_tables_keys_tail_first_as_runs():
    """The keys of KEYS's first 6, 4 and 2 blocks, tail first: the tail's reversed,
    then each run going down, the last run first; `del keys[n:]` keeps n."""
    assert tail_first(KEYS, 6).pieces == [[b"x"], range(21, 19, -1), range(12, 9, -1)]
    assert tail_first(KEYS, 4).pieces == [range(20, 19, -1), range(12, 9, -1)]
    assert tail_first(KEYS, 2).pieces == [range(11, 9, -1)]
    assert tail_first(KEYS, 0).pieces == []
    keys = tail_first(KEYS, 6)
    assert (len(keys), list(keys)) == (6, LISTED[::-1])
    del keys[4:]
    assert (len(keys), keys.pieces) == (4, [[b"x"], range(21, 19, -1), range(12, 11, -1)])
    del keys[3:]
    assert (len(keys), keys.pieces) == (3, [[b"x"], range(21, 19, -1)])
    del keys[0:]
    assert (len(keys), keys.pieces) == (0, [])
    keys = tail_first(KEYS, 6)
    del keys[7:]  # (past its end: nothing cut)
    assert (len(keys), keys.pieces) == (6, [[b"x"], range(21, 19, -1), range(12, 9, -1)])
    del keys[2:]  # (the last piece and one key of the one before it)
    assert (len(keys), keys.pieces) == (2, [[b"x"], range(21, 20, -1)])
    with pytest.raises(TypeError):
        del TailFirstRuns([[b"x"]], 1)[0:1]


def test_a_table_freed_at_once_joins_the_queue_a_run_of_keys_at_a_time():
    """Pool of 8, blocks of 4, entries of 8 tokens. A (hash ids 9200001, 9200002)
    interns e, e + 1; B (9200001, 9200003, and 4 prompt tokens more) has keys 2e,
    2e + 1, 2e + 4, 2e + 5 and its own b"r1:4" on blocks 0 to 4. Freed at once, its
    table joins the queue as three runs, tail first: block 4 (its own key), blocks
    3, 2 (a range going down), blocks 1, 0 (the table's own list, cut: the release
    still counts 5 blocks sent); the flags agree (the audit), and taking 4 evicts
    4, 3, 2, 1."""
    a = BlockAllocator(8, 4, cache=VllmCache())
    first = BlockKeys(0, 16, 4, 8, hashes=[9200001, 9200002])
    first.ensure(4, False)  # (interns e and e + 1)
    e2 = first.run_key[0]
    keys = BlockKeys(1, 20, 4, 8, hashes=[9200001, 9200003])
    a.grow("B", 20)
    a.register_full_blocks("B", keys, 20)
    assert a.free_request("B", 0, 0) == 5
    queue = [(r[0], r[1]) for r in a.cache.runs]
    assert queue == [([4], [b"r1:4"]), ([3, 2], range(e2 + 5, e2 + 3, -1)),
                     ([1, 0], range(e2 + 1, e2 - 1, -1))]
    assert keys.key_list is None  # (never made: the cache read the runs)
    a.cache.free_blocks.check(*a.cache.queue_items())
    assert a.cache.take("C", [], 4) == (4, ())
    assert a.cache.queue_items() == ([0], [e2])


def test_a_requests_own_keys_are_indexed_when_it_lets_go_of_its_blocks(monkeypatch):
    """Pool of 8, blocks of 4, entries of 8 tokens. A (hash id 9300001, 12 prompt
    tokens) has key 2e, 2e + 1 on blocks 0, 1 and its own b"r3:2" on block 2 (the
    prompt's last 4 tokens, past its hash ids): registered with its prompt, all
    three indexed. Its decodes fill blocks 3 and 4: registered, no key made, not
    indexed (left from block 3 on, `unindexed`). Freed, they are made and indexed
    as one run (one `ensure`, to 5), and the queue takes [4, 3, 2] with A's own
    keys, then [1, 0] with its run. A again (preempted) shares 0 and 1 only and
    writes 5, 6, 7: left unindexed from block 2. B's block evicts 4 (the oldest),
    key b"r3:4" with it. A freed: b"r3:2" and b"r3:3" keep 2 and 3 (5 and 6 are
    duplicates), b"r3:4" indexes 7, as registering them one by one would have
    ended (4's duplicate 7 its heir)."""
    a = BlockAllocator(8, 4, cache=VllmCache())
    cache = a.cache
    keys = BlockKeys(3, 12, 4, 8, hashes=[9300001])
    a.grow("A", 12)
    a.register_full_blocks("A", keys, 12)
    e2 = keys.run_key[0]
    assert (keys.known, keys.ints, keys.tail, cache.unindexed) == (3, 2, [b"r3:2"], {})
    ensure = BlockKeys.ensure
    asked = []
    monkeypatch.setattr(BlockKeys, "ensure", lambda self, count, listed=True: (
        asked.append(count) or ensure(self, count, listed)))
    for rows in (16, 20):
        a.grow("A", rows)
        a.register_decoded("A", keys, rows)
    assert (asked, keys.known, keys.registered, keys.tail) == ([], 3, 5, [b"r3:2"])
    assert cache.unindexed == {"A": ([0, 1, 2, 3, 4], 3)}
    assert cache.unindexed["A"][0] is a._tables["A"]
    assert cache.index == {e2: 0, e2 + 1: 1, b"r3:2": 2}
    a.audit()
    assert a.free_request("A", 0, 0) == 5
    assert (asked, keys.known, keys.tail) == ([5], 5, [b"r3:2", b"r3:3", b"r3:4"])
    assert (cache.unindexed, cache.others) == ({}, {})
    assert cache.index == {e2: 0, e2 + 1: 1, b"r3:2": 2, b"r3:3": 3, b"r3:4": 4}
    assert [(r[0], r[1]) for r in cache.runs] == [
        ([4, 3, 2], [b"r3:4", b"r3:3", b"r3:2"]), ([1, 0], range(e2 + 1, e2 - 1, -1))]
    a.audit()
    a.share("A", a.lookup(keys, 2), keys)
    a.grow("A", 20)
    a.register_full_blocks("A", keys, 20)
    assert (a.table("A"), cache.unindexed["A"][1], keys.registered) == ([0, 1, 5, 6, 7], 2, 5)
    a.audit()
    a.grow("B", 4)
    assert a.table("B") == [4]
    assert cache.index == {e2: 0, e2 + 1: 1, b"r3:2": 2, b"r3:3": 3}
    a.audit()
    assert a.free_request("A", 0, 0) == 5
    assert cache.index == {e2: 0, e2 + 1: 1, b"r3:2": 2, b"r3:3": 3, b"r3:4": 7}
    assert cache.others == {b"r3:2": [5], b"r3:3": [6]}
    a.audit()


def _a_with_decodes():
    """Pool of 8, blocks of 4, entries of 8 tokens: A (trace position 3, hash id
    9300001, 12 prompt tokens) holds blocks 0, 1 (keys e2, e2 + 1), 2 (its own
    b"r3:2", indexed with the prompt) and its decodes' 3, 4 (registered, left
    unindexed from block 3)."""
    a = BlockAllocator(8, 4, cache=VllmCache())
    keys = BlockKeys(3, 12, 4, 8, hashes=[9300001])
    a.grow("A", 12)
    a.register_full_blocks("A", keys, 12)
    for rows in (16, 20):
        a.grow("A", rows)
        a.register_decoded("A", keys, rows)
    assert a.cache.unindexed == {"A": ([0, 1, 2, 3, 4], 3)}
    return a, keys, keys.run_key[0]


def test_an_ended_requests_own_blocks_stay_cached_without_keys(monkeypatch):
    """A ends (`ended`): its decodes' blocks 3 and 4 are never keyed (no `ensure`,
    nothing indexed) and join the queue first as a run of `NoKeys`, then 2 with
    b"r3:2" and 1, 0 with their run: 5 cached. B takes the 3 blocks never used
    (5, 6, 7), then one block (a decode's): 4, the oldest, one eviction and no
    key forgotten; then two: 3 and 2, b"r3:2" forgotten with 2. Left: 1 and 0,
    indexed, the audit passing throughout."""
    a, keys, e2 = _a_with_decodes()
    cache = a.cache
    ensure = BlockKeys.ensure
    asked = []
    monkeypatch.setattr(BlockKeys, "ensure", lambda self, count, listed=True: (
        asked.append(count) or ensure(self, count, listed)))
    assert a.free_request("A", 0, 0, 20, True) == 5
    assert (asked, keys.known, cache.unindexed, cache.others) == ([], 3, {}, {})
    assert cache.index == {e2: 0, e2 + 1: 1, b"r3:2": 2}
    assert [(r[0], r[1]) for r in cache.runs] == [
        ([4, 3], NoKeys(2)), ([2], [b"r3:2"]), ([1, 0], range(e2 + 1, e2 - 1, -1))]
    assert (a.cached_free, a.free, cache.free_blocks.loose) == (5, 8, {2, 3, 4})
    assert cache.queue_items() == ([4, 3, 2, 1, 0], [None, None, b"r3:2", e2 + 1, e2])
    a.audit()
    a.grow("B", 12)
    assert (a.table("B"), a.cached_free, a.step_evictions) == ([5, 6, 7], 5, {})
    a.grow("B", 16)
    assert (a.table("B")[3:], a.step_evictions) == ([4], {"B": 1})
    assert cache.index == {e2: 0, e2 + 1: 1, b"r3:2": 2}
    a.audit()
    a.grow("B", 24)
    assert (a.table("B")[4:], a.step_evictions, a.cached_free) == ([3, 2], {"B": 3}, 2)
    assert cache.index == {e2: 0, e2 + 1: 1}
    assert cache.queue_items() == ([1, 0], [e2 + 1, e2])
    assert cache.free_blocks.loose == set()
    a.audit()


def test_a_preempted_requests_own_keys_are_indexed_and_found_before_it_ends():
    """A preempted (not `ended`): its own keys b"r3:3", b"r3:4" are made and
    indexed, and its look-up finds all five blocks again. Shared back, it decodes
    into block 5 (never used: unindexed from 5) and ends: 5 joins the queue
    without a key, first, the rest with theirs. B takes 6 and 7, then two
    evicted: 5 (nothing forgotten) and 4 (b"r3:4" forgotten)."""
    a, keys, e2 = _a_with_decodes()
    cache = a.cache
    assert a.free_request("A", 0, 0) == 5
    assert cache.index == {e2: 0, e2 + 1: 1, b"r3:2": 2, b"r3:3": 3, b"r3:4": 4}
    a.audit()
    hits = a.lookup(keys, 5)
    assert hits == [0, 1, 2, 3, 4]
    a.share("A", hits, keys)
    a.grow("A", 24)
    a.register_decoded("A", keys, 24)
    assert (a.table("A"), cache.unindexed["A"][1], a.cached_free) == ([0, 1, 2, 3, 4, 5], 5, 0)
    a.audit()
    assert a.free_request("A", 0, 0, 24, True) == 6
    assert cache.queue_items() == ([5, 4, 3, 2, 1, 0],
                                   [None, b"r3:4", b"r3:3", b"r3:2", e2 + 1, e2])
    a.audit()
    a.grow("B", 8)
    a.grow("B", 16)
    assert (a.table("B"), a.step_evictions) == ([6, 7, 5, 4], {"B": 2})
    assert cache.index == {e2: 0, e2 + 1: 1, b"r3:2": 2, b"r3:3": 3}
    a.audit()


def test_no_keys_are_a_none_per_block_and_tail_first_puts_them_first():
    e = list(range(5))
    assert (len(NoKeys(4)), list(NoKeys(2)), NoKeys(4)[1], NoKeys(5)[1:3]) == (
        4, [None, None], None, NoKeys(2))
    assert NoKeys(2) == [None, None] and NoKeys(2) != [None, b"r3:2"] and e != NoKeys(5)
    with pytest.raises(IndexError):
        NoKeys(2)[2]
    keys = BlockKeys(3, 12, 4, 8, hashes=[9300001])
    keys.ensure(3, False)
    e2 = keys.run_key[0]
    runs = tail_first(keys, 5, 2)
    assert (runs.pieces, len(runs)) == ([NoKeys(2), [b"r3:2"], range(e2 + 1, e2 - 1, -1)], 5)
    assert runs.keys == [e2, e2 + 1, b"r3:2", None, None]
    assert tail_first(runs, 5) is runs
    del runs[2:]
    assert (runs.pieces, len(runs)) == ([NoKeys(2)], 2)
