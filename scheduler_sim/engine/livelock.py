"""The livelock watch: a schedule that goes in circles is stopped, not run forever.

A policy may preempt and recompute the same rows again and again with no
request ever getting further (two requests that evict each other in a pool
too small for both). Each dispatch that writes no useful row (only rows
recomputed after a preemption, or padding) adds its tokens to `idle`; any
useful row, and anything from outside (an arrival, a cancellation, a forced
preemption), starts the count again. Once `idle` exceeds one full pool of
rows, the limit is set: that pool plus every row the live requests have
ever written (their high water). Past it the schedule has replayed more
than everything there was to replay, so it is `tripped`, and the engine
ends the live requests as a stall (E6b).
"""
from __future__ import annotations

from typing import Iterable

__all__ = ["LivelockWatch"]


class LivelockWatch:
    """Rows replayed since the last useful one, and whether that is a livelock."""

    __slots__ = ("idle", "limit", "pool", "tripped")

    def __init__(self, pool_rows: int) -> None:
        self.idle = 0  # rows replayed since a dispatch last wrote a useful row
        self.limit = 0  # set when `idle` first exceeds `pool` after a reset
        self.pool = pool_rows
        self.tripped = False

    def reset(self) -> None:
        """Something useful or outside happened: the count starts again (`idle = 0`
        inline on the dispatch path, the same)."""
        self.idle = 0

    def replayed(self, rows: int, live: Iterable) -> None:
        """A dispatch wrote `rows` rows, none of them useful; `live` are the
        requests (finished ones are skipped), read once per stretch."""
        before = self.idle
        idle = self.idle = before + rows
        pool = self.pool
        if idle <= pool:
            return
        if before <= pool:  # the first time past the pool since the count started
            self.limit = pool + sum(r.high_water for r in live if not r.status.is_finished)
        if idle > self.limit:
            self.tripped = True
