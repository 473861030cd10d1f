"""Fleets (fleet/): replicas behind a router; a fleet of one is the engine itself."""
from __future__ import annotations

import json
import random
from collections import deque

import pytest

from conftest import random_engine_options, req, run_cli, slow_beyond, trace_bytes, write_trace
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.fleet import Fleet
from scheduler_sim.fleet.routers import LeastLoaded, PrefixAffinity, make_router
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.io.report_series import RunSeries
from scheduler_sim.io.trace import parse_trace, read_trace
from scheduler_sim.policies import POLICIES
from scheduler_sim.records.clock import Clock
from scheduler_sim.records.options import Options
from scheduler_sim.records.workload import RequestSpec


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
    options = random_engine_options(rng, cost_model=seed % 3 == 0)
    if seed % 4 == 1:
        options.update(prefix_caching=True)
    if seed % 5 == 2:
        options.update(waiting_timeout=rng.randint(5, 40))
    return options


# --- a fleet of one --------------------------------------------------------------------


def _alone(base: int, seed: int, policy: str):
    """A random workload and options (seeded by base + seed), and its replay on one
    engine with its event records: what a fleet or lockstep of one must equal."""
    rng = random.Random(base + seed)
    options = _random_options(rng, seed)
    records = _workload(seed, prefixes=seed % 4 == 1)
    trace = _trace(records)
    opts = _options(trace, **options)
    events: list = []
    result = Engine(trace.workload, opts, policy,
                    on_event=lambda e: events.append(e.to_dict())).run()
    return records, options, trace, opts, result, events


@pytest.mark.parametrize("seed", slow_beyond(range(12), 3))  # 0-2: a cost model, prefixes, timeouts
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_fleet_of_one_replays_exactly_as_the_engine(seed, policy):
    """Summary, request records and every event record: the same, with folding on."""
    records, options, trace, opts, alone, alone_events = _alone(500, seed, policy)
    fleet_events: list = []
    fleet = Fleet(trace.workload, opts, policy,
                  on_event=lambda i: (lambda e: fleet_events.append(e.to_dict()))).run()
    assert fleet_events == alone_events
    assert fleet.summary == alone.summary
    assert fleet.replicas == [{"replica": 0, **alone.summary}]
    key = lambda r: r.index  # noqa: E731
    mine = [request_record(r) for r in sorted(fleet.requests, key=key)]
    assert {r.pop("replica") for r in mine} <= {0}
    assert mine == [request_record(r) for r in sorted(alone.requests, key=key)]
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


@pytest.mark.parametrize("seed", slow_beyond(range(10), 3))  # 0-2: a cost model, prefixes, timeouts
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


# --- data-parallel lockstep ------------------------------------------------------------


def _lockstep(records, policy="vllm", **options):
    from scheduler_sim.fleet import LockstepFleet
    trace = _trace(records)
    opts = _options(trace, dp_lockstep=True, **options)
    events = []
    result = LockstepFleet(trace.workload, opts, policy, audit=True,
                           on_event=lambda i: (lambda e: events.append((i, e.to_dict())))).run()
    return result, events


def _admitted(events):
    return {e["id"]: e["tick"] for _, e in events if e["event"] == "admitted"}


@pytest.mark.parametrize("seed", slow_beyond(range(8), 2))
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_one_lockstep_rank_replays_exactly_as_the_engine(seed, policy):
    records, options, _, _, alone, alone_events = _alone(700, seed, policy)
    result, events = _lockstep(records, policy, **options)
    assert [e for _, e in events] == alone_events
    assert {k: v for k, v in result.summary.items()
            if k not in ("lockstep_steps", "dummy_steps", "lockstep_wait")} == alone.summary
    assert result.summary["dummy_steps"] == 0 and result.summary["lockstep_wait"] == 0


