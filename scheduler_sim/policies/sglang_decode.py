"""SGLang's decode step for the `sglang` policy (policies/sglang.py): the check
that every row can get its block, retraction, the ratio's jump and decay, and
the paged allocator's eviction ahead of a decode batch.

- A decode batch that cannot get a block for every row first evicts every
  cached free block (SGLang's check_decode_mem evicts what the step needs
  before it decides), then retracts: keep preference is more outputs first,
  then shorter prompt (ties: earlier admitted); the least preferred goes
  first, until the step fits, never the last request. The requests kept then
  run in that order, most preferred first (SGLang filters its batch in
  retraction order). After each retraction the cache is evicted until the
  requests kept have RETRACT_DECODE_STEPS tokens each free of any key (SGLang
  frees that room at once). A retracted request rejoins the waiting queue at
  its tail and on resume recomputes its prompt and outputs in one prefill
  (SGLang refills prompt + outputs, so the pending token is folded in, as
  under `vllm`); its outputs were never cached (decoded blocks are keyed only
  when a request finishes, §8).
- After a retraction new_token_ratio = min(1, (outputs of the requests kept
  + RETRACT_DECODE_STEPS x their number) / (their max_tokens + 1)), SGLang's
  estimate; every decode step without a retraction lowers it by the policy's
  decay, down to its minimum.
- With pages of more than one token the cache is then evicted until every row
  could open a page, whether it needs one or not (SGLang's paged allocator
  over-estimates a decode batch's need so).
"""
from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING

from ..kv.allocator import blocks_for
from ..records.events import Ratio
from .base import Plan

if TYPE_CHECKING:
    from .sglang import SglangPolicy

__all__ = ["decode_batch", "decode_fold_room", "RETRACT_DECODE_STEPS"]

RETRACT_DECODE_STEPS = 20  # SGLang's default: decode room kept per request after a retraction


def decode_batch(policy: SglangPolicy, now: int) -> Plan:
    """The rows of the next decode batch of `policy` (empty: none can run)."""
    chunked = policy.chunked
    decoders = [r for r in policy.running if r is not chunked  # plain_decode, inlined:
                and r.resident >= r.prompt_tokens and r.resident >= r.restore]
    if not decoders:
        return []
    allocator = policy.view.allocator
    size = policy.options.block_size
    # A decode row needs a new block exactly when its request's rows fill
    # their last block.
    need = sum([1 for r in decoders if not r.resident % size])  # (a list: no generator)
    if need > allocator.free:
        # SGLang's check_decode_mem evicts from the tree what the step needs
        # before it decides to retract: here every cached free block goes,
        # before any victim's blocks join the tree's free leaves.
        allocator.evict_until(need)
        # Most preferred to keep first: more outputs, then shorter prompt;
        # the sort is stable, so among equals the earlier admitted stays.
        keep = sorted(decoders, key=lambda r: (-r.outputs, r.prompt_tokens))
        # With a release delay, retracted blocks come back only later: stop
        # retracting once the draining blocks would cover the step.
        draining = allocator.draining if policy.options.release_delay else 0
        # SGLang keeps its last request; but on a decode replica of a
        # disaggregated fleet, requests waiting with a landed KV copy hold
        # blocks that nothing else frees: then the last may go too.
        floor = 0 if policy.holding is not None and policy.holding.held else 1
        before, retracted = policy.ratio, 0
        while need > allocator.free + draining and len(keep) > floor:
            victim = keep.pop()
            retracted += 1
            need -= victim.resident % size == 0
            policy.view.preempt(victim, "retract", "fewest-outputs")
            # SGLang then evicts from its tree at once, until the requests
            # kept have RETRACT_DECODE_STEPS tokens each free of any key.
            allocator.evict_until(blocks_for(len(keep) * RETRACT_DECODE_STEPS, size))
            draining = allocator.draining if policy.options.release_delay else 0
        if keep:
            decoded = sum(r.outputs for r in keep)
            budget = sum(r.max_tokens for r in keep)
            policy.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(keep))
                             / (budget + 1))
            policy.view.emit_event(Ratio(now, round(policy.ratio, 6), "retract",
                                       round(before, 6), retracted))
        decoders = [r for r in decoders if r in keep]
        if retracted:
            # SGLang's retract_decode keeps the batch in its retraction order,
            # most preferred first; later merges append after it, and the rows
            # of a step finish (and enter the tree) in that order.
            policy.running[:] = keep + [r for r in policy.running if r not in keep]
            decoders = list(keep)
        if need > allocator.free:
            return []  # even the last request cannot grow: wait for memory
    elif policy.ratio > policy.min_ratio:
        policy.ratio = max(policy.min_ratio, policy.ratio - policy.decay)
        policy.view.emit_event(Ratio(now, round(policy.ratio, 6), "decay"))
    cap = min(policy.options.max_rows, policy.options.token_budget)
    rows = decoders[:cap]
    if size > 1:
        # SGLang's paged allocator evicts from the tree until every row could
        # open a page, whether it needs one or not.
        allocator.evict_until(len(rows))
    # The plan's (request, 1) pairs made in C: the first 2,000 Mooncake requests
    # under sglang with prefix caching 6.3444e9 instructions against 6.3502e9 with
    # a list comprehension (callgrind; benchmarks/README.md, "fourteenth steps ...
    # rdx10").
    return list(zip(rows, repeat(1)))


def decode_fold_room(policy: SglangPolicy, rows: int, room: int) -> int:
    """`SglangPolicy.fold_room`: with pages of more than one token each decode step
    first evicts cached free blocks until every row could open an uncached one
    (`decode_batch`). A fold skips those steps, so it takes at most the uncached
    free blocks less its `rows`: at each folded step they still cover the rows and
    the skipped eviction would have evicted nothing (one step short of exact, on
    the safe side)."""
    allocator = policy.view.allocator
    if allocator.cached_free and allocator.block_size > 1:
        return min(room, allocator.free - allocator.cached_free - rows)
    return room
