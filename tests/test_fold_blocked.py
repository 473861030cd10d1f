"""Stretches behind a head blocked by credits carried on (engine/fast/blocked.py) change no result."""
from __future__ import annotations

import random

import pytest

from conftest import slow_beyond, stir, trace_bytes
from test_fold_through import _counting_calls as _calls, _outcome
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.options import Options


def _engine(records, policy="continuous", fast=True, on_event=None, **options):
    trace = parse_trace(trace_bytes(records), "blocked.jsonl")
    return Engine(trace.workload, Options.resolve(trace.config, options), policy,
                  fast_forward=fast, on_event=on_event)


def _req(rid, arrival, prompt, output):
    return {"type": "request", "id": rid, "arrival": arrival, "prompt_tokens": prompt,
            "output_tokens": output}


# Blocks of 4, 7 of them. a (P=4, N=10: credit ceil(13/4) = 4) and b (P=4, N=5: credit
# 2) are admitted at 0; c (P=4, N=2: credit 2) waits (6 + 2 > 7); d (P=8, N=10:
# credit ceil(17/4) = 5) arrives at 3 behind it.
BEHIND = [_req("a", 0, 4, 10), _req("b", 0, 4, 5), _req("c", 0, 4, 2), _req("d", 3, 8, 10)]
OPTIONS = dict(block_size=4, num_blocks=7)


def test_an_arrival_behind_a_blocked_head_is_carried_without_a_call():
    """Tick clock. At 0 the policy admits a and b (their prompts, 0 to 1) and reports
    c blocked for credits; at 1 it plans a's and b's decodes (every running request,
    counted members) with c blocked again, and promises that report and plan hold
    (`repeats_blocked`). The engine takes the boundaries itself: 2; 3, where d
    arrives and waits behind c; 4. At 5 b ends (its fifth output): asked again,
    the policy finds c's 2 blocks within 4 + 2 <= 7, so its call admits c (its
    whole prompt beside a's decode, 5 to 6) and reports d blocked (6 + 5 > 7), and
    promises again: the policy does that without the call (`admit_heads`) and
    the engine starts the dispatch. At 6 the engine completes that dispatch (c
    joins the counted decoders with its first output) and starts c's and a's
    decodes in the order the policy gives (`next_decodes`); at 7 c ends, and d's
    5 blocks still do not fit 4 + 5 > 7: a decodes alone, folded over 8 and 9.
    At 10 a ends, nothing runs, and the call admits d, which ends at 20: 20
    dispatches. The policy is called at 0, 1 and 10 (the stepped replay: at
    every tick but 20); the engine started five dispatches of decodes in place
    of a call (2, 3, 4, 6, 7) and one admission (5), and every result is the
    stepped replay's."""
    engine = _engine(BEHIND, **OPTIONS)
    calls = _calls(engine)
    result = engine.run()
    assert calls == [0, 1, 10]
    assert engine.steadiness.blocked_counted == 5
    assert engine.steadiness.blocked_admitted == 1
    assert result.summary["iterations"] == 20
    assert [(r.rid, r.admitted_at, r.first_token_at, r.finished_at) for r in result.requests] == [
        ("a", 0, 1, 10), ("b", 0, 1, 5), ("c", 5, 6, 7), ("d", 10, 11, 20)]
    stepped = _engine(BEHIND, fast=False, **OPTIONS)
    stepped_calls = _calls(stepped)
    assert _outcome(result) == _outcome(stepped.run())
    assert stepped_calls == list(range(20))


# Blocks of 4, 9 of them. a (P=4, N=20: credit ceil(23/4) = 6) and b (P=4, N=5: 2) are
# admitted at 0; c (P=4, N=2: 2), d (P=2, N=3: 1) and e (P=4, N=4: 2) wait behind them.
TWO = [_req("a", 0, 4, 20), _req("b", 0, 4, 5), _req("c", 0, 4, 2), _req("d", 0, 2, 3),
       _req("e", 0, 4, 4)]


