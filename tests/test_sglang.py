"""The `sglang` policy: new_token_ratio admission, prefill-first batches, chunking,
retraction by fewest outputs then longest prompt, the ratio's jump and decay, the
retracted request's place at the tail of the queue (§6, README "sglang")."""
from __future__ import annotations

from conftest import req, simulate

from scheduler_sim.kv.radix_cache import RadixCache

# The constants the policy takes from SGLang: init 0.7 x conservativeness, min = init x 0.14,
# decay (init - min) / 600 per decode step without a retraction.


def ratio_values(s, reason: str = "decay") -> list[tuple[int, float]]:
    """(tick, value) of the `ratio` events with one reason."""
    return [(e["tick"], e["value"]) for e in s.of("ratio") if e["reason"] == reason]


# --- the ratio's decay -------------------------------------------------------------------


def test_ratio_decays_from_0_7_to_0_5997_after_100_decode_steps():
    """One request (P=4, N=101, B=4, 28 blocks: 4 + 101 + one block of 4 = 109 < 112
    tokens, so it can be admitted): a prefill at 0, then 100 decode steps
    at ticks 1..100, each lowering the ratio by (0.7 - 0.098)/600 = 0.00100333: 0.698997
    after the first, 0.649833 after 50, 0.599667 (0.5997) after 100, each `ratio` event
    {reason decay} rounded to 6 decimals; the prefill step emits none."""
    s = simulate([req("a", 0, 4, 101)], policy="sglang", block_size=4, num_blocks=28)
    values = ratio_values(s)
    assert len(values) == 100
    assert [t for t, _ in values] == list(range(1, 101))
    assert values[0] == (1, 0.698997)
    assert values[49] == (50, 0.649833)
    assert values[99] == (100, 0.599667)
    assert round(values[99][1], 4) == 0.5997
    for k, (_, v) in enumerate(values, start=1):
        assert abs(v - (0.7 - k * 0.602 / 600)) < 1e-6
    assert ratio_values(s, "retract") == []
    assert s.req["a"].finished_at == 101


def test_schedule_conservativeness_scales_the_start_and_the_floor():
    """Conservativeness 0.5: init 0.35, min 0.049, decay 0.301/600: the first decode step
    gives 0.349498; after 600 steps (tick 600) the ratio reaches 0.049 and the 99 later
    decode steps of this P=4, N=700 request emit no more `ratio` events."""
    s = simulate([req("a", 0, 4, 700)], policy="sglang", block_size=4, num_blocks=200,
                 schedule_conservativeness=0.5)
    values = ratio_values(s)
    assert values[0] == (1, 0.349498)
    assert len(values) == 600
    assert values[-1] == (600, 0.049)
    assert min(v for _, v in values) == 0.049
    assert s.summary["iterations"] == 700


# --- admission -------------------------------------------------------------------------------


def admission_run(conservativeness: float):
    """a (P=4, N=M=20) at 0, b (P=4, N=M=4) at 1; B=4, 8 blocks (a asks 4 + 20 + 4 = 28
    < 32 tokens)."""
    return simulate([req("a", 0, 4, 20), req("b", 1, 4, 4)], policy="sglang", block_size=4,
                    num_blocks=8, schedule_conservativeness=conservativeness)


def test_the_ratio_decides_whether_a_request_is_admitted_against_a_running_one():
    """At tick 1, a holds 1 block (its 4 prompt rows) and has 1 output; no decode step has
    run, so the ratio is still init. Free tokens 7 x 4 = 28; a is expected to need ratio x
    min(20 - 1, 4096) more; b asks 4 + min(4, 4096) + one block of 4 = 12.
    Conservativeness 1.0: 28 - 0.7 x 19 = 14.7 > 12, b is admitted at 1 and prefilled
    there (prefill before decode). Conservativeness 1.3: 28 - 0.91 x 19 = 10.71 < 12:
    `admission_blocked` {b, no_token, needed ceil(12/4)=3, free 7}, and tick 1 decodes a
    instead."""
    s = admission_run(1.0)
    assert [(e["tick"], e["id"]) for e in s.of("admitted")] == [(0, "a"), (1, "b")]
    assert s.dispatches()[1] == (1, [("b", "prefill", 4, True)])
    assert s.of("admission_blocked") == []
    s = admission_run(1.3)
    blocked = s.at(1, "admission_blocked")
    assert blocked == [{"tick": 1, "event": "admission_blocked", "id": "b", "reason": "no_token",
                        "needed": 3, "free": 7, "reserved": 0, "draining": 0}]
    assert s.at(1, "admitted") == []
    assert s.dispatches()[1] == (1, [("a", "decode", 1, True)])
    assert s.req["b"].admitted_at > 1


def test_max_rows_and_token_budget_stop_admission_with_their_own_reasons():
    """a and b (P=4 each) at 0, 16 blocks. max_rows 1: a is admitted, b is blocked with
    reason max_rows (at 0, 1 and 2) and admitted when a finishes at 3 (P=4, N=3). With
    token_budget 4, a's prefill uses the whole budget: b is blocked token_budget at 0 and
    admitted at 1, prefilled alone; both then decode together at 2."""
    s = simulate([req("a", 0, 4, 3), req("b", 0, 4, 2)], policy="sglang", block_size=4,
                 num_blocks=16, max_rows=1)
    assert [(e["tick"], e["reason"]) for e in s.of("admission_blocked")] == [
        (0, "max_rows"), (1, "max_rows"), (2, "max_rows")]
    assert s.req["b"].admitted_at == 3
    s = simulate([req("a", 0, 4, 3), req("b", 0, 4, 2)], policy="sglang", block_size=4,
                 num_blocks=16, token_budget=4)
    assert [(e["tick"], e["id"], e["reason"]) for e in s.of("admission_blocked")] == [
        (0, "b", "token_budget")]
    assert s.dispatches()[:3] == [(0, [("a", "prefill", 4, True)]),
                                  (1, [("b", "prefill", 4, True)]),
                                  (2, [("a", "decode", 1, True), ("b", "decode", 1, True)])]


def test_rejected_at_arrival_when_prompt_plus_clipped_max_tokens_exceeds_the_pool():
    """4 blocks of 4 = 16 tokens, and SGLang admits only what fits strictly, with one block
    of alignment overhead: a (P=4, N=1, M=8) asks 4 + 8 + 4 = 16, not less than 16, so it
    could never pass admission alone and is rejected at arrival (needed (4 + 8) // 4 + 2
    = 5), though its 4 rows would fit; b (P=4, N=1, M=7) asks 15 < 16 and completes at
    1."""
    s = simulate([req("a", 0, 4, 1, max_tokens=8), req("b", 0, 4, 1, max_tokens=7)],
                 policy="sglang", block_size=4, num_blocks=4)
    rejected = s.of("rejected")
    assert [(e["id"], e["needed"], e["capacity"]) for e in rejected] == [("a", 5, 4)]
    assert s.req["a"].status.label == "finished_ignored"
    assert (s.req["b"].status.label, s.req["b"].finished_at) == ("finished_stopped", 1)


