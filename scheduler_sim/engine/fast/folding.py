"""Folding: one step for a steady stretch of identical decode dispatches.

The engine decides when a stretch is steady, from what it observes
(`Steadiness.repeats`, steadiness.py): the dispatch just planned is all decodes and
repeats the previous one (the same requests in the same order, the same blocked head),
the policy's own attributes did not change, and nothing happened in between (no arrival,
end, admission, preemption, release, drain or policy event). A policy that decides from
what it sees then plans the same decodes again, one token further, until a request ends
or something outside happens (an arrival, a cancellation, a drain expiry, a timeout, a
wakeup; arrivals that only join the queue behind a blocked head, when the policy
says so, `Policy.arrivals_wait`, do not stop it). The policy has its say
(`Policy.may_fold`): only it knows whether a blocked head can become admissible while
others decode, or whether its choices change as requests decode. The folded stretch also stops before its rows would run out of free
blocks, before a blocked head's need would stop fitting the free blocks (where a
policy's decision or reason may change), and where the policy says a skipped call
would do more than plan the same decodes (`Policy.fold_room`: SGLang's eviction ahead).

`fold` applies all those dispatches at once: rows, outputs, blocks, the
statistics and, with a listener, the records each folded boundary would
have produced (the blocked head's report, the snapshot, the dispatch;
fold_records.py writes them). The results and the event stream are those of
a step-by-step replay, field for field and byte for byte
(tests/test_fast_forward.py).

These functions work on the engine's own state; the engine calls them. A run of
steps whose plan is decodes and one prompt's chunk (no step all decodes) is
folded by chunk_run.py's `fold_chunks`, named here for the engine.
"""
from __future__ import annotations

from ...requests.request import Request
from .chunk_run import fold_chunks
from .fold_bounds import fewest_left, past_arrivals, steady_rows
from .fold_records import block_order, emit_folded

__all__ = ["FOLD_AFTER", "fold", "fold_chunks"]

# With a cohort, a steady stretch is looked at for folding only when it may
# last this many dispatches: a shorter one saves less than looking costs.
FOLD_AFTER = 2


