"""Round-robin order over running requests (§6, continuous).

A `RotatingSet` keeps requests sorted by admission order. A dispatch serves
candidates starting with the first one admitted after the request served
last time, wrapping to the oldest; so when the row or token budget binds,
every candidate gets its turn. Work per dispatch is proportional to the
candidates actually visited, not to the size of the set: the start is found
by bisection and the walk stops when the caller stops.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Iterator

from .request import Request

__all__ = ["RotatingSet"]


class RotatingSet(list):
    """Requests ordered by `admit_seq`, walked cyclically from a remembered point.

    The members are the list's items, in admission order; they change only
    through `add` and `discard` (which keep `_seqs`, their admission numbers,
    beside them): the list's own ways to change it raise TypeError. Speed: a list subclass that keeps the list's own length, so
    `len(s)` and `if s:` run in C, not through a Python `__len__`: the
    policies ask them at every admission and boundary (125,000 calls on the
    Azure conversation trace under `continuous`; benchmarks/README.md,
    "eleventh steps", helper az7)."""

    __slots__ = ("_seqs",)

    def __init__(self) -> None:
        super().__init__()
        self._seqs: list[int] = []

    def __contains__(self, req: object) -> bool:
        i = bisect_left(self._seqs, req.admit_seq)
        return i < len(self._seqs) and self[i] is req

    def __iter__(self) -> Iterator[Request]:
        return list.__iter__(self[:])  # (a copy: the set may change during the walk)

    def __eq__(self, other: object) -> bool:
        return self is other  # (a set of requests, not a list: compared by identity)

    def __ne__(self, other: object) -> bool:
        return self is not other

    __hash__ = object.__hash__

    # The list's changes, for `add` and `discard` alone; the list's methods that
    # change it are closed to others (they would leave `_seqs` behind). (`pop`
    # to delete: `list.__delitem__` called so is a slot wrapper, which packs its
    # arguments in a tuple: 1.2255e9 -> 1.2241e9 instructions with `pop` on the
    # first 2,000 Azure requests under continuous, 2,010 discards; callgrind.)
    _append, _insert, _pop = list.append, list.insert, list.pop

    def _closed(self, *args, **kwargs):
        raise TypeError("a RotatingSet changes only through add and discard")

    append = insert = extend = pop = remove = clear = sort = reverse = _closed
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _closed

    def __reduce__(self):
        # (copy, deepcopy and pickle rebuild a list subclass through `extend` or
        # `append`, closed here: they rebuild it through `add`.)
        return _rebuilt, (list(self),)

    def add(self, req: Request) -> None:
        """Insert by admission order (appending is the common, O(1) case)."""
        seq = req.admit_seq
        if not self._seqs or seq > self._seqs[-1]:
            self._seqs.append(seq)
            self._append(req)
            return
        i = bisect_left(self._seqs, seq)
        if i < len(self._seqs) and self._seqs[i] == seq:
            raise ValueError(f"request {req.rid!r} is already in the set")
        self._seqs.insert(i, seq)
        self._insert(i, req)

    def discard(self, req: Request) -> bool:
        """Remove `req` if present; return whether it was."""
        i = bisect_left(self._seqs, req.admit_seq)
        if i < len(self._seqs) and self[i] is req:
            del self._seqs[i]
            self._pop(i)
            return True
        return False

    def take_after(self, seq: int, count: int) -> list[Request]:
        """The first `count` members of `cycle_after(seq)`, as a list (by slicing)."""
        if count >= len(self):
            start = bisect_right(self._seqs, seq)
            return self[start:] + self[:start]
        start = bisect_right(self._seqs, seq)
        head = self[start:start + count]
        if len(head) < count:
            head += self[:count - len(head)]
        return head

    def cycle_after(self, seq: int) -> Iterator[Request]:
        """Each member once: first those admitted after `seq`, then from the oldest.

        The set must not change while the walk is in progress.
        """
        reqs = self
        n = len(reqs)
        start = bisect_right(self._seqs, seq)
        for i in range(start, n):
            yield reqs[i]
        for i in range(0, min(start, n)):
            yield reqs[i]


def _rebuilt(members: list[Request]) -> RotatingSet:
    """A `RotatingSet` of `members` (a copy's or a pickle's)."""
    rebuilt = RotatingSet()
    for req in members:
        rebuilt.add(req)
    return rebuilt
