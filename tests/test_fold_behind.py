"""A finish behind a head blocked for blocks, and the first decodes after a prompt's
end, carried on by the policy's own call (`decodes_behind`, engine/fast/behind.py),
and the replay is the stepped one."""
from __future__ import annotations

import pytest

from conftest import trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.policies.vllm import VllmPolicy
from scheduler_sim.records.options import Options

# Blocks of 4 rows, a pool of 10, one tick a dispatch, prefix caching on (no decode
# cohort). `a` and `b` (8 prompt tokens, 2 blocks each) are admitted at tick 0; `c`
# (32 tokens, 8 blocks) waits for blocks until both have ended.
RECORDS = [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 8, "output_tokens": 3},
           {"type": "request", "id": "b", "arrival": 0, "prompt_tokens": 8, "output_tokens": 12},
           {"type": "request", "id": "c", "arrival": 0, "prompt_tokens": 32, "output_tokens": 2}]


def _run(records, fast=True, order="fcfs", **more):
    trace = parse_trace(trace_bytes(records), "behind.jsonl")
    options = Options.resolve(trace.config, dict(dict(block_size=4, num_blocks=10, order=order,
                                                      prefix_caching=True), **more))
    engine = Engine(trace.workload, options, "vllm", fast_forward=fast)
    calls, reports = [], []
    schedule = engine.policy.schedule
    engine.policy.schedule = lambda now: calls.append(now) or schedule(now)
    ask = engine.policy.decodes_behind

    def asked(rid, reason, needed):
        plan = ask(rid, reason, needed)
        if plan is not None:
            reports.append((engine.now, [r.rid for r in plan], engine.steadiness.blocked,
                            engine.allocator.free))
        return plan

    engine.policy.decodes_behind = asked
    result = engine.run()
    return (calls, reports, engine.steadiness.finishes_behind, engine.folded, result.summary,
            [request_record(r) for r in result.requests])


def test_a_finish_behind_a_blocked_head_is_carried_on():
    """Tick 0: `a` and `b` admitted (2 blocks each, 6 free), `c` blocked for blocks, 8
    needed. Tick 1 (the prompts' end): the policy makes the call, `a`'s and `b`'s
    decodes at row 9 open a block each (4 free): `c` still needs 8; the dispatch is
    a repeat (the one before had prompt rows), folded to the one started at tick 2,
    whose completion at 3 finishes `a` (its 3rd output). Tick 3: `a`'s 3 blocks
    released (7 free), `b`'s decode at row 11 opens none: `c` needs 8 of 7, the
    same report, folded to tick 11 (`b`'s 12th output at 12). Tick 12: nobody runs
    but `c`: the call admits it (8 blocks), its decode at 13 ends it at 14. At 13
    nothing waits and `c` decodes alone: `vllm` is at its fixed point under prefix
    caching too (`repeats_decodes`), so that decode starts without a call."""
    calls, reports, behind, folded, summary, records = _run(RECORDS)
    assert calls == [0, 12]
    assert reports == [(1, ["a", "b"], ("c", "blocks", 8, 4, 2), 4),
                       (3, ["b"], ("c", "blocks", 8, 7, 0), 7)]
    assert behind == 2
    assert folded == 1 + 8
    assert [(r["id"], r["admitted"], r["finished"]) for r in records] == [
        ("a", 0, 3), ("b", 0, 12), ("c", 12, 14)]
    stepped = _run(RECORDS, fast=False)
    assert stepped[0] == list(range(14)) and stepped[2:4] == (0, 0)
    assert (summary, records) == stepped[4:]