def test_admission_at_arrival_counts_the_prompt_in_whole_pages():
    """docs/spec.md E6, the `sglang` row: the prompt counts in whole pages. 4 pages of 4 =
    16 tokens: a (P=3, N=1, M=8) asks ceil(3 / 4) x 4 + 8 + 4 = 16, not less than 16,
    so it is rejected at arrival (needed floor((4 + 8) / 4) + 2 = 5), though 3 + 8 + 4
    = 15 would pass token by token (as it did before SGLang's pages were modelled);
    b (P=3, N=1, M=7) asks 15 and completes at 1."""
    s = simulate([req("a", 0, 3, 1, max_tokens=8), req("b", 0, 3, 1, max_tokens=7)],
                 policy="sglang", block_size=4, num_blocks=4)
    assert [(e["id"], e["needed"], e["capacity"]) for e in s.of("rejected")] == [("a", 5, 4)]
    assert s.req["a"].status.label == "finished_ignored"
    assert (s.req["b"].status.label, s.req["b"].finished_at) == ("finished_stopped", 1)


def test_a_request_whose_total_equals_what_is_left_gets_no_token():
    """8 blocks of 4. At 1 a (P=4, N=11) has 1 output: free 7 blocks = 28 tokens, minus
    0.7 x (11 - 1) = 7 reserved for a: 21 left; b (P=4, N=17) asks 4 + 17 = 21, not less:
    no_token at 1, and a decodes instead."""
    s = simulate([req("a", 0, 4, 11), req("b", 1, 4, 17)], policy="sglang", block_size=4,
                 num_blocks=8)
    (first,) = [e for e in s.at(1) if e["event"] == "admission_blocked"]
    assert (first["id"], first["reason"]) == ("b", "no_token")
    assert s.dispatches()[1] == (1, [("a", "decode", 1, True)])


def test_the_ratio_starts_over_when_the_server_is_idle():
    """a (P=4, N=3) decodes twice (0.7 - 2 x 0.001003 = 0.697993) and ends at 3; b arrives
    at 10 into an idle server: the ratio is reset to 0.7 (`ratio` {0.7, idle}) before b
    is admitted."""
    s = simulate([req("a", 0, 4, 3), req("b", 10, 4, 2)], policy="sglang", block_size=4,
                 num_blocks=8)
    ratios = [(e["tick"], e["value"], e["reason"]) for e in s.of("ratio")]
    assert ratios[:3] == [(1, 0.698997, "decay"), (2, 0.697993, "decay"), (10, 0.7, "idle")]


def test_one_chunked_prefill_at_a_time_continued_first_and_alone():
    """B=4, prefill_chunk 4, a (P=10, N=2) and b (P=2, N=2) at 0: tick 0 prefills a's
    first 4 rows (no output) and b joins no batch while a is chunked; tick 1 a's next 4
    rows, alone; tick 2 a's last 2 rows (emits), alone too: SGLang charges an extend in
    whole pages, so those 2 rows spend the chunk's 4 tokens; b is prefilled at 3; tick 4
    decodes both; both finish at 5 (SGLang 0.5.23 at page_size 4 makes these steps)."""
    s = simulate([req("a", 0, 10, 2), req("b", 0, 2, 2)], policy="sglang", block_size=4,
                 num_blocks=16, prefill_chunk=4)
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, False)]),
        (1, [("a", "prefill", 4, False)]),
        (2, [("a", "prefill", 2, True)]),
        (3, [("b", "prefill", 2, True)]),
        (4, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
    ]
    assert [(e["tick"], e["id"]) for e in s.of("admitted")] == [(0, "a"), (3, "b")]
    assert (s.req["a"].finished_at, s.req["b"].finished_at) == (5, 5)


def test_a_chunk_under_one_page_cuts_at_the_chunk_but_never_past_the_prompt():
    """Pages of 4, prefill_chunk 3 (under a page: SGLang would never admit past it, so
    the simulator cuts unrounded, as the README's differences say): a (P=2, N=3) is
    prefilled in one 2-row extend at tick 0, not 3 rows (which the engine refuses),
    then decodes at 1 and 2 and finishes at 3."""
    s = simulate([req("a", 0, 2, 3)], policy="sglang", block_size=4, num_blocks=400,
                 prefill_chunk=3)
    assert s.dispatches() == [(0, [("a", "prefill", 2, True)]),
                              (1, [("a", "decode", 1, True)]),
                              (2, [("a", "decode", 1, True)])]
    assert s.req["a"].finished_at == 3


def test_a_token_budget_under_one_page_cuts_there_too():
    """Pages of 4, token_budget 3, prefill_chunk 8: each pass's limit is 3, under a page,
    so a (P=10, N=3) is prefilled 3, 3, 3, then 1 (the rest, which emits) at ticks 0-3,
    decodes at 4 and 5 and finishes at 6, where rounding down to whole pages would take
    nothing and stall."""
    s = simulate([req("a", 0, 10, 3)], policy="sglang", block_size=4, num_blocks=400,
                 token_budget=3, prefill_chunk=8)
    assert s.dispatches() == [(0, [("a", "prefill", 3, False)]),
                              (1, [("a", "prefill", 3, False)]),
                              (2, [("a", "prefill", 3, False)]),
                              (3, [("a", "prefill", 1, True)]),
                              (4, [("a", "decode", 1, True)]),
                              (5, [("a", "decode", 1, True)])]
    assert s.req["a"].finished_at == 6


# --- retraction ----------------------------------------------------------------------------


def order_run():
    """The retraction-order scenario: B=4, 9 blocks, conservativeness 0.01 (ratio 0.007:
    running requests reserve almost nothing), release_delay 0.
      a P=5 N=14 at 0;  b P=2 N=9 at 3;  c P=3 N=7 at 4;  d P=3 N=7 at 5.
    t0 prefills a (2 blocks), t1-t2 decode it: 3 outputs. t3, t4, t5 prefill b, c, d (1
    block each; each asks P + N <= 11 tokens of >= 20 free), one per step, decodes
    waiting: each has 1 output at 6, a still 3. t6-t10 decode all four; new blocks at t7
    (a at 8 rows, c and d at 4: 3 blocks, 1 free left) and t8 (b at 4 rows: 0 free).
    t11: outputs a 8, b, c, d 6 each; rows a 12, b 7, c 8, d 8: a, c and d need a block,
    need 3 > free 0. Keep preference (-outputs, prompt), stable on admission order: a (8
    outputs, though the longest prompt), b (P=2), c (P=3), d (P=3, admitted after c).
    The victim is d; its 2 blocks make need 2 <= free 2, so a, b, c decode at 11. The
    ratio becomes min(1, (8 + 6 + 6 + 20 x 3) / (14 + 9 + 7 + 1)) = min(1, 80/31) = 1.
    c ends at 12, b at 14; at 12 d asks (3 + 6) + (7 - 6) + one block of 4 = 14 tokens
    (needed 4 blocks) against 3 x 4 - (5 + 2) = 5: no_token, and SGLang's latch keeps
    admission shut at 13 (`batch_full`) until a running request leaves. At 14 (b ends; 5
    free blocks, only a running with 3 left) d is admitted and recomputes 3 + 6 = 9 rows in
    one pass, emitting output 7: it finishes at 15; a finishes at 18."""
    recs = [req("a", 0, 5, 14), req("b", 3, 2, 9), req("c", 4, 3, 7), req("d", 5, 3, 7)]
    return simulate(recs, policy="sglang", block_size=4, num_blocks=9,
                    schedule_conservativeness=0.01)


