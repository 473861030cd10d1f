"""BlockAllocator and blocks_for: credits, physical pools, drain timing, audits (§5)."""
from __future__ import annotations

import sys
import threading

import pytest

from scheduler_sim.kv.allocator import BlockAllocator, blocks_for
from scheduler_sim.records.errors import InvariantError

B = 4  # block size used throughout


def pools(a: BlockAllocator, held: int, draining: int, free: int, reserved: int) -> None:
    """Assert the four counters, the conservation equation and the full audit."""
    assert (a.held, a.draining, a.free, a.reserved) == (held, draining, free, reserved)
    assert a.held + a.draining + a.free == a.num_blocks
    a.audit()


# --- blocks_for ----------------------------------------------------------------------


@pytest.mark.parametrize("rows, blocks", [
    (0, 0), (1, 1), (3, 1), (4, 1), (5, 2), (7, 2), (8, 2), (9, 3), (16, 4), (17, 5),
])
def test_blocks_for_is_ceiling_of_rows_over_block_size(rows, blocks):
    """blocks_for(rows, 4) == ceil(rows / 4): e.g. 5 rows need 2 blocks, 8 rows 2, 9 rows 3."""
    assert blocks_for(rows, B) == blocks


def test_blocks_for_matches_spec_a1_examples():
    """A1: P=4, N=M=1 -> 4 rows -> 1 block; P=1, N=8 -> 8 rows -> 2 blocks (B=4)."""
    assert blocks_for(4 + 1 - 1, 4) == 1
    assert blocks_for(1 + 8 - 1, 4) == 2


# --- fresh state ---------------------------------------------------------------------


def test_fresh_allocator_has_every_block_free_and_nothing_reserved():
    """A new allocator of 5 blocks: held 0, draining 0, free 5, reserved 0, no tables."""
    a = BlockAllocator(5, B)
    pools(a, held=0, draining=0, free=5, reserved=0)
    assert a.table("x") == []
    assert a.credit("x") == 0
    assert a.next_expiry() is None
    assert (a.peak_reserved, a.peak_held) == (0, 0)


# --- credits (A1, A2) ----------------------------------------------------------------


def test_can_reserve_then_reserve_counts_credit_not_allocation():
    """A2: reserving 3 then 2 of 5 blocks fills the credit line while all 5 stay free."""
    a = BlockAllocator(5, B)
    assert a.can_reserve(5) is True
    assert a.can_reserve(6) is False
    a.reserve("a", 3)
    pools(a, held=0, draining=0, free=5, reserved=3)
    assert a.credit("a") == 3
    assert a.can_reserve(2) is True
    assert a.can_reserve(3) is False
    a.reserve("b", 2)
    pools(a, held=0, draining=0, free=5, reserved=5)
    # Every block is physically free, yet nothing more may be promised (A2).
    assert a.can_reserve(1) is False
    assert a.can_reserve(0) is True
    assert a.can_allocate(5) is True


def test_can_reserve_counts_draining_blocks():
    """reserved 1 + draining 2 + needed <= 4: needed 1 fits, needed 2 does not."""
    a = BlockAllocator(4, B)
    a.reserve("a", 2)
    a.grow("a", 8)                      # 8 rows -> 2 blocks
    a.free_request("a", now=0, delay=3)  # credit gone, 2 blocks drain
    pools(a, held=0, draining=2, free=2, reserved=0)
    a.reserve("b", 1)
    pools(a, held=0, draining=2, free=2, reserved=1)
    assert a.can_reserve(1) is True
    assert a.can_reserve(2) is False


def test_reserve_twice_for_one_request_raises():
    """A second credit for the same id is a bug: the message names id and existing credit."""
    a = BlockAllocator(5, B)
    a.reserve("a", 2)
    with pytest.raises(InvariantError) as info:
        a.reserve("a", 1)
    assert str(info.value) == "request 'a' already holds a credit of 2 blocks"
    pools(a, held=0, draining=0, free=5, reserved=2)


