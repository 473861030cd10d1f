"""The records of a folded stretch (folding.py): what each boundary it skips would
have reported, with an event listener.

A folded boundary reports the policy's blocked head (if the observed step
reported one), the snapshot and the dispatch; only the block counts change from
one folded step to the next, so a line listener is written its lines directly
(`steady_parts`, `snapshot_line`, `dispatch_line`, records/event_lines.py) and
any other listener gets the records. Where a blocked head's report falls
against the step's own block openings (`block_order`) decides what the
report's free blocks were. folding.py decides what folds and advances the
state; the counted start and its fold (counted_fold.py) write through
`emit_folded` too.
"""
from __future__ import annotations

from itertools import accumulate, chain, cycle, islice
from operator import attrgetter

from ...records.event_lines import (LineListener, dispatch_line, snapshot_line, steady_lines,
                                    steady_parts)
from ...records.events import AdmissionBlocked, Dispatch, Snapshot
from ...requests.request import DECODE, Request

__all__ = ["block_order", "emit_folded", "counted_fold"]

_rid = attrgetter("rid")


def block_order(allocator, block: tuple, policy_growth: int) -> bool | None:
    """Whether the policy reported its blocked head after this step's rows took
    their blocks (True, as vLLM), before (False), or unknown (None), as seen in
    the step just planned: rows opened blocks, and either the policy allocated
    them all before its report, or left them all to the dispatch."""
    taken = block[4]
    if policy_growth:
        return True if taken == policy_growth else None
    if sum(allocator.step_growth.values()):
        return False  # the dispatch allocated them, after the report
    return None


def emit_folded(engine, reqs: list[Request], starts: list[int], last_done: int,
                taken_first: bool | None, starts_at: list[int] | None = None,
                rows: str | None = None, start: tuple | None = None) -> None:
    """The records each folded boundary would have produced, in order: the policy's
    blocked-head report (if it made one), the snapshot, the dispatch (for a line
    listener `rows`, the text of `reqs`' rows if known, and `start`, a counted
    start just before as `steady_parts` takes it, whose waiting and running counts
    these take).

    Only block counts change from one folded step to the next: dispatch
    s + 1 writes row r + s - 1 of a request with r resident rows now, and
    needs a new block when that row starts one.
    """
    emit = engine._emit  # (the engine's attributes, not its properties: as in folding.py's `fold`)
    a = engine.allocator
    size = a.block_size
    n = len(reqs)
    if starts_at is None:  # (given by the cohort for its members)
        starts_at = [0] * size  # requests by the residue of their rows written
        for req in reqs:
            starts_at[req.resident % size] += 1
    if start is None:
        waiting, running = engine.policy.waiting_count, engine.policy.running_count
    else:
        waiting, running = start[1][:2]
    held, draining, total = a.held, a.draining, a.num_blocks
    report = engine.steadiness.blocked
    reserved = a.reserved
    write = policy = clock = None
    if isinstance(emit, LineListener):
        lines: list[str] = []
        write, policy, clock = lines.append, emit.policy, emit.clock
    if write is not None and report is None:
        # No head reported: only the block counts change from line to line. Step s
        # (from 1) opens a block for the rows r + s - 1 that start one, a cycle of
        # `size` counts; the counts held before each step are their running sums.
        if starts:
            # starts_at[(1 - s) % size] for s = 1 .. size: residue 0, then size - 1
            # down to 1 (two slices in C: a list comprehension here was about 10,000
            # instructions a fold, 27,747 folds on the Azure trace).
            opened = starts_at[:1] + starts_at[:0:-1]
            k = len(starts) - 1
            # (A stretch within one cycle, most of them, sums a slice: two iterators
            # fewer a folded dispatch.)
            helds = accumulate(opened[:k] if k <= size else islice(cycle(opened), k),
                               initial=held)
            emit.write_parts(steady_parts(starts, last_done, helds, map(_rid, reqs), waiting,
                                          running, reserved, draining, total, n, policy,
                                          clock, rows, start))
        return
    rows = tuple((req.rid, DECODE, 1, True, None) for req in reqs)
    ends = starts[1:] + [last_done]
    for s, (tick, done) in enumerate(zip(starts, ends), start=1):
        opened = starts_at[(1 - s) % size]  # rows r + s - 1 that open a block
        free = total - held - draining
        if report is not None:
            # The head's report as the observed step made it, with this step's
            # blocks (with the order unknown, no folded step opens a block).
            rid, reason, needed = report[:3]
            seen = free - opened if taken_first else free
            record = AdmissionBlocked(tick, rid, reason, needed, seen, reserved, draining,
                                      (opened or None) if taken_first else None)
            if write is not None:
                write(record.to_json(policy, clock))
            else:
                emit(record)
        if write is not None:  # the same lines, without building the records
            write(snapshot_line(tick, waiting, running, reserved, held, draining, free, None,
                                policy, clock))
            write(dispatch_line(tick, rows, n, done, policy, clock))
            if len(lines) >= 1024:
                emit.write_all(lines)
                lines.clear()
        else:
            emit(Snapshot(tick, waiting, running, reserved, held, draining, free))
            emit(Dispatch(tick, rows, n, done))
        held += opened
    if write is not None:
        emit.write_all(lines)


def counted_fold(engine, reqs: list[Request], times: list[int], last_done: int,
                 starts_at: list[int], rows: str, counts: tuple) -> None:
    """`emit_folded` of a counted start's fold (fast/counted_fold.py) for a line
    listener, no head reported: `times` the start's time, then the folded
    dispatches' starts (a list this changes), `counts` the start's snapshot's
    counts (`counted_text`'s order), `rows` the members' rows' text. Where those
    counts are what the stretch's pool would read at the start's blocks held
    (every start on the Azure trace), the start is laid out as the stretch's
    first dispatch (`steady_lines`), else written first (`emit_folded`, its
    `start`). Speed: laid out, no format of the start's two lines (their counts,
    the rows copied again): 1.7455e9 -> 1.7376e9 instructions on the first 2,000
    Azure requests under `continuous` with `--events` (callgrind;
    benchmarks/README.md, "twenty-fifth steps", ev27); here, the times' list
    made once and no `emit_folded` and `steady_parts` between: 1.7084e9 ->
    1.6879e9 ("twenty-seventh steps", ev29)."""
    a = engine.allocator
    waiting, running, reserved, held, draining, free, cached = counts
    total = a.num_blocks
    if (cached is not None or reserved != a.reserved or draining != a.draining
            or free != total - draining - held):
        emit_folded(engine, reqs, times[1:], last_done, None, starts_at, rows,
                    (times[0], counts))
        return
    emit = engine._emit
    size = a.block_size
    k = len(times) - 2  # (the folded dispatches but the last: `emit_folded`'s blocks below)
    opened = starts_at[:1] + starts_at[:0:-1]
    helds = accumulate(opened[:k] if k <= size else islice(cycle(opened), k), initial=a.held)
    times.append(last_done)
    emit.write_parts(steady_lines(times, chain((held,), helds), waiting, running, reserved,
                                  draining, total, len(reqs), emit.policy, emit.clock, rows))