def test_a_finish_behind_a_blocked_head_admits_two_heads_without_a_call():
    """Tick clock. At 0 the policy admits a and b (8 + 2 > 9 for c: blocked); at 1 it
    plans their decodes with c blocked, and promises. The engine starts the
    decodes at 2 (the same as 1's: folded over 3 and 4). At 5 b ends: 6 blocks
    promised, c fits (8), d too (9), e not (11 > 9). The policy admits c and d
    without the call (`admit_heads`), reports e blocked for credits, and the
    engine starts a's decode with c's and d's whole prompts (5 to 6). At 6 c and
    d join the counted decoders (their first outputs); the engine starts a's,
    c's and d's decodes. At 7 c ends (its second output): 7 promised, e's 2 fit
    and the queue empties; the policy admits e the same way, reports nothing,
    and the engine starts a's and d's decodes with e's prompt (7 to 8), then
    carries on as after arrivals (nothing waits): at 8 d ends, a and e decode
    counted (folded over 9 and 10), e ends at 11, a alone from 11 (folded over
    12 to 19) to its end at 20. The policy is called at 0 and 1 only (stepped:
    at every tick of the 20); 12 dispatches folded; every result is the stepped
    replay's."""
    engine = _engine(TWO, block_size=4, num_blocks=9)
    calls = _calls(engine)
    result = engine.run()
    steady = engine.steadiness
    assert calls == [0, 1]
    assert (steady.blocked_counted, steady.blocked_admitted, steady.arrivals_counted,
            steady.folded) == (2, 2, 1, 12)
    assert result.summary["iterations"] == 20
    assert [(r.rid, r.admitted_at, r.first_token_at, r.finished_at) for r in result.requests] == [
        ("a", 0, 1, 20), ("b", 0, 1, 5), ("c", 5, 6, 7), ("d", 5, 6, 8), ("e", 7, 8, 11)]
    stepped = _engine(TWO, fast=False, block_size=4, num_blocks=9)
    stepped_calls = _calls(stepped)
    assert _outcome(result) == _outcome(stepped.run())
    assert stepped_calls == list(range(20))


def _carried(records, **options):
    """Replay `records` carried and check every result against the stepped replay:
    the policy's call ticks, the admissions made without a call, the result."""
    engine = _engine(records, **options)
    calls = _calls(engine)
    result = engine.run()
    assert _outcome(result) == _outcome(_engine(records, fast=False, **options).run())
    return calls, engine.steadiness.blocked_admitted, result


def _times(result) -> list[tuple]:
    """Each request's (id, admitted, first output, finished)."""
    return [(r.rid, r.admitted_at, r.first_token_at, r.finished_at) for r in result.requests]


def test_a_head_whose_prompt_is_not_one_chunk_is_left_to_the_call():
    """As above with 10 blocks, b (P=4, N=9: 3 blocks) ending at 9, d's prompt 6
    tokens (2 blocks) and chunks of 4 tokens. At 9 c and d fit (8, 10) and e does
    not (12 > 10), but d's prompt is not one chunk: the policy declines
    (`admit_heads` puts c and d back in their places) and its call at 9 admits
    them, planning d's first 4 tokens; at 10 the call plans d's last 2 (first
    output at 11) beside a's and c's decodes, with e blocked, and promises. At 11
    c ends, e's 2 fit (10): admitted without a call from the dispatch with d's
    prompt (`decode_order` gives a's and d's decodes), and carried on to the end.
    Calls at 0, 1, 9 and 10; one admission without a call; every result is the
    stepped replay's."""
    records = [dict(r) for r in TWO]
    records[1]["output_tokens"], records[3]["prompt_tokens"] = 9, 6
    calls, admitted, result = _carried(records, block_size=4, num_blocks=10, prefill_chunk=4)
    assert calls == [0, 1, 9, 10]
    assert admitted == 1
    assert _times(result) == [
        ("a", 0, 1, 20), ("b", 0, 1, 9), ("c", 9, 10, 11), ("d", 9, 11, 13), ("e", 11, 12, 15)]


def test_a_prompt_over_the_budget_the_decodes_leave_is_left_to_the_call():
    """Blocks of 4, 7 of them, 5 tokens a dispatch. a (P=4, N=10: 4 blocks), b (P=4,
    N=5: 2) and c (P=4, N=2: 2) arrive at 0; the call admits a and b (c blocked:
    8 > 7) and plans a's prompt and b's first token (4 + 1 = 5); at 1 a's decode
    and b's last 3 tokens (first output at 2), with c blocked; from 2 the decodes
    are carried. At 6 b ends (its fifth output): c's 2 blocks fit (6), and its 4
    tokens fit the 5 - 1 a's decode leaves: admitted without a call, first output
    at 7, ended at 8. With c's prompt 5 tokens (still 2 blocks), one over what
    the decode leaves, the policy declines and its calls at 6 and 7 plan c's
    prompt in two chunks (4, then 1): first output at 8, ended at 9. Every
    result is the stepped replay's."""
    for prompt, want_calls, want_admitted, c in ((4, [0, 1], 1, ("c", 6, 7, 8)),
                                                 (5, [0, 1, 6, 7], 0, ("c", 6, 8, 9))):
        records = [_req("a", 0, 4, 10), _req("b", 0, 4, 5), _req("c", 0, prompt, 2)]
        calls, admitted, result = _carried(records, block_size=4, num_blocks=7, token_budget=5)
        assert (calls, admitted) == (want_calls, want_admitted)
        assert _times(result) == [("a", 0, 1, 10), ("b", 0, 2, 6), c]


