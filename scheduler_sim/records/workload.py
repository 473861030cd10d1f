"""A parsed trace as the engine consumes it: request specs and timed actions.

The trace reader (top layer) builds a `Workload` whose times are in the
trace's own unit; the engine (below it) replays `workload.on_clock(clock)`,
the same workload with every time in clock steps (see `clock.py`).
Requests are ordered by (arrival, trace position) and actions by (time,
trace position), which is the registration order of T2.
"""
from __future__ import annotations

import dataclasses
from operator import add
from typing import Callable, Iterator

from .clock import Clock
from .frozen import Frozen, Record, make_inits, record_class

__all__ = ["RequestSpec", "Action", "Workload"]


# Record classes (frozen.py: fields and slots from `dataclasses`, methods from the
# bases, both `__init__`s compiled by one `exec` at import), not dataclasses, whose
# four and three generated methods each were compiled by an `exec` of their own at
# every start-up. A `RequestSpec` is not frozen, though never changed once made
# (hashed by its fields as a frozen one is): its `__init__` sets each field by a
# plain slot store, which a frozen record sets through the slot's descriptor, and a
# spec is made for every request when a trace is read and again at each replay on
# a clock (`arrivals`). A 10-request replay: 0.36037e9 instructions before,
# 0.35517e9 with these two as records (callgrind; benchmarks/README.md,
# "fourteenth steps ... mil10").
@record_class
class RequestSpec(Record):
    """What the trace says about one request (validated); never changed once made."""

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

    __hash__ = Frozen.__hash__  # (by every field, as a frozen record's)


@record_class
class Action(Frozen):
    """A client cancellation or a forced preemption of request `id` at tick `at`."""

    kind: str  # "cancel" or "preempt"
    id: str
    at: float  # trace units; clock steps once on a clock
    index: int


make_inits([RequestSpec, Action])


