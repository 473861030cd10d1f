"""A look-up's walk over the index's buckets kept for the count and the share that
follow it (`KeyIndex.walked_pieces`, `QueueMembers._runs_found`): given again only
for the very list the look-up gave (or what is left of it) and while no bucket
changed."""
from __future__ import annotations

import pytest

from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.key_index import KeyIndex
from scheduler_sim.kv.vllm_cache import VllmCache


def test_a_find_from_the_first_key_is_kept_for_its_own_hits_while_no_bucket_changes():
    """Buckets of 4 keys; keys 10 to 14 cut into (block 0, bucket 2, offset 2, 2 keys)
    and (2, bucket 3, offset 0, 3); 10 to 13 indexed to blocks 7 to 10. The find of
    all five stops at 14: hits [7, 8, 9, 10], whose pieces end at the hits' end
    (the second cut to 2 keys), the integer keys at 4. Shortened in place to 3: the
    second piece 1 key, the integer keys at 3. A copy of the hits, a bucket written
    since, or a find from another key: nothing kept."""
    index = KeyIndex(4)
    keys = [10, 11, 12, 13, 14]
    assert index.add(keys, 0, 4, [7, 8, 9, 10]) == []
    hits, whole = index.find(keys, 0, 5)
    assert (hits, whole) == ([7, 8, 9, 10], False)
    assert index.walked_pieces(keys, hits) == ([(0, 2, 2, 2), (2, 3, 0, 2)], 4)
    assert index.walked_pieces(keys, hits[:]) is None
    assert index.walked_pieces(list(keys), hits) is None
    del hits[3:]
    assert index.walked_pieces(keys, hits) == ([(0, 2, 2, 2), (2, 3, 0, 1)], 3)
    del hits[:]
    assert index.walked_pieces(keys, hits) == ([], 0)
    hits = index.find(keys, 0, 5)[0]
    index[21] = 3  # (a bucket of its own, made: a change)
    assert index.walked_pieces(keys, hits) is None
    hits = index.find(keys, 0, 2)[0]
    assert index.walked_pieces(keys, hits) == ([(0, 2, 2, 2)], 2)
    index.find(keys, 1, 2)  # (not from the first key: the walk kept stays)
    assert index.walked_pieces(keys, hits) == ([(0, 2, 2, 2)], 2)
    del index[13]
    assert index.walked_pieces(keys, hits) is None


@pytest.mark.parametrize("kept", [True, False])
def test_a_look_ups_count_and_share_read_its_walk(monkeypatch, kept):
    """Pool of 8, blocks of 4, entries of 8 tokens (keys e, e + 1 per hash id). A
    (hash ids 9400001, 9400002: 16 prompt tokens, 4 blocks, all keyed) is freed:
    the queue holds 3, 2, 1, 0. B (trace position 5, the same hash ids and a third,
    24 tokens) looks up 5 blocks: the 4 of A, all free (`evictable` 4); shared, the
    queue is empty and B's table [0, 1, 2, 3]. With the walk kept, the count and
    the share each read it (2 walks given again); without (`walked_pieces` None,
    both compare the buckets as before), the same answers."""
    given = []
    walked = KeyIndex.walked_pieces

    def counting(self, keys, blocks):
        answer = walked(self, keys, blocks) if kept else None
        given.append(answer is not None)
        return answer

    monkeypatch.setattr(KeyIndex, "walked_pieces", counting)
    a = BlockAllocator(8, 4, cache=VllmCache())
    ka = BlockKeys(3, 16, 4, 8, hashes=[9400001, 9400002])
    a.grow("A", 16)
    a.register_full_blocks("A", ka, 16)
    assert a.free_request("A", 0, 0) == 4
    assert a.cache.queue_items()[0] == [3, 2, 1, 0]
    kb = BlockKeys(5, 24, 4, 8, hashes=[9400001, 9400002, 9400003])
    hits = a.lookup(kb, 5)
    assert hits == [0, 1, 2, 3]
    assert a.evictable(hits) == 4
    a.share("B", hits, kb)
    assert (a.table("B"), a.cached_free, a.cache.queue_items()) == ([0, 1, 2, 3], 0, ([], []))
    assert given == ([True, True] if kept else [False, False])
    a.audit()
