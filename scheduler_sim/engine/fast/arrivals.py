"""Through arrivals: a steady stretch of decodes carried on past the requests that join it.

Carried on through finishes (through.py), a steady stretch still ended at
every arrival: the engine went back to its loop, which took the arrival's
boundary, completed the dispatch in flight, asked the policy (`schedule`: it
admits the newcomer and plans the decodes and the newcomer's prompt), ran
that mixed dispatch, completed it, asked the policy again (the first
dispatch of decodes with the newcomer), and only at the next boundary
folded again. On the Azure conversation trace under `continuous` that was
three boundaries of the loop and two `schedule` calls for each of the 19,366
requests.

When the policy is at a fixed point (`Policy.repeats_decodes`) and the next
outside event is an arrival (nothing else is due before the dispatch in
flight completes), `admit_through` takes the boundaries as the loop would:
the arrivals inside the dispatch (E2; nothing else happens there while it
runs), its completion (E1) and the arrivals at that tick. Then the policy
is told the decodes it would repeat and asked whether its call would admit
every waiting request whole (`Policy.admit_arrivals`: it fits, and its
whole prompt is one chunk beside the decodes). If so, the policy admits it
as its call would, and the engine starts the mixed dispatch. When that one
completes (`after_admission`), every running request decodes: the policy
gives their order (`Policy.next_decodes`) instead of being called, and the
stretch is folded again. Whenever the policy declines, or after the
boundary is taken something other than arrivals needs its call, the
engine's step plans the boundary it took (`carry_on` returns True: the
step runs again at the new tick), so the results are the loop's, field for
field; with an event listener each boundary writes what the loop's would.
tests/test_fold_arrivals.py compares them with stepped replays.

An arrival may also come by the completion of the mixed dispatch itself (in
tick mode, often one tick after the one before): then `admit_after_prompts`
takes those boundaries and, if every running request decodes next, asks the
policy the same question with the decodes in the order it gives
(`Policy.decode_order`).
"""
from __future__ import annotations

from ...policies.base import DecodesFirst
from ...records.events import Snapshot
from ...records.states import RequestStatus
from .admission import AdmissionFlight, complete_admission, start_admission
from .counted_fold import start_counted_run
from .folding import FOLD_AFTER, fold

__all__ = ["NO", "AGAIN", "STARTED", "COUNTED", "admit_after_prompts", "admit_through",
           "after_admission", "decoding_next", "only_arrivals", "take_boundaries"]

RUNNING = RequestStatus.RUNNING

# What a path below did: nothing (the engine's loop takes the next boundary),
# took a boundary whose step the policy must plan (the step runs again), or took
# it and started the next dispatch itself (COUNTED: every running request's
# decode, a counted member, the policy at its fixed point: `carry_counted`'s).
NO, AGAIN, STARTED, COUNTED = 0, 1, 2, 3


def only_arrivals(engine, until: float, t: int) -> bool:
    """Whether the next outside event, at `until`, is an arrival, and nothing but
    arrivals happens at the boundaries up to the completion at `t` of the
    dispatch in flight (no cancellation or forced preemption due by then, no
    drain, no livelock to stop). (Timeouts, host memory and client slots never
    come with a stretch carried on: through.py's `may_carry_on`.)"""
    agenda = engine.agenda
    spec = agenda.next_arrival
    if spec is None or spec.arrival != until or engine.livelock.tripped \
            or engine.allocator.draining:
        return False
    w = engine.workload
    due = w.cancels
    if agenda.cancel_at < len(due) and due[agenda.cancel_at].at <= t:
        return False
    due = w.preempts
    return not (agenda.preempt_at < len(due) and due[agenda.preempt_at].at <= t)


