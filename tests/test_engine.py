"""The engine's contract (docs/spec.md E1-E8, A1-A4) pinned with tiny hand-computed runs.

Every scenario uses block_size 4 and a handful of blocks; expected ticks, rows,
blocks and event sequences are derived by hand in each docstring.
"""
from __future__ import annotations

import json

import scheduler_sim.policies
from conftest import req, simulate
from scheduler_sim.engine.core import Engine
from scheduler_sim.policies.continuous import ContinuousPolicy

B4 = {"block_size": 4}


def cancel(rid: str, at: int) -> dict:
    """A cancel record."""
    return {"type": "cancel", "id": rid, "at": at}


# The required fields of §11 per event kind (extra fields are allowed and ignored).
REQUIRED = {
    "arrival": ("id",), "rejected": ("id", "reason", "needed", "capacity"),
    "admitted": ("id", "reserved"),
    "admission_blocked": ("id", "reason", "needed", "free", "reserved", "draining"),
    "snapshot": ("waiting", "running", "reserved", "allocated", "draining", "free"),
    "dispatch": ("rows", "tokens", "done"), "finished": ("id", "status"),
    "cancelled": ("id", "state"), "cancel_ignored": ("id", "status"),
    "released": ("blocks",), "stalled": ("id", "reason"),
}


def compact(events: list[dict]) -> list[tuple]:
    """Events as tuples (tick, event, required fields in §11 order), rows as tuples."""
    out = []
    for e in events:
        fields = []
        for k in REQUIRED[e["event"]]:
            v = e[k]
            if k == "rows":
                v = [(r["id"], r["phase"], r["tokens"], r["emits"]) for r in v]
            fields.append(v)
        out.append((e["tick"], e["event"], *fields))
    return out


def snap(waiting, running, reserved, allocated, draining, free) -> dict:
    """The snapshot fields of §11 as a dict."""
    return {"waiting": waiting, "running": running, "reserved": reserved,
            "allocated": allocated, "draining": draining, "free": free}


def snapshot_at(s, tick: int) -> dict:
    """The §11 fields of the one snapshot at `tick`."""
    (e,) = s.at(tick, "snapshot")
    return {k: e[k] for k in REQUIRED["snapshot"]}


# --- rows, chunked prefill and the dispatch shape (§6 continuous) -------------------

def test_chunked_prefill_emits_only_on_last_chunk():
    """P=10, N=2, prefill_chunk=4: chunks 4,4,2 at t0..t2 (only the 2 emits, output 1 at
    t3), then one decode at t3 (output 2 at t4); 10+2-1 = 11 rows written."""
    s = simulate([req("a", 0, 10, 2)], num_blocks=8, token_budget=16, prefill_chunk=4, **B4)
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, False)]),
        (1, [("a", "prefill", 4, False)]),
        (2, [("a", "prefill", 2, True)]),
        (3, [("a", "decode", 1, True)]),
    ]
    a = s.req["a"]
    assert (a.admitted_at, a.first_token_at, a.finished_at) == (0, 3, 4)
    assert (a.useful_rows, a.outputs) == (11, 2)


def test_prefill_completion_does_not_decode_in_same_dispatch():
    """P=2, N=2, budget 16: t0 writes the 2 prompt rows (emits output 1) and nothing more
    although 14 tokens of budget remain; the decode comes at t1, finishing at t2."""
    s = simulate([req("a", 0, 2, 2)], num_blocks=4, token_budget=16, **B4)
    assert s.dispatches() == [(0, [("a", "prefill", 2, True)]), (1, [("a", "decode", 1, True)])]
    assert s.req["a"].finished_at == 2


def test_decodes_first_then_leftover_budget_to_prefill():
    """a: P=12 N=1 (3 blocks), b: P=2 N=3 (ceil(4/4)=1 block), budget 4, chunk 4.
    t0: prefill a 4 (budget gone). t1: prefill rotation starts after a: b 2 (emits),
    a 2. t2: decode b 1, then a min(6,4,3)=3. t3: decode b 1 (b's 3rd output: finished at
    4), a 3 (its last prompt rows: emits, finished at 4). Decode rows precede the prefill
    rows of the older request."""
    s = simulate([req("a", 0, 12, 1), req("b", 0, 2, 3)],
                 num_blocks=4, token_budget=4, prefill_chunk=4, **B4)
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, False)]),
        (1, [("b", "prefill", 2, True), ("a", "prefill", 2, False)]),
        (2, [("b", "decode", 1, True), ("a", "prefill", 3, False)]),
        (3, [("b", "decode", 1, True), ("a", "prefill", 3, True)]),
    ]
    assert (s.req["a"].first_token_at, s.req["a"].finished_at) == (4, 4)
    assert (s.req["b"].first_token_at, s.req["b"].finished_at) == (2, 4)
    assert [e["tokens"] for e in s.of("dispatch")] == [4, 4, 4, 4]