def test_reserve_without_checking_first_raises_with_the_equation():
    """Reserving 3 then 3 of 5 blocks: nothing held or draining, unused credit 6 > 5."""
    a = BlockAllocator(5, B)
    a.reserve("a", 3)
    with pytest.raises(InvariantError) as info:
        a.reserve("b", 3)
    assert str(info.value) == \
        "held(0) + draining(0) + unused credit(6) <= num_blocks(5) is false"


def test_can_reserve_counts_blocks_held_without_credit():
    """5 blocks, 'x' holds 2 on demand (no credit): committed 2, so 3 more fit and 4 do not."""
    a = BlockAllocator(5, B)
    a.grow("x", 8)
    pools(a, held=2, draining=0, free=3, reserved=0)
    assert a.can_reserve(3) is True
    assert a.can_reserve(4) is False


def test_allocating_under_credit_does_not_count_twice():
    """Credit 3 of 5 with 2 blocks allocated: committed = held 2 + unused credit 1 = 3,
    so a credit of 2 more fits and 3 does not."""
    a = BlockAllocator(5, B)
    a.reserve("a", 3)
    a.grow("a", 8)
    pools(a, held=2, draining=0, free=3, reserved=3)
    assert a.committed() == 3
    assert a.can_reserve(2) is True
    assert a.can_reserve(3) is False


def test_release_credit_returns_its_size_and_zero_when_none():
    """Credits of 3 and 2: releasing 'a' returns 3 (reserved 5 -> 2), an unknown id 0."""
    a = BlockAllocator(5, B)
    a.reserve("a", 3)
    a.reserve("b", 2)
    assert a.release_credit("a") == 3
    pools(a, held=0, draining=0, free=5, reserved=2)
    assert a.credit("a") == 0
    assert a.release_credit("nobody") == 0
    pools(a, held=0, draining=0, free=5, reserved=2)


# --- physical blocks ---------------------------------------------------------------


def test_grow_within_credit_allocates_only_the_blocks_rows_need():
    """Credit 3 (B=4): rows 1 -> 1 block, 4 -> still 1, 5 -> 2, 12 -> 3; free 5 -> 2."""
    a = BlockAllocator(5, B)
    a.reserve("a", 3)
    assert a.can_allocate(1) is True
    assert a.blocks_to_grow("a", 1) == 1
    assert a.grow("a", 1) == 1
    assert a.table("a") == [0]
    pools(a, held=1, draining=0, free=4, reserved=3)
    assert a.blocks_to_grow("a", 4) == 0
    assert a.grow("a", 4) == 0
    pools(a, held=1, draining=0, free=4, reserved=3)
    assert a.grow("a", 5) == 1
    assert a.table("a") == [0, 1]
    pools(a, held=2, draining=0, free=3, reserved=3)
    assert a.blocks_to_grow("a", 12) == 1
    assert a.grow("a", 12) == 1
    assert a.table("a") == [0, 1, 2]
    pools(a, held=3, draining=0, free=2, reserved=3)
    assert a.blocks_to_grow("a", 12) == 0
    assert a.blocks_to_grow("a", 13) == 1
    # Shrinking never happens through grow.
    assert a.grow("a", 2) == 0
    assert a.table("a") == [0, 1, 2]
    assert a.credit("a") == 3  # allocation does not consume the credit (A2)


def test_can_allocate_follows_the_free_list():
    """5 blocks, 'a' takes 2 (8 rows): can_allocate(3) holds, can_allocate(4) does not."""
    a = BlockAllocator(5, B)
    a.reserve("a", 2)
    a.grow("a", 8)
    pools(a, held=2, draining=0, free=3, reserved=2)
    assert a.can_allocate(3) is True
    assert a.can_allocate(4) is False


