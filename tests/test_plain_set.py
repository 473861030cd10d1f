"""The allocator's set of plain free blocks, kept lazily once blocks may be shared
(`kv/sharing.py`): it holds the plain stack's first `_plain_mark` blocks; blocks
pushed above join it only when a question needs them, blocks popped below the
mark leave it. Tiny hand-computed cases; every state is audited."""
from __future__ import annotations

import pytest

from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.sharing import PROBE_MAX
from scheduler_sim.records.errors import InvariantError

B = 4  # rows per block


def lazy(a: BlockAllocator) -> tuple[list[int], int, set[int]]:
    """The plain stack, the mark and the set, after the full audit."""
    a.audit()
    return list(a._free), a._plain_mark, set(a._plain_set)


def test_freed_blocks_wait_above_the_mark_and_a_question_within_probe_max_adds_none():
    """'a' frees [0, 1, 2, 3] onto the stack above the mark (0): the set stays empty.
    'h' takes block 3 (the top); 'g' shares it (held: the probe compares it with the
    3 plain blocks [0, 1, 2] one by one, and nothing joins the set)."""
    a = BlockAllocator(8, B)
    a.share("x", [])  # (blocks may be shared from now on: the sets are kept)
    a.grow("a", 16)
    assert a.free_request("a", now=0, delay=0) == 4
    assert lazy(a) == ([0, 1, 2, 3], 0, set())
    a.grow("h", 4)
    assert a.table("h") == [3]
    a.share("g", [3])
    assert a.table("g") == [3]
    assert lazy(a) == ([0, 1, 2], 0, set())


def test_a_plain_block_asked_about_is_refused_and_the_stack_joins_the_set():
    """Sharing plain free block 2 raises (the probe finds it, then the one-by-one
    check names it); that check made the set whole: {0, 1, 2, 3}, mark 4. Popping 1
    block (3) and then 2 ([2, 1]) takes them out of the set, mark 1; block 3 freed
    again waits above the mark."""
    a = BlockAllocator(8, B)
    a.share("x", [])
    a.grow("a", 16)
    a.free_request("a", now=0, delay=0)
    with pytest.raises(InvariantError) as info:
        a.share("b", [2])
    assert "block 2" in str(info.value)
    assert lazy(a) == ([0, 1, 2, 3], 4, {0, 1, 2, 3})
    a.grow("c", 4)
    assert a.table("c") == [3]
    assert lazy(a) == ([0, 1, 2], 3, {0, 1, 2})
    a.grow("d", 8)
    assert a.table("d") == [2, 1]
    assert lazy(a) == ([0], 1, {0})
    a.free_request("c", now=0, delay=0)
    assert lazy(a) == ([0, 3], 1, {0})


def test_more_than_probe_max_blocks_above_the_mark_join_the_set_when_asked():
    """PROBE_MAX + 2 blocks freed: 'b' takes the top one; sharing it sees
    PROBE_MAX + 1 plain blocks above the mark, more than the probe's limit, so they
    join the set (mark PROBE_MAX + 1) and the share goes on (held)."""
    n = PROBE_MAX + 2
    a = BlockAllocator(n, B)
    a.share("x", [])
    a.grow("a", n * B)
    a.free_request("a", now=0, delay=0)
    a.grow("b", 4)
    assert a.table("b") == [n - 1]
    a.share("c", [n - 1])
    stack, mark, plain = lazy(a)
    assert (len(stack), mark, plain) == (n - 1, n - 1, set(range(n - 1)))
