"""A reference solution for lab 08: shortest remaining work first, with preemption.

Remaining work is prompt_tokens + max_tokens - outputs: what a request still
costs if it ran to its limit. At every step:

1. Admission looks at the waiting requests in order of remaining work (ties
   by arrival, then trace order) and admits each one whose reservation
   credit fits, skipping those that do not: a long request no longer blocks
   the short ones behind it.
2. A waiting request that does not fit may take the place of running
   requests with more remaining work than it: if preempting all of them
   would free enough credit, they are preempted one at a time, most
   remaining work first, until it fits. A victim keeps its outputs, waits
   again, and recomputes its rows when it is admitted again.
3. The dispatch serves every decode first (one token each), then prefill
   and recompute chunks, each group in order of remaining work, within
   `max_rows` and `token_budget`, chunks at most `prefill_chunk` tokens.
"""
from scheduler_sim import QueueAndListPolicy


def remaining(req):
    """Tokens of work left: the prompt, plus every output not yet produced."""
    return req.prompt_tokens + req.max_tokens - req.outputs


def order(req):
    """Shortest remaining work first; ties by arrival, then position in the trace."""
    return remaining(req), req.arrival, req.index


class ShortestFirst(QueueAndListPolicy):
    """Shortest remaining work first, admitting around requests that do not fit and
    preempting longer running requests for a shorter waiting one."""

    def schedule(self, now):
        view = self.view
        allocator = view.allocator
        blocked = None
        for req in sorted(self.waiting, key=order):
            credit = self.blocks_to_finish(req)
            if len(self.running) >= self.options.max_rows:
                blocked = blocked or (req, "max_rows", credit)
                break
            if not allocator.can_reserve(credit):
                self.make_room(req, credit)
            if not allocator.can_reserve(credit):
                blocked = blocked or (req, "reservation", credit)
                continue
            self.waiting.remove(req)
            view.admit(req, credit)
            self.running.append(req)
        if blocked is not None:
            view.report_blocked(*blocked)  # the shortest request left waiting, and why
        decodes = sorted((r for r in self.running if r.phase == "decode"), key=order)
        chunks = sorted((r for r in self.running if r.phase != "decode"), key=order)
        plan, budget = [], self.options.token_budget
        for req in (decodes + chunks)[: self.options.max_rows]:
            tokens = min(req.phase_remaining, self.options.prefill_chunk, budget)
            if tokens == 0:
                break
            plan.append((req, tokens))
            budget -= tokens
        return plan

    def make_room(self, req, credit):
        """Preempt running requests with more remaining work than `req`, most first,
        until its credit fits, but only if preempting them all would be enough."""
        allocator = self.view.allocator
        longer = sorted((r for r in self.running if remaining(r) > remaining(req)),
                        key=order, reverse=True)
        room = allocator.num_blocks - allocator.committed()
        if room + sum(allocator.credit(r.rid) for r in longer) < credit:
            return
        for victim in longer:
            if allocator.can_reserve(credit):
                return
            self.view.preempt(victim, "out_of_blocks", "longest-remaining", req.rid)
