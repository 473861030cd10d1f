"""The engine: the clock, the order of events at a tick, and every request's life.

At each boundary tick t, in this order (§4):
  E1  the dispatch completing at t records its outputs; requests that produced
      their last output finish (their `finished` records come first);
  E2  requests arriving at t are registered, in trace order, and those that
      could never be served are rejected (E6); then cancellations at t;
  E3  then forced preemptions, then draining blocks whose delay has expired
      are released, then the policy admits and builds the next dispatch.
Cancellations and preemptions that fall inside an in-flight dispatch wait for
its completion boundary (E4). Between boundaries nothing happens, and the
clock jumps straight to the next one (E7), so the cost of a run grows with
its dispatches and events, never with the idle ticks between them.

Time is counted in whole clock steps (`records/clock.py`): the workload's times are
converted once, and a dispatch lasts one step without a cost model; with
one it completes at the first step at or after its exact modelled end, and
the next dispatch starts from that exact time, so rounding never adds up. With `max_concurrency`,
a request reaches the server (is "sent") only when a client slot is free
(`requests/clients.py`); until then the policy does not know it exists.

The engine is the `SchedulerView` its policy sees: `admit`, `report_blocked` and
`preempt` are how a policy's decisions become transitions and events.

`Engine` is written in three modules: this one holds its state, the loop and
the step protocol fleets drive; lifecycle.py how requests move between states
(the SchedulerView calls, arrivals, cancellations, timeouts, the spilled
queue); dispatching.py how a plan is started and completed. What a dispatch
adds to the run is the ledger's (ledger.py), folding is folding.py's.
"""
from __future__ import annotations

import dataclasses
import operator
from collections import deque
from functools import partial
from itertools import compress
from typing import Any, Callable, Iterator

from ..gpu.costmodel import CostModel
from ..gpu.kv_pool import fit_pool
from ..gpu.run_cost import clock_for, cost_model_for
from ..kv.allocator import BLOCK_BYTES, MAX_REQUEST_BLOCKS, BlockAllocator, blocks_for
from ..policies import Plan, PluginError, is_builtin, is_builtin_name, make_policy
from ..policies.base import DecodesFirst
from ..records.clock import Clock
from ..records.errors import InvariantError, UsageError
from ..records.events import Event, Evicted, Released, Snapshot, Stalled, reads
from ..records.options import Options
from ..records.states import RequestStatus
from ..records.workload import Action, RequestSpec, Workload
from ..requests.clients import ClientSlots
from ..requests.request import LOADED, LOADING, PARKING, Request
from .cohort import Cohort
from .dispatching import Dispatching, InFlight
from .folding import fold
from .ledger import DispatchLedger
from .lifecycle import Lifecycle, request_of
from .policy_failure import policy_failure, shown
from .spill import Spill
from .summary import RunStats

__all__ = ["Engine", "RunResult", "run", "request_of"]

RUNNING = RequestStatus.RUNNING
INF = float("inf")
_first = operator.itemgetter(0)
_status = operator.attrgetter("status")
_is_running = partial(operator.is_, RUNNING)


@dataclasses.dataclass
class RunResult:
    """What one policy's replay produced."""

    policy: str
    summary: dict[str, Any]
    requests: list[Request]
    stalled: bool
    clock: Clock = dataclasses.field(default_factory=Clock)  # the run's time unit
    options: Options | None = None  # as run: num_blocks derived from the GPU if it was