def test_retraction_victim_fewest_outputs_then_longest_prompt_then_latest_admitted():
    """See order_run: at tick 11 the victim is d (`preempted` {outputs 6, rows 8,
    blocks_freed 2, reason retract, rule fewest-outputs}), not a (longest prompt, more
    outputs), b (shorter prompt) or c (same outputs and prompt, admitted earlier); the
    same tick decodes a, b, c."""
    s = order_run()
    assert s.of("preempted") == [
        {"tick": 11, "event": "preempted", "id": "d", "outputs": 6, "rows": 8,
         "blocks_freed": 2, "reason": "retract", "rule": "fewest-outputs"}]
    assert ratio_values(s, "retract") == [(11, 1.0)]
    assert s.dispatches()[10:12] == [
        (10, [("a", "decode", 1, True), ("b", "decode", 1, True), ("c", "decode", 1, True),
              ("d", "decode", 1, True)]),
        (11, [("a", "decode", 1, True), ("b", "decode", 1, True), ("c", "decode", 1, True)]),
    ]
    assert s.at(11, "snapshot")[0]["free"] == 2
    assert [(e["tick"], e["id"], e["reason"], e["needed"])
            for e in s.of("admission_blocked")] == [
        (12, "d", "no_token", 4), (13, "d", "batch_full", 0)]
    assert [(e["tick"], e["id"], e["resumed"]) for e in s.of("admitted")][-1] == (14, "d", True)
    assert s.dispatches()[14] == (14, [("d", "recompute", 9, True)])
    got = {rid: (r.finished_at, r.preemptions, r.useful_rows, r.replay_rows)
           for rid, r in s.req.items()}
    assert got == {"a": (18, 0, 18, 0), "b": (14, 0, 10, 0), "c": (12, 0, 9, 0),
                   "d": (15, 1, 9, 8)}


def test_the_requests_kept_after_a_retraction_run_in_retraction_order():
    """B=1, 30 blocks, conservativeness 0.1. x (P=6) and y (P=2), N=8, are prefilled
    together at 0 (6 + 8 + 1 = 15, then 2 + 8 + 1 = 11 of 30 tokens), z (P=6, N=8) at 1
    (15 < 22 - 0.07 x 14). They decode at 2-6, 3 blocks a step: 29 held, 1 free. At 7 the
    step needs 3: all have 6 outputs, so the keep order is the shorter prompt first, then
    admission: y, x, z; z is retracted, and y and x decode in that order, y's row first,
    at 7 and 8 (SGLang filters its running batch in retraction order: 0.5.23 dispatches
    [y, x]); z recomputes 6 + 6 = 12 rows at 9."""
    s = simulate([req("x", 0, 6, 8), req("y", 0, 2, 8), req("z", 1, 6, 8)], policy="sglang",
                 block_size=1, num_blocks=30, schedule_conservativeness=0.1)
    assert [(e["tick"], e["id"]) for e in s.of("preempted")] == [(7, "z")]
    assert s.dispatches()[6:10] == [
        (6, [("x", "decode", 1, True), ("y", "decode", 1, True), ("z", "decode", 1, True)]),
        (7, [("y", "decode", 1, True), ("x", "decode", 1, True)]),
        (8, [("y", "decode", 1, True), ("x", "decode", 1, True)]),
        (9, [("z", "recompute", 12, True)])]


def ratio_run():
    """The ratio scenario: B=4, 17 blocks, conservativeness 0.01 (init 0.007, min
    0.00098, decay 0.00602/600 = 0.0000100333 per decode step), release_delay 0. Every
    admission also claims one block (4 tokens) of alignment overhead.
      a P=1 N=30 M=59 at 0 (1 + 59 + 4 = 64 < 68 tokens; its prompt in whole pages, 4 + 59
    + 4 = 67, too);  v P=52 N=6 at 4;  w P=1 N=1 at 6.
    t0 prefills a, t1-t3 decode it (4 rows, 1 block; 4 outputs). t4: v asks 52 + 6 + 4 =
    62 < 16 x 4 - 0.007 x 55: admitted, its prefill takes 13 blocks (3 free). t5 decodes a
    and v, both at a full block: 1 free left. t6: w asks 1 + 1 + 4 = 6 tokens, more than
    4 - 0.007 x 80: no_token; SGLang's latch then keeps admission shut (`batch_full`) at
    7, 8 and 9. t9: outputs a 8, v 5; rows a 8, v 56: need 2 > free 1; v (fewer outputs)
    is retracted, freeing 14 blocks, and queues behind w. The ratio becomes min(1, (8 +
    20) / (59 + 1)) = 28/60 = 0.466667; a decodes at 9.
    t10: w asks 6 < 14 x 4 - 0.466667 x 50 = 32.67: admitted and prefilled (a prefill
    step: no decay); v then asks (52 + 5) + 1 + 4 = 62 > 26.67: no_token, needed 16.
    Had v gone to the front, it would have blocked w. w ends at 11. From 11 a decodes
    alone, the ratio decaying 0.466657, 0.466647, ...; a's remaining need keeps v out
    until a ends at 32 (30 outputs, finished_stopped); v then recomputes 52 + 5 = 57 rows
    in one pass, emitting output 6, and finishes at 33."""
    recs = [req("a", 0, 1, 30, max_tokens=59), req("v", 4, 52, 6), req("w", 6, 1, 1)]
    return simulate(recs, policy="sglang", block_size=4, num_blocks=17,
                    schedule_conservativeness=0.01)


def test_ratio_after_a_retraction_is_the_kept_requests_estimate_then_decays():
    """See ratio_run: the retraction at 9 sets the ratio to 28/60 (`ratio` {0.466667,
    retract}); the decode steps from 11 lower it by 0.0000100333 each (0.466657,
    0.466647); the prefill step at 10 does not."""
    s = ratio_run()
    assert [(e["tick"], e["id"], e["outputs"], e["rows"], e["blocks_freed"])
            for e in s.of("preempted")] == [(9, "v", 5, 56, 14)]
    assert ratio_values(s, "retract") == [(9, 0.466667)]
    after = [(t, v) for t, v in ratio_values(s) if t >= 9]
    assert after[:2] == [(11, 0.466657), (12, 0.466647)]
    assert [t for t, _ in after] == list(range(11, 32))
    assert ratio_values(s)[:2] == [(1, 0.00699), (2, 0.00698)]


def test_a_retraction_record_gives_the_ratio_before_the_jump_and_the_requests_retracted():
    """See ratio_run: before the jump at 9 the ratio had decayed at the 7 decode steps 1-3
    and 5-8 to 0.007 - 7 x 0.0000100333 = 0.00693, and the step retracted 1 request (v):
    the record reads as SGLang's warning `#retracted_reqs: 1, #new_token_ratio: 0.0069 ->
    0.4667`; decay records carry neither field."""
    s = ratio_run()
    assert [e for e in s.of("ratio") if e["reason"] == "retract"] == [
        {"tick": 9, "event": "ratio", "value": 0.466667, "reason": "retract",
         "previous": 0.00693, "retracted": 1}]
    assert {tuple(e) for e in s.of("ratio") if e["reason"] == "decay"} == {
        ("tick", "event", "value", "reason")}


