"""Waiting queues: the FCFS and priority orders behind one interface, and make_queue."""
from __future__ import annotations

import pytest

from scheduler_sim.requests.queues import QUEUE_ORDERS, FcfsQueue, PriorityQueue, make_queue
from scheduler_sim.requests.request import Request


def mk(rid: str, index: int, arrival: int, priority: int = 0) -> Request:
    """A request with a trace position, arrival tick and priority (P=4, N=2)."""
    return Request(rid, index, arrival, 4, 2, priority=priority)


def ids(queue) -> list[str]:
    """The queue's members in iteration order, by id."""
    return [r.rid for r in queue]


# --- the common interface ------------------------------------------------------------


@pytest.mark.parametrize("cls", [FcfsQueue, PriorityQueue])
def test_add_peek_pop_len_iter_contains(cls):
    """Three requests with increasing (arrival, index) and equal priority come out in
    that order under both orders; peek does not remove, pop does, len follows."""
    q = cls()
    a, b, c = mk("a", 0, 0), mk("b", 1, 1), mk("c", 2, 2)
    assert len(q) == 0
    assert list(q) == []
    assert a not in q
    for r in (a, b, c):
        q.add(r)
    assert len(q) == 3
    assert ids(q) == ["a", "b", "c"]
    assert (a in q, b in q, c in q) == (True, True, True)
    assert q.peek() is a
    assert len(q) == 3
    assert q.pop() is a
    assert len(q) == 2
    assert a not in q
    assert ids(q) == ["b", "c"]
    assert q.pop() is b
    assert q.pop() is c
    assert len(q) == 0
    assert ids(q) == []


@pytest.mark.parametrize("cls", [FcfsQueue, PriorityQueue])
def test_remove_from_the_middle_then_readd(cls):
    """Removing 'b' of a, b, c leaves a, c; adding 'b' back puts it where its order says
    (FCFS: at the tail, a, c, b; priority: by key, a, b, c), and only once."""
    q = cls()
    a, b, c = mk("a", 0, 0), mk("b", 1, 1), mk("c", 2, 2)
    for r in (a, b, c):
        q.add(r)
    q.remove(b)
    assert len(q) == 2
    assert b not in q
    assert ids(q) == ["a", "c"]
    q.add(b)
    assert len(q) == 3
    assert b in q
    expected = ["a", "c", "b"] if cls is FcfsQueue else ["a", "b", "c"]
    assert ids(q) == expected
    assert [q.pop().rid for _ in range(3)] == expected
    assert len(q) == 0


@pytest.mark.parametrize("cls", [FcfsQueue, PriorityQueue])
def test_remove_the_head_moves_peek_to_the_next(cls):
    """Removing the head 'a' of a, b: peek and pop now give 'b'."""
    q = cls()
    a, b = mk("a", 0, 0), mk("b", 1, 1)
    q.add(a)
    q.add(b)
    q.remove(a)
    assert q.peek() is b
    assert q.pop() is b
    assert len(q) == 0


@pytest.mark.parametrize("cls", [FcfsQueue, PriorityQueue])
def test_iteration_is_a_snapshot(cls):
    """Removing members while iterating does not disturb the walk: all three are seen."""
    q = cls()
    reqs = [mk("a", 0, 0), mk("b", 1, 1), mk("c", 2, 2)]
    for r in reqs:
        q.add(r)
    seen = []
    for r in q:
        seen.append(r.rid)
        q.remove(r)
    assert seen == ["a", "b", "c"]
    assert len(q) == 0


# --- FCFS ----------------------------------------------------------------------------


def test_fcfs_keeps_insertion_order_not_arrival_or_id():
    """FCFS is registration order: 'z' (arrival 5) added before 'a' (arrival 1) stays first."""
    q = FcfsQueue()
    z, a = mk("z", 3, 5), mk("a", 4, 1)
    q.add(z)
    q.add(a)
    assert ids(q) == ["z", "a"]
    assert q.peek() is z


