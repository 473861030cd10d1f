"""Fleets (fleet/): replicas behind a router; a fleet of one is the engine itself."""
from __future__ import annotations

import dataclasses
import json
import random

import pytest

from conftest import req, run_cli, trace_bytes, write_trace
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.fleet import Fleet
from scheduler_sim.fleet.routers import LeastLoaded, make_router
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.policies import POLICIES
from scheduler_sim.records.options import Options


def _trace(records):
    full = [dict(r, type=r.get("type", "request")) for r in records]
    return parse_trace(trace_bytes(full), "fleet.jsonl")


def _options(trace, **options) -> Options:
    return Options.resolve(trace.config, options)


def _fleet(records, policy="continuous", audit=True, **options):
    """(result, events as (replica, dict)) of a fleet replay."""
    trace = _trace(records)
    opts = _options(trace, **options)
    events = []
    result = Fleet(trace.workload, opts, policy, audit=audit,
                   on_event=lambda i: (lambda e: events.append((i, e.to_dict())))).run()
    return result, events


def _workload(seed: int, prefixes: bool = False) -> list[dict]:
    rng = random.Random(seed)
    records = []
    t = 0
    for i in range(rng.randint(1, 30)):
        t += rng.choice([0, 0, 1, 3, 10, 40])
        prompt = rng.randint(1, 40)
        record = {"id": f"r{i}", "arrival": t, "prompt_tokens": prompt,
                  "output_tokens": rng.randint(1, 60)}
        if prefixes:
            group = rng.randint(0, 2)
            record["prompt_token_ids"] = [group * 1000 + k if k < 12 else rng.randint(0, 99)
                                          for k in range(prompt)]
        records.append(record)
        if rng.random() < 0.1:
            records.append({"type": "cancel", "id": f"r{i}", "at": t + rng.randint(0, 50)})
        if rng.random() < 0.1:
            records.append({"type": "preempt", "id": f"r{i}", "at": t + rng.randint(0, 20)})
    return records


def _random_options(rng: random.Random, seed: int) -> dict:
    options = dict(block_size=4, num_blocks=rng.randint(16, 64),
                   token_budget=rng.randint(4, 64), max_rows=rng.randint(1, 8),
                   release_delay=rng.choice([0, 0, 2]))
    if seed % 3 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    if seed % 4 == 1:
        options.update(prefix_caching=True)
    if seed % 5 == 2:
        options.update(waiting_timeout=rng.randint(5, 40))
    return options


# --- a fleet of one --------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_fleet_of_one_replays_exactly_as_the_engine(seed, policy):
    """Summary, request records and every event record: the same, with folding on."""
    rng = random.Random(500 + seed)
    options = _random_options(rng, seed)
    records = _workload(seed, prefixes=seed % 4 == 1)
    trace = _trace(records)
    opts = _options(trace, **options)
    alone_events: list = []
    alone = Engine(trace.workload, opts, policy,
                   on_event=lambda e: alone_events.append(e.to_dict())).run()
    fleet_events: list = []
    fleet = Fleet(trace.workload, opts, policy,
                  on_event=lambda i: (lambda e: fleet_events.append(e.to_dict()))).run()
    assert fleet_events == alone_events
    assert fleet.summary == alone.summary
    assert fleet.replicas == [{"replica": 0, **alone.summary}]
    key = lambda r: r.index  # noqa: E731
    assert ([request_record(r) for r in sorted(fleet.requests, key=key)]
            == [request_record(r) for r in sorted(alone.requests, key=key)])
    # Folding (no listener) changes nothing either.
    quiet = Fleet(trace.workload, opts, policy).run()
    assert quiet.summary == alone.summary


