"""Through finishes in one loop: a stretch of counted decodes that a finish does not end.

A stretch carried on (through.py) whose every row is a member of the decode
cohort (cohort.py) went back to `carry_on`'s loop at each of its boundaries:
the loop checked the policy's fixed point again, completed the dispatch
(`complete_counted`), listed the survivors, told the policy
(`decodes_repeated`) and the steadiness (`repeated`), started a new
`InFlight` (`_start_counted`), asked the agenda for the next outside event
and folded. Between two outside events none of that changes but the
survivors: a finish removes requests from the cohort and the policy's
running set alike (`Policy.repeats_decodes` promises the fixed point holds
through finishes), and the next outside event stays where it was (nothing a
finish does is outside, and no policy that counts its decoders wakes up).

`carry_counted` is that stretch as one loop over its boundaries, up to the
next outside event: at each, the completion by the cohort's counters (the
members that end finish, in the stretch's row order, which the survivors
keep), the next dispatch of the survivors started by count in the same
`InFlight`, and a fold when the stretch is long enough, exactly as the loop
did it: the same dispatches stepped and folded, so the same floats added to
the busy time and the exact clock in the same order (a folded stretch's
seconds are summed apart, a stepped dispatch's added alone: `DispatchLedger`).
The survivors are listed, and the policy and the steadiness told, once, when
the loop hands the stretch back (the policy's `decodes_repeated` sets what the
last repeat sets: a rotation point). With an event listener each boundary
writes what the loop's would, from the counters: the finished requests'
records, the snapshot and the survivors' dispatch (`Counting._write_counted`,
one text for a line listener), then the fold's lines.
tests/test_fold_through.py compares the results with stepped replays and
counts the boundaries taken here.
"""
from __future__ import annotations

from .folding import FOLD_AFTER, fold

__all__ = ["BACK", "ENDED", "carry_counted"]

# What `carry_counted` leaves: the flight in flight completes at or after the
# next outside event (BACK: `carry_on` goes on to it), or the stretch ended
# (ENDED: nothing runs, or the next decodes' blocks are not free; the engine's
# loop takes the next boundary).
BACK, ENDED = 0, 1


def carry_counted(engine, until: float) -> int:
    """The flight in flight runs every running request as a counted member of the
    cohort, the policy is at its fixed point, and it completes before `until`,
    the next outside event: take its boundaries and those of the dispatches
    after it, up to `until` (see the module). Returns BACK or ENDED."""
    flight = engine.flight
    cohort = engine.cohort
    allocator = engine.allocator
    ledger = engine.ledger
    steady = engine.steadiness
    members = cohort.members
    order = flight.requests  # the rows' order: the survivors keep it
    # Speed: the per-boundary calls of `carry_on` (20,698 boundaries on the Azure
    # conversation trace under `continuous`) become this loop's few lines: 1.8%
    # fewer instructions on its first 2,000 requests (benchmarks/README.md,
    # "Issue 26, fifth steps").
    taken = 0
    changes = steady.changes  # the change log's count at the last start
    result = BACK
    # With a listener, each boundary writes what the loop's would: the finished
    # requests' records (`_finish_ended`), then the snapshot and the dispatch of
    # the survivors' decodes (`_write_counted`: one text for a line listener, its
    # rows' text made again only after a finish), then the fold's lines.
    emit = engine.listener
    rows = None
    while True:
        t = flight.done
        if t >= until:
            break
        # The blocks the next decodes open must be free (a policy short of them
        # would preempt): the survivors' are at most these.
        if cohort.opening() > allocator.free:
            result = ENDED
            break
        n = flight.members
        engine.now = t
        ended = cohort.complete(t)  # E1 by the counters (`complete_counted`)
        if ended:
            if len(ended) > 1:
                ended.sort(key=order.index)
            engine._finish_ended(ended, flight)
            rows = None
        ledger.completed_since(t, flight.exact, n, flight.start, n)
        taken += 1
        n = len(members)
        if not n:
            # Nothing runs: the loop goes on at the next outside event. The last
            # start's decodes were those that just ended (in the rows' order).
            engine.flight = None
            steady.through_counted += taken
            if taken > 1:
                allocator.step_growth.clear()  # (as each start cleared it)
                engine.policy.decodes_repeated(ended)
                steady.repeated(ended, changes)
            return ENDED
        # The survivors' decodes, started by count (`_start_counted`), in the same flight.
        engine.livelock.idle = 0  # (LivelockWatch.reset, inline)
        if emit is None:
            done, exact = ledger.decodes(t, n, cohort.start())
        else:
            if rows is None:  # (a fold's lines name the survivors: the flight's rows)
                flight.requests = list(filter(members.__contains__, order))
            allocator.step_growth.clear()  # (as the start clears it: a fold reads it)
            state = engine._state()  # (before the decodes open their blocks)
            done, exact = ledger.decodes(t, n, cohort.start())
            rows = engine._write_counted(flight.requests, n, done, state, rows)
        flight.start, flight.done, flight.exact = t, done, exact
        flight.members = flight.outputs = n
        changes = steady.changes
        if until - done < FOLD_AFTER * (done - t):
            continue  # too short to be worth a fold: the next boundary, here too
        fold(engine, flight, until, 0, rows)  # (with a listener: the rows' text just written)
    steady.through_counted += taken
    if taken:
        allocator.step_growth.clear()  # (as each start cleared it)
        survivors = list(filter(members.__contains__, order))
        flight.requests = survivors
        engine.policy.decodes_repeated(survivors)
        steady.repeated(survivors, changes)
    return result
