"""The radix tree's free keyed blocks (kv/free_queue.py) on tiny hand-computed cases:
whole nodes in and out with nothing per block, loose nodes (part held) block by
block, hits, the least recently freed block, stale node numbers, compaction."""
from __future__ import annotations

import pytest

from scheduler_sim.kv.free_queue import BATCH, FREE, LOOSE, FreeQueue


def tree(*runs: list[int], top: int = 19) -> FreeQueue:
    """A queue over nodes 0, 1, ... holding `runs` (held, not free), blocks up to `top`."""
    nodes: dict[int, list] = {}
    node_at: list = [None] * (top + 1)
    for node, blocks in enumerate(runs):
        nodes[node] = [list(blocks), None, 0, 0, [f"k{b}" for b in blocks], 0, 0, False]
        for block in blocks:
            node_at[block] = node
    q = FreeQueue(nodes, node_at)
    q.reach(top)
    return q


def free(q: FreeQueue, blocks: list[int]) -> None:
    """Give `blocks` back as one batch (their nodes from `node_at`)."""
    q.add(list(blocks), [q.node_at[b] for b in blocks])


def test_whole_nodes_join_in_order_with_a_count_and_a_batch_each():
    """Nodes [5, 3] and [7]: freed as [5, 3] then [7], three free in that order; each
    node counts its blocks free and names its batch, and none is loose (no block
    state written: `since` stays all 0)."""
    q = tree([5, 3], [7])
    free(q, [5, 3])
    free(q, [7])
    assert (list(q), len(q), 3 in q, 4 in q, 25 in q, "x" in q) == (
        [5, 3, 7], 3, True, False, False, False)
    assert [(i[FREE], i[BATCH], i[LOOSE]) for i in q.nodes.values()] == [
        (2, 1, False), (1, 2, False)]
    assert q.count_in([3, 4, 7, 30]) == 2 and not any(q.since)


def test_a_whole_node_taken_out_leaves_its_batch_and_its_blocks_stale():
    """Node [5, 3] evicted whole (take_node, then the tree forgets the node): its
    batch has nothing left and goes; `node_at` still names node 0, which no longer
    exists, so 5 and 3 are not free (nor anything else)."""
    q = tree([5, 3], [7])
    free(q, [5, 3, 7])
    q.take_node(q.nodes[0])
    del q.nodes[0]
    assert (list(q), len(q), 5 in q, q.node_at[5]) == ([7], 1, False, 0)
    assert list(q.batches) == [1]  # batch 1 still holds 7
    q.take_node(q.nodes[1])
    assert (len(q), q.batches) == (0, {})


def test_a_hit_on_one_block_loosens_its_node_and_a_later_free_moves_it_to_the_tail():
    """Node [1, 2, 3] freed whole; a hit on 2 makes it loose (each block its own
    batch: 1, 0, 1); 2 freed again behind node [4]: the order is 1, 3, 4, 2, and the
    oldest blocks pop in that order (2's first entry is stale)."""
    q = tree([1, 2, 3], [4])
    free(q, [1, 2, 3])
    q.remove(2)
    with pytest.raises(KeyError):
        q.remove(2)
    info = q.nodes[0]
    assert (info[FREE], info[LOOSE], q.since[1:4]) == (2, True, [1, 0, 1])
    free(q, [4])
    free(q, [2])
    assert list(q) == [1, 3, 4, 2]
    assert [q.pop_oldest() for _ in range(4)] == [1, 3, 4, 2]
    assert (len(q), q.batches, info[FREE], info[LOOSE]) == (0, {}, 0, False)
    with pytest.raises(KeyError):
        q.pop_oldest()


def test_part_of_a_node_freed_makes_it_loose_and_counts_block_by_block():
    """Node [1, 2, 3, 4]: 4 and 3 freed (a table that held only them), then 1: a
    loose node with its own batches (2, 0, 1, 1); count_in and hits go block by
    block; a hit on every free block leaves it held and no longer loose."""
    q = tree([1, 2, 3, 4])
    free(q, [4, 3])
    free(q, [1])
    info = q.nodes[0]
    assert (info[FREE], info[LOOSE], q.since[1:5], list(q)) == (3, True, [2, 0, 1, 1],
                                                                 [4, 3, 1])
    assert q.count_in([1, 2, 3, 4]) == 3
    assert q.hits([1, 2, 3, 4]) == {1, 3, 4}
    assert (len(q), info[FREE], info[LOOSE], q.batches) == (0, 0, False, {})


