"""`vllm`: the vLLM v1 scheduler's decisions, step by step (§6).

Blocks are allocated on demand, for the tokens scheduled in this step only;
nothing is reserved for the future. A step:

1. Running requests, in running (admission) order, while budget remains:
   each takes min(tokens it still has to compute, prefill threshold,
   remaining budget); a decode takes one. If its blocks cannot be
   allocated, a victim is preempted and the allocation retried. Victims:
   under FCFS the most recently admitted running request; under the
   priority order the one with the largest (priority, arrival), the earliest
   in the running list on a tie. A victim already scheduled this step gives
   its tokens back. If the victim is the request itself, it is not scheduled
   and the loop goes on with the running requests after it.
2. Waiting requests, only if nothing was preempted in this step, in queue
   order while budget remains and fewer than `max_rows` requests run. The
   first that does not fit stops the loop (no skipping). A waiting or
   preempted request is admitted only if blocks for its whole current
   sequence fit (`full_prompt_gate`), and, when something is already
   running, `int(watermark * num_blocks)` blocks must stay free beyond that.

`prefill_chunk` is vLLM's long-prefill threshold: it caps a prefill chunk
only when more than one request is running or waiting at the start of the
step; alone, a prefill takes the whole budget. A preempted request goes to
the front of the queue (FCFS) or back into the priority heap with its
original key; its computed tokens reset to zero, and on resume one
recompute pass covers the prompt and every output, the pending one
included, and emits the next token at its end (the folded recompute of L3).

With prefix caching, the full blocks a scheduled request will fill are keyed
as soon as the request is scheduled (vLLM caches them when it allocates
them, before the step runs), so a request admitted later in the same step
already hits them.

Under data-parallel lockstep (`dp_lockstep`, fleet/lockstep.py) the ranks
share one step counter, as vLLM's data-parallel engine cores do, and prefill
is held on every step whose counter is not a multiple of `prefill_interval`
(same conditions: something decodes, and no capacity escape); the local
cadence below is then off.

`prefill_interval` is vLLM's `prefill_schedule_interval` on one engine: while
some running request decodes, prefill (running chunks, and admissions that
need more than their last token) waits until that many steps that ran
something have passed since the last one that carried prefill; a releasing
step that leaves requests waiting turns the hold off (the capacity escape)
until a releasing step empties the queue.

With `release_delay` (which vLLM does not have) a victim's blocks come
back only after the delay; a request whose blocks will be covered once
the draining blocks are free sits the step out instead of preempting more,
which keeps two requests from preempting each other forever.

Beyond vLLM, for experiments: `victim` picks another victim rule and
`max_preemptions` protects a request that has been preempted that often.

This module owns the step (`schedule`: the running requests, then the waiting
queue). The victim rules are policies/victims.py's; the answers that let the
engine skip steps (folds, repeated decodes, arrivals admitted without a call)
are policies/vllm_fast.py's, and must follow what `schedule` does.
"""
from __future__ import annotations

from itertools import islice, repeat

from ..kv.allocator import blocks_for
from ..records.errors import InvariantError
from ..records.options import Options
from ..requests.request import Request
from .base import DecodesFirst, Plan, QueueAndListPolicy, SchedulerView
from .victims import VICTIM_RULES, choose_victim
from .vllm_fast import VllmFastPaths

__all__ = ["VllmPolicy", "VICTIM_RULES"]


