"""The victim rules of the `vllm` policy (option `victim`): which running request
to preempt when a request's blocks cannot be allocated. Each rule takes the
candidates in running (admission) order and returns one; the rules that need
the allocator are `VllmPolicy._victim`'s (policies/vllm.py)."""
from __future__ import annotations

from ..requests.request import Request

__all__ = ["VICTIM_RULES"]


def _lifo(running: list[Request]) -> Request:
    return running[-1]


def _priority(running: list[Request]) -> Request:
    # Largest (priority, arrival); on a tie the earliest in the running list.
    best = running[0]
    for req in running[1:]:
        if (req.priority, req.arrival) > (best.priority, best.arrival):
            best = req
    return best


def _fewest_outputs(running: list[Request]) -> Request:
    # SGLang's retraction order: fewest outputs, then longest prompt; the
    # latest admitted on a full tie.
    best = running[-1]
    for req in reversed(running[:-1]):
        if (req.outputs, -req.prompt_tokens) < (best.outputs, -best.prompt_tokens):
            best = req
    return best


VICTIM_RULES = {
    "lifo": _lifo,
    "priority": _priority,
    "fewest-outputs": _fewest_outputs,
    "most-blocks": None,  # needs the allocator: see VllmPolicy._victim
    "most-reclaimable": None,  # needs the allocator: see VllmPolicy._victim
}
