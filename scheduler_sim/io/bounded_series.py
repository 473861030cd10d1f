"""Series that hold a run's history in memory that does not grow with the run:
`TimeSeries` (rows of counts over time, thinned past `ROW_LIMIT` rows to each
time bucket's first minimum and maximum), `Marks` (instants, counted per bucket
past `ROW_LIMIT`) and `Distribution` (a sample's values, exact up to
`EXACT_VALUES` distinct ones, then a histogram of at most `MAX_BUCKETS` buckets
less than 0.1% wide) and `BucketMeans` (per time bucket, the count of rows and
the sum of some columns, for a mean line inside a min/max band). The
histogram's buckets (`bucket_key`, `bucket_range`) split each doubling of the
values evenly. `report_series.RunSeries` fills them from a run's events.

Times are clock steps, held in arrays of 64-bit integers, or in a list once a
step does not fit one (`appended`).
"""
from __future__ import annotations

import math
from array import array
from bisect import bisect_left

__all__ = ["TimeSeries", "Marks", "Distribution", "BucketMeans", "appended", "bucket_key",
           "bucket_range", "ROW_LIMIT", "TIME_BUCKETS", "EXACT_VALUES", "MAX_BUCKETS", "FINEST"]

ROW_LIMIT = 1 << 16   # rows of a series kept exactly; past them it is thinned ...
TIME_BUCKETS = 2048   # ... to at most this many time buckets (a chart is 740 pixels wide)

EXACT_VALUES = 4096   # distinct values a distribution keeps exactly ...
MAX_BUCKETS = 4096    # ... before it becomes a histogram of at most this many buckets,
FINEST = 1024         # at first this many per doubling (each less than 0.1% wide)


def appended(steps: array | list[int], step: int) -> array | list[int]:
    """`steps` with `step` appended: an array of 64-bit integers, or a list once a step
    does not fit one (a cost model's microsecond clock over a trace that reaches 1e15 s
    counts 1e21 steps)."""
    try:
        steps.append(step)
    except OverflowError:
        steps = [*steps, step]
    return steps


def _like(steps: array | list[int], values: list[int]) -> array | list[int]:
    """`values` held as `steps` holds its own (an array of 64-bit integers, or a list)."""
    return array("q", values) if isinstance(steps, array) else values


def _bucket_width(t: array, buckets: int, width: int) -> int:
    """The smallest power of two, at least `width`, that puts the times of `t`
    (from 0) into at most `buckets` buckets of that many steps."""
    first, last = min(t), max(t)
    while last // width - first // width + 1 > buckets:
        width *= 2
    return width


def _runs(t: array, width: int, start: int = 0) -> list[tuple[int, int]]:
    """The [start, end) index ranges of `t` (from index `start`) that fall in one bucket
    of `width` steps each (times ascend; if they do not, each range still moves on)."""
    out = []
    n = len(t)
    while start < n:
        bucket = t[start] // width
        end = bisect_left(t, (bucket + 1) * width, start)
        if end <= start:
            end = start + 1
        out.append((start, end))
        start = end
    return out


class TimeSeries:
    """Rows of counts over time: a time (`t`, clock steps, ascending) and a column
    per name (`columns`), appended by the caller, who calls `compact` once there
    are more than `ROW_LIMIT` rows, and `fold` after the last row.

    The columns named in `means` are also summed per time bucket into `means`
    (a `BucketMeans`), every row once: the rows appended since the last fold
    are counted in bulk when the series compacts (before it thins them) or
    folds, so appending a row stays a few array appends.

    Until then every row is kept (the charts draw what they drew before). A
    compaction splits time into buckets of `width` steps (a power of two, the
    smallest that leaves at most `TIME_BUCKETS` buckets, never shrinking) and
    keeps, in each, the rows that hold a column's first minimum or first
    maximum, and the last row of all: at most 2 x columns x TIME_BUCKETS + 1
    rows, so the peaks and troughs a chart draws per pixel column are kept.
    The arrays are rewritten in place (a reference to them stays valid).
    """

    def __init__(self, names: tuple[str, ...], means: tuple[str, ...] = ()) -> None:
        self.t = array("q")
        self.columns = {name: array("q") for name in names}
        self.width = 1
        self.compactions = 0
        self.means = BucketMeans(len(means))
        self._summed = [self.columns[name] for name in means]
        self.folded = 0  # rows counted in `means` so far

    def fold(self) -> None:
        """Count the rows appended since the last fold into `means`."""
        t, start = self.t, self.folded
        if start >= len(t) or not self._summed:
            self.folded = len(t)
            return
        means = self.means
        means.reach(t[-1])
        for first, end in _runs(t, means.width, start):
            means.add_rows(t[first], end - first,
                           [sum(column[first:end]) for column in self._summed])
        self.folded = len(t)

    def __len__(self) -> int:
        return len(self.t)

    def compact(self) -> None:
        """Thin the rows as the class docstring says."""
        self.fold()
        t = self.t
        n = len(t)
        if n == 0:
            return
        self.width = width = _bucket_width(t, TIME_BUCKETS, self.width)
        keep = {n - 1}
        columns = list(self.columns.values())
        for start, end in _runs(t, width):
            for column in columns:
                part = column[start:end]
                keep.add(start + part.index(min(part)))
                keep.add(start + part.index(max(part)))
        rows = sorted(keep)
        t[:] = _like(t, [t[i] for i in rows])
        for column in columns:
            column[:] = array("q", [column[i] for i in rows])
        self.folded = len(t)  # (every row kept was counted)
        self.compactions += 1


