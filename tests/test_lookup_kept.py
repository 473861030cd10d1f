"""A look-up's answer given again while it provably holds (kv/prefix_lookups.py
`lookup`, vLLM's cache `holds_found`): an answer all of whose blocks were held is
the answer again until a key is indexed, a duplicate is cached, or its last block
is no longer held under its key."""
from __future__ import annotations

from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.key_index import KeyIndex
from scheduler_sim.kv.lru_cache import LruCache
from scheduler_sim.kv.vllm_cache import VllmCache


def _counted(monkeypatch):
    """The index's look-ups, counted."""
    find = KeyIndex.find
    asked = []
    monkeypatch.setattr(KeyIndex, "find", lambda self, keys, start, end: (
        asked.append(end) or find(self, keys, start, end)))
    return asked


def _a_holds_its_prompt(monkeypatch):
    """The index's look-ups counted; a pool of 8 blocks of 4 tokens, entries of 8
    tokens, where A (hash ids 9400001, 9400002) holds blocks 0 to 3, keyed; and
    the keys of a head H (9400001, 9400002, 9400003; 24 prompt tokens)."""
    asked = _counted(monkeypatch)
    a = BlockAllocator(8, 4, cache=VllmCache())
    keys_a = BlockKeys(0, 16, 4, 8, hashes=[9400001, 9400002])
    a.grow("A", 16)
    a.register_full_blocks("A", keys_a, 16)
    return asked, a, BlockKeys(1, 24, 4, 8, hashes=[9400001, 9400002, 9400003])


def test_a_held_answer_is_given_again_until_a_key_is_indexed_or_it_is_freed(monkeypatch):
    """Pool of 8, blocks of 4, entries of 8 tokens. A (hash ids 9400001, 9400002)
    holds blocks 0 to 3, keyed. H (9400001, 9400002, 9400003; 24 prompt tokens, so
    a limit of (24 - 1) // 4 = 5 blocks) finds [0, 1, 2, 3], none free: kept, and
    the next look-up answers it without the index. B taking blocks 4, 5 (never
    used) changes nothing; B's prompt keyed (a key indexed) makes it ask the index
    again: the same answer, kept again. A freed: block 3 is free, so the index is
    asked: [0, 1, 2, 3] with 4 free (not kept)."""
    asked, a, head = _a_holds_its_prompt(monkeypatch)
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits), asked) == ([0, 1, 2, 3], 0, [5])
    again = a.lookup(head, 5)
    assert (again, again is hits, a.evictable(again), asked) == ([0, 1, 2, 3], False, 0, [5])
    a.grow("B", 8)
    assert a.table("B") == [4, 5]
    again = a.lookup(head, 5)
    assert (again, a.evictable(again), asked) == ([0, 1, 2, 3], 0, [5])
    keys_b = BlockKeys(2, 8, 4, 8, hashes=[9500001])
    a.register_full_blocks("B", keys_b, 8)
    again = a.lookup(head, 5)
    assert (again, a.evictable(again), asked) == ([0, 1, 2, 3], 0, [5, 5])
    assert (a.lookup(head, 5), asked) == ([0, 1, 2, 3], [5, 5])
    a.free_request("A", 0, 0)
    again = a.lookup(head, 5)
    assert (again, a.evictable(again), asked) == ([0, 1, 2, 3], 4, [5, 5, 5])
    a.audit()


def test_a_held_block_freed_and_evicted_between_look_ups_is_not_found_again(monkeypatch):
    """As above, H's [0, 1, 2, 3] kept while A holds them; then A is freed (its
    table joins the queue tail first: 3, 2, 1, 0) and C takes 6 blocks for 24
    rows: the 4 never used (4 to 7), then the 2 least recently freed, 3 and 2,
    evicted with their keys. Nothing was indexed since H's answer was kept, but
    its last block is no longer indexed: the index is asked, and finds [0, 1],
    both free."""
    asked, a, head = _a_holds_its_prompt(monkeypatch)
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits)) == ([0, 1, 2, 3], 0)
    a.free_request("A", 0, 0)
    a.grow("C", 24)
    assert a.table("C") == [4, 5, 6, 7, 3, 2]
    again = a.lookup(head, 5)
    assert (again, a.evictable(again), asked) == ([0, 1], 2, [5, 5])
    a.audit()