def test_hits_take_a_whole_free_node_in_one_step():
    """Nodes [1, 2] and [3] freed; hits on [1, 2, 9] take node 0 whole (not loosened,
    nothing written per block) and leave [3]."""
    q = tree([1, 2], [3])
    free(q, [1, 2, 3])
    assert q.hits([1, 2, 9]) == {1, 2}
    assert [(i[FREE], i[LOOSE]) for i in q.nodes.values()] == [(0, False), (1, False)]
    assert (list(q), len(q), not any(q.since)) == ([3], 1, True)


def test_compaction_keeps_the_order():
    """A one-block node that stays free per batch (2000, 2001, ...) and 31 one-block
    nodes hit right after (0..30): each batch keeps 31 stale entries for one live
    block. The k-th batch makes 32k entries for k + 31 free blocks, past 8 x free +
    65,536 at k = 2,742: the stale entries go and the live ones (2,742 + the 31
    just added) are one batch, each node naming it; 159 batches later the order is
    still the order freed."""
    q = tree(*([b] for b in range(4999)), top=4999)
    stale = list(range(31))
    for live in range(2000, 4901):
        free(q, [live] + stale)
        for block in stale:
            q.remove(block)
    assert (len(q), len(q.batches), q.entries) == (2901, 1 + 159, 2773 + 159 * 32)
    assert list(q) == list(range(2000, 4901))
    assert q.nodes[2000][BATCH] == q.nodes[4741][BATCH] == list(q.batches)[0]
    assert [q.pop_oldest() for _ in range(2)] == [2000, 2001]


def test_a_freed_table_of_whole_nodes_is_given_a_node_at_a_time():
    """Nodes [1, 2, 3] and [4, 5] (a path), a table freed tail first as 9, 8 (plain:
    in no node), 5, 4, 3, 2, 1:
    give_nodes returns the plain ones and both nodes, which are free whole from one
    batch (no block state written, `since` all 0), in the order freed; the same
    answer and state as `give`."""
    q = tree([1, 2, 3], [4, 5])
    assert q.give_nodes([9, 8, 5, 4, 3, 2, 1]) == ([9, 8], {0, 1})
    assert (list(q), len(q), q.batches) == ([5, 4, 3, 2, 1], 5, {1: [[5, 4, 3, 2, 1], 5, 0]})
    assert [(i[FREE], i[BATCH], i[LOOSE]) for i in q.nodes.values()] == [
        (3, 1, False), (2, 1, False)] and not any(q.since)
    p = tree([1, 2, 3], [4, 5])
    blocks = [9, 8, 5, 4, 3, 2, 1]
    assert p.give(blocks, [p.node_at[b] for b in blocks]) == ([9, 8], {0, 1})
    assert (list(p), p.batches) == (list(q), q.batches)
    assert [i[5:] for i in p.nodes.values()] == [i[5:] for i in q.nodes.values()]


def test_give_nodes_refuses_any_other_shape_and_changes_nothing():
    """None, and nothing changed, for: part of a node (3, 2 of [1, 2, 3]); a node's
    blocks in their own order (1, 2, 3: not a freed table's); a node already free;
    a plain block after keyed ones; a block beyond `node_at`. Plain blocks alone
    come back as they are, with no batch."""
    q = tree([1, 2, 3], [4, 5], top=9)
    for shape in ([3, 2], [1, 2, 3], [5, 4, 7], [5, 4, 12]):
        assert q.give_nodes(shape) is None
    assert (len(q), q.batches, q.next_batch) == (0, {}, 1)
    assert q.give_nodes([5, 4]) == ((), {1})
    assert q.give_nodes([5, 4]) is None  # (node 1 is free already)
    assert q.give_nodes([12, 7]) == ([12, 7], set())
    assert (list(q), q.next_batch) == ([5, 4], 2)