def test_grow_beyond_credit_raises_with_numbers_and_changes_nothing():
    """Credit 2, 9 rows need 3 blocks: 'allocated(3) <= credit(2) is false', state unchanged."""
    a = BlockAllocator(5, B)
    a.reserve("a", 2)
    a.grow("a", 4)
    pools(a, held=1, draining=0, free=4, reserved=2)
    with pytest.raises(InvariantError) as info:
        a.grow("a", 9)
    assert "allocated(3) <= credit(2) is false" in str(info.value)
    assert "'a'" in str(info.value)
    assert a.table("a") == [0]
    pools(a, held=1, draining=0, free=4, reserved=2)


def test_grow_beyond_free_raises_with_the_conservation_equation():
    """On demand (no credit), 2 blocks, 12 rows need 3: message has free(2) < 3 and the pools."""
    a = BlockAllocator(2, B)
    with pytest.raises(InvariantError) as info:
        a.grow("x", 12)
    msg = str(info.value)
    assert "needs 3 new blocks but free(2) < 3" in msg
    assert "held(0) + draining(0) + free(2) == num_blocks(2)" in msg
    pools(a, held=0, draining=0, free=2, reserved=0)


def test_grow_without_credit_is_on_demand():
    """A request with no credit may grow as far as free blocks go: 8 rows -> 2 blocks."""
    a = BlockAllocator(3, B)
    assert a.grow("x", 8) == 2
    assert a.table("x") == [0, 1]
    pools(a, held=2, draining=0, free=1, reserved=0)


# --- freeing and draining (A4) -------------------------------------------------------


def test_free_request_returns_blocks_sent_to_drain_and_drops_credit_at_once():
    """'a' holds 3 blocks under a credit of 4; freeing at t=3 returns 3, reserved drops to 0."""
    a = BlockAllocator(5, B)
    a.reserve("a", 4)
    a.grow("a", 10)  # ceil(10/4) = 3 blocks
    pools(a, held=3, draining=0, free=2, reserved=4)
    assert a.free_request("a", now=3, delay=2) == 3
    pools(a, held=0, draining=3, free=2, reserved=0)
    assert a.table("a") == []
    assert a.credit("a") == 0


def test_free_request_with_no_blocks_returns_zero_and_releases_credit():
    """A request admitted but never dispatched: credit 2 goes, 0 blocks drain, no expiry."""
    a = BlockAllocator(5, B)
    a.reserve("a", 2)
    assert a.free_request("a", now=1, delay=2) == 0
    pools(a, held=0, draining=0, free=5, reserved=0)
    assert a.next_expiry() is None


def test_drain_with_delay_releases_exactly_at_now_plus_delay():
    """Freed at t=3 with delay 2: still draining at t=4, free at t=5 (A4)."""
    a = BlockAllocator(5, B)
    a.reserve("a", 2)
    a.grow("a", 8)
    a.free_request("a", now=3, delay=2)
    assert a.next_expiry() == 5
    pools(a, held=0, draining=2, free=3, reserved=0)
    assert a.release_expired(3) == 0
    assert a.release_expired(4) == 0
    pools(a, held=0, draining=2, free=3, reserved=0)
    assert a.next_expiry() == 5
    assert a.release_expired(5) == 2
    pools(a, held=0, draining=0, free=5, reserved=0)
    assert a.next_expiry() is None
    assert a.release_expired(6) == 0


def test_zero_delay_frees_at_once():
    """Freed at t=7 with delay 0: the block is free immediately, nothing drains."""
    a = BlockAllocator(4, B)
    a.grow("a", 4)
    assert a.free_request("a", now=7, delay=0) == 1
    pools(a, held=0, draining=0, free=4, reserved=0)
    assert a.next_expiry() is None
    assert a.release_expired(7) == 0
    pools(a, held=0, draining=0, free=4, reserved=0)


