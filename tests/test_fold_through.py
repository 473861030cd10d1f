"""Steady stretches carried on through finishes (engine/fast/through.py) change no result."""
from __future__ import annotations

import random

import pytest

from conftest import slow_beyond, trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.options import Options


def _engine(records, policy, fast=True, **options):
    trace = parse_trace(trace_bytes(records), "through.jsonl")
    return Engine(trace.workload, Options.resolve(trace.config, options), policy,
                  fast_forward=fast)


def _counting_calls(engine):
    calls = []
    original = engine.policy.schedule
    engine.policy.schedule = lambda now: calls.append(now) or original(now)
    return calls


def _outcome(result):
    return result.summary, [request_record(r) for r in result.requests]


TWO = [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4, "output_tokens": 10},
       {"type": "request", "id": "b", "arrival": 0, "prompt_tokens": 4, "output_tokens": 5}]


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_a_finish_inside_a_steady_stretch_needs_no_scheduling_call(policy):
    """a (10 outputs) and b (5) are prefilled together at tick 0 (first outputs at
    1), decode from 1; b's fifth output comes at 5, a's tenth at 10. The policy is
    asked at 0 only: nothing waits after it and it is at its fixed point, so the
    decodes from 1 start without a call (fast/arrivals.py's `after_admission`),
    and the engine carries the stretch through b's finish to a's, with the
    stepped results."""
    engine = _engine(TWO, policy, block_size=4, num_blocks=16)
    calls = _counting_calls(engine)
    result = engine.run()
    assert calls == [0]
    assert result.summary["iterations"] == 10
    assert [(r.rid, r.finished_at) for r in result.requests] == [("a", 10), ("b", 5)]
    assert _outcome(result) == _outcome(_engine(TWO, policy, False, block_size=4,
                                                num_blocks=16).run())


def test_a_waiting_request_keeps_the_call_at_a_finish():
    """vllm with 2 rows: c waits while a and b decode (folded from 1: a head blocked
    for rows stays blocked). At b's finish (5) the policy is not at a fixed point,
    c waits: it is asked, and admits c, which prefills beside a's decode; nothing
    waits then, so at 6 a and c decode without a call (`after_admission`); at c's
    finish (7) nothing waits, so no call until a's end (10)."""
    records = TWO + [{"type": "request", "id": "c", "arrival": 0, "prompt_tokens": 4,
                      "output_tokens": 2}]
    engine = _engine(records, "vllm", block_size=4, num_blocks=16, max_rows=2)
    calls = _counting_calls(engine)
    result = engine.run()
    assert calls == [0, 1, 5]
    assert [(r.rid, r.admitted_at, r.finished_at) for r in result.requests] == [
        ("a", 0, 10), ("b", 0, 5), ("c", 5, 7)]
    assert _outcome(result) == _outcome(_engine(records, "vllm", False, block_size=4,
                                                num_blocks=16, max_rows=2).run())


def _steady_workload(seed: int) -> list[dict]:
    """2 to 25 requests arriving in bursts, into a pool large enough that nothing
    waits long: stretches where every running request decodes and some finish."""
    rng = random.Random(seed)
    records, t = [], 0
    for i in range(rng.randint(2, 25)):
        t += rng.choice([0, 0, 2, 15, 60])
        records.append({"type": "request", "id": f"r{i}", "arrival": t,
                        "prompt_tokens": rng.randint(1, 30),
                        "output_tokens": rng.randint(1, 80)})
    return records


@pytest.mark.parametrize("seed", slow_beyond(range(30), 10))
@pytest.mark.parametrize("policy", ["serial", "continuous", "vllm"])
def test_carried_on_and_stepped_replays_agree(seed, policy):
    """Every summary field and request record equals the stepped replay's, with and
    without a cost model."""
    options = _options(seed)
    records = _steady_workload(seed)
    result = _engine(records, policy, **options).run()
    assert _outcome(result) == _outcome(_engine(records, policy, False, **options).run())


