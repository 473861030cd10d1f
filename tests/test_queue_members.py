"""`QueueMembers`: the free cached blocks of vLLM's LRU queue by the place of
their latest entry (kv/queue_members.py), with hand-computed places."""
import pytest

from scheduler_sim.kv.queue_members import QueueMembers


def test_members_are_the_blocks_whose_latest_entry_is_not_consumed():
    """Blocks 7, 3, 9 join (entries 0, 1, 2), then 4 and 8 (3, 4). Eviction consumes
    entries 0 and 1 (7 and 3): the front moves to 2 and the places stay. A hit takes 4
    out (place -1). 3 joins again as entry 5."""
    m = QueueMembers()
    m.add_new([7, 3, 9])
    m.add_new([4, 8])
    assert (m.place, m.front, m.tail, len(m)) == ({7: 0, 3: 1, 9: 2, 4: 3, 8: 4}, 0, 5, 5)
    m.evicted([7, 3], 2)
    assert (m.place, m.front, m.tail, len(m)) == ({7: 0, 3: 1, 9: 2, 4: 3, 8: 4}, 2, 5, 3)
    assert (7 in m, 3 in m, 9 in m, 5 in m, "x" in m) == (False, False, True, False, False)
    assert m == {9, 4, 8} and sorted(m) == [4, 8, 9]
    m.remove_members({4})
    assert (m.place[4], len(m), m.count_in([9, 4, 8, 7]), m.intersection([4, 8, 7])) == (
        -1, 2, 2, {8})
    m.add_new([3])
    assert (m.place[3], m.tail, len(m), m == {3, 8, 9}) == (5, 6, 3, True)


def test_eviction_past_stale_entries_counts_them_in_the_front():
    """Entries 0..2 are 5, 6, 5 (5 was hit and freed again: its first entry stale).
    Evicting 6 consumes entries 0 and 1 (the stale 5 and 6): front 2, 5 still in."""
    m = QueueMembers()
    m.add_new([5, 6])
    m.remove(5)
    m.add_new([5])
    m.evicted([6], 2)
    assert (m.front, len(m), list(m), 6 in m) == (2, 1, [5], False)
    with pytest.raises(KeyError):
        m.remove(6)


def test_clear_and_renumber_start_from_the_tail():
    """After 4 entries, `renumber` with runs [2], [0, 1] numbers them 4, 5, 6 and
    forgets the rest; `clear` moves the front to the tail."""
    m = QueueMembers()
    m.add_new([0, 1, 2, 3])
    m.remove(3)
    m.renumber([[2], [0, 1]])
    assert (m.place, m.front, m.tail, len(m)) == ({2: 4, 0: 5, 1: 6}, 4, 7, 3)
    m.clear()
    assert (m.place, m.front, m.tail, len(m), bool(m), 2 in m) == ({}, 7, 7, 0, False, False)