def test_zero_delay_free_is_reused_first_tail_first():
    """'a' holds [0, 1] of 3 blocks; freed with delay 0, a new 3-block table is [1, 0, 2]."""
    a = BlockAllocator(3, B)
    a.grow("a", 8)
    a.free_request("a", now=0, delay=0)
    pools(a, held=0, draining=0, free=3, reserved=0)
    a.grow("c", 12)
    assert a.table("c") == [1, 0, 2]


def test_next_expiry_walks_the_drain_batches_in_order():
    """'a' (1 block) drains until 2, 'b' (2 blocks) until 4: expiries 2, then 4, then None."""
    a = BlockAllocator(5, B)
    a.grow("a", 3)
    a.grow("b", 6)
    pools(a, held=3, draining=0, free=2, reserved=0)
    a.free_request("a", now=0, delay=2)
    pools(a, held=2, draining=1, free=2, reserved=0)
    a.free_request("b", now=1, delay=3)
    pools(a, held=0, draining=3, free=2, reserved=0)
    assert a.next_expiry() == 2
    assert a.release_expired(2) == 1
    pools(a, held=0, draining=2, free=3, reserved=0)
    assert a.next_expiry() == 4
    assert a.release_expired(4) == 2
    pools(a, held=0, draining=0, free=5, reserved=0)
    assert a.next_expiry() is None


def test_release_expired_late_releases_every_batch_that_expired():
    """Batches expiring at 2 and 3 (1 + 2 blocks) both come back at release_expired(10)."""
    a = BlockAllocator(5, B)
    a.grow("a", 4)
    a.grow("b", 8)
    a.free_request("a", now=1, delay=1)
    a.free_request("b", now=2, delay=1)
    pools(a, held=0, draining=3, free=2, reserved=0)
    assert a.release_expired(10) == 3
    pools(a, held=0, draining=0, free=5, reserved=0)


def test_same_expiry_frees_share_one_batch():
    """Two frees at t=1 with delay 1 expire together: next_expiry 2, then 3 blocks at once."""
    a = BlockAllocator(4, B)
    a.grow("a", 4)
    a.grow("b", 8)
    assert a.free_request("a", now=1, delay=1) == 1
    assert a.free_request("b", now=1, delay=1) == 2
    assert a.next_expiry() == 2
    assert a.release_expired(1) == 0
    assert a.release_expired(2) == 3
    assert a.next_expiry() is None
    pools(a, held=0, draining=0, free=4, reserved=0)


def test_drain_expiry_earlier_than_a_queued_one_raises():
    """Freed at t=5 then at t=3 (delay 1): expiry 4 before 6 is a bookkeeping bug."""
    a = BlockAllocator(4, B)
    a.grow("a", 4)
    a.grow("b", 4)
    a.free_request("a", now=5, delay=1)
    with pytest.raises(InvariantError) as info:
        a.free_request("b", now=3, delay=1)
    msg = str(info.value)
    assert "expiry(4)" in msg and "expiry(6)" in msg


# --- reuse order -------------------------------------------------------------------


def test_free_request_drains_tail_first_and_first_freed_is_first_reused():
    """'a' holds [0, 1, 2], 'b' [3]; freeing 'a' (delay 1) drains 2, 1, 0 (tail first);
    meanwhile only block 4 can be handed out; after the release 'c' gets [2, 1, 0]."""
    a = BlockAllocator(5, B)
    a.grow("a", 12)
    a.grow("b", 4)
    assert a.table("a") == [0, 1, 2]
    assert a.table("b") == [3]
    pools(a, held=4, draining=0, free=1, reserved=0)
    assert a.free_request("a", now=0, delay=1) == 3
    pools(a, held=1, draining=3, free=1, reserved=0)
    # Draining blocks are not reusable: only block 4 is handed out now.
    a.grow("early", 1)
    assert a.table("early") == [4]
    pools(a, held=2, draining=3, free=0, reserved=0)
    assert a.release_expired(1) == 3
    pools(a, held=2, draining=0, free=3, reserved=0)
    a.grow("c", 12)
    assert a.table("c") == [2, 1, 0]
    pools(a, held=5, draining=0, free=0, reserved=0)