def _options(seed: int) -> dict:
    rng = random.Random(seed)
    options = dict(block_size=4, num_blocks=rng.randint(40, 400),
                   token_budget=rng.randint(8, 64), max_rows=rng.randint(2, 16))
    if seed % 3 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    return options


@pytest.mark.slow  # with the sweep it speaks for: all 30 seeds
@pytest.mark.parametrize("policy", ["serial", "continuous", "vllm"])
def test_random_stretches_are_carried_on(policy):
    """Over the workloads above, the policy is asked fewer times with stretches
    carried on than with the engine's loop deciding each boundary."""
    carried = looped = 0
    for seed in range(30):
        records = _steady_workload(seed)
        engine = _engine(records, policy, **_options(seed))
        calls = _counting_calls(engine)
        engine.run()
        plain = _engine(records, policy, **_options(seed))
        plain.steadiness.through = False
        plain_calls = _counting_calls(plain)
        plain.run()
        carried += len(calls)
        looped += len(plain_calls)
    assert carried < looped


@pytest.mark.parametrize("seed", slow_beyond(range(16), 4))
@pytest.mark.parametrize("policy", ["serial", "continuous", "vllm"])
@pytest.mark.parametrize("prefix_caching", [False, True])
def test_carried_on_event_streams_equal_the_stepped_ones(seed, policy, prefix_caching):
    """With an event listener writing lines (the events file's path) and with prefix
    caching or without, the stream of a replay carried on through finishes is
    the stepped replay's, byte for byte: each finish's record, then the next
    snapshot and dispatch."""
    from test_fast_forward import _Lines
    from scheduler_sim.records.clock import Clock
    options = _options(seed)
    if prefix_caching:
        options["prefix_caching"] = True
    records = _steady_workload(seed)
    trace = parse_trace(trace_bytes(records), "through.jsonl")
    opts = Options.resolve(trace.config, options)
    clock = Clock.of(opts)
    sink = _Lines(clock)
    carried = Engine(trace.workload, opts, policy, on_event=sink.listener)
    calls = _counting_calls(carried)
    carried.run()
    stepped = []
    Engine(trace.workload, opts, policy, fast_forward=False,
           on_event=lambda e: stepped.append(e.to_json("p", clock))).run()
    assert sink.lines == stepped
    if not (prefix_caching and policy == "vllm"):  # (vllm's cache keys blocks as it plans)
        assert len(calls) < sum(1 for line in stepped if '"event":"dispatch"' in line)


def _counted_completions(engine) -> list[tuple[int, int]]:
    """(tick, requests finished) of each completion `Engine.complete_counted` takes."""
    taken = []
    complete = engine.complete_counted

    def counting(flight):
        live = engine.roster.live
        complete(flight)
        taken.append((engine.now, live - engine.roster.live))
    engine.complete_counted = counting
    return taken


def _finishes(engine) -> list[tuple[int, list[str]]]:
    """(tick, ids) of the requests each completion finishes."""
    finished = []
    finish = engine._finish_ended

    def counting(ended, flight):
        finished.append((engine.now, [req.rid for req in ended]))
        finish(ended, flight)
    engine._finish_ended = counting
    return finished


def test_a_finish_of_counted_decoders_is_completed_without_the_row_work():
    """Under continuous a and b decode as counted members of the cohort from tick 2;
    the stretch carried on completes their dispatches at b's finish (5) and a's (10)
    by the counters alone, inside one loop (fast/finishes.py: two completions
    taken there, none by `complete_counted`), with the stepped results."""
    engine = _engine(TWO, "continuous", block_size=4, num_blocks=16)
    taken = _counted_completions(engine)
    finished = _finishes(engine)
    result = engine.run()
    assert taken == []
    assert engine.steadiness.through_counted == 2
    assert finished == [(5, ["b"]), (10, ["a"])]
    assert _outcome(result) == _outcome(_engine(TWO, "continuous", False, block_size=4,
                                                num_blocks=16).run())