def test_no_answer_is_kept_with_a_duplicate_cached(monkeypatch):
    """D writes the same prompt as A into blocks of its own (4 to 7, keyed as
    duplicates: `others`), so H's look-up asks the index every time."""
    asked = _counted(monkeypatch)
    a = BlockAllocator(8, 4, cache=VllmCache())
    keys_a = BlockKeys(0, 16, 4, 8, hashes=[9400001, 9400002])
    a.grow("A", 16)
    a.register_full_blocks("A", keys_a, 16)
    keys_d = BlockKeys(3, 16, 4, 8, hashes=[9400001, 9400002])
    a.grow("D", 16)
    a.register_full_blocks("D", keys_d, 16)
    assert a.cache.others == {k: [b] for k, b in zip(keys_a.keys, [4, 5, 6, 7])}
    head = BlockKeys(1, 24, 4, 8, hashes=[9400001, 9400002, 9400003])
    for _ in range(2):
        hits = a.lookup(head, 5)
        assert (hits, a.evictable(hits)) == ([0, 1, 2, 3], 0)
    assert asked == [5, 5]
    a.audit()


def test_a_kept_answer_is_not_given_while_blocks_drain(monkeypatch):
    """H's [0, 1, 2, 3] kept while A holds them. A freed with a delay of 5 at time 0:
    0 to 3 drain (not reusable, not in the queue), and the look-up asks the index
    and finds nothing reusable (the kept answer would have named all four). At 5
    they are free: asked again, [0, 1, 2, 3], all four free."""
    asked, a, head = _a_holds_its_prompt(monkeypatch)
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits)) == ([0, 1, 2, 3], 0)
    assert a.free_request("A", 0, 5) == 4
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits), asked) == ([], 0, [5, 5])
    assert a.release_expired(5) == 4
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits), asked) == ([0, 1, 2, 3], 4, [5, 5, 5])
    a.audit()


def test_a_key_indexed_past_a_kept_answer_lengthens_it(monkeypatch):
    """H's [0, 1, 2, 3] kept while A holds them. F, with H's hash ids, shares them
    (its look-up finds them), takes blocks 4 and 5 for its 24 rows and keys the
    fifth block (20 rows written): H's fifth key is now indexed, so H's look-up
    asks the index and finds [0, 1, 2, 3, 4]."""
    asked, a, head = _a_holds_its_prompt(monkeypatch)
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits)) == ([0, 1, 2, 3], 0)
    keys_f = BlockKeys(4, 24, 4, 8, hashes=[9400001, 9400002, 9400003])
    a.share("F", a.lookup(keys_f, 5), keys_f)
    a.grow("F", 24)
    a.register_full_blocks("F", keys_f, 20)
    assert a.table("F") == [0, 1, 2, 3, 4, 5]
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits), asked) == ([0, 1, 2, 3, 4], 0, [5, 5, 5])
    a.audit()


def test_a_kept_answer_is_given_for_its_own_limit_only(monkeypatch):
    """H's [0, 1, 2, 3] kept for a limit of 5 while A holds them; asked with a limit
    of 2 the index is asked and answers [0, 1] (the kept answer would be all
    four); asked with 5 again, the index is asked too (the kept answer is the one
    counted last, for 2: [0, 1], kept with limit 2)."""
    asked, a, head = _a_holds_its_prompt(monkeypatch)
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits), asked) == ([0, 1, 2, 3], 0, [5])
    hits = a.lookup(head, 2)
    assert (hits, a.evictable(hits), asked) == ([0, 1], 0, [5, 2])
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits), asked) == ([0, 1, 2, 3], 0, [5, 2, 5])
    a.audit()


def test_no_answer_is_kept_while_a_pinned_block_is_orphaned(monkeypatch):
    """H's [0, 1, 2, 3] kept while A holds them. A's table pinned (a transfer in
    flight), then A freed: its blocks stay indexed, out of the queue, owned by
    nobody (pinned orphans, not reusable), so the look-up asks the index and
    finds nothing reusable (the kept answer would have named all four). Unpinned
    at 0 with no delay they are free: [0, 1, 2, 3], all four free."""
    asked, a, head = _a_holds_its_prompt(monkeypatch)
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits)) == ([0, 1, 2, 3], 0)
    handle = a.pin(a.table("A"))
    assert a.free_request("A", 0, 0) == 0
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits), asked) == ([], 0, [5, 5])
    assert a.unpin(handle, 0, 0) == 4
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits), asked) == ([0, 1, 2, 3], 4, [5, 5, 5])
    a.audit()


