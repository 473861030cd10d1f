"""The agenda: what is pending outside the dispatches, and when the first of it is due.

An engine's outside sources are the trace's arrivals (read in order, one
ahead), its cancellations and forced preemptions (positions in the
workload's sorted lists), the waiting requests' timeouts, the draining
blocks' expiries (the allocator's) and the policy's own wakeup
(`next_wakeup`). `peek` is the one rule for the first time after `now` at
which any of them may change something (E7), used for the next boundary, by
folding for where a steady stretch must stop, and by fleet drivers (through
`Engine.peek`). While a dispatch is in flight only arrivals and drains
count: cancellations, preemptions, timeouts and wakeups wait for its
completion (E4).
"""
from __future__ import annotations

from collections import deque
from typing import Any, Iterator

from ..records.states import RequestStatus
from ..records.workload import Action, RequestSpec, Workload

__all__ = ["Agenda"]

INF = float("inf")
_WAITING = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


class Agenda:
    """The engine's pending outside sources and `peek` over them."""

    __slots__ = ("workload", "arrivals", "next_arrival", "arrived", "cancel_at",
                 "preempt_at", "timeout", "timeouts", "allocator", "policy", "wakes")

    def __init__(self, workload: Workload, timeout: int | None, allocator: Any,
                 policy: Any) -> None:
        self.workload = workload
        self.arrivals: Iterator[RequestSpec] = iter(())  # the arrivals still to come ...
        self.next_arrival: RequestSpec | None = None     # ... and the first of them
        self.arrived = 0      # arrivals received (from the trace or a fleet's router)
        self.cancel_at = 0    # the first cancellation not yet taken
        self.preempt_at = 0   # the first forced preemption not yet taken
        # waiting_timeout in clock steps (None: none), and (expiry tick, request,
        # wait_since) per wait, in expiry order.
        self.timeout = timeout
        self.timeouts: deque[tuple[int, Any, int]] = deque()
        self.allocator = allocator
        self.policy = policy
        # Whether the policy may have a wakeup at all: not if its class keeps the base's
        # `next_wakeup`, which answers None (a call saved at each of the 2.5 `peek`s a
        # request of a generated trace costs; only `dynamic` has wakeups).
        self.wakes = _may_wake(policy)

    def begin(self) -> int:
        """Start reading the trace's arrivals; return the first one's time (0: none)."""
        self.arrivals = self.workload.arrivals()
        spec = self.next_arrival = next(self.arrivals, None)
        return spec.arrival if spec is not None else 0

    def take_arrivals(self, now: int, arrive) -> None:
        """Hand `arrive` (`Roster.arrive`) each arrival of the trace at `now`, the
        next one's time, in the trace's order; the one after them is held next."""
        spec = self.next_arrival
        specs = self.arrivals
        while spec is not None and spec.arrival == now:
            arrive(spec)
            spec = next(specs, None)
        self.next_arrival = spec

    def due_cancels(self, t: int) -> list[str]:
        """The ids of the cancellations due at `t` (taken off the agenda)."""
        ids, self.cancel_at = _due_ids(self.workload.cancels, self.cancel_at, t)
        return ids

    def due_preempts(self, t: int) -> list[str]:
        """The ids of the forced preemptions due at `t` (taken off the agenda)."""
        ids, self.preempt_at = _due_ids(self.workload.preempts, self.preempt_at, t)
        return ids

    def wait(self, req: Any, now: int) -> None:
        """`req` entered the waiting queue at `now`: its timeout, if any, is pending.
        "Longer than" the timeout: at now + timeout it has waited exactly the
        timeout, one tick later longer."""
        if self.timeout is not None:
            self.timeouts.append((now + self.timeout + 1, req, now))

    def next_timeout(self) -> int | None:
        """The tick of the next waiting_timeout that can still fire, if any."""
        timeouts = self.timeouts
        while timeouts:
            _, req, since = timeouts[0]
            if req.wait_since == since and req.status in _WAITING:
                return timeouts[0][0]
            timeouts.popleft()  # admitted (or ended) since: it will never fire
        return None

    def peek(self, now: int, in_flight: bool = False, live: bool = True,
             arrivals: bool = True) -> float:
        """The first time after `now` at which something outside the dispatches may
        happen: the next arrival (not with `arrivals` False: a fold past arrivals
        that only join the queue, fast/folding.py), drain expiry or load landing
        from host memory; and, unless a dispatch is in flight (it would defer them, E4), the next
        cancellation, forced preemption, timeout, or (with `live` requests) store
        landing in host memory or policy wakeup. Infinity when nothing is
        pending."""
        spec = self.next_arrival
        nxt = spec.arrival if spec is not None and arrivals else INF
        allocator = self.allocator
        if allocator.draining:
            expiry = allocator.next_expiry()
            if expiry < nxt:
                nxt = expiry
        host = allocator.host
        if host is not None and host.loads:
            landing = host.next_landing()  # a load from host memory lands
            if landing < nxt:
                nxt = landing
        if in_flight:
            return nxt
        w = self.workload
        cancels, preempts = w.cancels, w.preempts
        ic, ip = self.cancel_at, self.preempt_at
        if ic < len(cancels) and cancels[ic].at < nxt:
            nxt = cancels[ic].at
        if ip < len(preempts) and preempts[ip].at < nxt:
            nxt = preempts[ip].at
        if self.timeouts:
            timeout = self.next_timeout()
            if timeout is not None and timeout < nxt:
                nxt = timeout
        if host is not None and host.storing and live:
            landing = host.next_store_landing(now)  # a waiting request may find more
            if landing is not None and landing < nxt:
                nxt = landing
        if live and self.wakes:
            wake = self.policy.next_wakeup(now)
            if wake is not None and now < wake < nxt:
                nxt = wake
        return nxt


def _may_wake(policy: Any) -> bool:
    """False for a policy whose `next_wakeup` is the base's (always None)."""
    from ..policies.base import Policy  # (policies import the engine's modules)
    return (getattr(type(policy), "next_wakeup", None) is not Policy.next_wakeup
            or "next_wakeup" in getattr(policy, "__dict__", ()))


def _due_ids(actions: list[Action], i: int, t: int) -> tuple[list[str], int]:
    """The ids of `actions` from position `i` that are due at `t`, and the position
    after them."""
    j = i
    n = len(actions)
    while j < n and actions[j].at <= t:
        j += 1
    return [a.id for a in actions[i:j]], j