def test_fcfs_prepend_goes_to_the_head():
    """A resumed victim 'v' prepended to a, b is served first: v, a, b."""
    q = FcfsQueue()
    a, b, v = mk("a", 1, 1), mk("b", 2, 2), mk("v", 3, 3)
    q.add(a)
    q.add(b)
    q.prepend(v)
    assert ids(q) == ["v", "a", "b"]
    assert q.peek() is v
    assert len(q) == 3
    assert q.pop() is v
    assert ids(q) == ["a", "b"]


def test_fcfs_prepend_to_an_empty_queue():
    """Prepending to an empty FCFS queue makes that request the only member."""
    q = FcfsQueue()
    v = mk("v", 0, 0)
    q.prepend(v)
    assert ids(q) == ["v"]
    assert q.pop() is v


def test_fcfs_insert_by_arrival_puts_a_victim_back_in_arrival_order():
    """Queue b (arrival 2), d (arrival 4); 'c' (arrival 2, index 3) goes after b (index 1)
    and before d; 'a' (arrival 0) goes first: a, b, c, d."""
    q = FcfsQueue()
    b, d = mk("b", 1, 2), mk("d", 4, 4)
    c, a = mk("c", 3, 2), mk("a", 0, 0)
    q.add(b)
    q.add(d)
    q.insert_by_arrival(c)
    assert ids(q) == ["b", "c", "d"]
    q.insert_by_arrival(a)
    assert ids(q) == ["a", "b", "c", "d"]
    assert len(q) == 4
    assert [q.pop().rid for _ in range(4)] == ["a", "b", "c", "d"]


# --- priority ------------------------------------------------------------------------


def test_priority_orders_by_priority_then_arrival_then_trace_position():
    """Keys (priority, arrival, index): d (0,2,3) < b (0,5,1) < c (0,5,2) < a (1,0,0),
    whatever the insertion order (c, a, b, d)."""
    q = PriorityQueue()
    a = mk("a", 0, 0, priority=1)
    b = mk("b", 1, 5, priority=0)
    c = mk("c", 2, 5, priority=0)
    d = mk("d", 3, 2, priority=0)
    for r in (c, a, b, d):
        q.add(r)
    assert ids(q) == ["d", "b", "c", "a"]
    assert q.peek() is d
    assert [q.pop().rid for _ in range(4)] == ["d", "b", "c", "a"]


def test_priority_ties_fall_to_trace_position_not_id_or_insertion():
    """Same priority and arrival: 'z' (index 0) before 'a' (index 1), though 'a' is added
    first and sorts first by name."""
    q = PriorityQueue()
    z, a = mk("z", 0, 3), mk("a", 1, 3)
    q.add(a)
    q.add(z)
    assert ids(q) == ["z", "a"]
    assert q.pop() is z
    assert q.pop() is a


def test_priority_lower_number_runs_first():
    """Priority -1 beats 0 beats 5, regardless of arrival (later arrivals here)."""
    q = PriorityQueue()
    p5 = mk("p5", 0, 0, priority=5)
    p0 = mk("p0", 1, 1, priority=0)
    pm = mk("pm", 2, 9, priority=-1)
    for r in (p5, p0, pm):
        q.add(r)
    assert [q.pop().rid for _ in range(3)] == ["pm", "p0", "p5"]


def test_priority_prepend_is_a_plain_insert():
    """Prepending 'v' (priority 2) to a (0) and b (1) does not jump the queue: a, b, v."""
    q = PriorityQueue()
    a = mk("a", 0, 0, priority=0)
    b = mk("b", 1, 1, priority=1)
    v = mk("v", 2, 0, priority=2)
    q.add(a)
    q.add(b)
    q.prepend(v)
    assert ids(q) == ["a", "b", "v"]
    assert q.peek() is a
    assert len(q) == 3


