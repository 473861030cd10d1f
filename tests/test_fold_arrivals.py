"""Steady stretches carried on through arrivals (engine/fast/arrivals.py) change no result."""
from __future__ import annotations

import random

import pytest

from conftest import slow_beyond, trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.clock import Clock
from scheduler_sim.records.options import Options


def _engine(records, policy, fast=True, on_event=None, **options):
    trace = parse_trace(trace_bytes(records), "arrivals.jsonl")
    return Engine(trace.workload, Options.resolve(trace.config, options), policy,
                  fast_forward=fast, on_event=on_event)


def _spy(engine):
    """The ticks of the policy's `schedule` calls, and of the admissions the engine
    made through `admit_arrivals` instead."""
    calls, admitted = [], []
    policy = engine.policy
    schedule, admit = policy.schedule, policy.admit_arrivals
    policy.schedule = lambda now: calls.append(now) or schedule(now)

    def admit_arrivals(decodes):
        chunks = admit(decodes)
        if chunks is not None:
            admitted.append((engine.now, [(req.rid, tokens) for req, tokens in chunks]))
        return chunks
    policy.admit_arrivals = admit_arrivals
    return calls, admitted


def _outcome(result):
    return result.summary, [request_record(r) for r in result.requests]


# a (P=4, N=10) from 0; b (P=4, N=3) arrives at 3 while a decodes.
TWO = [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4, "output_tokens": 10},
       {"type": "request", "id": "b", "arrival": 3, "prompt_tokens": 4, "output_tokens": 3}]


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_an_arrival_inside_a_steady_stretch_needs_no_scheduling_call(policy):
    """Tick clock, blocks of 4. a is prefilled at 0 (first output at 1) and decodes
    from 1: the policy is asked at 0 only (nothing waits then: its decodes from 1
    start without a call, `after_admission`). The stretch folds up to b's
    arrival at 3; there the engine completes a's dispatch, b arrives, and the
    policy admits b whole beside a's decode (`admit_arrivals`, at 3: b's 4 prompt
    tokens); at 4 both decode in the order the policy gives (`next_decodes`), b
    ends at 6 (its third output), a at 10: ten dispatches, the stepped results."""
    engine = _engine(TWO, policy, block_size=4, num_blocks=16)
    calls, admitted = _spy(engine)
    result = engine.run()
    assert calls == [0]
    assert admitted == [(3, [("b", 4)])]
    assert result.summary["iterations"] == 10
    assert [(r.rid, r.admitted_at, r.finished_at) for r in result.requests] == [
        ("a", 0, 10), ("b", 3, 6)]
    # a joined the cohort as its prompt completed (1), b at 4: each time every
    # running request a member, their decodes started counted without a pass
    # over the rows.
    assert engine.steadiness.arrivals_counted == 2
    assert _outcome(result) == _outcome(_engine(TWO, policy, False, block_size=4,
                                                num_blocks=16).run())


# THREE: c (P=4, N=2) arrives at 4, as b's admission (3 to 4) completes.
THREE = TWO + [{"type": "request", "id": "c", "arrival": 4, "prompt_tokens": 4,
                "output_tokens": 2}]


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_an_arrival_at_the_completion_of_an_admission_needs_no_call(policy):
    """As above, and c arrives at 4, when the dispatch that admitted b (a's decode
    and b's prompt) completes: the policy was at its fixed point before c came
    and a and b decode next, so the engine asks it to admit c beside their decodes
    in its order (`decode_order`, then `admit_arrivals`: arrivals.py's
    `admit_after_prompts`) instead of calling `schedule` at 4. c's first output
    at 5, its second (the last) at 6, b's last at 6, a's at 10: ten dispatches,
    the stepped results."""
    engine = _engine(THREE, policy, block_size=4, num_blocks=16)
    calls, admitted = _spy(engine)
    result = engine.run()
    assert calls == [0]
    assert admitted == [(3, [("b", 4)]), (4, [("c", 4)])]
    assert result.summary["iterations"] == 10
    assert [(r.rid, r.admitted_at, r.finished_at) for r in result.requests] == [
        ("a", 0, 10), ("b", 3, 6), ("c", 4, 6)]
    assert _outcome(result) == _outcome(_engine(THREE, policy, False, block_size=4,
                                                num_blocks=16).run())