def test_a_retracted_request_rejoins_the_waiting_queue_at_its_tail():
    """See ratio_run: w waits from 6; v, retracted at 9, queues behind it, so at 10 w is
    admitted and v (the head under a front-of-queue rule) is blocked no_token, needed 16."""
    s = ratio_run()
    assert [(e["tick"], e["id"]) for e in s.of("admission_blocked") if e["tick"] <= 9] == [
        (6, "w"), (7, "w"), (8, "w"), (9, "w")]
    assert [e["id"] for e in s.at(10, "admitted")] == ["w"]
    assert [(e["id"], e["reason"], e["needed"]) for e in s.at(10, "admission_blocked")] == [
        ("v", "no_token", 16)]
    assert s.dispatches()[10] == (10, [("w", "prefill", 1, True)])
    assert s.req["w"].finished_at == 11


def test_a_retracted_request_recomputes_prompt_and_outputs_in_one_pass():
    """See ratio_run: v is readmitted (resumed) at 32 and recomputes its prompt and its 5
    outputs, 57 rows, in one recompute row that emits output 6; it finishes at 33 with
    useful rows P + N - 1 = 57 and the 56 rows it held replayed."""
    s = ratio_run()
    assert [(e["tick"], e["id"], e["resumed"]) for e in s.of("admitted")] == [
        (0, "a", False), (4, "v", False), (10, "w", False), (32, "v", True)]
    assert s.dispatches()[-1] == (32, [("v", "recompute", 57, True)])
    v = s.req["v"]
    assert (v.finished_at, v.outputs, v.useful_rows, v.replay_rows, v.preemptions) == (
        33, 6, 57, 56, 1)
    a = s.req["a"]
    assert (a.finished_at, a.status.label, a.preemptions) == (32, "finished_stopped", 0)


def lone_run():
    """A lone decoder without memory: B=4, 5 blocks, release_delay 10, conservativeness
    0.01 (ratio 0.007, decaying by 0.0000100333 per decode step). a (P=2, N=10) asks 2 +
    10 + 4 = 16 < 20 tokens and is prefilled at 0 (1 block). At 1, z (P=10, N=1) asks 10
    + 1 + 4 = 15 < 4 x 4 - 0.007 x 9 and takes 3 blocks (1 free); it ends at 2 and its
    blocks drain until 12. a decodes at 2..7 (its fifth row takes the last free block at
    4); at 8 it needs a block for row 9, none is free, and a is the only decoder: the
    last request is never retracted, it waits; at 12 the blocks are back, a decodes at
    12, 13 and 14 (outputs 8 to 10) and finishes at 15. The failed decode check at 8
    still re-estimates the ratio over the requests kept (a alone): min(1, (7 + 20) / (10
    + 1)) = 1 (`ratio` {1.0, retract}, as SGLang's caller does even when only one request
    is left); the decode steps at 12, 13 and 14 lower it: 0.99999, 0.99998, 0.99997."""
    return simulate([req("a", 0, 2, 10), req("z", 1, 10, 1)], policy="sglang", block_size=4,
                    num_blocks=5, release_delay=10, schedule_conservativeness=0.01)


def test_the_last_request_is_never_retracted():
    """See lone_run: no `preempted` event; no dispatch between 8 and 11; a decodes at 12,
    13 and 14 and finishes at 15, never preempted; the ratio is re-estimated at 8 (from
    0.00694, retracting none) and decays at 12, 13 and 14."""
    s = lone_run()
    assert s.of("preempted") == []
    decode = ("a", "decode", 1, True)
    assert s.dispatches() == ([(0, [("a", "prefill", 2, True)]), (1, [("z", "prefill", 10, True)])]
                              + [(t, [decode]) for t in (2, 3, 4, 5, 6, 7, 12, 13, 14)])
    a = s.req["a"]
    assert (a.finished_at, a.preemptions, a.replay_rows) == (15, 0, 0)
    assert ratio_values(s, "retract") == [(8, 1.0)]
    # Decayed at the 6 decode steps 2-7 from 0.007; no request retracted.
    assert [(e["previous"], e["retracted"]) for e in s.of("ratio")
            if e["reason"] == "retract"] == [(0.00694, 0)]
    assert [v for t, v in ratio_values(s) if t >= 8] == [0.99999, 0.99998, 0.99997]
    assert s.summary["empty_iterations"] == 0


def test_a_retracted_request_that_waits_too_long_times_out():
    """B=1, 36 blocks, conservativeness 0.1 (ratio 0.07), waiting_timeout 2; a P=4 N=12 at
    0; b P=2 N=8 and c P=3 N=10 at 3; d P=1 N=8 at 5. t0 prefills a, t1-t2 decode it.
    t3: b asks 2 + 8 + 1 = 11 and then c 3 + 10 + 1 = 14 of 36 - 6 - 0.07 x 9 = 29.37
    tokens: both are admitted and prefilled; t4 decodes a, b, c; t5 admits and prefills
    d (1 + 8 + 1 = 10 < 22 - 0.0697 x 24). t6-t10 decode all four. t11: the rows need 4
    blocks, 1 is free: the victim is d (6 outputs, fewer than b's and c's 7), freeing
    its 6 blocks; the ratio jumps to 1. t12: b ends; d asks (1 + 6) + 2 + 1 = 10 tokens
    against 13 free blocks less 1.0 x (2 + 2) for a and c: no_token (needed 10), and
    SGLang's latch keeps admission shut at 13 (`batch_full`); SGLang 0.5.23 makes these
    steps. At 14 a and c end (E1), and d, waiting since 11, has waited 3 > 2: it times
    out (`timeout` {d, waited 3}, finished_timeout, after 1 preemption)."""
    s = simulate([req("a", 0, 4, 12), req("b", 3, 2, 8), req("c", 3, 3, 10), req("d", 5, 1, 8)],
                 policy="sglang", block_size=1, num_blocks=36, schedule_conservativeness=0.1,
                 waiting_timeout=2)
    assert [(e["tick"], e["id"], e["outputs"], e["blocks_freed"])
            for e in s.of("preempted")] == [(11, "d", 6, 6)]
    assert [(e["tick"], e["id"], e["reason"], e["needed"])
            for e in s.of("admission_blocked")] == [(12, "d", "no_token", 10),
                                                     (13, "d", "batch_full", 0)]
    assert s.of("timeout") == [{"tick": 14, "event": "timeout", "id": "d", "waited": 3}]
    d = s.req["d"]
    assert (d.status.label, d.finished_at, d.preemptions, d.outputs) == (
        "finished_timeout", 14, 1, 6)
    assert [s.req[r].finished_at for r in "abc"] == [14, 12, 14]
    assert s.summary["finished_timeout"] == 1
    assert s.summary["completed"] == 3


# --- prefix-cache hits inside one admission pass ---------------------------------------------