class Marks:
    """Times of instants (preemptions, retractions), each with a count: one entry per
    instant (count 1) up to `ROW_LIMIT` entries; then the entries of each time
    bucket (as `TimeSeries` chooses them) become one, at the bucket's first time,
    with their counts summed. `total` counts every instant."""

    def __init__(self) -> None:
        self.times = array("q")
        self.counts = array("q")
        self.total = 0
        self.width = 1

    def __len__(self) -> int:
        return self.total

    def add(self, tick: int) -> None:
        """One instant at `tick` (past ROW_LIMIT entries the marks compact)."""
        self.times = appended(self.times, tick)
        self.counts.append(1)
        self.total += 1
        if len(self.times) > ROW_LIMIT:
            self.compact()

    def compact(self) -> None:
        """Merge the entries of each time bucket into one, their counts summed."""
        times, counts = self.times, self.counts
        self.width = width = _bucket_width(times, TIME_BUCKETS, self.width)
        merged_t, merged_c = _like(times, []), array("q")
        for start, end in _runs(times, width):
            merged_t.append(times[start])
            merged_c.append(sum(counts[start:end]))
        times[:] = merged_t
        counts[:] = merged_c


def bucket_key(value: float, per: int) -> int:
    """The histogram bucket of `value` with `per` buckets per doubling (a power of two):
    buckets split each [2^e, 2^(e+1)) evenly, numbered in the order of their values
    (0 holds only 0; negative values mirror positive ones). Computed exactly
    (`frexp` and powers of two), so the same on every machine; `_bucket(v, per) //
    2` is `_bucket(v, per // 2)` for v > 0."""
    if value == 0:
        return 0
    size = -value if value < 0 else value
    if size == math.inf:
        key = 2100 * per
    else:
        mantissa, exponent = math.frexp(size)  # mantissa in [0.5, 1)
        key = (exponent + 1100) * per + int((mantissa - 0.5) * 2 * per)
    return key if value > 0 else -key


_bucket = bucket_key  # (the name the tests know)


def bucket_range(key: int, per: int) -> tuple[float, float]:
    """The values [low, high) of a positive bucket `key` of `bucket_key(_, per)`."""
    exponent, step = divmod(key, per)
    exponent -= 1100
    return (math.ldexp(0.5 + step / (2 * per), exponent),
            math.ldexp(0.5 + (step + 1) / (2 * per), exponent))


