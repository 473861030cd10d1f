"""The `vllm` policy (§6, L3, §8, E6): on-demand blocks, running requests first,
preemption by recompute with its victim rules, the full-sequence gate, the watermark,
the long-prefill threshold, prefix caching, and seeded random workloads.

Every scenario uses block size 4 and derives its per-step token map by hand. Notation:
a row (id, phase, tokens, emits); "rows r->s" means the request's resident rows go from
r to s, which needs ceil(s/4) blocks; out k is the k-th output token.
"""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from conftest import req, simulate, trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.records.options import Options
from scheduler_sim.io.trace import parse_trace

B = 4
TERMINAL_EVENTS = ("finished", "rejected", "cancelled", "timeout", "stalled")


def run(records: list[dict], **options):
    """Replay under `vllm` with block size 4 (the engine audits every boundary)."""
    return simulate(records, policy="vllm", block_size=B, **options)


def fields(s, kind: str, *names: str) -> list[tuple]:
    """(tick, field...) of every event of one kind, in order."""
    return [(e["tick"], *(e.get(n) for n in names)) for e in s.of(kind)]


# --- admission and the long-prefill threshold ------------------------------------------


def test_all_requests_are_admitted_in_arrival_order():
    """File order c(arrival 1), a(0), b(0), each P=4 N=2, 8 blocks, budget 16: at t0 a then
    b are admitted (arrival, then file order) and prefill 4 each (out 1); at t1 a and b
    decode (out 2) and c, arrived at 1, is admitted with its 4-token prefill; a and b
    finish at 2; c decodes at 2 and finishes at 3. Nothing is reserved (on demand)."""
    s = run([req("c", 1, 4, 2), req("a", 0, 4, 2), req("b", 0, 4, 2)],
            num_blocks=8, token_budget=16)
    assert fields(s, "admitted", "id", "reserved", "resumed") == [
        (0, "a", 0, False), (0, "b", 0, False), (1, "c", 0, False)]
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, True), ("b", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True), ("b", "decode", 1, True), ("c", "prefill", 4, True)]),
        (2, [("c", "decode", 1, True)]),
    ]
    assert [(r, s.req[r].finished_at) for r in "abc"] == [("a", 2), ("b", 2), ("c", 3)]
    assert s.summary["peak_reserved"] == 0


def test_concurrent_prefills_are_chunked_by_the_long_prefill_threshold():
    """a, b: P=10 N=1, budget 16, prefill_chunk 4. Two requests wait at t0, so each chunk
    is min(10, 4, budget left): a 4, b 4 (8 of 16 used). t1: 4 + 4 (rows 4->8). t2: the
    last 2 each, which emit out 1; both finish at 3."""
    s = run([req("a", 0, 10, 1), req("b", 0, 10, 1)],
            num_blocks=16, token_budget=16, prefill_chunk=4)
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, False), ("b", "prefill", 4, False)]),
        (1, [("a", "prefill", 4, False), ("b", "prefill", 4, False)]),
        (2, [("a", "prefill", 2, True), ("b", "prefill", 2, True)]),
    ]
    assert (s.req["a"].finished_at, s.req["b"].finished_at) == (3, 3)


def test_the_threshold_does_not_apply_to_a_lone_request():
    """a: P=20 N=1 at 0, b: P=4 N=1 at 1, budget 8, prefill_chunk 4. t0: a alone takes the
    whole budget, 8. t1: a runs and b waits (2 requests), so the threshold applies: a 4
    (rows 8->12), b admitted with 4 (out 1). t2: b has finished, a is alone again: 8
    (rows 12->20, out 1)."""
    s = run([req("a", 0, 20, 1), req("b", 1, 4, 1)],
            num_blocks=16, token_budget=8, prefill_chunk=4)
    assert s.dispatches() == [
        (0, [("a", "prefill", 8, False)]),
        (1, [("a", "prefill", 4, False), ("b", "prefill", 4, True)]),
        (2, [("a", "prefill", 8, True)]),
    ]
    assert (s.req["a"].finished_at, s.req["b"].finished_at) == (3, 2)


def test_the_waiting_loop_stops_when_the_budget_is_used_up():
    """a, b, c: P=4 N=1, budget 6 (prefill_chunk defaults to 6). t0: a 4 (budget 2 left),
    b admitted with a 2-token chunk (budget 0), c blocked with reason token_budget
    (needed 1 block, free 16-2=14). t1: a finished; b 2 (out 1), c admitted with 4."""
    s = run([req("a", 0, 4, 1), req("b", 0, 4, 1), req("c", 0, 4, 1)],
            num_blocks=16, token_budget=6)
    assert fields(s, "admission_blocked", "id", "reason", "needed", "free") == [
        (0, "c", "token_budget", 1, 14)]
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, True), ("b", "prefill", 2, False)]),
        (1, [("b", "prefill", 2, True), ("c", "prefill", 4, True)]),
    ]
    assert fields(s, "admitted", "id") == [(0, "a"), (0, "b"), (1, "c")]


def test_the_full_sequence_gate_needs_blocks_for_the_whole_prompt():
    """3 blocks, budget 8, prefill_chunk 4. a: P=7 N=2 alone at 0 prefills 7 (2 blocks).
    t1: b (P=8 N=1) arrives; a decodes (rows 7->8, no new block); b's first chunk would
    be min(8, 4, 7) = 4 rows (1 block, 1 free), but the gate asks for ceil(8/4) = 2
    blocks: blocked (blocks, needed 2, free 1). t2: a finished; b alone prefills 8.
    With full_prompt_gate off, b is admitted at 1 with its 4-row chunk instead."""
    records = [req("a", 0, 7, 2), req("b", 1, 8, 1)]
    s = run(records, num_blocks=3, token_budget=8, prefill_chunk=4)
    assert fields(s, "admission_blocked", "id", "reason", "needed", "free") == [
        (1, "b", "blocks", 2, 1)]
    assert s.dispatches() == [
        (0, [("a", "prefill", 7, True)]),
        (1, [("a", "decode", 1, True)]),
        (2, [("b", "prefill", 8, True)]),
    ]
    off = run(records, num_blocks=3, token_budget=8, prefill_chunk=4, full_prompt_gate=False)
    assert off.of("admission_blocked") == []
    assert off.dispatches() == [
        (0, [("a", "prefill", 7, True)]),
        (1, [("a", "decode", 1, True), ("b", "prefill", 4, False)]),
        (2, [("b", "prefill", 4, True)]),
    ]


def test_max_rows_caps_the_running_set():
    """a, b, c: P=4 N=2, max_rows 2, 8 blocks. t0: a, b admitted; c blocked (max_rows),
    again at t1 while a and b decode; at t2 they have finished and c is admitted."""
    s = run([req("a", 0, 4, 2), req("b", 0, 4, 2), req("c", 0, 4, 2)],
            num_blocks=8, token_budget=16, max_rows=2)
    assert fields(s, "admission_blocked", "id", "reason") == [
        (0, "c", "max_rows"), (1, "c", "max_rows")]
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, True), ("b", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (2, [("c", "prefill", 4, True)]),
        (3, [("c", "decode", 1, True)]),
    ]
    assert max(e["running"] for e in s.of("snapshot")) == 2


# --- preemption under FCFS ---------------------------------------------------------------