def test_a_lockstep_step_lasts_as_long_as_its_slowest_rank():
    """Two ranks, one long prefill and one short: both dispatches end when the long one
    does, as it would alone; the short rank waits the difference. Llama-3-8B on an H100
    under the uncalibrated physics (`calibration: none`, `Coefficients()`): the linear
    layers read 13,958,643,712 weight bytes at 3.35e12 x 0.78 B/s = 5.34200 ms and
    compute 2 x 6,979,321,856 FLOPs a token at 989e12 x 0.75 = 0.0188185 ms a token,
    blended as sqrt(m^2 + c^2); the LM head reads 1,050,673,152 B in 0.402097 ms; a
    (query, key) pair costs 524,288 FLOPs at 494.5e12; a token's KV 131,072 B at 2.68e12
    B/s and its elementwise kernels 5,505,024 B at 1.675e12 B/s; a step 0.5 ms.
    The 2000-token prefill: linear sqrt(5.34200^2 + 37.6371^2) = 38.0143 ms, LM head
    0.402097, attention 2,001,000 pairs = 2.12154, KV write 0.0978149, elementwise
    6.57316, step 0.5: 47.70889 ms, done at ceil(47,708.89) = 47,709 us. The 8-token one:
    linear sqrt(5.34200^2 + 0.150548^2) = 5.34412, LM head 0.402097, attention 36 pairs =
    0.0000382, KV write 0.000391, elementwise 0.026293, step 0.5: 6.27294 ms, done at
    6,273 us."""
    cost = dict(cost_model="llama-3-8b/h100-sxm", calibration="none", tick_seconds=0.001,
                block_size=4, num_blocks=1024, token_budget=2048)
    long_, short = req("long", 0, 2000, 1), req("short", 0, 8, 1)
    alone_long, long_events = _fleet([long_], replicas=1, **cost)
    alone_short, short_events = _fleet([short], replicas=1, **cost)
    done = lambda events: [e["done"] for _, e in events if e["event"] == "dispatch"]  # noqa
    assert done(long_events) == [47709] and done(short_events) == [6273]  # clock steps (us)
    result, events = _lockstep([long_, short], replicas=2, **cost)
    assert [(i, e["done"]) for i, e in events if e["event"] == "dispatch"] == [(0, 47709),
                                                                              (1, 47709)]
    assert result.summary["e2el_max"] == result.summary["e2el_p50"] == 0.047709
    busy = [alone_long.summary["busy_seconds"], alone_short.summary["busy_seconds"]]
    assert [r["busy_seconds"] for r in result.replicas] == busy
    assert [r["lockstep_wait"] for r in result.replicas] == [0, pytest.approx(
        busy[0] - busy[1], abs=1e-6)]
    assert result.summary["lockstep_steps"] == 1 and result.summary["dummy_steps"] == 0


def test_an_idle_rank_runs_a_dummy_step_for_each_step_of_the_others():
    # a: prompt 4, 4 outputs on rank 0: a prefill step then 3 decode steps; rank 1 has
    # nothing: 4 dummy steps, 4 ticks of waiting.
    result, events = _lockstep([req("a", 0, 4, 4)], replicas=2, block_size=4, num_blocks=8)
    assert [r["dummy_steps"] for r in result.replicas] == [0, 4]
    assert [r["lockstep_wait"] for r in result.replicas] == [0, 4]
    assert result.summary["lockstep_steps"] == 4
    assert [r["iterations"] for r in result.replicas] == [4, 0]


# Block size 4, vllm, prefill_interval 2, token budget 8: `a` (prompt 8) fills step 0.
THROTTLE = dict(block_size=4, num_blocks=32, token_budget=8, prefill_interval=2)


def test_the_shared_counter_holds_prefill_on_odd_steps():
    # a -> rank 0, x -> rank 1 at tick 0; d -> rank 0 at tick 1. Step 0 (counter 0)
    # prefills a and x and empties both queues; step 1 (counter 1) holds d's prefill
    # while a decodes; step 2 (counter 2) admits it.
    records = [req("a", 0, 8, 10), req("x", 0, 4, 10), req("d", 1, 4, 2)]
    result, events = _lockstep(records, replicas=2, **THROTTLE)
    assert _routes(result, events) == {"a": 0, "x": 1, "d": 0}
    assert _admitted(events)["d"] == 2
    blocked = [e for i, e in events if e["event"] == "admission_blocked"]
    assert [(e["tick"], e["id"], e["reason"]) for e in blocked] == [(1, "d", "prefill_interval")]
    # Without the cadence, d is admitted on arrival.
    result, events = _lockstep(records, replicas=2, **dict(THROTTLE, prefill_interval=1))
    assert _admitted(events)["d"] == 1