def test_priority_prepend_of_a_victim_reenters_by_its_original_key():
    """Pop 'a' (0,0,0), then prepend it back: it is the head again, b stays second."""
    q = PriorityQueue()
    a, b = mk("a", 0, 0), mk("b", 1, 1)
    q.add(a)
    q.add(b)
    assert q.pop() is a
    q.prepend(a)
    assert ids(q) == ["a", "b"]
    assert q.pop() is a


def test_priority_many_remove_readd_cycles_keep_one_entry_each():
    """Removing and re-adding 'b' 40 times (stale heap entries pile up, then get
    rebuilt) still leaves exactly a, b, c, each popped once."""
    q = PriorityQueue()
    a, b, c = mk("a", 0, 0), mk("b", 1, 1), mk("c", 2, 2)
    for r in (a, b, c):
        q.add(r)
    for _ in range(40):
        q.remove(b)
        assert len(q) == 2
        assert b not in q
        q.add(b)
        assert len(q) == 3
    assert ids(q) == ["a", "b", "c"]
    assert [q.pop().rid for _ in range(3)] == ["a", "b", "c"]
    assert len(q) == 0
    assert list(q) == []


def test_priority_remove_then_pop_skips_the_stale_entry():
    """Removing 'a' (head) then popping twice gives b, c and leaves the queue empty."""
    q = PriorityQueue()
    a, b, c = mk("a", 0, 0), mk("b", 1, 1), mk("c", 2, 2)
    for r in (a, b, c):
        q.add(r)
    q.remove(a)
    assert q.pop() is b
    assert q.pop() is c
    assert len(q) == 0


# --- the factory ---------------------------------------------------------------------


def test_make_queue_builds_each_known_order():
    """make_queue('fcfs') is an FcfsQueue, 'priority' a PriorityQueue, each fresh and empty."""
    f = make_queue("fcfs")
    p = make_queue("priority")
    assert type(f) is FcfsQueue
    assert type(p) is PriorityQueue
    assert (len(f), len(p)) == (0, 0)
    assert make_queue("fcfs") is not f
    assert QUEUE_ORDERS["fcfs"] is FcfsQueue
    assert QUEUE_ORDERS["priority"] is PriorityQueue


@pytest.mark.parametrize("name", ["lifo", "FCFS", ""])
def test_make_queue_rejects_unknown_names_naming_the_known_orders(name):
    """An unknown order raises ValueError quoting the bad name and listing every known one."""
    with pytest.raises(ValueError) as info:
        make_queue(name)
    msg = str(info.value)
    assert repr(name) in msg
    for known in QUEUE_ORDERS:
        assert known in msg


def test_head_gives_the_first_requests_building_spilled_ones_only_as_far_as_asked():
    """FCFS a, b held and two spilled (c, d built in order when reached): head(1) is
    [a], head(2) [a, b], neither builds one; head(3) builds c only ([a, b, c], one
    still spilled), as iterating that far would; head(9) builds d. A priority queue
    gives its first ones too (the interface's default: iteration)."""
    made = iter([mk("c", 2, 2), mk("d", 3, 3)])
    q = FcfsQueue()
    q.add(mk("a", 0, 0))
    q.add(mk("b", 1, 1))
    for _ in range(2):
        q.spill(lambda: next(made))
    assert ([r.rid for r in q.head(1)], q.spilled) == (["a"], 2)
    assert ([r.rid for r in q.head(2)], q.spilled) == (["a", "b"], 2)
    assert ([r.rid for r in q.head(3)], q.spilled, len(q)) == (["a", "b", "c"], 1, 4)
    assert ([r.rid for r in q.head(9)], q.spilled, ids(q)) == (
        ["a", "b", "c", "d"], 0, ["a", "b", "c", "d"])
    p = PriorityQueue()
    for r in (mk("y", 1, 1, priority=2), mk("x", 0, 0, priority=1), mk("z", 2, 2)):
        p.add(r)
    assert [r.rid for r in p.head(2)] == ["z", "x"]
