"""The request lifecycle: states, forced preemption, recompute and block release (§7, A4, A5).

Every scenario uses block size 4 and a handful of blocks; expected ticks, rows,
token ids and emissions are derived by hand in each docstring. Event records
are compared on the fields the contract names, so that extra fields added
later do not break the tests.
"""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from conftest import ROOT, req, simulate
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.cli.main import main
from scheduler_sim.records.errors import InvariantError
from scheduler_sim.requests.request import Request
from scheduler_sim.records.states import RequestStatus

B = 4
S = RequestStatus


def preempt(rid: str, at: int) -> dict:
    """A forced-preemption record."""
    return {"type": "preempt", "id": rid, "at": at}


def cancel(rid: str, at: int) -> dict:
    """A cancellation record."""
    return {"type": "cancel", "id": rid, "at": at}


def rows_with_ids(s) -> list[tuple]:
    """Each dispatch row as (tick, id, phase, tokens, emits, token_ids or None)."""
    return [(e["tick"], r["id"], r["phase"], r["tokens"], r["emits"], r.get("token_ids"))
            for e in s.of("dispatch") for r in e["rows"]]


def preempted(s, rid: str | None = None) -> list[tuple]:
    """`preempted` events as (tick, id, outputs, rows, blocks_freed, reason)."""
    return [(e["tick"], e["id"], e["outputs"], e["rows"], e["blocks_freed"], e["reason"])
            for e in s.of("preempted") if rid is None or e["id"] == rid]


def ignored(s) -> list[tuple]:
    """`preempt_ignored` events as (tick, id, status)."""
    return [(e["tick"], e["id"], e["status"]) for e in s.of("preempt_ignored")]


def admissions(s) -> list[tuple]:
    """`admitted` events as (tick, id, reserved, resumed)."""
    return [(e["tick"], e["id"], e["reserved"], e["resumed"]) for e in s.of("admitted")]


def released(s) -> list[tuple]:
    """`released` events as (tick, blocks)."""
    return [(e["tick"], e["blocks"]) for e in s.of("released")]


def emitting_rows(s, rid: str) -> int:
    """How many dispatch rows of `rid` emitted an output."""
    return sum(1 for e in s.of("dispatch") for r in e["rows"] if r["id"] == rid and r["emits"])


def request_events(s, rid: str) -> list[tuple]:
    """The lifecycle events of one request as (tick, event), snapshots and dispatches left out."""
    kinds = {"arrival", "admitted", "admission_blocked", "preempted", "preempt_ignored",
             "finished", "cancelled", "cancel_ignored", "rejected"}
    return [(e["tick"], e["event"]) for e in s.events
            if e["event"] in kinds and e.get("id") == rid]


# --- L3 with no output yet: preempted during a chunked prefill ------------------------


def test_preempt_during_prefill_recomputes_first_chunk_then_finishes_prompt():
    """P=10 (ids 100..109), N=3 (ids 200..202), prefill_chunk 4, 3 blocks (credit ceil(12/4)=3):
    t0 prefill [100..103]; preempt at 1 (k=0, rows 4, blocks_freed 1, free again at once with
    delay 0: snapshot at 1 has free 3); re-admitted at 1 (resumed); t1 recompute [100..103] emits nothing; t2 prefill
    [104..107]; t3 prefill [108,109] emits 200 at 4; t4 decode [200] emits 201 at 5; t5 decode
    [201] emits 202 at 6. useful = P+N-1 = 12, replay = 4, 3 emitting rows."""
    s = simulate([req("r1", 0, 10, 3, prompt_token_ids=list(range(100, 110)),
                      output_token_ids=[200, 201, 202]),
                  preempt("r1", 1)], block_size=B, num_blocks=3, prefill_chunk=4)
    assert rows_with_ids(s) == [
        (0, "r1", "prefill", 4, False, [100, 101, 102, 103]),
        (1, "r1", "recompute", 4, False, [100, 101, 102, 103]),
        (2, "r1", "prefill", 4, False, [104, 105, 106, 107]),
        (3, "r1", "prefill", 2, True, [108, 109]),
        (4, "r1", "decode", 1, True, [200]),
        (5, "r1", "decode", 1, True, [201]),
    ]
    assert preempted(s) == [(1, "r1", 0, 4, 1, "manual")]
    snap = s.at(1, "snapshot")[0]
    assert (snap["reserved"], snap["allocated"], snap["draining"], snap["free"]) == (3, 0, 0, 3)
    assert admissions(s) == [(0, "r1", 3, False), (1, "r1", 3, True)]
    r = s.req["r1"]
    assert (r.admitted_at, r.first_token_at, r.finished_at) == (0, 4, 6)
    assert (r.outputs, r.useful_rows, r.replay_rows, r.preemptions) == (3, 12, 4, 1)
    assert r.status is S.FINISHED_LENGTH_CAPPED
    assert emitting_rows(s, "r1") == 3


