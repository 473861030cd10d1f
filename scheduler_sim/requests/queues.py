"""Waiting queues: the order in which waiting requests are offered for admission.

One small interface (`add`, `prepend`, `peek`, `pop`, `remove`, `__len__`,
`__iter__`, `__contains__`) with one implementation per order, built by
`make_queue`, which rejects unknown names. Every order is total and
deterministic: ties fall to the request's position in the trace, never to
object identity or id strings.

- `fcfs`: arrival order (registration order, T2); `prepend` puts a
  request at the head (a resumed victim goes first); `insert_by_arrival`
  puts it back where its original arrival places it.
- `priority`: lowest (priority, arrival, trace position) first; `prepend` is a
  plain insert, so a victim re-enters by its original key.
- `EntryPriorityQueue` (`sglang` under `priority`): lowest (sign x priority,
  queue entry) first, the entry stamped anew each time a request joins.
- `sjf`: smallest prompt + max_tokens first; `edf`: earliest deadline first
  (none last); `lof`: largest max_tokens first; `random`: a seeded shuffle.
- `lpm`: longest cached prefix first, the list sorted in place (stably) at
  every scheduling pass (`refresh`), left as it is while more than
  `lpm_threshold` requests wait.

On a decode replica of a disaggregated fleet, `HoldingFirst` wraps the
order: requests that wait while holding blocks (their prompt's KV copied in)
go before all others, in the order they became ready, as vLLM drains its
queue of block-holding requests first.
"""
from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from itertools import islice
from typing import Callable, Iterator

from .request import Request

__all__ = ["RequestQueue", "FcfsQueue", "KeyedQueue", "PriorityQueue", "EntryPriorityQueue",
           "SjfQueue", "EdfQueue", "LofQueue", "RandomQueue", "LpmQueue", "HoldingFirst", "QUEUE_ORDERS", "make_queue"]


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

    def head(self, count: int) -> list[Request]:
        """The first `count` waiting requests, in order (what iterating gives first)."""
        return list(islice(self, count))

    def refresh(self) -> bool:
        """Re-sort before a scheduling pass (only orders that depend on the cache do);
        return whether every waiting request was looked up in the cache to do so."""
        return False


class FcfsQueue(RequestQueue):
    """First come, first served; an ordered dict gives O(1) removal from the middle.

    The tail may be spilled: `spill(make)` counts one more request behind the
    others without holding it (the engine does this for a long queue, which
    would otherwise cost an object per waiting request), and `make()` builds
    the next spilled request, in order, when the queue's head section runs
    out. Lengths and order are as if every request were held.
    """

    name = "fcfs"

    def __init__(self) -> None:
        self._items: OrderedDict[Request, None] = OrderedDict()
        self.spilled = 0
        self._make: Callable[[], Request] | None = None

    def spill(self, make: Callable[[], Request]) -> None:
        """One more request at the tail, built by `make()` only when it is needed."""
        self._make = make
        self.spilled += 1

    def _unspill(self) -> Request:
        req = self._make()
        self.spilled -= 1
        self._items[req] = None
        return req

    def add(self, req: Request) -> None:
        while self.spilled:  # behind the spilled ones: hold them first
            self._unspill()
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
        if not self._items and self.spilled:
            self._unspill()
        return next(iter(self._items))

    def pop(self) -> Request:
        if not self._items and self.spilled:
            self._unspill()
        return self._items.popitem(last=False)[0]

    def remove(self, req: Request) -> None:
        del self._items[req]

    def __len__(self) -> int:
        return len(self._items) + self.spilled

    def held(self) -> int:
        """The requests held as objects: `len` less the spilled tail."""
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        if not self.spilled:
            return iter(list(self._items))
        return self._iter_all()

    def _iter_all(self) -> Iterator[Request]:
        yield from list(self._items)
        while self.spilled:
            yield self._unspill()

    def head(self, count: int) -> list[Request]:
        # Without a copy of the whole queue, as iterating makes (SGLang's refresh
        # reads the first 128 of thousands waiting on the Mooncake trace, every
        # 32nd pass: 2.6% of a replay's CPU, sampled); spilled requests are built
        # as iterating would build them, only as far as `count` reaches.
        first = list(islice(self._items, count))
        while len(first) < count and self.spilled:
            first.append(self._unspill())
        return first

    def __contains__(self, req: object) -> bool:
        return req in self._items


