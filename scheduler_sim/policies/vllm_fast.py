"""The `vllm` policy's answers to the engine's fast paths: the decisions of
policies/base.py that let the engine skip a `schedule` call or apply several
steps at once.

- `may_fold`: may decodes be folded past a queue head blocked for this reason
  (engine/fast/folding.py; `never_folds` in its place over a plugin's radix tree);
- `arrivals_wait`: may such a fold go on past arrivals (they join the queue's tail);
- `repeats_decodes`: is every call a repeat of the running requests' decodes
  (engine/fast/through.py);
- `admit_arrivals`: the call due when requests arrived into such a repeat,
  made without it when it would admit every one as a whole prompt
  (engine/fast/arrivals.py);
- `repeats_chunk`: does a step of decodes and one prompt's chunk that spends the
  budget repeat until the prompt's last chunk (engine/fast/chunk_run.py);
- `decodes_behind`: the call due when every running request decodes behind a
  head blocked for blocks, made without it (engine/fast/behind.py);
- `next_decodes`, `decode_order`: the decodes the call due would plan.

Each answer restates part of `VllmPolicy.schedule` (policies/vllm.py): a change
to how it admits, chunks or keys blocks must be checked against them (the
folded-against-stepped tests in tests/test_fast_forward.py compare the two).
`VllmFastPaths` is a part of `VllmPolicy`, not a policy: it reads the policy's
`options`, `view`, `waiting`, `running`, `watermark_blocks`, `_chunk_after`
and `_sequence_rows`.
"""
from __future__ import annotations

from ..kv.allocator import blocks_for
from ..requests.queues import FcfsQueue
from ..requests.request import LOADED, Request

__all__ = ["VllmFastPaths"]