def test_an_arrival_at_a_completion_is_taken_there():
    """`d` (4 tokens, 1 block) arrives at tick 2, when the dispatch started at tick 1
    completes (no fold there: its flight ends at the arrival). That boundary is
    taken as the loop takes it (E1, then `d` joins the queue behind `c`), and the
    policy makes the call: `c` still the head, 8 blocks needed of 4 free, none
    taken. Then as before: the finish at 3 carried on, the call at 12 admits `c`
    and `d` (8 + 1 of 10 blocks), `d` ends at 13 with its one output, and `c`'s
    decode there starts without a call (nothing waits: `repeats_decodes`)."""
    records = RECORDS + [{"type": "request", "id": "d", "arrival": 2, "prompt_tokens": 4,
                          "output_tokens": 1}]
    calls, reports, behind, folded, summary, result = _run(records)
    assert calls == [0, 12]
    assert reports == [(1, ["a", "b"], ("c", "blocks", 8, 4, 2), 4),
                       (2, ["a", "b"], ("c", "blocks", 8, 4, 0), 4),
                       (3, ["b"], ("c", "blocks", 8, 7, 0), 7)]
    assert [(r["id"], r["admitted"], r["finished"]) for r in result] == [
        ("a", 0, 3), ("b", 0, 12), ("c", 12, 14), ("d", 12, 13)]
    stepped = _run(records, fast=False)
    assert stepped[0] == list(range(14))
    assert (summary, result) == stepped[4:]


def test_an_arrival_inside_a_folded_stretch_is_taken_at_its_own_time():
    """`d` arrives at tick 5, inside `b`'s stretch folded at tick 3 (behind a FCFS head
    the fold goes past it): at `b`'s finish at 12 the arrival is taken first, at
    tick 5, as the loop takes it while a dispatch runs, then the completion; nobody
    runs, so the call at 12 admits `c` and `d`; at 13 (`d`'s end) `c`'s decode starts
    without a call, as above."""
    records = RECORDS + [{"type": "request", "id": "d", "arrival": 5, "prompt_tokens": 4,
                          "output_tokens": 1}]
    calls, reports, behind, folded, summary, result = _run(records)
    assert calls == [0, 12] and [t for t, _, _, _ in reports] == [1, 3]
    assert [(r["id"], r["arrival"], r["admitted"], r["finished"]) for r in result] == [
        ("a", 0, 0, 3), ("b", 0, 0, 12), ("c", 0, 12, 14), ("d", 5, 12, 13)]
    assert (summary, result) == _run(records, fast=False)[4:]


def test_the_call_admits_when_the_head_fits():
    """With `a`'s prompt of 20 tokens (5 blocks) and a pool of 14, `c` (8 blocks) waits
    with 7 free at tick 0 and 5 at tick 1 (the policy's call: two openings). `a`'s end
    at tick 3 gives its 6 blocks back: 11 free, and `c`'s 8 fit beside `b`'s decode
    (at most one opening), so the policy declines before its walk and the call at
    tick 3 admits `c`. The same replay as stepped."""
    records = [dict(RECORDS[0], prompt_tokens=20), dict(RECORDS[1]), dict(RECORDS[2])]
    calls, reports, behind, folded, summary, result = _run(records, num_blocks=14)
    assert calls[:2] == [0, 3]
    assert reports == [(1, ["a", "b"], ("c", "blocks", 8, 5, 2), 5)]
    assert [(r["id"], r["admitted"]) for r in result] == [("a", 0), ("b", 0), ("c", 3)]
    assert (summary, result) == _run(records, fast=False, num_blocks=14)[4:]


def test_other_orders_and_a_cadence_make_no_promise():
    """Under the priority order an arrival may go ahead of the head, and with a prefill
    cadence the call counts its steps: the policy declines, the call is made."""
    for more in (dict(order="priority"), dict(prefill_interval=2)):
        calls, reports, behind, folded, summary, records = _run(RECORDS, **more)
        assert behind == 0 and reports == [] and 1 in calls
        assert (summary, records) == _run(RECORDS, fast=False, **more)[4:]


def test_only_vllm_is_asked():
    """The question is `vllm`'s own: the base policy has none."""
    from scheduler_sim.policies.base import Policy
    assert not hasattr(Policy, "decodes_behind") and hasattr(VllmPolicy, "decodes_behind")


@pytest.mark.slow
def test_random_prefix_cached_workloads_carry_finishes_behind():
    """The folded-against-stepped sweeps with prefix caching (test_fast_forward.py's
    workloads) take the path, and the replays agree."""
    from test_fast_forward import _cached_options, _cached_workload, _replay

    taken = 0
    for seed in range(40):
        records, options = _cached_workload(seed), _cached_options(seed)
        trace = parse_trace(trace_bytes(records), "ff.jsonl")
        engine = Engine(trace.workload, Options.resolve(trace.config, options), "vllm")
        result = engine.run()
        taken += engine.steadiness.finishes_behind
        assert (result.summary, [request_record(r) for r in result.requests]) == _replay(
            records, "vllm", False, **options)
    assert taken > 0


