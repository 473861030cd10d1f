"""The roster: the requests of a run, which of them are kept, and how many live.

Every request registered with the engine is in `requests` while it lives.
With `keep` (the default) it stays there after it ends, for the result;
otherwise only live requests and those a cancellation or forced preemption
names (`named`) stay, so that a long trace replays in memory bounded by
what is live. `on_end` hears of each request as it reaches its end.
`admitted` numbers admissions in order (a request's `admit_seq`). `spill`,
when the engine spills the tail of a long FCFS queue (spill.py), holds it.
`arrive` registers an arrival with the engine (`Engine._arrive`, or for a
plain lone engine fast/plain_arrival.py's; the engine sets it).
`check_request_sizes` refuses, before the replay, a request whose blocks could
outgrow what the simulator tracks per request.
"""
from __future__ import annotations

from typing import Any, Callable

from ..kv.allocator import BLOCK_BYTES, MAX_REQUEST_BLOCKS, blocks_for
from ..records.errors import UsageError
from ..records.option_table import MAX_BLOCK_SIZE
from ..records.options import Options
from ..records.workload import Workload
from ..requests.request import Request

__all__ = ["Roster", "check_request_sizes", "request_of"]


class Roster:
    """The run's requests by id, the live count, and what happens at an end."""

    __slots__ = ("requests", "keep", "named", "on_end", "live", "admitted", "spill", "arrive")

    def __init__(self, keep: bool, named: frozenset | set,
                 on_end: Callable[[Any], None] | None) -> None:
        self.requests: dict[str, Any] = {}
        self.keep = keep
        self.named = named
        self.on_end = on_end
        self.live = 0       # registered requests not yet ended
        self.admitted = 0   # admissions so far (the last admit_seq given)
        self.spill: Any = None  # the spilled FCFS tail (spill.py), if any
        self.arrive: Callable[[Any], None] | None = None  # a trace record's arrival

    def ended(self, req: Any) -> None:
        """`req` reached its terminal state: tell the listener, and forget it unless
        it is kept."""
        if self.on_end is not None:
            self.on_end(req)
        if not self.keep and req.rid not in self.named:
            del self.requests[req.rid]


def check_request_sizes(workload: Workload, options: Options) -> None:
    """Refuse a request whose blocks could outgrow what the simulator tracks per
    request (it would be admitted: it fits in the pool), with the arithmetic."""
    spec = workload.largest
    if spec is None:
        return
    size = options.block_size
    rows = spec.prompt_tokens + spec.max_tokens
    blocks = blocks_for(rows, size)
    if MAX_REQUEST_BLOCKS < blocks <= options.num_blocks:
        least = blocks_for(rows, MAX_REQUEST_BLOCKS)
        # (A block size past the largest was offered before, which the options refuse.)
        advice = (f"use a block_size of at least {least:,}" if least <= MAX_BLOCK_SIZE else
                  f"no block_size does (the largest, {MAX_BLOCK_SIZE:,}, tracks "
                  f"{MAX_REQUEST_BLOCKS * MAX_BLOCK_SIZE:,} tokens)")
        raise UsageError(
            f"request {spec.id!r} may need {blocks:,} blocks of {size} tokens (prompt "
            f"{spec.prompt_tokens:,} + max_tokens {spec.max_tokens:,}), more than the "
            f"{MAX_REQUEST_BLOCKS:,} the simulator tracks per request (about {BLOCK_BYTES} "
            f"bytes each, {MAX_REQUEST_BLOCKS * BLOCK_BYTES // 2 ** 20:,} MiB): {advice}")


def request_of(spec) -> Request:
    """A request, waiting, as its trace record (a `RequestSpec`) describes it."""
    return Request(spec.id, spec.index, spec.arrival, spec.prompt_tokens, spec.output_tokens,
                   spec.max_tokens, spec.priority, spec.deadline, spec.prompt_token_ids,
                   spec.output_token_ids, spec.block_hashes)