def test_heads_beyond_the_rows_left_are_left_to_the_call():
    """`TWO` (above) with 3 rows a dispatch: at 5 a's decode leaves 2 rows, c's and d's
    prompts take them, admitted without a call as before. With 2 rows only c's
    prompt has one: the policy declines (c and d back in their places, in that
    order) and its call at 5 admits c then d (credits 8, 9) and plans a's decode
    and c's prompt; d waits, admitted, for a row: at 6 a and c decode; at 7 c ends,
    e is admitted (9) and d's prompt planned beside a's decode (first output at
    8); at 8 and 9 a and d decode, e waiting for a row; d ends at 10, where e's
    prompt is planned (first output at 11, ended at 14); from there carried. Calls
    at 0, 1 and 5 to 10; every result is the stepped replay's."""
    for rows, want_calls, want_admitted, d, e in (
            (3, [0, 1], 2, ("d", 5, 6, 8), ("e", 7, 8, 11)),
            (2, [0, 1, 5, 6, 7, 8, 9, 10], 0, ("d", 5, 8, 10), ("e", 7, 11, 14))):
        calls, admitted, result = _carried(TWO, block_size=4, num_blocks=9, max_rows=rows)
        assert (calls, admitted) == (want_calls, want_admitted)
        assert _times(result) == [("a", 0, 1, 20), ("b", 0, 1, 5), ("c", 5, 6, 7), d, e]


def test_a_declined_admission_puts_the_heads_back_in_their_order():
    """Blocks of 4, 10 of them, 3 rows. a (P=4, N=20: 6 blocks) and b (P=4, N=9: 3)
    run from 0; c (P=4, N=2: 2), d (P=2, N=3: 1) and e (P=2, N=3: 1) wait. At 9 b
    ends and all three fit (6 + 4 = 10), but a's decode leaves 2 rows: the policy
    takes c and d off the queue, finds no row for e, and puts d then c back in
    front of e; its call at 9 admits c, d, e in that order (their admission
    numbers 2, 3, 4: c's before d's, which a queue put back the other way round
    would swap, unseen in every time here) and plans c's and d's prompts; e's at
    11, after c's end (first output at 12, ended at 14). With 4 rows the three
    are admitted at 9 without a call. Every result is the stepped replay's."""
    three = [_req("a", 0, 4, 20), _req("b", 0, 4, 9), _req("c", 0, 4, 2), _req("d", 0, 2, 3),
             _req("e", 0, 2, 3)]
    for rows, want_calls, want_admitted, e in ((4, [0, 1], 1, ("e", 9, 10, 12)),
                                               (3, [0, 1, 9, 10, 11], 0, ("e", 9, 12, 14))):
        calls, admitted, result = _carried(three, block_size=4, num_blocks=10, max_rows=rows)
        assert (calls, admitted) == (want_calls, want_admitted)
        assert _times(result) == [("a", 0, 1, 20), ("b", 0, 1, 9), ("c", 9, 10, 11),
                                  ("d", 9, 10, 12), e]
        assert [r.admit_seq for r in result.requests] == [0, 1, 2, 3, 4]

PLUGIN = '''
from scheduler_sim.policies.continuous import ContinuousPolicy


class Mine(ContinuousPolicy):
    name = "mine"
'''


def test_a_plugin_s_blocked_stretch_is_stepped(tmp_path):
    """The same workload under a plug-in built on `continuous` (it inherits the
    promise, but the engine asks built-in policies only): no stretch is carried;
    the engine's loop calls the policy at each boundary it does not fold over:
    0, 1, 2, 3 (d arrives; the decodes repeat 2's: folded over 4), 5 (b ends, c
    admitted), 6, 7 (c ends; folded over 8 and 9), 10 (d admitted), 11 and 12
    (folded over 13 to 19): 10 dispatches folded. The results are the built-in
    policy's."""
    path = tmp_path / "mine.py"
    path.write_text(PLUGIN)
    engine = _engine(BEHIND, f"{path}:Mine", **OPTIONS)
    calls = _calls(engine)
    result = engine.run()
    assert calls == [0, 1, 2, 3, 5, 6, 7, 10, 11, 12]
    assert engine.steadiness.blocked_counted == 0 and engine.steadiness.folded == 10
    builtin = _engine(BEHIND, **OPTIONS).run()
    assert result.summary == builtin.summary
    assert [request_record(r) for r in result.requests] == [
        request_record(r) for r in builtin.requests]


def test_the_default_policy_promises_nothing():
    """`Policy.repeats_blocked` is False unless a policy says otherwise."""
    from scheduler_sim.policies.base import Policy
    assert Policy.repeats_blocked(Policy.__new__(Policy), "reservation") is False
    assert Policy.admit_heads(Policy.__new__(Policy), []) is None