def test_whole_slices_and_one_block_at_a_time_hand_out_the_same_blocks():
    """While no block is shared or pinned, grow and free_request move whole slices of
    a table; afterwards (or with prefix caching) they go block by block. Both give
    the same blocks: a [0, 1, 2] and b [3] of 6; a freed, c takes 2, 1, 0 (the top
    of the stack) and the never-used 4; b freed, d takes 3 and the never-used 5."""
    tables = []
    for one_at_a_time in (False, True):
        a = BlockAllocator(6, B)
        a._shared = one_at_a_time
        a.grow("a", 12)
        a.grow("b", 4)
        assert a.free_request("a", now=0, delay=0) == 3
        a.grow("c", 16)
        assert a.free_request("b", now=0, delay=0) == 1
        a.grow("d", 8)
        pools(a, held=6, draining=0, free=0, reserved=0)
        a.audit()
        tables.append((a.table("c"), a.table("d")))
    assert tables == [([2, 1, 0, 4], [3, 5])] * 2


def test_single_free_reuse_order_is_pinned():
    """'a' holds [0, 1, 2] of 3 blocks; free and release at once: 'c' gets [2, 1, 0]."""
    a = BlockAllocator(3, B)
    a.grow("a", 12)
    a.free_request("a", now=0, delay=0)
    a.release_expired(0)
    pools(a, held=0, draining=0, free=3, reserved=0)
    for rows, expected in ((1, [2]), (5, [2, 1]), (9, [2, 1, 0])):
        a.grow("c", rows)
        assert a.table("c") == expected
    pools(a, held=3, draining=0, free=0, reserved=0)


def test_latest_drain_batch_is_reused_first_tail_first_within_it():
    """Plain blocks are a stack, as vLLM prepends non-cached blocks to its free queue:
    'a' holds [0, 1], 'b' [2, 3] of 4 blocks; 'a' drains first (1, 0), then 'b' (3, 2);
    after both release, a new 4-block table takes b's batch first: [3, 2, 1, 0]."""
    a = BlockAllocator(4, B)
    a.grow("a", 8)
    a.grow("b", 8)
    a.free_request("a", now=0, delay=2)
    a.free_request("b", now=1, delay=2)
    assert a.release_expired(5) == 4
    pools(a, held=0, draining=0, free=4, reserved=0)
    a.grow("c", 16)
    assert a.table("c") == [3, 2, 1, 0]


def test_latest_drain_batch_is_reused_first_when_released_apart():
    """Same as above but released at t=2 and t=3 separately: still [3, 2, 1, 0]."""
    a = BlockAllocator(4, B)
    a.grow("a", 8)
    a.grow("b", 8)
    a.free_request("a", now=0, delay=2)
    a.free_request("b", now=1, delay=2)
    assert a.release_expired(2) == 2
    assert a.release_expired(3) == 2
    a.grow("c", 16)
    assert a.table("c") == [3, 2, 1, 0]


def test_latest_immediate_free_is_reused_first():
    """Delay 0: 'a' [0, 1] freed, then 'b' [2, 3] freed: a new table is [3, 2, 1, 0]."""
    a = BlockAllocator(4, B)
    a.grow("a", 8)
    a.grow("b", 8)
    a.free_request("a", now=0, delay=0)
    a.free_request("b", now=0, delay=0)
    pools(a, held=0, draining=0, free=4, reserved=0)
    a.grow("c", 16)
    assert a.table("c") == [3, 2, 1, 0]


# --- conservation after every step --------------------------------------------------


