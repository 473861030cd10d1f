"""A fleet: several engines serving one trace, fed by a router.

Each replica is a whole `Engine` (its own policy, queues, KV allocator and
prefix cache) in routed mode: it reads nothing from the trace itself; the
fleet hands it each request it is to serve, at the request's arrival time,
and the cancellations and forced preemptions of those requests.

The fleet keeps one clock for all. At each time t at which anything happens
on any replica (E7, replica by replica), in this order:

1. every replica with a dispatch completing at t records its outputs (E1),
   in replica order;
2. the requests arriving at t are routed, in trace order: the router sees
   every replica as it is then (`routers.py`), and the chosen replica
   registers the request at once, so the next arrival of the same tick sees
   it queued;
3. every replica with something to do at t (a boundary of its own, or an
   arrival just routed to it) takes its cancellations, timeouts, forced
   preemptions and drains, and its policy admits and dispatches (E2, E3), in
   replica order.

A replica wakes only for its own events, never for an arrival routed to
another one; folding (E7.5) stops at the next arrival that may reach the
replica (`Router.reaches`): the fleet's next arrival, since any replica may
receive it, except under round-robin, which knows where each goes; where that
arrival went elsewhere, the fold goes on from the dispatch it left
(`engine/fleet_link.py`'s `resume`). A replica whose requests can never progress again
stalls when nothing is left to arrive (E6b), at the time the fleet learns it.

Summaries: one per replica (its requests, dispatches and blocks, with the
duration measured from the fleet's first arrival, so that replicas compare
on one window) and one for the fleet (every request's latencies pooled,
counts added; its peak_reserved and peak_allocated are the sums of the
replicas' peaks, an upper bound of the fleet's simultaneous peak).
"""
from __future__ import annotations

import dataclasses
from bisect import insort
from collections import deque
from itertools import islice
from typing import Any, Callable

from ..engine.core import Engine, RunResult
from ..engine.fast.through import may_carry_on
from ..engine.fleet_link import cut_after, resume
from ..engine.host_summary import host_summary, survival_counts
from ..engine.policy_failure import policy_failure
from ..engine.run_stats import RunStats
from ..kv.block_keys import BlockKeys
from ..records.clock import Clock
from ..records.events import Event
from ..records.options import Options
from ..records.workload import Workload
from ..requests.request import Request
from .replica_agenda import ReplicaAgenda
from .routers import Router, make_router

__all__ = ["Fleet", "FleetResult", "ReplicaView", "make_replicas", "run_guarded",
           "stall_the_stuck",
           "replica_summaries", "fleet_summary"]

INF = float("inf")


def make_replicas(workload: Workload, options: Options, policy: str, count: int,
                  on_event: Callable[[int], Callable[[Event], None] | None] | None,
                  keep_requests: bool, on_request_end: Callable[[int], Callable | None],
                  audit: bool, fast_forward: bool | None) -> list[Engine]:
    """`count` engines in routed mode, numbered; `on_event(i)` and `on_request_end(i)`
    give replica i's listeners. With an event listener they step every dispatch:
    records go out as they happen, replica after replica, and a folded stretch
    would write one replica's future ahead of the others' present."""
    if on_event is not None and count > 1:
        fast_forward = False
    engines = [Engine(workload, options, policy,
                      on_event=on_event(i) if on_event is not None else None,
                      keep_requests=keep_requests, on_request_end=on_request_end(i),
                      audit=audit, fast_forward=fast_forward, routed=True)
               for i in range(count)]
    for i, engine in enumerate(engines):
        engine.link.replica = i
    return engines


def run_guarded(engines: list[Engine], policy: str,
                run: Callable[[], FleetResult]) -> FleetResult:
    """`run()`, with whatever ends it sorted out as a lone engine does: under a plugin
    policy, a broken rule or anything the policy raised on any replica becomes the
    policy's PolicyError, at the fleet's latest time (engine/policy_failure.py)."""
    try:
        return run()
    except BaseException as exc:
        first = engines[0]
        now = max(engine.now for engine in engines)
        failure = policy_failure(exc, policy, not first.builtin_policy, first.clock, now)
        if failure is None:
            raise
        raise failure from None


def stall_the_stuck(engines: list[Engine], t: int) -> bool:
    """Nothing can happen any more anywhere: every replica's live requests stall (E6b)
    at `t`, or at a replica's later `now` (the last boundary of all: a replica's
    stretch carried on takes boundaries of its own past the fleet's time,
    engine/fast/through.py: stalled at `t`, a request would end before the stepped
    replay's, tests/test_fleet_carried.py); return whether any did."""
    stalled = False
    for engine in engines:
        if engine.now > t:
            t = engine.now
    for engine in engines:
        if engine.live:
            engine.now = t
            engine.stall()
            stalled = True
    return stalled