# TOGETHER: b and c (P=4, N=2) arrive together at 3, while a decodes.
TOGETHER = TWO + [{"type": "request", "id": "c", "arrival": 3, "prompt_tokens": 4,
                   "output_tokens": 2}]


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_arrivals_together_are_admitted_together_without_a_call(policy):
    """b and c arrive at 3: under `continuous` both credits fit (2 blocks of 4 for
    b's 4 + 3 rows, 2 for c's 4 + 2, beside a's 4), under `vllm` their prompts'
    blocks (1 each, a's decode opening none); two rows and 8 prompt tokens fit
    beside a's decode, so the engine admits both whole in their order
    (`admit_arrivals`) instead of calling `schedule` at 3. c ends at 5 (its
    second output), b at 6, a at 10: the stepped results."""
    engine = _engine(TOGETHER, policy, block_size=4, num_blocks=16)
    calls, admitted = _spy(engine)
    result = engine.run()
    assert calls == [0]
    assert admitted == [(3, [("b", 4), ("c", 4)])]
    assert result.summary["iterations"] == 10
    assert [(r.rid, r.admitted_at, r.finished_at) for r in result.requests] == [
        ("a", 0, 10), ("b", 3, 6), ("c", 3, 5)]
    assert _outcome(result) == _outcome(_engine(TOGETHER, policy, False,
                                                block_size=4, num_blocks=16).run())
    # With a budget of 8 tokens a's decode leaves 7: c's prompt would be cut, so
    # the policy's call plans the boundary at 3.
    engine = _engine(TOGETHER, policy, block_size=4, num_blocks=16, token_budget=8)
    calls, admitted = _spy(engine)
    result = engine.run()
    assert admitted == [] and 3 in calls
    assert _outcome(result) == _outcome(_engine(TOGETHER, policy, False, block_size=4,
                                                num_blocks=16, token_budget=8).run())


def test_a_prompt_larger_than_the_chunk_goes_to_the_policy():
    """With chunks of 2 tokens b's prompt of 4 is not one chunk: the policy is asked
    at b's boundary (3) and at the next (4, b's second chunk), and the engine
    carries on from 5, when both decode (as from 2, after a's two chunks at 0
    and 1)."""
    engine = _engine(TWO, "continuous", block_size=4, num_blocks=16, prefill_chunk=2)
    calls, admitted = _spy(engine)
    result = engine.run()
    assert admitted == []
    assert calls == [0, 1, 3, 4]
    assert _outcome(result) == _outcome(_engine(TWO, "continuous", False, block_size=4,
                                                num_blocks=16, prefill_chunk=2).run())


def _arrivals_workload(seed: int) -> list[dict]:
    """3 to 30 requests, most arriving while others decode (and some together), and
    now and then a cancellation or a forced preemption: stretches broken by
    arrivals that a policy admits whole, and some it does not."""
    rng = random.Random(seed)
    records, t = [], 0
    n = rng.randint(3, 30)
    arrivals = []
    for i in range(n):
        t += rng.choice([0, 1, 3, 7, 12, 25])
        arrivals.append(t)
        records.append({"type": "request", "id": f"r{i}", "arrival": t,
                        "prompt_tokens": rng.randint(1, 24),
                        "output_tokens": rng.randint(1, 40)})
    for _ in range(rng.choice([0, 0, 1, 2])):
        kind = rng.choice(["cancel", "preempt"])
        i = rng.randrange(n)
        records.append({"type": kind, "id": f"r{i}",
                        "at": arrivals[i] + rng.randint(0, 30)})
    return records


