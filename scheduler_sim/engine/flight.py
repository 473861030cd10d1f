"""A dispatch in progress: `InFlight`, what `Dispatching._start` (dispatching.py)
made of a plan and its completion reads."""
from __future__ import annotations

from ..requests.request import Request

__all__ = ["InFlight"]


class InFlight:
    """The dispatch being executed: its rows, its start and its completion tick, and
    its exact (fractional) completion in clock steps."""

    __slots__ = ("rows", "start", "done", "exact", "all_decode", "outputs", "decoders",
                 "members", "requests", "unsent")

    def __init__(self, rows: list[tuple[Request, bool]], start: int, done: int,
                 exact: float, all_decode: bool, outputs: int,
                 decoders: list[Request] | None = None, members: int = 0,
                 requests: list[Request] | None = None) -> None:
        self.rows = rows  # (request, emits), cohort members left out
        self.outputs = outputs  # rows that emit
        self.start = start
        self.done = done
        self.exact = exact
        self.all_decode = all_decode  # every row a decode: a candidate for folding
        # The rows' requests when every row (cohort members left out) is a plain decode.
        self.decoders = decoders
        self.members = members  # rows of cohort members (counted, not written)
        self.requests = requests  # every row's request in plan order, with members
        self.unsent: tuple | None = None  # (rows, tokens) of a Dispatch record not yet sent