def test_fcfs_victim_is_the_last_admitted_running_request():
    """3 blocks; a P=4 N=3, b P=2 N=3, c P=4 N=3, admitted in that order, 1 block each.
    t1: a needs a 2nd block (rows 4->5), none free: the victim is c (last admitted, not
    the trigger a, not b); a gets c's block; b (rows 2->3) needs none. c is blocked
    (preemption). t2: c needs ceil((4+1)/4)=2 blocks, 0 free (blocks). t3: a, b finished;
    c recomputes P+k = 5 rows and emits out 2; t4 decode (out 3)."""
    s = run([req("a", 0, 4, 3), req("b", 0, 2, 3), req("c", 0, 4, 3)],
            num_blocks=3, token_budget=16)
    assert [{k: e[k] for k in ("tick", "id", "outputs", "rows", "blocks_freed", "reason",
                               "rule", "trigger")} for e in s.of("preempted")] == [
        {"tick": 1, "id": "c", "outputs": 1, "rows": 4, "blocks_freed": 1,
         "reason": "out_of_blocks", "rule": "lifo", "trigger": "a"}]
    assert fields(s, "admission_blocked", "id", "reason", "needed") == [
        (1, "c", "preemption", 2), (2, "c", "blocks", 2)]
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, True), ("b", "prefill", 2, True), ("c", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (2, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (3, [("c", "recompute", 5, True)]),
        (4, [("c", "decode", 1, True)]),
    ]
    c = s.req["c"]
    assert (c.preemptions, c.useful_rows, c.replay_rows, c.finished_at) == (1, 6, 4, 5)


def test_several_victims_in_one_step_and_the_last_preempted_waits_first():
    """4 blocks; a, b, c, d: P=4 N=3, 1 block each after t0. t1: a needs a block: victim d
    (last); b needs one: victim c (now last). The queue is then [c, d]: c, preempted
    last, is at the front (it is the blocked head at t1 and t2). t3: a, b finished; c
    then d are admitted and recompute 5 rows each (out 2); t4 both decode (out 3)."""
    s = run([req(r, 0, 4, 3) for r in "abcd"], num_blocks=4, token_budget=16)
    assert fields(s, "preempted", "id", "trigger", "blocks_freed") == [
        (1, "d", "a", 1), (1, "c", "b", 1)]
    assert fields(s, "admission_blocked", "id", "reason") == [
        (1, "c", "preemption"), (2, "c", "blocks")]
    assert fields(s, "admitted", "id", "resumed")[4:] == [(3, "c", True), (3, "d", True)]
    assert s.dispatches() == [
        (0, [(r, "prefill", 4, True) for r in "abcd"]),
        (1, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (2, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (3, [("c", "recompute", 5, True), ("d", "recompute", 5, True)]),
        (4, [("c", "decode", 1, True), ("d", "decode", 1, True)]),
    ]


def test_no_admission_on_a_preemption_step_and_head_of_line_blocking_behind_a_victim():
    """3 blocks; a P=4 N=6 (9 rows, 3 blocks), b P=4 N=3, c P=1 N=1 arrives at 1. t0: a, b
    prefill (1 block each). t1: a takes the last block; b needs one: victim b itself
    (last admitted), not scheduled; no admission (head b, reason preemption, needed
    ceil(5/4)=2, free 1). t2-t5: b needs 2 blocks but 1 is free (0 at t5, after a takes
    its 3rd block for rows 8->9), and c, which needs 1 block and would fit at t2-t4,
    waits behind it. t6: a finished; b recomputes 5 (out 2) and c prefills 1 (out 1)."""
    s = run([req("a", 0, 4, 6), req("b", 0, 4, 3), req("c", 1, 1, 1)],
            num_blocks=3, token_budget=16)
    assert fields(s, "preempted", "id", "trigger") == [(1, "b", "b")]
    assert fields(s, "admission_blocked", "id", "reason", "needed", "free") == [
        (1, "b", "preemption", 2, 1), (2, "b", "blocks", 2, 1), (3, "b", "blocks", 2, 1),
        (4, "b", "blocks", 2, 1), (5, "b", "blocks", 2, 0)]
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, True), ("b", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True)]),
        (2, [("a", "decode", 1, True)]),
        (3, [("a", "decode", 1, True)]),
        (4, [("a", "decode", 1, True)]),
        (5, [("a", "decode", 1, True)]),
        (6, [("b", "recompute", 5, True), ("c", "prefill", 1, True)]),
        (7, [("b", "decode", 1, True)]),
    ]
    assert fields(s, "admitted", "id")[2:] == [(6, "b"), (6, "c")]


# --- the watermark -------------------------------------------------------------------------


def test_watermark_applies_to_admissions_while_something_runs_never_to_growth():
    """4 blocks, watermark 0.5 -> int(0.5*4) = 2 blocks. a P=12 N=5 (16 rows, 4 blocks):
    nothing runs, so no watermark: 3 blocks <= 4 free, admitted (3 + 2 > 4 would have
    blocked it). b P=1 N=1 needs 1 block, free 1, but a now runs: 1 + 2 > 1, blocked with
    reason watermark. t1: a's decode (rows 12->13) takes the last block, below the
    watermark; b is blocked by blocks (free 0) until a finishes at 5; b runs at 5."""
    s = run([req("a", 0, 12, 5), req("b", 0, 1, 1)],
            num_blocks=4, token_budget=16, watermark=0.5)
    assert fields(s, "admission_blocked", "id", "reason", "needed", "free") == [
        (0, "b", "watermark", 1, 1)] + [(t, "b", "blocks", 1, 0) for t in range(1, 5)]
    assert s.dispatches() == [
        (0, [("a", "prefill", 12, True)]),
        (1, [("a", "decode", 1, True)]),
        (2, [("a", "decode", 1, True)]),
        (3, [("a", "decode", 1, True)]),
        (4, [("a", "decode", 1, True)]),
        (5, [("b", "prefill", 1, True)]),
    ]
    assert s.summary["preemptions"] == 0
    assert s.summary["peak_allocated"] == 4


# --- preemption under the priority order -----------------------------------------------------


def test_priority_victim_already_scheduled_gives_its_tokens_back():
    """order priority, 4 blocks, budget 6. b (prio 5) alone at 0: prefill 3 (out 1). t1:
    a (prio 0, P=4 N=2) and c (prio 1, P=6 N=1) arrive; b decodes (rows 3->4), a is
    admitted with 4 (out 1), c with min(6, 6, 1) = 1; 3 blocks held, 1 free. t2: b
    decodes first (rows 4->5, takes the last block; budget 5); a needs a block (rows
    4->5): victim max (priority, arrival) = b, already scheduled: its token returns
    (budget 6) and its 2 blocks are freed; a takes one (budget 5); c then gets
    min(5, 6, 5) = 5 (rows 1->6, 1 new block) and emits out 1, which it could not do
    with the 4 left had b kept its token. t3: a, c finished; b recomputes P+k = 3+2 =
    5 rows (out 3); t4: out 4."""
    s = run([req("b", 0, 3, 4, priority=5), req("a", 1, 4, 2, priority=0),
             req("c", 1, 6, 1, priority=1)],
            num_blocks=4, token_budget=6, order="priority")
    assert [{k: e[k] for k in ("tick", "id", "outputs", "rows", "blocks_freed", "rule",
                               "trigger")} for e in s.of("preempted")] == [
        {"tick": 2, "id": "b", "outputs": 2, "rows": 4, "blocks_freed": 2,
         "rule": "priority", "trigger": "a"}]
    assert fields(s, "admission_blocked", "id", "reason") == [(2, "b", "preemption")]
    assert s.dispatches() == [
        (0, [("b", "prefill", 3, True)]),
        (1, [("b", "decode", 1, True), ("a", "prefill", 4, True), ("c", "prefill", 1, False)]),
        (2, [("a", "decode", 1, True), ("c", "prefill", 5, True)]),
        (3, [("b", "recompute", 5, True)]),
        (4, [("b", "decode", 1, True)]),
    ]
    assert [(r, s.req[r].finished_at) for r in "abc"] == [("a", 3), ("b", 5), ("c", 3)]


