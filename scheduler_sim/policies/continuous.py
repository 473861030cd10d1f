"""`continuous`: iteration-level scheduling under full reservation (§6).

The reference policy. At every boundary:
1. Admission scans the waiting queue in order. The head is admitted when its
   worst-case credit, ceil((P + M - 1) / B) blocks (A1), fits beside the
   credits of running requests and the draining blocks. A head that does not
   fit is reported (`admission_blocked`) and blocks everything behind it:
   head-of-line blocking is deliberate.
2. The dispatch: every decoding request contributes at most one token,
   starting from a rotating row; the remaining budget goes to prefill chunks
   (at most `prefill_chunk` tokens each), also from a rotating row. Rows of
   recompute (after a preemption) are scheduled like prefill chunks.
   `max_rows` and `token_budget` cap every dispatch.

Rotation is round-robin, separately for decodes and prefills: the policy
remembers the last request it served and starts the next dispatch with the
first candidate admitted after it, wrapping to the oldest.
"""
from __future__ import annotations

from itertools import repeat

from ..records.options import Options
from ..requests.queues import FcfsQueue
from ..requests.request import DECODE, Request
from ..requests.rotation import RotatingSet
from .base import DecodesFirst, Plan, Policy, SchedulerView

__all__ = ["ContinuousPolicy"]


