"""The policy interface: what a scheduling policy decides and what it may ask.

The engine owns the clock, the event order and every request's lifecycle. A
policy owns its queues and makes two kinds of decision at each boundary,
inside `schedule`:
- which waiting requests to admit (and, for some policies, which running
  ones to preempt), carried out through the `SchedulerView` so that the
  engine can assert the transition and report it;
- the next dispatch: a list of `(request, tokens)` pairs. The engine derives
  each row's phase and whether it emits, allocates the blocks and checks the
  budgets.

The engine tells the policy about requests it did not choose to move:
`add` (registered and waiting), `requeue` (preempted, waiting again) and
`remove` (ended or preempted: forget it wherever it sits).
"""
from __future__ import annotations

from typing import ClassVar, Protocol

from itertools import chain, repeat

from ..kv.allocator import BlockAllocator
from ..records.clock import Clock
from ..records.options import Options
from ..requests.queues import FcfsQueue, HoldingFirst, RequestQueue, make_queue
from ..requests.request import LOADED, Request

__all__ = ["SchedulerView", "Policy", "QueueAndListPolicy", "Plan", "DecodesFirst", "PADDING"]

Plan = list  # list[tuple[Request, int]]: the next dispatch, request -> tokens


class DecodesFirst:
    """A plan given as its decodes, then its other rows: iterating it gives one
    (request, 1) pair per request of `decoders`, then the pairs of `rest`. A
    built-in policy may return it instead of a list, so that the engine takes the
    decodes as the policy's own list, without a pair per row. `opened`: the policy
    has opened and keyed the blocks the decoders' rows need (vllm's run of decodes)."""

    __slots__ = ("decoders", "rest", "opened")

    def __init__(self, decoders: list[Request], rest: list[tuple[Request, int]],
                 opened: bool = False) -> None:
        self.decoders = decoders
        self.rest = rest
        self.opened = opened

    def __iter__(self):
        return chain(zip(self.decoders, repeat(1)), self.rest)

    def __len__(self) -> int:
        return len(self.decoders) + len(self.rest)

    def __bool__(self) -> bool:
        return bool(self.decoders) or bool(self.rest)

# A plan entry (request, PADDING) is a padding row: a finished member of a
# static batch that still occupies its row (one token of budget, no KV, no
# output) until the batch ends.
PADDING = 0


class SchedulerView(Protocol):
    """What the engine lets a policy see and do."""

    options: Options
    allocator: BlockAllocator
    clock: Clock  # converts option durations to clock steps
    now: int
    # Under data-parallel lockstep, the step counter every rank shares; else None.
    lockstep_step: int | None

    def admit(self, req: Request, credit: int, cached: list[int] = (),
              loaded: int = 0) -> None:
        """Move `req` to RUNNING with a reservation of `credit` blocks (0: on demand),
        sharing the `cached` prefix blocks found by `cached_prefix`; with `loaded`
        (policies whose `host_loads` is "batch") those rows past them are copied in
        from host memory with the batch it joins."""

    def cached_prefix(self, req: Request, whole: bool = False) -> list[int]:
        """The leading blocks of `req` the prefix cache can give it now (read-only);
        `whole` includes the block of the sequence's last token (never reusable)."""

    def report_blocked(self, req: Request, reason: str, needed: int) -> None:
        """Report that the queue head `req` cannot be admitted now, and why."""

    def host_rows(self, req: Request, cached: list[int]) -> int:
        """The rows past the `cached` hit that host memory could copy into the GPU for
        `req` now (0: none, or no host memory; README "Host memory")."""

    def load(self, req: Request, cached: list[int], rows: int = 0) -> None:
        """Copy in the rows `host_rows` found for `req`, which the policy took out of
        its queue: it holds its hit and their blocks (and blocks for at least `rows`
        rows), waits off the policy, and comes back through `requeue_landed` when
        they land."""

    def release(self, req: Request) -> int:
        """Let go of a finished request's blocks that the policy kept (static batches)."""

    def emit_event(self, event) -> None:
        """Report a policy-specific event record (e.g. sglang's `ratio`)."""

    def preempt(self, req: Request, reason: str, rule: str | None = None,
                trigger: str | None = None) -> int:
        """Take `req`'s blocks away and make it wait again; return blocks freed.

        The engine calls the policy's `remove` and then `requeue` for it."""