def test_a_listener_s_lines_of_a_counted_stretch_come_from_its_loop(monkeypatch):
    """The same with a line listener (the events file's): the loop takes both
    boundaries (fast/finishes.py) and writes each one's lines from the counters.
    At 5: b's finish, then the snapshot (b's 2 blocks and its credit of 2 given
    back: a's 2 held of 16, a's credit of 4 reserved) and a's dispatch, done at
    6, the snapshot and the dispatch one text; then the fold from 6 (a's ninth
    row opens its third block), handed the rows' text the loop just wrote; the
    fold before b's finish, from 2, is handed the text of a's and b's rows that
    the counted start after their prompts wrote (fast/arrivals.py). Byte for byte
    the stepped replay's stream."""
    from test_fast_forward import _Lines
    from scheduler_sim.engine.fast import fold_records
    from scheduler_sim.records.clock import Clock
    folds = []
    steady_parts = fold_records.steady_parts

    def spy(starts, *args):
        folds.append((starts, args[11] if len(args) > 11 else None))
        return steady_parts(starts, *args)
    monkeypatch.setattr(fold_records, "steady_parts", spy)
    trace = parse_trace(trace_bytes(TWO), "through.jsonl")
    opts = Options.resolve(trace.config, {"block_size": 4, "num_blocks": 16})
    sink = _Lines(Clock.of(opts))
    engine = Engine(trace.workload, opts, "continuous", on_event=sink.listener)
    taken = _counted_completions(engine)
    engine.run()
    assert taken == []
    assert engine.steadiness.through_counted == 2
    at_5 = [line for line in sink.lines if line.startswith('{"tick":5,')]
    assert at_5 == [
        '{"tick":5,"event":"finished","policy":"p","id":"b","status":"finished_length_capped"}',
        '{"tick":5,"event":"snapshot","policy":"p","waiting":0,"running":1,"reserved":4,'
        '"allocated":2,"draining":0,"free":14}',
        '{"tick":5,"event":"dispatch","policy":"p","rows":[{"id":"a","phase":"decode",'
        '"tokens":1,"emits":true}],"tokens":1,"done":6}']
    assert sink.lines[-1] == ('{"tick":10,"event":"finished","policy":"p","id":"a",'
                              '"status":"finished_length_capped"}')
    assert folds == [([2, 3, 4], '{"id":"a","phase":"decode","tokens":1,"emits":true},'
                                 '{"id":"b","phase":"decode","tokens":1,"emits":true}'),
                     ([6, 7, 8, 9], '{"id":"a","phase":"decode","tokens":1,"emits":true}')]
    stepped = []
    Engine(trace.workload, opts, "continuous", fast_forward=False,
           on_event=lambda e: stepped.append(e.to_json("p", Clock.of(opts)))).run()
    assert sink.lines == stepped


@pytest.mark.parametrize("policy, completions, finishes, looped",
                         [("continuous", 103, 27, 92), ("serial", 272, 105, 11),
                          ("vllm", 34, 1, 89)])
def test_the_random_workloads_complete_counted_dispatches(policy, completions, finishes,
                                                          looped):
    """Over the first ten workloads above (those of the default tier), how many
    boundaries complete a dispatch of counted decoders only by
    `complete_counted` (those carried on where arrivals come, and the engine
    loop's own: `complete_due`, since arr20; 34, 5 and 34 before, the loop's
    went to `_complete`: vllm settles the members before its `schedule`, so
    its loop completes none), how many requests finish there, and how many
    such boundaries the counted stretch's loop takes (fast/finishes.py;
    continuous's 126 and serial's 16 boundaries were all `complete_counted`'s
    before that loop). A change in when the paths apply shows here; the
    replays agree with the stepped ones, above."""
    taken = []
    through = 0
    for seed in range(10):
        engine = _engine(_steady_workload(seed), policy, **_options(seed))
        counted = _counted_completions(engine)
        engine.run()
        taken += counted
        through += engine.steadiness.through_counted
    assert (len(taken), sum(n for _, n in taken), through) == (completions, finishes, looped)
