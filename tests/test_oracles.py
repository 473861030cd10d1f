"""The `vllm` and `sglang` policies against recorded runs of the real engines.

tests/data/oracles/ holds seeded traces and the events that vLLM 0.33.0's and
SGLang 0.5.23's own scheduler code produced for them (README.md there says
how). Each trace is replayed here under the matching policy, and every tick's
dispatch (request -> tokens), every preemption and every finish must be the
engine's. Neither engine is needed to run this.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler_sim.engine.core import Engine
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.options import Options

DATA = Path(__file__).resolve().parent / "data" / "oracles"
CASES = sorted((engine, trace) for engine in ("vllm", "sglang")
               for trace in (DATA / engine).glob("[0-9]*.jsonl")
               if not trace.name.endswith(".events.jsonl"))


def outline(events) -> tuple[dict, dict, dict]:
    """(tick -> {id: tokens}, tick -> sorted preempted ids, id -> finish tick)."""
    dispatches, preempted, finished = {}, {}, {}
    for event in events:
        kind, tick = event.get("event"), event.get("tick")
        if kind == "dispatch":
            dispatches[tick] = {row["id"]: row["tokens"] for row in event["rows"]}
        elif kind == "preempted":
            preempted.setdefault(tick, []).append(event["id"])
        elif kind == "finished":
            finished[event["id"]] = tick
    return dispatches, {t: sorted(ids) for t, ids in preempted.items()}, finished


def replay(engine: str, trace: Path) -> list[dict]:
    """The simulator's events for `trace` under the policy named like the engine."""
    parsed = parse_trace(trace.read_bytes(), str(trace))
    events: list[dict] = []
    Engine(parsed.workload, Options.resolve(parsed.config), engine,
           on_event=lambda e: events.append(json.loads(e.to_json()))).run()
    return events


def test_there_are_enough_recorded_runs():
    """At least 30 recorded traces per engine, each with its events."""
    for engine in ("vllm", "sglang"):
        traces = [t for e, t in CASES if e == engine]
        assert len(traces) >= 30, engine
        for trace in traces:
            assert trace.with_name(trace.stem + ".events.jsonl").exists()


def first_difference(ours, theirs) -> int | None:
    """The first tick whose dispatch differs, or None."""
    return next((tick for tick in sorted(set(theirs[0]) | set(ours[0]))
                 if ours[0].get(tick) != theirs[0].get(tick)), None)


def _tier(engine: str, trace: Path):
    """The first 8 short traces of each engine (seeds 0-7: both orders, prefix caching,
    chunking, vLLM's prefill interval, SGLang's lpm and conservativeness), the first trace
    of 50 requests (100), SGLang's priority traces (300-399) and the first of its traces
    with pages of 4 (400-499) and 16 tokens (500-599) run by default; the others in the
    slow tier (the whole set costs 6 s of CPU)."""
    seed = int(trace.stem)
    if 8 <= seed < 100 or 100 < seed < 300 or (seed >= 400 and seed % 100):
        return pytest.param(engine, trace, marks=pytest.mark.slow)
    return pytest.param(engine, trace)


@pytest.mark.parametrize("engine,trace", [_tier(e, t) for e, t in CASES],
                         ids=[f"{e}-{t.stem}" for e, t in CASES])
def test_the_policy_makes_the_engines_decisions(engine, trace):
    """Tick for tick: the same rows with the same tokens, the same preemptions, the
    same finishes."""
    recorded = [json.loads(line) for line in
                trace.with_name(trace.stem + ".events.jsonl").read_text().splitlines()
                if line.strip()]
    theirs = outline(recorded)
    ours = outline(replay(engine, trace))
    assert first_difference(ours, theirs) is None
    assert ours[1] == theirs[1], "preemptions"
    assert ours[2] == theirs[2], "finishes"