class Policy:
    """Base class of every policy; subclasses live one per module in this package."""

    name: ClassVar[str] = ""
    # True: admission reserves the worst case (A1) and E6 rejects by P + M - 1.
    # False: blocks are allocated on demand and E6 rejects by P + N - 1.
    reserves: ClassVar[bool] = True
    # True: a recompute feeds the pending token too and emits at its end (L3, vllm).
    recompute_includes_pending: ClassVar[bool] = False
    # True: a request that finishes keeps its blocks (and credit) until the
    # policy calls `view.release` (padded static batches).
    keeps_blocks_after_finish: ClassVar[bool] = False
    # True: with prefix caching, a block filled with content another cached
    # block already holds is cached too (vLLM keeps several blocks per hash);
    # False: it stays a plain block, reused first when freed.
    caches_duplicate_blocks: ClassVar[bool] = False
    # True: with prefix caching, cached blocks evict as SGLang's radix tree does:
    # blocks registered together form a node, split where a lookup ends; lookups
    # and registrations stamp the nodes on their path; eviction takes a whole
    # free leaf node, the oldest stamp first (§8). False: one LRU queue of blocks.
    radix_eviction: ClassVar[bool] = False
    # True: between dispatches the policy reads nothing of a request it runs as
    # a plain decode but its identity and `admit_seq` (its plan lists such rows
    # as (request, 1)): the engine may then count steady decoders instead of
    # writing each row (engine/fast/cohort.py), writing their progress in before
    # anything else touches them. Built-in policies only.
    lazy_decoders: ClassVar[bool] = False
    # True (with `lazy_decoders`): `schedule` itself reads the progress of the
    # requests it runs as plain decodes (vllm: their rows, to allocate their
    # blocks), so the engine writes the counted ones in before each call; the
    # calls of a fixed point (`repeats_decodes`, `decodes_repeated`,
    # `admit_arrivals`, `next_decodes`) still read none of it (`admit_arrivals`
    # asks the engine which decodes open a block: `decodes_opening`).
    schedule_reads_decoders: ClassVar[bool] = False
    # How the policy meets KV in host memory (README "Host memory"): None, it does
    # not ask (`host_rows`), and the engine loads what it finds at admission while
    # the request waits off the batch; "wait": it asks and sends a hit to `load`
    # (vLLM); "batch": it asks and admits with the rows, copied in with the batch
    # it joins (SGLang's HiCache).
    host_loads: ClassVar[str | None] = None

    def __init__(self, options: Options, view: SchedulerView) -> None:
        self.options = options
        self.view = view

    def requeue_into(self, queue: RequestQueue, req: Request) -> None:
        """Put a preempted request back: at the front, or by its original arrival
        (option `resume_order`)."""
        if self.options.resume_order == "front":
            queue.prepend(req)
        else:
            queue.insert_by_arrival(req)

    def make_waiting_queue(self) -> RequestQueue:
        """The waiting queue in the configured order (`lpm` scores by cached prefix);
        with disaggregation or host memory, requests holding a landed KV copy go
        first."""
        o = self.options
        queue = make_queue(o.order, o.seed, o.lpm_threshold,
                           lambda req: len(self.view.cached_prefix(req, whole=True)),
                           o.block_size)
        if o.disagg or o.host_kv_gib:
            queue = self.holding = HoldingFirst(queue)
        return queue

    # The waiting queue's block-holding part, with disaggregation or host memory (see
    # `requeue_landed`).
    holding: HoldingFirst | None = None

    def requeue_landed(self, req: Request) -> None:
        """A request whose KV was copied in waits again, holding its blocks
        (fleet/disagg.py, engine/host_moves.py): it goes before every waiting
        request that holds none, as vLLM drains its queue of block-holding requests
        first; otherwise it could wait behind a request that needs its blocks,
        forever."""
        if self.holding is not None:
            self.holding.hold(req)
        else:
            self.requeue(req)

    # --- sizing -------------------------------------------------------------

    def blocks_to_finish(self, req: Request) -> int:
        """Blocks `req` needs over its whole life under this policy (E6, A1)."""
        rows = req.prompt_tokens - 1 + (req.max_tokens if self.reserves else req.output_tokens)
        # (`blocks_for`, inline: twice a request, at its registration and its
        # reservation; benchmarks/README.md, "twelfth steps ... mil8")
        return -(-rows // self.options.block_size)

    def why_too_big(self, req: Request, needed: int) -> str:
        """The reason of a `rejected` record: what the `needed` blocks are for (E6)."""
        rule = "P+M-1" if self.reserves else "P+N-1"
        return f"needs {needed} blocks for {rule} rows, more than num_blocks"

    def hit_rows(self, req: Request, cached: list[int]) -> int:
        """The rows `req` starts with when admitted with the `cached` blocks that
        `cached_prefix` found: their rows, or, for a request whose prompt's KV was
        copied from a prefill replica (fleet/disagg.py), the P - 1 rows it already
        holds (`cached` are then its own blocks)."""
        if req.remote == LOADED:
            return req.resident
        return len(cached) * self.options.block_size

    # --- the reservation gate (A1, A2, A5), shared by reserving policies -----

    def reservation_need(self, req: Request) -> tuple[int, int, list[int]]:
        """(credit, needed, cached) to admit `req` under reservation: the credit
        covers only the blocks it will allocate itself (A5); `needed` adds the
        free cached blocks a hit takes out of the pool; `cached` is the hit."""
        cached = self.view.cached_prefix(req)
        if not cached:  # (nothing is free among no blocks: two calls fewer a request)
            credit = self.blocks_to_finish(req)
            return credit, credit, cached
        credit = self.blocks_to_finish(req) - len(cached)
        return credit, credit + self.view.allocator.evictable(cached), cached

    def fits_reservation(self, req: Request, needed: int) -> bool:
        """True if `needed` more blocks can be promised now (A3); otherwise report
        `req` blocked, for `draining` when it would fit once the draining blocks
        are free (cleanup holds it back), else for `reservation` (credits do)."""
        allocator = self.view.allocator
        if allocator.can_reserve(needed):
            return True
        fits_later = allocator.committed() - allocator.draining + needed <= allocator.num_blocks
        self.view.report_blocked(req, "draining" if fits_later else "reservation", needed)
        return False

    # --- notifications from the engine --------------------------------------

    def add(self, req: Request) -> None:
        """A new request was registered and waits for admission."""
        raise NotImplementedError

    def requeue(self, req: Request) -> None:
        """A preempted request waits again for admission."""
        raise NotImplementedError

    def remove(self, req: Request) -> None:
        """`req` ended or was preempted: drop it from wherever the policy keeps it."""
        raise NotImplementedError

    # --- decisions ------------------------------------------------------------

    def schedule(self, now: int) -> Plan:
        """Admit what fits and return the next dispatch (empty: nothing to run)."""
        raise NotImplementedError

    def may_fold(self, blocked_reason: str | None) -> bool:
        """Asked only when the engine saw the decode step just planned repeat the one
        before exactly (the same rows, nothing admitted, preempted, freed or
        reported differently): may the engine apply the identical steps that
        follow at once, until a request finishes or something outside happens
        (engine/fast/folding.py)? `blocked_reason` is the reason this step's queue head was
        reported blocked for, or None.

        The default answers yes when no head is blocked: only the policy knows
        whether its admission test can turn true while running requests only
        decode. It cannot when the test compares needs with free blocks (decoding
        only consumes them), credits or counts, unless prefix caching may turn
        the blocks being filled into hits for the head; answer True for those
        reasons. Answer False whenever your choices change as requests decode (a
        time slice of k tokens, say): then every step is planned by `schedule`."""
        return blocked_reason is None

    def fold_room(self, rows: int, room: int) -> int:
        """Asked by a fold the policy agreed to (`may_fold`) of `rows` decode rows a step
        (engine/fast/folding.py): `room` is the most blocks the engine lets the folded
        steps take (the free ones, less what keeps a blocked head's need fitting); return
        the most the policy lets them take, so that none of the `schedule` calls the fold
        skips would have done anything but plan the same decodes (evicted cached blocks
        ahead of need, say). The default, `room`: a decode step changes nothing else."""
        return room

    def arrivals_wait(self, blocked_reason: str) -> bool:
        """Asked before a fold of decodes behind a head blocked for `blocked_reason`
        (`may_fold` agreed): True promises that an arrival only joins the queue behind
        it and changes nothing the stretch's calls decide (engine/fast/folding.py).
        Asked of built-in policies only; the default, False: a fold stops at each."""
        return False

    def repeats_chunk(self, decoders: list[Request], chunk: Request, tokens: int) -> bool:
        """Asked by the engine right after a `schedule` call that planned a row for every
        request this policy runs, `decoders` then `chunk`, and reported its queue head
        blocked for `token_budget`, or had nothing waiting: each of `decoders` emitted and
        has its whole prompt (and every row to restore) written, `chunk` has rows of its
        prompt left. True promises that, as long as nothing happens but this progress (no
        finish, arrival, cancellation, timeout, preemption, drain or wakeup) and the blocks
        the rows take are free, every call from the next on would plan the decodes of
        `decoders` in that order, then `tokens` more rows of `chunk`'s prompt (the rest of
        the budget), until the one whose chunk would end it; take the blocks in that order
        (each decode's, opening a block at its first row, keying the block its last row
        fills; then the chunk's, keyed as allocated); report the same head blocked for the
        same reason and need (none, when nothing waited), and leave the policy's attributes
        as they are. The engine then applies those steps at once (fast/chunk_run.py). Asked
        of built-in policies only; the default, False, steps every call."""
        return False

    def repeats_decodes(self) -> bool:
        """Asked by the engine right after a dispatch of plain decodes started, a
        dispatch that ran every request this policy runs (or one with prompt rows, when
        nothing waits after the call: its decodes after it may start without a call,
        `next_decodes`): is the policy at a fixed point? True promises that, as long as
        nothing happens but decoding progress and finishes (no arrival, cancellation,
        timeout, preemption, drain or wakeup), every `schedule` call would return the
        same requests' decodes, in the same order, less those that finished, leave the
        policy's attributes as they are but for what `decodes_repeated` sets, and, with
        a listener, write no record before the step's snapshot (`vllm`'s walk writes
        `evicted` ones: it declines). The engine then starts those dispatches itself,
        without `schedule`, through finishes too (engine/fast/through.py). Asked of
        built-in policies only; the default, False, never lets the engine skip a call."""
        return False

    def repeats_blocked(self, reason: str) -> bool:
        """Asked by the engine when the last `schedule` call reported its queue head
        blocked for `reason` (requests wait, so `repeats_decodes` is false) and
        planned a dispatch whose rows are every request this policy runs: their
        decodes, or decodes and whole prompts that end in it. True promises that,
        as long as nothing happens but decoding progress and arrivals (no finish,
        cancellation, timeout, preemption, drain or wakeup), every `schedule`
        call from the next boundary on would report the same head blocked, for
        the same reason and the same need, admit nothing, plan the decodes of
        every request it runs in the same order, and leave the policy's
        attributes as they are but for what `decodes_repeated` and
        `next_decodes` set: arrivals wait behind the head and change none of it.
        Asked again after a finish (its request removed): True then promises the
        same of the call due now (the credits it freed do not let the head in).
        The engine then starts those dispatches itself and sets the report as
        the call would (engine/fast/blocked.py). Asked of built-in policies
        only; the default, False, never lets the engine skip a call."""
        return False

    def decodes_repeated(self, requests: list[Request]) -> None:
        """The engine started the decodes of `requests`, in that order, in place of
        a `schedule` call it skipped (`repeats_decodes`): set what that call would
        have set (a rotation point, say). Of a run of such repeats with nothing
        but finishes between them, the engine may tell only the last
        (engine/fast/finishes.py): what it sets must not depend on the ones
        before."""

    def admit_arrivals(self, decodes: list[Request]) -> list[tuple[Request, int]] | None:
        """Asked by the engine at a boundary where requests arrived into a fixed
        point (`repeats_decodes` held before they came; finishes since are
        completed): `decodes` are the running requests, in the order the policy
        repeats them. If the `schedule` call due now would admit every waiting
        request and plan `decodes`, then each admitted request's whole prompt
        as one chunk (so that from the next dispatch on every running request
        decodes), do what that call would do (admissions and allocations
        included, in its order) and return those chunks as (request, tokens);
        otherwise change nothing and return None (the engine then calls
        `schedule`). Asked of built-in policies only; the default, None, never
        lets the engine skip the call (engine/fast/arrivals.py)."""
        return None

    def admit_heads(self, decodes: list[Request]) -> list[tuple[Request, int]] | None:
        """Asked by the engine at a finish behind a queue head blocked for credits,
        when `repeats_blocked` held before it and no longer does (the credits
        freed let the head in): `decodes` are the running requests, in the
        order the `schedule` call due now would plan their decodes. If that
        call would admit heads of the queue in order, stopping at the first
        whose credit does not fit (reported as the call reports it) or at its
        end, and plan `decodes`, then each admitted request's whole prompt as
        one chunk, do what that call would do (admissions and report
        included, in its order) and return those chunks as (request, tokens);
        otherwise change nothing and return None (the engine then calls
        `schedule`). Asked of built-in policies only; the default, None, never
        lets the engine skip the call (engine/fast/blocked.py)."""
        return None

    def next_decodes(self) -> list[Request] | None:
        """Asked only when `repeats_decodes` holds, or `repeats_blocked` did when the
        dispatch started, after a dispatch that admitted requests completed
        (engine/fast/arrivals.py, blocked.py): the decodes the `schedule`
        call due now would plan, in its order, having set what that call sets
        (a rotation point, say); None: unknown (the engine calls `schedule`)."""
        return None

    def decode_order(self) -> list[Request] | None:
        """Asked only when `repeats_decodes` held before requests arrived at the
        completion of a dispatch that admitted others (engine/fast/arrivals.py's
        `admit_after_prompts`): the decodes `next_decodes` would give, in its
        order, setting nothing (`admit_arrivals` sets what the call sets); None:
        unknown (the engine calls `schedule`)."""
        return None

    def next_wakeup(self, now: int) -> int | None:
        """A future tick at which the policy would decide differently with no other
        change (a batching window, a timeout); None if there is none."""
        return None

    def spill_queue(self) -> FcfsQueue | None:
        """The first-come-first-served queue new requests join (`add`), if the policy
        keeps one: the engine may spill its tail (see `FcfsQueue.spill`) rather
        than hold every waiting request. None: every request is held."""
        return None

    # --- counts for snapshots -------------------------------------------------

    @property
    def waiting_count(self) -> int:
        """Requests waiting for admission (new or preempted)."""
        raise NotImplementedError

    @property
    def running_count(self) -> int:
        """Admitted requests that have not ended."""
        raise NotImplementedError


class QueueAndListPolicy(Policy):
    """A policy that keeps a waiting queue and a running list in admission order
    (the shape of vLLM's and SGLang's schedulers)."""

    def __init__(self, options: Options, view: SchedulerView) -> None:
        super().__init__(options, view)
        self.waiting = self.make_waiting_queue()
        self.running: list[Request] = []

    def add(self, req: Request) -> None:
        self.waiting.add(req)

    def requeue(self, req: Request) -> None:
        self.requeue_into(self.waiting, req)

    def spill_queue(self) -> FcfsQueue | None:
        return self.waiting if type(self.waiting) is FcfsQueue else None

    def remove(self, req: Request) -> None:
        if req in self.waiting:
            self.waiting.remove(req)
        else:
            self.running.remove(req)

    @property
    def waiting_count(self) -> int:
        return len(self.waiting)

    @property
    def running_count(self) -> int:
        return len(self.running)
