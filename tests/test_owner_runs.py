"""Shared blocks' extra owners counted per run (`sharing.Owners`): blocks that gained
and lost owners together name one counter, moved once (`move_owners`)."""
from __future__ import annotations

from itertools import permutations

import pytest

from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.sharing import (add_owner, drop_owner, move_owners, owner_counts,
                                      run_size_fault)
from scheduler_sim.records.errors import InvariantError


def runs(extra):
    """The runs of `extra` as (sorted blocks, count), sorted."""
    named = {}
    for block, owners in extra.items():
        named.setdefault(id(owners), (owners, []))[1].append(block)
    return sorted((sorted(blocks), owners.count) for owners, blocks in named.values())


def test_move_owners_moves_one_count_for_a_whole_run_and_splits_a_partial_one():
    """[0, 1, 2] new: one counter (1 owner, 3 blocks); again: the same counter, 2.
    [0, 1] (part of it): 0 and 1 a new counter of 3, 2 keeps the old one (2, size 1).
    All three dropped: 0 and 1 at 2 (one new counter), 2 at 1. [2] dropped: forgotten.
    [0, 1, 5] added: 0, 1 at 3 and 5 at 1 (two counters). [0, 1] dropped twice and
    [0, 1, 5] once: 0 and 1 at none, 5 at none: empty."""
    extra = {}
    move_owners(extra, [0, 1, 2], 1)
    first = extra[0]
    assert (runs(extra), extra[1] is first, extra[2] is first) == ([([0, 1, 2], 1)], True, True)
    move_owners(extra, [0, 1, 2], 1)
    assert (runs(extra), extra[0] is first, first.size) == ([([0, 1, 2], 2)], True, 3)
    move_owners(extra, [0, 1], 1)
    assert (runs(extra), extra[2] is first, first.size) == ([([0, 1], 3), ([2], 2)], True, 1)
    move_owners(extra, [2, 1, 0], -1)
    assert runs(extra) == [([0, 1], 2), ([2], 1)]
    move_owners(extra, [2], -1)
    assert (owner_counts(extra), run_size_fault(extra)) == ({0: 2, 1: 2}, None)
    move_owners(extra, [0, 1, 5], 1)
    assert runs(extra) == [([0, 1], 3), ([5], 1)]
    move_owners(extra, [0, 1], -1)
    move_owners(extra, [1, 0], -1)
    assert (runs(extra), run_size_fault(extra)) == ([([0, 1], 1), ([5], 1)], None)
    move_owners(extra, [0, 1, 5], -1)
    move_owners(extra, [], -1)
    assert extra == {}


def test_blocks_counted_one_by_one_are_one_run_again_after_a_move():
    """add_owner on 0 and on 1: two counters of one block. Moving [0, 1] up: one counter
    (2 owners, 2 blocks). add_owner on 1: 1 leaves it (3, its own), 0 keeps it (2, size
    1). drop_owner of 0 twice: forgotten; of 1: 2 left."""
    extra = {}
    add_owner(extra, 0)
    add_owner(extra, 1)
    assert (runs(extra), extra[0] is extra[1]) == ([([0], 1), ([1], 1)], False)
    move_owners(extra, [0, 1], 1)
    assert (runs(extra), extra[0] is extra[1], extra[0].size) == ([([0, 1], 2)], True, 2)
    add_owner(extra, 1)
    assert (runs(extra), extra[0].size, run_size_fault(extra)) == ([([0], 2), ([1], 3)], 1, None)
    drop_owner(extra, 0)
    drop_owner(extra, 0)
    drop_owner(extra, 1)
    assert (owner_counts(extra), run_size_fault(extra)) == ({1: 2}, None)


def test_move_owners_splits_a_run_that_drops_to_none_for_some_blocks():
    """[0, 1, 2] at 1, then [0, 1] up to 2 (a run of its own): dropping all three leaves
    0 and 1 at 1 and forgets 2; a run of 3 with one block dropped to none keeps 2."""
    extra = {}
    move_owners(extra, [0, 1, 2], 1)
    move_owners(extra, [0, 1], 1)
    move_owners(extra, [0, 1, 2], -1)
    assert (runs(extra), run_size_fault(extra)) == ([([0, 1], 1)], None)
    drop_owner(extra, 1)
    assert (runs(extra), extra[0].size, run_size_fault(extra)) == ([([0], 1)], 1, None)