class KeyedQueue(RequestQueue):
    """A heap on a per-request key; `prepend` is a plain insert. Removal is lazy."""

    name = ""

    def __init__(self) -> None:
        # Entries are (key, serial, request). The serial, owned by this queue,
        # keeps entries comparable and tells a live entry from a stale one.
        self._heap: list[tuple[tuple, int, Request]] = []
        self._members: dict[Request, int] = {}
        self._serial = 0

    def key(self, req: Request) -> tuple:
        """The sort key; every key ends with the trace position, so the order is total."""
        raise NotImplementedError

    def add(self, req: Request) -> None:
        self._serial += 1
        self._members[req] = self._serial
        heapq.heappush(self._heap, (self.key(req), self._serial, req))

    def prepend(self, req: Request) -> None:
        self.add(req)

    def insert_by_arrival(self, req: Request) -> None:
        self.add(req)

    def _settle(self) -> None:
        heap = self._heap
        members = self._members
        while heap and members.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)

    def peek(self) -> Request:
        self._settle()
        return self._heap[0][2]

    def pop(self) -> Request:
        self._settle()
        req = heapq.heappop(self._heap)[2]
        del self._members[req]
        return req

    def remove(self, req: Request) -> None:
        del self._members[req]
        if len(self._heap) > 2 * len(self._members) + 16:
            members = self._members
            self._heap = [e for e in self._heap if members.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Request]:
        members = self._members
        return iter([e[2] for e in sorted(self._heap) if members.get(e[2]) == e[1]])

    def __contains__(self, req: object) -> bool:
        return req in self._members


class PriorityQueue(KeyedQueue):
    """Lowest (priority, arrival, trace position) first."""

    name = "priority"

    def key(self, req: Request) -> tuple:
        return (req.priority, req.arrival, req.index)


class EntryPriorityQueue(KeyedQueue):
    """SGLang's priority order: lowest (sign x priority, queue entry) first. Every
    entry (`add`, `prepend`, `insert_by_arrival`: a resumed victim too) takes the
    next entry stamp, which `entered` keeps while the request runs, until `forget`.
    `sign` 1 puts low values first, -1 high values."""

    name = "priority"

    def __init__(self, sign: int = 1) -> None:
        super().__init__()
        self.sign = sign
        self.entered: dict[Request, int] = {}
        self._entries = 0

    def key(self, req: Request) -> tuple:
        # Called once per entry (KeyedQueue.add): the stamp is taken here.
        self._entries += 1
        self.entered[req] = self._entries
        return (self.sign * req.priority, self._entries)

    def forget(self, req: Request) -> None:
        """Drop the entry stamp of a request that ended or left to wait again."""
        self.entered.pop(req, None)


class SjfQueue(KeyedQueue):
    """Shortest job first: smallest prompt + max_tokens, ties by trace position."""

    name = "sjf"

    def key(self, req: Request) -> tuple:
        return (req.prompt_tokens + req.max_tokens, req.index)


class EdfQueue(KeyedQueue):
    """Earliest deadline first; requests without a deadline after all others."""

    name = "edf"

    def key(self, req: Request) -> tuple:
        if req.deadline is None:
            return (1, 0, req.index)
        return (0, req.deadline, req.index)


class LofQueue(KeyedQueue):
    """Longest output first (largest max_tokens), as SGLang's `lof`."""

    name = "lof"

    def key(self, req: Request) -> tuple:
        return (-req.max_tokens, req.index)


