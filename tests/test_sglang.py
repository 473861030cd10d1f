"""The `sglang` policy: new_token_ratio admission, prefill-first batches, chunking,
retraction by fewest outputs then longest prompt, the ratio's jump and decay, the
retracted request's place at the tail of the queue (§6, README "sglang")."""
from __future__ import annotations

from conftest import req, simulate

# The constants the policy takes from SGLang: init 0.7 x conservativeness, min = init x 0.14,
# decay (init - min) / 600 per decode step without a retraction.


def ratio_values(s, reason: str = "decay") -> list[tuple[int, float]]:
    """(tick, value) of the `ratio` events with one reason."""
    return [(e["tick"], e["value"]) for e in s.of("ratio") if e["reason"] == reason]


# --- the ratio's decay -------------------------------------------------------------------


def test_ratio_decays_from_0_7_to_0_5997_after_100_decode_steps():
    """One request (P=4, N=101, B=4, 27 blocks): a prefill at 0, then 100 decode steps
    at ticks 1..100, each lowering the ratio by (0.7 - 0.098)/600 = 0.00100333: 0.698997
    after the first, 0.649833 after 50, 0.599667 (0.5997) after 100, each `ratio` event
    {reason decay} rounded to 6 decimals; the prefill step emits none."""
    s = simulate([req("a", 0, 4, 101)], policy="sglang", block_size=4, num_blocks=27)
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
    """a (P=4, N=M=20) at 0, b (P=4, N=M=4) at 1; B=4, 7 blocks."""
    return simulate([req("a", 0, 4, 20), req("b", 1, 4, 4)], policy="sglang", block_size=4,
                    num_blocks=7, schedule_conservativeness=conservativeness)


def test_the_ratio_decides_whether_a_request_is_admitted_against_a_running_one():
    """At tick 1, a holds 1 block (its 4 prompt rows) and has 1 output; no decode step has
    run, so the ratio is still init. Free tokens 6 x 4 = 24; a is expected to need ratio x
    min(20 - 1, 4096) more; b asks 4 + min(4, 4096) = 8. Conservativeness 1.0: 24 - 0.7 x 19
    = 10.7 >= 8, b is admitted at 1 and prefilled there (prefill before decode).
    Conservativeness 1.3: 24 - 0.91 x 19 = 6.71 < 8: `admission_blocked` {b, no_token,
    needed ceil(8/4)=2, free 6}, and tick 1 decodes a instead."""
    s = admission_run(1.0)
    assert [(e["tick"], e["id"]) for e in s.of("admitted")] == [(0, "a"), (1, "b")]
    assert s.dispatches()[1] == (1, [("b", "prefill", 4, True)])
    assert s.of("admission_blocked") == []
    s = admission_run(1.3)
    blocked = s.at(1, "admission_blocked")
    assert blocked == [{"tick": 1, "event": "admission_blocked", "id": "b", "reason": "no_token",
                        "needed": 2, "free": 6, "reserved": 0, "draining": 0}]
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
    """4 blocks of 4 = 16 tokens, and SGLang admits only what fits strictly: a (P=4, N=1,
    M=12) asks 4 + 12 = 16, not less than 16, so it could never pass admission alone and
    is rejected at arrival (needed 16 // 4 + 1 = 5), though its 4 rows would fit; b (P=4,
    N=1, M=11) asks 15 < 16 and completes at 1."""
    s = simulate([req("a", 0, 4, 1, max_tokens=12), req("b", 0, 4, 1, max_tokens=11)],
                 policy="sglang", block_size=4, num_blocks=4)
    rejected = s.of("rejected")
    assert [(e["id"], e["needed"], e["capacity"]) for e in rejected] == [("a", 5, 4)]
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
    """prefill_chunk 4, a (P=10, N=2) and b (P=2, N=2) at 0: tick 0 prefills a's first 4
    rows (no output) and b joins no batch while a is chunked; tick 1 a's next 4 rows,
    alone; tick 2 a's last 2 rows (emits) then b is admitted into the same batch with the
    2 chunk tokens left; tick 3 decodes both; both finish at 4."""
    s = simulate([req("a", 0, 10, 2), req("b", 0, 2, 2)], policy="sglang", block_size=4,
                 num_blocks=16, prefill_chunk=4)
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, False)]),
        (1, [("a", "prefill", 4, False)]),
        (2, [("a", "prefill", 2, True), ("b", "prefill", 2, True)]),
        (3, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
    ]
    assert [(e["tick"], e["id"]) for e in s.of("admitted")] == [(0, "a"), (2, "b")]
    assert (s.req["a"].finished_at, s.req["b"].finished_at) == (4, 4)


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
    c ends at 12, b at 14; at 12 and 13 d asks (3 + 6) + (7 - 6) = 10 tokens (needed 3
    blocks) against 3 x 4 - (5 + 2) = 5 and 2 x 4 - ... < 10: no_token. At 14 (5 free
    blocks, only a running with 3 left) d is admitted and recomputes 3 + 6 = 9 rows in
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
    assert [(e["tick"], e["id"], e["needed"]) for e in s.of("admission_blocked")] == [
        (12, "d", 3), (13, "d", 3)]
    assert [(e["tick"], e["id"], e["resumed"]) for e in s.of("admitted")][-1] == (14, "d", True)
    assert s.dispatches()[14] == (14, [("d", "recompute", 9, True)])
    got = {rid: (r.finished_at, r.preemptions, r.useful_rows, r.replay_rows)
           for rid, r in s.req.items()}
    assert got == {"a": (18, 0, 18, 0), "b": (14, 0, 10, 0), "c": (12, 0, 9, 0),
                   "d": (15, 1, 9, 8)}