def test_a_cache_hit_uses_up_the_free_blocks_it_shares_within_the_admission_pass():
    """B=4, 5 blocks (20 tokens), prefix caching; each admission also claims one block
    (4 tokens). s (ids 1..8, N=1) runs at 0 and leaves its 2 full blocks cached (free,
    evictable). At 2, h (ids 1..9, N=2) matches them: it asks (9 - 8) + 2 + 4 = 7 tokens
    and locks the 2 cached blocks, which are no longer free or evictable: 20 - 8 - 7 = 5
    tokens remain, so x (P=4, N=4) asking 4 + 4 + 4 = 12 is blocked no_token (needed
    ceil(12/4) = 3). Counting h's 2 shared blocks as still free (20 - 7 = 13) would
    admit x. The prefill batch at 2 becomes the whole running batch (s has ended), which
    clears SGLang's latch: x is blocked no_token again at 3; h ends at 4 (prefill at 2,
    decode at 3) and x is admitted at 4, when all 20 tokens are back."""
    recs = [req("s", 0, 8, 1, prompt_token_ids=list(range(1, 9))),
            req("h", 2, 9, 2, prompt_token_ids=list(range(1, 10))), req("x", 2, 4, 4)]
    s = simulate(recs, policy="sglang", block_size=4, num_blocks=5, prefix_caching=True)
    assert [(e["id"], e["cached_tokens"]) for e in s.at(2, "admitted")] == [("h", 8)]
    assert [(e["tick"], e["id"], e["reason"], e["needed"])
            for e in s.of("admission_blocked")] == [(2, "x", "no_token", 3),
                                                     (3, "x", "no_token", 3)]
    assert s.of("preempted") == []
    assert s.req["h"].finished_at == 4
    assert s.req["x"].admitted_at == 4


def test_sglang_does_not_stall_when_a_cache_hit_and_a_chunked_prompt_are_admitted_together():
    """B=4, 5 blocks, prefix caching, prefill_chunk 5. s (ids 1..8, N=1) is prefilled at
    0 and 1 (4 rows each: a cut chunk ends on a page) and leaves 2 cached blocks. At 2, h
    (ids 1..9, N=3) locks them (8 tokens) and computes 1 row, charged as a whole page of
    4, plus a page and its 3 outputs: 20 - 8 - 4 - 4 - 3 = 1 token is left, and x (P=7,
    N=3) asks 7 + 3 + 4 = 14: no_token (SGLang checks memory before it cuts a chunk: its
    cut would be 0 pages). At 3 x asks 14 tokens of 20 - 12 held - 0.699 x 2 for h:
    no_token, then SGLang's latch while h runs (4); h ends at 5 and x is prefilled at 5
    and 6 (a cut at 4 rows, one page, then 3). No stall, every request completes; SGLang
    0.5.23 at page_size 4 makes these steps."""
    recs = [req("s", 0, 8, 1, prompt_token_ids=list(range(1, 9))),
            req("h", 2, 9, 3, prompt_token_ids=list(range(1, 10))), req("x", 2, 7, 3)]
    s = simulate(recs, policy="sglang", block_size=4, num_blocks=5, prefix_caching=True,
                 prefill_chunk=5)
    assert s.result.stalled is False
    assert s.of("stalled") == []
    assert s.summary["finished_error"] == 0
    assert s.summary["completed"] == 3
    assert [(e["tick"], e["reason"]) for e in s.of("admission_blocked")] == [
        (2, "no_token"), (3, "no_token"), (4, "batch_full")]
    assert s.req["h"].finished_at == 5
    assert s.req["x"].admitted_at == 5
    assert s.dispatches()[2] == (2, [("h", "prefill", 1, True)])
    assert s.dispatches()[-4:-2] == [(5, [("x", "prefill", 4, False)]),
                                     (6, [("x", "prefill", 3, True)])]


def test_a_rejection_says_which_need_is_too_big():
    """B=4, 7 blocks, P=8, N=M=20: growing to P+N-1 = 27 rows takes ceil(27/4) = 7 blocks,
    which fits, but admission alone needs 8 + 20 tokens plus one block strictly below the
    pool, (8 + 20) // 4 + 2 = 9 blocks: the rejected record says it is the admission
    that cannot pass."""
    s = simulate([req("a", 0, 8, 20)], policy="sglang", block_size=4, num_blocks=7)
    [rejected] = s.of("rejected")
    assert (rejected["needed"], rejected["capacity"]) == (9, 7)
    assert rejected["reason"] == ("needs 9 blocks to pass admission alone (P in whole blocks "
                                  "+ min(M, 4096) tokens plus one block strictly below the "
                                  "pool), more than num_blocks")


# --- the four points where SGLang 0.5.23's code decides ------------------------------------


def idle_run(b_arrives: int):
    """B=1, 60 blocks: a (P=2, N=3) at 0 prefills at 0 and decodes at 1 and 2 (the ratio
    decays to 0.698997, then 0.697993) and ends at 3; b (P=2, N=2) arrives later."""
    return simulate([req("a", 0, 2, 3), req("b", b_arrives, 2, 2)], policy="sglang",
                    block_size=1, num_blocks=60)


def test_the_ratio_starts_over_only_after_an_idle_step():
    """b arriving at 3, the step at which a ended, finds no idle step between them: the
    ratio stays 0.697993 (no `idle` record). Arriving at 4, a step passed with nothing
    running, waiting or chunked: SGLang's idle check resets the ratio to 0.7 at 4."""
    s = idle_run(3)
    assert ratio_values(s, "idle") == []
    assert ratio_values(s)[:3] == [(1, 0.698997), (2, 0.697993), (4, 0.696990)]
    s = idle_run(4)
    assert ratio_values(s, "idle") == [(4, 0.7)]
    assert ratio_values(s)[2:] == [(5, 0.698997)]


def test_the_last_chunk_claims_its_outputs_in_full():
    """B=1, 50 blocks, prefill_chunk and token_budget 4. a (P=10, N=30) asks 10 + 30 + 1
    = 41 < 50 and is prefilled 4, 4, 2 at ticks 0-2; at 1 it is still being chunked and
    nothing joins it. At 2 its last chunk claims one block plus min(30, 4096) = 30 in
    full, not 0.7 x 30: b (P=2, N=7) asks 2 + 7 + 1 = 10 against 50 - 10 - 31 = 9:
    no_token (needed 10). That batch then becomes the running batch, which lifts the
    latch: at 3, b asks 10 against 40 - 0.7 x 29 = 19.7 and is admitted."""
    s = simulate([req("a", 0, 10, 30), req("b", 1, 2, 7)], policy="sglang", block_size=1,
                 num_blocks=50, prefill_chunk=4, token_budget=4)
    assert s.dispatches()[:4] == [(0, [("a", "prefill", 4, False)]),
                                  (1, [("a", "prefill", 4, False)]),
                                  (2, [("a", "prefill", 2, True)]),
                                  (3, [("b", "prefill", 2, True)])]
    assert [(e["tick"], e["id"], e["reason"], e["needed"])
            for e in s.of("admission_blocked")] == [(2, "b", "no_token", 10)]
    assert s.req["b"].admitted_at == 3


def test_without_the_latch_admission_is_tried_at_every_step():
    """The timeout scenario with admission_latch false: at 13 d is tried again and
    blocked no_token (needed 10: 11 free blocks less 1.0 x (1 + 1) for a and c), not
    `batch_full`; it still times out at 14."""
    s = simulate([req("a", 0, 4, 12), req("b", 3, 2, 8), req("c", 3, 3, 10), req("d", 5, 1, 8)],
                 policy="sglang", block_size=1, num_blocks=36, schedule_conservativeness=0.1,
                 waiting_timeout=2, admission_latch=False)
    assert [(e["tick"], e["reason"], e["needed"]) for e in s.of("admission_blocked")] == [
        (12, "no_token", 10), (13, "no_token", 10)]
    assert [e["tick"] for e in s.of("timeout")] == [14]


