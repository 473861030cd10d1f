"""What a fleet sets on one of its replicas (fleet/), and disaggregation's parking.

A lone engine reads its own trace; a replica of a fleet is `routed`: a router
hands it its arrivals (`Engine.accept`) and the cancellations and forced
preemptions of the requests it got (`Engine.accept_action`). Besides, the
fleet drivers tell the replica:
- `replica`: its number in the fleet (each request records it);
- `horizon`: the fleet's next arrival for it, where folding must stop;
- `lockstep_step`: under data-parallel lockstep, the step counter all ranks
  share (vLLM's step_counter, which the vllm policy's prefill cadence reads);
- `hooks`: under prefill/decode disaggregation (fleet/disagg.py), the
  fleet's callbacks, `prefilled(engine, req)` when a producer's prefill is
  recorded and `transfer(engine, req)` when a remote request admitted in
  this step starts its copy;
- `keys`: the prefix-cache keys a router computed for the request being
  handed over (`prefix-affinity` looks caches up with them), which the
  replica takes as that request's keys (`take_keys`) instead of computing
  them again;
- `cut`: the dispatch a step left in flight after folding, and the change
  log's count then (`cut_after`), for `resume`.
A remote request admitted in a step is `parking` until the step's plan is
made; `park` then takes it out of the policy to wait for its copy.

A fold stops at the fleet's next arrival (`horizon`), where the router may
read the replica or send it a request. When the arrival goes elsewhere and
nothing else reached the replica, the boundary where its last folded dispatch
completes holds nothing but that completion and the call that plans the same
decodes again (a repeat: nothing changed since the fold, whose premise is that
every call repeats until something outside happens). `resume` folds on from
that dispatch up to the new horizon instead, as one fold that had been given
the later horizon would have (its own checks for a finish, the free blocks and
the next outside event made again): no completion stepped, no call, no start.
Speed: on 64 prefix-affinity replicas replaying the first 2,000 Mooncake
requests under `vllm` with prefix caching, `schedule` called 4,809 times
instead of 5,714, 0.9886x the instructions (benchmarks/README.md,
"thirty-second steps", fl36); tests/test_fleet_carried.py compares resumed
folds with stepped replays.
"""
from __future__ import annotations

from typing import Any

from ..policies.base import DecodesFirst
from ..requests.request import LOADING, PARKING
from .fast.folding import fold

__all__ = ["FleetLink", "cut_after", "park", "resume"]


class FleetLink:
    """A replica's place in its fleet (all defaults for a lone engine)."""

    __slots__ = ("replica", "horizon", "lockstep_step", "hooks", "parking", "keys", "cut")

    def __init__(self) -> None:
        self.replica: int | None = None
        self.horizon = float("inf")
        self.lockstep_step: int | None = None
        self.hooks: Any = None
        self.parking: list = []  # remote requests admitted in the step being planned
        self.keys: Any = None    # a router's BlockKeys for the request handed over next
        self.cut: tuple | None = None  # (flight, change count) a step left folded

    def take_keys(self, req: Any) -> Any:
        """The keys the router computed for `req` (the request being handed over), now
        the replica's; None if none were (then the replica makes its own).

        Speed: `prefix-affinity` computes a request's keys to look the caches up
        (interning its hash chains), and the chosen replica computed the same keys
        again for its own look-up: 92 of 3,439 samples (2.7%) of the Mooncake
        replay on 64 replicas (sampled on SIGPROF). The same keys in the same
        order: `ensure` goes on from where the router stopped, and interns what
        it would have interned then. A radix tree's kept answer (`found`) is
        dropped: it was the router's look-up, not the replica's."""
        keys = self.keys
        if keys is None or keys.index != req.index:
            return None
        self.keys = None
        keys.found = None
        return keys


def park(engine: Any, plan: Any) -> Any:
    """Disaggregation: the remote requests admitted in this step leave the policy
    and wait for their prompt's KV (WAITING_FOR_REMOTE_KV); their copies start
    (the fleet's `transfer` hook) and their rows leave the plan. The policy gets
    them back as waiting requests when the copies land. Returns the plan left."""
    link = engine.link
    parked = [req for req in link.parking if req.remote == PARKING]
    link.parking = []
    if not parked:
        return plan
    allocator = engine.allocator
    for req in parked:
        engine.policy.remove(req)
        req.wait_for_remote_kv()
        req.remote = LOADING
        # Its blocks are its own, not the dispatch's rows' (for the snapshot).
        allocator.step_growth.pop(req.rid, None)
        allocator.step_evictions.pop(req.rid, None)
        engine.steadiness.changed()
        if link.hooks is not None:
            link.hooks.transfer(engine, req)
        else:
            engine.start_host_load(req)  # a load from host memory (host_moves.py)
    gone = set(parked)
    if type(plan) is DecodesFirst:
        return DecodesFirst([r for r in plan.decoders if r not in gone],
                            [row for row in plan.rest if row[0] not in gone])
    return [row for row in plan if row[0] not in gone]


def cut_after(engine: Any) -> tuple | None:
    """After a step of a replica that folded (the caller compares `Steadiness.folded`),
    what `resume` needs: (the dispatch in flight, the change log's count), if that
    dispatch runs decodes only and completes at or past the fleet's horizon (the
    fold was cut there: one stopped before a finish is not resumed), no head waits
    reported blocked (its look-up is part of the call), nobody listens and a
    boundary holds nothing else (`Steadiness.through`, fast/through.py); else None."""
    flight = engine.flight
    steady = engine.steadiness
    if (flight is None or flight.done < engine.link.horizon or not flight.all_decode
            or steady.blocked is not None or not steady.through
            or engine._emit is not None):
        return None
    return (flight, steady.changes)


def resume(engine: Any, horizon: float) -> bool:
    """At the boundary `engine.now` where the dispatch a step left folded (`cut`)
    completes, before its completion is taken: if nothing changed on the replica
    since that step, fold on from that dispatch up to the next outside event,
    `horizon` (the fleet's next arrival for it) or the replica's own (see the
    module). Returns whether it folded; if not, the boundary is the loop's (the
    completion, then the step), nothing having changed."""
    link = engine.link
    cut, link.cut = link.cut, None
    flight = engine.flight
    steady = engine.steadiness
    # (Defensive: `Fleet._step` sets `cut` afresh at every step, so the flight and
    # the change count are those of the step that cut the fold unless something
    # outside the fleet's loop touched the replica; a copy without these two tests
    # gave the same outputs on 600 random fleets, review rv36.)
    if (cut[0] is not flight or cut[1] != steady.changes or flight.done != engine.now
            or engine.livelock.tripped or engine.agenda.wakes):
        return False
    link.horizon = horizon
    folded = steady.folded
    fold(engine, flight, engine._until(), 0)
    if steady.folded == folded:
        return False
    if flight.done >= horizon:
        link.cut = (flight, steady.changes)  # (cut there again: `cut_after`)
    engine.allocator.check()  # (as at the end of a step)
    return True
