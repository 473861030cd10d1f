"""Chunk runs: the steps of a long prompt chunked behind decodes, applied at once.

A long prompt admitted while others decode is computed in chunks. At each step
of such a run every other running request decodes one token and the prompt's
chunk takes the rest of the token budget, so nothing more is admitted: the
queue head is reported blocked for `token_budget`, whatever the pool holds.
Until the chunk that ends the prompt (shorter than the rest of the budget: it
leaves room for admissions, and it emits), a decoder's last output, something
outside (a cancellation, a drain, a wakeup, an arrival unless the policy says it
only joins the queue: fold_bounds.py) or blocks
running short (a step would preempt), every `schedule` call plans the same rows
again, the chunk `tokens` rows further. Replaying the Mooncake conversation
trace under `vllm` with prefix caching, 10,252 of the 30,598 stepped dispatches
were such steps, in runs of identical composition.

The run starts at the step that admits the prompt (or any step whose rows are
decodes, prompts that end in it, and that chunk last). The policy promises
the repeat (`Policy.repeats_chunk`); `fold_chunks` then applies the steps of
the run after the one just planned at once: the completion before each (the
decoders' outputs and gaps), its dispatch's statistics and timing (the
ledger's own `dispatch`, so a mixed batch is priced, counted and drawn as
stepped), the blocks its rows take in the order the calls take them (each
decoder's row in running order, opening a block at its first row or keying
the block its last fills, then the chunk's blocks: an eviction from the LRU
queue hands out ids in call order, and ids matter to the cache's later
state) and the head's report. The last of them stays in flight, for the loop
to complete. Speed: 7,213 of those dispatches applied so on that trace, past
arrivals too (benchmarks/README.md, "twenty-sixth steps", chunk28: 0.962x the
instructions of its first 2,000 requests before that).

With nothing waiting (no head to report; a lone prompt on a fleet's replica,
mostly) the calls plan the same rows: such a run is folded too, up to the next
outside event (on 64 prefix-affinity replicas replaying the first 2,000 Mooncake
requests under `vllm` with prefix caching, 1,114 steps folded, `schedule` called
5,714 times instead of 6,759). Only where a boundary holds nothing else
(`Steadiness.through`: a lone engine or a plain fleet's replica, a built-in policy,
no state callback, client slots, timeouts, release delay or host memory), no
listener (its records change each step) and no decode
cohort (whose members the rows would have to settle: prefix caching has
none). The results are those of a stepped replay, field for field
(tests/test_fast_forward.py).
"""
from __future__ import annotations

from operator import itemgetter

from .fold_bounds import past_arrivals, steady_rows

__all__ = ["fold_chunks"]

_first = itemgetter(0)