def test_pools_sum_to_num_blocks_after_every_step():
    """A life of two requests on 6 blocks of 4 rows, with the pools asserted at each step."""
    a = BlockAllocator(6, B)
    pools(a, held=0, draining=0, free=6, reserved=0)
    assert a.can_reserve(3)
    a.reserve("a", 3)                   # P+M-1 = 10 rows -> 3 blocks
    pools(a, held=0, draining=0, free=6, reserved=3)
    assert a.can_reserve(2)
    a.reserve("b", 2)                   # 7 rows -> 2 blocks
    pools(a, held=0, draining=0, free=6, reserved=5)
    assert a.can_allocate(a.blocks_to_grow("a", 6))
    a.grow("a", 6)                      # prefill 6 rows -> 2 blocks
    pools(a, held=2, draining=0, free=4, reserved=5)
    a.grow("b", 3)                      # 3 rows -> 1 block
    pools(a, held=3, draining=0, free=3, reserved=5)
    a.grow("a", 9)                      # decodes up to row 9 -> 3rd block
    pools(a, held=4, draining=0, free=2, reserved=5)
    assert a.free_request("b", now=4, delay=2) == 1
    pools(a, held=3, draining=1, free=2, reserved=3)
    assert not a.can_reserve(3)         # 3 + 1 + 3 > 6: must wait for the drain
    assert a.can_reserve(2)
    a.release_expired(5)
    pools(a, held=3, draining=1, free=2, reserved=3)
    a.release_expired(6)
    pools(a, held=3, draining=0, free=3, reserved=3)
    assert a.can_reserve(3)
    a.reserve("c", 3)
    pools(a, held=3, draining=0, free=3, reserved=6)
    assert a.free_request("a", now=7, delay=0) == 3   # no delay: free at once
    pools(a, held=0, draining=0, free=6, reserved=3)
    assert a.release_expired(7) == 0
    pools(a, held=0, draining=0, free=6, reserved=3)
    a.grow("c", 12)
    pools(a, held=3, draining=0, free=3, reserved=3)
    assert a.free_request("c", now=8, delay=0) == 3
    a.release_expired(8)
    pools(a, held=0, draining=0, free=6, reserved=0)
    assert (a.peak_reserved, a.peak_held) == (6, 4)


# --- check() and audit() -------------------------------------------------------------


def _busy() -> BlockAllocator:
    """5 blocks: 'a' credit 3 holding 2 blocks, 'b' freed with 1 block draining."""
    a = BlockAllocator(5, B)
    a.reserve("a", 3)
    a.grow("a", 8)
    a.grow("b", 4)
    a.free_request("b", now=0, delay=5)
    pools(a, held=2, draining=1, free=2, reserved=3)
    return a


def test_check_and_audit_pass_on_consistent_state():
    """The busy state (held 2, draining 1, free 2, reserved 3) passes both checks."""
    a = _busy()
    a.check()
    a.audit()


def test_check_raises_with_equation_when_held_is_corrupted():
    """held bumped 2 -> 3: held(3) + draining(1) + free(2) == num_blocks(5) is false."""
    a = _busy()
    a.held += 1
    with pytest.raises(InvariantError) as info:
        a.check()
    assert str(info.value) == "held(3) + draining(1) + free(2) == num_blocks(5) is false"
    with pytest.raises(InvariantError):
        a.audit()


def test_check_raises_with_equation_when_draining_is_corrupted():
    """draining dropped 1 -> 0: held(2) + draining(0) + free(2) == num_blocks(5) is false."""
    a = _busy()
    a.draining -= 1
    with pytest.raises(InvariantError) as info:
        a.check()
    assert str(info.value) == "held(2) + draining(0) + free(2) == num_blocks(5) is false"


def test_check_raises_with_credit_equation_when_reserved_is_corrupted():
    """reserved bumped 3 -> 5: reserved(5) + draining(1) <= num_blocks(5) is false."""
    a = _busy()
    a.reserved = 5
    with pytest.raises(InvariantError) as info:
        a.check()
    assert str(info.value) == "reserved(5) + draining(1) <= num_blocks(5) is false"