def three_ways():
    """Blocks of 4, a pool of 12: a writes [0..3]; b shares [0, 1, 2], c [0, 1], d all
    four. Extra owners: 0 and 1 three, 2 two, 3 one."""
    a = BlockAllocator(12, 4)
    a.grow("a", 16)
    a.share("b", [0, 1, 2])
    a.share("c", [0, 1])
    a.share("d", [0, 1, 2, 3])
    a.audit()
    return a


def test_a_block_shared_three_ways_freed_first_by_its_writer():
    """Counters after the shares: [0, 1] (3), [2] (2), [3] (1). Freeing a: 0, 1 at 2, 2
    at 1, 3 forgotten, nothing drains; b: 0, 1 at 1 (one counter), 2 forgotten; c: none
    left; d: its 4 blocks drain."""
    a = three_ways()
    assert runs(a._extra) == [([0, 1], 3), ([2], 2), ([3], 1)]
    assert a.free_request("a", now=0, delay=0) == 0
    assert (runs(a._extra), a.held) == ([([0, 1], 2), ([2], 1)], 4)
    assert a.free_request("b", now=0, delay=0) == 0
    assert (runs(a._extra), a._extra[0] is a._extra[1]) == ([([0, 1], 1)], True)
    assert a.free_request("c", now=0, delay=0) == 0
    assert (a._extra, a.held) == ({}, 4)
    a.audit()
    assert (a.free_request("d", now=0, delay=0), a.held, a.free) == (4, 0, 12)


def test_a_block_shared_three_ways_freed_last_by_its_writer():
    """Freeing d: 0, 1 at 2, 2 at 1, 3 forgotten; c (two blocks of three shared, so
    intersected): 0, 1 at 1; b: 0, 1 and 2 forgotten (two counters, both to none);
    a: 4 drain."""
    a = three_ways()
    assert a.free_request("d", now=0, delay=0) == 0
    assert runs(a._extra) == [([0, 1], 2), ([2], 1)]
    assert a.free_request("c", now=0, delay=0) == 0
    assert (owner_counts(a._extra), run_size_fault(a._extra)) == ({0: 1, 1: 1, 2: 1}, None)
    assert a.free_request("b", now=0, delay=0) == 0
    assert (a._extra, a.held) == ({}, 4)
    a.audit()
    assert (a.free_request("a", now=0, delay=0), a.held, a.free) == (4, 0, 12)


HOLDERS = {0: "abcd", 1: "abcd", 2: "abd", 3: "ad"}  # (the shares of `three_ways`)


@pytest.mark.parametrize("order", ["".join(p) for p in permutations("abcd")])
def test_a_block_shared_three_ways_freed_in_any_order_keeps_the_counts(order):
    """Every order of the four frees: after each, every block's extra owners are its
    holders not yet freed, less one (`HOLDERS`), the free sends the blocks it was the
    last holder of, and the audit (owners counted table by table, counters' sizes)
    passes."""
    a = three_ways()
    for i, rid in enumerate(order):
        gone = order[:i + 1]
        last = [b for b, holders in HOLDERS.items() if rid in holders and set(holders) <= set(gone)]
        assert a.free_request(rid, now=0, delay=0) == len(last)
        left = {b: sum(h not in gone for h in holders) - 1 for b, holders in HOLDERS.items()}
        assert owner_counts(a._extra) == {b: n for b, n in left.items() if n > 0}
        a.audit()
    assert (a._extra, a.held, a.free) == ({}, 0, 12)


def test_the_audit_names_a_counter_whose_size_is_wrong():
    """b shares [0, 1] of a's: one counter of 2 blocks; told 3, the audit raises."""
    a = BlockAllocator(12, 4)
    a.grow("a", 8)
    a.share("b", [0, 1])
    a._extra[0].size = 3
    with pytest.raises(InvariantError) as raised:
        a.audit()
    assert str(raised.value).endswith(
        "shared blocks [0, 1]: run size(3) == blocks naming it(2) is false")


def test_the_audit_names_a_counter_that_counts_no_owner():
    """b shares [0, 1] of a's: one counter of 2 blocks, 1 extra owner. b's table emptied
    behind the allocator's back and the count told 0: every block's owners agree with
    its count (1 == 1 + 0), but a counter of no owner is kept: the audit raises with
    the equation."""
    a = BlockAllocator(12, 4)
    a.grow("a", 8)
    a.share("b", [0, 1])
    a._tables["b"].clear()
    a._extra[0].count = 0
    with pytest.raises(InvariantError) as raised:
        a.audit()
    assert str(raised.value).endswith("shared blocks [0, 1]: extra owners(0) >= 1 is false")
