"""RotatingSet: requests in admission order, walked round-robin from a remembered point."""
from __future__ import annotations

import itertools

import pytest

from scheduler_sim.requests.request import Request
from scheduler_sim.requests.rotation import RotatingSet


def mk(rid: str, seq: int) -> Request:
    """A request admitted with admission sequence number `seq`."""
    r = Request(rid, seq, 0, 4, 2)
    r.admit_seq = seq
    return r


def ids(it) -> list[str]:
    """Ids of the requests an iterable yields, in order."""
    return [r.rid for r in it]


def three() -> tuple[RotatingSet, Request, Request, Request]:
    """A set holding r1, r3, r5 (admission numbers 1, 3, 5)."""
    s = RotatingSet()
    r1, r3, r5 = mk("r1", 1), mk("r3", 3), mk("r5", 5)
    for r in (r1, r3, r5):
        s.add(r)
    return s, r1, r3, r5


def test_empty_set():
    """A new set has no members, iterates to nothing and cycles to nothing."""
    s = RotatingSet()
    assert len(s) == 0
    assert list(s) == []
    assert list(s.cycle_after(-1)) == []
    assert mk("x", 0) not in s


def test_add_in_order_keeps_admission_order():
    """Adding seq 0, 1, 2 in that order iterates 0, 1, 2."""
    s = RotatingSet()
    for i in range(3):
        s.add(mk(f"r{i}", i))
    assert len(s) == 3
    assert ids(s) == ["r0", "r1", "r2"]


def test_add_out_of_order_sorts_by_admission_sequence():
    """Adding seq 5, 1, 3, 0 iterates 0, 1, 3, 5: the set orders by admit_seq, not by add."""
    s = RotatingSet()
    for rid, seq in (("e", 5), ("b", 1), ("d", 3), ("a", 0)):
        s.add(mk(rid, seq))
    assert ids(s) == ["a", "b", "d", "e"]
    assert len(s) == 4


def test_add_twice_raises_value_error_naming_the_request():
    """Re-adding r3 (in the middle) or r5 (the last) is refused with the request's id."""
    s, r1, r3, r5 = three()
    for r in (r3, r5):
        with pytest.raises(ValueError) as info:
            s.add(r)
        assert repr(r.rid) in str(info.value)
    assert ids(s) == ["r1", "r3", "r5"]


def test_contains_is_by_identity_and_sequence():
    """r3 is a member; another request with the same admit_seq 3 is not; r4 is not."""
    s, r1, r3, r5 = three()
    assert r1 in s and r3 in s and r5 in s
    assert mk("impostor", 3) not in s
    assert mk("r4", 4) not in s
    assert mk("r9", 9) not in s


def test_discard_present_and_absent():
    """Discarding r3 returns True and removes it; discarding it again returns False."""
    s, r1, r3, r5 = three()
    assert s.discard(r3) is True
    assert r3 not in s
    assert ids(s) == ["r1", "r5"]
    assert len(s) == 2
    assert s.discard(r3) is False
    assert s.discard(mk("impostor", 1)) is False
    assert ids(s) == ["r1", "r5"]
    assert s.discard(r1) is True
    assert s.discard(r5) is True
    assert len(s) == 0


def test_discard_then_add_back():
    """Discarding r1 then adding it back restores r1, r3, r5."""
    s, r1, r3, r5 = three()
    s.discard(r1)
    s.add(r1)
    assert ids(s) == ["r1", "r3", "r5"]


@pytest.mark.parametrize("after, expected", [
    (-1, ["r1", "r3", "r5"]),   # nothing served yet: start with the oldest
    (0, ["r1", "r3", "r5"]),
    (1, ["r3", "r5", "r1"]),    # r1 served last: start after it, wrap to r1
    (2, ["r3", "r5", "r1"]),    # a departed request's number still marks the place
    (3, ["r5", "r1", "r3"]),
    (4, ["r5", "r1", "r3"]),
    (5, ["r1", "r3", "r5"]),    # the newest was served last: wrap to the oldest
    (99, ["r1", "r3", "r5"]),
])
def test_cycle_after_wraps_to_the_oldest(after, expected):
    """Members 1, 3, 5: cycle_after(seq) yields each once, first those admitted after seq."""
    s, *_ = three()
    assert ids(s.cycle_after(after)) == expected


def test_cycle_after_single_member():
    """A set of one yields that one member whatever the starting point."""
    s = RotatingSet()
    only = mk("only", 7)
    s.add(only)
    for after in (-1, 6, 7, 8):
        assert ids(s.cycle_after(after)) == ["only"]


