"""One latency's values over a run, kept exactly in memory that does not grow with
the requests when the values repeat (`LatencySample`).

A summary needs every value of a latency (its mean and its nearest-rank
percentiles are exact), but not every value apart: values on the clock are
whole steps (TPOT a quotient of them), and a run of a million requests in
ticks has a few hundred distinct TTFTs. So a sample is a count per distinct
value, for its first `DISTINCT` distinct values (a dict: about 100 bytes
each, at most DISTINCT of them), and an array of the values that came after
the dict was full and were not among its keys (8 bytes each: a cost model's
times in fine clock steps rarely repeat). `stats` gives the mean, the
nearest-rank percentiles and the max of the sorted list of every value, to
the last bit: from the counts alone when the array is empty (an integer sum
is exact whatever its order; a float sum, TPOT's, adds the values in
ascending order, each as many times as it occurred, as `sum(sorted(values))`
does), else from that sorted list itself, made at the end.
"""
from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections import Counter
from itertools import accumulate, chain, filterfalse, repeat
from operator import mul
from typing import Any

from .summary import nearest_rank

__all__ = ["LatencySample", "DISTINCT", "counted_rank", "counted_ranks"]

# Distinct values counted in the dict (a bound on its memory: about 100 bytes each);
# the values past them that are not among them go to the array.
DISTINCT = 4096


class LatencySample:
    """The values of one latency metric over a run (see the module).

    `floats` says the values are floats (TPOT): their sum is made in ascending
    order. Integers too large for 64 bits turn the array into a list."""

    __slots__ = ("counts", "rest", "floats")

    def __init__(self, floats: bool = False) -> None:
        # value -> occurrences, at most DISTINCT keys (a `Counter` for its `update`, which
        # counts a list in C: `add_all`)
        self.counts: Counter = Counter()
        self.rest: Any = array("d" if floats else "q")  # values past the dict, unsorted
        self.floats = floats

    def add(self, value: Any, count: int = 1) -> None:
        """Count `value` (`count` times)."""
        counts = self.counts
        if value in counts:
            counts[value] += count
        elif len(counts) < DISTINCT:
            counts[value] = count
        else:
            try:
                if count == 1:  # (append: 0.3 us a value against 1.5 with extend(repeat), timeit)
                    self.rest.append(value)
                else:
                    self.rest.extend(repeat(value, count))
            except OverflowError:  # an integer past 64 bits: a list from now on
                self.rest = list(self.rest)
                self.rest.extend(repeat(value, count))

    def add_all(self, values: list) -> None:
        """Count each of `values` once, in order: the counts and the array come out as
        `add` of each in turn makes them.

        Speed (issue 26): while the dict has room for every value given (a run in
        ticks, nearly always), they are counted by `Counter.update`'s loop in C; they
        cannot pass the bound in between. A request's five latencies appended to
        lists and counted so took 1.3 us, five Python calls counting each 3.0
        (timeit; benchmarks/README.md, "fourteenth steps", helper mil10). Else the
        values go through `add` only until the dict is full; from then on no key is
        added, so those already keys are counted in C and the others extend the
        array in order, as `add` appends each (`_add_full`)."""
        counts = self.counts
        if len(counts) + len(values) <= DISTINCT:
            counts.update(values)
            return
        add = self.add
        for at, value in enumerate(values):
            if len(counts) >= DISTINCT:
                self._add_full(values[at:] if at else values)
                return
            add(value)

    def _add_full(self, values: list) -> None:
        """`add_all` once the dict holds DISTINCT keys: a value among them is counted,
        any other goes to the array, in order (an integer past 64 bits turns the
        array into a list, as `add` does).

        Speed (issue 26): with a cost model four of the Azure trace's five samples
        pass the bound, where `add` cost a Python call a value: its `continuous`
        replay 8.1411e9 -> 8.0808e9 instructions (callgrind; benchmarks/README.md,
        "fifteenth steps", helper mil11)."""
        counts = self.counts
        known = counts.__contains__
        counts.update(filter(known, values))
        others = list(filterfalse(known, values))
        rest = self.rest
        held = len(rest)
        try:
            rest.extend(others)
        except OverflowError:  # (what went in before the integer past 64 bits stays)
            del rest[held:]
            self.rest = list(rest)
            self.rest.extend(others)

    def update(self, other: "LatencySample") -> None:
        """Add every value of `other` (a fleet pools its replicas' samples)."""
        for value, count in other.counts.items():
            self.add(value, count)
        for value in other.rest:
            self.add(value)

    def __len__(self) -> int:
        return sum(self.counts.values()) + len(self.rest)

    def stats(self, percentiles: tuple[int, ...]) -> tuple[Any, list[Any], Any]:
        """(mean, the nearest-rank value at each ascending percentile, max) in clock
        steps, as computed from the sorted list of every value; Nones when empty."""
        if self.rest:  # values past the dict: every value in one sorted list, as it was
            counts = self.counts  # (each value repeated by its count, in C: `map`)
            values = sorted(chain(self.rest, chain.from_iterable(
                map(repeat, counts.keys(), counts.values()))))
            return (sum(values) / len(values), [nearest_rank(values, p) for p in percentiles],
                    values[-1])
        pairs = sorted(self.counts.items())
        values, counts = zip(*pairs) if pairs else ((), ())
        total = sum(counts)
        if not total:
            return None, [None] * len(percentiles), None
        if self.floats:
            # The float sum in ascending order, value by value (exact as sum(sorted(...))).
            summed = sum(chain.from_iterable(map(repeat, values, counts)))
        else:
            summed = sum(map(mul, values, counts))  # (integers: exact in any order)
        return summed / total, counted_ranks(values, counts, percentiles), values[-1]


def counted_rank(pairs: list[tuple[Any, int]], total: int, p: float) -> Any:
    """`nearest_rank` over a sample given as ascending (value, count) pairs, `total`
    values in all (None if empty)."""
    if not total:
        return None
    rank = max(1, math.ceil(p / 100 * total))
    seen = 0
    for value, count in pairs:
        seen += count
        if seen >= rank:
            return value
    return pairs[-1][0]


def counted_ranks(values: tuple, counts: tuple, percentiles: tuple) -> list:
    """`counted_rank` at each of `percentiles` of a sample given as its ascending
    distinct `values` and their `counts`: the counts summed running once, in C,
    and each percentile's rank found among those sums by bisection (the first
    value whose count so far reaches it, as `counted_rank`'s walk finds it).
    Speed: a summary walked its samples' thousands of distinct values once a
    percentile, in Python: 0.993x the instructions of the Azure conversation
    trace's first 2,000 requests (benchmarks/README.md, "twenty-sixth steps",
    helper az28)."""
    reached = list(accumulate(counts))
    total = reached[-1] if reached else 0
    if not total:
        return [None] * len(percentiles)
    last = len(values) - 1
    return [values[min(bisect_left(reached, max(1, math.ceil(p / 100 * total))), last)]
            for p in percentiles]