class BucketMeans:
    """Per time bucket (`width` steps, a power of two, at most `TIME_BUCKETS` buckets
    from time 0, neighbours merging pairwise when a time passes the last), how many
    rows fell in it (`counts`) and the sum of each of `columns` values over them
    (`sums`): the mean of any stretch of buckets, in memory bounded however long
    the run. Times below 0 count in the first bucket."""

    def __init__(self, columns: int) -> None:
        self.width = 1
        self.counts: list[int] = []
        self.sums: list[list[int]] = [[] for _ in range(columns)]

    def add(self, t: int, values: tuple[int, ...] | list[int]) -> None:
        """One row at time `t` with one value per column."""
        self.add_rows(t, 1, values)

    def add_rows(self, t: int, rows: int, sums: tuple[int, ...] | list[int]) -> None:
        """`rows` rows at time `t` (or within its bucket), their values summing to
        `sums`, one per column."""
        self.reach(t)
        b = t // self.width if t > 0 else 0
        counts = self.counts
        if b >= len(counts):
            grow = [0] * (b + 1 - len(counts))
            counts.extend(grow)
            for column in self.sums:
                column.extend(grow)
        counts[b] += rows
        for column, value in zip(self.sums, sums):
            column[b] += value

    def reach(self, t: int) -> None:
        """Double the bucket width (merging neighbours) until `t` falls in a bucket."""
        while t // self.width >= TIME_BUCKETS:
            self.width *= 2
            self.counts = _pairs(self.counts)
            self.sums = [_pairs(column) for column in self.sums]

    def means(self, column: int) -> list[tuple[int, int, float]]:
        """(start step, rows, mean of `column`) of every bucket that has rows."""
        sums, width = self.sums[column], self.width
        return [(b * width, n, sums[b] / n) for b, n in enumerate(self.counts) if n]


def _pairs(values: list[int]) -> list[int]:
    """Neighbours summed pairwise: [a, b, c] -> [a + b, c]."""
    return [sum(values[i:i + 2]) for i in range(0, len(values), 2)]


class Distribution:
    """The values of a sample (latencies), for its CDF.

    `add` counts each distinct value exactly (`exact`, value -> count) until
    there are more than `EXACT_VALUES` of them; then they move into a histogram:
    `per_doubling` buckets split each doubling of the values evenly (at first
    `FINEST`, so a bucket is less than 1 / FINEST of its values wide), each
    bucket keeping its count and its largest value; past `MAX_BUCKETS` buckets
    the histogram merges neighbours (half as many per doubling) until it fits.
    Which buckets a sample ends in does not depend on the order of its values.
    `exact` stays the intake: new values are counted there and moved when it
    fills, which keeps the common case one dictionary update (the ITL is
    counted into it directly).
    """

    def __init__(self) -> None:
        self.exact: dict[float, int] = {}
        self.counts: dict[int, int] | None = None  # bucket -> how many values
        self.tops: dict[int, float] | None = None  # bucket -> its largest value
        self.per_doubling = FINEST

    def add(self, value: float, count: int = 1) -> None:
        """Count `value` `count` times (past EXACT_VALUES distinct values, a histogram)."""
        exact = self.exact
        exact[value] = exact.get(value, 0) + count
        if len(exact) > EXACT_VALUES:
            self.spill()

    @property
    def is_exact(self) -> bool:
        """Whether every value is kept exactly (no histogram yet)."""
        return self.counts is None

    def spill(self) -> None:
        """Move the exact counts into the histogram (emptying `exact` in place)."""
        if self.counts is None:
            self.counts, self.tops = {}, {}
        counts, tops, per = self.counts, self.tops, self.per_doubling
        for value, count in self.exact.items():
            key = _bucket(value, per)
            counts[key] = counts.get(key, 0) + count
            top = tops.get(key)
            if top is None or value > top:
                tops[key] = value
        self.exact.clear()
        while len(self.counts) > MAX_BUCKETS and self.per_doubling > 1:
            self._coarsen()

    def _coarsen(self) -> None:
        """Half as many buckets per doubling: each pair of neighbours becomes one."""
        counts, tops = {}, {}
        for key, count in self.counts.items():
            merged = key // 2 if key > 0 else -((-key) // 2)
            counts[merged] = counts.get(merged, 0) + count
            top = tops.get(merged)
            value = self.tops[key]
            if top is None or value > top:
                tops[merged] = value
        self.counts, self.tops = counts, tops
        self.per_doubling //= 2

    @property
    def total(self) -> int:
        """How many values were added."""
        return sum(self.exact.values()) + (sum(self.counts.values()) if self.counts else 0)

    @property
    def buckets(self) -> int:
        """The histogram's buckets (0 while exact)."""
        return len(self.counts) if self.counts is not None else 0

    def pairs(self) -> list[tuple[float, int]]:
        """Sorted (value, count) pairs: the exact values, or per histogram bucket its
        largest value and its count (so each point of the CDF drawn through them
        is a point of the exact CDF)."""
        if self.counts is None:
            return sorted(self.exact.items())
        self.spill()
        tops, counts = self.tops, self.counts
        return [(tops[key], counts[key]) for key in sorted(counts)]