class ContinuousPolicy(Policy):
    """Continuous batching with reservation credits and round-robin rows."""

    name = "continuous"
    lazy_decoders = True  # decoders are served by admission order alone
    # Most requests that may run at once; None: only blocks limit admission.
    running_limit: int | None = None
    limit_reason = "running_limit"

    def __init__(self, options: Options, view: SchedulerView) -> None:
        super().__init__(options, view)
        self.queue = self.make_waiting_queue()
        self.decoders = RotatingSet()    # prefill done: one token per dispatch
        self.prefillers = RotatingSet()  # prompt or recompute rows still to write
        self._last_decode = -1
        self._last_prefill = -1
        # Whether the engine takes the decodes as this policy's own list: it decides
        # once the policy is built, so this is read at the first `schedule`.
        self._decodes_first: bool | None = None

    # --- notifications ------------------------------------------------------

    def add(self, req: Request) -> None:
        self.queue.add(req)

    def requeue(self, req: Request) -> None:
        self.requeue_into(self.queue, req)

    def spill_queue(self) -> FcfsQueue | None:
        return self.queue if type(self.queue) is FcfsQueue else None

    def remove(self, req: Request) -> None:
        # The running sets first (a request is in one place at most): a finished
        # request, the common case, costs no `in` of the queue (a Python
        # `__contains__`; benchmarks/README.md, "twelfth steps ... mil8").
        if not self.decoders.discard(req) and not self.prefillers.discard(req) \
                and req in self.queue:
            self.queue.remove(req)

    @property
    def waiting_count(self) -> int:
        return len(self.queue)

    @property
    def running_count(self) -> int:
        return len(self.decoders) + len(self.prefillers)

    # --- admission ----------------------------------------------------------

    def admit_waiting(self) -> None:
        """Admit queue heads while their credit fits; report the first that does not."""
        queue = self.queue
        queue.refresh()
        while queue:
            head = queue.peek()
            credit, needed, cached = self.reservation_need(head)
            if self.running_limit is not None and self.running_count >= self.running_limit:
                self.view.report_blocked(head, self.limit_reason, needed)
                return
            if not self.fits_reservation(head, needed):
                return
            queue.pop()
            self.view.admit(head, credit, cached)
            (self.decoders if head.phase == DECODE else self.prefillers).add(head)

    def may_fold(self, blocked_reason: str | None) -> bool:
        # Credits and running limits change only when a request is admitted or
        # ends: a blocked head stays blocked while others decode, unless the
        # blocks they fill become cache hits that shrink what it needs.
        return (blocked_reason not in ("reservation", "draining")
                or self.view.allocator.cache is None)

    def repeats_decodes(self) -> bool:
        # Nothing waits or prefills, and every decoder fits one dispatch: each call
        # takes them all, from the first admitted after the rotation point, which
        # is where the last call started (the one before that start, or, if that
        # one finished, nobody between it and the start).
        options = self.options
        n = len(self.decoders)
        return (not self.queue and not self.prefillers and n <= options.max_rows
                and n <= options.token_budget)

    def repeats_blocked(self, reason: str) -> bool:
        # A head blocked for credits stays blocked while others decode and requests
        # arrive: credits change only when a request is admitted or ends, decoding
        # draws its blocks from credits, and without a prefix cache its need does
        # not shrink. Arrivals join the first-come-first-served queue behind it.
        # After a finish, the credits it freed are asked as the call would ask
        # them (nothing drains: the engine asks only then). Nothing prefills (a
        # head just admitted whole is a decoder once its prompt is planned) and
        # every decoder fits one dispatch: each call takes them all from the
        # rotation point, as under `repeats_decodes`.
        options = self.options
        n = len(self.decoders)
        queue = self.queue
        if (reason != "reservation" or self.prefillers or n > options.max_rows
                or n > options.token_budget or type(queue) is not FcfsQueue or not queue
                or self.view.allocator.cache is not None
                or (self.running_limit is not None and n >= self.running_limit)):
            return False
        return not self.view.allocator.can_reserve(self.reservation_need(queue.peek())[1])

    def decodes_repeated(self, requests: list[Request]) -> None:
        self._last_decode = requests[-1].admit_seq  # as `schedule` sets it

    def admit_arrivals(self, decodes: list[Request]) -> list[tuple[Request, int]] | None:
        # `schedule` when requests wait, nothing prefills and `decodes` are the
        # decoders from the rotation point on (a fixed point): the waiting requests
        # are admitted in order if every credit fits (credits add up: each
        # admission's check sees the ones before reserved) and the row limits
        # allow, and each whole prompt is one chunk if it fits the chunk size and
        # the budget the decodes and the chunks before it leave (the chunks are
        # taken in admission order: every admitted request is newer than the
        # rotation point of prefills). Decided before anything is admitted.
        # Speed: several requests arriving together (a tick, in tick mode) were
        # left to `schedule` (3,060 of its 6,311 calls on the first 20,000
        # generated requests; 883 on the Azure conversation trace).
        queue = self.queue
        k = len(queue)
        if not k or self.prefillers or self.view.allocator.cache is not None:
            return None
        options = self.options
        n = len(decodes)
        budget = options.token_budget - n
        if n + k > options.max_rows or budget <= 0:
            return None
        if self.running_limit is not None and self.running_count + k > self.running_limit:
            return None
        queue.refresh()
        if k == 1:
            head = queue.peek()
            tokens = _whole_prompt_left(head)  # (0: not its whole prompt as one chunk)
            if not tokens or tokens > options.prefill_chunk or tokens > budget:
                return None
            credit, needed, cached = self.reservation_need(head)
            if not self.view.allocator.can_reserve(needed):
                return None
            queue.pop()
            self.view.admit(head, credit, cached)
            chunks = [(head, tokens)]
        else:
            chunks = self._admit_together(queue, budget)
            if chunks is None:
                return None
        if decodes:
            self._last_decode = decodes[-1].admit_seq
        self._last_prefill = chunks[-1][0].admit_seq
        add = self.decoders.add
        for head, _ in chunks:
            add(head)  # (a prefiller whose chunk ends its prompt: a decoder)
        return chunks

    def _admit_together(self, queue, budget: int) -> list[tuple[Request, int]] | None:
        """`admit_arrivals` for several waiting requests: all admitted, each prompt
        whole within what the ones before it leave of `budget`, or None (nothing
        done)."""
        if type(queue) is not FcfsQueue or queue.spilled:
            return None
        heads = list(queue)  # (in the order `pop` gives them)
        chunk = self.options.prefill_chunk
        chunks = []
        needs = []
        needed = 0
        for head in heads:
            tokens = _whole_prompt_left(head)
            if not tokens or tokens > chunk or tokens > budget:
                return None
            budget -= tokens
            chunks.append((head, tokens))
            need = self.reservation_need(head)  # (no cache: nothing shared, no hit)
            needs.append(need)
            needed += need[1]
        if not self.view.allocator.can_reserve(needed):
            return None
        admit = self.view.admit
        for head, (credit, _, cached) in zip(heads, needs):
            queue.pop()
            admit(head, credit, cached)
        return chunks

    def admit_heads(self, decodes: list[Request]) -> list[tuple[Request, int]] | None:
        # `schedule` at a finish behind a head blocked for credits, the heads now
        # fitting: nothing prefills and `decodes` are every decoder from the
        # rotation point on (`repeats_blocked` held before the finish). The heads
        # are taken off the queue while their credits add up within the pool
        # (each admission's check sees the ones before reserved), each whole
        # prompt one chunk within the rows and the budget the decodes and the
        # chunks before it leave; if one is not, they are put back (nothing
        # done). The first head that does not fit is reported as the call
        # reports it (`fits_reservation`, after the admissions). Speed: 8,863 of
        # the 10,264 `schedule` calls on 100,000 generated requests admitted
        # heads at such a finish; without them, 0.963x the instructions
        # (benchmarks/README.md, "twenty-third steps", mil23).
        queue = self.queue
        if (self.prefillers or type(queue) is not FcfsQueue or not queue
                or self.running_limit is not None or self.view.allocator.cache is not None):
            return None
        options = self.options
        rows = options.max_rows - len(decodes)
        budget = options.token_budget - len(decodes)
        chunk = options.prefill_chunk
        can_reserve = self.view.allocator.can_reserve
        queue.refresh()
        taken = []
        needed = 0
        while queue:
            head = queue.peek()
            need = self.reservation_need(head)  # (no cache: nothing shared, no hit)
            if not can_reserve(needed + need[1]):
                break
            tokens = _whole_prompt_left(head)
            if not tokens or tokens > chunk or tokens > budget or rows <= 0:
                for head, _, _ in reversed(taken):
                    queue.prepend(head)  # (back in their places: nothing done)
                return None
            queue.pop()
            taken.append((head, tokens, need))
            needed += need[1]
            budget -= tokens
            rows -= 1
        if not taken:
            return None
        admit = self.view.admit
        for head, _, (credit, _, cached) in taken:
            admit(head, credit, cached)
        if queue:  # (the loop stopped at this head: `need` is its own)
            self.fits_reservation(queue.peek(), need[1])  # (reports it)
        if decodes:
            self._last_decode = decodes[-1].admit_seq
        self._last_prefill = taken[-1][0].admit_seq
        add = self.decoders.add
        for head, _, _ in taken:
            add(head)  # (a prefiller whose chunk ends its prompt: a decoder)
        return [(head, tokens) for head, tokens, _ in taken]

    def next_decodes(self) -> list[Request] | None:
        chosen = self.decoders.take_after(self._last_decode, len(self.decoders))
        if chosen:
            self._last_decode = chosen[-1].admit_seq
        return chosen

    def decode_order(self) -> list[Request] | None:
        return self.decoders.take_after(self._last_decode, len(self.decoders))

    # --- the dispatch -------------------------------------------------------

    def schedule(self, now: int) -> Plan:
        self.admit_waiting()
        options = self.options
        max_rows = options.max_rows
        budget = options.token_budget
        # Every decoding request takes one row, from the rotation point on.
        chosen = self.decoders.take_after(self._last_decode, min(max_rows, budget))
        if chosen:
            self._last_decode = chosen[-1].admit_seq
            budget -= len(chosen)
        chunks: list[tuple[Request, int]] = []
        rows = len(chosen)
        last = None
        to_decode = []
        chunk = options.prefill_chunk
        for req in self.prefillers.cycle_after(self._last_prefill):
            if rows == max_rows or budget == 0:
                break
            remaining = req.phase_remaining
            tokens = min(remaining, chunk, budget)
            chunks.append((req, tokens))
            rows += 1
            budget -= tokens
            last = req
            if tokens == remaining and req.resident + tokens >= req.prompt_tokens:
                to_decode.append(req)  # its next row, after this dispatch, is a decode
        if last is not None:
            self._last_prefill = last.admit_seq
        for req in to_decode:
            self.prefillers.discard(req)
            self.decoders.add(req)
        first = self._decodes_first
        if first is None:
            first = self._decodes_first = bool(getattr(self.view, "takes_decodes_first", False))
        if first:
            return DecodesFirst(chosen, chunks)  # the engine counts steady decoders
        plan: Plan = list(zip(chosen, repeat(1)))
        plan += chunks
        return plan


def _whole_prompt_left(req: Request) -> int:
    """The tokens of `req`'s next chunk when that chunk, whole, ends its prompt
    (`phase` is not DECODE and `resident + phase_remaining >= prompt_tokens`):
    `phase_remaining` then, else 0. Speed: one call for the two property reads
    (the 3.11 interpreter does not specialise a property read: about 1,200
    instructions, a call about half) at each admission by `admit_arrivals`, 0.7 a
    request of generated traces (benchmarks/README.md, "twelfth steps ... mil8")."""
    r = req.resident
    p = req.prompt_tokens
    restore = req.restore
    if r < restore:  # rows to restore first: recompute, or fresh rows past the high water
        if r >= p and r >= req.high_water:
            return 0  # (its phase is DECODE)
        return restore - r if restore >= p else 0
    return p - r if r < p else 0
