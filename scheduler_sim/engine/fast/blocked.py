"""Behind a blocked head: a stretch of counted decodes while the queue's head waits for a credit.

When the pool's credits are spoken for, the head of a first-come-first-served
queue waits until a running request ends, and every `schedule` call between
reports it blocked (`admission_blocked`) and plans the decodes of every running
request, in the same order. Such a stretch cannot be carried on by
through.py's loops: requests wait, so the policy is not at its fixed point
(`Policy.repeats_decodes`), and in tick mode (no cost model: a dispatch lasts
a tick) an arrival or a finish comes at most boundaries, too often to fold.
Each of its boundaries went through the engine's whole pipeline: the loop's
phases, the policy's `schedule` with its blocked report, `_start`, the
steadiness and the fold's look.

A built-in policy that knows its head stays blocked through arrivals says so
(`Policy.repeats_blocked`): until a finish frees a credit, each call would
report the same head for the same reason and need, admit nothing and plan
the same decodes. `carry_blocked` then takes the boundaries that follow as
the loop would: the arrivals (E2, which join the queue behind the head) and
the completion by the cohort's counters (E1, arrivals.py's
`take_boundaries`), then in place of the call what it would set (the
steadiness's blocked report with the free blocks it would see) and the next
dispatch of every member started by count in the same `InFlight`
(`_start_counted`'s work), looked at for folding exactly as the step looks
at it (`Steadiness.repeats`, with the attributes the promise leaves). At a
finish the policy is asked again: if the credits freed still do not let the
head in, the survivors' decodes start the same way (the rotation point set
by `decodes_repeated`). If they do, the policy admits the heads that fit as
its call would (`Policy.admit_heads`; if it declines, its call does it) and
the engine starts their whole prompts beside the decodes (`_start_heads`);
when the next head is reported blocked and the policy promises again, that
dispatch's completion is taken too, and once every running request decodes
as a counted member their decodes start in the order it gives
(`next_decodes`); when the queue is left empty the stretch goes on as after
arrivals (through.py's `carry_on`). At a boundary
where the promise fails, or something other than arrivals is due, the
policy plans: the step runs again at that boundary, or the engine's loop
takes it. Without an event listener only (a listener's records of each
boundary are left to the step). tests/test_fold_blocked.py compares the
results with stepped replays.

Speed: of the 217,354 dispatches of 100,000 generated requests, 14,720 of
members' decodes and 7,840 with the prompts of heads admitted at a finish
were planned by the policy behind a blocked head, each about thirty calls
in the step besides the loop's, against five or six for a counted boundary;
`schedule` calls there 10,264 instead of 23,961 (benchmarks/README.md,
"twenty-second steps", mil22); with the admissions at a finish made without
a call, 1,401 (8,863 admissions; "twenty-third steps", mil23).
"""
from __future__ import annotations

from ...policies.base import DecodesFirst
from .admission import start_admission
from .arrivals import only_arrivals, take_boundaries
from .folding import FOLD_AFTER, fold

__all__ = ["carry_blocked"]


