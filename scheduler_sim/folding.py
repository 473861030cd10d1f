"""Folding: one step for a steady stretch of identical decode dispatches.

When every row of a dispatch is a decode and the policy reports itself
steady (nothing to prefill, nothing admissible, nothing to preempt), each
following boundary would complete the same rows without finishing anybody
and start the same decodes again, until a request ends or something outside
happens (an arrival, a cancellation, a drain expiry, a timeout, a wakeup).
`fold` applies all those dispatches at once: rows, outputs, blocks, the
statistics and, with a listener, the records each folded boundary would
have produced (the blocked head's report, the snapshot, the dispatch). The
results and the event stream are those of a step-by-step replay, field for
field and byte for byte (tests/test_fast_forward.py).

These functions work on the engine's own state; the engine calls them.
"""
from __future__ import annotations

from .events import AdmissionBlocked, Dispatch, Snapshot
from .request import DECODE, Request, advance_decodes

__all__ = ["fold"]


def fold(engine, flight, until: float) -> None:
    """Fold the dispatches that would repeat `flight` exactly into it (see the module).

    `flight` is all decodes and the policy is steady: until a request
    finishes or something happens at `until`, every boundary would
    complete the same rows (outputs, no finish) and start the same
    decodes again. So the completions of the next K - 1 boundaries and
    the starts of the K - 1 dispatches after this one are applied at
    once, and `flight` becomes the K-th dispatch, whose completion the
    main loop handles as usual. Each folded dispatch starts before
    `until` and none of their completions finishes a request; block
    growth is within each request's credit (reservation) or checked.
    """
    reqs = [req for req, _ in flight.rows]
    if any(r.resident < r.high_water for r in reqs):
        return  # replayed rows are not steady decodes
    emit = engine.listener
    if emit is not None and (engine.allocator.cache is not None
                             or any(r.output_token_ids is not None for r in reqs)):
        return  # records whose content changes each step: not folded
    n = len(reqs)
    # Completions that emit without finishing anybody: min(N - outputs) - 1.
    silent = min(r.output_tokens - r.outputs for r in reqs) - 1
    if silent <= 0 or flight.done >= until:
        return
    # An on-demand policy would preempt once the pool cannot give every row
    # its block: fold only the dispatches whose blocks are free now. (Under
    # reservation every row's block is within its credit, so it is free.)
    allocator = engine.allocator
    free = allocator.free
    grow = allocator.blocks_to_grow

    def blocks(f: int) -> int:
        return sum(grow(r.rid, r.resident + f) for r in reqs)

    # Each request needs at most silent // block_size + 1 new blocks: when even
    # that fits, no request can run short.
    if (not engine.policy.reserves and n * (silent // allocator.block_size + 1) > free
            and blocks(silent) > free):
        low, high = 0, silent  # the most dispatches whose blocks fit
        while low < high:
            mid = (low + high + 1) // 2
            if blocks(mid) <= free:
                low = mid
            else:
                high = mid - 1
        silent = low
        if silent <= 0:
            return
    cost = engine.cost
    clock = engine.clock
    stats = engine.stats
    done = flight.done
    contexts = sum(r.resident for r in reqs)  # before the next dispatch's rows
    folded = 0
    busy = 0.0
    starts = [] if emit is not None else None
    # Lengths of the folded dispatches as runs (length, count): under a cost
    # model they grow slowly with the contexts, so runs are long.
    runs: list[tuple[int, int]] = []
    step = run_length = 0
    exact = flight.exact  # each folded dispatch starts from its predecessor's exact end
    steps_of = clock.steps
    end_step = clock.end_step
    while folded < silent and done < until:
        if starts is not None:
            starts.append(done)
        # Dispatch number folded + 2 starts at `done`.
        if cost is None:
            length = 1
        else:
            seconds = cost.decode_seconds(n, contexts)
            busy += seconds
            exact += steps_of(seconds)
            end = end_step(exact, done)
            if exact <= done:
                exact = end  # shorter than the rest of its first step: one step
            length = end - done
        if length != step:
            if run_length:
                runs.append((step, run_length))
            step, run_length = length, 0
        run_length += 1
        folded += 1
        contexts += n
        done += step
    if starts is not None:
        _emit_folded(engine, reqs, starts, done)
    # Output gaps (ITL): the flight's own completion ends each request's gap
    # since its last output; each folded dispatch but the last (which becomes
    # the flight) completes n outputs one dispatch after the previous ones.
    gaps = stats.itl
    first = flight.done
    start = flight.start
    last_output = done - step
    runs.append((step, run_length - 1))  # the last folded dispatch becomes the flight
    for length, count in runs:
        if count:
            gaps[length] = gaps.get(length, 0) + n * count
    steady = 0  # requests whose previous output came when the flight started
    for req in reqs:
        last = req.last_output_at
        if last == start:
            steady += 1
        else:
            gaps[first - last] = gaps.get(first - last, 0) + 1
        rows = req.resident + folded
        allocator.grow(req.rid, rows)
        if req.block_keys is not None:
            allocator.register_full_blocks(req.rid, req.block_keys, rows)
    advance_decodes(reqs, folded, last_output)
    if steady:
        gaps[first - start] = gaps.get(first - start, 0) + steady
    rows = n * folded
    stats.iterations += folded
    stats.rows += rows
    stats.tokens += rows
    stats.decode_tokens += rows
    stats.output_tokens += rows
    stats.busy_seconds += busy
    engine.folded += folded
    flight.start = last_output
    flight.done = done
    flight.exact = exact if cost is not None else done

def _emit_folded(engine, reqs: list[Request], starts: list[int], last_done: int) -> None:
    """The records each folded boundary would have produced, in order: the
    policy's blocked-head report (if it made one), the snapshot, the dispatch.

    Only block counts change from one folded step to the next: dispatch
    s + 1 writes row r + s - 1 of a request with r resident rows now, and
    needs a new block when that row starts one.
    """
    emit = engine.listener
    a = engine.allocator
    size = a.block_size
    n = len(reqs)
    starts_at = [0] * size  # requests by the first block boundary they reach
    for req in reqs:
        starts_at[req.resident % size] += 1
    waiting = engine.policy.waiting_count
    running = engine.policy.running_count
    held = a.held
    draining = a.draining
    total = a.num_blocks
    rows = tuple((req.rid, DECODE, 1, True, None) for req in reqs)
    report = engine.step_block
    policy = engine.policy
    ends = starts[1:] + [last_done]
    for s, (tick, done) in enumerate(zip(starts, ends), start=1):
        grown = starts_at[(1 - s) % size]  # rows r + s - 1 that open a block
        free = total - held - draining
        if report is not None:
            rid, reason, needed = report
            early = policy.allocates_before_admission
            seen = free - grown if early else free
            emit(AdmissionBlocked(tick, rid, policy.repeated_block_reason(
                reason, needed, seen), needed, seen, a.reserved, draining,
                (grown or None) if early else None))
        emit(Snapshot(tick, waiting, running, a.reserved, held, draining, free))
        emit(Dispatch(tick, rows, n, done))
        held += grown
