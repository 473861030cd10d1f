"""A parsed trace as the engine consumes it: request specs and timed actions.

The trace reader (top layer) builds a `Workload`; the engine (below it) only
reads one. Requests are ordered by (arrival, trace position) and actions by
(tick, trace position), which is the registration order of SPEC T2.
"""
from __future__ import annotations

import dataclasses

__all__ = ["RequestSpec", "Action", "Workload"]


@dataclasses.dataclass(frozen=True, slots=True)
class RequestSpec:
    """What the trace says about one request (validated)."""

    id: str
    index: int
    arrival: int
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    priority: int = 0
    deadline: int | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    output_token_ids: tuple[int, ...] | None = None
    block_hashes: tuple | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """A client cancellation or a forced preemption of request `id` at tick `at`."""

    kind: str  # "cancel" or "preempt"
    id: str
    at: int
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
