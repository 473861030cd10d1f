"""Stretches behind a head blocked by credits carried on (engine/fast/blocked.py) change no result."""
from __future__ import annotations

import random

import pytest

from conftest import slow_beyond, trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.options import Options


def _engine(records, policy="continuous", fast=True, on_event=None, **options):
    trace = parse_trace(trace_bytes(records), "blocked.jsonl")
    return Engine(trace.workload, Options.resolve(trace.config, options), policy,
                  fast_forward=fast, on_event=on_event)


def _calls(engine) -> list[int]:
    """The ticks of the policy's `schedule` calls, as they come."""
    calls = []
    schedule = engine.policy.schedule
    engine.policy.schedule = lambda now: calls.append(now) or schedule(now)
    return calls


def _outcome(result):
    return result.summary, [request_record(r) for r in result.requests]


def _req(rid, arrival, prompt, output):
    return {"type": "request", "id": rid, "arrival": arrival, "prompt_tokens": prompt,
            "output_tokens": output}


# Blocks of 4, 8 of them. a (P=4, N=10: credit ceil(13/4) = 4) and b (P=4, N=5: credit
# 2) are admitted at 0; c (P=8, N=10: credit ceil(17/4) = 5) waits: 6 + 5 > 8, and
# still 4 + 5 > 8 after b ends; d (P=4, N=2: credit 2) arrives at 3 behind it.
BEHIND = [_req("a", 0, 4, 10), _req("b", 0, 4, 5), _req("c", 0, 8, 10), _req("d", 3, 4, 2)]
OPTIONS = dict(block_size=4, num_blocks=8)


def test_an_arrival_behind_a_blocked_head_is_carried_without_a_call():
    """Tick clock. At 0 the policy admits a and b (their prompts, 0 to 1) and reports
    c blocked for credits; at 1 it plans a's and b's decodes (every running request,
    counted members) with c blocked again, and promises the report holds
    (`repeats_blocked`). The engine then takes the boundaries itself: 2; 3, where d
    arrives and waits behind c; 4; 5, where b ends (its fifth output) and the
    policy, asked again, still finds c's 5 blocks beyond the 4 + 5 > 8 credits;
    6, which starts the stretch's second repeat of a alone, folded over 7 and 8;
    9. At 10 a ends: its 4 blocks freed, the policy's call admits c (5) and d (2).
    d ends at 12, c at 20: 20 dispatches. The policy is called at 0, 1 and 10
    (the stepped replay: every tick but 20), six starts are the engine's own,
    and every result is the stepped replay's."""
    engine = _engine(BEHIND, **OPTIONS)
    calls = _calls(engine)
    result = engine.run()
    assert calls == [0, 1, 10]
    assert engine.steadiness.blocked_counted == 6
    assert result.summary["iterations"] == 20
    assert [(r.rid, r.admitted_at, r.first_token_at, r.finished_at) for r in result.requests] == [
        ("a", 0, 1, 10), ("b", 0, 1, 5), ("c", 10, 11, 20), ("d", 10, 11, 12)]
    stepped = _engine(BEHIND, fast=False, **OPTIONS)
    stepped_calls = _calls(stepped)
    assert _outcome(result) == _outcome(stepped.run())
    assert stepped_calls == list(range(20))


PLUGIN = '''
from scheduler_sim.policies.continuous import ContinuousPolicy


class Mine(ContinuousPolicy):
    name = "mine"
'''


def test_a_plugin_s_blocked_stretch_is_stepped(tmp_path):
    """The same workload under a plug-in built on `continuous` (it inherits the
    promise, but the engine asks built-in policies only): no stretch is carried;
    the engine's loop calls the policy at each boundary it does not fold over:
    0, 1, 2, 3 (d arrives; the decodes repeat 2's: folded over 4), 5 (b ends),
    6 (folded over 7 and 8), 9, 10 (c and d admitted), 11, 12 (d ends) and 13
    (folded over 14 to 19): 9 dispatches folded. The results are the built-in
    policy's."""
    path = tmp_path / "mine.py"
    path.write_text(PLUGIN)
    engine = _engine(BEHIND, f"{path}:Mine", **OPTIONS)
    calls = _calls(engine)
    result = engine.run()
    assert calls == [0, 1, 2, 3, 5, 6, 9, 10, 11, 12, 13]
    assert engine.steadiness.blocked_counted == 0 and engine.steadiness.folded == 9
    builtin = _engine(BEHIND, **OPTIONS).run()
    assert result.summary == builtin.summary
    assert [request_record(r) for r in result.requests] == [
        request_record(r) for r in builtin.requests]


def test_the_default_policy_promises_nothing():
    """`Policy.repeats_blocked` is False unless a policy says otherwise."""
    from scheduler_sim.policies.base import Policy
    assert Policy.repeats_blocked(Policy.__new__(Policy), "reservation") is False


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
    behind a blocked head in place of a call (`continuous`; `serial` runs one
    request at a time, never beside a credit-blocked head). A change in when the
    path applies shows here; the replays agree with the stepped ones, above."""
    counted = {}
    for policy in ("continuous", "serial"):
        counted[policy] = 0
        for seed in range(10):
            engine = _engine(_crowded_workload(seed), policy, **_crowded_options(seed))
            engine.run()
            counted[policy] += engine.steadiness.blocked_counted
    assert counted == {"continuous": 449, "serial": 0}