def _reported(records, fast, **more):
    """`_run`, and every (tick, head, reason, needed) the replay reported blocked."""
    seen = []
    report = Engine.report_blocked

    def noted(self, req, reason, needed):
        seen.append((self.now, req.rid, reason, needed))
        return report(self, req, reason, needed)

    Engine.report_blocked = noted
    try:
        return seen, _run(records, fast=fast, **more)
    finally:
        Engine.report_blocked = report


# Heads the call weighs otherwise: the full-prompt gate (rows of the whole prompt), a
# head preempted and waiting again (rows of its prompt and outputs: `restore`), a
# pool where the head's need meets the free blocks, a watermark.
REPORTED = {
    "gate": ([dict(RECORDS[0]), dict(RECORDS[1]), dict(RECORDS[2], prompt_tokens=20)],
             dict(full_prompt_gate=True, token_budget=9, num_blocks=8), 2),
    "restore": ([dict(RECORDS[0], output_tokens=9), dict(RECORDS[1]),
                 dict(RECORDS[2], prompt_tokens=4, output_tokens=30),
                 {"type": "request", "id": "d", "arrival": 1, "prompt_tokens": 28,
                  "output_tokens": 2}], dict(num_blocks=10), 4),
    "preempted": (RECORDS, dict(num_blocks=11), 2),
    "watermark": (RECORDS, dict(num_blocks=12, watermark=0.1), 2),
}


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_the_policy_reports_the_head_as_the_call_does(name):
    """Every report the carried-on replay makes (the policy's own call among them) is
    the stepped replay's at that tick, for heads whose need the call weighs
    otherwise; the path is taken. (Mutation-tested by helper rev31: a head weighed
    without its outputs or without the gate went unseen by the results.)"""
    records, more, taken = REPORTED[name]
    folded, run = _reported(records, True, **more)
    stepped, ran = _reported(records, False, **more)
    assert run[2] == taken
    at = {(t, rid): rest for t, rid, *rest in stepped}
    assert [((t, rid), rest) for t, rid, *rest in folded] == [
        ((t, rid), at.get((t, rid))) for t, rid, *rest in folded]
    assert run[4:] == ran[4:]


class _Policy:
    """A policy with no attributes of its own, for `Steadiness` alone."""


def _steady(last, blocked, changes=5):
    from scheduler_sim.engine.steadiness import Steadiness
    steady = Steadiness(_Policy())
    steady._last, steady.blocked, steady.changes = last, blocked, changes
    return steady


def test_repeated_behind_answers_only_after_a_look_that_kept_the_same_flight_and_head():
    """`repeated_behind(requests, previous)`: the last look kept `previous` (the very
    list: an equal one is another flight's) and the head `c` blocked for blocks, 8
    needed; this step's report is (`c`, blocks, 8, 7 free, none taken): True, and
    the look is now `requests` with the same head at the change count 5. Unknown
    (None, nothing kept) when nothing was kept, when another list was, when no
    head is blocked, and when the head, its reason or its need differ. (Helper
    tst32: rev31's mutants R1-R3, of its tests and its record, which no result
    showed.)"""
    a, b = object(), object()
    previous, requests = [a, b], [b]
    head = ("c", "blocks", 8)
    steady = _steady((previous, head, 3), ("c", "blocks", 8, 7, 0))
    assert steady.repeated_behind(requests, previous) is True
    assert steady._last == (requests, head, 5) and steady._last[0] is requests
    # The record moved on: the next boundary's look keeps `requests`, not `previous`.
    assert steady.repeated_behind([b], requests) is True
    assert steady.repeated_behind([b], previous) is None
    unknown = {
        "nothing kept": (None, ("c", "blocks", 8, 7, 0)),
        "an equal list kept": (([a, b], head, 3), ("c", "blocks", 8, 7, 0)),
        "no head blocked": ((previous, head, 3), None),
        "another head": ((previous, head, 3), ("d", "blocks", 8, 7, 0)),
        "another reason": ((previous, head, 3), ("c", "watermark", 8, 7, 0)),
        "another need": ((previous, head, 3), ("c", "blocks", 9, 7, 0)),
        "a head kept, none now": ((previous, None, 3), ("c", "blocks", 8, 7, 0)),
    }
    for name, (last, blocked) in unknown.items():
        steady = _steady(last, blocked)
        assert steady.repeated_behind(requests, previous) is None, name
        assert steady._last == last, name