def test_prefill_rotation_when_max_rows_binds():
    """Three P=6 N=1 prompts, chunk 2, max_rows 2: prefill rows rotate AB, CA, BC, AB
    (A, B emit: done at 4), then C alone (emits, done at 5)."""
    s = simulate([req("A", 0, 6, 1), req("B", 0, 6, 1), req("C", 0, 6, 1)],
                 num_blocks=6, token_budget=16, prefill_chunk=2, max_rows=2, **B4)
    assert s.dispatches() == [
        (0, [("A", "prefill", 2, False), ("B", "prefill", 2, False)]),
        (1, [("C", "prefill", 2, False), ("A", "prefill", 2, False)]),
        (2, [("B", "prefill", 2, False), ("C", "prefill", 2, False)]),
        (3, [("A", "prefill", 2, True), ("B", "prefill", 2, True)]),
        (4, [("C", "prefill", 2, True)]),
    ]
    assert [s.req[r].finished_at for r in "ABC"] == [4, 4, 5]


def test_prefill_rotation_when_token_budget_binds():
    """A: P=8 N=2, B, C: P=8 N=1; budget 4, chunk 4. t0 A4, t1 B4, t2 C4, t3 A4 (emits).
    t4: decode A, then prefill resumes after A (last served) with B: min(4,4,3)=3.
    t5: prefill resumes after B with C: 4 (emits). t6: B's last row (emits)."""
    s = simulate([req("A", 0, 8, 2), req("B", 0, 8, 1), req("C", 0, 8, 1)],
                 num_blocks=8, token_budget=4, prefill_chunk=4, **B4)
    assert s.dispatches() == [
        (0, [("A", "prefill", 4, False)]),
        (1, [("B", "prefill", 4, False)]),
        (2, [("C", "prefill", 4, False)]),
        (3, [("A", "prefill", 4, True)]),
        (4, [("A", "decode", 1, True), ("B", "prefill", 3, False)]),
        (5, [("C", "prefill", 4, True)]),
        (6, [("B", "prefill", 1, True)]),
    ]
    assert [s.req[r].finished_at for r in "ABC"] == [5, 7, 6]


def test_decode_rotation_starts_after_last_served():
    """A, B: P=1 N=4; C: P=2 N=3; chunk 1. t0: prefill A, B (emit), C 1 row. t1: decode
    A, B (last served B), prefill C's last row. t2, t3: decode rotation starts after B,
    i.e. with C (admitted later), then wraps: C, A, B. All finish at 4."""
    s = simulate([req("A", 0, 1, 4), req("B", 0, 1, 4), req("C", 0, 2, 3)],
                 num_blocks=6, token_budget=16, prefill_chunk=1, **B4)
    cab = [("C", "decode", 1, True), ("A", "decode", 1, True), ("B", "decode", 1, True)]
    assert s.dispatches() == [
        (0, [("A", "prefill", 1, True), ("B", "prefill", 1, True), ("C", "prefill", 1, False)]),
        (1, [("A", "decode", 1, True), ("B", "decode", 1, True), ("C", "prefill", 1, True)]),
        (2, cab),
        (3, cab),
    ]
    assert [s.req[r].finished_at for r in "ABC"] == [4, 4, 4]


def test_max_rows_decodes_take_every_row_before_prefill():
    """A: P=1 N=3, B, C: P=1 N=2, max_rows 2. t0 prefills A, B (rows full). t1 decodes
    A, B: no row left for C's prefill. B finishes at 2; t2: decode A + prefill C. A
    finishes at 3; t3: decode C, finished at 4."""
    s = simulate([req("A", 0, 1, 3), req("B", 0, 1, 2), req("C", 0, 1, 2)],
                 num_blocks=3, token_budget=16, max_rows=2, **B4)
    assert s.dispatches() == [
        (0, [("A", "prefill", 1, True), ("B", "prefill", 1, True)]),
        (1, [("A", "decode", 1, True), ("B", "decode", 1, True)]),
        (2, [("A", "decode", 1, True), ("C", "prefill", 1, True)]),
        (3, [("C", "decode", 1, True)]),
    ]
    assert [s.req[r].finished_at for r in "ABC"] == [3, 2, 4]


def test_one_token_output_ends_at_prefill_completion():
    """P=6, N=1, chunk 4: chunks 4 (silent) and 2 (emits): finished at 2 with P=6 rows
    written and ceil(6/4)=2 blocks reserved."""
    s = simulate([req("a", 0, 6, 1)], num_blocks=2, prefill_chunk=4, **B4)
    assert s.dispatches() == [(0, [("a", "prefill", 4, False)]),
                              (1, [("a", "prefill", 2, True)])]
    a = s.req["a"]
    assert (a.first_token_at, a.finished_at, a.useful_rows, a.outputs) == (2, 2, 6, 1)
    assert a.status.label == "finished_length_capped"
    assert s.of("admitted")[0]["reserved"] == 2


