"""Through finishes: a steady stretch of decodes carried on past the requests that end in it.

A fold (folding.py) stops before the completion that finishes a request: the
next dispatch has one row less, and the engine used to go back to its loop
to learn what the policy plans next (its `schedule`, then a dispatch to see
the new plan repeat, then a fold). On a trace where nothing waits, that is
two or three dispatches run through the whole pipeline for every request
that ends (about 18,000 of the 68,500 dispatches stepped on the Azure
conversation trace under `continuous`).

A built-in policy that knows it is at a fixed point says so
(`Policy.repeats_decodes`): nothing waits, and until something outside
happens every `schedule` call would plan the same decodes, in the same order,
less those that finished. Then `carry_on` does what the engine's loop would
do at each of the boundaries that follow, up to the next outside event, with
that knowledge: the completion (E1, as the loop does it: outputs, finished
requests, their blocks released), no outside event (none is due before
`until`), and the start of the survivors' decodes (the policy is told,
`decodes_repeated`, instead of asked), folded again when the stretch is
long enough. The results are the loop's, field for field
(tests/test_fold_through.py compares them with stepped replays).

It applies only where a boundary holds nothing else: a lone engine or a
replica of a plain fleet (fleet/fleet.py: its stretch stops at the fleet's
next arrival for it, `FleetLink.horizon`; not under lockstep or
disaggregation), no state callback, no client slots, no waiting timeout, no
release delay, no host memory, a built-in policy. With an event listener, each
boundary writes what the loop's would: the finished requests' records, then
the snapshot and the dispatch (or the folded stretch's lines); records of the
blocks the start takes (`evicted`) come after the snapshot, where the loop
writes them when the engine's start takes the blocks, so a policy whose call
takes them itself does not promise a fixed point with a listener (`vllm`
under prefix caching: `Policy.repeats_decodes`).

Behind a queue head blocked by credits, a policy that promises the head and
its plan hold through arrivals (`Policy.repeats_blocked`) has its boundaries
taken the same way, asked again after each finish (blocked.py; not with a
listener).
"""
from __future__ import annotations

from operator import attrgetter

from ...policies.base import DecodesFirst
from ...records.events import Snapshot
from ...records.states import RequestStatus
from .arrivals import AGAIN, NO, STARTED, admit_after_prompts, admit_through, after_admission
from .behind import carry_behind
from .blocked import carry_blocked
from .finishes import BACK, carry_counted
from .folding import FOLD_AFTER, fold

__all__ = ["carries_on", "carry_on", "may_carry_on"]

INF = float("inf")
RUNNING = RequestStatus.RUNNING
_resident = attrgetter("resident")


def may_carry_on(engine) -> bool:
    """Whether a boundary of this engine can ever hold nothing but a completion and
    the next start (see the module); a lone engine's or a plain fleet's replica's
    (whether it is one, the caller knows: engine/core.py, fleet/fleet.py)."""
    options = engine.options
    return (engine.steadiness.enabled and engine.builtin_policy
            and engine._on_state is None
            and engine.clients is None and options.waiting_timeout is None
            and not options.release_delay and not options.host
            and engine.link.hooks is None)


def carries_on(engine, flight) -> bool:
    """Whether the flight a step just started may be carried on: it is all decodes,
    or it has prompt rows, nothing waits, and the policy is at its fixed point
    (the prompts end in it: the decodes after it start without a call,
    arrivals.py's `after_admission`; on the first 2,000 requests of the Azure
    conversation trace under `vllm`, 4.7% fewer instructions; `schedule` calls
    on 20,000 generated requests under `continuous` 10,499 instead of 15,232);
    or its call reported a blocked head and the flight has counted members
    (blocked.py asks the policy; without members it would return at once:
    asked anyway, 0.7% more instructions under `sglang` on the first 2,000
    Mooncake requests, benchmarks/README.md, "twenty-second steps", review).
    With no head reported blocked, only counted decoders or a policy at its fixed
    point are carried on (`carry_on` would find nothing else to do: asked there,
    a fleet's replicas under vllm with prefix caching paid 1.0028x the
    instructions of the first 2,000 Mooncake requests on 64 prefix-affinity
    replicas; the counted ones asked here, 1.0017x those of the Azure trace under
    `continuous` with `--events`; benchmarks/README.md, "thirty-second steps",
    fl36)."""
    policy = engine.policy
    steady = engine.steadiness
    if steady.blocked is None:
        return ((flight.all_decode and flight.members)  # (counted: `carry_on` asks)
                or (flight.all_decode or not policy.waiting_count) and policy.repeats_decodes())
    return (flight.all_decode or flight.members
            or (steady.behind and flight.rows is not None and flight.outputs == len(flight.rows))
            or (not policy.waiting_count and policy.repeats_decodes()))