def test_a_head_whose_need_meets_the_free_blocks_is_reported_for_the_watermark():
    """A pool of 11 blocks, a watermark of 1 (int(0.1 * 11)). Tick 1 (the policy's
    call): `a`'s and `b`'s decodes at row 9 open a block each, 3 held each, 5 free:
    `c` needs 8 > 5, blocked for blocks. Tick 3: `a`'s end gives its 3 back, 8 free,
    `b`'s decode at row 11 opens none: `c`'s 8 blocks meet the 8 free exactly but
    not the watermark too (8 + 1 > 8): the policy reports (`c`, watermark, 8), as
    the stepped call does; at tick 4 the same (the look at 3 saw another reason, no
    fold). Tick 5: `b`'s decode at row 13 opens a block, 7 free: blocks again, then
    folded to `b`'s end at 12, where the call admits `c`; its decode at 13 starts
    without a call (nothing waits: `repeats_decodes`). (Helper tst32: rev31's P15,
    the reason at a need equal to the free blocks.)"""
    more = dict(num_blocks=11, watermark=0.1)
    folded, run = _reported(RECORDS, True, **more)
    stepped, ran = _reported(RECORDS, False, **more)
    assert run[0] == [0, 12]
    assert run[1] == [(1, ["a", "b"], ("c", "blocks", 8, 5, 2), 5),
                      (3, ["b"], ("c", "watermark", 8, 8, 0), 8),
                      (4, ["b"], ("c", "watermark", 8, 8, 0), 8),
                      (5, ["b"], ("c", "blocks", 8, 7, 1), 7),
                      (6, ["b"], ("c", "blocks", 8, 7, 0), 7)]
    assert [(t, reason) for t, _, reason, _ in stepped[:8]] == [
        (0, "blocks"), (1, "blocks"), (2, "blocks"), (3, "watermark"), (4, "watermark"),
        (5, "blocks"), (6, "blocks"), (7, "blocks")]
    at = {t: rest for t, *rest in stepped}
    assert [(t, rest) for t, *rest in folded] == [(t, at[t]) for t, *rest in folded]
    assert [(r["id"], r["admitted"], r["finished"]) for r in run[5]] == [
        ("a", 0, 3), ("b", 0, 12), ("c", 12, 14)]
    assert run[4:] == ran[4:]


def test_the_head_is_weighed_by_the_budget_the_decodes_leave():
    """No full-prompt gate, a budget of 14 rows, a pool of 6 blocks of 4. `a` and `b`
    (4-token prompts, 1 block each) start at tick 0 and open their 2nd block at
    row 5 (tick 1, without a call: nothing waits, and `vllm` is at its fixed point
    under prefix caching too, `repeats_decodes`): 2 free. `c` (20 tokens) arrives
    at tick 2; the call there weighs its first chunk as the budget the 2 decodes
    leave, 12 rows (less than its prompt; no chunk cap): 3 blocks > 2 free, blocked
    for blocks. Tick 3 (the policy's call: rows 7, no opening, no fill): the same,
    (`c`, blocks, 3, 2 free, none taken), not the 4 blocks of a chunk of the whole
    budget's 14 rows; a repeat, folded to tick 6, `a`'s 6th output (its row 9 opened a block at tick 5
    for each: 0 free). Tick 6: `a`'s 3 blocks back, 3 free, and `c`'s 3 might fit:
    the policy declines before its walk, the call weighs 13 rows (one decode):
    4 blocks, (`c`, blocks, 4). Tick 7 (the policy's call): the same, 3 free; folded
    to `b`'s end at 12, where `c` is admitted (a chunk of 14, its last 6 at 13; its
    first decode at 14 starts without a call, as at tick 1). (Helper tst32: rev31's
    P20, the chunk `token_budget - n`.)"""
    records = [dict(RECORDS[0], prompt_tokens=4, output_tokens=6),
               dict(RECORDS[1], prompt_tokens=4), dict(RECORDS[2], arrival=2, prompt_tokens=20)]
    more = dict(num_blocks=6, token_budget=14, full_prompt_gate=False)
    folded, run = _reported(records, True, **more)
    stepped, ran = _reported(records, False, **more)
    assert run[0] == [0, 2, 6, 12, 13]
    assert run[1] == [(3, ["a", "b"], ("c", "blocks", 3, 2, 0), 2),
                      (7, ["b"], ("c", "blocks", 4, 3, 0), 3)]
    assert stepped == [(t, "c", "blocks", 3 if t < 6 else 4) for t in range(2, 12)]
    assert folded == [(t, "c", "blocks", 3 if t < 6 else 4) for t in (2, 3, 6, 7)]
    assert [(r["id"], r["admitted"], r["finished"]) for r in run[5]] == [
        ("a", 0, 6), ("b", 0, 12), ("c", 12, 15)]
    assert run[4:] == ran[4:]