def ratio_run():
    """The ratio scenario: B=4, 16 blocks, conservativeness 0.01 (init 0.007, min
    0.00098, decay 0.00602/600 = 0.0000100333 per decode step), release_delay 0.
      a P=1 N=30 M=60 at 0 (1 + 60 = 61 <= 64 tokens);  v P=52 N=6 at 4;  w P=1 N=1 at 6.
    t0 prefills a, t1-t3 decode it (4 rows, 1 block; 4 outputs). t4: v asks 52 + 6 = 58
    <= 15 x 4 - 0.007 x 56: admitted, its prefill takes 13 blocks (2 free). t5 decodes a
    and v, both at a full block: the last 2 blocks. t6: w (1 + 1 = 2 tokens) finds 0 free:
    no_token, at 6, 7, 8, 9. t9: outputs a 8, v 5; rows a 8, v 56: need 2 > free 0; v
    (fewer outputs) is retracted, freeing 14 blocks, and queues behind w. The ratio
    becomes min(1, (8 + 20) / (60 + 1)) = 28/61 = 0.459016; a decodes at 9.
    t10: w asks 2 <= 13 x 4 - 0.459016 x 51 = 28.59: admitted and prefilled (a
    prefill step: no decay); v then asks (52 + 5) + 1 = 58 > 26.59: no_token, needed 15.
    Had v gone to the front, it would have blocked w. w ends at 11. From 11 a decodes
    alone, the ratio decaying 0.459006, 0.458996, ...; a's remaining need keeps v out
    until a ends at 32 (30 outputs, finished_stopped); v then recomputes 52 + 5 = 57 rows
    in one pass, emitting output 6, and finishes at 33."""
    recs = [req("a", 0, 1, 30, max_tokens=60), req("v", 4, 52, 6), req("w", 6, 1, 1)]
    return simulate(recs, policy="sglang", block_size=4, num_blocks=16,
                    schedule_conservativeness=0.01)


def test_ratio_after_a_retraction_is_the_kept_requests_estimate_then_decays():
    """See ratio_run: the retraction at 9 sets the ratio to 28/61 (`ratio` {0.459016,
    retract}); the decode steps from 11 lower it by 0.0000100333 each (0.459006,
    0.458996); the prefill step at 10 does not."""
    s = ratio_run()
    assert [(e["tick"], e["id"], e["outputs"], e["rows"], e["blocks_freed"])
            for e in s.of("preempted")] == [(9, "v", 5, 56, 14)]
    assert ratio_values(s, "retract") == [(9, 0.459016)]
    after = [(t, v) for t, v in ratio_values(s) if t >= 9]
    assert after[:2] == [(11, 0.459006), (12, 0.458996)]
    assert [t for t, _ in after] == list(range(11, 32))
    assert ratio_values(s)[:2] == [(1, 0.00699), (2, 0.00698)]


