"""Spilling: a long first-come-first-served queue's tail kept as numbers, not requests.

With nothing that needs every request kept (no `--requests`, no action naming
a request, no waiting timeout, no closed-loop clients, one engine), a replay
past `cap` waiting requests (SPILL_AFTER, or twice `max_rows`) stops building
new arrivals: each joins the policy's FCFS queue as a count
(`FcfsQueue.spill`), and the spill keeps only its arrival number, in runs of
consecutive numbers. When the queue's head nears a spilled request, the trace
is read again from the start (`arrivals`) up to that number and the request
is built then, with the same fields and the same place in the queue. Memory
stays bounded by what is live; the results and records are the same as
keeping every request (tests/test_streaming.py).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from ..records.workload import RequestSpec
from ..requests.queues import FcfsQueue
from ..requests.request import Request

__all__ = ["Spill", "SPILL_AFTER"]

# Held waiting requests past which arrivals are spilled (with twice max_rows).
SPILL_AFTER = 4096


class Spill:
    """The spilled tail of one engine's FCFS queue (see the module)."""

    __slots__ = ("queue", "cap", "_spans", "_arrivals", "_reader", "_read")

    def __init__(self, queue: FcfsQueue, cap: int,
                 arrivals: Callable[[], Iterator[RequestSpec]]) -> None:
        self.queue = queue
        self.cap = cap
        self._spans: deque[list[int]] = deque()  # [first, last] arrival numbers spilled
        self._arrivals = arrivals  # the trace's arrivals, read again from the start
        self._reader: Iterator[RequestSpec] | None = None
        self._read = 0  # arrivals the reader has passed

    def wanted(self) -> bool:
        """Whether the next arrival is spilled: some already are (order is kept), or
        the queue holds `cap` requests."""
        queue = self.queue
        # (`held`, not `len(queue)`: a Python `__len__` through the type's slot
        # costs about three times a method call; once an arrival)
        return queue.spilled > 0 or queue.held() >= self.cap

    def add(self, number: int, make: Callable[[], Request]) -> None:
        """Spill arrival number `number` (0-based, in trace order); `make` builds the
        next spilled request when the queue asks for it."""
        spans = self._spans
        if spans and spans[-1][1] == number - 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
        self.queue.spill(make)

    def next_spec(self) -> RequestSpec:
        """The trace record of the first spilled request not yet built."""
        if self._reader is None:
            self._reader = self._arrivals()
        spans = self._spans
        while True:
            spec = next(self._reader)
            number = self._read
            self._read += 1
            first, last = spans[0]
            if number < first:
                continue
            if number == last:
                spans.popleft()
            else:
                spans[0][0] = number + 1
            return spec

    def build_all(self) -> None:
        """Build every spilled request (a stall ends them all in error)."""
        if self.queue.spilled:
            list(self.queue)
