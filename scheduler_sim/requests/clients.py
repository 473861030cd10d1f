"""Closed-loop clients: at most `max_concurrency` requests in flight (option `max_concurrency`).

This is how `vllm bench serve --max-concurrency C` drives a server: each
request waits for one of C client slots before it is sent, in the order of
the trace; it is sent at its trace time or the moment a slot frees,
whichever is later, and holds the slot until it ends (finished, cancelled,
rejected, timed out). The server sees a request only once it is sent, so
its latencies (queue delay, TTFT, end-to-end) count from the send time, and
the time it spent waiting for a slot is its `client_wait`.

The engine owns the clock and calls `arrive` at a request's trace time,
`ended` when a sent request ends, and `ready` to take the requests that may
be sent now.
"""
from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["ClientSlots"]


class ClientSlots:
    """C client slots and the requests waiting for one, in trace order."""

    __slots__ = ("limit", "in_flight", "waiting")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self.waiting: deque[Any] = deque()

    def arrive(self, req: Any) -> None:
        """`req` reaches its trace time: it queues for a slot behind earlier ones."""
        self.waiting.append(req)

    def ready(self) -> list[Any]:
        """Take the waiting requests that get a slot now, oldest first."""
        out = []
        waiting = self.waiting
        while waiting and self.in_flight < self.limit:
            out.append(waiting.popleft())
            self.in_flight += 1
        return out

    def ended(self) -> None:
        """A sent request ended: its slot is free."""
        self.in_flight -= 1

    def withdraw(self, req: Any) -> None:
        """The client gave up on `req` before it was sent (a cancellation)."""
        self.waiting.remove(req)