def fold_chunks(engine, flight) -> None:
    """Apply the steps of a chunk run after the one that started `flight` (see the
    module), whose call reported a head blocked for the budget, or had nothing
    waiting."""
    steady = engine.steadiness
    block = steady.blocked
    if ((block[1] != "token_budget" if block is not None else engine.policy.waiting_count)
            or not steady.through or engine._emit is not None or engine._cohort is not None):
        return
    rows = flight.rows  # (every request's row, in the order the policy runs them)
    chunk, emits = rows[-1]
    k = len(rows) - 1
    r = chunk.resident  # (its chunk written: the row the next chunk starts at)
    tokens = engine.options.token_budget - k  # (the rest of the budget, after the decodes)
    if emits or tokens <= 0 or r < chunk.restore or r != chunk.high_water:
        return  # (its prompt ended, a recompute, replayed rows)
    # The steps whose chunk does not end the prompt (most calls end here: the next
    # chunk is the last) ...
    most = -(-(chunk.prompt_tokens - r) // tokens) - 1
    if most <= 0 or flight.outputs != k or k + 1 != engine.policy.running_count:
        return
    # From the next step on, every request but the chunk's decodes (each emitted
    # now: a decode, or a chunk that ended its prompt), and the chunk takes the
    # rest of the budget, if the policy says so.
    decoders = list(map(_first, rows[:-1]))
    if not engine.policy.repeats_chunk(decoders, chunk, tokens):
        return
    contexts = 0
    if decoders:
        # ... nor complete a decoder's last output before the last of them (that
        # completion is the loop's). (Each emitted: its prompt and any rows to
        # restore are written; a replayed row, below its `high_water`, the most rows
        # ever written, is not a steady decode: was a test of any difference.)
        look = steady_rows(decoders)
        if look is None:
            return
        least, contexts = look
        most = min(most, least - 1)
        if most <= 0:
            return
    until = (past_arrivals(engine, engine._until(), "token_budget") if block is not None
             else engine._until())
    if flight.done >= until:
        return
    allocator = engine.allocator
    size = allocator.block_size
    keyed = allocator.cache is not None
    if keyed and any(req.output_token_ids is not None for req in decoders):
        return  # decoded blocks keyed by content another's prompt may share (see below)
    # Each step's blocks in the order its call takes them, (id, rows): each
    # decoder's opening in running order, then the chunk's; `ends[i]`: the entries
    # of steps 0 to i. The blocks decoders fill: (step, id, keys, rows). (Found
    # from each decoder's offset in its block: no pass over the decoders a step.)
    opens = []  # (step, id, rows), in running order
    fills = []
    edge = size - 1
    for req in decoders:
        rows = req.resident
        i = -rows % size
        while i < most:
            opens.append((i, req.rid, rows + i + 1))
            i += size
        if keyed and req.block_keys is not None:
            i = (edge - rows) % size
            while i < most:
                fills.append((i, req.rid, req.block_keys, rows + i + 1))
                i += size
    opens.sort(key=_first)  # (stable: running order within a step)
    openings: list[tuple[str, int]] = []
    ends = []
    chunk_blocks = [0]  # the chunk's new blocks after each step
    free = allocator.free
    need = allocator.blocks_to_grow
    rid = chunk.rid
    at = 0  # the next of `opens`
    for i in range(most):
        first = len(openings)
        while at < len(opens) and opens[at][0] == i:
            openings.append(opens[at][1:])
            at += 1
        grown = need(rid, r + (i + 1) * tokens)
        # No step may run short of blocks (it would preempt): the blocks the steps
        # open all fit the free ones (none comes back in the run).
        if at + grown > free:
            del openings[first:]
            break
        openings.append((rid, r + (i + 1) * tokens))
        ends.append(len(openings))
        chunk_blocks.append(grown)
    fits = len(ends)
    if not fits:
        return
    # The dispatches, as the boundaries start and complete them, up to `until`.
    ledger = engine.ledger
    start, done, exact = flight.start, flight.done, flight.exact
    first_done, first_start = done, start
    ledger.completed(done, exact, k, {})  # the flight's completion (E1; its gaps below)
    total = k + tokens
    folded = 0
    written = r  # (the chunk's rows)
    while folded < fits and done < until:
        if folded:  # the previous folded step's completion: every decoder's output
            ledger.completed(done, exact, k, {start: k} if k else {})
        start = done
        done, exact = ledger.dispatch(start, k + 1, total, tokens, k, 0, 0,
                                      [(tokens, written)], contexts)
        written += tokens
        contexts += k
        folded += 1
    # Their blocks, taken at once in the order the calls take them (the same ids:
    # kv/block_openings.py's `grow_in_turn`; a `grow` a step before, 1.015x the
    # instructions of the first 2,000 Mooncake requests), then keyed, the chunk's
    # as one registration. Keying after the evictions rather than
    # between them changes nothing: a block evicted is a free one, whose key is
    # none of the decoders' (their own), and the chunk's only if the chunk's
    # block duplicates it; then the chunk's takes its place in the index either
    # way (kv/vllm_cache.py's `register` and `forget_key`).
    growth = allocator.step_growth
    growth.clear()
    allocator.step_evictions.clear()
    allocator.grow_in_turn(openings[:ends[folded - 1]])
    register = allocator.register_full_blocks
    # (The decoders' filled blocks keyed as `schedule` keys them. A later walk or
    # a finish would key them too, but a decoder preempted before the walk reaches
    # its next edge releases only the blocks keyed so far: its resumed look-up
    # would find fewer. No test or fuzz case has reached that yet: rev29.)
    for i, req_rid, req_keys, end in fills:
        if i < folded:
            register(req_rid, req_keys, end)
    if keyed and chunk.block_keys is not None:
        register(rid, chunk.block_keys, written)
    # What the last step's call saw and reported: the blocks its rows took (the
    # decoders' openings and the chunk's), the free ones left. (`step_evictions`,
    # read only for a state callback or a listener, is left empty.)
    growth.clear()
    last = openings[ends[folded - 2] if folded > 1 else 0:ends[folded - 1] - 1]
    for req_rid, _ in last:
        growth[req_rid] = 1
    grown = chunk_blocks[folded] - chunk_blocks[folded - 1]
    if grown:
        growth[rid] = grown
    if block is not None:
        steady.blocked = (block[0], block[1], block[2], allocator.free, len(last) + grown)
    # The rows written and the outputs of the completions applied, in one pass (as
    # `emit_outputs` and `write_decodes` a step): the gap each decoder's output at
    # the flight's completion ends (none for a first output; the ledger counted
    # the folded ones').
    steady_gaps = 0  # outputs whose previous one came when the flight started
    others = []
    for req in decoders:
        if not req.outputs:
            req.first_token_at = first_done
        elif req.last_output_at == first_start:
            steady_gaps += 1
        else:
            others.append(first_done - req.last_output_at)
        rows = req.resident + folded
        req.resident = req.high_water = rows
        req.useful_rows += folded
        req.outputs += folded
        req.last_output_at = start
    if others:
        ledger.gaps(others)
    if steady_gaps:
        ledger.gap(first_done - first_start, steady_gaps)
    chunk.record_rows(folded * tokens)
    steady.chunks_folded += folded
    flight.start = start
    flight.done = done
    flight.exact = exact
