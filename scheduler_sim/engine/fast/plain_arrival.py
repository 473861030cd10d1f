"""A plain arrival: a request registered where nothing but the policy's queue sees it.

`Lifecycle._arrive` builds a request from its trace record (`request_of`) and
registers it (`_register`): its send time, the change log, the rejection test
(E6), the live count, the spill's test, its wait (`start_waiting`) and the
policy's `add`. For a lone engine with no client slots, no plug-in policy, no
prefix caching and no waiting timeout, most of that is a few assignments
(with an event listener, its `Arrival` record as `_register` hands it, or to a
line listener its line without the record); `plain_arrival` returns an `_arrive` that does them inline
(the engine sets it as its roster's `arrive`, core.py) and hands a request that
is rejected or spilled to `_register` as before: the same fields set and
counters moved, the same policy call, so the same results
(tests/test_plain_end.py compares runs with and without it). Speed: five
calls and their tests fewer an arrival, about 1% of the instructions of a
replay of 20,000 generated requests (benchmarks/README.md, "seventeenth
steps ... mil13"). With a listener: 0.5% fewer instructions with `--events`
on the Azure conversation trace's first 2,000 requests under `continuous`
(with `_finish_ended`'s like step; benchmarks/README.md, "twenty-second
steps", helper ev23).
"""
from __future__ import annotations

from ...records.event_lines import LineListener
from ...records.events import Arrival
from ...requests.request import Request

__all__ = ["plain_arrival"]


def plain_arrival(engine):
    """An `engine._arrive` for the plain case of the module, or None where it does
    not apply."""
    options = engine.options
    if (engine.clients is not None or engine._plugin or options.prefix_caching
            or engine.agenda.timeout is not None):
        return None
    roster = engine.roster
    requests = roster.requests
    stats = engine.ledger.stats
    agenda = engine.agenda
    steady = engine.steadiness
    policy = engine.policy
    replica = engine.link.replica
    num_blocks = options.num_blocks
    needs = policy.blocks_to_finish
    add = policy.add
    spill = roster.spill
    wanted = spill.wanted if spill is not None else None
    register = engine._register
    emit = engine._emit
    arrived = emit.arrived if isinstance(emit, LineListener) else None

    def arrive(spec) -> None:
        req = Request(spec.id, spec.index, spec.arrival, spec.prompt_tokens,  # (`request_of`)
                      spec.output_tokens, spec.max_tokens, spec.priority, spec.deadline,
                      spec.prompt_token_ids, spec.output_token_ids, spec.block_hashes)
        req.replica = replica
        requests[req.rid] = req
        stats.requests += 1
        agenda.arrived += 1
        spilled = wanted is not None and wanted()
        if spilled or needs(req) > num_blocks:
            register(req, spilled)
            return
        now = req.sent = req.wait_since = engine.now  # (`_register`, `start_waiting`)
        steady.changes += 1
        if emit is not None:  # (not forwarded: its wait since its trace time)
            if arrived is not None and now == req.arrival:
                arrived(now, req.rid)  # (a line listener's line without the record)
            else:
                emit(Arrival(now, req.rid, (now - req.arrival) or None))
        roster.live += 1
        add(req)

    return arrive
