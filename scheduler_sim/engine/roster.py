"""The roster: the requests of a run, which of them are kept, and how many live.

Every request registered with the engine is in `requests` while it lives.
With `keep` (the default) it stays there after it ends, for the result;
otherwise only live requests and those a cancellation or forced preemption
names (`named`) stay, so that a long trace replays in memory bounded by
what is live. `on_end` hears of each request as it reaches its end.
`admitted` numbers admissions in order (a request's `admit_seq`). `spill`,
when the engine spills the tail of a long FCFS queue (spill.py), holds it.
"""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["Roster"]


class Roster:
    """The run's requests by id, the live count, and what happens at an end."""

    __slots__ = ("requests", "keep", "named", "on_end", "live", "admitted", "spill")

    def __init__(self, keep: bool, named: frozenset | set,
                 on_end: Callable[[Any], None] | None) -> None:
        self.requests: dict[str, Any] = {}
        self.keep = keep
        self.named = named
        self.on_end = on_end
        self.live = 0       # registered requests not yet ended
        self.admitted = 0   # admissions so far (the last admit_seq given)
        self.spill: Any = None  # the spilled FCFS tail (spill.py), if any

    def ended(self, req: Any) -> None:
        """`req` reached its terminal state: tell the listener, and forget it unless
        it is kept."""
        if self.on_end is not None:
            self.on_end(req)
        if not self.keep and req.rid not in self.named:
            del self.requests[req.rid]
