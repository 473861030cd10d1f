"""A counted start and its fold as one: the decode cohort's next dispatch, and the stretch after it.

In a stretch of counted decodes (finishes.py's `carry_counted`, arrivals.py's
`after_admission`), each boundary starts the next dispatch of every member by
count (`Counting._start_counted`: the cohort opens their blocks, the ledger
prices and times the dispatch) and, when the stretch to the next outside
event is long enough (`FOLD_AFTER`), folds the dispatches after it
(folding.py's `fold`, whose members-only case asks the policy, the cohort's
fewest outputs left and the free blocks, then the ledger). That is always
the same sequence of questions, so `start_and_fold`
asks them once, in the same order and at the same state (after the cohort
opened the start's blocks), and has the ledger record the start and the fold
in one call (`DispatchLedger.decodes_folded`): the same statistics, floats
and gaps, the same blocks taken (the cohort's `start`, then its `advance`).
Where the fold would do more than that (a blocked head, blocks that do not
fit every member's need), the start and `fold` are made as before. With an
event listener the questions are the same (a fold's records add nothing to
them), so the start and the fold are asked and recorded in the same one call,
which hands back the folded dispatches' starts; then the start's snapshot and
dispatch are written (`Counting._write_counted`, the counts taken before the
start opened its blocks) and the fold's records (fold_records.py's `emit_folded`;
for a line listener `counted_fold`, the start's time first in the fold's starts),
with the start's blocks taken first, as the separate start and `fold` write
them. Speed (a listener's): 0.9% fewer instructions with `--events` on the
Azure conversation trace's first 2,000 requests under `continuous` (3,761
starts), 0.95x the CPU on the whole trace (benchmarks/README.md,
"twenty-second steps", helper ev23). The callers use it under a cost model
only: without one a dispatch lasts one step, the stretch to the next arrival is mostly too short to fold
(`FOLD_AFTER`), and asking the fold's questions first cost 20,000 generated
requests under `continuous` 1.3% more instructions (0.7% with the questions
skipped here but the calls kept: benchmarks/README.md, "thirteenth steps ...
az9").
tests/test_counted_fold.py checks it against the separate start and fold.
"""
from __future__ import annotations

from ...records.event_lines import LineListener
from ..dispatching import InFlight
from .fold_records import counted_fold, emit_folded
from .folding import FOLD_AFTER, fold

__all__ = ["start_and_fold", "start_counted_run"]


def start_counted_run(engine, t: int, order: list, until: float) -> None:
    """After an admission's completion at `t` (arrivals.py's `after_admission`), every
    running request a member, `order` their decodes as the policy repeats them:
    start that dispatch by count in a new flight and fold the stretch after it, up
    to `until` (the next outside event, which nothing moved: no policy wakeups),
    as `_start_counted`, the steadiness told, then `fold`."""
    n = len(order)
    flight = engine.flight = InFlight(None, t, t, 0.0, True, n, [], n, order)
    engine.steadiness.repeated(order)
    start_and_fold(engine, flight, t, n, until)


def start_and_fold(engine, flight, t: int, n: int, until: float,
                   rows: str | None = None) -> str | None:
    """Start, at `t` (the engine's `now`), the next dispatch of the cohort's `n`
    members by count in `flight` (a dispatch of members only, completed: its
    fields become the new dispatch's; its `requests` the members in the rows'
    order), then fold the stretch after it up to `until`, the next outside
    event, as `fold` would (see the module). With a listener, returns the text of
    the rows written for a line listener (`rows`: that text, if known), else None."""
    engine.livelock.idle = 0  # (LivelockWatch.reset, inline)
    cohort = engine._cohort
    emit = engine._emit
    # (a listener's snapshot: the counts before the start's blocks, `_start_counted`'s)
    counts = engine._counts() if emit is not None else None
    # The members' blocks this start opens, by count: taken with the fold's after
    # it (`advance`), or alone (`take_counted`) if nothing folds. Two consecutive
    # takes give the ids one take of their sum gives, in the same order, and
    # nothing between them reads the pool but the fit below, which counts them.
    # Speed: one take where there were two at about 12,000 of the Azure
    # trace's 27,747 folds (benchmarks/README.md, "seventeenth steps", az13).
    owed, contexts = cohort.start_owing()
    ledger = engine.ledger
    steady = engine.steadiness
    allocator = engine.allocator
    most = 0  # the most dispatches the fold may take (0: none)
    plain = steady.blocked is None  # (a blocked head's reports: `fold`'s own)
    if plain and engine.policy.may_fold(None):
        most = cohort.fewest_left() - 1
        # Every member's new blocks fit (else `fold` finds how many do).
        plain = most <= 0 or allocator.fits_counted(
            owed + n * (most // allocator.block_size + 1))
    if not plain:
        if owed:
            allocator.take_counted(owed)
        done, exact = ledger.decodes(t, n, contexts)
        if emit is not None:
            rows = engine._write_counted(flight.requests, n, done, counts, rows)
        flight.start, flight.done, flight.exact = t, done, exact
        flight.members = flight.outputs = n
        if until - done >= FOLD_AFTER * (done - t):
            fold(engine, flight, until, 0, rows)
        return rows
    # (A line listener's folded starts after the start's own time: `counted_fold`.)
    lines = emit is not None and isinstance(emit, LineListener)
    starts = None if emit is None else [t] if lines else []
    done, exact, folded, end, last_exact, start = ledger.decodes_folded(
        t, n, contexts, most, until, FOLD_AFTER, starts)
    flight.members = flight.outputs = n
    if emit is not None:
        # The start's records, then the fold's, at the pool the start leaves.
        if owed:
            allocator.take_counted(owed)
            owed = 0
        if folded and lines:
            # A line listener's start and stretch as one text, the start's end
            # made once, as the stretch's first time (`counted_fold`: the start's
            # time and counts, mostly laid out as the stretch's first dispatch),
            # and the stretch's waiting and running counts the start's.
            # Speed: a `Clock.text` and the policy's two counts (properties over
            # `__len__`) fewer a fold after a counted start; see benchmarks/README.md,
            # "twenty-fourth steps", helper ev25 (and "twenty-fifth steps", ev27).
            if rows is None:
                rows = emit.members_rows(flight.requests)
            counted_fold(engine, flight.requests, starts, end, cohort.by_residue(), rows, counts)
        else:
            rows = engine._write_counted(flight.requests, n, done, counts, rows)
            if folded:
                emit_folded(engine, flight.requests, starts, end, None, cohort.by_residue(),
                            rows)
    if folded:
        cohort.advance(folded, start, owed)
        steady.folded += folded
        flight.start, flight.done, flight.exact = start, end, last_exact
    else:
        if owed:
            allocator.take_counted(owed)
        flight.start, flight.done, flight.exact = t, done, exact
    return rows
