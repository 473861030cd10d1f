"""A request's life in an engine: what a policy's decisions do, and what the trace does.

`Lifecycle` is the part of `Engine` (core.py) that moves requests between states
(docs/spec.md §3, §5): the `SchedulerView` calls a policy makes (`admit`,
`report_blocked`, `preempt`, `release`, `cached_prefix`, `emit_event`), arrivals and
their registration (rejection, E6), sends of closed-loop clients, cancellations, forced
preemptions and waiting timeouts, the end of a request, and the long
first-come-first-served queue's spilled tail. The engine's state (its allocator,
policy, requests, counters) is set up by `Engine.__init__`; this class adds none.
"""
from __future__ import annotations

from ..kv.block_keys import BlockKeys
from ..records.errors import InvariantError
from ..records.events import (
    AdmissionBlocked, Arrival, CancelIgnored, Cancelled, Event,
    PreemptIgnored, Preempted, Rejected, Timeout, report_admitted,
)
from ..records.states import RequestStatus
from ..requests.request import (LOADED, LOADING, PARKING, PREEMPTED, REMOTE, RUNNING, RemoteKv,
                                Request, seal)
from .policy_failure import check_blocked
from .roster import request_of

__all__ = ["Lifecycle", "request_of"]


class Lifecycle:
    """Request transitions of an `Engine` (see the module)."""

    # --- the SchedulerView a policy sees ----------------------------------------

    def admit(self, req: Request, credit: int, cached: list[int] = (), loaded: int = 0) -> None:
        """Carry out a policy's admission: reserve, take cached blocks, transition, report.

        `cached` are the leading blocks found by `cached_prefix`; the request
        shares them and starts with their rows resident, and with the `loaded`
        rows after them that host memory copies in with this step's batch."""
        if credit:
            self.allocator.reserve(req.rid, credit)
        resumed = req.status is PREEMPTED
        req.admit(self.now, self.roster.admitted, credit)
        hit = 0
        landed = req.remote == LOADED
        if landed:
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
        if req.block_keys is not None and not landed:
            # Keys are given again to the blocks it writes from here on (a resumed
            # request starts from its hits, not from what it had before).
            req.block_keys.registered = len(cached)
        self.roster.admitted += 1
        self.steadiness.moved = True
        self.steadiness.changes += 1  # (`changed()`, a call fewer: benchmarks/README.md, az22)
        if self._emit is not None:  # (a line listener's line without the record)
            report_admitted(self._emit, self.now, req.rid, credit, resumed, hit)
        if req.remote == REMOTE:
            # Disaggregation: blocks for its whole prompt now; the copy starts when
            # the policy's step is over (`_park`).
            if not self.allocator.try_grow(req.rid, req.prompt_tokens):
                raise InvariantError(
                    f"request {req.rid!r}: admitted on a decode replica without free "
                    f"blocks for its prompt of {req.prompt_tokens} rows", self.now)
            req.remote = PARKING
            self.link.parking.append(req)
        elif self.allocator.host is not None and not landed:
            self._host_admit(req, hit, resumed, loaded)  # loads from host memory

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
        if self._plugin:
            check_blocked(req, reason, needed, self.roster.requests, self.now)
        a = self.allocator
        taken = sum(a.step_growth.values())  # blocks this step's rows took already
        self.steadiness.blocked = (req.rid, reason, needed, a.free, taken)
        if self._emit is not None:
            self._emit(AdmissionBlocked(self.now, req.rid, reason, needed, a.free,
                                        a.reserved, a.draining, taken or None))

    def release(self, req: Request) -> int:
        """Free the blocks and credit a finished request kept (static batches)."""
        self.steadiness.changed()
        return self._release_request(req)

    def emit_event(self, event: Event) -> None:
        """Pass a policy's own event record to the listener (the policy changed
        something it reports, so the step is not a repeat)."""
        self.steadiness.changed()
        if self._emit is not None:
            self._emit(event)

    def preempt(self, req: Request, reason: str, rule: str | None = None,
                trigger: str | None = None) -> int:
        """Preempt a running request: its credit goes, its blocks drain (A4, L2)."""
        self._settle(req)
        delay, swapped = (self._host_preempt(req) if self.allocator.host is not None
                          else (self.release_delay, None))
        freed = self.allocator.free_request(req.rid, self.now, delay)
        outputs = req.outputs
        rows = req.resident
        req.preempt(include_pending=self.policy.recompute_includes_pending)
        if req.remote == PARKING:
            # Admitted and preempted in one step, before its copy began: it waits
            # for the copy as before, nothing to recompute.
            req.remote = REMOTE
            req.restore = 0
            req.emit_on_restore = False
            self.link.parking.remove(req)
        self.policy.remove(req)
        self.start_waiting(req)
        self.policy.requeue(req)
        self.steadiness.moved = True
        self.steadiness.changed()
        if self._emit is not None:
            self._emit(Preempted(self.now, req.rid, outputs, rows, freed, reason, rule, trigger))
            if swapped is not None:
                self._emit(swapped)
        return freed

    # --- lifecycle helpers --------------------------------------------------------

    def _settle(self, req: Request) -> None:
        """Before anything touches a running request the cohort counts: it settles, leaves."""
        cohort = self._cohort
        if cohort is not None and req in cohort.members:
            cohort.settle(req)

    def _end(self, req: Request) -> None:
        """Bookkeeping shared by every way a live request ends."""
        self.roster.live -= 1
        self.steadiness.changed()
        self._record_end(req)
        if self.clients is not None:
            self.clients.ended()

    def _record_end(self, req: Request) -> None:
        """A request ended: into the statistics, to `on_request_end`, out of memory unless kept."""
        self.ledger.stats.request_ended(req)
        if self.allocator.host is not None:
            self._host_ended(req)
        self.roster.ended(req)

    def start_waiting(self, req: Request) -> None:
        """Note when `req` entered the waiting queue (for waiting_timeout)."""
        req.wait_since = self.now
        if self.agenda.timeout is not None:  # (tested here: every request waits, few time out)
            self.agenda.wait(req, self.now)

    def _expire_waiting(self) -> None:
        """Abort requests that have waited longer than waiting_timeout."""
        timeouts = self.agenda.timeouts
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
        req.replica = self.link.replica
        self.roster.requests[req.rid] = req
        self.ledger.stats.requests += 1
        self.agenda.arrived += 1
        if self.clients is None:
            spill = self.roster.spill
            self._register(req, spill is not None and spill.wanted())
        else:
            self.clients.arrive(req)

    def _unspill(self) -> Request:
        """Build the next spilled request again from the trace (the spill's `make`)."""
        spec = self.roster.spill.next_spec()
        req = request_of(spec)
        req.sent = spec.arrival
        if self._plugin:
            seal(req)
        self._give_keys(req)
        self.roster.requests[req.rid] = req
        return req

    def _give_keys(self, req: Request) -> None:
        o = self.options  # (the keys a fleet's router computed: `FleetLink.take_keys`)
        if o.prefix_caching:
            req.block_keys = self.link.take_keys(req) or BlockKeys(
                req.index, req.prompt_tokens, o.block_size, o.hash_block_size,
                req.prompt_token_ids, req.output_token_ids, req.block_hashes)

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
        self.steadiness.changed()
        if self.options.prefix_caching:
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
        self.roster.live += 1
        if spill:
            del self.roster.requests[req.rid]
            self.roster.spill.add(self.agenda.arrived - 1, self._unspill)
            return
        self.start_waiting(req)
        self.policy.add(req)

    def _cancel(self, rid: str) -> None:
        req = self.roster.requests[rid]
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
        req = self.roster.requests[rid]
        if req.status != RUNNING:
            if self._emit is not None:
                self._emit(PreemptIgnored(self.now, rid, req.status.label))
            return
        self.preempt(req, "manual")