def test_priority_tie_the_request_preempts_itself_and_the_next_is_still_scheduled():
    """order priority, 2 blocks; x, y: prio 1, arrival 0, P=4 N=3; z: prio 1 at 2, P=4
    N=1. t1: x needs a 2nd block, none free; x and y tie on (1, 0), so the victim is the
    earliest in the running list: x itself, not scheduled; y, after it, now fits
    (rows 4->5 on x's freed block) and decodes. x re-enters the heap with its key
    (1, 0), ahead of z (1, 2): at t3 x is admitted (recompute 5, out 2) while z waits
    (1 block, 0 free) until 5."""
    s = run([req("x", 0, 4, 3, priority=1), req("y", 0, 4, 3, priority=1),
             req("z", 2, 4, 1, priority=1)],
            num_blocks=2, token_budget=16, order="priority")
    assert fields(s, "preempted", "id", "rule", "trigger") == [(1, "x", "priority", "x")]
    assert s.dispatches() == [
        (0, [("x", "prefill", 4, True), ("y", "prefill", 4, True)]),
        (1, [("y", "decode", 1, True)]),
        (2, [("y", "decode", 1, True)]),
        (3, [("x", "recompute", 5, True)]),
        (4, [("x", "decode", 1, True)]),
        (5, [("z", "prefill", 4, True)]),
    ]
    assert fields(s, "admission_blocked", "id", "reason") == [
        (1, "x", "preemption"), (2, "x", "blocks"), (3, "z", "blocks"), (4, "z", "blocks")]


def test_a_waiting_request_of_higher_priority_never_preempts_a_running_one():
    """order priority, 2 blocks. a (prio 5, P=4 N=5, 8 rows = 2 blocks) runs from 0; b
    (prio 0, P=4 N=1) arrives at 1 and needs 1 block, but a takes the last one at t1
    (rows 4->5). b is blocked (blocks) at 1-4; nothing is preempted; b runs at 5."""
    s = run([req("a", 0, 4, 5, priority=5), req("b", 1, 4, 1, priority=0)],
            num_blocks=2, token_budget=16, order="priority")
    assert s.of("preempted") == []
    assert fields(s, "admission_blocked", "id", "reason") == [
        (t, "b", "blocks") for t in range(1, 5)]
    assert s.dispatches() == [(0, [("a", "prefill", 4, True)])] + [
        (t, [("a", "decode", 1, True)]) for t in range(1, 5)] + [
        (5, [("b", "prefill", 4, True)])]


# --- recompute -------------------------------------------------------------------------------


def test_folded_recompute_emits_only_at_the_end_of_the_recompute_pass():
    """a: P=6 N=4 alone, budget 4, forced preemption at 3. t0: prefill 4; t1: 2 (out 1);
    t2: decode (out 2), 7 rows written. At 3 it is preempted (outputs 2, rows 7) and
    resumes at once: the recompute covers P+k = 8 rows (the pending token included) in
    chunks of 4: t3 4 rows, no output; t4 4 rows, emits out 3; t5 decode (out 4).
    Useful rows stay P+N-1 = 9; rows 0-6 were rewritten: replay_rows 7."""
    s = run([req("a", 0, 6, 4), {"type": "preempt", "id": "a", "at": 3}],
            num_blocks=4, token_budget=4)
    assert fields(s, "preempted", "id", "outputs", "rows", "reason") == [
        (3, "a", 2, 7, "manual")]
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, False)]),
        (1, [("a", "prefill", 2, True)]),
        (2, [("a", "decode", 1, True)]),
        (3, [("a", "recompute", 4, False)]),
        (4, [("a", "recompute", 4, True)]),
        (5, [("a", "decode", 1, True)]),
    ]
    a = s.req["a"]
    assert (a.outputs, a.useful_rows, a.replay_rows, a.first_token_at, a.finished_at) == (
        4, 9, 7, 2, 6)
    assert s.summary["recompute_tokens"] == 8


# --- E6 ----------------------------------------------------------------------------------------


def test_e6_rejects_by_p_plus_n_minus_1_on_demand_and_p_plus_m_minus_1_under_reservation():
    """2 blocks. a: P=4 N=5 M=8: vllm needs ceil((4+5-1)/4) = 2 <= 2 and runs it (stopped,
    N < M); continuous reserves ceil((4+8-1)/4) = 3 > 2 and rejects it. b: P=4 N=6 needs
    ceil(9/4) = 3 > 2 under both."""
    records = [req("a", 0, 4, 5, max_tokens=8), req("b", 0, 4, 6)]
    s = run(records, num_blocks=2, token_budget=16)
    assert fields(s, "rejected", "id", "needed", "capacity") == [(0, "b", 3, 2)]
    assert s.req["a"].status.label == "finished_stopped"
    assert (s.req["a"].finished_at, s.req["a"].outputs) == (5, 5)
    c = simulate(records, policy="continuous", block_size=B, num_blocks=2, token_budget=16)
    assert fields(c, "rejected", "id", "needed", "capacity") == [(0, "a", 3, 2), (0, "b", 3, 2)]


# --- prefix caching ------------------------------------------------------------------------------


def test_prefix_cache_hit_for_a_second_request_with_the_same_prompt():
    """Prompt ids 100..109 (P=10) for a (at 0) and b (at 1), N=2, 8 blocks. a's prefill
    fills blocks 0 and 1 (keyed) and 2 rows of block 2. b reuses at most (10-1)//4 = 2
    leading blocks, both held by a: cached_tokens 8, so it prefills only rows 8-9 (2
    tokens, out 1). The shared blocks count once: before t1's dispatch, allocated is
    a's 3 blocks. Prompt tokens computed: 10 + 2 = 12; b's useful rows are still 11."""
    ids = list(range(100, 110))
    s = run([req("a", 0, 10, 2, prompt_token_ids=ids), req("b", 1, 10, 2, prompt_token_ids=ids)],
            num_blocks=8, token_budget=16, prefix_caching=True)
    assert fields(s, "admitted", "id", "cached_tokens") == [(0, "a", 0), (1, "b", 8)]
    assert s.dispatches() == [
        (0, [("a", "prefill", 10, True)]),
        (1, [("a", "decode", 1, True), ("b", "prefill", 2, True)]),
        (2, [("b", "decode", 1, True)]),
    ]
    snap = s.at(1, "snapshot")[0]
    assert (snap["allocated"], snap["free"], snap["cached"]) == (3, 5, 0)
    assert s.summary["prompt_tokens"] == 12
    assert (s.req["b"].cached_tokens, s.req["b"].useful_rows) == (8, 11)


def test_prefix_cache_hit_always_leaves_the_last_prompt_token_to_compute():
    """Prompt ids 1..8 (P=8, two full blocks) for a (at 0, N=2) and b (at 1, N=1): b may
    reuse at most (8-1)//4 = 1 block, so cached_tokens is 4 and it prefills rows 4-7
    (4 tokens), whose last one emits out 1, although both of a's blocks are cached."""
    ids = list(range(1, 9))
    s = run([req("a", 0, 8, 2, prompt_token_ids=ids), req("b", 1, 8, 1, prompt_token_ids=ids)],
            num_blocks=8, token_budget=16, prefix_caching=True)
    assert fields(s, "admitted", "id", "cached_tokens") == [(0, "a", 0), (1, "b", 4)]
    assert s.dispatches() == [
        (0, [("a", "prefill", 8, True)]),
        (1, [("a", "decode", 1, True), ("b", "prefill", 4, True)]),
    ]
    assert s.req["b"].useful_rows == 8


