"""The step protocol: the phases of one boundary, under public names.

A boundary at `now` is, in this order (§4, §13):
  complete_due()          E1: the dispatch completing now records its outputs;
  accept(...)             a fleet's arrivals for this replica (a lone engine
                          reads its own trace in the next phase);
  take_outside_events()   E2 and E3 up to the policy: arrivals, cancellations,
                          timeouts, forced preemptions, expired drains;
  stall_if_livelocked()   E6b, if the policy goes in circles (livelock.py);
  step()                  E3: the policy admits, preempts and plans; the plan
                          starts, and a steady stretch is folded;
  next_boundary(moved)    E7: when anything can change next (the agenda's
                          `peek`, or the dispatch in flight).
`Engine.run` is that loop for a lone engine; fleet/ drives several engines
through it (fleet.py, lockstep.py, disagg.py), and tests/test_step_protocol.py
drives one from outside to show the protocol is enough. `Stepping` is the
part of `Engine` (core.py) that implements it.
"""
from __future__ import annotations

import operator
from bisect import insort

from ..records.events import Released, Snapshot, Stalled
from ..records.states import RequestStatus
from ..records.workload import Action, RequestSpec
from ..requests.request import LOADED, LOADING, Request
from .fast.folding import FOLD_AFTER, fold, fold_chunks
from .fast.through import carries_on, carry_on
from .fleet_link import park
from .lifecycle import request_of
from .policy_failure import check_plan

__all__ = ["Stepping"]

RUNNING = RequestStatus.RUNNING
_action_order = operator.attrgetter("at", "index")