def _options(seed: int) -> dict:
    rng = random.Random(seed)
    options = dict(block_size=4, num_blocks=rng.randint(30, 300),
                   token_budget=rng.randint(8, 64), max_rows=rng.randint(2, 16),
                   prefill_chunk=rng.choice([8, 16, 64]))
    if seed % 3 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    return options


@pytest.mark.parametrize("seed", slow_beyond(range(40), 12))
@pytest.mark.parametrize("policy", ["serial", "continuous", "vllm"])
def test_admitted_through_and_stepped_replays_agree(seed, policy):
    """Every summary field and request record equals the stepped replay's, with and
    without a cost model."""
    options = _options(seed)
    records = _arrivals_workload(seed)
    result = _engine(records, policy, **options).run()
    assert _outcome(result) == _outcome(_engine(records, policy, False, **options).run())


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_the_random_workloads_take_the_path(policy, monkeypatch):
    """Over the first 12 workloads above, the engine admits arrivals itself this many
    times (and the serial policy, one request at a time, never), of which this
    many at the completion of a dispatch with prompt rows (`admit_after_prompts`:
    50 and 51 in all before it; of them, this many inside a counted stretch's own
    loop, finishes.py, the others by `carry_on`: all of them there before), and
    this many several requests at once, and how many times, after a dispatch of
    whole prompts (admitted so, or planned by the policy with nothing waiting
    after it), every running request is a counted member whose decodes start at
    once (`after_admission`'s counted path)."""
    from scheduler_sim.engine.fast import arrivals, finishes, through
    after_prompts = []

    def spy(module):
        def admit_after_prompts(engine, until):
            done = arrivals.admit_after_prompts(engine, until)
            after_prompts.append((module, done))
            return done
        monkeypatch.setattr(module, "admit_after_prompts", admit_after_prompts)
    spy(through)
    spy(finishes)
    taken = {}
    together = {policy: 0, "serial": 0}  # of which several requests at once
    counted = 0  # of which the decodes after were started counted at once
    for name in (policy, "serial"):
        taken[name] = 0
        for seed in range(12):
            engine = _engine(_arrivals_workload(seed), name, **_options(seed))
            _, admitted = _spy(engine)
            engine.run()
            taken[name] += len(admitted)
            together[name] += sum(1 for _, chunks in admitted if len(chunks) > 1)
            if name == policy:
                counted += engine.steadiness.arrivals_counted
        if name == policy:
            started = sum(1 for _, done in after_prompts if done == arrivals.STARTED)
            looped = after_prompts.count((finishes, arrivals.STARTED))
    assert taken == {policy: {"continuous": 66, "vllm": 70}[policy], "serial": 0}
    assert together == {policy: 4, "serial": 0}
    assert started == {"continuous": 12, "vllm": 15}[policy]
    assert looped == {"continuous": 9, "vllm": 10}[policy]
    assert counted == {"continuous": 110, "vllm": 117}[policy]


@pytest.mark.parametrize("seed", slow_beyond(range(16), 5))
@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_admitted_through_event_streams_equal_the_stepped_ones(seed, policy):
    """With an event listener writing lines, the stream is the stepped replay's byte
    for byte: each arrival's record, the admission, the snapshot and dispatch."""
    lines, stepped = listened_lines(seed, policy)
    assert lines == stepped


def listened_lines(seed: int, policy: str) -> tuple[list[str], list[str]]:
    """Random arrivals workload `seed` replayed with a line listener (the events
    file's kind) and step by step: the two streams of lines."""
    from test_fast_forward import _Lines
    trace = parse_trace(trace_bytes(_arrivals_workload(seed)), "arrivals.jsonl")
    opts = Options.resolve(trace.config, _options(seed))
    clock = Clock.of(opts)
    sink = _Lines(clock)
    Engine(trace.workload, opts, policy, on_event=sink.listener).run()
    stepped = []
    Engine(trace.workload, opts, policy, fast_forward=False,
           on_event=lambda e: stepped.append(e.to_json("p", clock))).run()
    return sink.lines, stepped