def test_audit_catches_reserved_that_disagrees_with_credits():
    """reserved lowered 3 -> 2 passes check() but audit: sum of credits(3) == reserved(2)."""
    a = _busy()
    a.reserved = 2
    a.check()
    with pytest.raises(InvariantError) as info:
        a.audit()
    assert str(info.value) == "sum of credits(3) == reserved(2) is false"


def test_audit_catches_held_that_disagrees_with_tables():
    """held 2 -> 3 and draining 1 -> 0 keeps the sum, but audit: blocks(2) == held(3) fails."""
    a = _busy()
    a.held += 1
    a.draining -= 1
    a.check()
    with pytest.raises(InvariantError) as info:
        a.audit()
    assert str(info.value).endswith("blocks(2) == held(3) is false")


def test_audit_catches_granted_that_disagrees_with_allocations():
    """granted bumped 2 -> 3 (one more credited block than 'a' allocated): audit says
    sum of grown(2) == granted(3) is false."""
    a = _busy()
    a.granted += 1
    a.check()
    with pytest.raises(InvariantError) as info:
        a.audit()
    assert str(info.value) == "sum of grown(2) == granted(3) is false"


# --- peaks ---------------------------------------------------------------------------


def test_peaks_record_the_highest_reserved_and_held():
    """Reserve 2 then 3 (peak 5), grow to 1 then 4 blocks (peak 4), free all: peaks stay."""
    a = BlockAllocator(6, B)
    a.reserve("a", 2)
    assert (a.peak_reserved, a.peak_held) == (2, 0)
    a.reserve("b", 3)
    assert (a.peak_reserved, a.peak_held) == (5, 0)
    a.grow("a", 4)
    assert (a.peak_reserved, a.peak_held) == (5, 1)
    a.release_credit("a")
    a.reserve("c", 1)
    assert (a.reserved, a.peak_reserved) == (4, 5)
    a.grow("b", 12)
    assert (a.held, a.peak_held) == (4, 4)
    a.free_request("a", now=0, delay=0)
    a.free_request("b", now=0, delay=0)
    a.release_expired(0)
    pools(a, held=0, draining=0, free=6, reserved=1)
    assert (a.peak_reserved, a.peak_held) == (5, 4)


# --- all-or-nothing growth, sharing and pins (L4, L5, A5) ----------------------------


def test_try_grow_takes_every_block_or_none():
    """3 blocks, 'a' holds 1: 'b' asking for 12 rows (3 blocks) gets none; 8 rows (2) fit."""
    a = BlockAllocator(3, B)
    a.grow("a", 4)
    assert a.try_grow("b", 12) is False
    assert a.table("b") == []
    pools(a, held=1, draining=0, free=2, reserved=0)
    assert a.try_grow("b", 8) is True
    assert a.table("b") == [1, 2]
    pools(a, held=3, draining=0, free=0, reserved=0)


def test_try_grow_of_a_table_counts_and_checks_credit_as_grow():
    """4 blocks, 'a' with a credit of 2: try_grow to 4 rows takes block 0 (a step's
    growth of 1, 1 granted), again to 4 rows nothing, to 8 rows block 1 (growth 2);
    to 12 rows 1 block is free but a third is over the credit: grow's error, and
    nothing taken."""
    a = BlockAllocator(4, B)
    a.reserve("a", 2)
    assert a.try_grow("a", 4) is True
    assert (a.table("a"), a.step_growth, a.granted) == ([0], {"a": 1}, 1)
    assert a.try_grow("a", 4) is True
    assert (a.table("a"), a.step_growth, a.granted) == ([0], {"a": 1}, 1)
    assert a.try_grow("a", 8) is True
    assert (a.table("a"), a.step_growth, a.granted) == ([0, 1], {"a": 2}, 2)
    with pytest.raises(InvariantError, match=r"request 'a': allocated\(3\) <= credit\(2\) is false"):
        a.try_grow("a", 12)
    assert (a.table("a"), a.step_growth, a.granted) == ([0, 1], {"a": 2}, 2)
    pools(a, held=2, draining=0, free=2, reserved=2)


