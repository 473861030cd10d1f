"""`sglang`: SGLang's scheduler as the seed chapter describes it (§6).

Blocks are allocated on demand, but admission looks ahead with a learned
reservation instead of vLLM's "does the prompt fit now":

- A step is a prefill batch whenever one can be formed, else a decode batch
  (SGLang runs them apart; decodes wait while prompts are prefilled). A
  prompt longer than `prefill_chunk` is prefilled in chunks, one chunked
  request at a time, continued first in the next prefill batch.
- Admission (SGLang's PrefillAdder): in queue order, a request is added
  while its uncached prompt plus min(its remaining max_tokens, CLIP) plus
  one page (a block: the paged allocator's alignment overhead) fits in
  free-plus-evictable tokens minus, for every running request but the one
  being chunked, new_token_ratio x min(its remaining max_tokens, CLIP),
  minus what the requests added before it claimed (each its uncached prompt,
  one page and min(its max_tokens, CLIP) in full, outputs already made or
  not, as SGLang's PrefillAdder reserves). The first request that
  does not fit stops the pass: `no_token` (memory) or another reason
  (`max_rows`, `token_budget`), SGLang's NO_TOKEN and OTHER verdicts.
- After NO_TOKEN with something running or added, SGLang's batch_is_full
  latch shuts admission (`batch_full`) until the running batch shrinks, the
  last prefill batch left a chunk unfinished, or that batch replaced an
  empty running batch (option `admission_latch`).
- A prefill batch matches all its new requests against the cache before it
  allocates their blocks, the continuing chunk's included (it is allocated
  first), as SGLang forms the batch and then allocates it.
- Each pass that may admit orders the queue first (SGLang's calc_priority):
  `lpm` looks up and sorts every waiting request; any other order, every
  REFRESH_INTERVAL-th pass, looks up the first REFRESH_MAX waiting requests'
  whole sequences, the head last, which keeps their prefixes fresh in the
  radix tree (SGLang's waiting-prefix refresh under LRU eviction).
- The request being chunked is outside the running batch: a middle chunk
  claims only its tokens; the last chunk claims its tokens, one page and
  min(max_tokens, CLIP) in full.
- With pages of more than one token (SGLang's page_size = block_size) a
  prompt whose uncached rows in whole pages exceed the chunk left is cut at a
  page boundary; every extend is charged in whole pages against the pass's
  token budgets and its memory; the continuing chunk is capped by the memory
  left (not rounded); and before a batch gets its blocks the cache is evicted
  until every token it writes plus a page per request (a decode batch: a page
  per row) is free, as SGLang's paged allocator over-estimates its need.
- A decode batch that cannot get a block for every row retracts
  (`sglang_decode`: SGLang's check_decode_mem and retract_decode).
- Admission is strict, as SGLang's: a request whose total equals what is
  left gets NO_TOKEN. Memory is asked first: with none left the head is
  refused NO_TOKEN (and latches) even when the chunk or budget is spent, as
  SGLang's budget_state answers NO_TOKEN before OTHER.
- new_token_ratio jumps after a retraction (`sglang_decode`) and decays by
  (init - min) / DECAY_STEPS per decode step without one, down to min.
  init = 0.7 x `schedule_conservativeness`, min = init x 0.14. After a step
  with nothing running, waiting or chunked (SGLang's idle check) it starts
  over from init.

Constants are SGLang's defaults: CLIP_MAX_NEW_TOKENS 4096 tokens,
RETRACT_DECODE_STEPS 20, DECAY_STEPS 600, REFRESH_INTERVAL 32 passes,
REFRESH_MAX 128 requests.
"""
from __future__ import annotations

from ..kv.allocator import blocks_for
from ..records.errors import InvariantError
from ..records.events import Ratio
from ..records.options import Options
from ..requests.queues import EntryPriorityQueue, HoldingFirst, RequestQueue
from ..requests.request import LOADED, Request
from .base import Plan, QueueAndListPolicy, SchedulerView
from .sglang_decode import RETRACT_DECODE_STEPS, decode_batch, decode_fold_room
from .sglang_priority import PriorityRules

__all__ = ["SglangPolicy", "CLIP_MAX_NEW_TOKENS", "RETRACT_DECODE_STEPS", "DECAY_STEPS",
           "INIT_NEW_TOKEN_RATIO", "MIN_RATIO_FACTOR"]