def test_every_finished_request_writes_p_plus_n_minus_1_rows():
    """Mixed sizes under chunking and a tight budget: for each request the dispatched
    tokens, its useful_rows and the summary's useful_rows all equal P+N-1, and it emits N
    outputs (rows with emits) — sums 11+3+6+1 = 21 rows and 2+3+1+1 = 7 outputs."""
    sizes = {"a": (10, 2), "b": (1, 3), "c": (6, 1), "d": (1, 1)}
    s = simulate([req(r, i, p, n) for i, (r, (p, n)) in enumerate(sizes.items())],
                 num_blocks=6, token_budget=5, prefill_chunk=3, **B4)
    tokens = {r: 0 for r in sizes}
    emits = {r: 0 for r in sizes}
    for _, rows in s.dispatches():
        for rid, _, n, e in rows:
            tokens[rid] += n
            emits[rid] += e
    for rid, (p, n) in sizes.items():
        assert (tokens[rid], s.req[rid].useful_rows, emits[rid], s.req[rid].outputs) == \
            (p + n - 1, p + n - 1, n, n)
    assert (s.summary["useful_rows"], s.summary["output_tokens"]) == (21, 7)
    assert s.summary["completed"] == 4


# --- A1/A2: reservation credits ------------------------------------------------------

def test_a1_reservation_sizes():
    """ceil((P+M-1)/4): P=4,N=1 -> 1; P=1,N=8 -> 2; P=5,N=1 -> 2; P=4,N=2 -> 2;
    P=3,N=2,M=6 -> ceil(8/4) = 2."""
    s = simulate([req("a", 0, 4, 1), req("b", 0, 1, 8), req("c", 0, 5, 1),
                  req("d", 0, 4, 2), req("e", 0, 3, 2, max_tokens=6)], num_blocks=16, **B4)
    assert [(e["id"], e["reserved"]) for e in s.of("admitted")] == \
        [("a", 1), ("b", 2), ("c", 2), ("d", 2), ("e", 2)]


def test_a2_credits_not_pages_blocked_with_free_blocks():
    """Conformance credits_not_pages: num_blocks 2; r1 P=1 N=8 takes a 2-block credit,
    r2 (1 block) waits with reason "reservation" (2+1 > 2 even after draining) at every
    tick 0..7 while free blocks exist: free 2 at t0, 1 while r1 holds <= 4 rows (t1..t4),
    0 from t5. r1 finishes at 8; r2 is admitted at 8, first token and finish at 9."""
    s = simulate([req("r1", 0, 1, 8), req("r2", 0, 1, 1)], num_blocks=2, **B4)
    blocked = [(e["tick"], e["id"], e["reason"], e["needed"], e["free"], e["reserved"],
                e["draining"]) for e in s.of("admission_blocked")]
    frees = [2, 1, 1, 1, 1, 0, 0, 0]
    assert blocked == [(t, "r2", "reservation", 1, f, 2, 0) for t, f in enumerate(frees)]
    r1, r2 = s.req["r1"], s.req["r2"]
    assert (r1.admitted_at, r1.first_token_at, r1.finished_at) == (0, 1, 8)
    assert (r2.admitted_at, r2.first_token_at, r2.finished_at) == (8, 9, 9)
    assert s.summary["iterations"] == 9


def test_snapshots_credits_not_pages_both_policies():
    """Same trace, continuous and serial: at t0 snapshot waiting 1 running 1 reserved 2
    allocated 0 free 2; at t3 r1 holds 3 rows (1 block): allocated 1 free 1; at t8 r2 is
    admitted (credit 1) after r1's 2 blocks were released: allocated 0 free 2. Serial
    blocks r2 with reason "serial"; 9 iterations in both."""
    for policy, reason in (("continuous", "reservation"), ("serial", "serial")):
        s = simulate([req("r1", 0, 1, 8), req("r2", 0, 1, 1)], policy=policy,
                     num_blocks=2, **B4)
        assert snapshot_at(s, 0) == snap(1, 1, 2, 0, 0, 2), policy
        assert snapshot_at(s, 3) == snap(1, 1, 2, 1, 0, 1), policy
        assert snapshot_at(s, 5) == snap(1, 1, 2, 2, 0, 0), policy
        assert snapshot_at(s, 8) == snap(0, 1, 1, 0, 0, 2), policy
        assert {e["reason"] for e in s.of("admission_blocked")} == {reason}
        assert s.summary["iterations"] == 9