def take_boundaries(engine, t: int, counted: bool = False) -> list | None:
    """The loop's boundaries up to the completion at `t` of the dispatch in flight,
    when only arrivals happen there (`only_arrivals`): at each arrival inside it,
    E2 (the step has nothing to do while a dispatch runs); at `t`, E1 and E2.
    What is left of the boundary at `t` is its step. `counted`: the flight runs
    counted members only (completed by `complete_counted`: those that finish
    are returned)."""
    agenda = engine.agenda
    spec = agenda.next_arrival
    if spec is not None and spec.arrival < t:
        # E2 at each arrival inside the dispatch, as `take_outside_events` takes it
        # there: the arrivals at that tick, then the livelock count reset; a dispatch
        # in flight defers the rest, and `only_arrivals` found nothing draining (no
        # host memory or clients with a stretch carried on). Speed: one call and
        # its tests fewer per arrival (about 18,000 on the Azure trace).
        livelock = engine.livelock
        check = engine.allocator.check
        arrive = engine.roster.arrive
        while spec is not None and spec.arrival < t:
            now = engine.now = spec.arrival
            agenda.take_arrivals(now, arrive)
            spec = agenda.next_arrival
            livelock.idle = 0  # (LivelockWatch.reset, inline)
            check()  # (as the step of a boundary inside a dispatch)
    engine.now = t
    # (`complete_now`'s choice, known when counted: 15,309 calls fewer on Azure)
    ended = engine.complete_counted(engine.flight) if counted else engine.complete_now()
    spec = agenda.next_arrival
    if engine.allocator.draining:
        engine.take_outside_events()
    elif spec is not None and spec.arrival == t:
        # E2 at `t`, nothing in flight: what `take_outside_events` does here, as
        # inside the dispatch (`only_arrivals` found no cancellation or forced
        # preemption due by `t`). Speed: without a cost model a dispatch lasts a
        # tick, so an arrival cuts one at its completion: 70,733 calls fewer on
        # 100,000 generated requests (benchmarks/README.md, "twelfth steps ... mil8").
        agenda.take_arrivals(t, engine.roster.arrive)
        engine.livelock.idle = 0  # (LivelockWatch.reset, inline)
    # Else E2 at `t` has nothing to take (and no call: about 18,000 on the Azure
    # conversation trace, where an arrival nearly always falls inside the dispatch).
    return ended


def admit_through(engine, until: float, requests: list, counted: bool) -> int:
    """The flight in flight runs `requests`, every running request's decode, while
    the policy repeats them, and completes at or after `until`, the next outside
    event. If that event is an arrival and only arrivals come by the completion,
    take those boundaries, and at the completion let the policy admit the waiting
    requests whole beside the survivors' decodes (`Policy.admit_arrivals`) and
    start that dispatch (see the module). Returns NO, AGAIN or STARTED.
    `counted`: the flight runs members only, `requests` every member."""
    flight = engine.flight
    t = flight.done
    if not only_arrivals(engine, until, t):
        return NO
    ended = take_boundaries(engine, t, counted)
    cohort = engine._cohort
    if counted:
        survivors = cohort.survivors(requests, ended)
    else:
        survivors = [req for req in requests if req.status is RUNNING]
    if not survivors:
        return AGAIN
    return _admit(engine, t, survivors, cohort, counted)


def admit_after_prompts(engine, until: float) -> int:
    """The flight has prompt rows (admitted by `admit_through`, or planned by the
    policy with nothing waiting after it: through.py's `carries_on`) and the next
    outside event, at `until`, comes by its completion. If that event is an
    arrival and only arrivals come by the completion, take those boundaries; then,
    if the policy was at its fixed point before they came and every running
    request decodes next, let it admit the waiting requests whole beside those
    decodes, in the order it gives (`Policy.decode_order`), as at an arrival
    into a stretch of decodes (`admit_through`). Returns NO, AGAIN or STARTED.

    Speed: in tick mode an arrival often comes at the completion of the
    admission before it (one tick later); the policy's `schedule` was called
    there (5,443 of the 10,499 calls on the first 20,000 generated requests
    under `continuous`, 2,954 of the 3,490 on the Azure conversation trace,
    where a prompt's dispatch is long)."""
    flight = engine.flight
    t = flight.done
    if not only_arrivals(engine, until, t):
        return NO
    policy = engine.policy
    fixed = policy.repeats_decodes()  # (before the arrivals: nothing waits yet)
    take_boundaries(engine, t)
    cohort = engine._cohort
    if not fixed or (running := decoding_next(engine, flight, policy, cohort)[0]) is None:
        return AGAIN
    order = policy.decode_order()
    if not order or len(order) != policy.running_count:
        return AGAIN
    # (True: each running request a member, once in the order: `start_admission` trusts it)
    return _admit(engine, t, order, cohort, running is True)


def _admit(engine, t: int, decodes: list, cohort, members: bool = False) -> int:
    """At the boundary `t` taken, requests waiting and `decodes` the running
    requests in the order the policy repeats them (`members`: known to be the
    cohort's members, every one): start the dispatch of those decodes and the
    waiting requests' whole prompts if the policy admits them so
    (`Policy.admit_arrivals`); AGAIN if it declines (its call plans the boundary)."""
    allocator = engine.allocator
    steady = engine.steadiness
    allocator.step_evictions.clear()
    allocator.step_growth.clear()
    steady.moved = False
    steady.blocked = None
    chunks = engine.policy.admit_arrivals(decodes)
    if chunks is None:
        return AGAIN  # the policy's call plans this boundary
    # The cohort's members and whole fresh prompts: started from that shape
    # (admission.py), else by the stepped pipeline.
    flight = start_admission(engine, decodes, chunks, cohort, members)
    if flight is None:
        plan = (DecodesFirst(decodes, chunks) if cohort is not None
                else [(req, 1) for req in decodes] + chunks)
        emit = engine.listener
        if emit is not None:
            emit(Snapshot(t, **engine._state(plan)))  # as the step writes it
        flight = engine._start(plan)
    engine.flight = flight
    steady.forget()  # (a dispatch with prompt rows repeats nothing)
    return STARTED