def _crowded_workload(seed: int) -> list[dict]:
    """Requests arriving about every other tick into a pool whose credits run out."""
    rng = random.Random(seed)
    records, t = [], 0
    for i in range(rng.randint(20, 60)):
        t += rng.choice((0, 0, 1, 1, 2, 3, 5))
        records.append(_req(f"r{i}", t, rng.randint(1, 24), rng.randint(1, 40)))
    return records


def _crowded_options(seed: int) -> dict:
    rng = random.Random(seed)
    options = dict(block_size=4, num_blocks=rng.randint(16, 60),
                   token_budget=rng.randint(32, 96), max_rows=rng.randint(4, 24))
    if seed % 3 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    return options


@pytest.mark.parametrize("seed", slow_beyond(range(30), 10))
@pytest.mark.parametrize("policy", ["serial", "continuous"])
def test_carried_and_stepped_replays_agree_behind_blocked_heads(seed, policy):
    """Every summary field and request record equals the stepped replay's, with and
    without a cost model, and so do the event streams (a listener's boundaries
    are stepped)."""
    options = _crowded_options(seed)
    records = _crowded_workload(seed)
    result = _engine(records, policy, **options).run()
    assert _outcome(result) == _outcome(_engine(records, policy, False, **options).run())
    carried, stepped = [], []
    _engine(records, policy, on_event=lambda e: carried.append(e.to_json()), **options).run()
    _engine(records, policy, False, on_event=lambda e: stepped.append(e.to_json()),
            **options).run()
    assert carried == stepped


def test_the_crowded_workloads_carry_blocked_stretches():
    """Over the first ten crowded workloads, how many decodes the engine started
    behind a blocked head in place of a call, and the admissions at a finish
    there (`continuous`; `serial` runs one
    request at a time, never beside a credit-blocked head). A change in when the
    path applies shows here; the replays agree with the stepped ones, above."""
    counted, admitted = {}, {}
    for policy in ("continuous", "serial"):
        counted[policy] = admitted[policy] = 0
        for seed in range(10):
            engine = _engine(_crowded_workload(seed), policy, **_crowded_options(seed))
            engine.run()
            counted[policy] += engine.steadiness.blocked_counted
            admitted[policy] += engine.steadiness.blocked_admitted
    assert counted == {"continuous": 675, "serial": 0}
    assert admitted == {"continuous": 249, "serial": 0}


def _stirred_workload(seed: int) -> list[dict]:
    """A crowded workload with cancellations and forced preemptions at any time, some
    requests asking for more tokens than they produce (`max_tokens`), and priorities."""
    rng = random.Random(seed)

    def priority_and_max_tokens(request: dict) -> None:
        request["priority"] = rng.randint(0, 3)
        if rng.random() < 0.2:
            request["max_tokens"] = request["output_tokens"] + rng.randint(1, 20)

    return stir(_crowded_workload(seed), rng, 40, priority_and_max_tokens)


@pytest.mark.parametrize("seed", slow_beyond(range(40), 8))
@pytest.mark.parametrize("order", ["fcfs", "priority", "sjf"])
def test_cancellations_preemptions_and_orders_behind_blocked_heads(seed, order):
    """Cancellations and forced preemptions inside the carried stretches (the engine's
    loop must take them), block sizes down to 1, and queue orders other than
    first-come-first-served (the promise is not given: the policy's call decides):
    every summary field and request record equals the stepped replay's."""
    options = _crowded_options(seed)
    options.update(order=order, block_size=(1, 2, 4)[seed % 3])
    records = _stirred_workload(seed)
    carried = _engine(records, "continuous", **options)
    result = carried.run()
    assert _outcome(result) == _outcome(_engine(records, "continuous", False, **options).run())


def test_the_stirred_workloads_carry_blocked_stretches_under_fcfs_only():
    """The stirred workloads above do take the path under `fcfs` and never under the
    other orders (their queue is not first-come-first-served: no promise)."""
    counted, admitted = {}, {}
    for order in ("fcfs", "priority", "sjf"):
        counted[order] = admitted[order] = 0
        for seed in range(8):
            options = _crowded_options(seed)
            options.update(order=order, block_size=(1, 2, 4)[seed % 3])
            engine = _engine(_stirred_workload(seed), "continuous", **options)
            engine.run()
            counted[order] += engine.steadiness.blocked_counted
            admitted[order] += engine.steadiness.blocked_admitted
    assert counted["priority"] == counted["sjf"] == admitted["priority"] == admitted["sjf"] == 0
    assert (counted["fcfs"], admitted["fcfs"]) == (559, 51)