def replica_summaries(engines: list[Engine], first: int,
                      roles: list[str] | None = None) -> list[dict[str, Any]]:
    """Each replica's summary (§12), its duration from the fleet's `first` arrival."""
    out = []
    for i, engine in enumerate(engines):
        a = engine.allocator
        head = {"replica": i} if roles is None else {"replica": i, "role": roles[i]}
        out.append({**head, **engine.stats.summary(a.peak_reserved, a.peak_held, first)})
        if a.host is not None:
            out[-1].update(engine.host_fields(first))
    return out


def fleet_summary(engines: list[Engine], stats: RunStats, first: int) -> dict[str, Any]:
    """The fleet's summary from its pooled `stats`; its peaks are the sums of the
    replicas' (F4)."""
    summary = stats.summary(sum(e.allocator.peak_reserved for e in engines),
                            sum(e.allocator.peak_held for e in engines), first)
    if engines[0].allocator.host is not None:  # (every replica has its own)
        summary.update(host_summary([e.allocator.host for e in engines], stats.clock,
                                    stats.makespan - first))
    return summary


class ReplicaView:
    """One replica as a router reads it (see `routers.Replica`)."""

    __slots__ = ("index", "engine")

    def __init__(self, index: int, engine: Engine) -> None:
        self.index = index
        self.engine = engine

    @property
    def waiting(self) -> int:
        return self.engine.policy.waiting_count

    @property
    def running(self) -> int:
        return self.engine.policy.running_count

    @property
    def kv_usage(self) -> float:
        """The fraction of the KV pool not free (held or draining)."""
        a = self.engine.allocator
        return 1.0 - a.free / a.num_blocks

    def cached_blocks(self, keys: BlockKeys, max_blocks: int) -> int:
        """Leading blocks of a request this replica's prefix cache would hand it now;
        looking changes nothing (no recency is refreshed)."""
        return self.engine.allocator.peek(keys, max_blocks)

    def holds(self, key) -> bool:
        """Whether this replica's prefix cache has a block with `key` (held, free or
        draining): a look-up never finds a run past a key it lacks."""
        return key in self.engine.allocator.cache.index


@dataclasses.dataclass
class FleetResult(RunResult):
    """A fleet's run: the fleet's summary, and one summary per replica."""

    replicas: list[dict[str, Any]] = dataclasses.field(default_factory=list)


