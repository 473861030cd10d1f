"""Your own scheduling policy for scheduler-sim: start from this file.

Run it with `scheduler-sim replay TRACE --policy my_policy.py:ShortestFirst`
(the path is relative to where you run the command). As it stands it is
first come, first served: admit waiting requests in arrival order while
their reservation fits, and give every running request its next chunk.
The lab asks you to change the order of admission (see README.md); the
places to change are marked TODO.

What a policy may read and do is in docs/policies.md: `self.options` (the
run's options), `self.view` (the engine: `admit`, `report_blocked`, `preempt`, the
`allocator`, `now`), and each `Request` (prompt_tokens, max_tokens, outputs,
resident, phase_remaining, ...). `schedule` returns the next dispatch as a
list of (request, tokens) pairs; the engine checks every decision and stops
with a message naming the broken rule if one is wrong.
"""
from scheduler_sim import QueueAndListPolicy


class ShortestFirst(QueueAndListPolicy):
    """First come, first served for now; make it shortest remaining work first."""

    def schedule(self, now):
        view = self.view
        # TODO: consider the waiting requests in order of remaining work
        # (prompt_tokens + max_tokens - outputs), shortest first, and admit
        # every one whose credit fits instead of stopping at the first that
        # does not.
        while self.waiting and len(self.running) < self.options.max_rows:
            head = self.waiting.peek()
            credit = self.blocks_to_finish(head)  # ceil((P + M - 1) / block_size)
            if not view.allocator.can_reserve(credit):
                view.report_blocked(head, "reservation", credit)  # reported as admission_blocked
                break
            self.waiting.pop()
            view.admit(head, credit)
            self.running.append(head)
        # The dispatch: every running request gets its next chunk (a decode is one
        # token), oldest first, within the token budget.
        plan, budget = [], self.options.token_budget
        for req in self.running:
            tokens = min(req.phase_remaining, self.options.prefill_chunk, budget)
            if tokens == 0:
                break
            plan.append((req, tokens))
            budget -= tokens
        return plan