class VllmPolicy(VllmFastPaths, QueueAndListPolicy):
    """vLLM v1: on-demand blocks, preemption by recompute, no admission after a
    preemption."""

    host_loads = "wait"  # a hit in host memory waits off the running set (its load)

    name = "vllm"
    reserves = False
    # Decoders counted by the engine between `schedule` calls (engine/fast/cohort.py),
    # written in before each call: it reads their rows.
    lazy_decoders = True
    schedule_reads_decoders = True
    recompute_includes_pending = True
    caches_duplicate_blocks = True

    def __init__(self, options: Options, view: SchedulerView) -> None:
        super().__init__(options, view)
        # The victim rule (policies/victims.py): vLLM's is the latest admitted under
        # FCFS, the largest (priority, arrival) under the priority order.
        self.rule = options.victim or (
            "priority" if options.order == "priority" else "lifo")
        self.watermark_blocks = int(options.watermark * options.num_blocks)
        # The prefill cadence (option prefill_interval, vLLM's
        # prefill_schedule_interval on one engine), counted only when it is on.
        interval = options.prefill_interval
        self.executed_steps = 0  # steps that ran something
        self.last_prefill_step = -interval  # the last of them that carried prefill
        self.capacity_bound = False  # the last releasing step left requests waiting
        # Whether the plan may hand its run of decodes over as one list (`DecodesFirst`):
        # only the package's own policy, not a plug-in built on it, whose plans must be
        # lists (engine/policy_failure.py). Read at the first step: the engine marks a
        # plug-in after it builds the policy.
        self._hands_runs: bool | None = None
        # A plugin's radix tree under prefix caching folds nothing (`never_folds`).
        # Decided once here: a test at each `may_fold` call read 1.0011x the
        # instructions of the first 2,000 Azure requests under vllm (callgrind).
        if self.radix_eviction and options.prefix_caching:
            self.may_fold = self.never_folds

    # --- the step ---------------------------------------------------------------

    def _chunk(self, req: Request, cap: int | None, budget: int) -> int:
        tokens = req.phase_remaining
        if cap is not None and tokens > cap:
            tokens = cap
        return tokens if tokens < budget else budget

    def schedule(self, now: int) -> Plan:
        options = self.options
        allocator = self.view.allocator
        budget = options.token_budget
        cap = options.prefill_chunk if len(self.running) + len(self.waiting) > 1 else None
        scheduled: dict[Request, int] = {}
        preempted = False
        keyed = allocator.cache is not None  # prefix caching: blocks keyed at allocation
        size = options.block_size
        # A decode that opens a block (its row the block's first) fills none: all its
        # full blocks were keyed as they filled, and keying them again does nothing in
        # vLLM's cache. Unless blocks are of one row (that decode fills one), a radix
        # tree stamps its path even then, or host memory's write-through queues the
        # keys of blocks shared since. Speed: 46,736 of the 73,805 calls of
        # `_cache_blocks` replaying the Mooncake trace; on its first 2,000
        # requests 0.994x the instructions.
        key_openings = keyed and (size == 1 or self.radix_eviction
                                  or allocator.host is not None)
        running = self.running
        interval = options.prefill_interval
        # Hold prefill (running chunks and admissions that need prefill) until the
        # interval since the last step that carried prefill has passed, while something
        # decodes, unless the last releasing step could not empty the queue (the capacity
        # escape). Under data-parallel lockstep the ranks' shared step counter sets the
        # cadence instead: prefill only on steps that are multiples of the interval.
        defer = False
        if interval > 1 and not self.capacity_bound:
            # (A property, read only with a cadence: 0.999x the instructions on the
            # first 2,000 Mooncake requests.)
            shared = self.view.lockstep_step
            defer = ((self.executed_steps + 1 - self.last_prefill_step < interval
                      if shared is None else shared % interval != 0)
                     and any(r.plain_decode for r in running))
        prefill_ran = False

        # 1. Running requests, in running order (`n`: their count, read again after each
        # that may preempt; `edge`: the offset in a block at which a decode fills it).
        i, n, edge = 0, len(running), size - 1
        # The rows of the run from the first row on, not stored in `scheduled`: the
        # plan's first decodes (under prefix caching, in a step that preempts nothing;
        # stored first if a preemption follows). Speed: a dict store fewer a row, 0.992x
        # the instructions replaying the first 2,000 Mooncake requests.
        lead = 0
        hands = self._hands_runs
        if hands is None:
            builtin = bool(getattr(self.view, "builtin_policy", False))
            hands = self._hands_runs = keyed and builtin
        while i < n and budget > 0:
            if budget > n - i:  # (the budget covers every row left)
                # The decodes from row i on, one token each, no index or budget kept,
                # up to a chunk or an opening that may preempt or is keyed. Speed: 24.2
                # of 24.7 rows a step on the Mooncake trace (benchmarks/README.md,
                # "seventeenth steps", pc13).
                for k, req in enumerate(islice(running, i, None)):
                    r = req.resident
                    if r < req.prompt_tokens or r < req.restore:
                        break
                    m = r % size
                    if not m:  # (a failed `try_grow` changes nothing: walked below)
                        if key_openings or not allocator.try_grow(req.rid, r + 1):
                            break
                    elif m == edge and keyed and req.block_keys is not None:
                        allocator.register_full_blocks(req.rid, req.block_keys, r + 1)
                else:
                    k = n - i
                if i or preempted or not hands:
                    scheduled.update(zip(islice(running, i, i + k), repeat(1)))
                else:
                    lead = k
                i, budget = i + k, budget - k
                if i == n:
                    break
            req = running[i]
            r = req.resident
            if r >= req.prompt_tokens and r >= req.restore:  # plain_decode, inlined
                # A decode: one token, and a new block only at a block boundary.
                if r % size:
                    scheduled[req] = 1
                    budget -= 1
                    i += 1
                    if keyed and not (r + 1) % size and req.block_keys is not None:
                        # `_cache_blocks`, inlined: 150,000 decodes fill a block
                        # replaying the Mooncake trace.
                        allocator.register_full_blocks(req.rid, req.block_keys, r + 1)
                    continue
                decoding = True
                tokens = 1
            else:
                decoding = False
                if defer:
                    i += 1  # a prefill chunk waits for the cadence
                    continue
                tokens = self._chunk(req, cap, budget)
            placed = True
            while not allocator.try_grow(req.rid, req.resident + tokens):
                if (options.release_delay
                        and allocator.blocks_to_grow(req.rid, req.resident + tokens)
                        <= allocator.free + allocator.draining):
                    # Blocks already on their way back will do: wait for the drain
                    # rather than preempt more (without a delay this never applies).
                    placed = False
                    break
                victim = choose_victim(running, self.rule, options.max_preemptions,
                                       allocator)
                if victim is None:
                    placed = False
                    break
                if lead:  # (the run's rows stored first, for the victim to leave)
                    stored, scheduled = scheduled, dict.fromkeys(running[:lead], 1)
                    scheduled.update(stored)
                    lead = 0
                if running.index(victim) < i:
                    i -= 1  # an earlier request leaves the list
                budget += scheduled.pop(victim, 0)
                self.view.preempt(victim, "out_of_blocks", self.rule, req.rid)
                preempted = True
                if victim is req:
                    placed = False
                    break
            if placed:
                scheduled[req] = tokens
                budget -= tokens
                i += 1
                # A chunk that got its blocks carries prefill (vLLM's
                # prefill_scheduled; a chunk that preempted itself does not).
                prefill_ran = prefill_ran or not decoding
                if keyed and (not decoding or key_openings):
                    self._cache_blocks(req, req.resident + tokens)
            elif req in running:
                i += 1  # protected from preemption and out of blocks: skip it
            n = len(running)

        # 2. Waiting requests, unless this step preempted.
        waiting = self.waiting
        waiting.refresh()
        while waiting:
            head = waiting.peek()
            if preempted:
                self.view.report_blocked(head, "preemption", self._gate_blocks(head))
                break
            if budget == 0:
                self.view.report_blocked(head, "token_budget", self._gate_blocks(head))
                break
            if len(running) >= options.max_rows:
                self.view.report_blocked(head, "max_rows", self._gate_blocks(head))
                break
            cached = self.view.cached_prefix(head)
            hit = self.hit_rows(head, cached)
            # (`_sequence_rows`, inlined and read twice; the free blocks read once
            # below. With `_registered` inlined in `VllmCache.register`: 0.9952x
            # the instructions on the first 2,000 Mooncake requests.)
            sequence = (head.restore if head.restore > head.prompt_tokens
                        else head.prompt_tokens)
            loaded = (self.view.host_rows(head, cached) if allocator.host is not None
                      else 0)
            if loaded:
                # KV to copy in from host memory (vLLM's KV connector load): blocks for
                # it now, then it waits outside the running set and the budget. (vLLM
                # takes blocks for the loaded rows only; here for the whole current
                # sequence too, so that a loaded request can always run: two loaded
                # requests each waiting for the other's blocks would stall the pool.)
                rows = max(hit + loaded, sequence)
                needed = (blocks_for(rows, options.block_size) - len(cached)
                          + allocator.evictable(cached))
                if needed + (self.watermark_blocks if running else 0) > allocator.free:
                    self.view.report_blocked(head, "blocks", needed)
                    break
                waiting.pop()
                self.view.load(head, cached, rows)
                continue
            prefill = hit < sequence - 1  # more than its last token
            if defer and prefill:
                self.view.report_blocked(head, "prefill_interval",
                                         self._gate_blocks(head))
                break
            tokens = self._chunk_after(head, hit, cap, budget)
            rows = sequence if options.full_prompt_gate else hit + tokens
            # Blocks it must take from the free pool: the new ones, plus cached
            # hits that sit free in the LRU queue.
            needed = (blocks_for(rows, options.block_size) - len(cached)
                      + allocator.evictable(cached))
            watermark = self.watermark_blocks if running else 0
            free = allocator.free  # (a property: read once)
            if needed + watermark > free:
                reason = "watermark" if needed <= free else "blocks"
                self.view.report_blocked(head, reason, needed)
                break
            waiting.pop()
            self.view.admit(head, 0, cached)
            running.append(head)
            if not allocator.try_grow(head.rid, head.resident + tokens):
                raise InvariantError(f"request {head.rid!r}: admission checked the "
                                     "blocks it allocates, yet try_grow failed", now)
            scheduled[head] = tokens
            budget -= tokens
            prefill_ran = prefill_ran or prefill
            if keyed:
                self._cache_blocks(head, head.resident + tokens)
        if interval > 1:
            if not preempted and not defer:
                self.capacity_bound = len(waiting) > 0
            if scheduled or lead:
                self.executed_steps += 1
                if prefill_ran:
                    self.last_prefill_step = self.executed_steps
        if lead:
            # The run's decodes, their blocks opened and keyed above, as the plan's
            # first rows: the dispatch takes them as one list, no row walked
            # (`Dispatching._start`; its comment has the measurement). Not after a
            # preemption: a victim may have left the run.
            return DecodesFirst(running[:lead], list(scheduled.items()), True)
        return list(scheduled.items())

    def _cache_blocks(self, req: Request, rows: int) -> None:
        """Key the blocks `rows` rows will fill, as soon as they are allocated: a
        request scheduled later in the step finds them (vLLM's allocate_slots, before
        the step)."""
        if req.block_keys is not None:
            self.view.allocator.register_full_blocks(req.rid, req.block_keys, rows)

    def _chunk_after(self, req: Request, hit: int, cap: int | None, budget: int) -> int:
        """The first chunk of a request about to be admitted with `hit` cached rows."""
        end = req.restore if req.resident < req.restore else req.prompt_tokens
        tokens = end - hit if end > hit else 1
        if cap is not None and tokens > cap:
            tokens = cap
        return tokens if tokens < budget else budget

    @staticmethod
    def _sequence_rows(req: Request) -> int:
        """Rows of the whole current sequence: the prompt, or on resume with every
        output."""
        return req.restore if req.restore > req.prompt_tokens else req.prompt_tokens

    def _gate_blocks(self, req: Request) -> int:
        """New blocks for the request's whole current sequence (the full-sequence
        gate)."""
        return self.view.allocator.blocks_to_grow(req.rid, self._sequence_rows(req))
