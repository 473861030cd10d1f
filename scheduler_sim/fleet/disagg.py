"""Prefill/decode disaggregation: prefill replicas, decode replicas, and the KV copies
between them (`prefill_replicas`, `decode_replicas`, `kv_link_gbps`).

The fleet owns `prefill_replicas` + `decode_replicas` engines (replicas 0 to
P-1 prefill, the next D decode), each a whole `Engine` in routed mode under
the same policy and options, and the copies of prompt KV from the first kind
to the second. The model, as vLLM runs it with a KV connector (its NIXL
connector, vLLM 0.33; facts from its source, no code):

1. **Prefill.** At its arrival a request is routed (the `router` option) to a
   prefill replica as a prompt-only request: P prompt tokens, one output,
   max_tokens 1 (vLLM's proxy sends it with max_tokens=1 and discards the
   answer). Its prefill emits that one token, which no client sees. When the
   token is recorded (E1) the replica pins the request's blocks for the copy
   (`BlockAllocator.pin`), and the request's run there ends: a `prefilled`
   record instead of `finished`, its credit and its own references released
   (A4), its pinned blocks held until the copy's drain is acknowledged.
2. **Hand-off.** At that same time a router of the same kind picks a decode
   replica, seeing the decode replicas as they are then; the request (with
   its trace's outputs and max_tokens, and the client's send time) joins
   that replica's waiting queue (`arrival` there, without client_wait).
3. **Admission and the copy.** The decode replica's policy admits it by its
   own rules, exactly as a new request of P prompt tokens (prefix-cache hits
   included). On admission the engine takes blocks for the whole prompt
   (`Engine.admit`), and when the policy's step is over the request leaves
   the policy (`Engine._park`, its rows dropped from that step's dispatch)
   and waits in state `waiting_for_remote_kv` while P - hit tokens of KV are
   copied (`transfer_started`); it is never scheduled meanwhile.
4. **Landing.** When the copy lands (`transfer_done`) the prefill replica's
   pins are let go (`unpin` with the release_delay, A5), and the request,
   now holding P - 1 resident rows (vLLM sets its computed tokens to P - 1:
   the last prompt token is computed again) and no credit, waits again in
   its replica's queue (`requeue`). The policy admits it a second time, by
   its usual rules, seeing its own blocks as its cached prefix
   (`Engine.cached_prefix`, `Policy.hit_rows`); its first step writes the
   last prompt row and emits output 1, the client's first token; then it
   decodes. A later preemption recomputes it there (the copy is gone).
5. **Duration.** With a cost model a copy lasts the model's KV bytes per
   token (all layers and KV heads, `ModelSpec.kv_bytes_per_token`) x the
   tokens copied / (`kv_link_gbps` x 1e9 / 8) seconds, ending at the first
   clock step at or after that, at least one step after it started (as a
   dispatch does); without a cost model one tick.
6. **Cancellations, forced preemptions, timeouts.** A trace action acts on
   the replica that holds the request at that time, at the first fleet
   boundary at or after its time at which that replica has no dispatch in
   flight (E4). On a prefill replica, as on any engine. During a copy, a
   cancel aborts it: the decode replica's blocks are let go at once (they
   drain); the prefill replica's pins stay until the aborted copy's drain is
   acknowledged, at the time it would have landed (`transfer_done` with
   `aborted` true). A request that ends on a decode replica before its copy
   started (cancelled or timed out in the queue) lets the pins go at once.
   A forced preemption of a request that is copying is `preempt_ignored`
   (it is not running).
7. **Rejections.** A request that the decode replicas could never serve
   (E6 with its full outputs) is rejected at its prefill replica.

The order at one time t: (1) every replica's dispatch completing at t
records its outputs (E1), prefill replicas pinning and handing off; (2)
copies landing at t; (3) the hand-offs of (1) are routed to decode replicas;
(4) arrivals are routed to prefill replicas; (5) replica by replica: due
cancellations, timeouts, due forced preemptions, drain releases, the
policy's step (E2, E3), and the copies its admissions start.

Decode replicas fold steady decode stretches (E7.5) up to the next moment
anything may reach them: an arrival anywhere (it may free pins), a copy
landing, a trace action, or a prefill replica's next completion (a
hand-off), one step ahead when a prefill replica is idle with requests; not
when events are recorded, since a folded stretch would write one replica's
records ahead of the others'.

Every trace request ends exactly once: on its decode replica, or on its
prefill replica if it was cancelled, rejected, timed out or stalled there
(the prompt-only run that handed off is not an end). The fleet's summary
counts each trace request once (its latencies from the client's send: TTFT
at the decode replica's first output), dispatches of every replica, and the
copies (`transfers`, `transfers_aborted`, `transfer_tokens`,
`transfer_time_mean`, `transfer_time_max`); per-replica summaries carry
their `role` and count what each replica did (a prefill replica's runs end
`finished_length_capped` with one output); `disagg_result` makes that result.
"""
from __future__ import annotations

