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
`Engine` is one class written in several modules, one concern each:
  core.py         its state (about twenty attributes) and the lone-engine loop;
  stepping.py     the step protocol: the phases of a boundary, under public
                  names, that `run` and the fleet drivers (fleet/) call;
  lifecycle.py    how requests move between states (the SchedulerView calls,
                  arrivals, cancellations, timeouts, the spilled queue);
  dispatching.py  how a plan is started and completed, row by row;
  host_moves.py,  host memory: stores and swap-outs, and loads back
  host_loads.py   into the GPU (host_summary.py: the summary's fields);
  fast/           counted dispatches (the decode cohort), folding, carrying on.
Its parts are objects of their own: the agenda (agenda.py: what is pending
outside the dispatches, and when), the roster (roster.py: the run's requests),
the dispatch ledger (ledger.py: every dispatch's statistics, timing and output
gaps), steadiness (steadiness.py: the change log, and whether a step repeats),
the livelock watch (livelock.py), the fleet link (fleet_link.py), the spilled
queue tail (spill.py) and the allocator (kv/).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..gpu.costmodel import CostModel
from ..gpu.kv_pool import fit_pool
from ..gpu.run_cost import clock_for, cost_model_for
from ..kv.block_counts import allocator_for
from ..kv.caches import cache_kind, make_cache
from ..policies import PluginError, is_builtin, is_builtin_name, make_policy
from ..records.clock import Clock
from ..records.errors import UsageError
from ..records.events import Event, Evicted, reads
from ..records.options import Options
from ..records.workload import Workload
from ..requests.clients import ClientSlots
from ..requests.request import Request
from .agenda import Agenda
from .dispatching import Dispatching, InFlight
from .fast.cohort import Cohort
from .fast.counted import Counting
from .fast.plain_arrival import plain_arrival
from .fast.through import may_carry_on
from .fleet_link import FleetLink
from .host_loads import HostLoads
from .host_moves import HostMoves
from .ledger import DispatchLedger
from .lifecycle import Lifecycle, request_of  # (request_of: for the fleets)
from .livelock import LivelockWatch
from .policy_failure import policy_failure
from .roster import Roster, check_request_sizes
from .run_stats import RunStats
from .spill import SPILL_AFTER, Spill
from .steadiness import Steadiness
from .stepping import Stepping

__all__ = ["Engine", "RunResult", "request_of"]

INF = float("inf")


@dataclasses.dataclass
class RunResult:
    """What one policy's replay produced."""

    policy: str
    summary: dict[str, Any]
    requests: list[Request]
    stalled: bool
    clock: Clock = dataclasses.field(default_factory=Clock)  # the run's time unit
    options: Options | None = None  # as run: num_blocks derived from the GPU if it was
    survival: list = dataclasses.field(default_factory=list)  # host_summary.survival_counts


class Engine(Stepping, Lifecycle, Dispatching, Counting, HostMoves, HostLoads):
    """Replays one workload under one policy.

    `on_event` receives every event record as it happens (None: build none;
    one that reads no `evicted` records, `records.events.reads`, lets the
    allocator skip what those records need).
    Steady stretches of pure decode dispatches are folded (`fast_forward`),
    with the same results and the same event records, unless `on_state` or
    `audit` is set; `fast_forward=False` forbids it.
    `on_state(tick, state, after_dispatch)` receives the block counts at every boundary,
    after admission, and again after the dispatch allocated its blocks (used by
    `check` for `at` expectations). `audit` runs the full audit at every boundary.
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
        options, _ = fit_pool(options)
        self.options = options
        clock = clock_for(options)
        # (A replica's own workload is made below: it converts nothing here.)
        self.workload = workload.on_clock(clock) if not routed else workload
        # Durations in clock steps: a drain must have passed (rounded up); a
        # timeout must be exceeded (rounded down, so "longer than" stays exact).
        self.release_delay = clock.after(options.release_delay)
        check_request_sizes(workload, options)
        # A replica of a fleet (fleet/) is `routed`: its workload is only checked,
        # never read; what the fleet sets on it is in `link` (fleet_link.py).
        self.link = FleetLink()
        named = workload.named_ids()
        if routed:
            self.workload = Workload()
            self.workload.cancels, self.workload.preempts = [], []
        self.allocator = allocator_for(options, self.release_delay, on_state is None and not (
            audit or routed or not is_builtin_name(policy)))  # (ids or counts: kv/block_counts.py)
        if on_event is not None and options.prefix_caching and reads(on_event, "evicted"):
            self.allocator.track_evictions(  # whose cached blocks are handed out again (evicted)
                lambda rid, writer, block: on_event(Evicted(self.now, rid, writer, block)))
        cost = cost_model_for(options) if options.has_cost_model else None
        # Every dispatch's statistics, timing and output gaps, into the run's (ledger.py).
        self.ledger = DispatchLedger(RunStats(clock, options.slo), cost, clock)
        self.clients = (ClientSlots(options.max_concurrency)
                        if options.max_concurrency is not None else None)
        self.policy_name = policy
        try:
            self.policy = make_policy(policy, options, self)
        except PluginError as exc:  # no such file, module or class: the user's spelling
            raise UsageError(str(exc)) from None
        except BaseException as exc:  # a plugin's import or constructor failed
            failure = policy_failure(exc, policy, not is_builtin_name(policy), clock, 0)
            if failure is None:
                raise
            raise failure from None
        if options.prefix_caching:  # the kind of cache the policy names (a replica's compact)
            self.allocator.bind_cache(make_cache(cache_kind(
                self.policy.caches_duplicate_blocks, self.policy.radix_eviction), compact=routed))
        # A policy from outside the package has every decision checked, and its
        # failures are reported as the policy's (PolicyError), not as ours.
        self._plugin = not is_builtin(self.policy)
        self.now = 0
        self._emit = on_event
        self._on_state = on_state
        self._audit = audit
        if fast_forward is None:  # off by default under a state callback or the audit
            fast_forward = on_state is None and not audit
        if options.host:  # host memory below the pool (host_moves.py)
            fast_forward = self.attach_host(cost, fast_forward)
        # Steady decoders counted, not written (fast/cohort.py), when nobody watches
        # blocks and the policy does not read their progress (a listener has records).
        self._cohort = (Cohort(self.allocator, self.policy.reserves)
                        if fast_forward and (on_event is None or not routed) and on_state is None
                        and not options.prefix_caching and not self._plugin
                        and self.policy.lazy_decoders else None)
        self.flight: InFlight | None = None  # the dispatch being executed
        # What is pending outside the dispatches (arrivals, cancellations, forced
        # preemptions, timeouts, drains, the policy's wakeup) and when (agenda.py).
        self.agenda = Agenda(self.workload, None if options.waiting_timeout is None
                             else clock.before(options.waiting_timeout),
                             self.allocator, self.policy)
        # The requests of the run, which are kept, how many live (roster.py).
        self.roster = roster = Roster(keep_requests, named, on_request_end)
        # Spilling (bounded memory): past SPILL_AFTER held waiting requests (or
        # twice max_rows), new arrivals join the policy's FCFS queue as a count and
        # are built again from the trace when they near the head. Only when no
        # request is kept, named by an action, timed out or sent by a client.
        if (not keep_requests and self.clients is None and options.waiting_timeout is None
                and not named and not routed):
            queue = self.policy.spill_queue()
            if queue is not None:
                roster.spill = Spill(queue, max(SPILL_AFTER, 2 * options.max_rows),
                                    self.workload.arrivals)
        self.steadiness = Steadiness(self.policy, fast_forward)  # the change log, repeats
        self.steadiness.through = not routed and may_carry_on(self)  # (a Fleet sets its own)
        roster.arrive = (None if routed else plain_arrival(self)) or self._arrive  # (its module)
        # A schedule going in circles is stopped as a stall (livelock.py).
        self.livelock = LivelockWatch(options.num_blocks * options.block_size)

    @property
    def clock(self) -> Clock:
        """The run's time unit (the ledger's)."""
        return self.ledger.clock

    @property
    def stats(self) -> RunStats:
        """The run's statistics (the ledger writes them)."""
        return self.ledger.stats

    @property
    def cost(self) -> CostModel | None:
        """The cost model pricing the dispatches (None: each lasts one step)."""
        return self.ledger.cost

    @cost.setter
    def cost(self, cost: CostModel | None) -> None:
        self.ledger.priced_by(cost)  # (before the run: a calibration fit's, io/run_fit.py)

    @property
    def listener(self) -> Callable[[Event], None] | None:
        """The event listener, if anybody listens."""
        return self._emit

    @property
    def step_block(self) -> tuple[str, str, int, int, int] | None:
        """(id, reason, needed, free, taken) of the head the policy reported blocked
        this step: `free` and `taken` (blocks this step's rows held already) as the
        report saw them."""
        return self.steadiness.blocked

    @property
    def builtin_policy(self) -> bool:
        """Whether the policy is one of the package's (not a plugin)."""
        return not self._plugin

    @property
    def takes_decodes_first(self) -> bool:
        """Whether the policy may plan its decodes as its own list (`DecodesFirst`):
        with lazy decoders, when the engine counts them (fast/cohort.py)."""
        return self._cohort is not None

    @property
    def lockstep_step(self) -> int | None:
        """Under data-parallel lockstep, the step counter all ranks share (the
        SchedulerView's); None otherwise."""
        return self.link.lockstep_step

    @property
    def folded(self) -> int:
        """Dispatches applied by folding so far (for tests and benchmarks)."""
        return self.steadiness.folded

    # --- the main loop ----------------------------------------------------------------

    def run(self) -> RunResult:
        """Replay the whole workload; return the summary and the request records.

        With a plugin policy, a broken rule or anything the policy raises becomes a
        PolicyError naming the policy, the time and the rule (policy_failure.py).
        """
        try:
            return self._run()
        except BaseException as exc:
            failure = policy_failure(exc, self.policy_name, self._plugin, self.clock, self.now)
            if failure is None:
                raise
            raise failure from None

    def _run(self) -> RunResult:
        """The loop: at each boundary E1, then E2 and E3, then the next boundary (E7)."""
        t = first = self.agenda.begin()
        stalled = False
        while True:
            self.now = t
            flight = self.flight
            if flight is not None and flight.done == t:
                self.complete_due()       # E1
            self.take_outside_events()    # E2, E3 before the policy
            if self.livelock.tripped and self.stall_if_livelocked():
                stalled = True
                break
            moved = self.step()           # E3: the policy admits and dispatches
            t = self.next_boundary(moved)
            if t == INF:
                if self.roster.live:
                    self.stall()
                    stalled = True
                break
        summary = self.stats.summary(self.allocator.peak_reserved, self.allocator.peak_held,
                                     first)
        if self.allocator.host is not None:
            summary.update(self.host_fields(first))
        return RunResult(self.policy_name, summary,
                         list(self.roster.requests.values()) if self.roster.keep else [], stalled,
                         self.clock, self.options, self.survival())