def fold(engine, flight, until: float, policy_growth: int, rows: str | None = None,
         written: int | None = None) -> None:
    """Fold the dispatches that would repeat `flight` exactly into it (see the module).

    The engine saw `flight` repeat the dispatch before it (`Steadiness.repeats`, steadiness.py)
    and the policy agreed (`may_fold`): until a request finishes or something
    happens at `until`, every boundary would complete the same rows (outputs,
    no finish) and start the same decodes again. So the completions of the
    next K - 1 boundaries and the starts of the K - 1 dispatches after this
    one are applied at once, and `flight` becomes the K-th dispatch, whose
    completion the main loop handles as usual. Each folded dispatch starts
    before `until`, none of their completions finishes a request, and their
    blocks are free now. `policy_growth` is the blocks the policy itself gave
    this step's rows while it planned (see fold_records.py's `block_order`).
    `rows`: for a line listener, the text of the flight's rows if the caller
    wrote them just now (a counted start's, `Counting._write_counted`), for the
    folded dispatches'. `written`: the sum of the decoders' `resident` when the
    caller just wrote every row as a decode none had written before
    (`write_decodes` counted all of them useful: each `resident` is its
    `high_water`): the look at the rows then finds only the fewest outputs left.
    """
    if flight.done >= until:
        return
    # (The engine's own attributes below, not its properties `step_block`,
    # `listener` and `cohort`: three calls fewer a fold, 27,747 folds on the Azure
    # conversation trace under continuous.)
    block = engine.steadiness.blocked
    if not engine.policy.may_fold(block[1] if block is not None else None):
        return
    emit = engine._emit
    allocator = engine.allocator
    if emit is not None and allocator.cache is not None:
        return  # records whose content changes each step: not folded
    cohort = engine._cohort if flight.members else None
    if cohort is not None and (flight.decoders or flight.rows):
        engine.settle_members(flight)  # counted and written rows: all written first
        cohort = None
    if cohort is not None:
        # Every row a counted decode: the cohort answers for all of them at once.
        reqs = None
        n = flight.members
        foldable = cohort.fewest_left() - 1
        if foldable <= 0:
            return
    else:
        reqs = flight.decoders
        if reqs is None:
            reqs = [req for req, _ in flight.rows]
        if emit is not None and any(r.output_token_ids is not None for r in reqs):
            return  # the same
        # Completions that emit without finishing anybody: min(N - outputs) - 1; no
        # replayed row (not a steady decode); the rows' contexts: one pass in Python
        # (`steady_rows`), paid by every attempt, folded or not. When the caller
        # knows the contexts and that none replays (`written`), only the fewest left
        # is looked for (22 requests in 2.1 us against 5.2 us; 0.995x the
        # instructions of the first 2,000 Mooncake requests under vllm;
        # benchmarks/README.md, "thirty-first steps", ft35).
        if written is None:
            look = steady_rows(reqs)
            if look is None:
                return  # a replayed row
            least, contexts = look
        else:
            contexts = written
            least = fewest_left(reqs)
        foldable = least - 1
        if foldable <= 0:
            return
        n = len(reqs)
        if block is not None and emit is None:
            until = past_arrivals(engine, until, block[1])
    # The most blocks the folded dispatches may take: those free now (a policy
    # would preempt or stop once its rows cannot all grow) ...
    free = allocator.free
    room = free
    taken_first = None
    if block is not None:
        needed, seen = block[2], block[3]
        if 0 < needed <= seen:
            # ... and, while the blocked head's need (above 0: a head loaded from host
            # memory may hold more than its first chunk fills) fits the free blocks it
            # saw, no more than keeps it fitting (its reason may depend on it).
            room = free - needed
        if emit is not None:
            taken_first = block_order(allocator, block, policy_growth)
            if taken_first is None:
                room = min(room, 0)  # order unknown: fold only steps opening no block
    # ... and no more than the policy lets them (SGLang's decode step evicts ahead).
    room = engine.policy.fold_room(n, room)
    # Each request needs at most foldable // block_size + 1 new blocks: when even
    # that fits, no request can run short.
    if n * (foldable // allocator.block_size + 1) > room:
        foldable = _fitting(allocator, cohort, reqs, foldable, room)
        if foldable <= 0:
            return
    starts = [] if emit is not None else None
    # Contexts before the next dispatch's rows; each folded dispatch adds n.
    if cohort is not None:
        contexts = cohort.contexts()
    ledger = engine.ledger
    folded, done, exact, last_output = ledger.fold(flight.exact, flight.done, n, contexts,
                                                   foldable, until, starts)
    if starts is not None:
        if cohort is not None:  # every row a member's, in the flight's order
            emit_folded(engine, flight.requests, starts, done, taken_first,
                        cohort.by_residue(), rows)
        else:
            emit_folded(engine, reqs, starts, done, taken_first)
    # Output gaps (ITL) of the flight's own completion, which ends each request's
    # gap since its last output (the ledger counted the folded dispatches').
    first = flight.done
    start = flight.start
    if cohort is not None:
        steady = n  # every member's previous output came when the flight started
        cohort.advance(folded, last_output)
    else:
        # Each request in one pass (speed: three passes before, 32,726 folds of
        # about 9 requests under vllm on the Azure trace): the gap its output at
        # the flight's completion ends, its blocks, then its folded rows and
        # outputs (the last output at `last_output`).
        others = []  # the gaps of the requests whose previous output came at another time
        grow = allocator.grow
        size = allocator.block_size
        keys_decoded = allocator.keys_decoded  # (False: SGLang's tree keys them at the end)
        # With prefix caching a block opened is mostly an eviction: the blocks the
        # folded rows open are gathered and taken after the loop in one call, in the
        # order its `grow` calls would take them (kv/block_openings.py); then the
        # blocks they filled are keyed in one call (`register_decoded_each`: a
        # request's decoded keys are its own, so their order is nobody's). The loop
        # itself touches no block then. (Speed: replaying the Mooncake trace under
        # vllm, 143,421 `register_decoded` calls in 10,359 folds, and a pass over
        # the rows for the openings; benchmarks/README.md, "twenty-ninth steps",
        # helper fold31.) A request whose decoded keys vLLM's cache only counts
        # (`keys_counted`) has its count raised here instead: its table covers its
        # rows once the openings are taken, so the count is its full blocks.
        # (Speed: 135,493 of those 143,421 were such requests, each a tuple and a
        # pass of its own in `register_decoded_each` before; the opening's test
        # is `-r % B < folded`, the rows left in the last block, and the steady
        # gaps are counted as the rest: benchmarks/README.md, "thirtieth steps",
        # helper fd34.)
        counted = allocator.keys_counted() if keys_decoded else None
        openings = [] if allocator.cache is not None else None
        filled = []
        for req in reqs:
            if req.last_output_at != start:
                others.append(first - req.last_output_at)
            now_rows = req.resident  # (its table covers them: at least ceil(r / B) blocks)
            rows = now_rows + folded
            if -now_rows % size < folded:
                # The folded rows open a block. (Asked only then: under vllm on the
                # Azure trace 360k of these calls found nothing to do.)
                if openings is None:
                    grow(req.rid, rows)
                else:
                    openings.append((req.rid, rows))
            # (The allocator's first test, before its call: 255,678 calls, most keying nothing.)
            keys = req.block_keys
            if keys_decoded and keys is not None and rows // size > keys.registered:
                if counted is not None and req.rid in counted:
                    keys.registered = rows // size
                else:
                    filled.append((req.rid, keys, rows))
            req.resident = req.high_water = rows
            req.useful_rows += folded
            req.outputs += folded
            req.last_output_at = last_output
        steady = n - len(others)  # requests whose previous output came when the flight started
        if openings:
            allocator.grow_each(openings)
        if filled:
            allocator.register_decoded_each(filled)
        if others:
            ledger.gaps(others)
    if steady:
        ledger.gap(first - start, steady)
    engine.steadiness.folded += folded
    flight.start = last_output
    flight.done = done
    flight.exact = exact


def _fitting(allocator, cohort, reqs: list[Request] | None, foldable: int, room: int) -> int:
    """The most dispatches, up to `foldable`, whose new blocks fit `room`: those of
    the cohort's members (`reqs` None), or of the written decoders `reqs`."""
    grow = allocator.blocks_to_grow

    def blocks(f: int) -> int:
        if cohort is not None:
            return cohort.blocks_within(f)
        return sum(grow(r.rid, r.resident + f) for r in reqs)

    if blocks(foldable) <= room:
        return foldable
    low, high = 0, foldable
    while low < high:
        mid = (low + high + 1) // 2
        if blocks(mid) <= room:
            low = mid
        else:
            high = mid - 1
    return low