def decoding_next(engine, flight, policy, cohort) -> tuple:
    """After the completion of `flight`, a dispatch with prompt rows: (the running
    requests if every one decodes next, else None; how many, if every one is a
    counted member, else 0; the blocks their decodes open)."""
    members = cohort.members if cohort is not None else ()
    everyone = len(members)
    if everyone and everyone == policy.running_count:
        # Every running request a counted member (the newcomers joined as their
        # prompts' last chunks completed): their decodes open the blocks of one
        # residue group. Speed: no pass over the rows (two an arrival before), the
        # decodes started counted (`after_admission`): 4.8% fewer instructions on
        # 20,000 generated requests (test_fold_arrivals.py counts this path).
        return True, everyone, cohort.opening()
    requests = (flight.requests if flight.requests is not None
                else [r for r, _ in flight.rows])
    running = [req for req in requests if req.status is RUNNING]
    if len(running) != policy.running_count or not all(
            req.resident >= req.prompt_tokens and req.resident >= req.restore
            for req in running):  # (Request.plain_decode, inlined)
        return None, 0, 0  # not every running request decodes next (a chunk goes on)
    if not running:
        return running, 0, 0
    # The blocks the decodes open must be free (else the policy would preempt).
    size = engine.allocator.block_size
    opening = cohort.opening() if cohort is not None else 0
    opening += sum(1 for req in running if req not in members and not req.resident % size)
    return running, 0, opening


def after_admission(engine, until: float) -> tuple[int, float]:
    """The flight is the dispatch `admit_through` started, or one with prompt rows
    the policy planned with nothing waiting after it (through.py's
    `carries_on`), and completes before the next outside event: complete it
    (E1) and, if every running request now
    decodes and the policy is at a fixed point, start their decodes in the order
    it gives (`Policy.next_decodes`) and fold them. Returns NO, AGAIN, STARTED
    or COUNTED (started, every running request a counted member: the policy's
    `repeats_decodes` held and its decodes are every member), and when started
    the next outside event after the start (the stretch's new `until`: nothing
    moves it before the caller goes on). `until`: the next outside event as
    seen when the flight started (nothing outside has happened since)."""
    flight = engine.flight
    if engine.livelock.tripped:
        return NO, 0
    t = flight.done
    engine.now = t
    # E1, as the loop does it (`complete_now`: a flight with prompt rows)
    if type(flight) is AdmissionFlight:
        complete_admission(engine, flight)
    else:
        engine.complete_due()
    policy = engine.policy
    cohort = engine._cohort
    allocator = engine.allocator
    running, everyone, opening = decoding_next(engine, flight, policy, cohort)
    if running and policy.repeats_decodes():
        order = policy.next_decodes() if allocator.fits_counted(opening) else None
        if order is not None:
            allocator.step_evictions.clear()
            allocator.step_growth.clear()
            if everyone and len(order) == everyone and everyone <= engine.options.max_rows:
                # The policy's decodes are every member (the running requests, as
                # many): started counted, as `_start` finds them (`_start_members`).
                engine.steadiness.arrivals_counted += 1
                if (engine.ledger.cost is not None and not engine.agenda.wakes
                        and everyone <= engine.options.token_budget):
                    start_counted_run(engine, t, order, until)  # (counted_fold.py)
                    return COUNTED, until
                # (a listener's snapshot: written with the dispatch, as one text)
                counts = engine._counts() if engine._emit is not None else None
                flight = engine.flight = engine._start_counted(order, everyone,
                                                               cohort.start(), counts)
                rows = engine.started_rows if counts is not None else None
                started = COUNTED
            else:
                plan = (DecodesFirst(order, []) if cohort is not None
                        else [(r, 1) for r in order])
                emit = engine.listener
                if emit is not None:
                    emit(Snapshot(t, **engine._state(plan)))
                flight = engine.flight = engine._start(plan)
                rows = None
                started = STARTED
            engine.steadiness.repeated(order)
            if engine.agenda.wakes:
                until = engine._until()
            # Else as at the flight's start: nothing outside happened since, and
            # without wakeups (host memory, timeouts, a drain: never here) the next
            # outside event does not depend on the time. Speed: one `_until` fewer an
            # arrival (18,000 on the Azure trace).
            if not (flight.members
                    and until - flight.done < FOLD_AFTER * (flight.done - flight.start)):
                fold(engine, flight, until, 0, rows)  # (rows: the text just written)
            return started, until
    engine.take_outside_events()  # (nothing is due before the next outside event)
    return AGAIN, 0
