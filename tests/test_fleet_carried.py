"""A fleet's replicas on the carried paths: a chunk run with nothing waiting
(engine/fast/chunk_run.py), a fold cut at the fleet's next arrival resumed where
the arrival went elsewhere (engine/fleet_link.py's `resume`), each folded against
stepped, counted where it is reached, and broken on purpose."""
from __future__ import annotations

import importlib
import random

import pytest
from conftest import slow_beyond, trace_bytes
from test_fleet import _workload

from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.fleet import Fleet
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.options import Options

link_module = importlib.import_module("scheduler_sim.engine.fleet_link")
fleet_module = importlib.import_module("scheduler_sim.fleet.fleet")

COST = dict(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
INF = float("inf")


def _trace(records):
    return parse_trace(trace_bytes([dict(r, type=r.get("type", "request"))
                                    for r in records]), "carried.jsonl")


def _replay(records, policy="vllm", fast_forward=None, **options):
    """(summary, replica summaries, request records by id, the fleet) of a fleet's replay
    (a lone engine's with `replicas` 1)."""
    trace = _trace(records)
    opts = Options.resolve(trace.config, options)
    if opts.replicas == 1:
        runner = Engine(trace.workload, opts, policy, fast_forward=fast_forward)
    else:
        runner = Fleet(trace.workload, opts, policy, fast_forward=fast_forward)
    result = runner.run()
    return (result.summary, getattr(result, "replicas", None),
            {r.rid: request_record(r) for r in result.requests}, runner)


def _calls(monkeypatch):
    """Count each replica's `schedule` calls (by the replica its policy serves)."""
    calls: dict[int, int] = {}
    real = Engine._step_once

    def counted(engine):
        if engine.flight is None and engine.roster.live:
            i = engine.link.replica or 0
            calls[i] = calls.get(i, 0) + 1
        return real(engine)

    monkeypatch.setattr(Engine, "_step_once", counted)
    return calls


def _resumes(monkeypatch):
    """Count the folds `resume` made (the fleet calls it by its own name)."""
    made = []
    real = link_module.resume

    def counted(engine, horizon):
        done = real(engine, horizon)
        made.append(done)
        return done

    monkeypatch.setattr(fleet_module, "resume", counted)
    return made


# --- a chunk run with nothing waiting -------------------------------------------------

PROMPT40 = [{"id": "a", "arrival": 0, "prompt_tokens": 40, "output_tokens": 3}]


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_lone_prompt_chunked_by_the_budget_folds_its_middle_chunks(replicas, monkeypatch):
    """A prompt of 40 tokens under a budget of 8, nothing else running or waiting: chunks
    at ticks 0-4 (the last ends the prompt), outputs at 5, 6, 7. The call at 0 plans the
    first chunk; the three after it (rows 8-32) are a chunk run, folded (no head waits
    to be reported blocked); calls at 0 and 4 (the last chunk): the first decode, at 5,
    starts without a call (`vllm` is at its fixed point under prefix caching,
    `repeats_decodes`) and its stretch folds to the finish: 2 against 7 stepped, on a
    lone engine or a fleet's replica."""
    options = dict(block_size=4, num_blocks=32, token_budget=8, max_rows=4,
                   prefix_caching=True, replicas=replicas)
    calls = _calls(monkeypatch)
    summary, _, records, runner = _replay(PROMPT40, **options)
    engine = runner if replicas == 1 else runner.engines[0]
    assert engine.steadiness.chunks_folded == 3
    assert calls == {0: 2}
    a = records["a"]
    assert (a["first_token"], a["finished"], summary["iterations"]) == (5, 7, 7)
    calls.clear()
    stepped = _replay(PROMPT40, fast_forward=False, **options)
    assert calls == {0: 7}
    assert stepped[:2] == (summary, _) and stepped[2] == records


def test_a_policy_that_promises_no_chunk_run_plans_each_chunk(monkeypatch):
    """The same prompt under `continuous` (no `repeats_chunk`): each of the five chunks
    is its call's, the decodes after them carried on (5 calls); the same times."""
    calls = _calls(monkeypatch)
    summary, _, records, runner = _replay(PROMPT40, "continuous", block_size=4,
                                          num_blocks=32, token_budget=8, max_rows=4,
                                          prefix_caching=True)
    assert (runner.steadiness.chunks_folded, calls) == (0, {0: 5})
    assert (records["a"]["first_token"], records["a"]["finished"]) == (5, 7)


# --- a fold resumed after an arrival that went elsewhere ------------------------------

# Replica 0 decodes `long` for a while; three short requests arrive meanwhile, each to
# the idle replica 1 (prefix-affinity without shared prefixes: the least loaded), each
# ended (one output) before the next arrives. Each arrival cuts replica 0's fold.
ELSEWHERE = ([{"id": "long", "arrival": 0, "prompt_tokens": 4, "output_tokens": 300}]
             + [{"id": f"s{k}", "arrival": 50 * k + 7, "prompt_tokens": 4,
                 "output_tokens": 1} for k in (1, 2, 3)])
FLEET2 = dict(block_size=4, num_blocks=256, token_budget=64, max_rows=4, replicas=2,
              router="prefix-affinity", prefix_caching=True, **COST)


def test_a_fold_cut_by_an_arrival_routed_elsewhere_is_resumed(monkeypatch):
    """Replica 0 is asked once (the admission of `long`; its first decode starts
    without a call, `repeats_decodes`, and its stretch folds): at each of the three
    arrivals its fold stops, and where its folded
    dispatch completes after it, nothing having reached it, it folds on (3 resumes)
    without a completion stepped or a call. Stepped, it is asked at every boundary; the
    records and summaries are the same."""
    calls = _calls(monkeypatch)
    made = _resumes(monkeypatch)
    summary, replicas, records, fleet = _replay(ELSEWHERE, **FLEET2)
    assert [r.replica for r in sorted(fleet.engines[1].requests.values(),
                                      key=lambda r: r.rid)] == [1, 1, 1]
    assert made == [True, True, True]
    assert calls == {0: 1, 1: 3}
    stepped = _replay(ELSEWHERE, fast_forward=False, **FLEET2)
    assert stepped[:3] == (summary, replicas, records)
    assert records["long"]["output_tokens"] == 300


def test_a_resume_stops_at_the_next_arrival_that_may_reach_the_replica(monkeypatch):
    """`long` on replica 0; `s1` (one output) and `s2` (300) go to replica 1, the least
    loaded; `s3` at tick 157 finds both replicas holding one request and goes to
    replica 0 (the lowest index). Replica 0's fold, cut at `s1` and at `s2`, is resumed
    twice, each time up to the next arrival; at `s3`'s it is stepped, and `s3` is
    admitted where the dispatch then in flight completes (318,304 us), as stepped. A
    resume that folds past the next arrival (broken on purpose) runs `long`'s stretch
    to its end first: `s3` is admitted only at 1,873,072 us."""
    records = [{"id": "long", "arrival": 0, "prompt_tokens": 4, "output_tokens": 300},
               {"id": "s1", "arrival": 57, "prompt_tokens": 4, "output_tokens": 1},
               {"id": "s2", "arrival": 107, "prompt_tokens": 4, "output_tokens": 300},
               {"id": "s3", "arrival": 157, "prompt_tokens": 4, "output_tokens": 20}]
    made = _resumes(monkeypatch)
    folded = _replay(records, **FLEET2)
    s3 = folded[2]["s3"]
    assert (s3["replica"], s3["admitted"], made) == (0, 318304, [True, True])
    assert _replay(records, fast_forward=False, **FLEET2)[:3] == folded[:3]
    real = link_module.resume
    monkeypatch.setattr(fleet_module, "resume", lambda engine, horizon: real(engine, INF))
    assert _replay(records, **FLEET2)[2]["s3"]["admitted"] == 1873072


def _random_fleet(seed: int) -> tuple[list[dict], dict]:
    """test_fleet.py's random workload (prefixes shared, cancellations, forced
    preemptions) spread for a cost model's clock (arrivals 25 times apart, outputs 4
    times longer) on 2-4 replicas, prefix caching on half, under one of four routers."""
    rng = random.Random(seed)
    records = [dict(r, arrival=25 * r["arrival"], output_tokens=4 * r["output_tokens"])
               if r.get("type", "request") == "request" else dict(r, at=25 * r["at"])
               for r in _workload(seed, prefixes=True)]
    options = dict(block_size=4, num_blocks=rng.randint(24, 200),
                   token_budget=rng.choice([8, 16, 64]), max_rows=rng.randint(1, 6),
                   replicas=rng.randint(2, 4), prefix_caching=rng.random() < 0.5,
                   router=rng.choice(["prefix-affinity", "least-loaded", "power-of-two",
                                      "round-robin"]), seed=seed, **COST)
    return records, options


@pytest.mark.parametrize("policy", ["vllm", "continuous", "sglang"])
@pytest.mark.parametrize("seed", slow_beyond(range(40), 10))
def test_random_fleets_agree_folded_and_stepped(seed, policy):
    """Folded (chunk runs, resumed folds, carried stretches) against stepped: every
    summary and request record the same."""
    records, options = _random_fleet(seed)
    folded = _replay(records, policy, **options)
    stepped = _replay(records, policy, fast_forward=False, **options)
    assert folded[:3] == stepped[:3]


def test_the_random_fleets_reach_the_new_paths(monkeypatch):
    """Over the default tier's ten seeds under `vllm`, resumes and chunk runs with
    nothing waiting both happen (so the agreement above covers them)."""
    made = _resumes(monkeypatch)
    chunks = 0
    for seed in range(10):
        records, options = _random_fleet(seed)
        fleet = _replay(records, "vllm", **options)[3]
        chunks += sum(e.steadiness.chunks_folded for e in fleet.engines)
    assert made.count(True) > 0 and chunks > 0


def test_a_stall_comes_at_the_latest_replica_time(monkeypatch):
    """`stall_the_stuck` stalls at the latest replica `now`, not at the fleet's time.
    Round-robin over 2 replicas, both requests arriving at 0: `a` (4 prompt tokens, 10
    outputs) on replica 0, `s` on replica 1. No built-in policy is known to leave a
    request stuck (the stall, E6b, guards plug-ins and bugs), and a plug-in is never
    carried (its replicas' `now` never passes the fleet's time); so replica 1's
    `vllm` is made to plan nothing by hand (its `schedule` replaced on the instance:
    still built-in, replica 0 still carried). Replica 0: `a`'s prompt at 0, nothing
    waits, and its decodes after it are carried on inside the fleet's step at 0
    through `a`'s end at 10 (10 outputs: one from the prompt, 9 decodes; no arrival
    left, so no horizon). Then nothing is due anywhere with the fleet at 0: `s`
    stalls at 10, as stepped (the fleet's boundaries reach 10 with replica 0's).
    Stalling at the fleet's time, as before fl36, ends `s` at 0."""
    records = [{"id": "a", "arrival": 0, "prompt_tokens": 4, "output_tokens": 10},
               {"id": "s", "arrival": 0, "prompt_tokens": 4, "output_tokens": 1}]
    options = dict(block_size=4, num_blocks=16, replicas=2, router="round-robin")

    def replay(fast):
        trace = _trace(records)
        fleet = Fleet(trace.workload, Options.resolve(trace.config, options), "vllm",
                      fast_forward=fast)
        fleet.engines[1].policy.schedule = lambda now: []
        result = fleet.run()
        return ({r.rid: (r.status.label, request_record(r)["finished"])
                 for r in result.requests}, result.summary, fleet)

    folded, summary, fleet = replay(True)
    assert folded == {"a": ("finished_length_capped", 10), "s": ("finished_error", 10)}
    assert fleet.engines[0].folded == 8 and [e.now for e in fleet.engines] == [10, 10]
    stepped = replay(False)
    assert stepped[:2] == (folded, summary) and stepped[2].engines[0].folded == 0

    # Before fl36: at the fleet's time (the live replicas' `now` is at most `t`).
    stall = fleet_module.stall_the_stuck
    monkeypatch.setattr(fleet_module, "stall_the_stuck",
                        lambda engines, t: stall([e for e in engines if e.live], t))
    assert replay(True)[0]["s"] == ("finished_error", 0)
