"""The victim rules of the `vllm` policy (option `victim`): which running request
to preempt when a request's blocks cannot be allocated, and which requests are
protected from it (option `max_preemptions`). Each rule takes the candidates in
running (admission) order and the block allocator, and returns one."""
from __future__ import annotations

from ..kv.allocator import BlockAllocator
from ..requests.request import Request

__all__ = ["VICTIM_RULES", "choose_victim"]


def choose_victim(running: list[Request], rule: str, cap: int | None,
                  allocator: BlockAllocator) -> Request | None:
    """The running request `rule` preempts next, or None if every one is protected
    (preempted `cap` times already; None: no cap)."""
    candidates = running if cap is None else [r for r in running if r.preemptions < cap]
    return VICTIM_RULES[rule](candidates, allocator) if candidates else None


def _lifo(running: list[Request], allocator: BlockAllocator) -> Request:
    return running[-1]


def _priority(running: list[Request], allocator: BlockAllocator) -> Request:
    # Largest (priority, arrival); on a tie the earliest in the running list.
    best = running[0]
    for req in running[1:]:
        if (req.priority, req.arrival) > (best.priority, best.arrival):
            best = req
    return best


def _fewest_outputs(running: list[Request], allocator: BlockAllocator) -> Request:
    # SGLang's retraction order: fewest outputs, then longest prompt; the
    # latest admitted on a full tie.
    best = running[-1]
    for req in reversed(running[:-1]):
        if (req.outputs, -req.prompt_tokens) < (best.outputs, -best.prompt_tokens):
            best = req
    return best


def _most_blocks(running: list[Request], allocator: BlockAllocator) -> Request:
    # The largest block table; the latest admitted on a tie.
    return _largest(running, lambda req: len(allocator.table(req.rid)))


def _most_reclaimable(running: list[Request], allocator: BlockAllocator) -> Request:
    # The most blocks that preempting would really let go of (not shared with
    # another request, not pinned by a transfer); the latest admitted on a tie.
    return _largest(running, lambda req: allocator.reclaimable(req.rid))


def _largest(running: list[Request], score) -> Request:
    """The request of the largest score, the latest in `running` on a tie."""
    best = running[-1]
    best_score = score(best)
    for req in reversed(running[:-1]):
        value = score(req)
        if value > best_score:
            best, best_score = req, value
    return best


VICTIM_RULES = {
    "lifo": _lifo,
    "priority": _priority,
    "fewest-outputs": _fewest_outputs,
    "most-blocks": _most_blocks,
    "most-reclaimable": _most_reclaimable,
}