def test_a_head_whose_need_meets_the_free_blocks_after_the_walk_is_admitted_by_the_call():
    """Token ids, a pool of 9 blocks of 4, no watermark (int(0.01 * 9)). `a` (8 prompt
    ids 1-8, outputs 101-108), `b` (8 tokens) and `d` (4 tokens, 4 outputs) start at
    tick 0 and open a block each at tick 1 (`a`, `b` 3 held, `d` 2): 1 free (those
    decodes, the first after the prompts with nothing waiting, start without a
    call: `repeats_decodes`). `c` arrives at tick 2: 24 prompt ids, the first 12
    `a`'s rows (1-8, 101-104); the gate weighs its whole prompt, 6 blocks less
    `a`'s 2 keyed prompt blocks it shares: 4 > 1, blocked for blocks; at tick 3 the
    same (the policy's call).
    Tick 4: `d`'s end gives its 2 back, 3 free. The policy, asked with the 4 needed
    before, walks (4 > 3 - 2 rows, 4 > 3 - 0 openings): `a`'s and `b`'s decodes at
    row 12 fill their 3rd block, keyed; `a`'s (101-104) is `c`'s 3rd: `c` now needs
    6 - 3 = 3, the 3 free exactly: it fits, the policy declines after its walk and
    the call at tick 4 admits `c`, as the stepped call does. (Helper tst32: rev31's
    P15, the fit test at a need equal to the free blocks; a need that shrinks
    needs a block its walk keys.)"""
    first = list(range(1, 9)) + list(range(101, 105))
    records = [dict(RECORDS[0], output_tokens=8, prompt_token_ids=list(range(1, 9)),
                    output_token_ids=list(range(101, 109))),
               dict(RECORDS[1], prompt_token_ids=list(range(201, 209))),
               {"type": "request", "id": "d", "arrival": 0, "prompt_tokens": 4,
                "output_tokens": 4, "prompt_token_ids": [301, 302, 303, 304]},
               dict(RECORDS[2], arrival=2, prompt_tokens=24,
                    prompt_token_ids=first + list(range(401, 413)))]
    asked = []
    ask = VllmPolicy.decodes_behind

    def noted(self, rid, reason, needed):
        plan = ask(self, rid, reason, needed)
        asked.append((self.view.now, rid, reason, needed, plan is not None))
        return plan

    VllmPolicy.decodes_behind = noted
    try:
        folded, run = _reported(records, True, num_blocks=9)
    finally:
        VllmPolicy.decodes_behind = ask
    stepped, ran = _reported(records, False, num_blocks=9)
    assert asked[:2] == [(3, "c", "blocks", 4, True), (4, "c", "blocks", 4, False)]
    assert run[0][:4] == [0, 2, 4, 5]
    assert run[1][0] == (3, ["a", "b", "d"], ("c", "blocks", 4, 1, 0), 1)
    assert folded[:2] == stepped[:2] == [(2, "c", "blocks", 4), (3, "c", "blocks", 4)]
    assert [(t, rid) for t, rid, *_ in stepped].count((4, "c")) == 0
    assert [(r["id"], r["admitted"]) for r in run[5]] == [("a", 0), ("b", 0), ("d", 0), ("c", 4)]
    assert [r["finished"] for r in run[5]][2] == 4
    assert run[4:] == ran[4:]


