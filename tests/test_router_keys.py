"""A router's keys handed to the chosen replica (`FleetLink.take_keys`): prefix-affinity
computes a request's block keys to look caches up; the replica it chose takes them as
the request's keys instead of computing them again. The same keys, the same replay."""
from __future__ import annotations

import random

import pytest

from conftest import random_engine_options, slow_beyond, trace_bytes
from test_hash_holders import _hashed_workload
from scheduler_sim.engine.fleet_link import FleetLink
from scheduler_sim.engine.summary import request_record
from scheduler_sim.fleet import Fleet
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.records.options import Options


def _counting_take(monkeypatch, handed: list, off: bool = False) -> None:
    """Count the keys replicas take from their link (`handed`: (rid, keys computed
    then, keys) each);
    with `off`, none is taken (each replica computes its own, as before)."""
    take = FleetLink.take_keys

    def counted(link, req):
        keys = None if off else take(link, req)
        if keys is not None:
            handed.append((req.rid, len(keys.keys), keys))
        return keys

    monkeypatch.setattr(FleetLink, "take_keys", counted)


def test_take_keys_gives_the_keys_once_to_their_request_only():
    link = FleetLink()

    class Req:
        def __init__(self, index):
            self.index = index

    keys = BlockKeys(3, 16, 4, 8, hashes=[7, 8])
    keys.ensure(2)
    keys.found = ("a radix tree's kept answer",)
    link.keys = keys
    assert link.take_keys(Req(4)) is None   # another request's: not given
    assert link.take_keys(Req(3)) is keys    # its own, without the router's answer
    assert (keys.found, keys.keys[:2], link.keys) == (None, [keys.keys[0], keys.keys[0] + 1],
                                                      None)
    assert link.take_keys(Req(3)) is None    # once
    assert FleetLink().take_keys(Req(0)) is None


def test_a_fleet_hands_the_routers_keys_to_the_chosen_replica(monkeypatch):
    # Blocks of 4, entries of 8 tokens. r0 (hash ids 1, 2) goes to replica 0 (both
    # empty: the lightest, the first); r1 (1, 2, 3) hits r0's 4 blocks cached there:
    # the router computes r1's keys to look replica 0 up, and replica 0 takes them. r2
    # (arriving with r1, which is queued on replica 0 by then) has a prompt of 4
    # tokens: no block may hit, no keys computed, none handed; it goes to the
    # lightest, replica 1.
    records = [{"type": "config", "block_size": 4, "hash_block_size": 8},
               {"type": "request", "id": "r0", "arrival": 0, "prompt_tokens": 16,
                "output_tokens": 2, "block_hashes": [1, 2]},
               {"type": "request", "id": "r1", "arrival": 50, "prompt_tokens": 24,
                "output_tokens": 2, "block_hashes": [1, 2, 3]},
               {"type": "request", "id": "r2", "arrival": 50, "prompt_tokens": 4,
                "output_tokens": 2, "block_hashes": [9]}]
    trace = parse_trace(trace_bytes(records), "keys.jsonl")
    opts = Options.resolve(trace.config, dict(
        block_size=4, num_blocks=32, token_budget=64, max_rows=4, prefix_caching=True,
        replicas=2, router="prefix-affinity"))
    handed: list = []
    _counting_take(monkeypatch, handed)
    result = Fleet(trace.workload, opts, "vllm").run()
    # r0: the router looked nobody up (nobody was sent hash id 1), but made its first
    # key (ensure(1)) before asking: handed, 1 key computed. r1: replica 0 was sent
    # hash id 1, and looked up in one slice as far as most = 23 // 4 = 5 blocks (it
    # finds r0's 4): handed, 5 keys computed. r2: none.
    assert [(rid, computed) for rid, computed, _ in handed] == [("r0", 1), ("r1", 5)]
    fresh = BlockKeys(1, 24, 4, 8, hashes=[1, 2, 3])
    assert handed[1][2].keys[:5] == fresh.ensure(5)
    assert {r.rid: r.replica for r in result.requests} == {"r0": 0, "r1": 0, "r2": 1}
    assert result.summary["cached_tokens"] == 16


@pytest.mark.parametrize("seed", slow_beyond(range(8), 3))
def test_handed_keys_replay_as_keys_computed_by_the_replica(seed, monkeypatch):
    rng = random.Random(7100 + seed)
    options = random_engine_options(rng, cost_model=seed % 3 == 0)
    options["num_blocks"] = rng.randint(24, 64)  # evictions, and room for a prompt
    records = _hashed_workload(rng, rng.choice([4, 6, 8]))
    trace = parse_trace(trace_bytes(records), "hashed.jsonl")
    opts = Options.resolve(trace.config, dict(
        options, prefix_caching=True, replicas=rng.randint(2, 5), router="prefix-affinity",
        affinity_threshold=rng.choice([0.0, 0.5]), affinity_slack=rng.choice([0, 2, 16]),
        router_signal_delay=[0, 3][seed % 2]))
    policy = ["vllm", "sglang"][seed // 2 % 2]

    def replay(off: bool):
        handed: list = []
        with monkeypatch.context() as patch:
            _counting_take(patch, handed, off)
            result = Fleet(trace.workload, opts, policy).run()
        return (result.summary, result.replicas,
                sorted((request_record(r) for r in result.requests), key=lambda r: r["id"]),
                handed)

    *expected, none = replay(off=True)
    *got, handed = replay(off=False)
    assert got == expected
    assert none == []
    # Every request whose prompt may hit a block was handed its keys.
    assert len(handed) == sum(1 for r in records if r.get("type") == "request"
                              and (r["prompt_tokens"] - 1) // 4 > 0)
