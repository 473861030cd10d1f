"""A released table whose shared blocks are its leading ones (`freeing.leading_shared`):
found by a few probes from the front, not by intersecting the whole table."""
from __future__ import annotations

from scheduler_sim.kv import freeing
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.freeing import leading_shared
from scheduler_sim.kv.sharing import owner_counts


def test_the_leading_run_counts_only_when_it_is_every_shared_block():
    """Tables given reversed (their first blocks last). [0..5] with 0 and 1 shared: 2.
    Block 7 shared too (another table's): 0. Shared 0 and 2 (not a leading run): 0.
    More shared blocks than the table holds: 0. All six: 6."""
    table = [5, 4, 3, 2, 1, 0]
    assert leading_shared(table, {0: 1, 1: 2}) == 2
    assert leading_shared(table, {0: 1, 7: 1}) == 0
    assert leading_shared(table, {0: 1, 2: 1}) == 0
    assert leading_shared([1, 0], {0: 1, 1: 1, 2: 1}) == 0
    assert leading_shared(table, dict.fromkeys(range(6), 1)) == 6


def test_freeing_takes_the_leading_run_only_when_it_is_every_shared_block(monkeypatch):
    """Blocks of 4, a pool of 12. a holds [0..3]; b shares [0, 1] and grows [4]; c holds
    [5, 6]; d shares [5]; e shares [0]: extra owners {0: 2, 1: 1, 5: 1}.
    Freeing d (reversed [5]): 3 shared blocks, more than its 1: intersected, 5 drops,
    nothing drains. Freeing b (reversed [4, 1, 0]): its leading [0, 1] are every shared
    block: 0 keeps 1 extra owner, 1 none; [4] drains. Freeing e ([0]): its leading [0]
    is every shared block; nothing drains. Freeing a: nothing shared (not asked), its 4
    blocks drain; c's 2 drain. Asked 3 times: 0, 2, 1."""
    answers = []

    def counted(table, extra):
        answer = leading_shared(table, extra)
        answers.append(answer)
        return answer

    monkeypatch.setattr(freeing, "leading_shared", counted)
    a = BlockAllocator(12, 4)
    a.grow("a", 16)
    a.share("b", a.table("a")[:2])
    a.grow("b", 12)
    a.grow("c", 8)
    a.share("d", [5])
    a.share("e", [0])
    assert (a.table("b"), a.table("c"), owner_counts(a._extra)) == ([0, 1, 4], [5, 6], {0: 2, 1: 1, 5: 1})
    assert a.free_request("d", now=0, delay=0) == 0
    assert owner_counts(a._extra) == {0: 2, 1: 1}
    assert a.free_request("b", now=0, delay=0) == 1
    assert (owner_counts(a._extra), a.held) == ({0: 1}, 6)
    assert a.free_request("e", now=0, delay=0) == 0
    assert (owner_counts(a._extra), a.held) == ({}, 6)
    a.audit()
    assert a.free_request("a", now=0, delay=0) == 4
    assert a.free_request("c", now=0, delay=0) == 2
    assert (answers, a.held, a.free) == ([0, 2, 1], 0, 12)
    a.audit()