def test_prefix_cache_after_preemption_recomputes_only_the_evicted_blocks():
    """4 blocks, no token ids (keys unique to each request). b P=4 N=6 (block 0), a P=8
    N=2 (blocks 1, 2, keyed). t1: b takes plain block 3 (rows 4->5); a needs a block:
    victim a itself; its blocks are freed tail first: LRU [2, 1]. t1-t5: a's gate needs
    ceil(9/4) = 3 blocks - 2 hits + 2 hits taken from the free LRU = 3 > 2 free (1 at
    t5): blocked. t5: b's rows 8->9 need a block: no plain one is left, so the LRU head,
    a's tail block 2, is evicted.
    t6: b finished; a finds key 0 (block 1) but not key 1: cached_tokens 4, and recomputes
    rows 4-8 (5 tokens: the evicted block and the pending token, out 2). Rows 4-7 were
    written before: replay_rows 4 (8 without the cache)."""
    records = [req("b", 0, 4, 6), req("a", 0, 8, 2)]
    s = run(records, num_blocks=4, token_budget=16, prefix_caching=True)
    assert fields(s, "preempted", "id", "outputs", "rows", "blocks_freed") == [(1, "a", 1, 8, 2)]
    assert fields(s, "admission_blocked", "reason", "needed", "free") == [
        (1, "preemption", 3, 2), (2, "blocks", 3, 2), (3, "blocks", 3, 2), (4, "blocks", 3, 2),
        (5, "blocks", 3, 1)]
    assert [e["cached"] for e in s.of("snapshot")] == [0, 2, 2, 2, 2, 2, 2]
    assert fields(s, "admitted", "id", "resumed", "cached_tokens")[2:] == [(6, "a", True, 4)]
    assert s.dispatches() == [
        (0, [("b", "prefill", 4, True), ("a", "prefill", 8, True)]),
        (1, [("b", "decode", 1, True)]),
        (2, [("b", "decode", 1, True)]),
        (3, [("b", "decode", 1, True)]),
        (4, [("b", "decode", 1, True)]),
        (5, [("b", "decode", 1, True)]),
        (6, [("a", "recompute", 5, True)]),
    ]
    a = s.req["a"]
    assert (a.useful_rows, a.replay_rows, a.cached_tokens) == (9, 4, 4)
    cold = run(records, num_blocks=4, token_budget=16)
    assert cold.dispatches()[-1] == (6, [("a", "recompute", 9, True)])
    assert (cold.req["a"].useful_rows, cold.req["a"].replay_rows) == (9, 8)


def test_prefix_cache_after_preemption_with_nothing_evicted_recomputes_the_pending_token():
    """3 blocks, a P=8 N=3 alone. t0: prefill 8 (blocks 0, 1 keyed, out 1); t1: decode
    (rows 8->9, plain block 2, out 2); forced preemption at 2. a finds at most
    (8+2-1)//4 = 2 blocks, both in the LRU: cached_tokens 8, and recomputes rows 8-9
    (2 tokens, out 3). Only row 8 is rewritten: replay_rows 1, useful rows 10."""
    s = run([req("a", 0, 8, 3), {"type": "preempt", "id": "a", "at": 2}],
            num_blocks=3, token_budget=16, prefix_caching=True)
    assert fields(s, "admitted", "id", "cached_tokens") == [(0, "a", 0), (2, "a", 8)]
    assert s.dispatches() == [
        (0, [("a", "prefill", 8, True)]),
        (1, [("a", "decode", 1, True)]),
        (2, [("a", "recompute", 2, True)]),
    ]
    a = s.req["a"]
    assert (a.useful_rows, a.replay_rows, a.finished_at) == (10, 1, 3)


# --- victim rules and max_preemptions -------------------------------------------------------


VICTIM_TRACE = [req("x", 0, 8, 4), req("y", 1, 4, 3), req("z", 1, 3, 3)]


@pytest.mark.parametrize("victim, preempted, step2", [
    ("lifo", ("z", 1, 3, 1), [("x", "decode", 1, True), ("y", "decode", 1, True)]),
    ("fewest-outputs", ("y", 1, 4, 1), [("x", "decode", 1, True), ("z", "decode", 1, True)]),
    ("most-blocks", ("x", 2, 9, 3), [("y", "decode", 1, True), ("z", "decode", 1, True)]),
    ("most-reclaimable", ("x", 2, 9, 3), [("y", "decode", 1, True), ("z", "decode", 1, True)]),
])
def test_victim_rules_pick_different_victims_for_the_same_shortage(victim, preempted, step2):
    """5 blocks. t0: x P=8 N=4 alone (2 blocks, out 1). t1: x decodes (rows 8->9, 3rd
    block); y P=4 and z P=3 are admitted and prefill (1 block each, out 1): 0 free. t2:
    x decodes (rows 9->10, no block); y needs a block (rows 4->5), none free. lifo: z
    (last admitted; 1 output, 3 rows, 1 block). fewest-outputs: y and z have 1 output, x
    2; the longer prompt is y's (4 > 3): y itself, not scheduled, and z still decodes.
    most-blocks: x (3 blocks), already scheduled: its token goes back, y takes a block.
    most-reclaimable: no block is shared or pinned, so x's 3 blocks all free: x too."""
    s = run(VICTIM_TRACE, num_blocks=5, token_budget=16, victim=victim)
    assert fields(s, "preempted", "id", "outputs", "rows", "blocks_freed", "rule",
                  "trigger") == [(2, *preempted, victim, "y")]
    d = s.dispatches()
    assert d[:2] == [
        (0, [("x", "prefill", 8, True)]),
        (1, [("x", "decode", 1, True), ("y", "prefill", 4, True), ("z", "prefill", 3, True)]),
    ]
    assert d[2] == (2, step2)
    assert all(r.status.label == "finished_length_capped" for r in s.result.requests)