import heapq
from typing import Callable

from ..engine.core import Engine, request_of
from ..engine.run_stats import RunStats
from ..kv.allocator import blocks_for
from ..records.events import Event, Prefilled, TransferDone, TransferStarted
from ..records.options import Options
from ..records.workload import RequestSpec, Workload
from ..requests.request import (
    HANDED_OFF, LOADED, LOADING, PRODUCER, REMOTE, Request, set_outputs,
)
from .disagg_result import disagg_result
from .fleet import FleetResult, ReplicaView, make_replicas, run_guarded, stall_the_stuck
from .replica_agenda import ReplicaAgenda
from .routers import make_router

__all__ = ["DisaggFleet", "Transfer"]

INF = float("inf")



class Transfer:
    """One copy of a prompt's KV from a prefill replica to a decode replica."""

    __slots__ = ("req", "source", "target", "handle", "tokens", "start", "done", "aborted")

    def __init__(self, req: Request, source: int, target: int, handle: int | None,
                 tokens: int, start: int, done: int) -> None:
        self.req = req
        self.source = source    # prefill replica (fleet index)
        self.target = target    # decode replica (fleet index)
        self.handle = handle    # the pin on the prefill replica's blocks
        self.tokens = tokens
        self.start = start
        self.done = done
        self.aborted = False


class _Hooks:
    """What one replica's engine calls back (`FleetLink.hooks`)."""

    __slots__ = ("fleet", "index")

    def __init__(self, fleet: "DisaggFleet", index: int) -> None:
        self.fleet = fleet
        self.index = index

    def prefilled(self, engine: Engine, req: Request) -> None:
        self.fleet._prefilled(self.index, engine, req)

    def transfer(self, engine: Engine, req: Request) -> None:
        self.fleet._start_transfer(self.index, engine, req)