def test_serial_vs_continuous_conformance():
    """Conformance serial_vs_continuous: a, b P=4 N=3 (2 blocks each), 8 blocks.
    continuous: both prefill at t0, decode t1, t2: 3 iterations, makespan 3.
    serial: a runs t0..t2 (done 3), b blocked "serial" meanwhile, admitted at 3, runs
    t3..t5: 6 iterations, makespan 6, b first token 4 finish 6."""
    recs = [req("a", 0, 4, 3), req("b", 0, 4, 3)]
    c = simulate(recs, policy="continuous", num_blocks=8, **B4)
    assert c.dispatches() == [
        (0, [("a", "prefill", 4, True), ("b", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (2, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
    ]
    assert (c.summary["iterations"], c.summary["makespan"]) == (3, 3)
    b = c.req["b"]
    assert (b.admitted_at, b.first_token_at, b.finished_at) == (0, 1, 3)
    s = simulate(recs, policy="serial", num_blocks=8, **B4)
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, True)]), (1, [("a", "decode", 1, True)]),
        (2, [("a", "decode", 1, True)]), (3, [("b", "prefill", 4, True)]),
        (4, [("b", "decode", 1, True)]), (5, [("b", "decode", 1, True)]),
    ]
    assert (s.summary["iterations"], s.summary["makespan"]) == (6, 6)
    b = s.req["b"]
    assert (b.admitted_at, b.first_token_at, b.finished_at) == (3, 4, 6)
    assert [(e["tick"], e["reason"], e["needed"], e["free"], e["reserved"])
            for e in s.of("admission_blocked")] == [(0, "serial", 2, 8, 2),
                                                     (1, "serial", 2, 7, 2),
                                                     (2, "serial", 2, 6, 2)]


def test_head_of_line_blocking():
    """3 blocks: a (P=4 N=5, 2 blocks) runs; big (P=8 N=1, 2 blocks) blocks with 2+2 > 3
    and small (1 block) behind it waits although 2+1 <= 3. a finishes at 5 (prefill t0,
    decodes t1..t4); at 5 both big and small are admitted and prefill together."""
    s = simulate([req("a", 0, 4, 5), req("big", 0, 8, 1), req("small", 0, 4, 1)],
                 num_blocks=3, **B4)
    assert [(e["tick"], e["id"], e["reason"]) for e in s.of("admission_blocked")] == \
        [(t, "big", "reservation") for t in range(5)]
    assert [(e["tick"], e["id"]) for e in s.of("admitted")] == [(0, "a"), (5, "big"),
                                                                (5, "small")]
    assert s.dispatches()[-1] == (5, [("big", "prefill", 8, True),
                                      ("small", "prefill", 4, True)])
    assert s.req["small"].finished_at == 6


def test_max_tokens_above_output_tokens():
    """P=3 N=2 M=6: credit ceil(8/4)=2; prefill t0 (emits), decode t1, finished at 2 as
    finished_stopped with 4 rows written."""
    s = simulate([req("a", 0, 3, 2, max_tokens=6)], num_blocks=2, **B4)
    assert s.of("admitted")[0]["reserved"] == 2
    assert s.dispatches() == [(0, [("a", "prefill", 3, True)]), (1, [("a", "decode", 1, True)])]
    a = s.req["a"]
    assert (a.finished_at, a.status.label, a.useful_rows) == (2, "finished_stopped", 4)
    assert (s.summary["finished_stopped"], s.summary["finished_length_capped"]) == (1, 0)


# --- A4: delayed release ---------------------------------------------------------------

def test_delayed_release_and_draining_reason():
    """release_delay 2, 2 blocks: a (P=4 N=1, 1 block) finishes at 1; its block drains
    until 3. b (P=5 N=1, 2 blocks) is blocked at 0 by reservation (1+2 > 2), at 1 by
    draining (0+1+2 > 2 but 0+2 <= 2); nothing happens at 2; at 3 the block is released
    and b admitted at once; b's 2 blocks drain from 4 to 6."""
    s = simulate([req("a", 0, 4, 1), req("b", 0, 5, 1)], num_blocks=2, release_delay=2, **B4)
    assert compact(s.events) == [
        (0, "arrival", "a"), (0, "arrival", "b"), (0, "admitted", "a", 1),
        (0, "admission_blocked", "b", "reservation", 2, 2, 1, 0),
        (0, "snapshot", 1, 1, 1, 0, 0, 2),
        (0, "dispatch", [("a", "prefill", 4, True)], 4, 1),
        (1, "finished", "a", "finished_length_capped"),
        (1, "admission_blocked", "b", "draining", 2, 1, 0, 1),
        (3, "released", 1), (3, "admitted", "b", 2),
        (3, "snapshot", 0, 1, 2, 0, 0, 2),
        (3, "dispatch", [("b", "prefill", 5, True)], 5, 4),
        (4, "finished", "b", "finished_length_capped"),
        (6, "released", 2),
    ]
    assert s.req["b"].admitted_at == 3


