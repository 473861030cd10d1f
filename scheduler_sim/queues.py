"""Waiting queues: the order in which waiting requests are offered for admission.

One small interface (`add`, `prepend`, `peek`, `pop`, `remove`, `__len__`,
`__iter__`, `__contains__`) with one implementation per order, built by
`make_queue`, which rejects unknown names. Every order is total and
deterministic: ties fall to the request's position in the trace, never to
object identity or id strings.

- `fcfs`: arrival order (registration order, SPEC T2); `prepend` puts a
  request at the head (a resumed victim goes first); `insert_by_arrival`
  puts it back where its original arrival places it.
- `priority`: lowest (priority, arrival, trace position) first; `prepend` is a
  plain insert, so a victim re-enters by its original key.
"""
from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Iterator

from .request import Request

__all__ = ["RequestQueue", "FcfsQueue", "PriorityQueue", "QUEUE_ORDERS", "make_queue"]


class RequestQueue:
    """The interface every waiting-queue order implements."""

    name = ""

    def add(self, req: Request) -> None:
        """Insert a newly waiting request in this order."""
        raise NotImplementedError

    def prepend(self, req: Request) -> None:
        """Insert a request that should go first if the order allows it."""
        raise NotImplementedError

    def insert_by_arrival(self, req: Request) -> None:
        """Insert a request where its original (arrival, trace position) places it."""
        raise NotImplementedError

    def peek(self) -> Request:
        """The request that would be popped next (the queue must not be empty)."""
        raise NotImplementedError

    def pop(self) -> Request:
        """Remove and return the head."""
        raise NotImplementedError

    def remove(self, req: Request) -> None:
        """Remove a request from anywhere in the queue."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Request]:
        raise NotImplementedError

    def __contains__(self, req: object) -> bool:
        raise NotImplementedError


class FcfsQueue(RequestQueue):
    """First come, first served; an ordered dict gives O(1) removal from the middle."""

    name = "fcfs"

    def __init__(self) -> None:
        self._items: OrderedDict[Request, None] = OrderedDict()

    def add(self, req: Request) -> None:
        self._items[req] = None

    def prepend(self, req: Request) -> None:
        self._items[req] = None
        self._items.move_to_end(req, last=False)

    def insert_by_arrival(self, req: Request) -> None:
        # O(queue length); used only when a preempted request resumes by arrival.
        key = (req.arrival, req.index)
        items = list(self._items)
        pos = next((i for i, r in enumerate(items) if (r.arrival, r.index) > key), len(items))
        items.insert(pos, req)
        self._items = OrderedDict.fromkeys(items)

    def peek(self) -> Request:
        return next(iter(self._items))

    def pop(self) -> Request:
        return self._items.popitem(last=False)[0]

    def remove(self, req: Request) -> None:
        del self._items[req]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        return iter(list(self._items))

    def __contains__(self, req: object) -> bool:
        return req in self._items


class PriorityQueue(RequestQueue):
    """Lowest (priority, arrival, trace position) first; removal is lazy."""

    name = "priority"

    def __init__(self) -> None:
        # Entries are (priority, arrival, index, serial, request): the serial,
        # owned by this queue, keeps two entries of one request comparable.
        self._heap: list[tuple[int, int, int, int, Request]] = []
        self._members: set[Request] = set()
        self._serial = 0

    @staticmethod
    def key(req: Request) -> tuple[int, int, int]:
        """The total order: priority, then arrival, then position in the trace."""
        return (req.priority, req.arrival, req.index)

    def add(self, req: Request) -> None:
        self._serial += 1
        heapq.heappush(self._heap, (*self.key(req), self._serial, req))
        self._members.add(req)

    prepend = add
    insert_by_arrival = add

    def _settle(self) -> None:
        heap = self._heap
        while heap and heap[0][4] not in self._members:
            heapq.heappop(heap)

    def peek(self) -> Request:
        self._settle()
        return self._heap[0][4]

    def pop(self) -> Request:
        self._settle()
        req = heapq.heappop(self._heap)[4]
        self._members.discard(req)
        return req

    def remove(self, req: Request) -> None:
        self._members.remove(req)
        # A request can be removed and added again before its stale entry
        # surfaces; rebuilding then keeps one entry per member.
        if len(self._heap) > 2 * len(self._members) + 16:
            self._heap = [e for e in self._heap if e[4] in self._members]
            heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Request]:
        live = sorted(e for e in self._heap if e[4] in self._members)
        seen: set[Request] = set()
        out = []
        for entry in live:
            if entry[4] not in seen:
                seen.add(entry[4])
                out.append(entry[4])
        return iter(out)

    def __contains__(self, req: object) -> bool:
        return req in self._members


QUEUE_ORDERS: dict[str, type[RequestQueue]] = {
    FcfsQueue.name: FcfsQueue,
    PriorityQueue.name: PriorityQueue,
}


def make_queue(order: str) -> RequestQueue:
    """Build the queue for an order name; raise ValueError naming the known orders."""
    try:
        return QUEUE_ORDERS[order]()
    except KeyError:
        known = ", ".join(sorted(QUEUE_ORDERS))
        raise ValueError(f"unknown order {order!r} (known: {known})") from None