class DisaggFleet:
    """Replays one workload on prefill and decode replicas under one policy.

    The keywords are those of `Fleet`; `on_request_end` sees each trace
    request once, at its one end.
    """

    def __init__(self, workload: Workload, options: Options, policy: str,
                 on_event: Callable[[int], Callable[[Event], None] | None] | None = None,
                 keep_requests: bool = True,
                 on_request_end: Callable[[Request], None] | None = None,
                 audit: bool = False, fast_forward: bool | None = None) -> None:
        self.policy_name = policy  # (the engines refuse options that cannot work)
        self.prefills = p = options.prefill_replicas
        n = p + options.decode_replicas
        self.engines = make_replicas(workload, options, policy, n, on_event, keep_requests,
                                     self._ender, audit, fast_forward)
        for i, engine in enumerate(self.engines):
            engine.link.hooks = _Hooks(self, i)
        first = self.engines[0]
        self.options = first.options
        self.clock = first.clock
        self.workload = workload.on_clock(self.clock)
        self.cost = first.cost
        self.prefill_views = [ReplicaView(i, e) for i, e in enumerate(self.engines[:p])]
        self.decode_views = [ReplicaView(j, e) for j, e in enumerate(self.engines[p:])]
        self.prefill_router = make_router(self.options)
        self.decode_router = make_router(self.options)
        self._keep = keep_requests
        self._on_request_end = on_request_end
        self.final = RunStats(self.clock, self.options.slo)  # each trace request's end
        self.finals: list[Request] = []
        self.now = 0
        self._specs: dict[str, RequestSpec] = {}     # requests not yet handed off
        self._holder: dict[str, int] = {}           # the replica holding each request
        self._pins: dict[str, tuple[int, int | None]] = {}  # copies not yet started
        self._copying: dict[str, Transfer] = {}     # copies in flight, by request
        self._transfers: list[tuple[int, int, Transfer]] = []  # (done, seq, copy)
        self._seq = 0
        self._handoffs: list[tuple[Request, int, int | None]] = []
        self._active: set[int] = set()
        self.handed_off = 0
        self.transfers = self.transfers_aborted = self.transfer_tokens = 0
        self.transfer_steps: list[int] = []
        self.routed = [0] * n
        w = self.workload
        self._cancels = list(w.cancels)   # pending, in (at, trace position) order
        self._preempts = list(w.preempts)

    # --- the engines' hooks ------------------------------------------------------------

    def _ender(self, index: int) -> Callable[[Request], None]:
        return lambda req: self._ended(index, req)

    def _ended(self, index: int, req: Request) -> None:
        """A request reached a terminal state on replica `index`."""
        if req.remote == HANDED_OFF:
            return  # the prompt-only run of a request that goes on elsewhere
        if index >= self.prefills:
            if req.remote == REMOTE:  # ended before its copy began: let the pins go
                source, handle = self._pins.pop(req.rid)
                self._unpin(source, handle)
            elif req.remote == LOADING:  # cancelled during the copy: it is aborted
                self._copying[req.rid].aborted = True
        else:
            spec = self._specs.pop(req.rid)
            set_outputs(req, spec.output_tokens, spec.max_tokens)
        self.final.request_ended(req)
        if self._on_request_end is not None:
            self._on_request_end(req)
        if self._keep:
            self.finals.append(req)

    def _prefilled(self, index: int, engine: Engine, req: Request) -> None:
        """A prefill replica recorded a request's hidden token: pin its blocks."""
        allocator = engine.allocator
        table = allocator.table(req.rid)
        handle = allocator.pin(table) if table else None
        req.remote = HANDED_OFF
        self.handed_off += 1
        self._handoffs.append((req, index, handle))
        if engine.listener is not None:
            engine.listener(Prefilled(engine.now, req.rid, len(table)))

    def _start_transfer(self, index: int, engine: Engine, req: Request) -> None:
        """A decode replica admitted `req` (blocks for its prompt taken): copy its KV."""
        source, handle = self._pins.pop(req.rid)
        now = engine.now
        tokens = req.prompt_tokens - req.resident
        size = self.options.block_size
        blocks = blocks_for(req.prompt_tokens, size) - req.resident // size
        done = now + 1
        if self.cost is not None:
            seconds = (self.cost.model.kv_bytes_per_token * tokens
                       / (self.options.kv_link_gbps * 1e9 / 8))
            done = self.clock.end_step(now + self.clock.steps(seconds), now)
        copy = Transfer(req, source, index, handle, tokens, now, done)
        self._copying[req.rid] = copy
        heapq.heappush(self._transfers, (done, self._seq, copy))
        self._seq += 1
        if engine.listener is not None:
            engine.listener(TransferStarted(now, req.rid, source, index, tokens, blocks, done))

    def _unpin(self, source: int, handle: int | None) -> None:
        """Acknowledge a copy's drain on prefill replica `source`, now."""
        if handle is None:
            return
        engine = self.engines[source]
        engine.now = self.now
        engine.allocator.unpin(handle, self.now, engine.release_delay)
        engine.note_change()
        self._active.add(source)

    # --- the loop ----------------------------------------------------------------------

    def _land(self, copy: Transfer) -> None:
        """A copy ends now: the pins go; the request waits again with P - 1 rows."""
        t = self.now
        req = copy.req
        del self._copying[req.rid]
        self._unpin(copy.source, copy.handle)
        engine = self.engines[copy.target]
        engine.now = t
        duration = t - copy.start
        if copy.aborted:
            self.transfers_aborted += 1
        else:
            self.transfers += 1
            self.transfer_tokens += copy.tokens
            self.transfer_steps.append(duration)
            engine.allocator.release_credit(req.rid)
            rows = req.prompt_tokens - 1
            req.load_remote_kv(rows)
            req.transfer_time = duration
            if req.block_keys is not None and rows:
                engine.allocator.register_full_blocks(req.rid, req.block_keys, rows)
            req.remote = LOADED
            engine.start_waiting(req)
            engine.policy.requeue_landed(req)  # before every request holding no blocks
            engine.note_change()
            self._active.add(copy.target)
        if engine.listener is not None:
            engine.listener(TransferDone(t, req.rid, copy.source, copy.target, copy.tokens,
                                         duration, copy.aborted))

    def _hand_off(self, producer: Request, source: int, handle: int | None) -> None:
        """Route a prefilled request to a decode replica's queue, now."""
        spec = self._specs.pop(producer.rid)
        req = request_of(spec)
        req.remote = REMOTE
        req.sent = producer.sent
        req.admitted_at = producer.admitted_at
        req.cached_tokens = producer.cached_tokens
        req.preemptions = producer.preemptions
        req.replay_rows = producer.replay_rows
        j = self.prefills + self.decode_router.choose(spec, self.decode_views)
        engine = self.engines[j]
        engine.now = self.now
        self._pins[req.rid] = (source, handle)
        self._holder[req.rid] = j
        self.routed[j] += 1
        self._active.add(j)
        engine.accept_request(req, forwarded=True)

    def _arrive(self, spec: RequestSpec) -> None:
        """Route an arrival to a prefill replica, as a prompt-only request."""
        i = self.prefill_router.choose(spec, self.prefill_views)
        engine = self.engines[i]
        engine.now = self.now
        self._specs[spec.id] = spec
        self._holder[spec.id] = i
        self.routed[i] += 1
        self._active.add(i)
        full = request_of(spec)
        decode = self.engines[self.prefills].policy
        if decode.blocks_to_finish(full) > self.options.num_blocks:
            engine.accept_request(full)  # rejected there, by the same rule (E6)
            return
        req = Request(spec.id, spec.index, spec.arrival, spec.prompt_tokens, 1, 1,
                      spec.priority, spec.deadline, spec.prompt_token_ids,
                      spec.output_token_ids[:1] if spec.output_token_ids else None,
                      spec.block_hashes)
        req.remote = PRODUCER
        engine.accept_request(req)

    def _due_actions(self, actions: list, t: int) -> dict[int, list[str]]:
        """The actions due at t whose replica has no dispatch in flight, taken off the
        pending list, by replica (the others wait, E4)."""
        out: dict[int, list[str]] = {}
        keep = []
        i, n = 0, len(actions)
        while i < n and actions[i].at <= t:  # sorted by time: only the due ones are read
            action = actions[i]
            i += 1
            holder = self._holder[action.id]
            if self.engines[holder].flight is not None:
                keep.append(action)
                continue
            out.setdefault(holder, []).append(action.id)
        if i:
            actions[:i] = keep
        return out

    def run(self) -> FleetResult:
        """Replay the workload; a plugin policy's failure on any replica is the
        policy's (`fleet.run_guarded`)."""
        return run_guarded(self.engines, self.policy_name, self._run)

    def _run(self) -> FleetResult:
        engines = self.engines
        n = len(engines)
        specs = self.workload.arrivals()
        spec = next(specs, None)
        t = first = spec.arrival if spec is not None else 0
        agenda = ReplicaAgenda(n)  # each replica's next boundary
        stalled = False
        while True:
            self.now = t
            active = agenda.due(t)
            self._active = set(active)
            for i in active:                                  # 1. E1
                engine = engines[i]
                engine.now = t
                engine.complete_due()
            transfers = self._transfers
            while transfers and transfers[0][0] <= t:         # 2. copies landing
                self._land(heapq.heappop(transfers)[2])
            handoffs, self._handoffs = self._handoffs, []
            for producer, source, handle in handoffs:         # 3. hand-offs
                self._hand_off(producer, source, handle)
            while spec is not None and spec.arrival == t:    # 4. arrivals
                self._arrive(spec)
                spec = next(specs, None)
            cancels = self._due_actions(self._cancels, t)
            preempts = self._due_actions(self._preempts, t)
            self._active.update(cancels, preempts)
            while self._active:                               # 5. E2, E3
                # A replica an unpin wakes after its own step steps again.
                todo = sorted(self._active)
                self._active = set()
                for i in todo:
                    engine = engines[i]
                    engine.now = t
                    engine.take_outside_events(cancels.pop(i, []), preempts.pop(i, []))
                    if engine.stall_if_livelocked():
                        stalled = True
                        agenda.set(i, INF)
                        continue
                    engine.link.horizon = self._horizon(i, t, spec, agenda.at)
                    moved = engine.step()
                    agenda.set(i, engine.next_boundary(moved))
            nxt = agenda.peek()
            for when in (spec.arrival if spec is not None else INF,
                         transfers[0][0] if transfers else INF,
                         _next_at(self._cancels, t), _next_at(self._preempts, t)):
                if when < nxt:
                    nxt = when
            if nxt == INF:
                stalled |= stall_the_stuck(engines, t)
                break
            t = nxt
        return disagg_result(self, first, stalled, self._keep)

    def _horizon(self, i: int, t: int, spec: RequestSpec | None, due: list[float]) -> float:
        """Where a fold on replica `i` must stop (E7.5): the next arrival, copy landing
        or trace action anywhere, and, for a decode replica, the next hand-off a
        prefill replica may make: its dispatch's completion, or one step from now
        if it is idle with requests (an unpin may let it dispatch at once)."""
        horizon = spec.arrival if spec is not None else INF
        transfers = self._transfers
        if transfers and transfers[0][0] < horizon:
            horizon = transfers[0][0]
        for actions in (self._cancels, self._preempts):
            when = _next_at(actions, t - 1) if actions else INF
            if when < horizon:
                horizon = when
        if i >= self.prefills:
            for j in range(self.prefills):
                engine = self.engines[j]
                when = (engine.flight.done if engine.flight is not None
                        else (t + 1 if engine.live else due[j]))
                if when < horizon:
                    horizon = when
        return horizon


def _next_at(actions: list, t: int) -> float:
    """The earliest pending action after t (those due already wait for a completion)."""
    for action in actions:  # sorted by time: past the few that wait for a completion
        if action.at > t:
            return action.at
    return INF