def test_a_retracted_request_rejoins_the_waiting_queue_at_its_tail():
    """See ratio_run: w waits from 6; v, retracted at 9, queues behind it, so at 10 w is
    admitted and v (the head under a front-of-queue rule) is blocked no_token, needed 15."""
    s = ratio_run()
    assert [(e["tick"], e["id"]) for e in s.of("admission_blocked") if e["tick"] <= 9] == [
        (6, "w"), (7, "w"), (8, "w"), (9, "w")]
    assert [e["id"] for e in s.at(10, "admitted")] == ["w"]
    assert [(e["id"], e["reason"], e["needed"]) for e in s.at(10, "admission_blocked")] == [
        ("v", "no_token", 15)]
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
    """A lone decoder without memory: B=4, 4 blocks, release_delay 5. a (P=4, N=3) is
    prefilled at 0 (1 block); z (P=9, N=1) asks 10 <= 3 x 4 - 0.7 x 2 at 1 and takes the
    other 3 blocks; it ends at 2 and its blocks drain until 7. At 2, a (4 rows) needs a
    block, none is free, and a is the only decoder: the last request is never retracted,
    it waits; at 7 the blocks are back, a decodes at 7 and 8 and finishes at 9. The failed
    decode check at 2 still re-estimates the ratio over the requests kept (a alone):
    min(1, (1 + 20) / (3 + 1)) = 1 (`ratio` {1.0, retract}, as SGLang's caller does even
    when only one request is left); the decode steps at 7 and 8 lower it by
    (0.7 - 0.098)/600: 0.998997, 0.997993."""
    return simulate([req("a", 0, 4, 3), req("z", 1, 9, 1)], policy="sglang", block_size=4,
                    num_blocks=4, release_delay=5)


def test_the_last_request_is_never_retracted():
    """See lone_run: no `preempted` event; no dispatch between 2 and 7; a decodes at 7
    and 8 and finishes at 9, never preempted; the ratio is re-estimated at 2 and decays
    at 7 and 8."""
    s = lone_run()
    assert s.of("preempted") == []
    assert s.dispatches() == [(0, [("a", "prefill", 4, True)]), (1, [("z", "prefill", 9, True)]),
                              (7, [("a", "decode", 1, True)]), (8, [("a", "decode", 1, True)])]
    a = s.req["a"]
    assert (a.finished_at, a.preemptions, a.replay_rows) == (9, 0, 0)
    assert ratio_values(s, "retract") == [(2, 1.0)]
    assert ratio_values(s) == [(7, 0.998997), (8, 0.997993)]
    assert s.summary["empty_iterations"] == 0


def test_a_retracted_request_that_waits_too_long_times_out():
    """B=4, 8 blocks, conservativeness 0.1 (ratio 0.07), waiting_timeout 2; a P=4 N=12 at
    0; b P=2 N=8, c P=3 N=8, d P=1 N=8 at 3. t0 prefills a, t1-t2 decode it. t3: 24 free
    tokens minus 0.07 x 9 take b (2 + 8) and c (3 + 8); d (1 + 8 > 2.4 left) is blocked
    and prefilled at 4. t5-t7 decode all four, taking the last free blocks. t8: outputs a
    6, b, c, d 4; d (4 rows) needs a block, none is free: the victim is c (the longest
    prompt among the fewest outputs; a has more) and its 2 blocks suffice. c waits from
    8: at 8 + 2 + 1 = 11 it has waited 3 > 2 and times out before the policy's step, which
    retracts b (outputs a 9, b 7, d 7; b's prompt 2 > d's 1). c is retracted at 8 with 4 outputs and times out at 11 (`timeout`
    {c, waited 3}, finished_timeout, after 1 preemption); the step at 11 then retracts b,
    which resumes at 12 (recompute 2 + 7 = 9 rows) and finishes at 13."""
    s = simulate([req("a", 0, 4, 12), req("b", 3, 2, 8), req("c", 3, 3, 8), req("d", 3, 1, 8)],
                 policy="sglang", block_size=4, num_blocks=8, schedule_conservativeness=0.1,
                 waiting_timeout=2)
    assert [(e["tick"], e["id"]) for e in s.of("preempted")] == [(8, "c"), (11, "b")]
    assert s.of("timeout") == [{"tick": 11, "event": "timeout", "id": "c", "waited": 3}]
    assert [e["event"] for e in s.at(11) if e["event"] in ("timeout", "preempted")] == [
        "timeout", "preempted"]
    c = s.req["c"]
    assert (c.status.label, c.finished_at, c.preemptions, c.outputs) == (
        "finished_timeout", 11, 1, 4)
    assert s.dispatches()[12] == (12, [("b", "recompute", 9, True)])
    assert s.req["b"].finished_at == 13
    assert s.summary["finished_timeout"] == 1
    assert s.summary["completed"] == 3