class Engine(Lifecycle, Dispatching):
    """Replays one workload under one policy.

    `on_event` receives every event record as it happens (None: build none;
    one that reads no `evicted` records, `records.events.reads`, lets the
    allocator skip what those records need).
    Steady stretches of pure decode dispatches are folded (`fast_forward`),
    with the same results and the same event records, unless `on_state` or
    `audit` is set; `fast_forward=False` forbids it.
    `on_state(tick, state, after_dispatch)` receives the block counts at every
    boundary, after admission, and again after the dispatch allocated its
    blocks (used by `check` for `at` expectations). `audit` runs the full
    O(blocks) conservation audit at every boundary (tests).
    `keep_requests=False` keeps only live requests (the result then carries no
    request records) and lets a long FCFS queue's tail be spilled;
    `on_request_end(request)` is called as each request reaches its end.
    """

    def __init__(self, workload: Workload, options: Options, policy: str,
                 on_event: Callable[[Event], None] | None = None,
                 on_state: Callable[[int, dict[str, int], bool], None] | None = None,
                 audit: bool = False, fast_forward: bool | None = None,
                 keep_requests: bool = True,
                 on_request_end: Callable[[Request], None] | None = None,
                 routed: bool = False) -> None:
        if options.problems():
            raise UsageError("; ".join(options.problems()))
        if options.disagg and not routed:
            raise UsageError("prefill_replicas and decode_replicas need a disaggregated "
                             "fleet (replay runs one); one engine cannot replay them")
        options, self.pool = fit_pool(options)
        self.options = options
        self.clock = clock = clock_for(options)
        # (A replica's own workload is made below: it converts nothing here.)
        self.workload = workload.on_clock(clock) if not routed else workload
        # Durations in clock steps: a drain must have passed (rounded up); a
        # timeout must be exceeded (rounded down, so "longer than" stays exact).
        self.release_delay = clock.after(options.release_delay)
        self.waiting_timeout = (None if options.waiting_timeout is None
                                else clock.before(options.waiting_timeout))
        _check_bookkeeping(workload, options)
        # A replica of a fleet (fleet/): a router hands it its arrivals (`accept`) and
        # the cancellations and forced preemptions of the requests it got
        # (`accept_action`); the workload is only checked, never read.
        self.routed = routed
        self.horizon = INF  # the fleet's next arrival: folding stops there
        self.replica: int | None = None  # this engine's number in a fleet
        # Under data-parallel lockstep, the step counter all ranks share (vLLM's
        # step_counter), which the vllm policy's prefill cadence reads; else None.
        self.lockstep_step: int | None = None
        named = workload.named_ids()
        if routed:
            self.workload = Workload()
            self.workload.cancels, self.workload.preempts = [], []
        self.allocator = BlockAllocator(options.num_blocks, options.block_size,
                                        options.prefix_caching, compact=routed)
        if on_event is not None and options.prefix_caching and reads(on_event, "evicted"):
            # Report whose cached blocks are handed out again (evicted).
            self.allocator.track_evictions(
                lambda rid, writer, block: on_event(Evicted(self.now, rid, writer, block)))
        cost = cost_model_for(options) if options.has_cost_model else None
        self.clients = (ClientSlots(options.max_concurrency)
                        if options.max_concurrency is not None else None)
        self.policy_name = policy
        try:
            self.policy = make_policy(policy, options, self)
        except PluginError as exc:  # no such file, module or class: the user's spelling
            raise UsageError(str(exc)) from None
        except BaseException as exc:  # a plugin's import or constructor failed
            failure = policy_failure(exc, policy, not is_builtin_name(policy), self.clock, 0)
            if failure is None:
                raise
            raise failure from None
        if self.allocator.cache is not None:
            self.allocator.cache.duplicates = bool(self.policy.caches_duplicate_blocks)
            self.allocator.cache.tree = bool(self.policy.radix_eviction)
        # A policy from outside the package has every decision checked, and its
        # failures are reported as the policy's (PolicyError), not as ours.
        self._plugin = not is_builtin(self.policy)
        self.builtin_policy = not self._plugin
        self.now = 0
        self._emit = on_event
        self._on_state = on_state
        self._audit = audit
        # Folding steady decode stretches (folding.py) changes nothing a
        # summary or the event stream shows; the per-boundary state callback and
        # the audit want every boundary for real, so with them it is off.
        if fast_forward is None:
            fast_forward = on_state is None and not audit
        self._fast_forward_on = fast_forward
        self.folded = 0  # dispatches applied by folding, for tests and benchmarks
        # Steady decoders counted rather than written (cohort.py), when nobody
        # watches each dispatch and the policy does not read their progress.
        self._cohort = (Cohort(options.block_size)
                        if fast_forward and on_event is None and on_state is None
                        and not options.prefix_caching and not self._plugin
                        and self.policy.lazy_decoders else None)
        # A policy with lazy decoders may then plan its decodes as its own list.
        self.takes_decodes_first = self._cohort is not None
        self.flight: InFlight | None = None  # the dispatch being executed
        self._cursor = (0, 0, 0)  # arrivals, cancellations and forced preemptions taken
        self._specs: Iterator[RequestSpec] = iter(())  # the arrivals still to come ...
        self._next_spec: RequestSpec | None = None     # ... and the first of them
        # The requests of the run: all of them (`keep_requests`, for the result),
        # or only the live ones and those a cancel or preempt names, so that a
        # long trace replays in memory bounded by what is live.
        self.requests: dict[str, Request] = {}
        self._keep_requests = keep_requests
        self._named = named
        self._on_request_end = on_request_end
        # Spilling (bounded memory): past SPILL_AFTER held waiting requests (or
        # twice max_rows), new arrivals join the policy's FCFS queue as a count and
        # are built again from the trace when they near the head. Only when no
        # request is kept, named by an action, timed out or sent by a client.
        self._spill: Spill | None = None
        if (not keep_requests and self.clients is None and self.waiting_timeout is None
                and not self._named and not routed):
            queue = self.policy.spill_queue()
            if queue is not None:
                self._spill = Spill(queue, max(SPILL_AFTER, 2 * options.max_rows),
                                    self.workload.arrivals)
        self._arrived = 0  # arrivals taken from the trace
        self.stats = RunStats(clock, options.slo)
        # Every dispatch's statistics, timing and output gaps (ledger.py).
        self.ledger = DispatchLedger(self.stats, cost, clock)
        self._live = 0            # registered requests not yet ended
        self._policy_moved = False  # the policy admitted or preempted in this schedule
        self._step_block: tuple[str, str, int, int, int] | None = None  # this step's blocked head
        # Steadiness (`_repeats`): a count of everything that changes what a
        # policy sees besides decoding progress, and the last plan's request ids
        # and blocked head.
        self._changes = 0
        # The requests of the last dispatch planned (None unless all decodes), the
        # head it reported blocked, and the change count after its call (see
        # `_repeats`).
        self._seen: tuple[list[Request] | None, tuple | None, int] | None = None
        self._admit_seq = 0
        # Rows replayed since a dispatch last wrote a useful row, and the most
        # that may be replayed before the schedule is known to go in circles.
        self._idle_replay = 0
        self._replay_limit: int | None = None
        self._livelocked = False
        # (expiry tick, request, wait_since) for waiting_timeout, in expiry order.
        self._timeouts: deque[tuple[int, Request, int]] = deque()
        # Prefill/decode disaggregation (fleet/disagg.py): the fleet's hooks, called
        # when a producer's prefill is recorded (`prefilled(engine, req)`) and when a
        # remote request admitted in this step starts its copy (`transfer(engine,
        # req)`); and the remote requests admitted in the step being planned.
        self.remote = None
        self._parking: list[Request] = []

    @property
    def cost(self) -> CostModel | None:
        """The cost model pricing the dispatches (None: each lasts one step)."""
        return self.ledger.cost

    @cost.setter
    def cost(self, cost: CostModel | None) -> None:
        # Before the run starts: a calibration fit prices a replay with its own
        # coefficients (io/run_fit.py).
        self.ledger.cost = cost

    # --- what folding (folding.py) reads ----------------------------------------

    @property
    def listener(self) -> Callable[[Event], None] | None:
        """The event listener, if anybody listens."""
        return self._emit

    @property
    def cohort(self) -> Cohort | None:
        """The steady decoders counted rather than written, if counted at all."""
        return self._cohort

    def settle_members(self, flight: InFlight) -> None:
        """Write every counted decoder's progress while `flight`, a dispatch of
        decodes only, runs: its rows are then all written ones, and its members'
        outputs are emitted as theirs when it completes (folding, when counted
        and written rows are mixed)."""
        if flight.rows is not None:
            raise InvariantError("the members of a dispatch with rows other than "
                                 "decodes are settled before it completes", self.now)
        self._cohort.settle_all()
        flight.decoders, flight.members = flight.requests, 0

    @property
    def step_block(self) -> tuple[str, str, int, int, int] | None:
        """(id, reason, needed, free, taken) of the head the policy reported blocked
        this step: `free` and `taken` (blocks this step's rows held already) as the
        report saw them."""
        return self._step_block

    def next_event(self, ia: int, ic: int, ip: int, now: int,
                   in_flight: bool = False) -> float:
        """The first time after `now` at which something outside the dispatches may
        happen: the next arrival (position `ia` in the workload) or drain expiry; and,
        unless a dispatch is in flight (it would defer them, E4), the next
        cancellation (`ic`), forced preemption (`ip`), timeout or policy wakeup.
        Infinity when nothing is pending. The one rule for the next boundary (E7),
        and for where folding must stop."""
        w = self.workload
        spec = self._next_spec
        nxt = spec.arrival if spec is not None else INF
        allocator = self.allocator
        if allocator.draining:
            expiry = allocator.next_expiry()
            if expiry < nxt:
                nxt = expiry
        if in_flight:
            return nxt
        cancels, preempts = w.cancels, w.preempts
        if ic < len(cancels) and cancels[ic].at < nxt:
            nxt = cancels[ic].at
        if ip < len(preempts) and preempts[ip].at < nxt:
            nxt = preempts[ip].at
        if self._timeouts:
            timeout = self.next_timeout()
            if timeout is not None and timeout < nxt:
                nxt = timeout
        if self._live:
            wake = self.policy.next_wakeup(now)
            if wake is not None and now < wake < nxt:
                nxt = wake
        return nxt

    def next_timeout(self) -> int | None:
        """The tick of the next waiting_timeout that can still fire, if any."""
        timeouts = self._timeouts
        while timeouts:
            _, req, since = timeouts[0]
            if req.wait_since == since and req.status in (RequestStatus.WAITING,
                                                          RequestStatus.PREEMPTED):
                return timeouts[0][0]
            timeouts.popleft()  # admitted (or ended) since: it will never fire
        return None

    # --- the step protocol drivers use (fleet/) -----------------------------------
    # A boundary at `now` is: complete_due() (E1), the driver's arrivals (accept),
    # take_outside_events() (E2, E3 up to the policy), stall_if_livelocked(),
    # step() (E3: plan, start, fold), then next_boundary() (E7). `run` is that
    # loop for a lone engine; fleet/ drives several engines through it.

    @property
    def live(self) -> int:
        """Requests registered and not yet ended."""
        return self._live

    @property
    def keep_requests(self) -> bool:
        """Whether the result keeps every request's record."""
        return self._keep_requests

    def peek(self) -> float:
        """The first time after `now` at which something outside the dispatches may
        happen (`next_event` from the workload's position)."""
        ia, ic, ip = self._cursor
        return self.next_event(ia, ic, ip, self.now, self.flight is not None)

    def note_change(self) -> None:
        """Something a policy sees changed besides decoding progress (a copy landed,
        a pin was dropped): the next step may not be folded as a repeat."""
        self._changes += 1

    def stall_if_livelocked(self) -> bool:
        """End the live requests as a stall (E6b) if the policy goes in circles (the
        livelock watch, `_watch_replay`) and nothing runs; return whether it did."""
        if not (self._livelocked and self.flight is None and self._live):
            return False
        self.stall("the policy keeps recomputing the same rows: "
                   f"{self._idle_replay:,} rows replayed without one useful row "
                   "(a livelock)")
        self._livelocked = False
        return True

    # --- the main loop ----------------------------------------------------------------

    def run(self) -> RunResult:
        """Replay the whole workload; return the summary and the request records.

        With a plugin policy, a broken rule or anything the policy raises becomes a
        PolicyError naming the policy, the time and the rule (policy_failure.py).
        """
        try:
            return self._run()
        except BaseException as exc:
            failure = policy_failure(exc, self.policy_name, self._plugin, self.clock,
                                     self.now)
            if failure is None:
                raise
            raise failure from None

    def _check_plan(self, plan) -> None:
        """A plugin's plan must be a list of (request, tokens) pairs of its own running
        requests; the rest (budgets, phases, blocks) `_start` checks for everyone."""
        if not isinstance(plan, list):
            raise InvariantError(f"schedule() returns a list of (request, tokens) pairs, "
                                 f"got {type(plan).__name__}", self.now)
        requests = self.requests
        seen: set[str] = set()
        for entry in plan:
            if (type(entry) is not tuple or len(entry) != 2
                    or not isinstance(entry[0], Request)
                    or requests.get(entry[0].rid) is not entry[0]
                    or type(entry[1]) is not int):
                raise InvariantError(f"each plan entry is a (request of this run, int "
                                     f"tokens) pair, got {shown(entry)}", self.now)
            rid = entry[0].rid
            if rid in seen:
                raise InvariantError(f"request {rid!r} appears twice in one dispatch (a "
                                     "request runs at most once per dispatch)", self.now)
            seen.add(rid)

    def _run(self) -> RunResult:
        """The loop: at each boundary E1, then E2 and E3, then the next boundary (E7)."""
        self._specs = specs = self.workload.arrivals()
        self._next_spec = spec = next(specs, None)
        t = first = spec.arrival if spec is not None else 0
        stalled = False
        while True:
            self.now = t
            flight = self.flight
            if flight is not None and flight.done == t:
                self.complete_due()       # E1
            self.take_outside_events()    # E2, E3 before the policy
            if self._livelocked and self.stall_if_livelocked():
                stalled = True
                break
            moved = self.step()           # E3: the policy admits and dispatches
            t = self.next_boundary(moved)
            if t == INF:
                if self._live:
                    self.stall()
                    stalled = True
                break
        summary = self.stats.summary(self.allocator.peak_reserved, self.allocator.peak_held,
                                     first)
        return RunResult(self.policy_name, summary,
                         list(self.requests.values()) if self._keep_requests else [], stalled,
                         self.clock, self.options)

    def complete_due(self) -> None:
        """E1: the dispatch completing now records its outputs first."""
        flight = self.flight
        if flight is not None and flight.done == self.now:
            self._complete(flight)
            self.flight = None

    def take_outside_events(self, cancels: list[str] | None = None,
                            preempts: list[str] | None = None) -> None:
        """E2 and E3 up to the policy: arrivals (and sends of closed-loop clients),
        then, unless a dispatch is in flight (E4), cancellations, timeouts and forced
        preemptions; then the drains that expire now. The cancellations and forced
        preemptions due now are the workload's, or under disaggregation the ids the
        fleet gives (`cancels`, `preempts`: the fleet holds those of the requests
        it moves between replicas)."""
        t = self.now
        cursor = self._cursor
        ia, ic, ip = cursor
        spec = self._next_spec
        if spec is not None and spec.arrival == t:
            specs = self._specs
            while spec is not None and spec.arrival == t:
                self._arrive(spec)
                ia += 1
                spec = next(specs, None)
            self._next_spec = spec
        clients = self.clients
        if clients is not None:
            self._send_ready()
        if self.flight is None:
            if cancels is None:
                # (Tested before the call: nearly every boundary has none due.)
                cancels = preempts = ()
                w = self.workload
                due = w.cancels
                if ic < len(due) and due[ic].at <= t:
                    cancels, ic = _due_ids(due, ic, t)
                due = w.preempts
                if ip < len(due) and due[ip].at <= t:
                    preempts, ip = _due_ids(due, ip, t)
            elif cancels or preempts:
                # The fleet's actions changed things: replays since are not the
                # policy's circle.
                self._idle_replay = 0
                self._replay_limit = None
            for rid in cancels:
                self._cancel(rid)
            if self._timeouts:
                self._expire_waiting()
            if clients is not None:
                self._send_ready()  # slots the cancellations and timeouts freed
            for rid in preempts:
                self._force_preempt(rid)
        if (ia, ic, ip) != cursor:
            self._cursor = (ia, ic, ip)
            # The trace changed things: replays since are not the policy's circle.
            self._idle_replay = 0
            self._replay_limit = None
        allocator = self.allocator
        if allocator.draining:
            released = allocator.release_expired(t)
            if released:
                self._changes += 1
                if self._emit is not None:
                    self._emit(Released(t, released))

    def step(self) -> bool:
        """E3: when nothing runs, the policy admits, preempts and plans; the plan is
        started (and a steady stretch folded). Returns whether the policy moved."""
        t = self.now
        allocator = self.allocator
        on_state = self._on_state
        moved = False
        if self.flight is None and self._live:
            self._policy_moved = False
            self._step_block = None
            allocator.step_evictions.clear()
            allocator.step_growth.clear()
            policy = self.policy
            fast = self._fast_forward_on
            if fast:
                changes, assignments = self._changes, policy.assignments
            plan = policy.schedule(t)
            if self._plugin:
                self._check_plan(plan)
            if self._parking:
                plan = self._park(plan)
            moved = self._policy_moved
            if on_state is not None:
                on_state(t, self._state(plan), False)
            if plan:
                if self._emit is not None:
                    self._emit(Snapshot(t, **self._state(plan)))
                # Blocks the policy itself gave this step's rows (before the dispatch).
                policy_blocks = sum(allocator.step_growth.values()) if self._step_block else 0
                flight = self.flight = self._start(plan)
                if not fast:
                    pass
                elif not flight.members:
                    if self._repeats(flight, changes, assignments):
                        until = self.next_event(*self._cursor, t)
                        fold(self, flight, until if until < self.horizon else self.horizon,
                             policy_blocks)
                else:
                    # Counted decoders: a stretch is looked at for folding only if it
                    # may last (the next look starts afresh).
                    until = self.next_event(*self._cursor, t)
                    if self.horizon < until:
                        until = self.horizon
                    if until - flight.done < FOLD_AFTER * (flight.done - flight.start):
                        self._seen = None
                    elif self._repeats(flight, changes, assignments):
                        fold(self, flight, until, policy_blocks)
                if on_state is not None:
                    on_state(t, self._state(), True)
            else:
                self._seen = None
        elif on_state is not None:
            on_state(t, self._state(), self.flight is not None)
        allocator.check() if not self._audit else allocator.audit()
        return moved

    def _park(self, plan: Plan) -> Plan:
        """Disaggregation: the remote requests admitted in this step leave the policy
        and wait for their prompt's KV (WAITING_FOR_REMOTE_KV); their copies start
        (the fleet's `transfer` hook) and their rows leave the plan. The policy
        gets them back as waiting requests when the copies land."""
        parked = [req for req in self._parking if req.remote == PARKING]
        self._parking = []
        if not parked:
            return plan
        allocator = self.allocator
        for req in parked:
            self.policy.remove(req)
            req.wait_for_remote_kv()
            req.remote = LOADING
            # Its blocks are its own, not the dispatch's rows' (for the snapshot).
            allocator.step_growth.pop(req.rid, None)
            allocator.step_evictions.pop(req.rid, None)
            self._changes += 1
            self.remote.transfer(self, req)
        gone = set(parked)
        if type(plan) is DecodesFirst:
            return DecodesFirst([r for r in plan.decoders if r not in gone],
                                [row for row in plan.rest if row[0] not in gone])
        return [row for row in plan if row[0] not in gone]

    def _repeats(self, flight: InFlight, changes: int, assignments: int) -> bool:
        """Whether the policy's call that planned `flight` will repeat itself: the
        dispatch is all decodes; the call changed nothing (no admission,
        preemption, release or policy event: `changes` is the count before it)
        and gave none of the policy's attributes a new value (`assignments` is
        `Policy.assignments` before it); it
        reported the same blocked head (id, reason, blocks needed) as the
        previous call; and its rows are those of the previous dispatch that are
        still running, in the same order (a policy reordering a list in place
        shows here), or, when the previous dispatch had prefill rows (requests
        changed phase since), every running request.
        A policy that decides from what it sees then plans the same again, one
        token further, until a request finishes or something outside happens:
        the engine may fold those steps (folding.py). The policy is never
        asked whether it is steady; docs/policies.md says what this assumes.
        """
        block = self._step_block
        block = block[:3] if block is not None else None
        mine = None
        if flight.all_decode:
            mine = flight.requests if flight.members else flight.decoders
            if mine is None:
                mine = list(map(_first, flight.rows))
        # Only the requests are kept: the rows go with their dispatch.
        last, self._seen = self._seen, (mine, block, self._changes)
        if (mine is None or self._changes != changes or last is None
                or last[1] != block
                or self.policy.assignments != assignments):
            return False
        before = last[0]
        if before is None:  # the previous dispatch had other rows than decodes
            return len(mine) == self.policy.running_count
        if last[2] == changes:
            return mine == before  # nothing ended since: the same requests
        # (The loops run in C: this is on the path of every steady stretch.)
        return list(compress(before, map(_is_running, map(_status, before)))) == mine

    def next_boundary(self, moved: bool) -> float:
        """E7: the earliest time at which anything can change (infinity: nothing can)."""
        t = self.now
        ia, ic, ip = self._cursor
        flight = self.flight
        if flight is not None:
            nxt = self.next_event(ia, ic, ip, t, True)
            return flight.done if flight.done < nxt else nxt
        nxt = self.next_event(ia, ic, ip, t)
        if self._live and moved:
            # E6b: the policy changed something (admitted, preempted) but ran
            # nothing: an empty iteration, and the next decision one step later,
            # when a step that preempted may admit.
            self.ledger.empty()
            nxt = min(nxt, t + 1)
        return nxt

    def stall(self, why: str | None = None) -> None:
        """E6b: nothing can ever change again; every live request ends in error."""
        now = self.now
        a = self.allocator
        if self._cohort is not None:
            self._cohort.settle_all()
        reason = (f"no progress possible at tick {now}: {self.policy.running_count} running, "
                  f"{self.policy.waiting_count} waiting, free {a.free}, reserved "
                  f"{a.reserved}, draining {a.draining}, and "
                  + (why or "no event pending"))
        if self._spill is not None:
            self._spill.build_all()  # every spilled request is built, to end in error
        for req in list(self.requests.values()):
            if req.status.is_finished:
                continue
            if req.sent is None:
                self.clients.withdraw(req)  # never sent: the server does not know it
                req.fail(now)
                self._record_end(req)
            else:
                if req.status == RUNNING or req.remote == LOADING or req.remote == LOADED:
                    self._release_request(req)
                if req.remote != LOADING:
                    self.policy.remove(req)
                req.fail(now)
                self._end(req)
            if self._emit is not None:
                self._emit(Stalled(now, req.rid, reason))


