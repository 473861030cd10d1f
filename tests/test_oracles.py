"""The `vllm` and `sglang` policies against recorded runs of the real engines.

tests/data/oracles/ holds seeded traces and the events that vLLM 0.33.0's and
SGLang 0.5.23's own scheduler code produced for them (README.md there says
how). Each trace is replayed here under the matching policy, and every tick's
dispatch (request -> tokens), every preemption and every finish must be the
engine's. Neither engine is needed to run this.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from scheduler_sim.engine.core import Engine
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.options import Options

DATA = Path(__file__).resolve().parent / "data" / "oracles"
CASES = sorted((engine, trace) for engine in ("vllm", "sglang")
               for pattern in ("[0-9]*.jsonl", "[0-9]*.jsonl.gz")
               for trace in (DATA / engine).glob(pattern)
               if ".events." not in trace.name)


def seed_of(trace: Path) -> int:
    """The seed a recorded trace is named after: 007.jsonl -> 7, 9000.jsonl.gz -> 9000."""
    return int(trace.name.split(".")[0])


def events_of(trace: Path) -> Path:
    """The engine's events beside `trace`: NNN.events.jsonl, gzipped like the trace."""
    return trace.with_name(trace.name.replace(".jsonl", ".events.jsonl", 1))


def read_bytes(path: Path) -> bytes:
    """The file's content, unzipped when its name ends in .gz (the runs at scale)."""
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


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
    parsed = parse_trace(read_bytes(trace), str(trace))
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
            assert events_of(trace).exists()


def first_difference(ours, theirs) -> int | None:
    """The first tick whose dispatch differs, or None."""
    return next((tick for tick in sorted(set(theirs[0]) | set(ours[0]))
                 if ours[0].get(tick) != theirs[0].get(tick)), None)


def _tier(engine: str, trace: Path):
    """The first 8 short traces of each engine (seeds 0-7: both orders, prefix caching,
    chunking, vLLM's prefill interval, SGLang's lpm and conservativeness), the first trace
    of 50 requests (100), SGLang's priority traces (300-399), the first of its traces
    with pages of 4 (400) and 16 tokens (500), and vLLM's first run of 500 requests
    (9000, 0.6 s of CPU) run by default; the others in the slow tier (the short ones
    cost 6 s of CPU in all, the other runs of 500 requests 0.7-1.1 s each)."""
    seed = seed_of(trace)
    default = (seed < 8 or seed == 100 or 300 <= seed < 400 or seed in (400, 500)
               or (engine, seed) == ("vllm", 9000))
    if default:
        return pytest.param(engine, trace)
    return pytest.param(engine, trace, marks=pytest.mark.slow)


@pytest.mark.parametrize("engine,trace", [_tier(e, t) for e, t in CASES],
                         ids=[f"{e}-{t.name.split('.')[0]}" for e, t in CASES])
def test_the_policy_makes_the_engines_decisions(engine, trace):
    """Tick for tick: the same rows with the same tokens, the same preemptions, the
    same finishes."""
    recorded = [json.loads(line) for line in
                read_bytes(events_of(trace)).decode().splitlines() if line.strip()]
    theirs = outline(recorded)
    ours = outline(replay(engine, trace))
    assert first_difference(ours, theirs) is None
    assert ours[1] == theirs[1], "preemptions"
    assert ours[2] == theirs[2], "finishes"