def test_preempt_before_any_row_is_written_restores_nothing():
    """max_rows 1: r1 (P=4, N=1) and r2 (P=4, N=2) are both admitted at 0 (credits 1 + 2 of 4)
    but only r1's prefill fits the dispatch. r1 finishes at 1 (its 1 block is free again at
    once, delay 0); r2 is preempted at 1 with outputs 0, rows 0, blocks_freed 0. It is
    re-admitted at 1 and prefills all 4 rows (phase prefill, no recompute): replay 0,
    useful 5, preemptions 1, admitted stays 0."""
    s = simulate([req("r1", 0, 4, 1), req("r2", 0, 4, 2), preempt("r2", 1)],
                 block_size=B, num_blocks=4, max_rows=1)
    assert preempted(s) == [(1, "r2", 0, 0, 0, "manual")]
    snap = s.at(1, "snapshot")[0]
    assert (snap["reserved"], snap["allocated"], snap["draining"], snap["free"]) == (2, 0, 0, 4)
    assert s.dispatches() == [(0, [("r1", "prefill", 4, True)]),
                              (1, [("r2", "prefill", 4, True)]),
                              (2, [("r2", "decode", 1, True)])]
    r2 = s.req["r2"]
    assert (r2.admitted_at, r2.first_token_at, r2.finished_at) == (0, 2, 3)
    assert (r2.useful_rows, r2.replay_rows, r2.preemptions) == (5, 0, 1)
    assert s.summary["recompute_tokens"] == 0


# --- L2/L3 after k outputs -------------------------------------------------------------


def test_preempt_after_two_outputs_recomputes_committed_rows_and_feeds_pending_once():
    """Lab 02 part 1: prompt [10,11,12], outputs [20,21,22], 4 blocks. t0 prefill [10,11,12]
    emits 20 at 1; t1 decode [20] emits 21 at 2; preempt at 2: k=2, committed P+k-1 = 4 rows
    (one full block drains), 21 pending. t2 recompute [10,11,12,20] emits nothing; t3 decode
    [21] emits 22 at 4: 21 is fed once. useful 5 = P+N-1, replay 4, emitting rows 3 = N."""
    s = simulate([req("r1", 0, 3, 3, prompt_token_ids=[10, 11, 12],
                      output_token_ids=[20, 21, 22]),
                  preempt("r1", 2)], block_size=B, num_blocks=4)
    assert rows_with_ids(s) == [
        (0, "r1", "prefill", 3, True, [10, 11, 12]),
        (1, "r1", "decode", 1, True, [20]),
        (2, "r1", "recompute", 4, False, [10, 11, 12, 20]),
        (3, "r1", "decode", 1, True, [21]),
    ]
    assert preempted(s) == [(2, "r1", 2, 4, 1, "manual")]
    assert admissions(s) == [(0, "r1", 2, False), (2, "r1", 2, True)]
    snap = s.at(2, "snapshot")[0]
    assert (snap["reserved"], snap["allocated"], snap["draining"], snap["free"]) == (2, 0, 0, 4)
    fed = [i for row in rows_with_ids(s) if row[2] != "recompute" for i in row[5]]
    assert fed.count(21) == 1
    r = s.req["r1"]
    assert (r.first_token_at, r.finished_at, r.outputs) == (1, 4, 3)
    assert (r.useful_rows, r.replay_rows, r.preemptions) == (5, 4, 1)
    assert emitting_rows(s, "r1") == 3
    assert (s.summary["recompute_tokens"], s.summary["output_tokens"],
            s.summary["iterations"]) == (4, 3, 4)