def carry_blocked(engine, until: float) -> bool | None:
    """The flight just started runs every running request as a counted member, or
    their decodes and the whole prompts of the heads the credits let in, and the
    call that planned it reported its queue head blocked (the steadiness's
    `blocked`). If the policy promises the report and the plan hold through
    arrivals (`Policy.repeats_blocked`), take the boundaries, through arrivals
    and through finishes after which the policy promises again, up to the first
    at which it does not or something other than arrivals is due (see the
    module). Returns None when the promise is not given for a stretch of counted
    decodes (nothing done), True when it took a boundary whose step the policy
    plans (the step runs again at the engine's `now`), False when the engine's
    loop takes the next boundary (nothing done, if the flight has prompt rows and
    the promise is not given)."""
    flight = engine.flight
    policy = engine.policy
    steady = engine.steadiness
    report = steady.blocked
    cohort = engine._cohort
    # With prompt rows (the heads admitted at a finish, every one whole): their
    # completion first, and the decodes after it in the order the policy gives.
    mixed = not flight.all_decode
    n = flight.members
    if (engine._emit is not None or not n or engine.allocator.draining or engine.agenda.wakes
            or (not mixed and (flight.decoders or flight.rows is not None
                               or n != policy.running_count))
            or not policy.repeats_blocked(report[1])):
        return False if mixed else None
    allocator = engine.allocator
    ledger = engine.ledger
    livelock = engine.livelock
    requests = flight.requests  # every member, in the policy's order (no finish: kept)
    rid, reason, needed = report[0], report[1], report[2]
    # What `Steadiness.repeats` compares the call with, where no finish came: the
    # change count before it (no change during it: it admits nothing) and the
    # policy's attributes, which the promise leaves as they are (so the live ones
    # stand for the copy: no copy a boundary).
    attributes = policy.__dict__
    while True:
        t = flight.done
        if t >= until:
            # The next outside event comes by the completion: arrivals only, or the
            # engine's loop takes the boundary.
            if not only_arrivals(engine, until, t):
                break
        elif livelock.tripped:
            break
        if mixed:
            running = policy.running_count
            take_boundaries(engine, t)  # E1 (`complete_now`: the rows), E2's arrivals
            # Every running request now a counted member (each newcomer joined as
            # its prompt completed), the promise asked again if a request ended,
            # or the step is the policy's; their decodes in the order the call
            # would give, its rotation point set (`next_decodes`).
            n = len(cohort.members)
            if n != policy.running_count or not allocator.fits_counted(cohort.opening()):
                return True
            if n != running and not policy.repeats_blocked(reason):
                # A request ended and the head now fits: the heads the policy admits
                # beside every member's decodes, in the order its call would give.
                requests = policy.decode_order()
                if not requests:
                    return True
                heads_fit = True
            else:
                before = steady.before_call()
                requests = policy.next_decodes()
                heads_fit = False
        else:
            # The blocks the next decodes open must be free (as carry_counted asks).
            if not allocator.fits_counted(cohort.opening()):
                break
            ended = take_boundaries(engine, t, True)  # E1 by the counters, E2's arrivals
            heads_fit = False
            if not ended:
                before = (steady.changes, attributes, ())
            else:
                # Credits freed: the call is skipped only if the head still does not
                # fit them (the policy asked again), with the survivors' decodes, or
                # if the policy admits the heads that fit (below).
                requests = cohort.survivors(requests, ended)
                if not requests:
                    return True  # the step is the policy's, at this boundary
                heads_fit = not policy.repeats_blocked(reason)
            if not heads_fit and ended:
                n = flight.members = flight.outputs = len(requests)
                flight.requests = requests
                # The call would set the rotation point (a finished member may hold
                # it): the attributes before it are copied for the look below, as
                # the step copies them (`before_call`).
                before = steady.before_call()
                policy.decodes_repeated(requests)
        if t >= until:
            until = engine._until()  # (the arrivals taken: the next outside event)
        if heads_fit:
            # The call due now would admit the heads the credits freed let in (their
            # whole prompts beside the decodes) and report the next head blocked:
            # the policy does that without it (`Policy.admit_heads`) and the
            # dispatch starts from its shape, or the step is the policy's.
            flight = _start_heads(engine, t, requests, cohort, until)
            if flight is None:
                return True
            report = steady.blocked
            if report is None or flight.members == 0 or allocator.draining \
                    or not policy.repeats_blocked(report[1]):
                # As the step goes on from this dispatch (through.py's `carries_on`):
                # nothing waits (carried on as after arrivals), or no promise.
                allocator.check()
                if report is None and not policy.waiting_count and policy.repeats_decodes():
                    # (One level deep, not more: that `carry_on` starts with nothing
                    # blocked, and only its start comes here; it returns at the
                    # first step that is the policy's. Imported here: through.py
                    # imports this module.)
                    from .through import carry_on
                    return carry_on(engine, until)
                return False
            rid, reason, needed = report[0], report[1], report[2]
            mixed = True
            allocator.check()
            continue
        # The call's report, as `report_blocked` sets it: the same head, reason and
        # need, the free blocks before this step's decodes open theirs, none taken.
        steady.blocked = (rid, reason, needed, allocator.free, 0)
        allocator.step_evictions.clear()
        allocator.step_growth.clear()
        steady.blocked_counted += 1
        if mixed:
            flight = engine.flight = engine._start_counted(requests, n, cohort.start())
            mixed = False
        else:
            # `_start_counted`'s dispatch of every member, in the same flight.
            livelock.idle = 0  # (LivelockWatch.reset, inline)
            done, exact = ledger.decodes(t, n, cohort.start())
            flight.start, flight.done, flight.exact = t, done, exact
            engine.flight = flight
        # The step's look for folding (stepping.py's `_step_once`), then its check.
        done = flight.done
        if until - done < FOLD_AFTER * (done - t):
            steady.forget()
        elif steady.repeats(flight, before):
            fold(engine, flight, until, 0)
        allocator.check()
    # (The rotation point is the last call's, or the last `decodes_repeated`'s: the
    # starts between finishes run the same requests in the same order.)
    return False


def _start_heads(engine, t: int, decodes: list, cohort, until: float):
    """At the boundary `t` taken (a finish behind the blocked head), `decodes` every
    running request, a counted member each, in the order the policy's call would
    plan them: what the step does there if the policy admits the heads that fit
    (`Policy.admit_heads`): the dispatch started (admission.py's shape, else by
    `Engine._start`) and looked at for folding as the step looks at it (a
    dispatch with prompt rows repeats nothing: the next look compares with it,
    or with nothing if too short). Returns the flight, or None (nothing done but
    what the step clears before its call)."""
    steady = engine.steadiness
    allocator = engine.allocator
    steady.moved = False
    steady.blocked = None
    allocator.step_evictions.clear()
    allocator.step_growth.clear()
    chunks = engine.policy.admit_heads(decodes)
    if chunks is None:
        return None
    flight = start_admission(engine, decodes, chunks, cohort, True)
    if flight is None:
        flight = engine._start(DecodesFirst(decodes, chunks))
    engine.flight = flight
    steady.blocked_admitted += 1
    if until - flight.done < FOLD_AFTER * (flight.done - t):
        steady.forget()
    else:
        # (Answers no for a dispatch with prompt rows; kept for the next look to
        # compare with, as the step's look keeps it.)
        steady.repeats(flight, (steady.changes, None, ()))
    return flight