class VllmFastPaths:
    """What `vllm` promises the engine's fast paths (see the module's docstring)."""

    # `may_fold`: the admission number of the last running request when none of them
    # had outputs as token ids (below every request's: -1 is "never admitted").
    plain_outputs_to: int = -2

    def may_fold(self, blocked_reason: str | None) -> bool:
        # The head waits for the budget or the rows the same decodes use, for the step
        # after a preemption (not a repeat), or for blocks: decoding only takes free
        # blocks, and an eviction never shrinks the head's need (a lost hit free was
        # counted in it, one held was not). Only a block the decodes fill could shrink
        # it, by becoming a hit: that needs outputs as token ids (other decoded blocks
        # get keys of their own request). With host memory and no full-prompt gate only
        # a loaded head's (its hit its own blocks): one to load asks blocks for its whole
        # sequence, else its first chunk, and an evicted GPU hit can take its host hit.
        # Under order `lpm` an eviction may reorder the queue: a new head may fit.
        # (A plugin's radix tree under prefix caching answers `never_folds` instead.)
        # (The allocator read only past the first test, where most of the 3,761 calls
        # on the first 2,000 Azure requests end: read first, 1.0024x the instructions,
        # more than its four bytecodes explain: partly where things were allocated.)
        if (blocked_reason not in ("blocks", "watermark")
                or self.view.allocator.cache is None):
            return True
        if self.options.order == "lpm":
            return False
        if self.view.allocator.host is not None and not self.options.full_prompt_gate:
            return self.waiting.peek().remote == LOADED
        # Outputs as token ids never change: only the requests admitted since the
        # last scan that found none are scanned (admissions are numbered in order and
        # appended to the running list: they are its tail). Speed: 1,740 scans of
        # about 22 requests each on the first 2,000 Mooncake requests, the most of
        # them of the same requests less those that finished (benchmarks/README.md,
        # "thirtieth steps", db33).
        known = self.plain_outputs_to
        running = self.running
        for req in reversed(running):
            if req.admit_seq <= known:
                break
            if req.output_token_ids is not None:
                return False
        if running:
            self.plain_outputs_to = running[-1].admit_seq
        return True

    def fold_room(self, rows: int, room: int) -> int:
        # With `release_delay` a running request the step skipped (its blocks fit the
        # free and draining ones: it waits for the drain rather than preempt) is
        # skipped again only while they still fit; a folded decode that opens a block
        # takes a free one and may tip it into preempting. Such a fold takes only
        # steps that open no block (fuzzed folded against stepped, helper rev31).
        if room > 0 and self.options.release_delay and len(self.running) > rows:
            return 0
        return room

    def arrivals_wait(self, blocked_reason: str) -> bool:
        # First come, first served: an arrival joins the queue's tail, behind the head.
        return self.options.order == "fcfs" and self.view.allocator.host is None

    def never_folds(self, blocked_reason: str | None) -> bool:
        """`may_fold` of a vllm policy over a radix tree (a plugin's `radix_eviction`)
        with prefix caching, put in its place by `VllmPolicy.__init__`: nothing is
        folded. `schedule` keys each block as it fills and stamps the tree's paths as
        decodes open blocks; the tree keys decoded blocks only when the engine says so
        at a request's end, and a fold skips `schedule`: a folded replay would miss
        those keys and stamps (a preempted request's decoded block found cached when
        stepped, not when folded; tests/test_plugins.py)."""
        return False

    def repeats_decodes(self) -> bool:
        # Nothing waits and prefill has no cadence: each call walks the running list
        # and gives every request its decode (the engine checks that the blocks they
        # open are free). Under prefix caching the walk keys the block a decode
        # fills, as the engine's start of those decodes does (`register_decoded`),
        # in the same order. Not with a radix tree's stamps or host memory's stores,
        # nor with a listener: the walk writes the `evicted` record of a cached block
        # an opening takes before the step's snapshot, the engine's start after it
        # (fold_fuzz found 24 differences in 640 cases without this test;
        # tests/test_vllm_fixed_point.py). Blocks of one token are excluded as a
        # guard kept from the first version; fuzzing found no case that needs it.
        # `continuous`'s call opens no blocks, so its promise holds with a listener.
        # Speed: 0.9812x the instructions of the first 2,000 Mooncake requests on 64
        # prefix-affinity replicas, 0.9730x on round-robin ones (benchmarks/README.md,
        # "thirty-third steps", re37, with the fuzz seeds and counts).
        options = self.options
        allocator = self.view.allocator
        return (not self.waiting and options.prefill_interval <= 1
                and len(self.running) <= options.token_budget
                and (allocator.cache is None
                     or not (options.block_size == 1 or self.radix_eviction
                             or allocator.host is not None
                             or self.view.listener is not None)))

    def admit_arrivals(self, decodes: list[Request]) -> list[tuple[Request, int]] | None:
        # `schedule` when new requests wait and every running request decodes
        # (`decodes` is the running list): the decodes that open a block take it
        # in running order, then the waiting requests are admitted in order while
        # the rows, the budget and their blocks (with the watermark once something
        # runs) allow, each whole prompt one chunk. Decided before anything is
        # allocated: every one must be admitted so, else the call plans it.
        # Speed: several requests arriving together were left to `schedule`
        # (2,848 of its 3,376 calls on the first 20,000 generated requests).
        waiting = self.waiting
        options = self.options
        allocator = self.view.allocator
        k = len(waiting)
        if (not k or options.prefill_interval > 1 or allocator.cache is not None
                or allocator.host is not None):
            return None
        running = self.running
        n = len(running)
        budget = options.token_budget - n
        if budget <= 0 or n + k > options.max_rows:
            return None
        size = options.block_size
        # The decodes' blocks come first (the cohort's members', counted, when the
        # dispatch starts: the engine says which of the others open one).
        blocks, opening = self.view.decodes_opening(running)
        free = allocator.free - blocks
        if free < 0:
            return None  # a decode would preempt
        waiting.refresh()
        if k == 1:
            heads = [waiting.peek()]
        elif type(waiting) is FcfsQueue and not waiting.spilled:
            heads = list(waiting)  # (in the order `pop` gives them)
        else:
            return None
        # (The call caps chunks when more than one request runs or waits.)
        cap = options.prefill_chunk if n + k > 1 else None
        chunks = []
        for i, head in enumerate(heads):
            if head.resident or head.outputs or head.remote:
                return None  # (a new request only: its prompt from the first row)
            tokens = self._chunk_after(head, 0, cap, budget)
            rows = self._sequence_rows(head) if options.full_prompt_gate else tokens
            if (tokens < head.prompt_tokens or budget <= 0
                    or blocks_for(rows, size) + (self.watermark_blocks if n or i else 0)
                    > free):
                return None
            budget -= tokens
            free -= blocks_for(tokens, size)  # (what its `try_grow` takes)
            chunks.append((head, tokens))
        for req in opening:
            allocator.try_grow(req.rid, req.resident + 1)
        for head, tokens in chunks:
            waiting.pop()
            self.view.admit(head, 0, [])
            running.append(head)
            allocator.try_grow(head.rid, tokens)
        return chunks

    def repeats_chunk(self, decoders: list[Request], chunk: Request, tokens: int) -> bool:
        # `schedule` walks the running requests: each plain decoder decodes one
        # token (opening a block at its first row, keying the block its last row
        # fills) up to the last, whose chunk is min(its prompt left, the threshold,
        # the budget left): `tokens` while its prompt goes on past it and the
        # threshold (on: the head waits) does not cut it. The budget is then spent,
        # and the head is reported blocked for it whatever the pool holds (with
        # nothing waiting, the same walk and no head to report). Not with
        # a cadence (its counters move), an order other than FCFS (`lpm` sorts by
        # the cache), host memory (a head may load), or blocks keyed as decodes open
        # them (`key_openings`: blocks of one row, a plugin's radix tree).
        options = self.options
        running = self.running
        cap = options.prefill_chunk
        return (running[-1] is chunk and len(running) - 1 + tokens == options.token_budget
                and (cap is None or cap >= tokens) and options.prefill_interval <= 1
                and type(self.waiting) is FcfsQueue and options.block_size > 1
                and not self.radix_eviction and self.view.allocator.host is None
                and running[:-1] == decoders)

    def decodes_behind(self, rid: str, reason: str, needed: int) -> list[Request] | None:
        """Asked by the engine (engine/fast/behind.py; `vllm`'s own question, built-in
        only) at a boundary where every running request is a plain decode (a dispatch
        of all of them just completed, finishes removed), the last call having
        reported head `rid` blocked for `reason` (blocks or the watermark) and
        `needed` blocks. If the `schedule` call due now would plan every running
        request's decode in running order and report the head blocked, do what it
        does and return the plan's decodes; else None, having done nothing a
        second walk would not redo alike (the engine calls `schedule`).

        That call: the walk opens each decode's block at its first row (`try_grow`)
        and keys the block its last row fills, in running order, the budget
        covering every row; then the head is looked up, and reported short of
        blocks or admitted. Declined before anything is done where the call may
        do more (a cadence, an order other than FCFS, host memory, blocks of one
        row, a plugin's radix tree, the row limit or budget reached) or where
        the free blocks the openings leave would hold the need reported last (a
        waiting head's need only grows: the call most likely admits it). After
        the walk the head is looked up as the call looks it up: if it fits,
        None, and the call walks again (each block opened and keyed already: it
        does nothing more; the look-up answers the same) and admits."""
        options = self.options
        allocator = self.view.allocator
        running = self.running
        n = len(running)
        size = options.block_size
        if (reason != "blocks" and reason != "watermark" or options.prefill_interval > 1
                or type(self.waiting) is not FcfsQueue or allocator.host is not None
                or size == 1 or self.radix_eviction or not self._hands_runs
                or n >= options.max_rows or n >= options.token_budget):
            return None
        free = allocator.free
        watermark = self.watermark_blocks
        if needed + watermark <= free - n:
            return None  # (even if every decode opened a block: most admissions)
        head = self.waiting.peek()
        if head.rid != rid:
            return None
        # The decodes at a block's first row (an opening) or last (a fill), in order:
        # the row after theirs is a block's second or first (blocks of more than one
        # row). (Speed: `r % size in (0, size - 1)` compares in C, unspecialised:
        # see benchmarks/README.md, "twenty-ninth steps", adm31.)
        walk = [req for req in running if (req.resident + 1) % size < 2]
        opening = sum(1 for req in walk if not req.resident % size)
        if opening > free or needed + watermark <= free - opening:
            return None
        keyed = allocator.cache is not None
        for req in walk:
            r = req.resident
            if r % size:
                if keyed and req.block_keys is not None:
                    allocator.register_full_blocks(req.rid, req.block_keys, r + 1)
            elif not allocator.try_grow(req.rid, r + 1):
                return None  # (cannot be: `opening` fits)
        # The head, as the call weighs it (`schedule`'s second part, no host memory).
        cached = self.view.cached_prefix(head)
        hit = self.hit_rows(head, cached)
        sequence = (head.restore if head.restore > head.prompt_tokens
                    else head.prompt_tokens)
        if options.full_prompt_gate:
            rows = sequence
        else:
            cap = options.prefill_chunk if n + len(self.waiting) > 1 else None
            rows = hit + self._chunk_after(head, hit, cap, options.token_budget - n)
        need = blocks_for(rows, size) - len(cached) + allocator.evictable(cached)
        free = allocator.free
        if need + watermark <= free:
            return None  # it fits: the call admits
        self.view.report_blocked(head, "watermark" if need <= free else "blocks", need)
        return running[:]  # (the plan's decodes: `DecodesFirst(running[:n], [], True)`)

    def next_decodes(self) -> list[Request] | None:
        return list(self.running)

    def decode_order(self) -> list[Request] | None:
        return list(self.running)