def test_recompute_after_outputs_is_chunked_by_prefill_chunk():
    """P=5 ids [1..5], N=4 ids [6..9], prefill_chunk 4, 3 blocks (credit ceil(8/4)=2). t0 prefill
    [1..4]; t1 prefill [5] emits 6 at 2; t2 decode [6] emits 7 at 3; t3 decode [7] emits 8 at
    4; preempt at 4: k=3, rows 7 = P+k-1, 2 blocks drain. t4 recompute [1..4]; t5 recompute
    [5,6,7] (the chunk cap splits the 7 rows 4+3); t6 decode [8] emits 9 at 7. useful 8, replay 7."""
    s = simulate([req("r1", 0, 5, 4, prompt_token_ids=[1, 2, 3, 4, 5],
                      output_token_ids=[6, 7, 8, 9]),
                  preempt("r1", 4)], block_size=B, num_blocks=3, prefill_chunk=4)
    assert rows_with_ids(s) == [
        (0, "r1", "prefill", 4, False, [1, 2, 3, 4]),
        (1, "r1", "prefill", 1, True, [5]),
        (2, "r1", "decode", 1, True, [6]),
        (3, "r1", "decode", 1, True, [7]),
        (4, "r1", "recompute", 4, False, [1, 2, 3, 4]),
        (5, "r1", "recompute", 3, False, [5, 6, 7]),
        (6, "r1", "decode", 1, True, [8]),
    ]
    assert preempted(s) == [(4, "r1", 3, 7, 2, "manual")]
    r = s.req["r1"]
    assert (r.finished_at, r.useful_rows, r.replay_rows) == (7, 8, 7)


def test_recompute_rows_share_budget_and_rotation_with_prefills():
    """token_budget 4, prefill_chunk 3, 8 blocks. r1 (P=4, N=2): t0 prefill 3, t1 prefill 1
    emits at 2. At 2, r2 (P=6, N=1) arrives, then r1 is preempted (k=1, restore 4 rows) and
    goes to the front: both admitted at 2 (r1 first). t2: recompute r1 min(4,3,4)=3, then r2
    prefill with the 1 token left. t3: rotation starts after r2 (last prefill served), wraps
    to r1: recompute 1, then r2 prefill min(5,3,3)=3. t4: r1 decodes 1 (emits, finishes at 5),
    r2 prefills its last 2 (emits, finishes at 5)."""
    s = simulate([req("r1", 0, 4, 2), req("r2", 2, 6, 1), preempt("r1", 2)],
                 block_size=B, num_blocks=8, token_budget=4, prefill_chunk=3)
    assert s.dispatches() == [
        (0, [("r1", "prefill", 3, False)]),
        (1, [("r1", "prefill", 1, True)]),
        (2, [("r1", "recompute", 3, False), ("r2", "prefill", 1, False)]),
        (3, [("r1", "recompute", 1, False), ("r2", "prefill", 3, False)]),
        (4, [("r1", "decode", 1, True), ("r2", "prefill", 2, True)]),
    ]
    assert admissions(s) == [(0, "r1", 2, False), (2, "r1", 2, True), (2, "r2", 2, False)]
    assert (s.req["r1"].finished_at, s.req["r2"].finished_at) == (5, 5)
    assert (s.req["r1"].replay_rows, s.req["r1"].useful_rows) == (4, 5)


# --- E1: completion wins; ignored preemptions --------------------------------------------


def test_preempt_at_completion_tick_is_ignored_because_completion_comes_first():
    """P=4, N=2: t0 prefill emits at 1, t1 decode emits the last output at 2. A preempt at 2
    finds it finished (E1): preempt_ignored with status finished_length_capped, after the
    `finished` event; preemptions 0, replay 0; with release_delay 1 its 2 blocks (5 rows) are
    released at 3."""
    s = simulate([req("r1", 0, 4, 2), preempt("r1", 2)], block_size=B, num_blocks=4,
                 release_delay=1)
    assert request_events(s, "r1") == [(0, "arrival"), (0, "admitted"), (2, "finished"),
                                       (2, "preempt_ignored")]
    assert ignored(s) == [(2, "r1", "finished_length_capped")]
    assert s.of("preempted") == []
    r = s.req["r1"]
    assert (r.finished_at, r.preemptions, r.replay_rows, r.useful_rows) == (2, 0, 0, 5)
    assert released(s) == [(3, 2)]


def test_preempt_of_waiting_and_of_finished_request_is_ignored_and_changes_nothing():
    """2 blocks: r1 (P=4, N=2, credit 2) runs; r2 (P=3, N=1, credit 1) waits (reservation).
    Preempt r2 at 1: preempt_ignored status waiting. r1 finishes at 2 and r2 is admitted at 2,
    finishes at 3. Preempt r1 at 4: preempt_ignored status finished_length_capped. Apart from
    the preempt_ignored events the event list equals the run without the preempt records."""
    base = [req("r1", 0, 4, 2), req("r2", 0, 3, 1)]
    s = simulate(base + [preempt("r2", 1), preempt("r1", 4)], block_size=B, num_blocks=2)
    plain = simulate(base, block_size=B, num_blocks=2)
    assert ignored(s) == [(1, "r2", "waiting"), (4, "r1", "finished_length_capped")]
    assert [e for e in s.events if e["event"] != "preempt_ignored"] == plain.events
    assert (s.req["r2"].admitted_at, s.req["r2"].finished_at) == (2, 3)
    assert s.summary["preemptions"] == 0


