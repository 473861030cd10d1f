"""A per-request latency against arrival time, for every request, in memory that does
not grow with the number of requests: a 2-D histogram (`DensityGrid`).

The report draws each request's TTFT and queue delay at its arrival time. A
scatter of 19,366 points (or of millions) would grow with the run and hide
itself where points overlap, so each request is counted in a cell instead:

- a column per stretch of arrival time: `width` clock steps, a power of two,
  counted from time 0; when a request arrives past the last of `COLUMNS`
  columns, neighbouring columns merge pairwise (the width doubles) until it
  fits, so the grid always spans the run with between `COLUMNS` / 2 and
  `COLUMNS` columns once the run has outgrown the first width;
- a row per band of the latency's logarithm: `bounded_series.bucket_key`'s
  buckets, `FINEST` per doubling at first (each 2^(1/8), about 9%, wide); past
  `MAX_ROWS` distinct rows neighbours merge (half as many per doubling); a
  latency of 0 (a request admitted as it arrived) has a row of its own.

Every request counted is in exactly one cell: the counts sum to the requests
added, before and after any merge (`total`). Which cell a request ends in does
not depend on the order requests are added. `percentile` reads a stretch of
columns: the row holding the request of that rank, drawn at the row's
geometric middle, so within half a row of the exact value.
"""
from __future__ import annotations

import math

from .bounded_series import bucket_key, bucket_range

__all__ = ["DensityGrid", "COLUMNS", "FINEST", "MAX_ROWS"]

COLUMNS = 256    # arrival-time columns at most (4 pixels or more each on a chart)
FINEST = 8       # rows per doubling of the latency at first ...
MAX_ROWS = 160   # ... halved while more than this many rows hold a request


class DensityGrid:
    """Requests counted per (arrival column, latency row); see the module's docstring.

    `cells[column][row]` is a count; `rows` counts the requests per row over
    every column (which rows exist, and the whole run's distribution).
    """

    def __init__(self) -> None:
        self.width = 1
        self.per_doubling = FINEST
        self.cells: dict[int, dict[int, int]] = {}
        self.rows: dict[int, int] = {}
        self.total = 0

    def add(self, t: int, value: float) -> None:
        """Count one request that arrived at step `t` (before 0: the first column)
        with latency `value` (at least 0, in the run's unit)."""
        column = t // self.width if t > 0 else 0
        if column >= COLUMNS:
            while t // self.width >= COLUMNS:
                self._merge_columns()
            column = t // self.width
        row = bucket_key(value, self.per_doubling) if value > 0 else 0
        cell = self.cells.get(column)
        if cell is None:
            cell = self.cells[column] = {}
        cell[row] = cell.get(row, 0) + 1
        self.rows[row] = self.rows.get(row, 0) + 1
        self.total += 1
        if len(self.rows) > MAX_ROWS and self.per_doubling > 1:
            self._merge_rows()

    def _merge_columns(self) -> None:
        """Neighbouring columns become one: the width doubles."""
        merged: dict[int, dict[int, int]] = {}
        for column, cell in self.cells.items():
            into = merged.setdefault(column // 2, {})
            for row, count in cell.items():
                into[row] = into.get(row, 0) + count
        self.cells = merged
        self.width *= 2

    def _merge_rows(self) -> None:
        """Half as many rows per doubling: neighbouring rows become one."""
        def halved(counts: dict[int, int]) -> dict[int, int]:
            out: dict[int, int] = {}
            for row, count in counts.items():
                out[row // 2] = out.get(row // 2, 0) + count
            return out
        while len(self.rows) > MAX_ROWS and self.per_doubling > 1:
            self.per_doubling //= 2
            self.rows = halved(self.rows)
            self.cells = {column: halved(cell) for column, cell in self.cells.items()}

    def row_range(self, row: int) -> tuple[float, float]:
        """The latencies [low, high) of a row (row 0: exactly 0)."""
        return (0.0, 0.0) if row == 0 else bucket_range(row, self.per_doubling)

    def row_middle(self, row: int) -> float:
        """Where a row's values are drawn: its geometric middle (0 for row 0)."""
        low, high = self.row_range(row)
        return math.sqrt(low * high)

    def percentile(self, columns: range, fraction: float) -> float | None:
        """The latency (a row's middle) of the request at `fraction` (0.5: the median,
        0.99: p99, nearest rank) among those that arrived in `columns`; None if none."""
        counts: dict[int, int] = {}
        for column in columns:
            for row, count in self.cells.get(column, {}).items():
                counts[row] = counts.get(row, 0) + count
        n = sum(counts.values())
        if n == 0:
            return None
        rank = max(1, math.ceil(fraction * n))
        seen = 0
        for row in sorted(counts):
            seen += counts[row]
            if seen >= rank:
                return self.row_middle(row)
        return None  # (not reached: the last row holds rank n)

    def column_count(self) -> int:
        """Columns from time 0 to the last that holds a request."""
        return max(self.cells, default=-1) + 1