def test_a_releasing_step_that_leaves_requests_waiting_lifts_the_hold():
    # d arrives with a at tick 0 but the budget is spent on a: step 0 releases prefill
    # and leaves d waiting (capacity-bound), so step 1 (counter 1) admits d anyway.
    records = [req("a", 0, 8, 10), req("x", 0, 4, 10), req("d", 0, 4, 2)]
    result, events = _lockstep(records, replicas=2, **THROTTLE)
    assert _routes(result, events) == {"a": 0, "x": 1, "d": 0}
    assert _admitted(events)["d"] == 1


def test_the_counter_starts_again_when_the_fleet_is_idle():
    # After everything ends the counter returns to 0: e, arriving on an idle fleet at
    # an odd count of steps run, is admitted at once; f, arriving at the next step
    # while e decodes, waits for an even step.
    records = [req("a", 0, 4, 3), req("e", 20, 4, 6), req("x", 20, 4, 6), req("f", 21, 4, 2)]
    result, events = _lockstep(records, replicas=2, **THROTTLE)
    assert _routes(result, events) == {"a": 0, "e": 1, "x": 0, "f": 1}
    admitted = _admitted(events)
    assert admitted["e"] == 20 and admitted["f"] == 22


def test_check_compares_a_fleets_summary_and_requests(tmp_path):
    records = [{"type": "config", "block_size": 4, "num_blocks": 8, "replicas": 2},
               req("a", 0, 4, 3), req("b", 0, 4, 3),
               {"type": "expect", "requests": 2, "completed": 2, "ttft_max": 1},
               {"type": "expect", "id": "b", "ttft": 1, "finished": 3}]
    path = write_trace(tmp_path, records)
    code, out, err = run_cli(["check", path])
    assert code == 0, out + err
    # Each replica ran three dispatches: the fleet's iterations are 6, not 3.
    bad = write_trace(tmp_path, records[:3] + [{"type": "expect", "iterations": 3}], "bad.jsonl")
    code, out, err = run_cli(["check", bad])
    assert code == 1 and "iterations" in out
    at = write_trace(tmp_path, records[:3] + [{"type": "expect", "at": 1, "free": 4}],
                     "at.jsonl")
    code, out, err = run_cli(["check", at])
    assert code == 2 and "need one engine, got replicas 2" in err


def test_the_api_replays_fleets_and_tags_events():
    import scheduler_sim as sim
    trace = sim.build([{"type": "config", "block_size": 4, "num_blocks": 8},
                       {"id": "a", "arrival": 0, "prompt_tokens": 4, "output_tokens": 2},
                       {"id": "b", "arrival": 0, "prompt_tokens": 4, "output_tokens": 2}])
    fleet = sim.replay(trace, "vllm", replicas=2)
    assert [r["requests"] for r in fleet.runs[0].replicas] == [1, 1]
    assert sim.replay(trace, "vllm").runs[0].replicas is None
    arrivals = [(e["id"], e["replica"]) for e in sim.events(trace, "vllm", replicas=2)
                if e["event"] == "arrival"]
    assert arrivals == [("a", 0), ("b", 1)]


