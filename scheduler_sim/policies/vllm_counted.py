"""`vllm`'s running loop over the engine's counted decoders (prefix caching).

Under prefix caching the engine may count steady decoders instead of writing
their rows (engine/fast/cohort.py, a keyed cohort): a member's `resident` is
then stale, and `VllmPolicy.schedule` plans its running requests here instead
of walking every row. What the row-by-row loop does for a plain decode whose
row neither opens nor fills a block is one token of the budget and a place in
the plan; nothing else. So only the rows that do more are walked, in running
order: every request the cohort does not count (prefill chunks, decodes not
yet members), and the members at a block's edge (`Cohort.edges`: the decode
that opens a block takes it, `try_grow`; the one that fills a block keys it,
`register_full_blocks`), each with the budget the members before it left; the
other members are counted in one place in the plan each, in running order.

The plan, the blocks (ids in the order growing row by row takes them), the
keys and the budget are those of the row-by-row loop whenever no allocation
can fail: checked first (`plan_counted` returns None when the walked rows may
need more blocks than are free, or the cohort does not match the running
list), and the caller then settles every member and walks the rows (a step
that may preempt). Prefill with a cadence (`prefill_interval`) and caches
that key a block as it opens are planned row by row too (the caller's test).

Speed: the plain decodes inside a block are 7 in 8 of the decodes; see
benchmarks/README.md, "fifteenth steps ... pc11".
"""
from __future__ import annotations

from itertools import compress
from operator import itemgetter, not_
from typing import Any

from ..records.errors import InvariantError
from ..requests.request import Request

__all__ = ["plan_counted"]

_position = itemgetter(0)


def plan_counted(policy: Any, cohort: Any, budget: int, cap: int | None
                 ) -> tuple[dict[Request, int], int] | None:
    """The running part of a `vllm` step with counted members (see the module):
    (request -> tokens in running order, the budget left), with every block
    grown and keyed; None, with nothing done, when it cannot be planned so."""
    running = policy.running
    allocator = policy.view.allocator
    size = allocator.block_size
    members = cohort.members
    n = len(running)
    others = list(compress(range(n), map(not_, map(members.__contains__, running))))
    if n - len(others) != len(members):
        return None  # (a member off the running list: never, as the engine keeps them)
    # The rows walked: (position, request, the member's next row, or None).
    walk = [(i, running[i], None) for i in others]
    opening, filling = cohort.edges()
    if opening or filling:
        index = running.index
        walk += [(index(req), req, row) for req, row in opening]
        walk += [(index(req), req, row) for req, row in filling]
        walk.sort(key=_position)
    # Blocks the walked rows may take at most (a chunk with the whole budget):
    # if they are free, no allocation below fails and nothing is preempted.
    need = len(opening)
    to_grow = allocator.blocks_to_grow
    for _, req, row in walk:
        if row is None:
            r = req.resident
            if r >= req.prompt_tokens and r >= req.restore:  # plain_decode, inlined
                if not r % size:
                    need += to_grow(req.rid, r + 1)
            else:
                need += to_grow(req.rid, r + policy._chunk(req, cap, budget))
    if need > allocator.free:
        return None
    try_grow = allocator.try_grow
    register = allocator.register_full_blocks
    total = budget
    spent = walked = 0  # tokens of the rows walked so far, and how many
    # The first position the budget does not reach (every member before it and
    # after the last row walked takes one token).
    stop = total
    chunks = []  # (position, tokens) of rows of more than one token
    for i, req, row in walk:
        if i >= stop:
            break
        tokens = 1
        if row is None:
            r = req.resident
            if r >= req.prompt_tokens and r >= req.restore:
                if r % size:
                    if not (r + 1) % size and req.block_keys is not None:
                        register(req.rid, req.block_keys, r + 1)
                elif not try_grow(req.rid, r + 1):
                    raise InvariantError(f"request {req.rid!r}: a decode's block was "
                                         "checked free, yet try_grow failed", policy.view.now)
            else:
                # The budget the rows before it left: the members among them one each.
                tokens = policy._chunk(req, cap, total - spent - (i - walked))
                if not try_grow(req.rid, r + tokens):
                    raise InvariantError(f"request {req.rid!r}: a chunk's blocks were "
                                         "checked free, yet try_grow failed", policy.view.now)
                policy._cache_blocks(req, r + tokens)
                if tokens != 1:
                    chunks.append((i, tokens))
        elif row % size:  # a member whose decode fills its block
            if req.block_keys is not None:
                register(req.rid, req.block_keys, row + 1)
        elif not try_grow(req.rid, row + 1):  # a member whose decode opens a block
            raise InvariantError(f"request {req.rid!r}: a decode's block was checked "
                                 "free, yet try_grow failed", policy.view.now)
        spent += tokens
        walked += 1
        stop = total - spent + walked
        if stop <= i:
            stop = i + 1
    if stop > n:
        stop = n
    plan = [1] * stop
    for i, tokens in chunks:
        plan[i] = tokens
    return dict(zip(running, plan)), total - sum(plan)