def test_replicas_1_on_the_command_line_prints_what_it_printed_before(tmp_path):
    path = write_trace(tmp_path, [req("a", 0, 5, 3), req("b", 1, 9, 2),
                                  {"type": "cancel", "id": "b", "at": 2}])
    plain = run_cli(["replay", path, "--json", "--events", str(tmp_path / "e1")])
    one = run_cli(["replay", path, "--json", "--events", str(tmp_path / "e2"),
                   "--replicas", "1"])
    assert plain[0] == one[0] == 0
    assert json.loads(plain[1])["options"] == {
        k: v for k, v in json.loads(one[1])["options"].items()}
    assert "replicas" not in json.loads(one[1])["options"]
    assert (tmp_path / "e1").read_bytes() == (tmp_path / "e2").read_bytes()


# --- routers, by hand ------------------------------------------------------------------


def _routes(result, events):
    """{request id: replica} from the arrival events."""
    return {e["id"]: i for i, e in events if e["event"] == "arrival"}


def test_round_robin_deals_arrivals_in_turn():
    records = [req(f"r{i}", i // 2, 4, 2) for i in range(5)]
    result, events = _fleet(records, replicas=2, block_size=4, num_blocks=8)
    assert _routes(result, events) == {"r0": 0, "r1": 1, "r2": 0, "r3": 1, "r4": 0}
    assert [r["requests"] for r in result.replicas] == [3, 2]
    assert result.summary["requests"] == 5
    assert result.summary["completed"] == 5


def test_least_loaded_counts_requests_routed_at_the_same_tick_and_rotates_ties():
    # Four long requests at tick 0 on three replicas: scores 0,0,0 -> 0 (start 0);
    # then 1,0,0 from start 1 -> 1; then 1,1,0 from start 2 -> 2; then all 1 from
    # start 0 -> 0.
    records = [req(f"r{i}", 0, 4, 20) for i in range(4)]
    result, events = _fleet(records, replicas=3, router="least-loaded", block_size=4,
                            num_blocks=32)
    assert _routes(result, events) == {"r0": 0, "r1": 1, "r2": 2, "r3": 0}


class _View:
    def __init__(self, index, waiting, running, usage):
        self.index, self.waiting, self.running, self.kv_usage = index, waiting, running, usage


def test_least_loaded_score_penalises_a_queue_on_a_full_pool():
    # Replica 0: 2 waiting + 1 running at 75% usage: 3 + 2 * 6 * 0.25 = 6.
    # Replica 1: 4 running, nothing waiting: 4. Replica 2: 5 waiting at 40%: 5.
    views = [_View(0, 2, 1, 0.75), _View(1, 0, 4, 0.9), _View(2, 5, 0, 0.4)]
    assert [LeastLoaded.score(v) for v in views] == [6.0, 4.0, 5.0]
    router = make_router(Options(router="least-loaded", replicas=3))
    assert router.choose(None, views) == 1


def test_prefix_affinity_follows_the_cached_prefix_until_the_slack_is_spent():
    shared = list(range(100, 112))  # three full blocks of 4
    records = [req("a", 0, 12, 30, prompt_token_ids=shared)]
    # b shares a's prefix: it goes where a's blocks are cached (replica 0), although
    # replica 1 is emptier; c has its own prompt: least loaded (replica 1).
    records += [req("b", 2, 12, 2, prompt_token_ids=shared),
                req("c", 2, 8, 2, prompt_token_ids=list(range(8)))]
    result, events = _fleet(records, replicas=2, router="prefix-affinity",
                            prefix_caching=True, block_size=4, num_blocks=32, policy="vllm")
    assert _routes(result, events) == {"a": 0, "b": 0, "c": 1}
    # With a slack of 0, b finds replica 0 busier (a runs there) than replica 1: b
    # goes to the least loaded; then c finds one request on each: a tie, replica 0.
    result, events = _fleet(records, replicas=2, router="prefix-affinity", affinity_slack=0,
                            prefix_caching=True, block_size=4, num_blocks=32, policy="vllm")
    assert _routes(result, events) == {"a": 0, "b": 1, "c": 0}


def test_power_of_two_takes_the_less_loaded_of_two_seeded_draws():
    rng = random.Random(7)
    draws = [rng.sample(range(4), 2) for _ in range(3)]
    router = make_router(Options(router="power-of-two", replicas=4, seed=7))
    views = [_View(i, 0, load, 0.0) for i, load in enumerate([5, 1, 3, 1])]
    chosen = [router.choose(None, views) for _ in range(3)]
    loads = [5, 1, 3, 1]
    assert chosen == [b if loads[b] < loads[a] else a for a, b in draws]


# --- random fleets -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("router", ["round-robin", "least-loaded", "prefix-affinity",
                                    "power-of-two"])