def test_preempt_at_arrival_tick_is_ignored_because_admission_comes_later():
    """A preempt at the request's arrival tick runs before the policy (E2, E3): the request is
    still waiting, so preempt_ignored status waiting; it is then admitted at 0 as usual."""
    s = simulate([req("r1", 0, 4, 1), preempt("r1", 0)], block_size=B, num_blocks=1)
    assert ignored(s) == [(0, "r1", "waiting")]
    assert admissions(s) == [(0, "r1", 1, False)]
    assert (s.req["r1"].finished_at, s.req["r1"].preemptions) == (1, 0)


def test_second_preempt_at_the_same_tick_is_ignored_as_preempted():
    """Two preempts of r1 at tick 1: the first preempts (outputs 1, rows 4), the second finds it
    PREEMPTED (waiting again, not yet re-admitted): preempt_ignored status preempted.
    preemptions stays 1 and replay is 4."""
    s = simulate([req("r1", 0, 4, 2), preempt("r1", 1), preempt("r1", 1)],
                 block_size=B, num_blocks=2)
    assert preempted(s) == [(1, "r1", 1, 4, 1, "manual")]
    assert ignored(s) == [(1, "r1", "preempted")]
    assert (s.req["r1"].preemptions, s.req["r1"].replay_rows) == (1, 4)


@pytest.mark.parametrize("preempt_first_in_file", [True, False])
def test_same_tick_cancel_wins_over_preempt(preempt_first_in_file):
    """Cancel and preempt of running r1 at tick 1, in either file order: cancellations come
    first (E3), so `cancelled` state running, then preempt_ignored status finished_aborted;
    preemptions 0; with release_delay 1 its 1 block (4 rows) is released at 2."""
    actions = [preempt("r1", 1), cancel("r1", 1)]
    if not preempt_first_in_file:
        actions.reverse()
    s = simulate([req("r1", 0, 4, 3)] + actions, block_size=B, num_blocks=4, release_delay=1)
    assert [(e["tick"], e["event"]) for e in s.events if e["tick"] == 1] == [
        (1, "cancelled"), (1, "preempt_ignored")]
    assert s.of("cancelled")[0]["state"] == "running"
    assert ignored(s) == [(1, "r1", "finished_aborted")]
    r = s.req["r1"]
    assert (r.status, r.preemptions, r.outputs, r.finished_at) == (S.FINISHED_ABORTED, 0, 1, 1)
    assert released(s) == [(2, 1)]


# --- L4: a cancelled request cannot resume ------------------------------------------------


def test_cancel_of_preempted_request_ends_it_and_it_never_dispatches_again():
    """3 blocks, release_delay 2. r1 (P=6, N=3, credit 2) runs, r2 (P=4, N=2, credit 2) waits.
    r1: t0 prefill 6 (2 blocks) emits at 1, t1 decode emits at 2. Preempt at 2: outputs 2,
    rows 7, 2 blocks drain until 4; r1 blocked (0 + 2 + 2 > 3, 0 + 2 <= 3: draining).
    Cancel at 3: `cancelled` state preempted. r2 (head) is blocked at 3 for draining,
    admitted at 4 after `released` 2, finishes at 6. r1 keeps outputs 2, replay 0."""
    s = simulate([req("r1", 0, 6, 3), req("r2", 0, 4, 2), preempt("r1", 2), cancel("r1", 3)],
                 block_size=B, num_blocks=3, release_delay=2)
    assert preempted(s) == [(2, "r1", 2, 7, 2, "manual")]
    blocked = [(e["tick"], e["id"], e["reason"], e["reserved"], e["draining"], e["free"])
               for e in s.of("admission_blocked") if e["tick"] >= 2]
    assert blocked == [(2, "r1", "draining", 0, 2, 1), (3, "r2", "draining", 0, 2, 1)]
    assert [(e["tick"], e["id"], e["state"]) for e in s.of("cancelled")] == [(3, "r1", "preempted")]
    assert [row for row in rows_with_ids(s) if row[1] == "r1" and row[0] >= 2] == []
    assert released(s) == [(4, 2), (8, 2)]
    assert admissions(s)[-1] == (4, "r2", 2, False)
    r1 = s.req["r1"]
    assert (r1.status, r1.finished_at, r1.outputs) == (S.FINISHED_ABORTED, 3, 2)
    assert (r1.preemptions, r1.replay_rows, r1.useful_rows) == (1, 0, 7)
    assert (s.req["r2"].first_token_at, s.req["r2"].finished_at) == (5, 6)