def test_an_heir_indexed_in_a_kept_answer_s_run_is_found_again(monkeypatch):
    """Blocks of 4 tokens, one hash id each. A (9400001) holds block 0; R
    (9400001, 9400002) wrote blocks 1 and 2 itself: 1 a duplicate of A's 0
    (`others`), 2 indexed. H (9400001, 9400002, 9400003; limit (12 - 1) // 4 = 2)
    finds [0, 2], both held: kept. A freed (0 free), X takes 2 blocks: 3, never
    used, and 0, evicted, whose duplicate 1 becomes its key's block (an heir; no
    duplicate left). The index is asked: [1, 2] (the kept answer named 0, now
    X's)."""
    asked = _counted(monkeypatch)
    a = BlockAllocator(4, 4, cache=VllmCache())
    a.grow("A", 4)
    a.register_full_blocks("A", BlockKeys(0, 4, 4, 4, hashes=[9400001]), 4)
    a.grow("R", 8)
    a.register_full_blocks("R", BlockKeys(1, 8, 4, 4, hashes=[9400001, 9400002]), 8)
    assert a.table("R") == [1, 2]
    head = BlockKeys(2, 12, 4, 4, hashes=[9400001, 9400002, 9400003])
    hits = a.lookup(head, 2)
    assert (hits, a.evictable(hits), asked) == ([0, 2], 0, [2])
    a.free_request("A", 0, 0)
    a.grow("X", 8)
    assert (a.table("X"), a.cache.others) == ([3, 0], {})
    hits = a.lookup(head, 2)
    assert (hits, a.evictable(hits), asked) == ([1, 2], 0, [2, 2])
    a.audit()


def test_a_kept_answer_ending_in_a_token_keyed_block_is_not_given_once_it_is_free(
        monkeypatch):
    """Token ids (keys not interned: the index's plain dict; a free block so keyed
    is in the queue's `loose` set). A (tokens 0 to 7) holds blocks 0 and 1,
    keyed; H (tokens 0 to 11; limit (12 - 1) // 4 = 2) finds [0, 1], held: kept.
    A freed: 1, the last, is free (in `loose`), so the index is asked: [0, 1],
    both free."""
    asked = _counted(monkeypatch)
    a = BlockAllocator(8, 4, cache=VllmCache())
    a.grow("A", 8)
    a.register_full_blocks("A", BlockKeys(0, 8, 4, 4, prompt_ids=list(range(8))), 8)
    head = BlockKeys(1, 12, 4, 4, prompt_ids=list(range(12)))
    hits = a.lookup(head, 2)
    assert (hits, a.evictable(hits), asked) == ([0, 1], 0, [2])
    a.free_request("A", 0, 0)
    hits = a.lookup(head, 2)
    assert (hits, a.evictable(hits), asked) == ([0, 1], 2, [2, 2])
    a.audit()


def test_a_kept_answer_goes_when_another_answer_is_counted(monkeypatch):
    """H's [0, 1, 2, 3] kept while A holds them. B (hash id 9500001) wrote blocks 4
    and 5, keyed, and was freed before: both free. G (9500001, 9500002; limit
    (12 - 1) // 4 = 2) finds [4, 5], 2 free: not kept, and H's kept answer goes
    with it (the cache's `holds_found` speaks of the answer it counted last), so
    H's next look-up asks the index again, though nothing was indexed since.
    (H's first look-up asks the index up to block 4 only: its third entry, interned
    then after B's, is a run of its own that no cache can hold, `ensure_new`.)"""
    asked, a, head = _a_holds_its_prompt(monkeypatch)
    a.grow("B", 8)
    a.register_full_blocks("B", BlockKeys(2, 8, 4, 8, hashes=[9500001]), 8)
    assert (a.table("B"), a.free_request("B", 0, 0)) == ([4, 5], 2)
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits), asked) == ([0, 1, 2, 3], 0, [4])
    assert (a.lookup(head, 5), asked) == ([0, 1, 2, 3], [4])
    other = BlockKeys(5, 12, 4, 8, hashes=[9500001, 9500002])
    hits = a.lookup(other, 2)
    assert (hits, a.evictable(hits), asked) == ([4, 5], 2, [4, 2])
    hits = a.lookup(head, 5)
    assert (hits, a.evictable(hits), asked) == ([0, 1, 2, 3], 0, [4, 2, 5])
    a.audit()


def test_a_kind_that_cannot_tell_keeps_no_answer(monkeypatch):
    """The LRU cache cannot tell whether a held answer still holds (its
    `holds_found` is None): A holds blocks 0 to 3, keyed; H's look-up finds
    [0, 1, 2, 3], none free, twice, and the cache is asked twice (nothing kept)."""
    finds = []
    find = LruCache.find
    monkeypatch.setattr(LruCache, "find", lambda self, keys, most: (
        finds.append(most) or find(self, keys, most)))
    a = BlockAllocator(8, 4, cache=LruCache())
    a.grow("A", 16)
    a.register_full_blocks("A", BlockKeys(0, 16, 4, 8, hashes=[9400001, 9400002]), 16)
    head = BlockKeys(1, 24, 4, 8, hashes=[9400001, 9400002, 9400003])
    for _ in range(2):
        hits = a.lookup(head, 5)
        assert (hits, a.evictable(hits)) == ([0, 1, 2, 3], 0)
    assert (finds, a._kept, LruCache.holds_found) == ([5, 5], None, None)
    a.audit()