# --- E2/E5: cancellation ---------------------------------------------------------------

def test_running_cancel_releases_credit_at_once_blocks_drain():
    """2 blocks, release_delay 2: a (P=1 N=8, credit 2) outputs at 1, 2, 3 and is
    cancelled at 3 (after that completion): credit 2 -> 0 at once, its 1 block drains
    until 5. b (P=4 N=1, 1 block) fits at 3 since 0 + 1 draining + 1 <= 2: admitted and
    dispatched at 3 with snapshot reserved 1 draining 1 free 1."""
    s = simulate([req("a", 0, 1, 8), req("b", 0, 4, 1), cancel("a", 3)],
                 num_blocks=2, release_delay=2, **B4)
    assert compact(s.at(3)) == [
        (3, "cancelled", "a", "running"), (3, "admitted", "b", 1),
        (3, "snapshot", 0, 1, 1, 0, 1, 1),
        (3, "dispatch", [("b", "prefill", 4, True)], 4, 4),
    ]
    a = s.req["a"]
    assert (a.status.label, a.finished_at, a.outputs, a.useful_rows) == \
        ("finished_aborted", 3, 3, 3)
    assert [(e["tick"], e["blocks"]) for e in s.of("released")] == [(5, 1), (6, 1)]
    assert s.summary["finished_aborted"] == 1


def test_queued_cancel_never_admitted():
    """2 blocks: a (P=1 N=8, credit 2) runs; b waits; b cancelled at 2 in state waiting:
    never admitted, no rows, ends finished_aborted at 2."""
    s = simulate([req("a", 0, 1, 8), req("b", 0, 1, 1), cancel("b", 2)], num_blocks=2, **B4)
    assert [(e["tick"], e["id"], e["state"]) for e in s.of("cancelled")] == [(2, "b", "waiting")]
    b = s.req["b"]
    assert (b.admitted_at, b.finished_at, b.status.label, b.useful_rows) == \
        (None, 2, "finished_aborted", 0)
    assert [e["tick"] for e in s.of("admission_blocked")] == [0, 1]


def test_cancel_at_arrival_tick():
    """E2: a arrives at 2 and is cancelled at 2: arrival then cancelled (state waiting),
    never admitted, no dispatch."""
    s = simulate([req("a", 2, 4, 1), cancel("a", 2)], num_blocks=2, **B4)
    assert compact(s.events) == [(2, "arrival", "a"), (2, "cancelled", "a", "waiting")]
    assert s.req["a"].status.label == "finished_aborted"
    assert s.req["a"].admitted_at is None
    assert s.summary["iterations"] == 0


def test_cancel_after_completion_is_ignored():
    """E5: a (P=4 N=1) finishes at 1; a cancel at 3 emits cancel_ignored with its status."""
    s = simulate([req("a", 0, 4, 1), cancel("a", 3)], num_blocks=1, **B4)
    assert compact(s.events[4:]) == [(1, "finished", "a", "finished_length_capped"),
                                     (3, "cancel_ignored", "a", "finished_length_capped")]
    assert s.req["a"].status.label == "finished_length_capped"


def test_completion_wins_over_cancel_at_same_tick():
    """E1 before E2: a (P=4 N=1) completes at 1 and a cancel at 1 comes after it."""
    s = simulate([req("a", 0, 4, 1), cancel("a", 1)], num_blocks=1, **B4)
    assert compact(s.at(1)) == [(1, "finished", "a", "finished_length_capped"),
                                (1, "cancel_ignored", "a", "finished_length_capped")]
    assert s.summary["finished_aborted"] == 0


def test_double_cancel():
    """E5: a (P=1 N=8) cancelled at 2 while running, then again at 4: cancel_ignored with
    status finished_aborted; outputs stay 2 (emitted at 1 and 2)."""
    s = simulate([req("a", 0, 1, 8), cancel("a", 2), cancel("a", 4)], num_blocks=2, **B4)
    assert [(e["tick"], e["event"]) for e in s.events if "cancel" in e["event"]] == \
        [(2, "cancelled"), (4, "cancel_ignored")]
    assert s.of("cancel_ignored")[0]["status"] == "finished_aborted"
    assert (s.req["a"].outputs, s.summary["iterations"]) == (2, 2)


# --- E6: rejection at registration -------------------------------------------------------