# --- repeated preemption -------------------------------------------------------------------


def test_repeated_preemption_accumulates_replay_rows_and_never_moves_outputs_back():
    """P=4 ids [10..13], N=3 ids [20,21,22], prefill_chunk 2, 4 blocks, delay 0.
    t0 prefill [10,11]; preempt 1 (k=0, rows 2, 1 block); t1 recompute [10,11]; t2 prefill
    [12,13] emits 20 at 3; t3 decode [20] emits 21 at 4; preempt 4 (k=2, rows 5, 2 blocks);
    t4 recompute [10,11], t5 [12,13]; preempt 6 (k=2, rows 4 mid-recompute, 1 block);
    t6 [10,11], t7 [12,13]; preempt 8 (rows 4, 1 block); t8 [10,11], t9 [12,13], t10 [20];
    t11 decode [21] emits 22 at 12. replay = 2+5+4+4 = 15, useful 6 = P+N-1, 4 preemptions."""
    s = simulate([req("r1", 0, 4, 3, prompt_token_ids=[10, 11, 12, 13],
                      output_token_ids=[20, 21, 22]),
                  preempt("r1", 1), preempt("r1", 4), preempt("r1", 6), preempt("r1", 8)],
                 block_size=B, num_blocks=4, prefill_chunk=2)
    assert preempted(s) == [(1, "r1", 0, 2, 1, "manual"), (4, "r1", 2, 5, 2, "manual"),
                            (6, "r1", 2, 4, 1, "manual"), (8, "r1", 2, 4, 1, "manual")]
    assert rows_with_ids(s) == [
        (0, "r1", "prefill", 2, False, [10, 11]),
        (1, "r1", "recompute", 2, False, [10, 11]),
        (2, "r1", "prefill", 2, True, [12, 13]),
        (3, "r1", "decode", 1, True, [20]),
        (4, "r1", "recompute", 2, False, [10, 11]),
        (5, "r1", "recompute", 2, False, [12, 13]),
        (6, "r1", "recompute", 2, False, [10, 11]),
        (7, "r1", "recompute", 2, False, [12, 13]),
        (8, "r1", "recompute", 2, False, [10, 11]),
        (9, "r1", "recompute", 2, False, [12, 13]),
        (10, "r1", "recompute", 1, False, [20]),
        (11, "r1", "decode", 1, True, [21]),
    ]
    r = s.req["r1"]
    assert r.replay_rows == sum(e["rows"] for e in s.of("preempted")) == 15
    assert (r.useful_rows, r.preemptions, r.outputs, r.finished_at) == (6, 4, 3, 12)
    outs = [e["outputs"] for e in s.of("preempted")] + [r.outputs]
    assert outs == sorted(outs)
    assert emitting_rows(s, "r1") == 3
    assert (s.summary["preemptions"], s.summary["replay_rows"],
            s.summary["recompute_tokens"]) == (4, 15, 15)


# --- resume_order ---------------------------------------------------------------------------


@pytest.mark.parametrize("resume_order, order", [
    ("front", [(3, "r2"), (3, "r1"), (9, "r3")]),
    ("arrival", [(3, "r1"), (3, "r2"), (9, "r3")]),
])
def test_resume_order_front_versus_arrival(resume_order, order):
    """2 blocks, release_delay 2; r1, r2 (arrival 0) and r3 (arrival 1), each P=1, N=4 (credit 1).
    r1, r2 run at 0 (emit at 1); at 1 r3 arrives, then r1 and r2 are preempted (1 block each
    drains until 3). Queue: front -> [r2, r1, r3] (each victim prepended); arrival -> [r1, r2,
    r3]. At 1 the head is blocked (0 + 2 + 1 > 2: draining). At 3 both victims are admitted in
    queue order; r3 waits until they finish at 7 and their blocks drain until 9."""
    s = simulate([req("r1", 0, 1, 4), req("r2", 0, 1, 4), req("r3", 1, 1, 4),
                  preempt("r1", 1), preempt("r2", 1)],
                 block_size=B, num_blocks=2, release_delay=2, resume_order=resume_order)
    assert [(t, rid) for t, rid, _, _ in admissions(s)][2:] == order
    head = order[0][1]
    assert [(e["tick"], e["id"], e["reason"]) for e in s.of("admission_blocked")][0] == (
        1, head, "draining")
    assert [(t, rid) for t, rid, *_ in preempted(s)] == [(1, "r1"), (1, "r2")]
    assert (s.req["r1"].finished_at, s.req["r2"].finished_at, s.req["r3"].finished_at) == (7, 7, 13)


