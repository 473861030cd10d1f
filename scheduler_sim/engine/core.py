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
"""
from __future__ import annotations

import dataclasses
import operator
from bisect import insort
from collections import deque
from functools import partial
from itertools import compress, repeat
from typing import Any, Callable, Iterator

from ..gpu.costmodel import CostModel, clock_for, cost_model_for, fit_pool
from ..kv.allocator import BLOCK_BYTES, MAX_REQUEST_BLOCKS, BlockAllocator, blocks_for
from ..kv.prefix_cache import BlockKeys
from ..policies import PADDING, Plan, PluginError, is_builtin, is_builtin_name, make_policy
from ..policies.base import DecodesFirst
from ..records.clock import Clock
from ..records.errors import InvariantError, UsageError
from ..records.events import (
    Admitted, AdmissionBlocked, Arrival, CancelIgnored, Cancelled, Dispatch, Event, Evicted,
    Finished, PreemptIgnored, Preempted, Rejected, Released, Snapshot, Stalled, Timeout, reads,
)
from ..records.options import Options
from ..records.states import RequestStatus
from ..records.workload import Action, RequestSpec, Workload
from ..requests.clients import ClientSlots
from ..requests.queues import FcfsQueue
from ..requests.request import (
    DECODE, LOADED, LOADING, PARKING, PREFILL, PRODUCER, REMOTE, RemoteKv, Request, emit_outputs,
    seal, write_decodes,
)
from .cohort import Cohort
from .folding import fold
from .ledger import DispatchLedger
from .policy_failure import policy_failure, shown
from .summary import RunStats

__all__ = ["Engine", "RunResult", "run", "request_of"]

RUNNING = RequestStatus.RUNNING
INF = float("inf")
_first = operator.itemgetter(0)
_second = operator.itemgetter(1)
_status = operator.attrgetter("status")
_action_order = operator.attrgetter("at", "index")
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


class _InFlight:
    """The dispatch being executed: its rows, its start and its completion tick, and
    its exact (fractional) completion in clock steps."""

    __slots__ = ("rows", "start", "done", "exact", "all_decode", "outputs", "decoders",
                 "members", "requests", "unsent")

    def __init__(self, rows: list[tuple[Request, bool]], start: int, done: int,
                 exact: float, all_decode: bool, outputs: int,
                 decoders: list[Request] | None = None, members: int = 0,
                 requests: list[Request] | None = None) -> None:
        self.rows = rows  # (request, emits), cohort members left out
        self.outputs = outputs  # rows that emit
        self.start = start
        self.done = done
        self.exact = exact
        self.all_decode = all_decode  # every row a decode: a candidate for folding
        # The rows' requests when every row (cohort members left out) is a plain decode.
        self.decoders = decoders
        self.members = members  # rows of cohort members (counted, not written)
        self.requests = requests  # every row's request in plan order, with members
        self.unsent: tuple | None = None  # (rows, tokens) of a Dispatch record not yet sent


class Engine:
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
        self.flight: _InFlight | None = None  # the dispatch being executed
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
        self._spill: FcfsQueue | None = None
        if (not keep_requests and self.clients is None and self.waiting_timeout is None
                and not self._named and not routed):
            self._spill = self.policy.spill_queue()
        self._spill_cap = max(SPILL_AFTER, 2 * options.max_rows)
        self._spans: deque[list[int]] = deque()  # [first, last] arrival numbers spilled
        self._arrived = 0                        # arrivals taken from the trace
        self._reader: Iterator[RequestSpec] | None = None  # the trace read again ...
        self._read = 0                                     # ... and how far
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

    def settle_members(self, flight: _InFlight) -> None:
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

    # --- the SchedulerView a policy sees ----------------------------------------

    def admit(self, req: Request, credit: int, cached: list[int] = ()) -> None:
        """Carry out a policy's admission: reserve, take cached blocks, transition, report.

        `cached` are the leading blocks found by `cached_prefix`; the request
        shares them and starts with their rows resident.
        """
        if credit:
            self.allocator.reserve(req.rid, credit)
        resumed = req.status == RequestStatus.PREEMPTED
        req.admit(self.now, self._admit_seq, credit)
        hit = 0
        loaded = req.remote == LOADED
        if loaded:
            # Its prompt's KV was copied in: `cached` are its own blocks (see
            # `cached_prefix`), and from here on it is a request like any other.
            req.remote = RemoteKv.NONE
        elif cached:
            self.allocator.share(req.rid, cached, req.block_keys)
            hit = len(cached) * self.options.block_size
            req.record_cached(hit)
            if req.remote == REMOTE:
                # A decode replica's hit on a prompt to be copied saves copying, not
                # computing: it shows as fewer `transfer_tokens` (fleet/disagg.py).
                req.cached_tokens -= hit
        if req.block_keys is not None and not loaded:
            # Keys are given again to the blocks it writes from here on (a resumed
            # request starts from its hits, not from what it had before).
            req.block_keys.registered = len(cached)
        self._admit_seq += 1
        self._policy_moved = True
        self._changes += 1
        if self._emit is not None:
            self._emit(Admitted(self.now, req.rid, credit, resumed, hit))
        if req.remote == REMOTE:
            # Disaggregation: blocks for its whole prompt now; the copy starts when
            # the policy's step is over (`_park`).
            if not self.allocator.try_grow(req.rid, req.prompt_tokens):
                raise InvariantError(
                    f"request {req.rid!r}: admitted on a decode replica without free "
                    f"blocks for its prompt of {req.prompt_tokens} rows", self.now)
            req.remote = PARKING
            self._parking.append(req)

    def cached_prefix(self, req: Request, whole: bool = False) -> list[int]:
        """The leading blocks of `req` found in the prefix cache (none without one).

        At least the last token of the current sequence is always computed, so
        at most (P + outputs - 1) // block_size blocks are reused; `whole` looks
        up the last token's block too (what SGLang matches when it sorts or
        refreshes its waiting queue, which stamps more of its tree).
        """
        if req.remote == LOADED:
            return self.allocator.table(req.rid)  # its loaded prompt, in its own blocks
        if req.block_keys is None:
            return []
        rows = req.prompt_tokens + req.outputs
        limit = (rows if whole else rows - 1) // self.options.block_size
        return self.allocator.lookup(req.block_keys, limit)

    def report_blocked(self, req: Request, reason: str, needed: int) -> None:
        """Report the queue head that cannot be admitted at this boundary."""
        a = self.allocator
        taken = sum(a.step_growth.values())  # blocks this step's rows took already
        self._step_block = (req.rid, reason, needed, a.free, taken)
        if self._emit is not None:
            self._emit(AdmissionBlocked(self.now, req.rid, reason, needed, a.free,
                                        a.reserved, a.draining, taken or None))

    def release(self, req: Request) -> int:
        """Free the blocks and credit a finished request kept (static batches)."""
        self._changes += 1
        return self._release_request(req)

    def emit_event(self, event: Event) -> None:
        """Pass a policy's own event record to the listener (the policy changed
        something it reports, so the step is not a repeat)."""
        self._changes += 1
        if self._emit is not None:
            self._emit(event)

    def preempt(self, req: Request, reason: str, rule: str | None = None,
                trigger: str | None = None) -> int:
        """Preempt a running request: its credit goes, its blocks drain (A4, L2)."""
        self._settle(req)
        freed = self.allocator.free_request(req.rid, self.now, self.release_delay)
        outputs = req.outputs
        rows = req.resident
        req.preempt(include_pending=self.policy.recompute_includes_pending)
        if req.remote == PARKING:
            # Admitted and preempted in one step, before its copy began: it waits
            # for the copy as before, nothing to recompute.
            req.remote = REMOTE
            req.restore = 0
            req.emit_on_restore = False
            self._parking.remove(req)
        self.policy.remove(req)
        self.start_waiting(req)
        self.policy.requeue(req)
        self._policy_moved = True
        self._changes += 1
        if self._emit is not None:
            self._emit(Preempted(self.now, req.rid, outputs, rows, freed, reason, rule, trigger))
        return freed

    # --- lifecycle helpers --------------------------------------------------------

    def _settle(self, req: Request) -> None:
        """Before anything touches a running request: if the cohort counts it, its
        progress is written into it and it leaves."""
        cohort = self._cohort
        if cohort is not None and req in cohort.members:
            cohort.settle(req)

    def _end(self, req: Request) -> None:
        """Bookkeeping shared by every way a live request ends."""
        self._live -= 1
        self._changes += 1
        self._record_end(req)
        if self.clients is not None:
            self.clients.ended()

    def _record_end(self, req: Request) -> None:
        """A request reached its terminal state: into the statistics, to the
        `on_request_end` listener, and out of memory unless kept."""
        self.stats.request_ended(req)
        if self._on_request_end is not None:
            self._on_request_end(req)
        if not self._keep_requests and req.rid not in self._named:
            del self.requests[req.rid]

    def start_waiting(self, req: Request) -> None:
        """Note when `req` entered the waiting queue (for waiting_timeout)."""
        req.wait_since = self.now
        timeout = self.waiting_timeout
        if timeout is not None:
            # "Longer than" the timeout: at wait_since + timeout it has waited
            # exactly the timeout, one tick later it has waited longer.
            self._timeouts.append((self.now + timeout + 1, req, self.now))

    def _expire_waiting(self) -> None:
        """Abort requests that have waited longer than waiting_timeout."""
        timeouts = self._timeouts
        now = self.now
        while timeouts and timeouts[0][0] <= now:
            _, req, since = timeouts.popleft()
            if (req.wait_since != since or req.status.is_finished or req.status == RUNNING
                    or req.status == RequestStatus.WAITING_FOR_REMOTE_KV):
                continue  # admitted (and maybe back in the queue) since then, or ended
            self.policy.remove(req)
            if req.remote == LOADED:
                self._release_request(req)  # the blocks its copied prompt is in
            req.time_out(now)
            self._end(req)
            if self._emit is not None:
                self._emit(Timeout(now, req.rid, now - since))

    def _release_request(self, req: Request) -> int:
        return self.allocator.free_request(req.rid, self.now, self.release_delay)

    def _arrive(self, spec) -> None:
        """A request reaches its trace time: sent at once, or queued for a client slot."""
        req = request_of(spec)
        req.replica = self.replica
        self.requests[req.rid] = req
        self.stats.requests += 1
        self._arrived += 1
        if self.clients is None:
            spill = self._spill
            self._register(req, spill is not None
                           and (spill.spilled > 0 or len(spill) >= self._spill_cap))
        else:
            self.clients.arrive(req)

    def _unspill(self) -> Request:
        """Build the next spilled request again from the trace (the spill's `make`)."""
        if self._reader is None:
            self._reader = self.workload.arrivals()
        spans = self._spans
        while True:
            spec = next(self._reader)
            number = self._read
            self._read += 1
            first, last = spans[0]
            if number < first:
                continue
            if number == last:
                spans.popleft()
            else:
                spans[0][0] = number + 1
            break
        req = request_of(spec)
        req.sent = spec.arrival
        if self._plugin:
            seal(req)
        self._give_keys(req)
        self.requests[req.rid] = req
        return req

    def _give_keys(self, req: Request) -> None:
        if self.options.prefix_caching:
            o = self.options
            req.block_keys = BlockKeys(req.index, req.prompt_tokens, o.block_size,
                                       o.hash_block_size, req.prompt_token_ids,
                                       req.output_token_ids, req.block_hashes)

    def _send_ready(self) -> None:
        """Send the requests that waited for a client slot and now have one."""
        clients = self.clients
        while True:
            ready = clients.ready()
            if not ready:
                return
            for req in ready:
                self._register(req)  # a rejection frees its slot: loop again

    def _register(self, req: Request, spill: bool = False, forwarded: bool = False) -> None:
        """The server receives `req`: it waits for admission (with `spill`, as a count
        at the tail of the queue), or is rejected (E6). A `forwarded` request (one
        another replica sent on) keeps its send time."""
        if not forwarded:
            req.sent = self.now
        if self._plugin:
            seal(req)  # a plugin reads its requests, and changes them only through us
        self._changes += 1
        self._give_keys(req)
        emit = self._emit
        if emit is not None:
            wait = self.now - req.arrival if not forwarded else 0
            emit(Arrival(self.now, req.rid, wait or None))
        needed = self.policy.blocks_to_finish(req)
        if needed > self.options.num_blocks:
            req.reject(self.now)
            self._record_end(req)
            if self.clients is not None:
                self.clients.ended()
            if emit is not None:
                emit(Rejected(self.now, req.rid, self.policy.why_too_big(req, needed),
                              needed, self.options.num_blocks))
            return
        self._live += 1
        if spill:
            del self.requests[req.rid]
            number = self._arrived - 1
            spans = self._spans
            if spans and spans[-1][1] == number - 1:
                spans[-1][1] = number
            else:
                spans.append([number, number])
            self._spill.spill(self._unspill)
            return
        self.start_waiting(req)
        self.policy.add(req)

    def _cancel(self, rid: str) -> None:
        req = self.requests[rid]
        if req.status.is_finished:
            if self._emit is not None:
                self._emit(CancelIgnored(self.now, rid, req.status.label))
            return
        if req.sent is None:
            # Still waiting for a client slot: the client simply never sends it.
            self.clients.withdraw(req)
            req.cancel(self.now)
            self._record_end(req)
            if self._emit is not None:
                self._emit(Cancelled(self.now, rid, "unsent"))
            return
        was_running = req.status == RUNNING
        self._settle(req)
        remote = req.remote
        if remote != LOADING:  # a request being copied in is not the policy's yet
            self.policy.remove(req)
        if was_running or remote == LOADING or remote == LOADED:
            self._release_request(req)
        was = req.cancel(self.now)
        self._end(req)
        if self._emit is not None:
            self._emit(Cancelled(self.now, rid, was.label))

    def _force_preempt(self, rid: str) -> None:
        req = self.requests[rid]
        if req.status != RUNNING:
            if self._emit is not None:
                self._emit(PreemptIgnored(self.now, rid, req.status.label))
            return
        self.preempt(req, "manual")

    # --- what a fleet hands a replica (fleet/) -------------------------------------

    def accept(self, spec: RequestSpec) -> None:
        """A router sends this replica a request arriving now (E2; times on the clock)."""
        self.accept_request(request_of(spec))

    def accept_request(self, req: Request, forwarded: bool = False) -> None:
        """A fleet hands this replica a request arriving now (E2): one of the trace, a
        prefill-only request, or (`forwarded`) one whose prompt another replica
        computed (fleet/disagg.py). (A replica has no client slots and no spill.)"""
        req.replica = self.replica
        self.requests[req.rid] = req
        self.stats.requests += 1
        self._arrived += 1
        self._register(req, forwarded=forwarded)
        # The trace changed things: replays since are not the policy's circle.
        self._idle_replay = 0
        self._replay_limit = None

    def accept_action(self, action: Action) -> None:
        """A cancellation or forced preemption of a request this replica was sent, due
        at `action.at` (on the clock), kept in (time, trace position) order."""
        w = self.workload
        actions = w.cancels if action.kind == "cancel" else w.preempts
        insort(actions, action, key=_action_order)

    # --- dispatches -------------------------------------------------------------------

    def _state(self, plan: Plan | tuple = ()) -> dict[str, int]:
        """Block counts now; with `plan`, as they were before the plan's rows got
        their blocks (an on-demand policy allocates while it schedules)."""
        a = self.allocator
        pending = pending_cached = 0
        if plan and a.step_growth:
            # Blocks the policy allocated in this step are the plan's: before the
            # dispatch they were free (and, if evicted, cached).
            pending = sum(a.step_growth.values())
            pending_cached = sum(a.step_evictions.values())
        state = {"waiting": self.policy.waiting_count, "running": self.policy.running_count,
                 "reserved": a.reserved, "allocated": a.held - pending, "draining": a.draining,
                 "free": a.free + pending}
        if a.cache is not None:
            state["cached"] = a.cached_free + pending_cached
        return state

    def _start(self, plan: Plan) -> _InFlight:
        """Check the plan, allocate its blocks, write its rows (dispatch start)."""
        now = self.now
        options = self.options
        size = (len(plan) if type(plan) is not DecodesFirst
                else len(plan.decoders) + len(plan.rest))
        if size > options.max_rows:
            raise InvariantError(f"dispatch rows({size}) <= max_rows({options.max_rows}) "
                                 "is false", now)
        allocator = self.allocator
        grow = allocator.grow
        open_block = allocator.open_block
        size = allocator.block_size  # from here on, the block size
        # (request, emits) in plan order, built only once a row is not a plain
        # decode: a dispatch of decodes is its list of requests (`decoders`).
        rows: list[tuple[Request, bool]] | None = None
        add_row = None
        total = prompt = decode = recompute = 0
        records = [] if self._emit is not None else None
        add_record = records.append if records is not None else None
        chunks: list[tuple[int, int]] = []  # (tokens, context before), for the cost model
        contexts = 0  # summed context of the decode and padding rows
        padding = 0
        useful = 0
        emitting = 0  # rows of chunks that emit (every decode row does)
        decoders: list[Request] = []  # their rows are written together, below
        add_decoder = decoders.append
        members = 0
        requests = None
        rest = plan
        cohort = self._cohort
        if cohort is not None and cohort.members:
            requests, rest, members, contexts = self._start_members(plan, cohort)
            if not rest and members:
                return self._start_counted(requests, members, contexts)
        for req, tokens in rest:
            if req.status is not RUNNING:
                if tokens == PADDING and req.status.is_finished \
                        and self.policy.keeps_blocks_after_finish:
                    padding += 1
                    total += 1
                    if add_record is not None:
                        add_record((req.rid, "padding", 1, False, None))
                    continue
                raise InvariantError(f"request {req.rid!r} dispatched while "
                                     f"{req.status.label} with {tokens} tokens", now)
            r = req.resident
            if tokens == 1 and r >= req.prompt_tokens and r >= req.restore:
                # The hot path (Request.plain_decode, inlined): a decode writes one
                # row and emits one output.
                contexts += r
                if add_record is not None:
                    add_record((req.rid, DECODE, 1, True, None if req.output_token_ids is None
                                else req.token_ids(r, r + 1)))
                if not r % size:
                    open_block(req.rid, r + 1)
                if req.block_keys is not None and not (r + 1) % size:
                    allocator.register_decoded(req.rid, req.block_keys, r + 1)
                if add_row is not None:
                    add_row((req, True))
                add_decoder(req)
                continue
            if rows is None:
                rows = [(r, True) for r in decoders]
                add_row = rows.append
            remaining = req.phase_remaining
            if not 1 <= tokens <= remaining:
                raise InvariantError(f"request {req.rid!r}: 1 <= tokens({tokens}) <= "
                                     f"phase remaining({remaining}) is false", now)
            phase = req.phase
            emits = req.chunk_emits(tokens)
            chunks.append((tokens, r))
            if add_record is not None:
                add_record((req.rid, phase, tokens, emits, req.token_ids(r, r + tokens)))
            grow(req.rid, r + tokens)
            useful += req.record_rows(tokens)
            if req.block_keys is not None:
                if phase is DECODE:
                    allocator.register_decoded(req.rid, req.block_keys, req.resident)
                else:
                    allocator.register_full_blocks(req.rid, req.block_keys, req.resident)
            add_row((req, emits))
            if emits:
                emitting += 1
            if phase is DECODE:
                decode += tokens  # added to the total below, with the fast path's
            else:
                total += tokens
                if phase is PREFILL:
                    prompt += tokens
                else:
                    recompute += tokens
        if decoders:
            useful += write_decodes(decoders)
            decode += len(decoders)
        if members:
            useful += members
            decode += members
        total += decode
        if total > options.token_budget:
            raise InvariantError(f"dispatch tokens({total}) <= token_budget"
                                 f"({options.token_budget}) is false", now)
        n_rows = (len(decoders) if rows is None else len(rows)) + members
        if (self._audit or self._plugin) and len(
                set(map(id, decoders)) if rows is None else {id(r) for r, _ in rows}
        ) != n_rows - members:
            raise InvariantError("each request appears at most once in a dispatch is false",
                                 now)
        if useful or not total:
            self._idle_replay = 0
            self._replay_limit = None
        else:
            self._watch_replay(total)
        done, exact = self.ledger.dispatch(now, n_rows, total, prompt, decode, recompute,
                                           padding, chunks, contexts)
        flight = _InFlight(rows, now, done, exact,
                           decode == total and not padding and total > 0,
                           emitting + len(decoders) + members,
                           decoders if rows is None else None, members, requests)
        if records is not None:
            if self.lockstep_step is None:
                self._emit(Dispatch(now, tuple(records), total, done))
            else:  # the step's end is known once every rank has planned
                flight.unsent = (tuple(records), total)
        return flight

    def end_dispatch_at(self, done: int, exact: float) -> None:
        """Data-parallel lockstep (fleet/lockstep.py): the dispatch just started
        completes with the step of every rank, at step `done` (exact: `exact`)."""
        flight = self.flight
        flight.done, flight.exact = done, exact
        if flight.unsent is not None:
            rows, tokens = flight.unsent
            flight.unsent = None
            self._emit(Dispatch(flight.start, rows, tokens, done))

    def _start_counted(self, requests: list[Request], members: int,
                       contexts: int) -> _InFlight:
        """`_start` for a dispatch of counted decodes only (the cohort opened their
        blocks): the same statistics, duration and flight, without a row loop."""
        now = self.now
        if members > self.options.token_budget:
            raise InvariantError(f"dispatch tokens({members}) <= token_budget"
                                 f"({self.options.token_budget}) is false", now)
        self._idle_replay = 0
        self._replay_limit = None
        done, exact = self.ledger.dispatch(now, members, members, 0, members, 0, 0, (),
                                           contexts)
        return _InFlight(None, now, done, exact, True, members, [], members, requests)

    def _start_members(self, plan: Plan, cohort: Cohort
                       ) -> tuple[list[Request] | None, Any, int, int]:
        """The cohort's part of a dispatch start: members the plan runs as plain
        decodes stay (their blocks opened, their rows counted); members it does
        not run so are settled and leave. Returns every row's request, the rows
        left to write one by one, the members run, and their summed context."""
        if cohort.last_done != self.now:
            # An idle gap (no built-in policy leaves one while members decode): their
            # last output is not this start, so they are written and leave.
            cohort.settle_all()
            return None, plan, 0, 0
        get = cohort.members.get
        if type(plan) is DecodesFirst:
            # The policy's own list of decodes: one look-up per row, in C.
            decoders = plan.decoders
            inside = list(map(get, decoders))
            members = len(decoders) - inside.count(None)
            if members != len(cohort.members):
                kept = set(compress(decoders, inside))
                for req in list(cohort.members):
                    if req not in kept:
                        cohort.settle(req)
            chunks = plan.rest
            requests = decoders if not chunks else decoders + list(map(_first, chunks))
            if members < len(decoders):
                others = [req for req, m in zip(decoders, inside) if m is None]
                rest = list(zip(others, repeat(1)))
                rest += chunks
            else:
                rest = chunks
        else:
            requests = list(map(_first, plan))
            inside = list(map(get, requests))
            members = len(requests) - inside.count(None)
            mine = [row for row, m in zip(plan, inside) if m is not None]
            if members != len(cohort.members) or sum(map(_second, mine)) != members:
                # Members left out of the plan, or given other than one row: settled.
                kept = {req for req, tokens in mine if tokens == 1}
                for req in list(cohort.members):
                    if req not in kept:
                        cohort.settle(req)
                members = len(kept)
            rest = [row for row in plan if row[0] not in cohort.members]
        if not members:
            return None, plan, 0, 0
        return requests, rest, members, cohort.start(self.allocator.open_block)

    def _watch_replay(self, tokens: int) -> None:
        """Detect a schedule going in circles: replaying, without one useful row,
        more rows than all live requests ever wrote (plus one full pool)."""
        self._idle_replay += tokens
        pool = self.options.num_blocks * self.options.block_size
        if self._idle_replay <= pool:
            return
        if self._replay_limit is None:
            self._replay_limit = pool + sum(r.high_water for r in self.requests.values()
                                            if not r.status.is_finished)
        if self._idle_replay > self._replay_limit:
            self._livelocked = True

    def _complete(self, flight: _InFlight) -> None:
        """E1: record the outputs; finish requests that produced their last one."""
        now = self.now
        # Gaps since each request's previous output (ITL), counted by the time of
        # that output: most rows had theirs when this dispatch started.
        since: dict[int, int] = {}  # previous output time -> outputs since then
        decoders = flight.decoders
        if decoders is None:  # chunks among the rows: only those that emit
            decoders = [req for req, emits in flight.rows if emits]
        ended = emit_outputs(decoders, now, flight.start, since)
        cohort = self._cohort
        if cohort is not None:
            ended = self._complete_members(flight, cohort, ended, since)
        keeps = self.policy.keeps_blocks_after_finish
        for req in ended:  # their last output
            if req.block_keys is not None and not keeps:
                # What decoding left unkeyed (SGLang's tree keys it now).
                self.allocator.register_full_blocks(req.rid, req.block_keys, req.resident)
            req.finish(now)
            self.policy.remove(req)
            handed = req.remote == PRODUCER and self.remote is not None
            if handed:
                self.remote.prefilled(self, req)  # pins its blocks for the copy
            if not keeps:
                self._release_request(req)
            self._end(req)
            if self._emit is not None and not handed:
                self._emit(Finished(now, req.rid, req.status.label))
        self.ledger.completed(now, flight.exact, flight.outputs, since)

    def _complete_members(self, flight: _InFlight, cohort: Cohort, ended: list[Request],
                          since: dict[int, int]) -> list[Request]:
        """The cohort's part of a completion: members emit (their previous output
        came when the dispatch started), those at their last output leave, and the
        plain decodes of this dispatch that go on join. Returns every request that
        finished, in row order."""
        if flight.members:
            since[flight.start] = since.get(flight.start, 0) + flight.members
            done = cohort.complete(self.now)
            if done:
                order = flight.requests.index
                ended = sorted(ended + done, key=order)
        else:
            cohort.completed += 1
            cohort.last_done = self.now
        if flight.rows is None:
            joining = flight.decoders
        else:  # the rows that were plain decodes: steady rows that emit
            joining = [req for req, emits in flight.rows if emits]
        if joining:
            finished = set(ended) if ended else ()
            for req in joining:
                if (req not in finished and req.resident >= req.high_water
                        # Request.plain_decode, inlined:
                        and req.resident >= req.prompt_tokens and req.resident >= req.restore
                        and req.last_output_at == self.now):
                    cohort.join(req)
        return ended

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

    def _repeats(self, flight: _InFlight, changes: int, assignments: int) -> bool:
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
        if self._spill is not None and self._spill.spilled:
            list(self._spill)  # every spilled request is built, to end in error
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


def request_of(spec: RequestSpec) -> Request:
    """A request, waiting, as its trace record describes it (also for fleets)."""
    return Request(spec.id, spec.index, spec.arrival, spec.prompt_tokens, spec.output_tokens,
                   spec.max_tokens, spec.priority, spec.deadline, spec.prompt_token_ids,
                   spec.output_token_ids, spec.block_hashes)


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