# --- prefix-cache hits inside one admission pass ---------------------------------------------


def test_a_cache_hit_uses_up_the_free_blocks_it_shares_within_the_admission_pass():
    """B=4, 4 blocks (16 tokens), prefix caching. s (ids 1..8, N=1) runs at 0 and leaves
    its 2 full blocks cached (free, evictable). At 2, h (ids 1..9, N=2) matches them: it
    asks (9 - 8) + 2 = 3 tokens and locks the 2 cached blocks, which are no longer free
    or evictable: 2 blocks = 8 tokens remain, minus h's claim 3 = 5, so x (P=4, N=9)
    asking 4 + 9 = 13 is blocked no_token (needed ceil(13/4) = 4). Counting h's 2 shared
    blocks as still free (16 - 3 = 13) would admit x and force a retraction at 3. h ends
    at 4 (prefill at 2, decode at 3); x (3.3 tokens left at 3) is admitted at 4, when all
    16 tokens are back."""
    recs = [req("s", 0, 8, 1, prompt_token_ids=list(range(1, 9))),
            req("h", 2, 9, 2, prompt_token_ids=list(range(1, 10))), req("x", 2, 4, 9)]
    s = simulate(recs, policy="sglang", block_size=4, num_blocks=4, prefix_caching=True)
    assert [(e["id"], e["cached_tokens"]) for e in s.at(2, "admitted")] == [("h", 8)]
    assert [(e["id"], e["reason"], e["needed"]) for e in s.at(2, "admission_blocked")] == [
        ("x", "no_token", 4)]
    assert s.of("preempted") == []
    assert s.req["h"].finished_at == 4
    assert s.req["x"].admitted_at == 4


def test_sglang_does_not_stall_when_a_cache_hit_and_a_chunked_prompt_are_admitted_together():
    """B=4, 4 blocks, prefix caching, prefill_chunk 5. s (ids 1..8, N=1) is prefilled at
    0 and 1 and leaves 2 cached blocks. At 2, h (ids 1..9, N=5) locks them and asks
    1 + 5 = 6 tokens, leaving 2 x 4 - 6 = 2 tokens for x (P=7, N=3: 10 tokens), which must
    wait; h decodes alone (3, 4, 5, and 6 with the last free block) and ends at 7, and x
    is admitted at 7 when every block is back. Counting h's shared
    blocks as free admits x too, chunked (4 of 7 rows); x's next chunk never finds a
    block, h alone cannot grow at 6 (12 rows) and is never retracted (the last one): the
    run stalls. Expected: no stall, both complete, no finished_error."""
    recs = [req("s", 0, 8, 1, prompt_token_ids=list(range(1, 9))),
            req("h", 2, 9, 5, prompt_token_ids=list(range(1, 10))), req("x", 2, 7, 3)]
    s = simulate(recs, policy="sglang", block_size=4, num_blocks=4, prefix_caching=True,
                 prefill_chunk=5)
    assert s.result.stalled is False
    assert s.of("stalled") == []
    assert s.summary["finished_error"] == 0
    assert s.summary["completed"] == 3
    assert s.req["h"].finished_at == 7
    assert s.req["x"].admitted_at == 7


def test_a_rejection_says_which_need_is_too_big():
    """B=4, 7 blocks, P=8, N=M=20: growing to P+N-1 = 27 rows takes ceil(27/4) = 7 blocks,
    which fits, but admission alone needs (8 + 20) // 4 + 1 = 8 blocks: the rejected
    record says it is the admission that cannot pass."""
    s = simulate([req("a", 0, 8, 20)], policy="sglang", block_size=4, num_blocks=7)
    [rejected] = s.of("rejected")
    assert (rejected["needed"], rejected["capacity"]) == (8, 7)
    assert rejected["reason"] == ("needs 8 blocks to pass admission alone (P + min(M, 4096) "
                                  "tokens strictly below the pool), more than num_blocks")