def test_e6_over_capacity_rejected_and_next_not_blocked():
    """2 blocks: big P=9 N=1 needs ceil(9/4)=3 > 2: rejected at registration
    (finished_ignored, never admitted); capped (P=1 N=1 M=9) likewise; small P=8 N=1 needs
    exactly 2 and is admitted at 0 right behind them."""
    s = simulate([req("big", 0, 9, 1), req("capped", 0, 1, 1, max_tokens=9),
                  req("small", 0, 8, 1)], num_blocks=2, **B4)
    assert [(e["tick"], e["event"], e.get("id")) for e in s.events[:6]] == [
        (0, "arrival", "big"), (0, "rejected", "big"), (0, "arrival", "capped"),
        (0, "rejected", "capped"), (0, "arrival", "small"), (0, "admitted", "small")]
    for e in s.of("rejected"):
        assert (e["needed"], e["capacity"]) == (3, 2)
        assert isinstance(e["reason"], str) and e["reason"]
    for rid in ("big", "capped"):
        assert (s.req[rid].status.label, s.req[rid].admitted_at) == ("finished_ignored", None)
    assert s.of("admission_blocked") == []
    assert s.req["small"].finished_at == 1
    assert (s.summary["finished_ignored"], s.summary["completed"]) == (2, 1)


# --- E7: idle time is skipped ------------------------------------------------------------

def test_far_arrival_finishes_at_once(monkeypatch):
    """a (P=4 N=3) arriving at 10**9: admitted then, first token +1, finished +3; the only
    events are its 10 records at ticks T..T+3, and the engine steps at the ticks where
    something happens, not at the idle ones before (counted, not timed)."""
    T = 10**9
    stepped_at = []
    step_once = Engine._step_once

    def counting(engine):
        stepped_at.append(engine.now - T)
        return step_once(engine)

    monkeypatch.setattr(Engine, "_step_once", counting)
    s = simulate([req("a", T, 4, 3)], num_blocks=2, **B4)
    assert stepped_at == [0, 1, 2, 3]  # its prompt, two decodes, its finish: no idle tick
    a = s.req["a"]
    assert (a.admitted_at, a.first_token_at, a.finished_at) == (T, T + 1, T + 3)
    assert [(e["tick"] - T, e["event"]) for e in s.events] == [
        (0, "arrival"), (0, "admitted"), (0, "snapshot"), (0, "dispatch"),
        (1, "snapshot"), (1, "dispatch"), (2, "snapshot"), (2, "dispatch"),
        (3, "finished")]


def test_two_far_apart_requests_few_events():
    """a at 0 and b at 2*10**9 (both P=4 N=1): 5 events each (arrival, admitted,
    snapshot, dispatch, finished; with no release delay a freed block is free at once, so
    there is no `released` record), nothing in between; makespan 2*10**9+1."""
    s = simulate([req("a", 0, 4, 1), req("b", 2 * 10**9, 4, 1)], num_blocks=1, **B4)
    assert len(s.events) == 10
    assert sorted({e["tick"] for e in s.events}) == [0, 1, 2 * 10**9, 2 * 10**9 + 1]
    assert (s.summary["makespan"], s.summary["iterations"]) == (2 * 10**9 + 1, 2)


# --- E6b: stalls and empty iterations (stub policies) ------------------------------------

class NeverPolicy(ContinuousPolicy):
    """Admits nothing and schedules nothing: the run can never progress."""

    def schedule(self, now):
        return []


class AdmitOnlyPolicy(ContinuousPolicy):
    """Admits what fits but never dispatches."""

    def schedule(self, now):
        self.admit_waiting()
        return []


class LazyFirstPolicy(ContinuousPolicy):
    """Admits on its first call without dispatching, then behaves as continuous."""

    def __init__(self, options, view):
        super().__init__(options, view)
        self.calls = 0

    def schedule(self, now):
        self.calls += 1
        if self.calls == 1:
            self.admit_waiting()
            return []
        return super().schedule(now)


def test_e6b_stall_waiting_requests(monkeypatch):
    """A policy that never admits: at 0 nothing can change, so both requests end
    finished_error at 0 with one `stalled` event each and result.stalled is True."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "stub", NeverPolicy)
    s = simulate([req("a", 0, 4, 1), req("b", 0, 4, 1)], policy="stub", num_blocks=4, **B4)
    assert s.result.stalled is True
    assert [(e["tick"], e["event"], e.get("id")) for e in s.events] == [
        (0, "arrival", "a"), (0, "arrival", "b"), (0, "stalled", "a"), (0, "stalled", "b")]
    assert all(isinstance(e["reason"], str) and e["reason"] for e in s.of("stalled"))
    assert [(s.req[r].status.label, s.req[r].finished_at) for r in "ab"] == \
        [("finished_error", 0)] * 2
    assert (s.summary["finished_error"], s.summary["iterations"]) == (2, 0)


def test_e6b_stall_after_admission_counts_one_empty_iteration(monkeypatch):
    """Admits a at 0 (credit 1) but never dispatches: t0 is an empty iteration with the
    next boundary at 1; at 1 nothing moves, so a stalls there (running -> finished_error)."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "stub", AdmitOnlyPolicy)
    s = simulate([req("a", 0, 4, 1)], policy="stub", num_blocks=2, **B4)
    assert s.result.stalled is True
    assert [(e["tick"], e["event"]) for e in s.events] == [
        (0, "arrival"), (0, "admitted"), (1, "stalled")]
    assert (s.req["a"].status.label, s.req["a"].finished_at) == ("finished_error", 1)
    assert (s.summary["empty_iterations"], s.summary["iterations"]) == (1, 0)