def test_serial_resumes_victim_before_the_waiting_request():
    """serial, 8 blocks: r1 (P=4, N=3) runs, r2 (P=4, N=1) waits (reason serial). Preempt r1 at 1
    (k=1): it goes to the front and is re-admitted at 1 (recompute 4 rows at 1, decodes at 2
    and 3, finished 4); r2 is admitted at 4 and finishes at 5."""
    s = simulate([req("r1", 0, 4, 3), req("r2", 0, 4, 1), preempt("r1", 1)],
                 policy="serial", block_size=B, num_blocks=8)
    assert admissions(s) == [(0, "r1", 2, False), (1, "r1", 2, True), (4, "r2", 1, False)]
    assert {e["reason"] for e in s.of("admission_blocked")} == {"serial"}
    assert s.dispatches() == [(0, [("r1", "prefill", 4, True)]),
                              (1, [("r1", "recompute", 4, False)]),
                              (2, [("r1", "decode", 1, True)]),
                              (3, [("r1", "decode", 1, True)]),
                              (4, [("r2", "prefill", 4, True)])]


# --- A4: credit back at once, blocks after release_delay; L6 ----------------------------------


def test_preempted_blocks_drain_for_release_delay_while_credit_returns_at_once():
    """P=5, N=3, 2 blocks (credit ceil(7/4)=2), release_delay 3. t0 prefill 5 rows (2 blocks)
    emits at 1. Preempt at 1: outputs 1, rows 5, blocks_freed 2; credit back at once
    (reserved 0) but the blocks drain until 1+3 = 4, so r1 is blocked (draining: 0+2+2 > 2,
    0+2 <= 2). Nothing happens at 2 and 3. At 4: released 2, re-admitted, recompute 5; decodes
    at 5 and 6; finished 7; its 2 blocks are released at 10."""
    s = simulate([req("r1", 0, 5, 3), preempt("r1", 1)],
                 block_size=B, num_blocks=2, release_delay=3)
    assert preempted(s) == [(1, "r1", 1, 5, 2, "manual")]
    assert [(e["tick"], e["reason"], e["needed"], e["free"], e["reserved"], e["draining"])
            for e in s.of("admission_blocked")] == [(1, "draining", 2, 0, 0, 2)]
    assert released(s) == [(4, 2), (10, 2)]
    assert sorted({e["tick"] for e in s.events}) == [0, 1, 4, 5, 6, 7, 10]
    assert admissions(s) == [(0, "r1", 2, False), (4, "r1", 2, True)]
    snap = s.at(4, "snapshot")[0]
    assert (snap["reserved"], snap["allocated"], snap["draining"], snap["free"]) == (2, 0, 0, 2)
    assert s.dispatches()[1:] == [(4, [("r1", "recompute", 5, False)]),
                                  (5, [("r1", "decode", 1, True)]),
                                  (6, [("r1", "decode", 1, True)])]


def test_latency_and_lost_work_are_reported_apart():
    """L6, same run as above: latency keeps the first admission (0) and first token (1):
    queue delay 0, TTFT 1, end-to-end 7; work: useful rows 7 = P+N-1, replayed 5,
    recompute tokens 5, prompt tokens 5, decode tokens 2, 4 dispatches."""
    s = simulate([req("r1", 0, 5, 3), preempt("r1", 1)],
                 block_size=B, num_blocks=2, release_delay=3)
    r = s.req["r1"]
    assert (r.admitted_at, r.first_token_at, r.finished_at) == (0, 1, 7)
    sm = s.summary
    assert (sm["queue_delay_mean"], sm["ttft_mean"], sm["e2el_mean"]) == (0, 1, 7)
    assert (sm["useful_rows"], sm["replay_rows"], sm["recompute_tokens"]) == (7, 5, 5)
    assert (sm["prompt_tokens"], sm["decode_tokens"], sm["iterations"]) == (5, 2, 4)
    assert sm["preemptions"] == 1


# --- A5 / L5 at the allocator level -------------------------------------------------------------


def _counts(a: BlockAllocator) -> tuple[int, int, int]:
    a.audit()
    assert a.held + a.draining + a.free == a.num_blocks
    return a.held, a.draining, a.free