class RandomQueue(KeyedQueue):
    """A random order drawn from the queue's own generator, seeded: same seed, same order."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self._rng = random.Random(seed)

    def key(self, req: Request) -> tuple:
        return (self._rng.random(), req.index)


# SGLang's in-batch prefix check: a waiting request that found at most
# LPM_CHECK_TOKENS tokens in the cache and shares at least LPM_SHARED_TOKENS
# leading tokens with a request before it in the list goes last, so that one
# of them computes the prefix and the others then find it.
LPM_CHECK_TOKENS = 32
LPM_SHARED_TOKENS = 32


class LpmQueue(FcfsQueue):
    """Longest prefix match first, as SGLang's `lpm`.

    The queue is one list, as SGLang's waiting queue: newcomers join its
    tail, and `refresh` (called at each scheduling pass that may admit) sorts
    it in place by the number of leading blocks found in the prefix cache,
    longest first; the sort is stable, so ties keep the order the last sort
    left (not arrival order). `scorer(req)` gives the blocks found matching
    the whole sequence; the rank counts at most those a lookup could reuse,
    (P + outputs - 1) // block_size. A request that found at most
    LPM_CHECK_TOKENS tokens and shares LPM_SHARED_TOKENS or more leading
    tokens (whole blocks) with a request before it in the list goes last.
    With more than `threshold` requests waiting the list is not sorted: it
    keeps its order, as SGLang does to bound the cost of matching.
    """

    name = "lpm"

    def __init__(self, scorer: Callable[[Request], int] | None = None,
                 threshold: int = 128, block_size: int = 1) -> None:
        super().__init__()
        self.scorer = scorer
        self.threshold = threshold
        self.block_size = block_size
        self.fallback = False  # whether the last refresh left the list unsorted

    def refresh(self) -> bool:
        items = self._items
        self.fallback = len(items) > self.threshold
        if self.fallback or self.scorer is None:
            return False
        score = self.scorer
        size = self.block_size
        # Leading blocks that make a shared prefix long enough: only those of each
        # request need remembering.
        enough = -(-LPM_SHARED_TOKENS // size)
        seen: set = set()
        rank = {}
        for req in items:
            found = score(req)
            if found * size <= LPM_CHECK_TOKENS and req.block_keys is not None:
                whole = (req.prompt_tokens + req.outputs) // size
                keys = req.block_keys.ensure(min(whole, enough))[:min(whole, enough)]
                shared = 0
                for key in keys:
                    if key not in seen:
                        break
                    shared += 1
                if shared * size >= LPM_SHARED_TOKENS:
                    rank[req] = 1  # last, among the others put last
                    continue
                seen.update(keys)
            cap = (req.prompt_tokens + req.outputs - 1) // size
            rank[req] = -min(found, cap)
        self._items = OrderedDict.fromkeys(sorted(items, key=rank.__getitem__))
        return True


class HoldingFirst(RequestQueue):
    """An order whose `held` requests (waiting with blocks of their own: a landed
    KV copy) are offered before every other, first held first; so that a request
    holding blocks never waits behind one that needs them (a deadlock)."""

    def __init__(self, inner: RequestQueue) -> None:
        self.inner = inner
        self.name = inner.name
        self.held: OrderedDict[Request, None] = OrderedDict()

    def hold(self, req: Request) -> None:
        """Queue a request that holds blocks, after the others that do."""
        self.held[req] = None

    def add(self, req: Request) -> None:
        self.inner.add(req)

    def prepend(self, req: Request) -> None:
        self.inner.prepend(req)

    def insert_by_arrival(self, req: Request) -> None:
        self.inner.insert_by_arrival(req)

    def peek(self) -> Request:
        return next(iter(self.held)) if self.held else self.inner.peek()

    def pop(self) -> Request:
        return self.held.popitem(last=False)[0] if self.held else self.inner.pop()

    def remove(self, req: Request) -> None:
        if req in self.held:
            del self.held[req]
        else:
            self.inner.remove(req)

    def __len__(self) -> int:
        return len(self.held) + len(self.inner)

    def __iter__(self) -> Iterator[Request]:
        yield from self.held
        yield from self.inner

    def __contains__(self, req: object) -> bool:
        return req in self.held or req in self.inner

    def refresh(self) -> bool:
        return self.inner.refresh()


QUEUE_ORDERS: dict[str, type[RequestQueue]] = {
    cls.name: cls
    for cls in (FcfsQueue, PriorityQueue, SjfQueue, EdfQueue, LpmQueue, LofQueue, RandomQueue)
}


def make_queue(order: str, seed: int = 0, lpm_threshold: int = 128,
               scorer: Callable[[Request], int] | None = None,
               block_size: int = 1) -> RequestQueue:
    """Build the queue for an order name; raise ValueError naming the known orders."""
    if order not in QUEUE_ORDERS:
        known = ", ".join(QUEUE_ORDERS)
        raise ValueError(f"unknown order {order!r} (known: {known})")
    if order == "random":
        return RandomQueue(seed)
    if order == "lpm":
        return LpmQueue(scorer, lpm_threshold, block_size)
    return QUEUE_ORDERS[order]()
