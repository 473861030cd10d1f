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

At the next outside event, when only arrivals come, the loop does not hand
the stretch back either: it admits them (arrivals.py's `admit_through`, the
admission's dispatch, then `after_admission`: its completion and the first
decodes after it, started counted and folded; arrivals by the admission's
completion admitted beside it first, `admit_after_prompts`) and goes on with
the decodes of every member, old and new. What `carry_on` would ask in between (the
policy's fixed point, its running count, the next outside event) the loop
already knows. tests/test_fold_arrivals.py compares those results with
stepped replays.
"""
from __future__ import annotations

from .arrivals import (AGAIN, COUNTED, STARTED, admit_after_prompts, admit_through,
                       after_admission)
from .counted_fold import start_and_fold
from .folding import FOLD_AFTER, fold

__all__ = ["BACK", "ENDED", "AGAIN", "carry_counted"]

# What `carry_counted` leaves: a flight `carry_on` goes on with (BACK: decodes
# not all counted), the stretch ended (ENDED: nothing runs, the next decodes' blocks are
# not free, or the next outside event is not arrivals only; the engine's loop
# takes the next boundary), or a boundary taken whose step the policy plans
# (AGAIN, arrivals.py's: the step runs again at the engine's `now`).
BACK, ENDED = 0, 4


def carry_counted(engine, until: float) -> tuple[int, float]:
    """The flight in flight runs every running request as a counted member of the
    cohort, and the policy is at its fixed point: take its boundaries and those
    of the dispatches after it, up to `until`, the next outside event (see the
    module); there, if only arrivals come, admit them (arrivals.py's
    `admit_through`, then `after_admission`) and go on with the decodes after
    them. Returns BACK, ENDED or AGAIN, and the `until` of the flight left."""
    flight = engine.flight
    cohort = engine._cohort
    allocator = engine.allocator
    ledger = engine.ledger
    steady = engine.steadiness
    members = cohort.members
    order = flight.requests  # the rows' order: the survivors keep it
    # The survivors in the rows' order, kept as members finish (each `remove`d:
    # identity compares, in C) rather than found again by a look-up of every row
    # in `members` at each hand-back and admission. Speed: about 868,000 look-ups
    # on the first 20,000 generated requests (`filter`, 4.0% of the instructions
    # of that replay); see benchmarks/README.md, "eleventh steps ... mil7".
    alive = list(order)
    # Speed: the per-boundary calls of `carry_on` (20,698 boundaries on the Azure
    # conversation trace under `continuous`) become this loop's few lines: 1.8%
    # fewer instructions on its first 2,000 requests (benchmarks/README.md,
    # "Issue 26, fifth steps").
    taken = 0
    changes = steady.changes  # the change log's count at the last start
    # With a listener, each boundary writes what the loop's would: the finished
    # requests' records (`_finish_ended`), then the snapshot and the dispatch of
    # the survivors' decodes (`_write_counted`: one text for a line listener, its
    # rows' text made again only after a finish), then the fold's lines.
    emit = engine.listener
    rows = None
    fused = ledger.cost is not None  # (counted_fold.py's callers' test)
    while True:
        t = flight.done
        if t >= until:
            # The next outside event comes first: arrivals the policy may admit
            # without breaking the stretch. What `carry_on` did at its loop's head
            # here (the policy's fixed point and its running count asked again: a
            # finish keeps both, `Policy.repeats_decodes`), and again after the
            # admission's decodes started counted (`after_admission` asked them),
            # is not done again, and the stretch goes on in this loop. Speed: per
            # arrival on the Azure trace, two turns of `carry_on`'s loop (about 20
            # calls) and one `_until`; see benchmarks/README.md, "tenth steps".
            if taken:
                _hand_back(engine, flight, cohort.survivors(alive), taken, changes)
                taken = 0
            done = admit_through(engine, until, flight.requests, True)
            if done != STARTED:
                return (AGAIN if done == AGAIN else ENDED), until
            until = engine._until()
            flight = engine.flight  # the admission's dispatch
            while flight.done >= until:
                # Arrivals by its completion (in tick mode often the next tick): taken
                # here as `carry_on` takes them (`admit_after_prompts`), and the
                # admission after them too. Speed: one turn of `carry_on`'s loop and
                # a `carry_counted` fewer (3,432 on 20,000 generated requests;
                # benchmarks/README.md, "nineteenth steps", arr20).
                if flight.all_decode:
                    return BACK, until
                done = admit_after_prompts(engine, until)
                if done != STARTED:
                    return (AGAIN if done == AGAIN else ENDED), until
                until = engine._until()
                flight = engine.flight
            done, until = after_admission(engine, until)
            if done != COUNTED:
                return (BACK if done == STARTED else AGAIN if done == AGAIN else ENDED), until
            flight = engine.flight  # every member's decodes, counted (and folded)
            order = flight.requests
            alive = list(order)
            changes = steady.changes
            rows = None
            continue
        # The blocks the next decodes open must be free (a policy short of them
        # would preempt): the survivors' are at most these.
        if not allocator.fits_counted(cohort.opening()):
            break
        n = flight.members
        engine.now = t
        ended = cohort.complete(t)  # E1 by the counters (`complete_counted`)
        if ended:
            if len(ended) > 1:
                ended.sort(key=order.index)
            engine._finish_ended(ended, flight)
            remove = alive.remove
            for req in ended:
                remove(req)
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
            return ENDED, until
        # The survivors' decodes, started by count (`_start_counted`), in the same flight.
        if fused:  # (and folded: counted_fold.py; with a listener, its records too)
            if emit is not None:
                if rows is None:  # (its lines name the survivors: the flight's rows)
                    flight.requests = cohort.survivors(alive)
                allocator.step_growth.clear()  # (as the start clears it: a fold reads it)
            rows = start_and_fold(engine, flight, t, n, until, rows)
            changes = steady.changes
            continue
        engine.livelock.idle = 0  # (LivelockWatch.reset, inline)
        if emit is None:
            done, exact = ledger.decodes(t, n, cohort.start())
        else:
            if rows is None:  # (a fold's lines name the survivors: the flight's rows)
                flight.requests = cohort.survivors(alive)
            allocator.step_growth.clear()  # (as the start clears it: a fold reads it)
            counts = engine._counts()  # (before the decodes open their blocks)
            done, exact = ledger.decodes(t, n, cohort.start())
            rows = engine._write_counted(flight.requests, n, done, counts, rows)
        flight.start, flight.done, flight.exact = t, done, exact
        flight.members = flight.outputs = n
        changes = steady.changes
        if until - done < FOLD_AFTER * (done - t):
            continue  # too short to be worth a fold: the next boundary, here too
        fold(engine, flight, until, 0, rows)  # (with a listener: the rows' text just written)
    if taken:
        _hand_back(engine, flight, cohort.survivors(alive), taken, changes)
    return ENDED, until


def _hand_back(engine, flight, survivors: list, taken: int, changes: int) -> None:
    """After `taken` boundaries of the loop: the survivors (in the rows' order)
    as the flight's requests, and the policy (`decodes_repeated`) and the
    steadiness told of the last start, as each start would have told them."""
    steady = engine.steadiness
    steady.through_counted += taken
    engine.allocator.step_growth.clear()  # (as each start cleared it)
    flight.requests = survivors
    engine.policy.decodes_repeated(survivors)
    steady.repeated(survivors, changes)