def test_max_preemptions_protects_a_request_preempted_that_often():
    """3 blocks, max_preemptions 1; a P=3 N=2, b P=2 N=4, c P=4 N=4, 1 block each at t0.
    t1: c needs a block: victim c itself (1st preemption). t2: a finished; c resumes
    (recompute 4+1 = 5 rows, 2 blocks, out 2). t3: b needs a block (rows 4->5), none
    free: the last admitted, c, has been preempted once and is protected, so the victim
    is b itself and c still decodes. Without the cap, c is preempted again and b runs."""
    records = [req("a", 0, 3, 2), req("b", 0, 2, 4), req("c", 0, 4, 4)]
    s = run(records, num_blocks=3, token_budget=16, max_preemptions=1)
    assert fields(s, "preempted", "id", "trigger") == [(1, "c", "c"), (3, "b", "b")]
    assert s.dispatches() == [
        (0, [("a", "prefill", 3, True), ("b", "prefill", 2, True), ("c", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (2, [("b", "decode", 1, True), ("c", "recompute", 5, True)]),
        (3, [("c", "decode", 1, True)]),
        (4, [("c", "decode", 1, True)]),
        (5, [("b", "recompute", 5, True)]),
    ]
    assert (s.req["b"].preemptions, s.req["c"].preemptions) == (1, 1)
    free = run(records, num_blocks=3, token_budget=16)
    assert fields(free, "preempted", "id", "trigger") == [(1, "c", "c"), (3, "c", "b")]
    assert free.dispatches()[3] == (3, [("b", "decode", 1, True)])
    assert free.req["c"].preemptions == 2


# --- termination with a release delay -----------------------------------------------------


def test_a_finite_trace_terminates_with_a_release_delay():
    """4 blocks, release_delay 1, budget 8, prefill_chunk 4; x P=12 N=2 (13 rows, 4
    blocks), y P=8 N=2 (9 rows, 3 blocks). Each fits the pool alone (E6), so a schedule
    that serves them one after the other exists; the replay must end with both finished
    (§11: every request ends exactly once), not loop or stall. A runaway replay is
    cut off after 2000 events (a serial schedule needs under 20 dispatches)."""
    records = [req("x", 0, 12, 2), req("y", 0, 8, 2)]
    trace = parse_trace(trace_bytes([dict(r, type="request") for r in records]), "t.jsonl")
    opts = Options.resolve(trace.config, {"block_size": B, "num_blocks": 4, "token_budget": 8,
                                          "prefill_chunk": 4, "release_delay": 1})
    events: list[dict] = []

    class Runaway(Exception):
        pass

    def on_event(e):
        events.append(e.to_dict())
        if len(events) > 2000:
            raise Runaway

    try:
        result = Engine(trace.workload, opts, "vllm", on_event=on_event, audit=True).run()
    except Runaway:
        result = None
    preempted = sum(1 for e in events if e["event"] == "preempted")
    assert result is not None, f"no end after 2000 events ({preempted} preemptions)"
    assert not result.stalled
    ends = Counter(e["id"] for e in events if e["event"] in TERMINAL_EVENTS)
    assert ends == Counter({"x": 1, "y": 1})
    done = {r.rid: (r.status.label, r.outputs, r.useful_rows) for r in result.requests}
    assert done == {"x": ("finished_length_capped", 2, 13), "y": ("finished_length_capped", 2, 9)}


# --- seeded random workloads --------------------------------------------------------------------


SEEDS = range(30)


def random_workload(seed: int) -> tuple[list[dict], dict]:
    """(records, options) of one seeded workload: 2-12 requests, small pools (3-10 blocks)
    so that preemption happens, random budget, watermark, prefill_chunk, max_rows,
    release_delay (half the seeds 0), priorities and a few cancellations; 60% of prompts
    carry token ids drawn from two shared prefixes (prefix-cache hits)."""
    rng = random.Random(seed)
    options = {"num_blocks": rng.randint(3, 10), "token_budget": rng.randint(4, 24),
               "max_rows": rng.randint(1, 5), "watermark": rng.choice([0.0, 0.1, 0.25, 0.4]),
               "release_delay": rng.choice([0, 0, 1, 2])}
    if rng.random() < 0.7:
        options["prefill_chunk"] = rng.randint(1, 8)
    bases = [[rng.randint(1, 50) for _ in range(12)] for _ in range(2)]
    records: list[dict] = []
    for i in range(rng.randint(2, 12)):
        prompt = rng.randint(1, 14)
        record = {"type": "request", "id": f"r{i}", "arrival": rng.randint(0, 10),
                  "output_tokens": rng.randint(1, 10), "priority": rng.randint(0, 3)}
        if rng.random() < 0.6:
            shared = min(prompt, rng.randint(0, 12))
            record["prompt_token_ids"] = (rng.choice(bases)[:shared]
                                          + [rng.randint(1, 50) for _ in range(prompt - shared)])
        else:
            record["prompt_tokens"] = prompt
        records.append(record)
        if rng.random() < 0.1:
            records.append({"type": "cancel", "id": record["id"],
                            "at": record["arrival"] + rng.randint(0, 8)})
    return records, options


def replay_bounded(records: list[dict], options: dict) -> tuple[object, list[str]]:
    """Replay under vllm with the audit on; fail (not hang) after 20000 events."""
    trace = parse_trace(trace_bytes(records), "random.jsonl")
    opts = Options.resolve(trace.config, dict(options, block_size=B))
    lines: list[str] = []

    def on_event(e):
        lines.append(e.to_json())
        assert len(lines) <= 20000, "replay did not end after 20000 events"

    result = Engine(trace.workload, opts, "vllm", on_event=on_event, audit=True).run()
    return result, lines


@pytest.mark.parametrize("prefix_caching, order", [  # 30 replays each; two in the slow tier
    (False, "fcfs"), (True, "priority"), pytest.param(False, "priority", marks=pytest.mark.slow),
    pytest.param(True, "fcfs", marks=pytest.mark.slow)])
def test_random_workloads_conserve_blocks_and_end_every_request_once(prefix_caching, order):
    """30 seeds: the full audit passes at every boundary (A3, run by the engine); each
    request ends exactly once; admissions reserve nothing; the running set stays within
    max_rows; a completed request wrote P+N-1 useful rows and had exactly N emitting
    rows (every request: emitting rows == outputs); two replays are byte-identical."""
    preemptions = 0
    for seed in SEEDS:
        records, options = random_workload(seed)
        options = dict(options, prefix_caching=prefix_caching, order=order)
        where = f"seed {seed} {options}"
        result, lines = replay_bounded(records, options)
        events = [json.loads(line) for line in lines]
        specs = {r["id"]: r for r in records if r["type"] == "request"}

        ends = Counter(e["id"] for e in events if e["event"] in TERMINAL_EVENTS)
        assert ends == Counter({rid: 1 for rid in specs}), where
        assert not result.stalled, where
        assert all(e["reserved"] == 0 for e in events if e["event"] == "admitted"), where
        for e in events:
            if e["event"] == "snapshot":
                assert e["running"] <= options["max_rows"], (where, e)
                assert e["allocated"] + e["draining"] + e["free"] == options["num_blocks"]
                assert ("cached" in e) == prefix_caching, (where, e)

        emitting = Counter(row["id"] for e in events if e["event"] == "dispatch"
                           for row in e["rows"] if row["emits"])
        for r in result.requests:
            spec = specs[r.rid]
            prompt = len(spec.get("prompt_token_ids", ())) or spec.get("prompt_tokens")
            assert emitting[r.rid] == r.outputs, (where, r)
            if r.status.label in ("finished_length_capped", "finished_stopped"):
                n = spec["output_tokens"]
                assert (r.outputs, emitting[r.rid]) == (n, n), (where, r)
                assert r.useful_rows == prompt + n - 1, (where, r)
        preemptions += result.summary["preemptions"]

        again, lines2 = replay_bounded(records, options)
        assert lines2 == lines, where
        assert again.summary == result.summary, where
    assert preemptions > 0  # the pools are small enough for preemption to happen


def test_a_prefill_cut_short_resumes_as_recompute_then_prefill():
    """a (P=4 N=6) and b (P=12 N=1), 4 blocks, budget 8, chunk 4. b prefills 4 + 4 rows at
    0 and 1, cannot get a block at 2 and preempts itself with 8 rows written, no output.
    On resume (tick 6) the rewritten rows 0-7 are `recompute`, rows 8-11 never written
    before are `prefill` (their own chunk, emitting output 1): 16 prompt and 8 recompute
    tokens over the run."""
    s = run([req("a", 0, 4, 6), req("b", 0, 12, 1)], num_blocks=4, token_budget=8,
            prefill_chunk=4)
    b_rows = [(t, rows) for t, rows in s.dispatches() if any(r[0] == "b" for r in rows)]
    assert b_rows[2:] == [(6, [("b", "recompute", 8, False)]), (7, [("b", "prefill", 4, True)])]
    assert (s.summary["prompt_tokens"], s.summary["recompute_tokens"]) == (16, 8)


def test_a_resumed_request_with_no_hit_caches_the_blocks_it_rewrites():
    """3 blocks, prefix caching, priority order. a (P=8 N=3, priority 1) prefills 2 full
    blocks; preempted at 1, its cached blocks are evicted by b (P=12, priority 0). At 2 a
    resumes with no hit and rewrites 9 rows: its 2 full blocks get keys again. Preempted
    again at 3, it resumes at once with both blocks found: cached_tokens 8, and the folded
    recompute writes only rows 8-9 (2 tokens)."""
    s = run([req("a", 0, 8, 3, priority=1), req("b", 1, 12, 1, priority=0),
             {"type": "preempt", "id": "a", "at": 1}, {"type": "preempt", "id": "a", "at": 3}],
            order="priority", prefix_caching=True, num_blocks=3)
    admitted = [(e["tick"], e["cached_tokens"]) for e in s.of("admitted") if e["id"] == "a"]
    assert admitted == [(0, 0), (2, 0), (3, 8)]
    assert s.dispatches()[-1] == (3, [("a", "recompute", 2, True)])


# --- blocks keyed when allocated (prefix caching) -----------------------------------------


def test_a_request_admitted_in_the_same_step_hits_the_blocks_just_allocated():
    """B=4, prefix caching. a (ids 1..6) and b (ids 1,2,3,4,7,8,9) arrive at 0. a is
    scheduled first, 6 tokens; its first block (ids 1..4) is full once allocated, and vLLM
    keys it then. b, admitted later in the same step, hits it: 4 cached tokens, and it
    computes only 7 - 4 = 3 (as vLLM 0.33 does; keying at the dispatch would make it 7)."""
    s = simulate([req("a", 0, 6, 2, prompt_token_ids=[1, 2, 3, 4, 5, 6]),
                  req("b", 0, 7, 2, prompt_token_ids=[1, 2, 3, 4, 7, 8, 9])],
                 policy="vllm", block_size=4, num_blocks=16, token_budget=64, max_rows=4,
                 prefix_caching=True)
    assert [(e["id"], e["cached_tokens"]) for e in s.at(0, "admitted")] == [("a", 0), ("b", 4)]
    assert s.dispatches()[0] == (0, [("a", "prefill", 6, True), ("b", "prefill", 3, True)])
    assert s.summary["iterations"] == 2


def test_a_running_chunk_that_completes_a_block_is_a_hit_in_its_own_step():
    """B=4, budget 6, prefix caching. a (ids 1..8) alone at 0 takes 6 tokens (no chunk
    cap alone). At 1, a's last 2 tokens complete its second block (ids 5..8), keyed when
    allocated; b (ids 1..10) is admitted after it in the same step and hits both blocks:
    8 cached tokens, computing 10 - 8 = 2 (with 4 of budget left). Keying at the dispatch
    would leave b one block (4 tokens) and a chunk of 4."""
    s = simulate([req("a", 0, 8, 2, prompt_token_ids=list(range(1, 9))),
                  req("b", 1, 10, 2, prompt_token_ids=list(range(1, 11)))],
                 policy="vllm", block_size=4, num_blocks=16, token_budget=6, max_rows=4,
                 prefix_caching=True)
    assert [(e["id"], e["cached_tokens"]) for e in s.at(1, "admitted")] == [("b", 8)]
    assert s.dispatches()[:2] == [(0, [("a", "prefill", 6, False)]),
                                  (1, [("a", "prefill", 2, True), ("b", "prefill", 2, True)])]


# --- prefill_interval (vLLM's prefill_schedule_interval) -------------------------------------


def test_prefill_waits_for_the_interval_while_something_decodes():
    """prefill_interval 3, B=4. a (P=4, N=8) at 0, b (P=4, N=4) at 1, c (P=6, N=3) at 2.
    Step 1 (tick 0) carries a's prefill. At tick 1 the step would be the 2nd executed and
    2 - 1 = 1 < 3 with a decoding: b waits (`prefill_interval`); at tick 2, 3 - 1 = 2 < 3:
    b and c wait; at tick 3, 4 - 1 = 3: both are admitted and prefilled beside a's decode."""
    s = simulate([req("a", 0, 4, 8), req("b", 1, 4, 4), req("c", 2, 6, 3)], policy="vllm",
                 block_size=4, num_blocks=40, token_budget=32, max_rows=8, prefill_interval=3)
    assert [(e["tick"], e["id"], e["reason"]) for e in s.of("admission_blocked")] == [
        (1, "b", "prefill_interval"), (2, "b", "prefill_interval")]
    assert [sorted(dict((r, t) for r, _, t, _ in rows).items()) for _, rows in
            s.dispatches()[:4]] == [[("a", 4)], [("a", 1)], [("a", 1)],
                                    [("a", 1), ("b", 4), ("c", 6)]]


def test_a_releasing_step_that_leaves_requests_waiting_lifts_the_hold():
    """prefill_interval 3, max_rows 2, B=4. a (P=4, N=10) at 0; b and c (P=6, N=2) at 1.
    Tick 0 prefills a (executed step 1 carries prefill); ticks 1 and 2 hold b and c;
    tick 3 (step 4) releases: b is admitted, c waits for a row (max_rows), so the
    releasing step left the queue non-empty: capacity-bound. b decodes at 4 and ends at
    5; at 5 (step 6, only 2 steps after step 4's prefill) c is admitted anyway, the hold
    being off while capacity-bound. Without the escape it would wait until 6."""
    s = simulate([req("a", 0, 4, 10), req("b", 1, 6, 2), req("c", 1, 6, 2)], policy="vllm",
                 block_size=4, num_blocks=40, token_budget=32, max_rows=2, prefill_interval=3)
    assert [(e["tick"], e["id"], e["reason"]) for e in s.of("admission_blocked")][:3] == [
        (1, "b", "prefill_interval"), (2, "b", "prefill_interval"), (3, "c", "max_rows")]
    assert s.req["b"].admitted_at == 3
    assert s.req["c"].admitted_at == 5
    assert s.dispatches()[5] == (5, [("a", "decode", 1, True), ("c", "prefill", 6, True)])


def test_a_block_with_content_already_cached_is_cached_too():
    """B=2, 3 blocks, prefix caching. a (ids 1..4, N=1) fills blocks 0 and 1 and ends at
    1; both wait in the LRU queue, its tail block first. b (ids 1..4) at 1 hits block 0
    only (a request computes at least its last token), and writes ids 3, 4 again into
    never-used block 2: the same key as block 1. vLLM keeps both under the key; when b
    ends at 2, block 2 joins the LRU tail instead of the plain pool. So c (ids 7, 8) at
    3 finds no plain block and evicts the LRU head, a's block 1 (`evicted` {c, written_by
    a, block 1}), where a policy that leaves duplicates unkeyed reuses block 2 without
    evicting anything. d (ids 1..6) at 4 still hits 4 tokens: the key of ids 3, 4 now
    names block 2."""
    recs = [req("a", 0, 4, 1, prompt_token_ids=[1, 2, 3, 4]),
            req("b", 1, 4, 1, prompt_token_ids=[1, 2, 3, 4]),
            req("c", 3, 2, 1, prompt_token_ids=[7, 8]),
            req("d", 4, 6, 1, prompt_token_ids=[1, 2, 3, 4, 5, 6])]
    options = dict(block_size=2, num_blocks=3, prefix_caching=True, token_budget=16,
                   max_rows=4)
    s = simulate(recs, policy="vllm", **options)
    assert [(e["tick"], e["id"], e["written_by"], e["block"])
            for e in s.of("evicted")][:1] == [(3, "c", "a", 1)]
    assert [(e["id"], e["cached_tokens"]) for e in s.of("admitted")] == [
        ("a", 0), ("b", 2), ("c", 0), ("d", 4)]
    s = simulate(recs, policy="continuous", **options)
    assert [e["tick"] for e in s.of("evicted")] == [4]


def test_a_chunk_that_preempts_itself_carries_no_prefill():
    """prefill_interval 2, B=4, 8 blocks, budget 8, prefill_chunk 4. r2 (P=13, N=7) at 1;
    r0 (P=8, N=3) and r1 (P=8, N=4) at 2. Ticks 1-3 are executed steps 1-3, all with
    prefill (r1 gets 3 tokens at 3). At 4, (3 + 1) - 3 = 1 < 2 with r2 and r0 decoding:
    r1's chunk is held. At 5 the hold ends, but r1's chunk finds no block and r1, the
    latest admitted, is its own victim: it runs nothing, so step 5 carries no prefill
    (vLLM sets prefill_scheduled only once a request's blocks are allocated). At 6,
    (5 + 1) - 3 = 3 >= 2: r1 is admitted again and prefilled 4 tokens, as vLLM 0.33 does
    (its harness gives the same dispatches). Counting the failed chunk as prefill would
    restart the count at step 5 and hold r1 until 7."""
    s = simulate([req("r0", 2, 8, 3), req("r1", 2, 8, 4), req("r2", 1, 13, 7)], policy="vllm",
                 block_size=4, num_blocks=8, token_budget=8, max_rows=4, prefill_chunk=4,
                 prefill_interval=2)
    assert [(e["tick"], e["id"], e["trigger"]) for e in s.of("preempted")] == [(5, "r1", "r1")]
    assert [(e["tick"], e["resumed"]) for e in s.of("admitted") if e["id"] == "r1"] == [
        (3, False), (6, True)]
    assert [(t, [(r[0], r[2]) for r in rows]) for t, rows in s.dispatches()[4:7]] == [
        (5, [("r2", 1), ("r0", 1)]), (6, [("r2", 1), ("r1", 4)]), (7, [("r2", 1)])]


@pytest.mark.parametrize("fast", [True, False])
def test_a_block_decoding_fills_can_admit_a_head_blocked_for_blocks(fast):
    """Prefix caching, blocks of 4, a pool of 5. a: prompt [1 2 3 4], outputs given as
    ids [5 6 7 8 9 9 9 9]. b arrives at 1: prompt [1..8, 9 x 8, 7] (17 tokens, 5
    blocks); it hits a's first block only: needs 4 > 3 free (a holds 2), blocked for
    blocks while a decodes. At 4 a writes row 7 and fills [5 6 7 8], keyed as it is
    scheduled: b hits 2 blocks, needs 3 <= 3 free, and is admitted at 4 (first and
    last token at 5); a finishes at 8. Folding (a steady decode with a blocked head)
    must not skip that step: it declines while a running request's outputs are ids."""
    records = [
        {"type": "request", "id": "a", "arrival": 0, "prompt_token_ids": [1, 2, 3, 4],
         "output_token_ids": [5, 6, 7, 8, 9, 9, 9, 9]},
        {"type": "request", "id": "b", "arrival": 1,
         "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8] + [9] * 8 + [7], "output_tokens": 1}]
    trace = parse_trace(trace_bytes(records), "hit.jsonl")
    opts = Options.resolve(trace.config, dict(block_size=4, num_blocks=5, token_budget=64,
                                              prefix_caching=True))
    result = Engine(trace.workload, opts, "vllm", fast_forward=fast).run()
    a, b = result.requests
    assert (a.admitted_at, a.first_token_at, a.finished_at) == (0, 1, 8)
    assert (b.admitted_at, b.first_token_at, b.finished_at) == (4, 5, 5)
    assert b.cached_tokens == 8


def test_most_reclaimable_ranks_the_blocks_a_victim_really_lets_go_of():
    """The four-block example: a pool of 4, q (admitted first) holds blocks [0, 1]; p,
    the producer of a KV copy in flight, holds [2, 3], both pinned by the copy. Freeing
    p lets go of nothing until the copy's drain is acknowledged (its blocks stay held,
    0 free), so reclaimable is p 0, q 2: most-blocks (two tables of 2, the latest
    admitted on a tie) takes p, most-reclaimable takes q. With r sharing q's block 0,
    q's reclaimable falls to 1, and r, which holds only that block, frees nothing (0).
    Unpinned, p and q both let go of 2: the tie goes to the latest admitted, p."""
    from types import SimpleNamespace

    from scheduler_sim.kv.allocator import BlockAllocator
    from scheduler_sim.policies.victims import choose_victim

    allocator = BlockAllocator(4, 4)
    allocator.grow("q", 8)
    allocator.grow("p", 8)
    allocator.pin(allocator.table("p"))
    assert (allocator.table("q"), allocator.table("p")) == ([0, 1], [2, 3])
    assert (allocator.reclaimable("q"), allocator.reclaimable("p")) == (2, 0)
    q, p = SimpleNamespace(rid="q", preemptions=0), SimpleNamespace(rid="p", preemptions=0)
    picked = {rule: choose_victim([q, p], rule, None, allocator).rid
              for rule in ("most-blocks", "most-reclaimable")}
    assert picked == {"most-blocks": "p", "most-reclaimable": "q"}
    # Unpinned, both let go of 2: the tie goes to the most recently admitted, p.
    even = BlockAllocator(4, 4)
    even.grow("q", 8)
    even.grow("p", 8)
    assert (even.reclaimable("q"), even.reclaimable("p"),
            choose_victim([q, p], "most-reclaimable", None, even).rid) == (2, 2, "p")
    assert allocator.free_request("p", 0, 0) == 0 and allocator.free == 0  # nothing freed
    allocator.share("r", [0])
    assert (allocator.reclaimable("q"), allocator.reclaimable("r"),
            allocator.reclaimable("nobody")) == (1, 0, 0)


@pytest.mark.parametrize("block_size, calls, keyed", [(4, 1, 3), (1, 9, 9)])
def test_a_decode_opening_a_block_keys_nothing(monkeypatch, block_size, calls, keyed):
    """P=8, N=9, blocks of 4: the prefill keys blocks 0 and 1 (one `_cache_blocks`
    call); the decodes that open blocks 2 and 3 fill none and are not keyed (3 calls
    and 4 registrations of nothing before they were skipped: 1 and 2 now); the
    decode that fills block 2 keys it as it does. Blocks of one row: every decode
    fills the block it opens, so each is keyed (1 + 8 calls). The same blocks are
    keyed either way (3 and 9, as before)."""
    from scheduler_sim.kv.allocator import BlockAllocator
    from scheduler_sim.policies.vllm import VllmPolicy
    seen = Counter()
    cache_blocks = VllmPolicy._cache_blocks
    monkeypatch.setattr(VllmPolicy, "_cache_blocks", lambda self, r, rows: seen.update(
        ["call"]) or cache_blocks(self, r, rows))
    register = BlockAllocator.register_full_blocks

    def counted(self, rid, keys, rows):
        seen["new" if rows // self.block_size > keys.registered else "none"] += 1
        register(self, rid, keys, rows)
    monkeypatch.setattr(BlockAllocator, "register_full_blocks", counted)
    records = [req("a", 0, 8, 9, prompt_token_ids=list(range(8)))]
    s = simulate(records, policy="vllm", block_size=block_size, num_blocks=16, token_budget=16,
                 prefix_caching=True)
    assert (seen["call"], seen["new"], seen["none"]) == (calls, keyed, 2)
    assert s.summary["completed"] == 1


def test_the_decodes_are_walked_as_a_run_in_running_order(monkeypatch):
    """Blocks of 4, budget 4, prefix caching. a (P=2, N=5) and b (P=3, N=4) at 0, c
    (P=6, N=2) at 1. t0: a 2 (out 1), b 2 of 3. t1: a decodes row 2 (inside block 0),
    the run stops at b's chunk: b 1 (out 1), c admitted with the budget's 2. t2: a and
    b decode row 3 in the run, each filling block 0 and keying it as scheduled, before
    c's chunk (2 more) fills c's block 0. t3: a and b open block 1 in the run, which
    stops at c's chunk: c 2 (out 1). t4: all three decode inside block 1 in one run, and
    finish. Keyed, in order: a's, b's and c's block 0 (rows 4)."""
    from scheduler_sim.kv.allocator import BlockAllocator
    keyed = []
    register = BlockAllocator.register_full_blocks

    def counted(self, rid, keys, rows):
        if rows // self.block_size > keys.registered:
            keyed.append((rid, rows))
        register(self, rid, keys, rows)
    monkeypatch.setattr(BlockAllocator, "register_full_blocks", counted)
    s = simulate([req("a", 0, 2, 5, prompt_token_ids=[1, 2]),
                  req("b", 0, 3, 4, prompt_token_ids=[1, 2, 3]),
                  req("c", 1, 6, 2, prompt_token_ids=[1, 2, 3, 4, 5, 6])],
                 policy="vllm", block_size=B, num_blocks=16, token_budget=4,
                 prefix_caching=True)
    assert s.dispatches() == [
        (0, [("a", "prefill", 2, True), ("b", "prefill", 2, False)]),
        (1, [("a", "decode", 1, True), ("b", "prefill", 1, True), ("c", "prefill", 2, False)]),
        (2, [("a", "decode", 1, True), ("b", "decode", 1, True), ("c", "prefill", 2, False)]),
        (3, [("a", "decode", 1, True), ("b", "decode", 1, True), ("c", "prefill", 2, True)]),
        (4, [("a", "decode", 1, True), ("b", "decode", 1, True), ("c", "decode", 1, True)]),
    ]
    assert keyed == [("a", 4), ("b", 4), ("c", 4)]
    assert s.summary["completed"] == 3


def test_decodes_the_budget_does_not_cover_at_once_are_walked_one_by_one():
    """Blocks of 4, budget 4, chunks of 2: x (P=8, N=1), a and b (P=1, N=3) at 0. t0:
    x 2, a 1 (out 1), b 1 (out 1). t1 and t2: x's chunk leaves 2 for the 2 rows after
    it (not more than the rows: walked one by one), a and b decode. t3: x's last 2."""
    s = run([req("x", 0, 8, 1), req("a", 0, 1, 3), req("b", 0, 1, 3)],
            num_blocks=16, token_budget=4, prefill_chunk=2)
    assert s.dispatches() == [
        (0, [("x", "prefill", 2, False), ("a", "prefill", 1, True), ("b", "prefill", 1, True)]),
        (1, [("x", "prefill", 2, False), ("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (2, [("x", "prefill", 2, False), ("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (3, [("x", "prefill", 2, True)]),
    ]


def test_decodes_past_the_budget_a_chunk_leaves_wait_for_the_next_step():
    """Blocks of 4, budget 4, chunks of 2, prefill every 2nd step, prefix caching. r0
    (ids 1..9, N=2) fills two blocks, keyed; r1 (11 ids of its own, N=7) chunks from t2;
    r2, r3 (at 4) and r4 (at 5) share r0's ids: hits of 8 tokens, each prefills 1 and
    then decodes. At t6 r1's chunk takes 2 of the budget and leaves 2 for the three
    decodes after it: r2 and r3 decode, r4 waits for t7 (the run over the decodes is
    taken only while the budget covers every row left). t8 again: r4 waits."""
    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    s = run([req("r0", 0, 9, 2, prompt_token_ids=ids),
             req("r1", 2, 11, 7, prompt_token_ids=list(range(110, 121))),
             req("r2", 4, 9, 5, prompt_token_ids=ids), req("r3", 4, 9, 6, prompt_token_ids=ids),
             req("r4", 5, 9, 5, prompt_token_ids=ids)],
            num_blocks=64, token_budget=4, prefill_chunk=2, prefill_interval=2,
            prefix_caching=True)
    decode = ("decode", 1, True)
    assert [d for d in s.dispatches() if 5 <= d[0] <= 9] == [
        (5, [("r2", *decode), ("r3", *decode), ("r4", "prefill", 1, True)]),
        (6, [("r1", "prefill", 2, False), ("r2", *decode), ("r3", *decode)]),
        (7, [("r2", *decode), ("r3", *decode), ("r4", *decode)]),
        (8, [("r1", "prefill", 2, False), ("r2", *decode), ("r3", *decode)]),
        (9, [("r3", *decode), ("r4", *decode)]),
    ]


@pytest.mark.parametrize("listener", [False, True])
def test_the_run_from_the_first_row_is_planned_as_the_dispatchs_own_decodes(
        monkeypatch, listener):
    """The scenario above (blocks of 4, budget 4, prefix caching): from t1 the run of
    decodes from the first row is the plan's `DecodesFirst` list, its blocks opened and
    keyed (t1 a; t2 and t3 a and b, whose blocks 0 fill and 1 open; t4 all three), the
    rest after it in running order. Without a listener the dispatch takes the list and
    sums its contexts, resident rows before the step: t1 a's 2; t2 3 + 3; t3 4 + 4;
    t4 5 + 5 + 6 (with one, each row is written as before): the same contexts. Each
    request writes P + N - 1 useful rows: 6, 6 and 7. Without a listener the step at
    t2 (a's and b's decodes and c's next chunk, nothing waiting) is a chunk run's,
    folded at t1 (engine/fast/chunk_run.py): not a call; nor is t4, the first decodes
    after c's prompt with nothing waiting: `vllm` is at its fixed point under prefix
    caching too (`repeats_decodes`) and the engine starts a's, b's and c's decodes
    itself, walking their rows (the same contexts, 16). With a listener `vllm`
    promises no fixed point under prefix caching (its walk's `evicted` records
    would come before the step's snapshot, the engine's start's after it): t4 is
    its call."""
    from scheduler_sim.engine.ledger import DispatchLedger
    from scheduler_sim.policies.vllm import VllmPolicy
    plans, contexts = [], []
    schedule, dispatch = VllmPolicy.schedule, DispatchLedger.dispatch

    def planned(self, now):
        plan = schedule(self, now)
        first = getattr(plan, "decoders", None)
        plans.append((now, None if first is None else [r.rid for r in first],
                      getattr(plan, "opened", None),
                      [(r.rid, t) for r, t in getattr(plan, "rest", plan)]))
        return plan

    def priced(self, now, rows, tokens, prompt, decode, recompute, padding, chunks, ctx):
        contexts.append(ctx)
        return dispatch(self, now, rows, tokens, prompt, decode, recompute, padding, chunks,
                        ctx)
    monkeypatch.setattr(VllmPolicy, "schedule", planned)
    monkeypatch.setattr(DispatchLedger, "dispatch", priced)
    records = [req("a", 0, 2, 5, prompt_token_ids=[1, 2]),
               req("b", 0, 3, 4, prompt_token_ids=[1, 2, 3]),
               req("c", 1, 6, 2, prompt_token_ids=[1, 2, 3, 4, 5, 6])]
    trace = parse_trace(trace_bytes(records), "test.jsonl")
    options = Options.resolve(trace.config, dict(block_size=B, num_blocks=16, token_budget=4,
                                                 prefix_caching=True))
    events = []
    result = Engine(trace.workload, options, "vllm",
                    on_event=events.append if listener else None).run()
    assert plans == [
        (0, None, None, [("a", 2), ("b", 2)]),
        (1, ["a"], True, [("b", 1), ("c", 2)]),
        *([(2, ["a", "b"], True, [("c", 2)])] if listener else []),
        (3, ["a", "b"], True, [("c", 2)]),
        *([(4, ["a", "b", "c"], True, [])] if listener else []),
    ]
    assert contexts == [0, 2, 6, 8, 16]
    assert (result.summary["completed"], result.summary["useful_rows"]) == (3, 19)
    assert [(r.rid, r.outputs, r.useful_rows) for r in result.requests] == [
        ("a", 5, 6), ("b", 4, 6), ("c", 2, 7)]


def test_a_step_that_preempts_after_the_run_plans_a_list_with_the_run_first(monkeypatch):
    """The preemption above (4 blocks, b P=4 N=6, a P=8 N=2, prefix caching): at t1
    the run takes b, whose row 4 opens plain block 3, and stops at a, whose row 8
    finds no block; a is its own victim. The run's row is stored first, and the step,
    having preempted, plans a list: [(b, 1)]. From t2 b alone is the run:
    DecodesFirst([b], [], opened)."""
    from scheduler_sim.policies.vllm import VllmPolicy
    plans = []
    schedule = VllmPolicy.schedule

    def planned(self, now):
        plan = schedule(self, now)
        first = getattr(plan, "decoders", None)
        plans.append((now, None if first is None else [r.rid for r in first],
                      [(r.rid, t) for r, t in getattr(plan, "rest", plan)]))
        return plan
    monkeypatch.setattr(VllmPolicy, "schedule", planned)
    s = run([req("b", 0, 4, 6), req("a", 0, 8, 2)], num_blocks=4, token_budget=16,
            prefix_caching=True)
    assert plans[:3] == [(0, None, [("b", 4), ("a", 8)]), (1, None, [("b", 1)]),
                         (2, ["b"], [])]
    assert fields(s, "preempted", "id", "outputs", "rows")[0] == (1, "a", 1, 8)


@pytest.mark.parametrize("audit", [False, True])
def test_an_audited_dispatch_walks_the_run_it_is_handed(monkeypatch, audit):
    """The scenario above: the dispatch sums the contexts of the handed-over run
    without walking it (one sum a step that hands one over: t1 and t3, t2 a chunk
    run's step folded at t1, t4's decodes started by the engine without a call, their
    rows walked) unless the engine audits, when every row is walked and checked as
    any plan's (and nothing folds or is carried); the run's results are the same
    either way."""
    from scheduler_sim.engine import dispatching
    summed = []
    resident = dispatching._resident
    monkeypatch.setattr(dispatching, "_resident",
                        lambda r: summed.append(r.rid) or resident(r))
    records = [req("a", 0, 2, 5, prompt_token_ids=[1, 2]),
               req("b", 0, 3, 4, prompt_token_ids=[1, 2, 3]),
               req("c", 1, 6, 2, prompt_token_ids=[1, 2, 3, 4, 5, 6])]
    trace = parse_trace(trace_bytes(records), "test.jsonl")
    options = Options.resolve(trace.config, dict(block_size=B, num_blocks=16, token_budget=4,
                                                 prefix_caching=True))
    result = Engine(trace.workload, options, "vllm", audit=audit).run()
    assert summed == ([] if audit else ["a", "a", "b"])
    assert [(r.rid, r.outputs, r.useful_rows) for r in result.requests] == [
        ("a", 5, 6), ("b", 4, 6), ("c", 2, 7)]