def test_l5_pinned_transfer_blocks_stay_until_the_drain_is_acknowledged():
    """L5, 4 blocks: the producer holds 2 (8 rows), the consumer the other 2; a transfer pins
    all 4. Freeing the producer (preempt) and the consumer (abort) drains nothing: free stays 0.
    unpin at 5 with delay 2 starts all 4 draining; release at 6 frees none, at 7 all 4."""
    a = BlockAllocator(4, B)
    assert a.try_grow("producer", 8) is True
    assert a.try_grow("consumer", 8) is True
    assert _counts(a) == (4, 0, 0)
    handle = a.pin(a.table("producer") + a.table("consumer"))
    assert a.free_request("producer", now=3, delay=2) == 0
    assert _counts(a) == (4, 0, 0)
    assert a.free_request("consumer", now=4, delay=2) == 0
    assert _counts(a) == (4, 0, 0)
    assert a.release_expired(100) == 0
    assert a.free == 0
    assert a.unpin(handle, now=5, delay=2) == 4
    assert _counts(a) == (0, 4, 0)
    assert a.next_expiry() == 7
    assert a.release_expired(6) == 0
    assert _counts(a) == (0, 4, 0)
    assert a.release_expired(7) == 4
    assert _counts(a) == (0, 0, 4)


def test_l5_admission_sees_pinned_blocks_as_unusable_until_released():
    """L5: after the four-block example (both owners gone, 4 blocks pinned) admission may not
    promise even 1 block: can_reserve(1) is False and free is 0. After unpin at 5 (delay 0,
    free at once) a credit of all 4 blocks fits again."""
    a = BlockAllocator(4, B)
    a.grow("producer", 8)
    a.grow("consumer", 8)
    handle = a.pin(a.table("producer") + a.table("consumer"))
    a.free_request("producer", now=3, delay=0)
    a.free_request("consumer", now=3, delay=0)
    assert a.can_reserve(1) is False
    assert a.can_allocate(1) is False
    assert _counts(a) == (4, 0, 0)
    assert a.unpin(handle, now=5, delay=0) == 4
    assert _counts(a) == (0, 0, 4)
    assert a.can_reserve(4) is True


def test_a5_shared_block_is_counted_once_and_drains_with_its_last_owner():
    """A5, 3 blocks: a holds one block (4 rows), b shares it: held 1, not 2. a frees: 0 blocks
    drain (b still holds it). b frees at 2 with delay 1: 1 block drains, free again at 3."""
    a = BlockAllocator(3, B)
    a.grow("a", 4)
    block = a.table("a")
    a.share("b", block)
    assert a.table("b") == block
    assert _counts(a) == (1, 0, 2)
    assert a.free_request("a", now=1, delay=1) == 0
    assert _counts(a) == (1, 0, 2)
    assert a.table("a") == []
    assert a.free_request("b", now=2, delay=1) == 1
    assert _counts(a) == (0, 1, 2)
    assert a.release_expired(2) == 0
    assert a.release_expired(3) == 1
    assert _counts(a) == (0, 0, 3)


def test_l4_try_grow_that_cannot_get_every_block_takes_none():
    """L4, 4 blocks: y holds 3 (12 rows), x holds 0. x needs 2 blocks for 8 rows, only 1 is
    free: try_grow returns False and x's table, free (1) and held (3) are unchanged. Growing x
    to 4 rows (1 block) then succeeds; growing it to 8 rows (1 more, 0 free) fails again and
    leaves its single block in place."""
    a = BlockAllocator(4, B)
    a.grow("y", 12)
    assert _counts(a) == (3, 0, 1)
    assert a.try_grow("x", 8) is False
    assert a.table("x") == []
    assert _counts(a) == (3, 0, 1)
    assert a.try_grow("x", 4) is True
    table = list(a.table("x"))
    assert len(table) == 1
    assert _counts(a) == (4, 0, 0)
    assert a.try_grow("x", 8) is False
    assert a.table("x") == table
    assert _counts(a) == (4, 0, 0)


# --- L1 / L2 on the Request object ---------------------------------------------------------------


def _request() -> Request:
    return Request("r", 0, 0, 3, 3, prompt_token_ids=[10, 11, 12],
                   output_token_ids=[20, 21, 22])


def test_terminal_states_order_after_preempted():
    """L1: WAITING < RUNNING < PREEMPTED < WAITING_FOR_REMOTE_KV < every terminal state;
    is_finished is that comparison."""
    assert S.WAITING < S.RUNNING < S.PREEMPTED < S.WAITING_FOR_REMOTE_KV
    terminal = [s for s in S if s > S.WAITING_FOR_REMOTE_KV]
    assert [s.label for s in terminal] == [
        "finished_stopped", "finished_length_capped", "finished_aborted", "finished_ignored",
        "finished_timeout", "finished_error"]
    assert all(s.is_finished for s in terminal)
    assert not any(s.is_finished for s in (S.WAITING, S.RUNNING, S.PREEMPTED,
                                            S.WAITING_FOR_REMOTE_KV))