def test_a_resumed_request_claims_its_outputs_in_full():
    """B=1, 40 blocks, priority order. c (P=2, N=8) and a (P=4, N=10) run from 0; the
    ratio decays at 1 and 2 to 0.697993. At 3 a is preempted (3 outputs) and b (P=2,
    N=12, priority 1) arrives; a comes first. a passes with 4 + 3 + min(10 - 3, 4096) + 1
    = 15 tokens against 36 free - 0.697993 x 5 (c's remaining outputs) = 32.51, and
    claims what SGLang reserves: its 7 tokens, one page and min(10, 4096) = 10 in full,
    18, leaving 14.51. b asks 2 + 12 + 1 = 15: no_token (needed 15). Claiming only the
    remaining 7 would leave 17.51 and admit b."""
    recs = [req("c", 0, 2, 8), req("a", 0, 4, 10), req("b", 3, 2, 12, priority=1),
            {"type": "preempt", "id": "a", "at": 3}]
    s = simulate(recs, policy="sglang", block_size=1, num_blocks=40, max_rows=4,
                 order="priority")
    assert [(e["id"], e["resumed"]) for e in s.at(3, "admitted")] == [("a", True)]
    assert [(e["id"], e["reason"], e["needed"]) for e in s.at(3, "admission_blocked")] == [
        ("b", "no_token", 15)]
    assert s.dispatches()[3] == (3, [("a", "recompute", 7, True)])


def test_a_cancelled_last_request_leaves_the_server_idle_too():
    """B=1, 60 blocks: a (P=4, N=20) prefills at 0 and decodes at 1..9 (the ratio decays
    to 0.69097) and is cancelled at 10; nothing is left, so when b arrives at 20 the
    ratio has started over: `ratio` {0.7, idle} at 20, then b's decode at 21 lowers it
    to 0.698997."""
    s = simulate([req("a", 0, 4, 20), req("b", 20, 4, 2), {"type": "cancel", "id": "a", "at": 10}],
                 policy="sglang", block_size=1, num_blocks=60)
    assert ratio_values(s)[-3:] == [(8, 0.691973), (9, 0.69097), (21, 0.698997)]
    assert ratio_values(s, "idle") == [(20, 0.7)]


def test_cached_blocks_evict_as_whole_leaves_of_a_radix_tree():
    """B=1, 8 blocks, prefix caching. a (ids 1..4) runs at 0 and b (ids 5..8) at 1; each
    registers its 4 blocks as one node (a's stamped first) and leaves them cached. At 3,
    c (ids 1, 2, 9) hits a's first 2 blocks: the lookup splits a's node into [1, 2] and
    [3, 4]; SGLang's split stamps the part cut off, [3, 4], and the lookup then stamps
    [1, 2]. c needs one more block and none is plain or unused: the free leaf nodes are
    b's [5..8] (stamped at 1, now the oldest) and [3, 4]. SGLang evicts the whole leaf:
    c takes b's block 0 (token 5, `evicted` {c, written_by b, block 0}) and b's other 3
    blocks lose their keys too, so the snapshot counts 3 cached blocks (a's 3 and 4, and
    the one c takes this step), not the 6 one queue of blocks would leave (evicting only
    a's tail block, token 4, the least recently freed)."""
    recs = [req("a", 0, 4, 1, prompt_token_ids=[1, 2, 3, 4]),
            req("b", 1, 4, 1, prompt_token_ids=[5, 6, 7, 8]),
            req("c", 3, 3, 1, prompt_token_ids=[1, 2, 9])]
    s = simulate(recs, policy="sglang", block_size=1, num_blocks=8, prefix_caching=True)
    assert [(e["id"], e["cached_tokens"]) for e in s.at(3, "admitted")] == [("c", 2)]
    assert [(e["tick"], e["id"], e["written_by"], e["block"]) for e in s.of("evicted")] == [
        (3, "c", "b", 0)]
    assert [(e["tick"], e["cached"]) for e in s.of("snapshot")][-1] == (3, 3)


def test_a_prefill_batch_is_matched_before_it_gets_blocks():
    """B=1, 22 blocks, prefix caching. x (ids 1..12, N=1) runs at 0 and leaves one cached
    node of 12 blocks (10 never used remain). At 2, a (ids 50..60, P=11, N=1) and c (ids
    1, 2, 3, 4, 7, P=5, N=1) arrive: a asks 11 + 1 + 1 = 13 < 22, c asks 5 + 1 + 1 = 7 <
    22 - 13. SGLang matches both before allocating the batch: c hits ids 1..4, which
    splits x's node into [1..4] (now c's) and [5..12]. a then needs 11 blocks: the 10
    never used and one evicted: the free leaf [5..12] goes whole, and a takes its first
    block (x's block 4, token 5). So c computes 1 token; allocating a's blocks first would
    have evicted all of x's node and left c to compute 5."""
    recs = [req("x", 0, 12, 1, prompt_token_ids=list(range(1, 13))),
            req("a", 2, 11, 1, prompt_token_ids=list(range(50, 61))),
            req("c", 2, 5, 1, prompt_token_ids=[1, 2, 3, 4, 7])]
    s = simulate(recs, policy="sglang", block_size=1, num_blocks=22, prefix_caching=True,
                 token_budget=64, max_rows=4)
    assert [(e["id"], e["cached_tokens"]) for e in s.at(2, "admitted")] == [("a", 0), ("c", 4)]
    assert s.dispatches()[1] == (2, [("a", "prefill", 11, True), ("c", "prefill", 1, True)])
    assert [(e["id"], e["written_by"], e["block"]) for e in s.of("evicted")] == [("a", "x", 4)]


def test_a_block_computed_twice_in_one_batch_is_kept_once():
    """B=1, 20 blocks, prefix caching. a (ids 1..4) and b (ids 1..5) arrive at 0 and are
    prefilled in one batch, neither finding anything cached, so both compute ids 1..4.
    When the dispatch writes them, a's blocks get the keys first; b's four copies hold
    content the cache already has, so b takes a's blocks and its copies are freed, as
    SGLang's insert keeps one copy of a run. At 1 the snapshot counts 4 + 1 = 5 blocks
    allocated and 15 free, not 4 + 5 = 9."""
    recs = [req("a", 0, 4, 2, prompt_token_ids=[1, 2, 3, 4]),
            req("b", 0, 5, 2, prompt_token_ids=[1, 2, 3, 4, 5])]
    s = simulate(recs, policy="sglang", block_size=1, num_blocks=20, prefix_caching=True)
    assert s.dispatches()[0] == (0, [("a", "prefill", 4, True), ("b", "prefill", 5, True)])
    assert [(e["allocated"], e["free"]) for e in s.at(1, "snapshot")] == [(5, 15)]