def _told(records, fast=True, tell=None, **more):
    """`_run`, and each fold `carry_behind` asked for: (tick, its rows, the contexts it
    told, whether the fold declined the same rows with one replayed, the dispatches
    folded). `tell(written)` gives the contexts passed on instead."""
    from scheduler_sim.engine.fast import behind

    asked = []
    fold = behind.fold

    def folding(engine, flight, until, growth, rows=None, written=None):
        first = flight.decoders[0]
        before = engine.steadiness.folded
        first.high_water += 1  # as if its row were replayed: no steady decode
        fold(engine, flight, until, growth, rows, None)
        first.high_water -= 1
        declined = engine.steadiness.folded == before
        fold(engine, flight, until, growth, rows, written if tell is None else tell(written))
        asked.append((engine.now, [r.rid for r in flight.decoders], written, declined,
                      engine.steadiness.folded - before))

    behind.fold = folding
    try:
        return asked, _run(records, fast, **more)
    finally:
        behind.fold = fold


def test_the_fold_behind_is_told_the_contexts_and_still_declines_a_replayed_row():
    """The boundaries of the first test: at tick 1 `a` and `b` write row 9 each (every
    row useful): the fold is told 9 + 9 = 18 and folds 1 dispatch (`a`'s 3rd output
    at 3); at tick 3 the survivors are `b` alone (`a` taken out of the decoders),
    which writes row 11: told 11, 8 folded (`b`'s 12th output at 12). With the first
    row's `high_water` one above its `resident` (a replayed row) the fold declines,
    told nothing. Without a cost model the contexts time nothing: the run is the
    stepped one either way."""
    asked, run = _told(RECORDS)
    assert asked == [(1, ["a", "b"], 18, True, 1), (3, ["b"], 11, True, 8)]
    assert run[0] == [0, 12] and run[2:4] == (2, 1 + 8)
    assert run[4:] == _run(RECORDS, fast=False)[4:]


def test_the_contexts_told_time_the_folded_dispatches():
    """On a cost model (a 2 ms clock) a dispatch's time grows with its contexts: the
    fold's own look at the rows (told nothing) and the contexts told give the
    stepped replay, and one context more told does not (the folded dispatches'
    busy time differs)."""
    more = dict(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    told, run = _told(RECORDS, **more)
    looked, own = _told(RECORDS, tell=lambda written: None, **more)
    _, wrong = _told(RECORDS, tell=lambda written: written + 1, **more)
    stepped = _run(RECORDS, fast=False, **more)
    assert [(rids, written, declined) for _, rids, written, declined, _ in told] == [
        (["a", "b"], 18, True), (["b"], 11, True)]
    assert told == looked
    assert run[4:] == own[4:] == stepped[4:]
    assert wrong[4] != stepped[4]


@pytest.mark.slow
def test_random_prefix_cached_workloads_tell_the_fold_the_contexts():
    """The sweep above: every contexts told is the sum of the rows' `resident` (each
    its `high_water`), some told after a finish took a row out, and the replays
    are the stepped ones."""
    from scheduler_sim.engine.fast import behind
    from test_fast_forward import _cached_options, _cached_workload, _replay

    told = []
    fold = behind.fold

    def folding(engine, flight, until, growth, rows=None, written=None):
        reqs = flight.decoders
        assert written == sum(r.resident for r in reqs)
        assert all(r.resident == r.high_water for r in reqs)
        told.append(len(reqs))
        fold(engine, flight, until, growth, rows, written)

    behind.fold = folding
    try:
        fewer = 0
        for seed in range(60):
            records, options = _cached_workload(seed), _cached_options(seed)
            told.clear()
            assert _replay(records, "vllm", True, **options) == _replay(
                records, "vllm", False, **options)
            fewer += sum(1 for a, b in zip(told, told[1:]) if b < a)
    finally:
        behind.fold = fold
    assert fewer > 0
