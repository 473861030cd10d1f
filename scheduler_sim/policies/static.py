"""`static`: padded static batching, the baseline continuous batching replaced (§6).

When nothing runs, up to `max_rows` waiting requests (no more than
`token_budget`, so that one decode step fits) form a batch, in queue order,
each reserving its worst case as under `continuous` (A1); the first that
does not fit closes the batch. The batch first prefills every member
(chunked by `prefill_chunk` and the budget), then decodes all members in
lockstep. A member that has produced its last output keeps its row as a
padding row (one token of budget, no KV written, no output) and keeps its
blocks until the batch ends, when the longest member finishes; only then
are the blocks released and the next batch formed. Requests arriving
meanwhile wait.
"""
from __future__ import annotations

from ..records.options import Options
from ..requests.request import DECODE, Request
from .base import PADDING, Plan, Policy, SchedulerView

__all__ = ["StaticPolicy"]


class StaticPolicy(Policy):
    """One padded batch at a time, formed when the engine is idle."""

    name = "static"
    keeps_blocks_after_finish = True

    def __init__(self, options: Options, view: SchedulerView) -> None:
        super().__init__(options, view)
        self.queue = self.make_waiting_queue()
        self.batch: list[Request] = []   # members in admission order, finished ones too
        self.live: set[Request] = set()  # members still running

    # --- notifications ------------------------------------------------------

    def add(self, req: Request) -> None:
        self.queue.add(req)

    def requeue(self, req: Request) -> None:
        self.requeue_into(self.queue, req)

    def remove(self, req: Request) -> None:
        if req in self.queue:
            self.queue.remove(req)
            return
        self.live.discard(req)
        if not req.status.is_finished:
            # Still running, so being cancelled or preempted (a member that
            # finished is removed after its status changed): it leaves the
            # batch and needs no padding.
            self.batch.remove(req)
        if self.batch and not self.live:
            self._end_batch()  # the longest member just finished

    @property
    def waiting_count(self) -> int:
        return len(self.queue)

    @property
    def running_count(self) -> int:
        return len(self.live)

    def may_fold(self, blocked_reason: str | None) -> bool:
        # A head waits for the batch to end, which no decode step changes.
        return True

    # --- batches ------------------------------------------------------------------

    def ready(self, now: int) -> bool:
        """Whether a new batch may start now (static: whenever something waits)."""
        return len(self.queue) > 0

    def _end_batch(self) -> None:
        for req in self.batch:
            if req.status.is_finished:
                self.view.release(req)
        self.batch = []

    def _form_batch(self) -> None:
        queue = self.queue
        queue.refresh()
        size = min(self.options.max_rows, self.options.token_budget)
        while queue and len(self.batch) < size:
            head = queue.peek()
            credit, needed, cached = self.reservation_need(head)
            if not self.fits_reservation(head, needed):
                break
            queue.pop()
            self.view.admit(head, credit, cached)
            self.batch.append(head)
            self.live.add(head)
        if queue and len(self.batch) == size:
            self.view.report_blocked(queue.peek(), "batch_full", self.blocks_to_finish(queue.peek()))

    def schedule(self, now: int) -> Plan:
        if not self.batch:
            if not self.ready(now):
                return []
            self._form_batch()
        elif self.queue:
            head = self.queue.peek()
            self.view.report_blocked(head, "batch_running", self.blocks_to_finish(head))
        return self._build()

    def _build(self) -> Plan:
        options = self.options
        budget = options.token_budget
        chunk = options.prefill_chunk
        plan: Plan = []
        prefilling = [r for r in self.batch if r in self.live and r.phase != DECODE]
        if prefilling:
            for req in prefilling:
                if budget == 0:
                    break
                tokens = min(req.phase_remaining, chunk, budget)
                plan.append((req, tokens))
                budget -= tokens
            return plan
        for req in self.batch:
            plan.append((req, 1 if req in self.live else PADDING))
        return plan
