"""The engine's public step protocol is enough to drive it (engine/core.py).

A driver written here, from the protocol's names only (the way a fleet drives
its replicas, spec §13), runs one routed engine over a trace: it hands over
each arrival and its cancellations, then calls the phases in their order. Its
results must be the lone engine's `run`, field for field, on random workloads
of every policy, with and without a cost model.
"""
from __future__ import annotations

import random

import pytest

from conftest import random_engine_options, random_workload, trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.policies import POLICIES
from scheduler_sim.records.options import Options

INF = float("inf")


def drive(workload, options: Options, policy: str) -> tuple[dict, list]:
    """One routed engine, driven through the public protocol only."""
    engine = Engine(workload, options, policy, routed=True)
    workload = workload.on_clock(engine.clock)
    actions: dict[str, list] = {}
    for action in workload.cancels + workload.preempts:
        actions.setdefault(action.id, []).append(action)
    specs = workload.arrivals()
    spec = next(specs, None)
    t = first = spec.arrival if spec is not None else 0
    while True:
        engine.now = t
        engine.complete_due()                              # E1
        while spec is not None and spec.arrival == t:     # the arrivals, with their actions
            for action in actions.get(spec.id, ()):
                engine.accept_action(action)
            engine.accept(spec)
            spec = next(specs, None)
        engine.take_outside_events()                      # E2, E3 up to the policy
        if engine.stall_if_livelocked():
            break
        engine.link.horizon = spec.arrival if spec is not None else INF
        moved = engine.step()                             # E3
        nxt = engine.next_boundary(moved)                 # E7
        if spec is not None and spec.arrival < nxt:
            nxt = spec.arrival
        if nxt == INF:
            if engine.live:
                engine.stall()
            break
        t = nxt
    summary = engine.stats.summary(engine.allocator.peak_reserved, engine.allocator.peak_held,
                                   first)
    return summary, [request_record(r) for r in engine.requests.values()]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_driver_of_the_protocol_reproduces_the_lone_engine(seed, policy):
    rng = random.Random(7000 + seed)
    options = random_engine_options(rng, cost_model=seed % 2 == 1)
    trace = parse_trace(trace_bytes(random_workload(seed)), "protocol.jsonl")
    opts = Options.resolve(trace.config, options)
    lone = Engine(trace.workload, opts, policy).run()
    expected = (lone.summary, [request_record(r) for r in lone.requests])
    summary, records = drive(trace.workload, opts, policy)
    assert (summary, sorted(records, key=lambda r: r["id"])) == (
        expected[0], sorted(expected[1], key=lambda r: r["id"]))