class Workload:
    """Everything the engine replays: requests, cancellations, preemptions.

    The requests are held in memory (`build`), or streamed: `source` is a
    callable giving a fresh iterator over them in replay order, each time the
    engine replays (a trace file read again for each policy), and `count`,
    `first_arrival` and `last_arrival` come from the validation pass.
    `arrivals()` is how the engine reads them; `requests` gives them all at
    once (reading a streamed workload whole).

    A plain workload (`plain`: the requests of a trace read in memory whose
    lines say only id, arrival and the two counts) holds its requests as
    columns, and `arrivals()` makes each spec once, on the clock if on one: its
    arrivals converted as a column (`Clock.arrival_steps`), the specs by a `map`.
    Speed (issue 26): a spec made at the reading and another at each replay on a
    clock, by a generator and `arrival_step`'s three calls: 1.49 us a request of the
    Azure conversation trace to make, sort and replay; the columns 0.71 (timers),
    paired CPU of its replay 0.982 (benchmarks/README.md, "twenty-seventh steps",
    helper az29).
    """

    __slots__ = ("_requests", "cancels", "preempts", "_source", "_count", "_span", "_clock",
                 "largest", "_named", "_columns")

    def __init__(self, requests=(), cancels=(), preempts=(), *,
                 source: Callable[[], Iterator[RequestSpec]] | None = None,
                 count: int = 0, span: tuple[float, float] | None = None,
                 clock: Clock | None = None, largest: RequestSpec | None = None,
                 columns: tuple[list, ...] | None = None) -> None:
        self._requests = tuple(requests)
        # (ids, indexes, arrivals, prompts, outputs) of a plain workload (`plain`).
        self._columns = columns
        # The request with the most rows it may ever need (prompt + max_tokens).
        self.largest = largest if source is not None or columns is not None else max(
            self._requests, key=lambda r: r.prompt_tokens + r.max_tokens, default=None)
        self.cancels: tuple[Action, ...] = tuple(cancels)
        self.preempts: tuple[Action, ...] = tuple(preempts)
        self._source = source
        self._count = count if source is not None else len(self._requests)
        if columns is not None:
            self._count = len(columns[0])
        elif source is None and self._requests:
            span = (self._requests[0].arrival, self._requests[-1].arrival)
        self._span = span
        self._clock = clock
        self._named: frozenset[str] | None = None

    @classmethod
    def build(cls, requests, cancels=(), preempts=()) -> "Workload":
        """Sort into replay order: by tick, ties by position in the trace (T2)."""
        return cls(
            sorted(requests, key=lambda r: (r.arrival, r.index)),
            sorted(cancels, key=lambda a: (a.at, a.index)),
            sorted(preempts, key=lambda a: (a.at, a.index)),
        )

    @classmethod
    def plain(cls, ids: list[str], indexes: list[int], arrivals: list, prompts: list[int],
              outputs: list[int], cancels=(), preempts=()) -> "Workload":
        """Requests given as columns, already in replay order, each with max_tokens its
        output_tokens and no priority, deadline, token ids or hashes (what
        `block_specs` makes of a trace's lines)."""
        largest = None
        if ids:
            sums = list(map(add, prompts, outputs))
            at = sums.index(max(sums))  # (the first of them, as `max` keeps)
            largest = RequestSpec(ids[at], indexes[at], arrivals[at], prompts[at],
                                  outputs[at], outputs[at])
        return cls((), sorted(cancels, key=lambda a: (a.at, a.index)),
                   sorted(preempts, key=lambda a: (a.at, a.index)),
                   span=(arrivals[0], arrivals[-1]) if ids else None, largest=largest,
                   columns=(ids, indexes, arrivals, prompts, outputs))

    @classmethod
    def streamed(cls, source: Callable[[], Iterator[RequestSpec]], count: int,
                 span: tuple[float, float] | None, cancels=(), preempts=(),
                 largest: RequestSpec | None = None) -> "Workload":
        """Requests read from `source` (already in replay order) at each replay."""
        return cls((), sorted(cancels, key=lambda a: (a.at, a.index)),
                   sorted(preempts, key=lambda a: (a.at, a.index)),
                   source=source, count=count, span=span, largest=largest)

    def __len__(self) -> int:
        return self._count

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Workload):
            return NotImplemented
        return ((self.requests, self.cancels, self.preempts)
                == (other.requests, other.cancels, other.preempts))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"Workload({self._count} requests, {len(self.cancels)} cancels, "
                f"{len(self.preempts)} preempts{', streamed' if self._source else ''})")

    @property
    def first_arrival(self) -> float | None:
        """The first request's arrival (on the clock, if on one), None without requests."""
        if self._span is None:
            return None
        return (self._clock.arrival_step(self._span[0]) if self._clock is not None
                else self._span[0])

    @property
    def last_arrival(self) -> float | None:
        """The last request's arrival (on the clock, if on one)."""
        if self._span is None:
            return None
        return (self._clock.arrival_step(self._span[1]) if self._clock is not None
                else self._span[1])

    def named_ids(self) -> frozenset[str]:
        """The ids that a cancellation or a forced preemption names, made once: every
        engine replaying this workload (each replica of a fleet) reads the same set."""
        if self._named is None:
            self._named = frozenset([a.id for a in self.cancels] + [a.id for a in self.preempts])
        return self._named

    def arrivals(self) -> Iterator[RequestSpec]:
        """The requests in replay order (read again from the source if streamed)."""
        clock = self._clock
        if self._columns is not None:
            ids, indexes, arrivals, prompts, outputs = self._columns
            if clock is not None:
                arrivals = clock.arrival_steps(arrivals)
            return map(RequestSpec, ids, indexes, arrivals, prompts, outputs, outputs)
        specs = iter(self._requests) if self._source is None else self._source()
        if clock is None:
            return specs
        arrive, before, scale = clock.arrival_step, clock.before, clock.rate_scale
        if scale != 1:  # a deadline keeps its distance from the (compressed) arrival
            return (RequestSpec(s.id, s.index, arrive(s.arrival), s.prompt_tokens,
                                s.output_tokens, s.max_tokens, s.priority,
                                None if s.deadline is None
                                else before(s.deadline - s.arrival + s.arrival / scale),
                                s.prompt_token_ids, s.output_token_ids, s.block_hashes)
                    for s in specs)
        return (RequestSpec(s.id, s.index, arrive(s.arrival), s.prompt_tokens, s.output_tokens,
                            s.max_tokens, s.priority,
                            None if s.deadline is None else before(s.deadline),
                            s.prompt_token_ids, s.output_token_ids, s.block_hashes)
                for s in specs)

    @property
    def requests(self) -> tuple[RequestSpec, ...]:
        """Every request at once, in replay order (a streamed workload is read whole)."""
        if self._source is None and self._clock is None and self._columns is None:
            return self._requests
        return tuple(self.arrivals())

    def on_clock(self, clock: Clock) -> "Workload":
        """This workload with its times in clock steps: arrivals, cancellations and
        preemptions at the first step at or after their time, deadlines at the
        last step at or before theirs. Under a `rate_scale` X, an arrival is at
        its time / X, and a deadline, cancellation or forced preemption keeps its
        distance from its request's arrival. Arrivals keep their order (the
        division and the rounding are monotone); requests are converted as they
        are read."""
        if not clock.moves_workload:
            return self
        at_step = clock.arrival_step
        cancels, preempts = self.cancels, self.preempts
        scale = clock.rate_scale
        if scale != 1 and (cancels or preempts):
            # An action keeps its distance d from its request's arrival A, which moves
            # to A / scale: it is written here as the time (d * scale + A) that
            # `arrival_step` compresses to A / scale + d. Order is kept among the
            # actions of one request, not across requests: sorted again, ties by
            # trace position as T2 says.
            named = self.named_ids()
            arrival = {s.id: s.arrival for s in self._all_specs() if s.id in named}

            def moved(actions):
                return sorted((dataclasses.replace(
                    a, at=(a.at - arrival[a.id]) * scale + arrival[a.id]) for a in actions),
                    key=lambda a: (a.at, a.index))
            cancels, preempts = moved(cancels), moved(preempts)
        return Workload(self._requests,
                        tuple(Action(a.kind, a.id, at_step(a.at), a.index) for a in cancels),
                        tuple(Action(a.kind, a.id, at_step(a.at), a.index) for a in preempts),
                        source=self._source, count=self._count, span=self._span, clock=clock,
                        largest=self.largest, columns=self._columns)

    def _all_specs(self) -> Iterator[RequestSpec]:
        """The requests in their trace units (a streamed workload read once more)."""
        if self._columns is not None:
            return map(RequestSpec, *self._columns, self._columns[4])  # (max_tokens)
        return iter(self._requests) if self._source is None else self._source()