def test_e6b_empty_iteration_then_normal(monkeypatch):
    """Lazy first call: a admitted at 0 with no dispatch (empty iteration), next boundary
    1 where it prefills (P=4 N=1), finished at 2; not a stall."""
    monkeypatch.setitem(scheduler_sim.policies.POLICIES, "stub", LazyFirstPolicy)
    s = simulate([req("a", 0, 4, 1)], policy="stub", num_blocks=2, **B4)
    assert s.result.stalled is False
    assert compact(s.events) == [
        (0, "arrival", "a"), (0, "admitted", "a", 1),
        (1, "snapshot", 0, 1, 1, 0, 0, 2),
        (1, "dispatch", [("a", "prefill", 4, True)], 4, 2),
        (2, "finished", "a", "finished_length_capped")]
    assert (s.summary["empty_iterations"], s.summary["iterations"]) == (1, 1)
    assert s.req["a"].status.label == "finished_length_capped"


# --- E1-E3: event order within one tick --------------------------------------------------

def test_event_order_within_a_tick():
    """3 blocks, release_delay 1. At 0: a (P=4 N=1, credit 1) and z (P=4 N=2, credit 2)
    admitted; x (P=1 N=8, credit 2) blocked: 3 + 0 + 2 > 3. a finishes at 1, its block
    drains until 2; x still blocked (reserved 2 + draining 1 + 2 > 3; 2 + 2 > 3 so the
    reason is reservation). At 2, in E1-E3 order: z finishes, c arrives, x is cancelled
    while waiting, a's block is released, c (credit 1) is admitted (0 + 2 + 1 <= 3:
    z's 2 blocks drain until 3), snapshot, dispatch."""
    s = simulate([req("a", 0, 4, 1), req("z", 0, 4, 2), req("x", 0, 1, 8),
                  req("c", 2, 4, 1), cancel("x", 2)],
                 num_blocks=3, release_delay=1, **B4)
    assert compact(s.at(2)) == [
        (2, "finished", "z", "finished_length_capped"), (2, "arrival", "c"),
        (2, "cancelled", "x", "waiting"), (2, "released", 1), (2, "admitted", "c", 1),
        (2, "snapshot", 0, 1, 1, 0, 2, 1),
        (2, "dispatch", [("c", "prefill", 4, True)], 4, 3),
    ]
    assert compact(s.at(1, "admission_blocked")) == [
        (1, "admission_blocked", "x", "reservation", 2, 1, 2, 1)]


# --- A3: conservation at every snapshot ---------------------------------------------------

def test_a3_conservation_in_every_snapshot():
    """In a busy run (chunking, cancels, drains) every snapshot has allocated + draining +
    free == 4 and reserved + draining <= 4 (the engine also audits every boundary)."""
    recs = [req("a", 0, 6, 3), req("b", 0, 2, 4), req("c", 1, 5, 2), req("d", 2, 3, 1),
            cancel("b", 3)]
    s = simulate(recs, num_blocks=4, prefill_chunk=3, token_budget=4, release_delay=1, **B4)
    assert len(s.of("snapshot")) == s.summary["iterations"] > 0
    for e in s.of("snapshot"):
        assert e["allocated"] + e["draining"] + e["free"] == 4
        assert e["reserved"] + e["draining"] <= 4


# --- E8: determinism -------------------------------------------------------------------------

def test_e8_two_runs_identical():
    """The same trace and options replayed twice give byte-identical event JSON and
    identical summaries."""
    recs = [req("a", 0, 6, 3), req("b", 0, 2, 4), req("c", 1, 5, 2), req("d", 2, 3, 1),
            cancel("b", 3)]
    opts = dict(num_blocks=4, prefill_chunk=3, token_budget=4, release_delay=1, **B4)
    one, two = simulate(recs, **opts), simulate(recs, **opts)
    assert json.dumps(one.events) == json.dumps(two.events)
    assert one.summary == two.summary
    assert len(one.events) > 20


# --- §12: run summary -------------------------------------------------------------------------