# Held waiting requests past which arrivals are spilled (with twice max_rows).
SPILL_AFTER = 4096
# With a cohort, a steady stretch is looked at for folding only when it may
# last this many dispatches: a shorter one saves less than looking costs.
FOLD_AFTER = 4


def _due_ids(actions: list[Action], i: int, t: int) -> tuple[list[str], int]:
    """The ids of `actions` from position `i` that are due at `t`, and the position
    after them."""
    j = i
    n = len(actions)
    while j < n and actions[j].at <= t:
        j += 1
    return [a.id for a in actions[i:j]], j


def _check_bookkeeping(workload: Workload, options: Options) -> None:
    """Refuse a request whose blocks could outgrow what the simulator tracks per
    request (it would be admitted: it fits in the pool), with the arithmetic."""
    spec = workload.largest
    if spec is None:
        return
    size = options.block_size
    rows = spec.prompt_tokens + spec.max_tokens
    blocks = blocks_for(rows, size)
    if MAX_REQUEST_BLOCKS < blocks <= options.num_blocks:
        raise UsageError(
            f"request {spec.id!r} may need {blocks:,} blocks of {size} tokens (prompt "
            f"{spec.prompt_tokens:,} + max_tokens {spec.max_tokens:,}), more than the "
            f"{MAX_REQUEST_BLOCKS:,} the simulator tracks per request (about {BLOCK_BYTES} "
            f"bytes each, {MAX_REQUEST_BLOCKS * BLOCK_BYTES // 2 ** 20:,} MiB): use a block_size of "
            f"at least {blocks_for(rows, MAX_REQUEST_BLOCKS):,}")


def run(workload: Workload, options: Options, policy: str, **kwargs) -> RunResult:
    """Convenience: build an engine and replay the workload under one policy."""
    return Engine(workload, options, policy, **kwargs).run()