def test_decoded_tokens_are_cached_only_when_the_request_finishes():
    """B=1, 40 blocks, prefix caching. a (ids 1, 2; outputs 7, 8, 9) is prefilled at 0
    and decodes at 1, writing output 7's row. b (ids 1, 2, 7, 8, 5) arrives at 2: SGLang
    inserts decoded tokens into its tree only when the request finishes, so b finds a's
    prompt, 2 blocks, not the 3 that `continuous` (keying a block as soon as it fills)
    finds. a finishes at 4 with rows 1, 2, 7, 8 written: they are keyed then, and c (ids
    1, 2, 7, 8, 6), arriving at 6, finds all 4."""
    recs = [req("a", 0, 2, 3, prompt_token_ids=[1, 2], output_token_ids=[7, 8, 9]),
            req("b", 2, 5, 1, prompt_token_ids=[1, 2, 7, 8, 5]),
            req("c", 6, 5, 1, prompt_token_ids=[1, 2, 7, 8, 6])]
    s = simulate(recs, policy="sglang", block_size=1, num_blocks=40, prefix_caching=True)
    assert [(e["tick"], e["id"], e["cached_tokens"]) for e in s.of("admitted")] == [
        (0, "a", 0), (2, "b", 2), (6, "c", 4)]
    assert s.req["a"].finished_at == 4
    s = simulate(recs, policy="continuous", block_size=1, num_blocks=40, prefix_caching=True)
    assert [(e["id"], e["cached_tokens"]) for e in s.of("admitted")] == [
        ("a", 0), ("b", 3), ("c", 4)]


def retract_run(pool: int, outputs: int):
    """B=1, prefix caching, conservativeness 0.1: a (ids 1..4) is prefilled at 0, v (ids
    11..14) at 1, both with `outputs` outputs; they decode together until the pool is full."""
    recs = [req("a", 0, 4, outputs, prompt_token_ids=[1, 2, 3, 4]),
            req("v", 1, 4, outputs, prompt_token_ids=[11, 12, 13, 14])]
    return simulate(recs, policy="sglang", block_size=1, num_blocks=pool, prefix_caching=True,
                    schedule_conservativeness=0.1)


def test_a_retracted_request_keeps_only_its_prompt_cached_if_20_tokens_per_kept_are_free():
    """See retract_run. 24 blocks, N=12: at 10 a and v each hold 12 rows (prompt and 8
    outputs) and both need a block: v is retracted with 9 outputs. Its 8 output blocks
    were never keyed (SGLang inserts decoded tokens when a request finishes), so they
    come back plain; SGLang then evicts until the one request kept has 20 tokens free
    of any key: 8 < 20, so v's cached prompt node goes too, and v resumes at 13 finding
    nothing: it recomputes 4 + 9 = 13 rows. 60 blocks, N=30: v is retracted at 28 with 27
    outputs and 26 plain blocks >= 20, so its prompt stays cached: it resumes at 31
    finding its 4 prompt tokens (not its outputs) and recomputes 27 rows."""
    s = retract_run(24, 12)
    assert [(e["tick"], e["id"], e["outputs"], e["rows"]) for e in s.of("preempted")] == [
        (10, "v", 9, 12)]
    assert [(e["tick"], e["id"], e["cached_tokens"]) for e in s.of("admitted")][-1] == (13, "v", 0)
    assert s.dispatches()[-3] == (13, [("v", "recompute", 13, True)])
    s = retract_run(60, 30)
    assert [(e["tick"], e["id"], e["outputs"], e["rows"]) for e in s.of("preempted")] == [
        (28, "v", 27, 30)]
    assert [(e["tick"], e["id"], e["cached_tokens"]) for e in s.of("admitted")][-1] == (31, "v", 4)
    assert s.dispatches()[-3] == (31, [("v", "recompute", 27, True)])


def test_a_decode_step_evicts_what_it_needs_before_it_retracts():
    """B=1, 39 blocks, prefill_chunk 4, prefix caching, conservativeness 0.3 (ratio 0.21).
    k (P=2, N=30) is prefilled at 0; v (P=10, N=17) in chunks 4, 4, 2 at 1-3, each chunk
    its own node of the tree; c (P=1, N=1) at 4 finishes and leaves a one-token node,
    stamped after v's. k and v decode together from 5: at 18 each has 14 outputs, they
    hold 15 + 23 blocks and only c's cached block is free, but the step needs 2. SGLang's
    check_decode_mem first evicts what the step needs (all it can: c's node), then
    retracts v (fewest outputs, then longest prompt): 1 + its 13 output blocks are free,
    and the tree is evicted until 20 are, 6 more: v's newest leaves, 2 then 4 tokens. So
    v keeps its first 4 prompt tokens cached; it waits (latch) until k finishes at 34,
    then recomputes 10 + 14 - 4 = 20 rows in 5 chunks (34-38) and decodes at 39 and 40.
    (Retracting before evicting c would have needed 7 of v's tokens, all three nodes:
    6 chunks, done at 42.) The harness's SGLang 0.5.23 makes these very steps."""
    recs = [req("k", 0, 2, 30, prompt_token_ids=[100, 101]),
            req("v", 1, 10, 17, prompt_token_ids=list(range(200, 210))),
            req("c", 4, 1, 1, prompt_token_ids=[300])]
    s = simulate(recs, policy="sglang", block_size=1, num_blocks=39, prefix_caching=True,
                 prefill_chunk=4, token_budget=64, max_rows=4, schedule_conservativeness=0.3)
    assert [(e["tick"], e["id"], e["outputs"], e["rows"]) for e in s.of("preempted")] == [
        (18, "v", 14, 23)]
    assert [(e["tick"], e["id"], e["cached_tokens"]) for e in s.of("admitted")][-1] == (34, "v", 4)
    assert [(t, rows) for t, rows in s.dispatches() if t >= 34] == [
        (t, [("v", "recompute", 4, t == 38)]) for t in range(34, 39)] + [
        (39, [("v", "decode", 1, True)]), (40, [("v", "decode", 1, True)])]
    assert s.req["v"].finished_at == 41


def test_a_request_ending_without_a_new_block_still_stamps_its_path():
    """B=4, 5 blocks, prefix caching. x (ids 1-5, N=1) at 0 leaves node X = [1-4]; r (ids
    1-4, 6, N=3) hits it at 1; y (ids 11-15, N=1) at 2 leaves node Y = [11-14], stamped
    after r's look-up. r decodes at 3 and 4 and ends at 5 with 7 rows: no new full block,
    but SGLang's insert at its end walks X and stamps it, so X is now newer than Y. z
    (P=9) at 6 takes the 3 plain blocks and SGLang's paged allocator evicts ahead until
    its 9 tokens and a page are free: one node more, the oldest, Y. w (ids 1-4, 7) at 8
    finds X: 4 cached tokens, 1 row computed (SGLang 0.5.23 at page_size 4 does the same;
    stamping nothing at r's end would evict X and compute all 5)."""
    recs = [req("x", 0, 5, 1, prompt_token_ids=[1, 2, 3, 4, 5]),
            req("r", 1, 5, 3, prompt_token_ids=[1, 2, 3, 4, 6]),
            req("y", 2, 5, 1, prompt_token_ids=[11, 12, 13, 14, 15]),
            req("z", 6, 9, 1, prompt_token_ids=list(range(21, 30))),
            req("w", 8, 5, 1, prompt_token_ids=[1, 2, 3, 4, 7])]
    s = simulate(recs, policy="sglang", block_size=4, num_blocks=5, prefix_caching=True)
    assert [(e["id"], e["cached_tokens"]) for e in s.of("admitted")] == [
        ("x", 0), ("r", 4), ("y", 0), ("z", 0), ("w", 4)]
    assert s.dispatches()[-1] == (8, [("w", "prefill", 1, True)])


