"""SGLang's priority scheduling for the `sglang` policy (order `priority`).

With `--order priority` the `sglang` policy turns on what SGLang calls
enable_priority_scheduling, and this module owns its two rules:

- The waiting order: lowest (sign x priority, queue entry) first, where sign
  is 1 under `priority_first low` (the trace format's meaning, SGLang's
  schedule_low_priority_values_first) and -1 under `high` (SGLang's default);
  the entry is stamped anew each time a request joins the queue, a retracted
  or preempted one included (`requests.queues.EntryPriorityQueue`).
- Priority preemption (option `priority_preemption`, SGLang's default; off is
  its disable_priority_preemption): when a prefill pass finds the rows full,
  the request next in line may preempt running ones (SGLang's
  PrefillAdder.preempt_to_schedule). Candidates are the running requests
  outside this pass (not the one being chunked, not those just added), least
  important first: by sign x priority, largest first, then the latest queue
  entry. A candidate qualifies while (its priority - the request's) x sign is
  more than `priority_preemption_threshold`; the first that does not ends the
  list. Victims are taken in that order until the request's need is covered:
  need = its fill - its matched prefix + min(max_tokens, CLIP) minus the
  tokens left, each victim covering new_token_ratio x min(its remaining
  outputs, CLIP). If the qualifying candidates do not cover it, nobody is
  preempted and the pass stops. SGLang reads the fill and prefix the request
  had when its input was last prepared (`FillRecord`): a request never looked
  at has 0 and 0; one looked at before keeps its prompt + outputs and the
  prefix found then; a retracted or preempted one has prompt + outputs - 1
  (the pending output is not in its fill yet) and no prefix.
"""
from __future__ import annotations

from ..kv.allocator import blocks_for
from ..records.options import Options
from ..requests.request import Request

__all__ = ["PriorityRules", "CLIP_MAX_NEW_TOKENS", "RETRACT_DECODE_STEPS"]

CLIP_MAX_NEW_TOKENS = 4096  # SGLang's clip of max_new_tokens in its estimates
RETRACT_DECODE_STEPS = 20  # tokens per kept request SGLang evicts for after a release


class PriorityRules:
    """The sign, the threshold and what SGLang's preemption reads of each request."""

    def __init__(self, options: Options) -> None:
        self.sign = 1 if options.priority_first == "low" else -1
        self.threshold = options.priority_preemption_threshold
        # Disaggregated replicas schedule by priority without preempting (not modelled).
        self.preempts = options.priority_preemption and not options.disagg
        # request -> (fill tokens, prefix tokens) as SGLang last prepared its input;
        # absent: never prepared (0, 0). Kept while the request lives.
        self.fill: dict[Request, tuple[int, int]] = {}

    def prepared(self, req: Request, hit: int) -> None:
        """The request's input was prepared for admission: its whole sequence, `hit`
        tokens of it found in the cache (SGLang's init_next_round_input)."""
        self.fill[req] = (req.prompt_tokens + req.outputs, hit)

    def retracted(self, req: Request) -> None:
        """The request left the running batch to wait again: its fill lags its
        outputs by the pending one, and its prefix is reset."""
        self.fill[req] = (req.prompt_tokens + req.outputs - 1, 0)

    def forget(self, req: Request) -> None:
        """The request ended."""
        self.fill.pop(req, None)

    def need(self, req: Request) -> int:
        """Tokens `req` asks of the pool before the tokens left are deducted."""
        fill, prefix = self.fill.get(req, (0, 0))
        return fill - prefix + min(req.max_tokens, CLIP_MAX_NEW_TOKENS)

    def beats(self, req: Request, running: Request) -> bool:
        """Whether `req` is more important than `running` by more than the threshold."""
        return (running.priority - req.priority) * self.sign > self.threshold

    def victims(self, req: Request, candidates: list[Request], entered: dict[Request, int],
                left: float, offset) -> list[Request]:
        """The running requests `req` preempts, least important first (empty: none).

        `candidates` are the running requests outside this pass, `entered` their
        queue entry stamps, `left` the tokens the pass has left (SGLang's
        rem_total_tokens) and `offset(r)` what a running request is expected to
        still need (ratio x min(remaining outputs, CLIP))."""
        sign = self.sign
        order = sorted(candidates, key=lambda r: (-sign * r.priority, -entered[r]))
        missing = self.need(req) - left
        chosen = []
        for running in order:
            if not self.beats(req, running):
                break
            chosen.append(running)
            missing -= offset(running)
            if missing <= 0:
                return chosen
        return []

    def preempt(self, view, head: Request, candidates: list[Request],
                entered: dict[Request, int], left: float,
                offset) -> tuple[int, float] | None:
        """SGLang's preempt_to_schedule for `head`, the rows being full: preempt the
        `victims` through `view`, in running order, each followed by SGLang's
        eviction ahead of need (RETRACT_DECODE_STEPS tokens for each running
        request left); return the blocks that came free and the tokens the
        victims' expected needs stop claiming, or None when nobody is preempted."""
        victims = self.victims(head, candidates, entered, left, offset)
        if not victims:
            return None
        chosen = {id(r) for r in victims}
        allocator = view.allocator
        size = view.options.block_size
        before = allocator.free
        remaining = len(candidates)
        for req in candidates:
            if id(req) in chosen:
                remaining -= 1
                view.preempt(req, "priority", None, head.rid)
                allocator.evict_until(blocks_for(remaining * RETRACT_DECODE_STEPS, size))
        return allocator.free - before, sum(offset(r) for r in victims)
