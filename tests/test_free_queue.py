"""The radix tree's queue of free keyed blocks (kv/free_queue.py) on tiny hand-computed
cases: batches in, whole runs out, hits, the least recently freed block, compaction."""
from __future__ import annotations

import pytest

from scheduler_sim.kv.free_queue import FreeQueue


def queue(*batches: list[int]) -> FreeQueue:
    """A queue of blocks 0..19 reached, given `batches` in order."""
    q = FreeQueue()
    q.reach(19)
    for blocks in batches:
        q.add_all(list(blocks))
    return q


def test_batches_join_in_order_and_runs_leave_whole():
    """[5, 3] then [7]: three free, in that order. The run [3, 7] (two batches) leaves
    whole; [5, 9] does not, 9 not being free (nothing changes)."""
    q = queue([5, 3], [7])
    assert (list(q), len(q), 3 in q, 4 in q, 25 in q) == ([5, 3, 7], 3, True, False, False)
    assert q.count_in([3, 4, 7, 30]) == 2
    assert q.remove_all_if_free([5, 9]) is False and list(q) == [5, 3, 7]
    assert q.remove_all_if_free([3, 7]) is True
    assert (list(q), len(q)) == ([5], 1)
    assert list(q.batches) == [1]  # batch 2 ([7]) had nothing left: gone


def test_a_block_freed_again_moves_to_the_tail():
    """[1, 2, 3]; a hit on 2, which is freed again later behind [4]: the order is 1, 3,
    4, 2, and the oldest blocks pop in that order (its first entry is stale)."""
    q = queue([1, 2, 3])
    q.remove(2)
    with pytest.raises(KeyError):
        q.remove(2)
    q.add_all([4])
    q.add_all([2])
    assert list(q) == [1, 3, 4, 2]
    assert [q.pop_oldest() for _ in range(4)] == [1, 3, 4, 2]
    assert (len(q), q.batches) == (0, {})
    with pytest.raises(KeyError):
        q.pop_oldest()


def test_compaction_keeps_the_order():
    """Batches of a block that stays free (2000, 2001, ...) and 31 blocks hit right
    after (0..30): each keeps 31 stale entries for one live block. The k-th batch
    makes 32k entries for k + 31 free blocks, past 8 x free + 65,536 at k = 2,742:
    the stale entries go and the live ones (2,742 + the 31 just added) are one
    batch; 159 batches later the order is still the order freed."""
    q = FreeQueue()
    q.reach(4999)
    stale = list(range(31))
    for live in range(2000, 4901):
        q.add_all([live] + stale)
        for block in stale:
            q.remove(block)
    assert (len(q), len(q.batches), q.entries) == (2901, 1 + 159, 2773 + 159 * 32)
    assert list(q) == list(range(2000, 4901))
    assert [q.pop_oldest() for _ in range(2)] == [2000, 2001]