def carry_on(engine, until: float, looked: bool = True) -> bool:
    """The flight just started (and perhaps folded) is all decodes: while the
    policy repeats its decodes and the flight completes before `until` (the next
    outside event), complete it and start the survivors' decodes, folding each
    stretch long enough (see the module); past arrivals too (arrivals.py).
    `looked`: the step already looked at the flight for folding; if not, and
    the policy is at a fixed point, it is folded first (`_fold_fixed_point`).
    Returns True when it took a boundary (E1 and E2 done) whose step is still to
    be planned by the policy: the caller steps again at the engine's `now`."""
    policy = engine.policy
    allocator = engine.allocator
    cohort = engine._cohort
    steady = engine.steadiness
    emit = engine.listener
    size = allocator.block_size
    if steady.blocked is not None:
        # The call reported its queue head blocked: requests wait, so the policy is
        # not at its fixed point; it may promise the head stays blocked through
        # arrivals (blocked.py; only for counted members: `carries_on`), or make
        # the call due at the next finish itself (behind.py: written rows).
        if engine.flight.members:
            carried = carry_blocked(engine, until)
            if carried is not None:
                return carried
        elif steady.behind and not engine.flight.all_decode:
            return carry_behind(engine, until)  # (every row emits: `carries_on`)
    if not looked and engine.flight.all_decode:
        _fold_fixed_point(engine, until)
    while True:
        flight = engine.flight
        t = flight.done
        if not flight.all_decode:
            # The dispatch that admitted arrivals (arrivals.py).
            if t >= until:
                done = admit_after_prompts(engine, until)
                if done != STARTED:
                    return done == AGAIN
                until = engine._until()
            else:
                done, until = after_admission(engine, until)
                if done == NO or done == AGAIN:
                    return done == AGAIN
            continue
        counted = flight.members and not flight.decoders  # every row a cohort member
        requests = flight.requests if flight.members else flight.decoders
        if requests is None or len(requests) != policy.running_count:
            return False
        if not policy.repeats_decodes():
            # Requests wait: behind a head reported blocked, written decodes may be
            # carried on through their finishes by the policy's own call (behind.py).
            return (steady.behind and steady.blocked is not None and not flight.members
                    and carry_behind(engine, until))
        if counted:
            # Every row a counted member: its boundaries in one loop, through
            # finishes and arrivals the policy admits (finishes.py, which writes a
            # listener's lines), as long as every running request stays a member.
            done, until = carry_counted(engine, until)
            if done != BACK:
                return done == AGAIN
            continue
        if t >= until:
            # The next outside event comes first: arrivals the policy may admit
            # without breaking the stretch (arrivals.py).
            done = admit_through(engine, until, requests, counted)
            if done != STARTED:
                return done == AGAIN
            until = engine._until()
            continue
        # The blocks the next decodes open must be free (a policy short of them
        # would preempt): the survivors' are at most these.
        opening = cohort.blocks_within(1) if flight.members else 0
        opening += sum(1 for r in map(_resident, flight.decoders) if not r % size)
        if opening > allocator.free:
            return False
        engine.now = t
        engine.complete_now()  # E1, as the loop does it
        survivors = [req for req in requests if req.status is RUNNING]
        if not survivors:
            return False
        policy.decodes_repeated(survivors)
        allocator.step_evictions.clear()
        allocator.step_growth.clear()
        plan = (DecodesFirst(survivors, []) if cohort is not None
                else [(req, 1) for req in survivors])
        if emit is not None:
            emit(Snapshot(t, **engine._state(plan)))  # as the step writes it
        flight = engine.flight = engine._start(plan)
        steady.repeated(survivors)
        until = engine._until()  # (the same: nothing a finish sets is outside)
        if flight.members and until - flight.done < FOLD_AFTER * (flight.done - flight.start):
            continue  # too short to be worth a fold: the next boundary, here too
        fold(engine, flight, until, 0)


def _fold_fixed_point(engine, until: float) -> None:
    """The step just planned a dispatch of decodes that its steadiness could not
    call a repeat (the dispatch before it had other rows: the first decodes
    after an admission, say). If it runs every running request and the policy
    is at a fixed point (`repeats_decodes`), every call up to the next outside
    event or finish would plan it again: it is folded now, rather than after
    one more dispatch carried on (one stepped dispatch fewer per arrival:
    19,366 of the 66,381 on the Azure conversation trace under `continuous`)."""
    flight = engine.flight
    requests = flight.requests if flight.members else flight.decoders
    policy = engine.policy
    if (requests is None or len(requests) != policy.running_count
            or not policy.repeats_decodes()):
        return
    engine.steadiness.repeated(requests)
    fold(engine, flight, until, 0)