class Stepping:
    """The public phases of a boundary (mixed into `Engine`)."""

    @property
    def live(self) -> int:
        """Requests registered and not yet ended."""
        return self.roster.live

    @property
    def keep_requests(self) -> bool:
        """Whether the result keeps every request's record."""
        return self.roster.keep

    @property
    def requests(self) -> dict[str, Request]:
        """The run's requests by id: every one registered, or with `keep_requests`
        False only the live ones and those an action names."""
        return self.roster.requests

    def peek(self) -> float:
        """The first time after `now` that anything outside the dispatches may happen."""
        return self.agenda.peek(self.now, self.flight is not None, self.roster.live > 0)

    def note_change(self) -> None:
        """Something a policy sees changed besides decoding progress (a copy landed,
        a pin was dropped): the next step may not be folded as a repeat."""
        self.steadiness.changed()

    def stall_if_livelocked(self) -> bool:
        """End the live requests as a stall (E6b) if the policy goes in circles (the
        livelock watch, livelock.py) and nothing runs; return whether it did."""
        if not (self.livelock.tripped and self.flight is None and self.roster.live):
            return False
        self.stall("the policy keeps recomputing the same rows: "
                   f"{self.livelock.idle:,} rows replayed without one useful row "
                   "(a livelock)")
        self.livelock.tripped = False
        return True

    def complete_due(self) -> None:
        """E1: the dispatch completing now records its outputs first."""
        flight = self.flight
        if flight is not None and flight.done == self.now:
            self.complete_now()  # (by its kind: benchmarks/README.md, "nineteenth steps", arr20)

    def take_outside_events(self, cancels: list[str] | None = None,
                            preempts: list[str] | None = None) -> None:
        """E2 and E3 up to the policy: arrivals (and sends of closed-loop clients),
        then, unless a dispatch is in flight (E4), cancellations, timeouts and forced
        preemptions; then the drains that expire now. The cancellations and forced
        preemptions due now are the workload's, or under disaggregation the ids the
        fleet gives (`cancels`, `preempts`: the fleet holds those of the requests
        it moves between replicas)."""
        t = self.now
        agenda = self.agenda
        outside = False  # the trace changed things at t
        host = self.allocator.host
        if host is not None and host.loads and host.next_landing() <= t:
            self.land_loads()  # loads from host memory land before arrivals
        spec = agenda.next_arrival
        if spec is not None and spec.arrival == t:
            specs = agenda.arrivals
            while spec is not None and spec.arrival == t:
                self.roster.arrive(spec)
                spec = next(specs, None)
            agenda.next_arrival = spec
            outside = True
        clients = self.clients
        if clients is not None:
            self._send_ready()
        if self.flight is None:
            if cancels is None:
                # (Tested before the call: nearly every boundary has none due.)
                cancels = preempts = ()
                w = self.workload
                due = w.cancels
                if agenda.cancel_at < len(due) and due[agenda.cancel_at].at <= t:
                    cancels = agenda.due_cancels(t)
                    outside = True
                due = w.preempts
                if agenda.preempt_at < len(due) and due[agenda.preempt_at].at <= t:
                    preempts = agenda.due_preempts(t)
                    outside = True
            elif cancels or preempts:
                # The fleet's actions changed things: replays since are not the
                # policy's circle.
                self.livelock.reset()
            for rid in cancels:
                self._cancel(rid)
            if agenda.timeouts:
                self._expire_waiting()
            if clients is not None:
                self._send_ready()  # slots the cancellations and timeouts freed
            for rid in preempts:
                self._force_preempt(rid)
        if outside:
            # The trace changed things: replays since are not the policy's circle.
            self.livelock.reset()
        allocator = self.allocator
        if allocator.draining:
            released = allocator.release_expired(t)
            if released:
                self.steadiness.changed()
                if self._emit is not None:
                    self._emit(Released(t, released))

    def step(self) -> bool:
        """E3: when nothing runs, the policy admits, preempts and plans; the plan is
        started (a steady stretch folded, carried on: fast/through.py). Returns whether
        the policy moved. A stretch carried on may stop at a later boundary it took (E1
        and E2 done, `now` moved there) whose plan is the policy's: its step follows."""
        moved, again = self._step_once()
        while again:
            moved, again = self._step_once()
        return moved

    def _step_once(self) -> tuple[bool, bool]:
        """`step` at one boundary: (whether the policy moved, whether a stretch
        carried on took a later boundary still to be stepped)."""
        t = self.now
        allocator = self.allocator
        on_state = self._on_state
        moved = again = False
        if self.flight is None and self.roster.live:
            steady = self.steadiness
            steady.moved = False
            steady.blocked = None
            allocator.step_evictions.clear()
            allocator.step_growth.clear()
            policy = self.policy
            fast = steady.enabled
            if fast:
                before = steady.before_call()
            if self._cohort is not None and policy.schedule_reads_decoders:
                self._cohort.settle_all()  # (vllm reads every running request's rows)
            plan = policy.schedule(t)
            if self._plugin:
                check_plan(plan, self.roster.requests, t)
            if self.link.parking:
                plan = park(self, plan)
            moved = steady.moved
            if on_state is not None:
                on_state(t, self._state(plan), False)
            if plan:
                if self._emit is not None:
                    self._emit(Snapshot(t, **self._state(plan)))
                # Blocks the policy itself gave this step's rows (before the dispatch).
                policy_blocks = sum(allocator.step_growth.values()) if steady.blocked else 0
                flight = self.flight = self._start(plan)
                if fast:
                    until = None
                    looked = False  # whether this dispatch was looked at for folding
                    if not flight.members:
                        if steady.repeats(flight, before):
                            until = self._until()
                            fold(self, flight, until, policy_blocks)
                            looked = True
                        elif flight.rows and (steady.blocked or self._cohort is None
                                              and not policy.waiting_count):
                            fold_chunks(self, flight)  # a chunk run (fast/chunk_run.py)
                    else:
                        # Counted decoders: a stretch is looked at for folding only
                        # if it may last (the next look starts afresh).
                        until = self._until()
                        if until - flight.done < FOLD_AFTER * (flight.done - flight.start):
                            steady.forget()
                            looked = True
                        elif steady.repeats(flight, before):
                            fold(self, flight, until, policy_blocks)
                            looked = True
                    if steady.through and carries_on(self, flight):
                        # On through the finishes, while the policy repeats itself.
                        again = carry_on(self, self._until() if until is None else until,
                                         looked)
                if on_state is not None:
                    on_state(t, self._state(), True)
            else:
                steady.forget()
        elif on_state is not None:
            on_state(t, self._state(), self.flight is not None)
        allocator.check() if not self._audit else allocator.audit()
        if self._audit and allocator.host is not None:
            allocator.host.tier.audit()
        return moved, again

    def _until(self) -> float:
        """The first time after now at which something outside the dispatches may
        happen (a fleet's horizon included): where a folded stretch stops."""
        until = self.agenda.peek(self.now, False, self.roster.live > 0)
        horizon = self.link.horizon
        return until if until < horizon else horizon

    def next_boundary(self, moved: bool) -> float:
        """E7: the earliest time at which anything can change (infinity: nothing can)."""
        t = self.now
        flight = self.flight
        if flight is not None:
            nxt = self.agenda.peek(t, True)
            return flight.done if flight.done < nxt else nxt
        nxt = self.agenda.peek(t, False, self.roster.live > 0)
        if self.roster.live and moved:
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
        if self.roster.spill is not None:
            self.roster.spill.build_all()  # every spilled request is built, to end in error
        for req in list(self.roster.requests.values()):
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

    # --- what a fleet hands a replica (its arrivals and actions) -------------------

    def accept(self, spec: RequestSpec) -> None:
        """A router sends this replica a request arriving now (E2; times on the clock)."""
        self.accept_request(request_of(spec))

    def accept_request(self, req: Request, forwarded: bool = False) -> None:
        """A fleet hands this replica a request arriving now (E2): one of the trace, a
        prefill-only request, or (`forwarded`) one whose prompt another replica
        computed (fleet/disagg.py). (A replica has no client slots and no spill.)"""
        req.replica = self.link.replica
        self.roster.requests[req.rid] = req
        self.ledger.stats.requests += 1
        self.agenda.arrived += 1
        self._register(req, forwarded=forwarded)
        # The trace changed things: replays since are not the policy's circle.
        self.livelock.reset()

    def accept_action(self, action: Action) -> None:
        """A cancellation or forced preemption of a request this replica was sent, due
        at `action.at` (on the clock), kept in (time, trace position) order."""
        w = self.workload
        actions = w.cancels if action.kind == "cancel" else w.preempts
        insort(actions, action, key=_action_order)
