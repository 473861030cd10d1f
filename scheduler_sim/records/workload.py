"""A parsed trace as the engine consumes it: request specs and timed actions.

The trace reader (top layer) builds a `Workload` whose times are in the
trace's own unit; the engine (below it) replays `workload.on_clock(clock)`,
the same workload with every time in clock steps (see `clock.py`).
Requests are ordered by (arrival, trace position) and actions by (time,
trace position), which is the registration order of T2.
"""
from __future__ import annotations

import dataclasses

from .clock import Clock

__all__ = ["RequestSpec", "Action", "Workload"]


@dataclasses.dataclass(frozen=True, slots=True)
class RequestSpec:
    """What the trace says about one request (validated)."""

    id: str
    index: int
    arrival: float  # trace units; clock steps once on a clock
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    priority: int = 0
    deadline: float | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    output_token_ids: tuple[int, ...] | None = None
    block_hashes: tuple | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """A client cancellation or a forced preemption of request `id` at tick `at`."""

    kind: str  # "cancel" or "preempt"
    id: str
    at: float  # trace units; clock steps once on a clock
    index: int


@dataclasses.dataclass(frozen=True)
class Workload:
    """Everything the engine replays: requests, cancellations, preemptions."""

    requests: tuple[RequestSpec, ...]
    cancels: tuple[Action, ...] = ()
    preempts: tuple[Action, ...] = ()

    @classmethod
    def build(cls, requests, cancels=(), preempts=()) -> "Workload":
        """Sort into replay order: by tick, ties by position in the trace (T2)."""
        return cls(
            tuple(sorted(requests, key=lambda r: (r.arrival, r.index))),
            tuple(sorted(cancels, key=lambda a: (a.at, a.index))),
            tuple(sorted(preempts, key=lambda a: (a.at, a.index))),
        )

    def on_clock(self, clock: Clock) -> "Workload":
        """This workload with its times in clock steps: arrivals, cancellations and
        preemptions at the first step at or after their time, deadlines at the
        last step at or before theirs. Order is kept (the rounding is monotone)."""
        if clock.identity:
            return self
        after, before = clock.after, clock.before
        requests = tuple(
            RequestSpec(s.id, s.index, after(s.arrival), s.prompt_tokens, s.output_tokens,
                        s.max_tokens, s.priority,
                        None if s.deadline is None else before(s.deadline),
                        s.prompt_token_ids, s.output_token_ids, s.block_hashes)
            for s in self.requests)
        return Workload(requests,
                        tuple(Action(a.kind, a.id, after(a.at), a.index) for a in self.cancels),
                        tuple(Action(a.kind, a.id, after(a.at), a.index) for a in self.preempts))