def test_every_request_ends_once_on_one_replica_and_runs_repeat(seed, router):
    rng = random.Random(900 + seed)
    options = _random_options(rng, seed)
    policy = sorted(POLICIES)[seed % len(POLICIES)]
    records = _workload(seed, prefixes=True)
    replicas = rng.randint(2, 4)
    # audit: the full block conservation audit at every boundary of every replica.
    first, events = _fleet(records, policy, replicas=replicas, router=router, seed=seed,
                           **options)
    again, events_again = _fleet(records, policy, replicas=replicas, router=router, seed=seed,
                                 **options)
    assert events == events_again and first.summary == again.summary
    ids = [r["id"] for r in records if r.get("type", "request") == "request"]
    ended = {}
    for i, event in events:
        if event["event"] in ("finished", "cancelled", "rejected", "timeout", "stalled"):
            assert event["id"] not in ended, event
            ended[event["id"]] = i
    assert sorted(ended) == sorted(ids)
    assert _routes(first, events) == ended
    assert sum(r["requests"] for r in first.replicas) == len(ids) == first.summary["requests"]
    assert first.summary["completed"] == sum(r["completed"] for r in first.replicas)
    folded = Fleet(_trace(records).workload,
                   _options(_trace(records), replicas=replicas, router=router, seed=seed,
                            **options), policy).run()
    assert folded.summary == first.summary


def test_fleet_events_carry_the_replica_on_the_command_line(tmp_path):
    path = write_trace(tmp_path, [req("a", 0, 5, 3), req("b", 0, 9, 2)])
    code, out, err = run_cli(["replay", path, "--replicas", "2", "--events",
                              str(tmp_path / "ev"), "--json", "--policy", "vllm",
                              "--policy", "continuous"])
    assert code == 0, err
    lines = (tmp_path / "ev").read_text().splitlines()
    first = json.loads(lines[0])
    assert list(first)[:4] == ["tick", "event", "policy", "replica"]
    assert {(json.loads(l)["id"], json.loads(l)["replica"]) for l in lines
            if json.loads(l)["event"] == "arrival"} == {("a", 0), ("b", 1)}
    doc = json.loads(out)
    assert doc["options"]["replicas"] == 2
    assert [r["replica"] for r in doc["runs"][0]["replicas"]] == [0, 1]
    assert [r["requests"] for r in doc["runs"][0]["replicas"]] == [1, 1]


def test_the_table_shows_each_replica(tmp_path):
    path = write_trace(tmp_path, [req("a", 0, 5, 3), req("b", 0, 9, 2), req("c", 1, 4, 4)])
    code, out, err = run_cli(["replay", path, "--replicas", "2"])
    assert code == 0, err
    assert "replicas under continuous (router round-robin)" in out
    block = out.split("replicas under continuous")[1].splitlines()
    assert block[1].split() == ["0", "1"]
    assert block[2].split() == ["requests", "2", "1"]


def test_closed_loop_clients_are_refused_with_replicas(tmp_path):
    path = write_trace(tmp_path, [req("a", 0, 5, 3)])
    code, out, err = run_cli(["replay", path, "--replicas", "2", "--max-concurrency", "2"])
    assert code == 2
    assert "max_concurrency (closed-loop clients) is not modelled across replicas" in err
    code, out, err = run_cli(["replay", path, "--replicas", "0"])
    assert code == 2 and "replicas must be an integer from 1 to 1,024, got 0" in err