def test_run_summary_by_hand():
    """4 blocks. a (0, P=4 N=3, 2 blocks) prefills at 0. At 1 b (P=2 N=2, 1 block) is
    admitted (3 <= 4), c (P=8 N=1, 2 blocks) blocked (5 > 4); dispatch decode a + prefill
    b. At 2 decodes start after a: b, a; both finish at 3, c admitted at 3, done at 4.
    queue delay [0,0,2]; ttft [1,1,3]; e2el [3,2,3]; tpot a (3-1)/2=1, b (3-2)/1=1;
    ITL: a's outputs at 1, 2, 3 and b's at 2, 3 give gaps [1, 1, 1]; nobody waits for a
    client slot; duration 4 - 0 = 4 ticks, so 3/4 = 0.75 req/tick, input 4+2+8 = 14 tokens
    (3.5/tick), output 3+2+1 = 6 (1.5/tick), total 20 (5/tick);
    rows 1+2+2+1 = 6 over 4 dispatches (1.5), tokens 4+3+2+8 = 17 (4.25); peak reserved 3,
    peak allocated 3 (a 2 blocks for 5 rows + b 1)."""
    s = simulate([req("a", 0, 4, 3), req("b", 1, 2, 2), req("c", 1, 8, 1)],
                 num_blocks=4, **B4)
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True), ("b", "prefill", 2, True)]),
        (2, [("b", "decode", 1, True), ("a", "decode", 1, True)]),
        (3, [("c", "prefill", 8, True)]),
    ]
    expected = {
        "requests": 3, "iterations": 4, "empty_iterations": 0, "makespan": 4,
        "duration": 4, "completed": 3, "finished_stopped": 0, "finished_length_capped": 3,
        "finished_aborted": 0, "finished_ignored": 0, "finished_timeout": 0,
        "finished_error": 0,
        "request_throughput": 0.75, "input_throughput": 3.5, "output_throughput": 1.5,
        "total_token_throughput": 5.0,
        "queue_delay_mean": 0.6667, "queue_delay_p50": 0, "queue_delay_p90": 2,
        "queue_delay_p99": 2, "queue_delay_max": 2,
        "client_wait_mean": 0, "client_wait_p50": 0, "client_wait_p90": 0,
        "client_wait_p99": 0, "client_wait_max": 0,
        "ttft_mean": 1.6667, "ttft_p50": 1, "ttft_p90": 3, "ttft_p99": 3, "ttft_max": 3,
        "tpot_mean": 1, "tpot_p50": 1, "tpot_p90": 1, "tpot_p99": 1, "tpot_max": 1,
        "itl_mean": 1, "itl_p50": 1, "itl_p90": 1, "itl_p99": 1, "itl_max": 1,
        "e2el_mean": 2.6667, "e2el_p50": 3, "e2el_p90": 3, "e2el_p99": 3, "e2el_max": 3,
        "slo_met": None, "slo_attainment": None, "request_goodput": None,
        "deadlines": 0, "deadline_misses": 0,
        "prompt_tokens": 14, "decode_tokens": 3, "recompute_tokens": 0, "padding_rows": 0,
        "output_tokens": 6, "useful_rows": 17, "replay_rows": 0, "cached_tokens": 0, "preemptions": 0,
        "peak_reserved": 3, "peak_allocated": 3,
        "mean_batch_rows": 1.5, "mean_batch_tokens": 4.25, "busy_seconds": None,
        "model_flops": None, "hbm_bytes": None, "model_flops_utilisation": None,
        "hbm_bandwidth_utilisation": None,
    }
    assert s.summary == expected


def test_run_summary_nearest_rank_percentiles():
    """Serial, 1 block, five P=4 N=1 requests at 0: request i is admitted at i and
    finishes at i+1. Queue delays [0..4]: mean 2, p50 rank ceil(2.5)=3 -> 2, p90 rank
    ceil(4.5)=5 -> 4; ttft = e2el = [1..5]: mean 3, p50 3, p90 5; no tpot (N=1)."""
    s = simulate([req(f"r{i}", 0, 4, 1) for i in range(5)], policy="serial",
                 num_blocks=1, **B4)
    got = {k: s.summary[k] for k in ("queue_delay_mean", "queue_delay_p50",
                                      "queue_delay_p90", "queue_delay_p99", "ttft_mean",
                                      "ttft_p50", "ttft_p90", "e2el_p50", "e2el_max",
                                      "tpot_mean", "makespan", "mean_batch_tokens")}
    assert got == {"queue_delay_mean": 2, "queue_delay_p50": 2, "queue_delay_p90": 4,
                   "queue_delay_p99": 4, "ttft_mean": 3, "ttft_p50": 3, "ttft_p90": 5,
                   "e2el_p50": 3, "e2el_max": 5, "tpot_mean": None, "makespan": 5,
                   "mean_batch_tokens": 4}