def test_the_last_chunk_is_allocated_after_the_batch_is_matched():
    """B=1, 18 blocks, prefix caching, prefill_chunk 8. x (ids 1..4) at 0 and y (ids
    21..24) at 1 leave two cached nodes, x's older. c (P=12) takes 8 plain blocks for its
    first chunk at 2 (2 plain left). At 3 its last chunk needs 4 blocks; d (ids 1, 2, 3,
    4, 5) arrives and is matched first: 4 cached tokens, but it asks 1 + 1 + 1 page + 4
    locked = 7 >= 10 free - 4 for the chunk - (1 page + 1 output) claimed by the last
    chunk = 4: no_token. Its lookup stamped x's node, so when the batch is allocated
    c's chunk evicts y's (`evicted` {c, written_by y, block 0}), and d, admitted at 4,
    finds its 4 tokens. Allocating the chunk before the matching would take x's node."""
    recs = [req("x", 0, 4, 1, prompt_token_ids=[1, 2, 3, 4]),
            req("y", 1, 4, 1, prompt_token_ids=[21, 22, 23, 24]),
            req("c", 2, 12, 1, prompt_token_ids=list(range(31, 43))),
            req("d", 3, 5, 1, prompt_token_ids=[1, 2, 3, 4, 5])]
    s = simulate(recs, policy="sglang", block_size=1, num_blocks=18, prefix_caching=True,
                 prefill_chunk=8)
    assert [(e["id"], e["reason"]) for e in s.at(3, "admission_blocked")] == [("d", "no_token")]
    assert [(e["tick"], e["id"], e["written_by"], e["block"]) for e in s.of("evicted")] == [
        (3, "c", "y", 0)]
    assert [(e["tick"], e["id"], e["cached_tokens"]) for e in s.of("admitted")][-1] == (4, "d", 4)


def refresh_run(pool: int):
    """B=1, prefix caching, admission_latch off. r (P=1, N=45) runs from 0; x (ids 1..12)
    and y (ids 21..32) are prefilled at 1 and 2 (r's reservation leaves room for one at
    a time) and leave two cached nodes, x's older.
    From 2, h (P=2, N=44) heads the queue and is refused at every pass, and w (ids 1..12,
    99) waits behind it, never tried, so no admission lookup of w stamps x's node."""
    recs = [req("r", 0, 1, 45, prompt_token_ids=[50]),
            req("x", 0, 12, 1, prompt_token_ids=list(range(1, 13))),
            req("y", 1, 12, 1, prompt_token_ids=list(range(21, 33))),
            req("h", 2, 2, 44, prompt_token_ids=[70, 71]),
            req("w", 2, 13, 1, prompt_token_ids=list(range(1, 13)) + [99])]
    return simulate(recs, policy="sglang", block_size=1, num_blocks=pool, prefix_caching=True,
                    admission_latch=False)


def test_every_32nd_pass_refreshes_the_waiting_requests_prefixes():
    """See refresh_run. Every step is a pass that orders the queue (something waits),
    numbered from 0 at tick 0; the one at tick 32 looks up the whole sequence of each
    waiting request (SGLang's waiting-prefix refresh), w's too, which stamps x's node.
    r's rows outgrow the plain blocks at 31 with 53 blocks: x's node is the oldest and
    goes. With 54 blocks they run out at 32, just after the refresh: y's node goes, and
    x's goes only at 44."""
    s = refresh_run(53)
    assert {e["reason"] for e in s.of("admission_blocked") if 3 <= e["tick"] <= 31} == {"no_token"}
    assert {e["id"] for e in s.of("admission_blocked") if 2 <= e["tick"] <= 40} == {"h"}
    assert [(e["tick"], e["written_by"]) for e in s.of("evicted")][:2] == [(31, "x"), (43, "y")]
    s = refresh_run(54)
    assert [(e["tick"], e["written_by"]) for e in s.of("evicted")][:2] == [(32, "y"), (44, "x")]


def test_repeated_look_ups_take_the_answer_kept(monkeypatch):
    """See refresh_run (r, x, y, h, w: 57 look-ups). The tree answers a look-up
    again without a walk (`RadixCache.find`'s kept answer) when the same request
    looked up as far before and nothing it found or missed changed: x's and y's
    admission look-ups (11 blocks) at the pass after their first, h's (1 block,
    never cached) at ticks 3 to 31 and 33 to 47, w's (12) at 48: 47 of them.
    Walks: the refresh at 0 (x whole, r whole), r's and x's and y's and h's first
    admission look-ups, the refresh at 32 (w's 13 blocks, h's 2), h's next
    admission look-up (1 block again), w's first (12): 10. With 54 blocks the
    refresh finds x's 12 blocks for w, the same counts."""
    made = []
    init = RadixCache.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(RadixCache, "__init__", keep)
    walks = []
    walk = RadixCache._walk
    monkeypatch.setattr(RadixCache, "_walk", lambda self, keys, most: (
        walks.append(most), walk(self, keys, most))[1])
    for pool in (53, 54):
        made.clear()
        walks.clear()
        s = refresh_run(pool)
        assert s.summary["completed"] == 5
        assert (len(made), made[0].found_again) == (1, 47)
        assert walks == [12, 1, 0, 11, 11, 1, 13, 2, 1, 12]


def test_a_registration_that_ends_inside_a_node_splits_it():
    """B=1, 9 blocks, prefix caching. a (ids 1..6) leaves one cached node at 1. b (ids 1,
    2) at 2 looks up at most 1 block: it finds [1], splitting the node into [1] and
    [2..6]. b computes token 2, which the cache holds (b takes a's block), and its
    registration ends at [2], inside [2..6]: SGLang's insert splits there too, into [2]
    and [3..6], stamping [3..6] first. d (5 new ids) at 4 needs 5 blocks with 3 plain:
    the oldest leaf [3..6] goes whole (`evicted` {d, written_by a, block 2}); c (ids 1,
    2, 7) at 6 still finds 2 tokens. Without that split the leaf [2..6] would go, and c
    would find 1."""
    recs = [req("a", 0, 6, 1, prompt_token_ids=[1, 2, 3, 4, 5, 6]),
            req("b", 2, 2, 1, prompt_token_ids=[1, 2]),
            req("d", 4, 5, 1, prompt_token_ids=[40, 41, 42, 43, 44]),
            req("c", 6, 3, 1, prompt_token_ids=[1, 2, 7])]
    s = simulate(recs, policy="sglang", block_size=1, num_blocks=9, prefix_caching=True)
    assert [(e["tick"], e["id"], e["written_by"], e["block"]) for e in s.of("evicted")] == [
        (4, "d", "a", 2)]
    assert [(e["tick"], e["id"], e["cached_tokens"]) for e in s.of("admitted")] == [
        (0, "a", 0), (2, "b", 1), (4, "d", 0), (6, "c", 2)]