def test_request_records_name_their_replica(tmp_path):
    records = [{"type": "config", "block_size": 4, "num_blocks": 8, "replicas": 2},
               req("a", 0, 4, 3), req("b", 0, 4, 3),
               {"type": "expect", "id": "b", "replica": 1},
               {"type": "expect", "id": "a", "replica": 0, "finished": 3}]
    path = write_trace(tmp_path, records)
    assert run_cli(["check", path])[0] == 0
    code, out, err = run_cli(["replay", path, "--requests"])
    assert code == 0, err
    table = out.split("requests under continuous")[1].splitlines()
    assert table[1].split()[:3] == ["id", "replica", "arrival"]
    assert [line.split()[:2] for line in table[2:]] == [["a", "0"], ["b", "1"]]
    code, out, err = run_cli(["replay", path, "--requests-csv", "-"])
    lines = out.splitlines()
    assert lines[0].startswith("policy,replica,id,arrival,")
    assert [line.split(",")[:3] for line in lines[1:]] == [["continuous", "0", "a"],
                                                          ["continuous", "1", "b"]]
    # One engine: no replica anywhere.
    code, out, err = run_cli(["replay", path, "--replicas", "1", "--requests-csv", "-"])
    assert out.splitlines()[0].startswith("policy,id,arrival,")


def test_lockstep_fields_can_be_expected(tmp_path):
    records = [{"type": "config", "block_size": 4, "num_blocks": 8, "replicas": 2,
                "dp_lockstep": True},
               req("a", 0, 4, 4),
               {"type": "expect", "lockstep_steps": 4, "dummy_steps": 4, "lockstep_wait": 4}]
    assert run_cli(["check", write_trace(tmp_path, records)])[0] == 0


