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

    The set is the list of its members, oldest first, with their `admit_seq`s
    beside them (`_seqs`); change it only through `add` and `discard`. Speed:
    a list so that `len` and truth are the list's own, in C: the policy asks for
    them about six times a request (`running_count`, `repeats_decodes`, the
    decodes' order), each a Python `__len__` before, about 1% of the CPU of
    generated traces (benchmarks/README.md, "eleventh steps ... mil7")."""

    __slots__ = ("_seqs",)

    def __init__(self) -> None:
        super().__init__()
        self._seqs: list[int] = []

    def __contains__(self, req: Request) -> bool:
        i = bisect_left(self._seqs, req.admit_seq)
        return i < len(self._seqs) and self[i] is req

    def __iter__(self) -> Iterator[Request]:
        return iter(self[:])  # (a copy: the walk survives changes)

    def add(self, req: Request) -> None:
        """Insert by admission order (appending is the common, O(1) case)."""
        seq = req.admit_seq
        if not self._seqs or seq > self._seqs[-1]:
            self._seqs.append(seq)
            self.append(req)
            return
        i = bisect_left(self._seqs, seq)
        if i < len(self._seqs) and self._seqs[i] == seq:
            raise ValueError(f"request {req.rid!r} is already in the set")
        self._seqs.insert(i, seq)
        self.insert(i, req)

    def discard(self, req: Request) -> bool:
        """Remove `req` if present; return whether it was."""
        i = bisect_left(self._seqs, req.admit_seq)
        if i < len(self._seqs) and self[i] is req:
            del self._seqs[i]
            del self[i]
            return True
        return False

    def take_after(self, seq: int, count: int) -> list[Request]:
        """The first `count` members of `cycle_after(seq)`, as a list (by slicing)."""
        reqs = self
        if count >= len(reqs):
            start = bisect_right(self._seqs, seq)
            return reqs[start:] + reqs[:start]
        start = bisect_right(self._seqs, seq)
        head = reqs[start:start + count]
        if len(head) < count:
            head += reqs[:count - len(head)]
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