def test_cycle_after_is_lazy_and_can_stop_early():
    """Taking one item from cycle_after(3) gives r5 without walking the rest."""
    s, r1, r3, r5 = three()
    walk = s.cycle_after(3)
    assert next(walk) is r5
    assert next(walk) is r1


def test_round_robin_over_successive_dispatches():
    """Serving one member per dispatch, remembering the last, visits r1, r3, r5, r1, r3."""
    s, *_ = three()
    last = -1
    served = []
    for _ in range(5):
        r = next(s.cycle_after(last))
        served.append(r.rid)
        last = r.admit_seq
    assert served == ["r1", "r3", "r5", "r1", "r3"]


def test_iteration_is_a_snapshot():
    """Discarding members while iterating the set still visits all three."""
    s, *_ = three()
    seen = []
    for r in s:
        seen.append(r.rid)
        s.discard(r)
    assert seen == ["r1", "r3", "r5"]
    assert len(s) == 0


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("after", [-1, 1, 2, 3, 5, 9])
def test_take_after_is_the_head_of_cycle_after(after, count):
    """take_after(seq, n) equals the first n items of cycle_after(seq), e.g. after 3 with
    n=2 on members 1, 3, 5 gives r5, r1; n beyond the size gives every member once."""
    s, *_ = three()
    expected = list(itertools.islice(s.cycle_after(after), count))
    assert ids(s.take_after(after, count)) == ids(expected)
    assert len(s.take_after(after, count)) == min(count, 3)


def test_take_after_on_an_empty_set():
    """An empty set yields an empty list whatever the start and count."""
    assert RotatingSet().take_after(-1, 3) == []


def test_the_set_is_a_list_of_its_members_by_identity():
    """r1, r3, r5 held: `len` and truth are the list's (the members), slices are
    plain lists, a walk is over a copy (discarding during it is safe), and two
    sets with the same members are not equal (compared by identity, hashable)."""
    s, r1, r3, r5 = three()
    assert len(s) == 3 and s and not RotatingSet()
    assert type(s[1:]) is list and s[1:] == [r3, r5]
    walked = []
    for r in s:
        walked.append(r.rid)
        s.discard(r)
    assert walked == ["r1", "r3", "r5"] and len(s) == 0 and not s
    t, u = three()[0], three()[0]
    assert t != u and t == t and not t != t and len({t, u}) == 2
    v = RotatingSet()
    assert v != RotatingSet() and not v == []  # (equal as lists, not as sets)


def test_the_list_methods_that_would_change_the_set_are_closed():
    """r1, r3, r5 held: each way the list has to change itself raises TypeError and
    leaves the members and their admission numbers as they were (they change only
    through `add` and `discard`); reading as a list still works."""
    s, r1, r3, r5 = three()
    attempts = [lambda: s.append(r1), lambda: s.insert(0, r1), lambda: s.extend([r1]),
                lambda: s.pop(), lambda: s.remove(r1), lambda: s.clear(), lambda: s.sort(),
                lambda: s.reverse()]

    def assign():
        s[0] = r5

    def delete():
        del s[0]

    def add_in_place():
        t = s
        t += [r1]

    def multiply_in_place():
        t = s
        t *= 2

    for attempt in attempts + [assign, delete, add_in_place, multiply_in_place]:
        with pytest.raises(TypeError, match="only through add and discard"):
            attempt()
    assert (list(s), s._seqs, s.index(r3), s.copy()) == ([r1, r3, r5], [1, 3, 5], 1, [r1, r3, r5])
    assert s.discard(r3) and list(s) == [r1, r5]


def test_a_copy_a_deep_copy_and_a_pickle_are_sets_of_the_same_members():
    """r1, r3, r5 held: `copy.copy` gives a new set of the same requests (its own
    admission numbers), `deepcopy` and a pickle round trip sets of copies of them in
    the same order; each goes on changing through `add` and `discard` alone."""
    import copy
    import pickle
    s, r1, r3, r5 = three()
    shallow = copy.copy(s)
    assert shallow is not s and list(shallow) == [r1, r3, r5] and shallow._seqs == [1, 3, 5]
    assert shallow.discard(r3) and list(s) == [r1, r3, r5] and shallow._seqs == [1, 5]
    for other in (copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert [r.rid for r in other] == ["r1", "r3", "r5"] and other._seqs == [1, 3, 5]
        assert all(a is not b for a, b in zip(other, s))
        with pytest.raises(TypeError, match="only through add and discard"):
            other.append(r1)