CLIP_MAX_NEW_TOKENS = 4096
DECAY_STEPS = 600
INIT_NEW_TOKEN_RATIO = 0.7
MIN_RATIO_FACTOR = 0.14
REFRESH_INTERVAL = 32
REFRESH_MAX = 128


# SGLang's HiCache loads a host hit back only from this many tokens (its
# load_back_threshold); a shorter one is recomputed.
HOST_LOAD_MIN = 10

class SglangPolicy(QueueAndListPolicy):
    """SGLang: learned-ratio admission, prefill-first batches, retraction by progress."""

    name = "sglang"
    reserves = False
    recompute_includes_pending = True
    radix_eviction = True
    host_loads = "batch"  # HiCache loads a host hit with the batch the request joins
    fold_room = decode_fold_room  # a fold stops where a decode step would evict ahead

    def __init__(self, options: Options, view: SchedulerView) -> None:
        # Order `priority` is SGLang's priority scheduling (policies/sglang_priority.py).
        self.priority = PriorityRules(options) if options.order == "priority" else None
        super().__init__(options, view)
        # Requests preempted for priority while a prefill batch forms: they rejoin
        # the queue once it is formed, as SGLang requeues its preempt_list.
        self.deferred: list[Request] | None = None
        self.chunked: Request | None = None  # the request whose prefill is in chunks
        self.init_ratio = min(1.0, INIT_NEW_TOKEN_RATIO * options.schedule_conservativeness)
        self.min_ratio = self.init_ratio * MIN_RATIO_FACTOR
        self.decay = (self.init_ratio - self.min_ratio) / DECAY_STEPS
        self.ratio = self.init_ratio
        # SGLang's batch_is_full after a NO_TOKEN verdict (option admission_latch):
        # no admission is tried until a running request leaves.
        self.latched = False
        # When the server last became empty (nothing running, waiting or chunked):
        # the ratio starts over at the next step that comes later (an idle step).
        self.emptied_at: int | None = None
        # The last prefill batch left a chunk unfinished: SGLang drops the chunked
        # request from that batch before merging it, which clears the latch.
        self.chunk_pending = False
        # The last prefill batch became the running batch (nothing else ran):
        # SGLang replaces its empty running batch by it, flag and all.
        self.fresh_batch = False
        # Passes that ordered the waiting queue without matching it (see
        # `_order_waiting`): every REFRESH_INTERVAL-th refreshes its prefixes.
        self.refresh_passes = 0

    def make_waiting_queue(self) -> RequestQueue:
        """Under order `priority`, SGLang's order by (sign x priority, queue entry)."""
        if self.priority is None:
            return super().make_waiting_queue()
        queue = self.by_entry = EntryPriorityQueue(self.priority.sign)
        if self.options.disagg:
            queue = self.holding = HoldingFirst(queue)
        return queue

    # --- sizing -------------------------------------------------------------

    def blocks_to_finish(self, req: Request) -> int:
        """On-demand growth to P + N - 1 rows, but admission alone also needs
        P + min(M, CLIP) tokens strictly below the pool: whichever asks more."""
        size = self.options.block_size
        grow = blocks_for(req.prompt_tokens + req.output_tokens - 1, size)
        # P in whole pages + min(M, CLIP) + one page < num_blocks x block_size
        # (beyond it SGLang cuts max_new_tokens to fit the pool).
        admit = (self._whole_pages(req.prompt_tokens)
                 + min(req.max_tokens, CLIP_MAX_NEW_TOKENS)) // size + 2
        return max(grow, admit)

    def why_too_big(self, req: Request, needed: int) -> str:
        size = self.options.block_size
        if needed > blocks_for(req.prompt_tokens + req.output_tokens - 1, size):
            return (f"needs {needed} blocks to pass admission alone (P in whole blocks + "
                    f"min(M, {CLIP_MAX_NEW_TOKENS}) tokens plus one block strictly below the "
                    "pool), "
                    "more than num_blocks")
        return super().why_too_big(req, needed)

    # --- notifications ------------------------------------------------------

    def requeue(self, req: Request) -> None:
        # A retracted request rejoins at the tail (unlike vLLM's front).
        if self.priority is not None:
            self.priority.retracted(req)
            if self.deferred is not None:
                self.deferred.append(req)  # after the prefill batch forms
                return
        self.waiting.add(req)
        self.emptied_at = None  # it waits: the server is not idle

    def remove(self, req: Request) -> None:
        running = req in self.running
        super().remove(req)
        if req is self.chunked:
            self.chunked = None
        if self.priority is not None:
            self.priority.forget(req)
            self.by_entry.forget(req)
        if running:
            self.latched = False  # the running batch shrank
        if not self.running and not self.waiting and self.chunked is None:
            # Finished, cancelled or timed out: nothing is left (a preempted
            # request is requeued next, which clears this).
            self.emptied_at = self.view.now

    # --- the step ---------------------------------------------------------------

    def schedule(self, now: int) -> Plan:
        if self.emptied_at is not None:
            # The server went idle at `emptied_at`; if a step passed with nothing
            # to do, SGLang's idle check started the ratio over (not when a
            # request arrives at the very step the last one ended).
            if now > self.emptied_at and self.ratio != self.init_ratio:
                self.ratio = self.init_ratio
                self.view.emit_event(Ratio(now, round(self.ratio, 6), "idle"))
            self.emptied_at = None
        chunked = self.chunked
        if (self.chunk_pending or self.fresh_batch  # (no scan of the rows while none is chunked)
                or (not self.running if chunked is None
                    else all(r is chunked for r in self.running))):
            # SGLang's running batch leaves out the request being chunked.
            self.latched = False
        self.chunk_pending = self.fresh_batch = False
        plan = self._prefill_batch()
        if plan:
            batch = {id(req) for req, _ in plan}
            self.fresh_batch = all(id(r) in batch or r is self.chunked for r in self.running)
            return plan
        return self._decode_batch(now)

    def may_fold(self, blocked_reason: str | None) -> bool:
        # NO_TOKEN (the head against free tokens less ratio x the running requests'
        # remaining outputs, which shrink as they decode) may turn at any step; row and
        # budget limits hold. A decode step also counts the blocks of decoders beyond
        # the row cap, unseen by the engine: fold only when every running request runs.
        options = self.options
        return (blocked_reason != "no_token"
                and len(self.running) <= min(options.max_rows, options.token_budget))

    def _page_overhead(self) -> int:
        """Tokens SGLang charges each admitted request beyond its own: one page
        (a block) for the paged allocator's alignment."""
        return self.options.block_size

    def _whole_pages(self, tokens: int) -> int:
        """`tokens` rounded up to whole pages (blocks): what SGLang charges an
        extend against the pass's token budgets and its memory."""
        size = self.options.block_size
        return -(-tokens // size) * size

    def _remaining_new(self, req: Request) -> int:
        return min(req.max_tokens - req.outputs, CLIP_MAX_NEW_TOKENS)

    def _expected(self, req: Request) -> float:
        """What a running request is expected to still write: ratio x min(its
        remaining outputs, CLIP) (SGLang's offset of a running request)."""
        return self.ratio * self._remaining_new(req)

    def reserved_tokens(self, chunked: Request | None) -> float:
        """What running requests but `chunked` are expected to still need: ratio x
        remaining outputs. The request being chunked is not in SGLang's running
        batch: its chunks are charged as they are added (`_prefill_batch`)."""
        ratio = self.ratio  # (`_remaining_new` inline: every row, pass)
        clip = CLIP_MAX_NEW_TOKENS  # (min inline: no builtin's call per row)
        return sum([ratio * (left if (left := r.max_tokens - r.outputs) < clip else clip)
                    for r in self.running if r is not chunked])

    def _prefill_batch(self) -> Plan:
        """The next prefill batch (empty: none). Under priority preemption its victims
        rejoin the queue only once it is formed, stamped in the order they left."""
        if self.priority is None or not self.priority.preempts:
            return self._form_prefill(False)
        self.latched = False  # SGLang resets batch_is_full at every pass to try preemption
        self.deferred = []
        plan = self._form_prefill(True)
        deferred, self.deferred = self.deferred, None
        for req in deferred:
            self.waiting.add(req)
        if deferred:
            self.emptied_at = None  # they wait: the server is not idle
        return plan

    def _form_prefill(self, preempting: bool) -> Plan:
        options = self.options
        size = options.block_size
        allocator = self.view.allocator
        budget = options.token_budget
        chunk_left = options.prefill_chunk
        plan: Plan = []
        chunked = self.chunked
        if chunked is not None or (self.waiting
                                   and (preempting or len(self.running) < options.max_rows)
                                   and not (self.latched and options.admission_latch)):
            self._order_waiting()
        page = self._page_overhead()
        charged = 0  # what the continuing chunk claims (SGLang's reserve)
        # SGLang matches every request of the batch against the cache before it
        # allocates for any: blocks are taken once the batch is formed, so one
        # request's allocation cannot evict what a later one hits.
        free_left = allocator.free
        if chunked is not None:
            # SGLang caps the continuing chunk by the memory left (free and
            # evictable tokens less the running requests' expected outputs),
            # unless none is left; it does not round it to a page.
            left = int(free_left * size - self.reserved_tokens(chunked))
            tokens = min(chunked.phase_remaining, left if left > 0 else chunk_left,
                         chunk_left, budget)
            need = allocator.blocks_to_grow(chunked.rid, chunked.resident + tokens)
            if need > free_left:
                return plan  # no memory for the next chunk now: decode instead
            free_left -= need  # allocated with the batch, after the matching
            plan.append((chunked, tokens))
            paged = self._whole_pages(tokens)
            budget -= paged
            chunk_left -= paged
            if tokens < chunked.phase_remaining:
                self.chunk_pending = True
                return self._allocate(plan)  # still chunking: nothing else joins
            # The last chunk: its tokens in whole pages, one page, and its outputs
            # in full (not scaled by the ratio), as SGLang's add_chunked_req
            # charges them.
            charged = paged + page + min(chunked.max_tokens, CLIP_MAX_NEW_TOKENS)
            self.chunked = None
        waiting = self.waiting
        if not waiting:
            return self._allocate(plan)
        if (self.latched and self.options.admission_latch
                and waiting.peek().remote != LOADED):  # a landed copy joins (below)
            self.view.report_blocked(waiting.peek(), "batch_full", 0)
            return self._allocate(plan)
        # The running batch's expected needs, without the request chunked when the
        # pass began (its last chunk is charged in full instead): summed only by a
        # pass that gets this far (not one that stops at a chunk, latch or no queue).
        rem_total = allocator.free * size - self.reserved_tokens(chunked) - charged
        rows_full = False  # SGLang's batch_is_full from the row limit: set, it stays
        hosted = allocator.host is not None  # (host memory: asked once per pass)
        while waiting:
            head = waiting.peek()
            if preempting:
                # SGLang checks the pass's budget first; once the rows are full, every
                # request after needs victims of its own.
                if budget <= 0 or chunk_left <= 0:
                    self.view.report_blocked(head, "token_budget", 0)
                    break
                rows_full = rows_full or len(self.running) >= options.max_rows
                if rows_full:
                    outside = {id(req) for req, _ in plan}  # the pass's own are no victims
                    outside.add(id(self.chunked))
                    gained = self.priority.preempt(
                        self.view, head, [r for r in self.running if id(r) not in outside],
                        self.by_entry.entered, rem_total, self._expected)
                    if gained is None:
                        self.view.report_blocked(head, "max_rows", 0)
                        break
                    free_left += gained[0]
                    rem_total += gained[0] * size + gained[1]
            elif len(self.running) >= options.max_rows:
                self.view.report_blocked(head, "max_rows", 0)
                break
            elif (budget <= 0 or chunk_left <= 0) and rem_total > 0:
                # (SGLang's budget_state answers NO_TOKEN before OTHER: with no
                # memory left the head is tried, refused and latches, below.)
                self.view.report_blocked(head, "token_budget", 0)
                break
            cached = self.view.cached_prefix(head)
            hit = self.hit_rows(head, cached)
            if self.priority is not None:
                self.priority.prepared(head, hit)
            extend = head.prompt_tokens + head.outputs - hit
            # HiCache: rows found in host memory are a prefix loaded with this batch
            # (not computed: out of the token budget; their blocks are taken now).
            loaded = self.view.host_rows(head, cached) if hosted else 0
            if loaded < HOST_LOAD_MIN:
                loaded = 0
            evictable = allocator.evictable(cached)
            # Cached blocks it locks leave the evictable pool: they count too;
            # and one page of alignment overhead.
            total = extend + self._remaining_new(head) + page + evictable * size
            compute = extend - loaded  # the rows to compute
            limit = min(chunk_left, budget)
            if self._whole_pages(compute) <= limit:
                tokens = compute
            else:
                # SGLang cuts a prompt whose whole pages exceed the chunk left at a
                # page boundary (the cached prefix is whole pages): none, none cut.
                # (A prefill_chunk or token_budget under one page, which SGLang
                # would never get past, cuts at the limit instead, never past the
                # rows to compute: a replay must end.)
                tokens = limit // size * size
                if tokens <= 0 and min(options.prefill_chunk, options.token_budget) < size:
                    tokens = min(limit, compute)
            now_blocks = blocks_for(hit + loaded + tokens, size) - len(cached) + evictable
            # SGLang answers NO_TOKEN unless the request fits strictly. A request
            # whose prompt's KV was copied in (fleet/disagg.py) passed that test at
            # its first admission: SGLang's decode side runs it once it lands, so
            # only the blocks it writes now must be free.
            landed = head.remote == LOADED
            if (total >= rem_total and not landed) or now_blocks > free_left:
                self.view.report_blocked(head, "no_token", blocks_for(total, size))
                # SGLang's batch_is_full, if something runs or was just added.
                self.latched = bool(plan) or bool(self.running)
                break
            if tokens <= 0:  # (checked after memory, as SGLang does)
                self.view.report_blocked(head, "token_budget", 0)
                break
            waiting.pop()
            self.view.admit(head, 0, cached, loaded)
            self.running.append(head)
            free_left -= now_blocks
            plan.append((head, tokens))
            # What SGLang's PrefillAdder reserves: a cut first chunk only itself and
            # a page; a whole prompt also min(max_tokens, CLIP) in full (the test
            # above counts the remaining outputs).
            # Extends are charged in whole pages.
            locked = evictable * size
            paged = self._whole_pages(tokens)
            if tokens < compute:
                rem_total -= loaded + paged + page + locked
            else:
                rem_total -= (loaded + paged + page + min(head.max_tokens, CLIP_MAX_NEW_TOKENS)
                              + locked)
            budget -= paged
            chunk_left -= paged
            if rem_total <= 0:
                # Admitted, but the budget it leaves is spent: NO_TOKEN all the
                # same, and the latch with it.
                self.latched = True
            if tokens < compute:
                self.chunked = head  # one chunked request at a time
                self.chunk_pending = True
                break
            if self.latched:
                break
        return self._allocate(plan)

    def _order_waiting(self) -> None:
        """SGLang's calc_priority, at each pass that may form a prefill batch:
        `lpm` matches every waiting request against the cache and sorts; any
        other order (or `lpm` past its threshold) leaves the queue as it is, but
        every REFRESH_INTERVAL-th such pass looks up the prefixes of the first
        REFRESH_MAX waiting requests, the head last, so that the tree keeps what
        they will need (SGLang's waiting-prefix refresh under LRU eviction)."""
        waiting = self.waiting
        if not waiting:
            return
        if waiting.refresh() or self.view.allocator.cache is None:
            return  # `lpm` looked every waiting request up
        passes = self.refresh_passes
        self.refresh_passes = passes + 1
        if passes % REFRESH_INTERVAL == 0:
            look = self.view.cached_prefix
            for req in reversed(waiting.head(REFRESH_MAX)):
                look(req, whole=True)

    def _allocate(self, plan: Plan) -> Plan:
        """Give the prefill batch its blocks, in order, once it is formed. With
        pages of more than one token SGLang's paged allocator first evicts from
        the tree until every token of the batch plus a page per request is free."""
        allocator = self.view.allocator
        taken = 0
        for req, tokens in plan:
            taken += allocator.blocks_to_grow(req.rid, req.resident + tokens)
            if not allocator.try_grow(req.rid, req.resident + tokens):
                raise InvariantError(f"request {req.rid!r}: admission checked the blocks "
                                     "it allocates, yet try_grow failed", self.view.now)
        size = self.options.block_size
        if size > 1 and plan:
            # The same tree leaves go as if evicted before the allocation (which took
            # the oldest first, reported as its takers): the rest go now.
            ahead = blocks_for(sum(tokens for _, tokens in plan), size) + len(plan)
            allocator.evict_until(ahead - taken)
        return plan

    def _decode_batch(self, now: int) -> Plan:
        return decode_batch(self, now)