class Fleet:
    """Replays one workload on `options.replicas` engines under one policy.

    `on_event(replica)` gives the event listener of one replica (None: none);
    the other keywords are the Engine's and apply to every replica.
    `on_request_end` sees each replica's ends in that replica's time order, but
    not the fleet's: a replica carrying a stretch on up to the fleet's next
    arrival reports its finishes there before another replica's earlier ones
    (the CLI puts its per-request records back in arrival order).
    """

    def __init__(self, workload: Workload, options: Options, policy: str,
                 on_event: Callable[[int], Callable[[Event], None] | None] | None = None,
                 keep_requests: bool = True,
                 on_request_end: Callable[[Request], None] | None = None,
                 audit: bool = False, fast_forward: bool | None = None) -> None:
        self.policy_name = policy  # (the engines refuse options that cannot work)
        self.engines = make_replicas(workload, options, policy, options.replicas, on_event,
                                     keep_requests, lambda i: on_request_end, audit,
                                     fast_forward)
        first = self.engines[0]
        self.options = first.options  # the pool sized from the GPU, if it was
        self.clock: Clock = first.clock
        # A replica's boundaries hold nothing but its own events up to the fleet's next
        # arrival for it (`horizon`), where the router may read it or send it a request:
        # its steady stretches are carried on and its chunk runs folded as a lone
        # engine's, up to there (fast/through.py; a lockstep rank never folds).
        for engine in self.engines:
            engine.steadiness.through = may_carry_on(engine)
        self.workload = first_workload = workload.on_clock(self.clock)
        self.views = [ReplicaView(i, e) for i, e in enumerate(self.engines)]
        self.router = make_router(self.options)
        # The cancellations and forced preemptions of each request, handed to its
        # replica with it.
        self._actions: dict[str, list] = {}
        for action in first_workload.cancels + first_workload.preempts:
            self._actions.setdefault(action.id, []).append(action)
        self.routed = [0] * len(self.engines)  # requests each replica was sent
        # Each replica's load (waiting + running), for a router that reads them all
        # at every arrival (prefix-affinity): read again only from a replica
        # something happened on (`_refresh`), since the others did not change.
        # Speed: read at every arrival, 64 loads through two properties each were
        # about 3% of the Mooncake replay on 64 replicas (sampled).
        self.loads: list[int] | None = ([v.waiting + v.running for v in self.views]
                                        if self.router.reads_loads else None)

    def run(self) -> FleetResult:
        """Replay the workload; a plugin policy's failure on any replica is the
        policy's (`run_guarded`)."""
        return run_guarded(self.engines, self.policy_name, self._run)

    def _run(self) -> FleetResult:
        delay = self.clock.after(self.options.router_signal_delay)
        if delay:
            return self._run_stale(delay)
        engines = self.engines
        n = len(engines)
        specs = self.workload.arrivals()
        # The next arrivals, as many as there are replicas: a router that knows where
        # they go (round-robin) lets the others fold past them.
        upcoming = deque(islice(specs, n))
        t = first = upcoming[0].arrival if upcoming else 0
        agenda = ReplicaAgenda(n)     # each replica's next boundary
        router, views = self.router, self.views
        # Where each replica's fold stops: the next arrival for all, unless the
        # router knows where arrivals go (round-robin: `reaches`), then per replica.
        reaches = router.reaches
        horizon_of = (None if type(router).reaches is Router.reaches
                      else lambda i: reaches(i, upcoming, n))
        stalled = False
        while True:
            routing = bool(upcoming) and upcoming[0].arrival == t
            # 1. E1 (or a fold resumed: `_complete_due`)
            active = self._complete_due(agenda, t, routing,
                                        upcoming[0].arrival if upcoming else INF, horizon_of)
            while upcoming and upcoming[0].arrival == t:     # 2. routing
                spec = upcoming.popleft()
                later = next(specs, None)
                if later is not None:
                    upcoming.append(later)
                i = router.choose(spec, views, self.loads)
                self._join(spec, i, t, active, router.keys)
            horizon = upcoming[0].arrival if upcoming else INF
            stalled |= self._step(active, agenda, horizon, horizon_of)  # 3. E2, E3
            nxt = agenda.peek()
            if horizon < nxt:
                nxt = horizon
            if nxt == INF:
                stalled |= stall_the_stuck(engines, t)
                break
            t = nxt
        return self._result(first, stalled)

    def _run_stale(self, delay: int) -> FleetResult:
        """`_run` with the router reading the replicas as they were `delay` steps before
        each arrival (`router_signal_delay`): a request is routed at arrival - delay
        (at the first time of the run if that is earlier), by the replicas' state
        then (after that time's completions, before that time's arrivals join
        them), and joins its replica when it arrives. What the router reads is
        exact at the time it reads it, so the replicas' folded stretches stop at
        every routing time and every arrival."""
        engines = self.engines
        specs = self.workload.arrivals()
        upcoming = deque(islice(specs, 1))  # the next request to route
        routed: deque = deque()             # (request, replica, its keys) routed, not arrived
        first = upcoming[0].arrival if upcoming else 0
        t = max(0, first - delay)
        agenda = ReplicaAgenda(len(engines))
        router, views = self.router, self.views
        stalled = False
        while True:
            routing = bool(upcoming) and upcoming[0].arrival - delay <= t
            active = self._complete_due(agenda, t, routing)   # 1. E1
            while upcoming and upcoming[0].arrival - delay <= t:  # 2. routing, ahead
                spec = upcoming.popleft()
                later = next(specs, None)
                if later is not None:
                    upcoming.append(later)
                i = router.choose(spec, views, self.loads)
                routed.append((spec, i, router.keys))
            while routed and routed[0][0].arrival == t:      # 3. arrivals, routed before
                spec, i, keys = routed.popleft()
                self._join(spec, i, t, active, keys)
            horizon = min(routed[0][0].arrival if routed else INF,
                          upcoming[0].arrival - delay if upcoming else INF)
            # 4. E2, E3; every replica folds only up to the next routing or arrival
            # (the router reads them all).
            stalled |= self._step(active, agenda, horizon)
            nxt = agenda.peek()
            if horizon < nxt:
                nxt = horizon
            if nxt == INF:
                stalled |= stall_the_stuck(engines, t)
                break
            t = nxt
        return self._result(first, stalled)

    # --- one boundary of the fleet, in its order (F2) ----------------------------------

    def _complete_due(self, agenda: ReplicaAgenda, t: int, routing: bool,
                      horizon: float | None = None,
                      horizon_of: Callable[[int], float] | None = None) -> list[int]:
        """E1 on the replicas with a boundary of their own at `t`; returns them (the
        replicas active at `t` so far). Their loads are read again if requests are
        `routing` at `t`; if not, `_step` reads them after their steps.
        Given the next arrival `horizon` (or `horizon_of(i)` for replica i), when
        nothing is routed at `t`, a replica whose step left a fold cut at an
        arrival that went elsewhere folds on up to it instead (`resume`,
        engine/fleet_link.py) and is not active.

        Speed: two of three boundaries of the Mooncake replay on 64 replicas
        route nothing (34,768 boundaries, 12,031 arrivals); their loads were
        read twice: both reads were 37 and 59 of about 3,500 samples (SIGPROF,
        two runs)."""
        active = agenda.due(t)
        engines = self.engines
        resumed = None
        for i in active:
            engine = engines[i]
            engine.now = t
            if (engine.link.cut is not None and horizon is not None and not routing
                    and resume(engine, horizon if horizon_of is None else horizon_of(i))):
                agenda.set(i, engine.next_boundary(False))
                if resumed is None:
                    resumed = set()
                resumed.add(i)
                continue
            engine.complete_due()
        if resumed is not None:  # (not active at `t`; `active` stays in index order)
            active = [i for i in active if i not in resumed]
        if routing and self.loads is not None:
            self._refresh(active)
        return active

    def _refresh(self, replicas) -> None:
        """Read the loads of `replicas` again (they may have changed)."""
        loads = self.loads
        engines = self.engines
        for i in replicas:
            policy = engines[i].policy
            loads[i] = policy.waiting_count + policy.running_count

    def _join(self, spec, i: int, t: int, active: list[int], keys=None) -> None:
        """Request `spec` joins replica `i` at `t`, with the actions the trace holds
        for it and the prefix-cache `keys` the router computed for it, if any; `i`
        is active at `t` from now on (`active` stays in index order)."""
        engine = self.engines[i]
        if i not in active:
            insort(active, i)
            engine.now = t
        for action in self._actions.get(spec.id, ()):
            engine.accept_action(action)
        engine.link.keys = keys
        engine.accept(spec)
        engine.link.keys = None  # (taken, unless the replica had no use for them)
        self.routed[i] += 1
        if self.loads is not None:
            self._refresh((i,))

    def _step(self, active: list[int], agenda: ReplicaAgenda, horizon: float,
              horizon_of: Callable[[int], float] | None = None) -> bool:
        """E2 and E3 on each `active` replica (in index order), each folding up to
        `horizon`, or to `horizon_of(i)` if given; their next boundaries go to
        `agenda`. Returns whether one was found stuck in a livelock.

        Speed: the horizon is one number unless the router knows where arrivals
        go; before, a closure made at every boundary was called at every replica
        step (47,982 on 64 replicas replaying Mooncake), and `active` was sorted
        again (it is kept sorted: `ReplicaAgenda.due`, `_join`). With `due`'s list,
        64 round-robin replicas on the first 2,000 Mooncake requests took 0.998x
        the instructions (6.1778e9 -> 6.1636e9, callgrind; benchmarks/README.md,
        "thirteenth steps", helper flt9)."""
        stalled = False
        engines = self.engines
        for i in active:
            engine = engines[i]
            engine.take_outside_events()
            # (the watch is asked only once tripped, as a lone engine's loop does:
            # a call per replica step, 49,796 on 64 prefix-affinity replicas
            # replaying Mooncake; 1.2 million instructions of 8.48 billion on the
            # first 2,000 requests)
            if engine.livelock.tripped and engine.stall_if_livelocked():
                stalled = True
                agenda.set(i, INF)
                continue
            link = engine.link
            link.horizon = horizon if horizon_of is None else horizon_of(i)
            folded = engine.steadiness.folded
            moved = engine.step()
            # (A fold may be resumed at the completion it left: `_complete_due`.)
            link.cut = cut_after(engine) if engine.steadiness.folded != folded else None
            agenda.set(i, engine.next_boundary(moved))
        if self.loads is not None:
            self._refresh(active)
        return stalled

    def _result(self, first: int, stalled: bool) -> FleetResult:
        engines = self.engines
        per_replica = replica_summaries(engines, first)
        summary = fleet_summary(engines, RunStats.combined([e.stats for e in engines]), first)
        requests: list[Request] = []
        for engine in engines:
            requests += engine.requests.values() if engine.keep_requests else ()
        return FleetResult(self.policy_name, summary, requests, stalled, self.clock,
                           self.options, survival_counts([e.allocator.host for e in engines
                                                          if e.allocator.host is not None]),
                           per_replica)