def test_prefix_affinity_ignores_a_prefix_shorter_than_its_threshold():
    """Every request shares only its first block (a common system prompt) out of the 3
    blocks a hit can cover: 1 < 0.5 x 3, so the least loaded serves; with a threshold
    of 0 that one block pulls every request to the first replica. A request resending
    3 of 3 blocks of an earlier one follows it."""
    config = dict(prefix_caching=True, replicas=4, router="prefix-affinity", num_blocks=64)
    records = [{"type": "config", "block_size": 4, "hash_block_size": 4}]
    records += [req(f"r{i}", 0 if i == 0 else 4 + i, 16, 50,
                   block_hashes=[0, 100 + i, 200 + i, 300 + i]) for i in range(8)]
    records.append(req("again", 20, 16, 2, block_hashes=[0, 105, 205, 305]))
    trace = _trace(records)

    def routes(**extra):
        opts = _options(trace, **dict(config, **extra))
        events = []
        Fleet(trace.workload, opts, "vllm",
              on_event=lambda i: (lambda e: events.append((i, e.to_dict())))).run()
        return _routes(None, events)

    spread = routes()
    assert [spread[f"r{i}"] for i in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert spread["again"] == spread["r5"] == 1  # its 3 blocks are on replica 1 only
    piled = routes(affinity_threshold=0.0)
    assert [piled[f"r{i}"] for i in range(8)] == [0] * 8


def test_a_bound_that_excludes_its_minimum_says_so(tmp_path):
    path = write_trace(tmp_path, [req("a", 0, 4, 2)])
    code, out, err = run_cli(["replay", path, "--prefill-replicas", "1", "--decode-replicas",
                              "1", "--kv-link-gbps", "0"])
    assert code == 2 and "kv_link_gbps must be a number in (0, 1e+09], got 0.0" in err


@pytest.mark.parametrize("seed", slow_beyond(range(8), 3))
def test_random_lockstep_fleets_end_every_request_once_and_repeat(seed):
    """Lockstep ranks under every policy: audited conservation on every rank at every
    boundary, one end per request, the same run twice, each rank's dispatches all
    ending with their step."""
    rng = random.Random(1300 + seed)
    options = _random_options(rng, seed)
    policy = sorted(POLICIES)[seed % len(POLICIES)]
    records = _workload(seed, prefixes=True)
    replicas = rng.randint(2, 4)
    extra = dict(replicas=replicas, router=rng.choice(["round-robin", "least-loaded"]),
                 prefill_interval=rng.choice([1, 3]), **options)
    first, events = _lockstep(records, policy, **extra)
    again, events_again = _lockstep(records, policy, **extra)
    assert events == events_again and first.summary == again.summary
    ended = {}
    for i, event in events:
        if event["event"] in ("finished", "cancelled", "rejected", "timeout", "stalled"):
            assert event["id"] not in ended
            ended[event["id"]] = i
    ids = [r["id"] for r in records if r.get("type", "request") == "request"]
    assert sorted(ended) == sorted(ids) and _routes(first, events) == ended
    # The dispatches of one step all end together.
    ends: dict[int, set] = {}
    for i, event in events:
        if event["event"] == "dispatch":
            ends.setdefault(event["tick"], set()).add(event["done"])
    assert all(len(done) == 1 for done in ends.values())
    steps = first.summary["lockstep_steps"]
    assert steps == len(ends)
    assert sum(r["iterations"] + r["dummy_steps"] for r in first.replicas) == steps * replicas


def test_at_one_time_completions_come_first_then_routing_then_each_replica(tmp_path):
    """F2 with least-loaded: a -> 0 and y -> 1 at tick 0, then z (too large: rejected)
    ties 1-1 and goes to 0, moving the scan's start to replica 1. At tick 1 a's
    completion on replica 0 is recorded before b is routed: b sees replica 0 empty
    and replica 1 busy, and goes to 0; routed before the completion it would have
    seen a tie and, scanning from 1, gone to replica 1."""
    records = [req("a", 0, 4, 1), req("y", 0, 4, 5), req("z", 0, 1000, 1),
               req("b", 1, 4, 2)]
    result, events = _fleet(records, replicas=2, router="least-loaded", block_size=4,
                            num_blocks=16)
    assert _routes(result, events) == {"a": 0, "y": 1, "z": 0, "b": 0}
    at1 = [(i, e["event"], e.get("id")) for i, e in events if e["tick"] == 1]
    assert at1[:2] == [(0, "finished", "a"), (0, "arrival", "b")]
    # Then replica 0's step (b admitted and dispatched), then replica 1's.
    order = [i for i, kind, _ in at1 if kind == "dispatch"]
    assert order == [0, 1]


def test_round_robin_replicas_fold_past_arrivals_that_go_elsewhere():
    """Under round-robin every replica knows which arrival is its next: replica 0 folds
    a's long decode past b's and d's arrivals (they go to replica 1); the results are
    those of stepping every dispatch, and more dispatches are folded than when every
    arrival stops every replica's folding."""
    from scheduler_sim.fleet.routers import Router
    records = [req("a", 0, 4, 300), req("b", 50, 4, 300), req("c", 100, 4, 5),
               req("d", 150, 4, 300), req("e", 400, 4, 5)]
    trace = _trace(records)
    opts = _options(trace, replicas=2, block_size=4, num_blocks=400)
    folded = Fleet(trace.workload, opts, "continuous")
    result = folded.run()
    stepped = Fleet(trace.workload, opts, "continuous", fast_forward=False).run()
    assert result.summary == stepped.summary and result.replicas == stepped.replicas
    routes = {rid: r.replica for e in folded.engines for rid, r in e.requests.items()}
    assert routes == {"a": 0, "b": 1, "c": 0, "d": 1, "e": 0}
    blind = Fleet(trace.workload, opts, "continuous")
    blind.router.reaches = lambda replica, upcoming, count: Router.reaches(
        blind.router, replica, upcoming, count)  # every arrival stops every fold
    assert blind.run().summary == result.summary
    assert (sum(e.folded for e in folded.engines)
            > sum(e.folded for e in blind.engines) > 0)


def _evicting_trace(tmp_path) -> str:
    """Six requests of 16 distinct prompt tokens, two at a time, on two replicas of 8
    blocks of 4 tokens with prefix caching: each replica's later requests evict the
    cached blocks of its earlier ones."""
    records = [{"type": "config", "block_size": 4, "num_blocks": 8, "prefix_caching": True,
                "policy": ["vllm"], "replicas": 2}]
    records += [req(f"r{i}", 10 * (i // 2), 16, 2,
                    prompt_token_ids=list(range(100 * i, 100 * i + 16))) for i in range(6)]
    return write_trace(tmp_path, records)


def test_the_report_alone_keeps_no_writer_of_cached_blocks_and_draws_the_same(tmp_path):
    """The report's series read no `evicted` records, so a fleet replaying for the
    report alone keeps no writer per cached block on any replica (a plain listener
    does); with --events too the evicted records are written, and the report's bytes
    are the same either way."""
    path = _evicting_trace(tmp_path)
    trace = read_trace(path)
    opts = _options(trace)
    series = RunSeries("vllm", Clock.of(opts), opts.num_blocks, opts.replicas,
                       requests=len(trace.workload))
    alone = Fleet(trace.workload, opts, "vllm", on_event=series.listener)
    plain = Fleet(trace.workload, opts, "vllm", on_event=lambda i: (lambda e: None))
    assert [e.allocator.cache.writers for e in alone.engines] == [None, None]
    assert [e.allocator.cache.writers for e in plain.engines] == [{}, {}]
    reports = []
    for extra in ([], ["--events", str(tmp_path / "ev.jsonl")]):
        report = tmp_path / f"r{len(extra)}.html"
        code, _, err = run_cli(["replay", path, "--report", str(report), *extra])
        assert code == 0, err
        reports.append(report.read_bytes())
    evicted = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()
               if '"evicted"' in line]
    # Replica 0 serves r0, r2, r4: r2's first decode (tick 11) takes r0's last cached
    # block (3, its tail first); r4's prompt (tick 20) takes r0's blocks 2, 1, 0 after
    # r2's unkeyed fifth block, and its first decode r2's block 3. Replica 1 alike.
    assert [(e["tick"], e["replica"], e["id"], e["written_by"], e["block"])
            for e in evicted] == [
        (11, 0, "r2", "r0", 3), (11, 1, "r3", "r1", 3),
        (20, 0, "r4", "r0", 2), (20, 0, "r4", "r0", 1), (20, 0, "r4", "r0", 0),
        (20, 1, "r5", "r1", 2), (20, 1, "r5", "r1", 1), (20, 1, "r5", "r1", 0),
        (21, 0, "r4", "r2", 3), (21, 1, "r5", "r3", 3)]
    assert reports[0] == reports[1]


def test_replicas_share_one_set_of_the_ids_the_trace_cancels_or_preempts():
    """Three replicas of a trace that cancels a and preempts c keep one set {a, c}
    between them, not a copy each."""
    trace = _trace([req("a", 0, 5, 3), req("b", 0, 9, 2), req("c", 1, 4, 4),
                    {"type": "cancel", "id": "a", "at": 2},
                    {"type": "preempt", "id": "c", "at": 2}])
    fleet = Fleet(trace.workload, _options(trace, replicas=3), "vllm")
    named = [engine.roster.named for engine in fleet.engines]
    assert named[0] == {"a", "c"} and named[0] is named[1] is named[2]


def test_the_replica_agenda_gives_each_due_replica_once_and_skips_moved_boundaries():
    """Replicas 0-2: 0 at 5, 2 at 3, then 0 moved to 4 (its entry at 5 is stale) and 1
    at 4 twice: peek is 3; due(3) is [2]; peek 4; due(4) is [0, 1] once each; the
    stale 5 is skipped, so nothing is left (infinity); a replica set to infinity is
    never due; 1 set twice at 7, alone: due(7) is [1]."""
    from scheduler_sim.fleet.replica_agenda import ReplicaAgenda
    INF = float("inf")

    agenda = ReplicaAgenda(3)
    agenda.set(0, 5)
    agenda.set(2, 3)
    agenda.set(0, 4)
    agenda.set(1, 4)
    agenda.set(1, 4)
    assert (agenda.peek(), agenda.due(3)) == (3, [2])
    assert (agenda.peek(), agenda.due(4)) == (4, [0, 1])
    assert (agenda.peek(), agenda.due(10), agenda.at) == (INF, [], [4, 4, 3])
    agenda.set(2, INF)
    assert (agenda.peek(), agenda.due(INF)) == (INF, [])
    # One replica due alone, set twice at that time: due once.
    agenda.set(1, 7)
    agenda.set(1, 7)
    assert (agenda.peek(), agenda.due(7), agenda.peek()) == (7, [1], INF)


class _Holder:
    """A replica as prefix-affinity reads it: the keys its cache holds, and the
    leading blocks a look-up finds (`found`); counts its look-ups."""

    def __init__(self, index, held, found):
        self.index, self.held, self.found, self.looked = index, set(held), found, 0

    def holds(self, key):
        return key in self.held

    def cached_blocks(self, keys, max_blocks):
        self.looked += 1
        return min(self.found, max_blocks)


def test_prefix_affinity_looks_up_only_replicas_that_may_change_the_best_hit():
    # Keys 0..5 (hash-id keys of one entry of 6 blocks of 4). Replica 0 finds 2
    # blocks; replica 1 holds no first key; replica 2 finds 4 (load 3); replica 3
    # lacks key 3 (it found 2: not looked up after replica 2); replica 4 finds 4
    # with load 1: the best; replica 5 holds key 3 but not key 4, and is no lighter
    # (not looked up: it finds at most 4 and loses the tie); replica 6 holds keys
    # 3 and 4 but finds 1 (a gap; looked up: it might have found 5).
    keys = BlockKeys(0, 24, 4, 24, hashes=[7])
    first = keys.ensure(6)[0]
    replicas = [_Holder(0, [first, first + 1], 2), _Holder(1, [], 0),
                _Holder(2, range(first, first + 4), 4), _Holder(3, [first, first + 1], 2),
                _Holder(4, range(first, first + 4), 4), _Holder(5, [first + 3], 4),
                _Holder(6, [first + 3, first + 4], 1)]
    loads = [0, 0, 3, 0, 1, 1, 0]
    assert PrefixAffinity.longest_hit(keys, 5, replicas, loads) == (4, 4)
    assert [r.looked for r in replicas] == [1, 0, 1, 0, 1, 0, 1]
    # Nobody holds the first key: no hit, nobody looked up.
    assert PrefixAffinity.longest_hit(keys, 5, replicas[1:2], [0]) == (0, 0)
    assert replicas[1].looked == 0


def test_round_robin_reaches_a_replica_at_the_next_arrival_whose_turn_it_is():
    # Turn 5 of 4 replicas (arrival 5 goes to replica 1): of the next arrivals at
    # 10, 11, 12, replica 1 gets the first, 3 the third, 0 none of them.
    router = make_router(Options(router="round-robin", replicas=4))
    router.turn = 5
    upcoming = deque(RequestSpec(f"r{t}", t, t, 4, 2, 2) for t in (10, 11, 12))
    assert [router.reaches(i, upcoming, 4) for i in range(4)] == [float("inf"), 10, 11, 12]


def test_prefix_affinity_reads_keys_as_runs_for_vllm_replicas(monkeypatch):
    """The router asks for a request's keys as runs, as vLLM's cache does: replaying
    the previous test's requests (one resending 3 of 3 blocks) on 4 vllm replicas
    under prefix-affinity makes no request's key list (`BlockKeys.keys`), where the
    router once made one for every request, and the cache then kept it up to date
    (an int object per key)."""
    made = []
    listed = BlockKeys.keys.fget
    monkeypatch.setattr(BlockKeys, "keys", property(lambda self: made.append(1) or listed(self)))
    records = [{"type": "config", "block_size": 4, "hash_block_size": 4}]
    records += [req(f"r{i}", 0 if i == 0 else 4 + i, 16, 50,
                    block_hashes=[0, 100 + i, 200 + i, 300 + i]) for i in range(8)]
    records.append(req("again", 20, 16, 2, block_hashes=[0, 105, 205, 305]))
    result, events = _fleet(records, "vllm", audit=False, prefix_caching=True, replicas=4,
                            router="prefix-affinity", num_blocks=64, affinity_threshold=0)
    assert made == []  # (an audit reads the list: not asked here)
    assert result.summary["completed"] == 9
    again = [e for _, e in events if e["event"] == "admitted" and e["id"] == "again"]
    assert [e["cached_tokens"] for e in again] == [12]  # (r5's 3 blocks, found)