def test_preempt_of_a_waiting_request_object_raises():
    """L1: preempt asserts its start state: from WAITING it raises InvariantError naming both states."""
    r = _request()
    with pytest.raises(InvariantError, match="cannot preempt from waiting"):
        r.preempt()
    assert (r.status, r.preemptions) == (S.WAITING, 0)


@pytest.mark.parametrize("setup, action", [
    ("preempted", "preempt"),       # already preempted
    ("running", "admit"),           # admitted twice
    ("waiting", "finish"),          # finish before running
    ("preempted", "finish"),        # finish while suspended
    ("aborted", "cancel"),          # cancel twice at object level
    ("aborted", "admit"),           # a cancelled request cannot resume (L4)
    ("running", "time_out"),        # only waiting/preempted time out
    ("running", "reject"),          # only waiting is rejected
    ("length_capped", "fail"),      # terminal states stay terminal
])
def test_transitions_from_a_wrong_state_raise(setup, action):
    """L1: each named transition raises InvariantError from a state it does not start from,
    and leaves the status unchanged."""
    r = _request()
    if setup in ("running", "preempted", "aborted", "length_capped"):
        r.admit(0, 0, 2)
    if setup == "preempted":
        r.preempt()
    if setup == "aborted":
        r.cancel(1)
    if setup == "length_capped":
        for _ in range(3):
            r.emit(1)
        r.finish(1)
    before = r.status
    calls = {"preempt": lambda: r.preempt(), "admit": lambda: r.admit(2, 1, 2),
             "finish": lambda: r.finish(2), "cancel": lambda: r.cancel(2),
             "time_out": lambda: r.time_out(2), "reject": lambda: r.reject(2),
             "fail": lambda: r.fail(2)}
    with pytest.raises(InvariantError):
        calls[action]()
    assert r.status is before


def test_request_object_keeps_progress_and_drops_residency_on_preempt():
    """L2/L3 by hand on prompt [10,11,12], outputs [20,21,22]: prefill 3 rows + emit, decode 1
    row + emit -> outputs 2, resident 4 = [10,11,12,20], 21 pending. preempt: resident 0,
    credit 0, outputs 2, preemptions 1, phase recompute of 4 rows that do not emit; after
    rewriting them (replay 4) the next row is a decode [21] that emits."""
    r = _request()
    r.admit(0, 0, 2)
    r.record_rows(3)
    assert r.emit(1) is False
    r.record_rows(1)
    assert r.emit(2) is False
    assert (r.outputs, r.resident, r.committed_rows) == (2, 4, 4)
    assert r.token_ids(0, 4) == [10, 11, 12, 20]
    r.preempt()
    assert (r.status, r.outputs, r.resident, r.credit, r.preemptions) == (S.PREEMPTED, 2, 0, 0, 1)
    assert (r.phase, r.phase_remaining, r.chunk_emits(4)) == ("recompute", 4, False)
    r.admit(2, 1, 2)
    r.record_rows(4)
    assert (r.replay_rows, r.useful_rows) == (4, 4)
    assert (r.phase, r.token_ids(4, 5), r.chunk_emits(1)) == ("decode", [21], True)
    r.record_rows(1)
    assert r.emit(4) is True
    r.finish(4)
    assert (r.status, r.useful_rows, r.replay_rows, r.first_token_at) == (
        S.FINISHED_LENGTH_CAPPED, 5, 4, 1)


# --- the check traces ---------------------------------------------------------------------------


TRACES = sorted((ROOT / "traces").glob("*.jsonl"))


def test_lifecycle_check_traces_exist():
    """The lifecycle check traces this file relies on are present in traces/."""
    names = {p.name for p in TRACES}
    assert {"lifecycle_preempt_after_outputs.jsonl", "lifecycle_preempt_during_prefill.jsonl",
            "lifecycle_preempt_then_cancel.jsonl",
            "lifecycle_preempt_ignored_at_completion.jsonl"} <= names


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_every_trace_passes_check(path: Path):
    """`scheduler-sim check traces/<file>` exits 0 when every expect record of the trace
    holds; a trace with no expect record checks nothing, and that is a failure (exit 1)."""
    out, err = io.StringIO(), io.StringIO()
    status = main(["check", str(path)], out=out, err=err)
    if b'"expect"' not in path.read_bytes():
        assert status == 1 and "nothing was checked" in out.getvalue()
        return
    assert status == 0, out.getvalue() + err.getvalue()
    assert "FAILED" not in out.getvalue()