def test_shared_block_drains_only_when_its_last_owner_lets_go():
    """'b' shares 'a''s 2 blocks: freeing 'a' drains 0 blocks, freeing 'b' then drains 2."""
    a = BlockAllocator(4, B)
    a.grow("a", 8)
    a.share("b", a.table("a"))
    assert a.table("b") == [0, 1]
    pools(a, held=2, draining=0, free=2, reserved=0)
    assert a.free_request("a", now=0, delay=1) == 0
    pools(a, held=2, draining=0, free=2, reserved=0)
    assert a.free_request("b", now=0, delay=1) == 2
    pools(a, held=0, draining=2, free=2, reserved=0)


def test_share_of_a_block_nobody_holds_raises():
    """Block 3 of a fresh allocator has no owner: sharing it is a bookkeeping bug."""
    a = BlockAllocator(4, B)
    with pytest.raises(InvariantError) as info:
        a.share("b", [3])
    assert "block 3" in str(info.value)


def test_l5_pinned_blocks_stay_held_until_the_transfer_is_acknowledged():
    """L5 on 4 blocks: the producer holds [0, 1], a transfer pins them and copies into
    [2, 3] (the consumer). Freeing the producer drains 0 blocks (pinned): free stays 0.
    Freeing the consumer drains its 2 (free 2); the unpin drains [0, 1] (free 4 at t=3)."""
    a = BlockAllocator(4, B)
    a.grow("producer", 8)
    a.grow("consumer", 8)
    handle = a.pin(a.table("producer"))
    pools(a, held=4, draining=0, free=0, reserved=0)
    assert a.free_request("producer", now=1, delay=0) == 0   # pinned: nothing drains
    pools(a, held=4, draining=0, free=0, reserved=0)
    a.release_expired(1)
    pools(a, held=4, draining=0, free=0, reserved=0)
    assert a.free_request("consumer", now=1, delay=0) == 2
    a.release_expired(1)
    pools(a, held=2, draining=0, free=2, reserved=0)
    assert a.unpin(handle, now=2, delay=1) == 2
    pools(a, held=0, draining=2, free=2, reserved=0)
    assert a.next_expiry() == 3
    a.release_expired(3)
    pools(a, held=0, draining=0, free=4, reserved=0)


def test_unpin_of_a_block_still_owned_drains_nothing():
    """Pinning 'a''s block and unpinning it while 'a' still holds it drains 0 blocks."""
    a = BlockAllocator(2, B)
    a.grow("a", 4)
    handle = a.pin([0])
    assert a.unpin(handle, now=0, delay=0) == 0
    pools(a, held=1, draining=0, free=1, reserved=0)
    assert a.table("a") == [0]


def test_allocators_alive_at_once_hand_out_one_object_per_block_number():
    """Two pools of 1,000 blocks each hand out blocks 0..999: block 999 of one is the
    very int object of the other (a fleet's replicas keep one object per number)."""
    a, b = BlockAllocator(1000, 4), BlockAllocator(1000, 4)
    a.grow("x", 4000)
    b.grow("y", 4000)
    assert a.table("x") == b.table("y") == list(range(1000))
    assert all(p is q for p, q in zip(a.table("x"), b.table("y")))


def test_allocators_growing_in_threads_at_once_number_each_block_once():
    """Four threads each make allocators one after another and grow them (a sweep on a
    thread pool), switching threads every microsecond: the shared list of block
    numbers still holds 0, 1, 2, ... in order, and every table its own numbers."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    tables = []

    def work(k: int) -> None:
        for n in range(1, 150):
            a = BlockAllocator(100_000, 1)
            a.grow("x", n * 7 + k)
            tables.append((a, n * 7 + k))

    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert all(a.table("x") == list(range(rows)) for a, rows in tables)
    ids = tables[0][0]._ids
    assert ids == list(range(len(ids))) and len(ids) >= 149 * 7 + 3
