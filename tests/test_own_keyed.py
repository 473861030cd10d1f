"""A request's own keys (its decodes' blocks) noted by the allocator itself: once
vLLM's cache has the request in its `unindexed` and tracks no writer, raising
`registered` is all a registration does, and the allocator does it without
calling the cache (kv/prefix_lookups.py). Against the cache's own path (taken
when writers are tracked, as for `evicted` records): the same tables, keys,
index and queue, fewer calls."""
from __future__ import annotations

import pytest

from scheduler_sim.engine.core import Engine
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.vllm_cache import VllmCache
from scheduler_sim.records.options import Options

from conftest import trace_bytes
from test_vllm import random_workload


@pytest.fixture
def calls(monkeypatch):
    """Counts `VllmCache.register` calls (the allocator binds it when made)."""
    counted = []
    register = VllmCache.register

    def counting(self, rid, keys, full, table):
        counted.append((rid, keys.registered, full))
        return register(self, rid, keys, full, table)

    monkeypatch.setattr(VllmCache, "register", counting)
    monkeypatch.setattr(VllmCache, "register_decoded", counting)
    return counted


def _state(a, keys):
    cache = a.cache
    return (dict(a._tables), keys.registered, keys.known, list(keys.tail),
            dict(cache.index.items()), dict(cache.others), cache.queue_items(),
            {rid: (list(table), start) for rid, (table, start) in cache.unindexed.items()})


def test_own_keys_are_noted_without_the_cache_and_found_again_after_a_preemption(calls):
    """Pool of 8, blocks of 4, entries of 8 tokens. A (trace position 3, hash id
    9300001, 12 prompt tokens: keys e2, e2 + 1 on blocks 0, 1, its own b"r3:2" on 2,
    all indexed with the prompt). Its decodes fill 3 (the cache's call: A joins
    `unindexed` from 3), 4 and 5 (no call: `registered` 4 -> 5 -> 6); rows 20 again
    and 26 change nothing (no call either way: no block filled). Preempted, b"r3:3" to b"r3:5" are indexed and its look-up
    finds all six blocks; shared back, it fills 6 (a call: unindexed from 6) and 7
    (none) and ends: 7, 6 queue first without keys, then 5 to 2 with theirs, then 1, 0.
    B's two blocks evict 7 and 6 (nothing forgotten), its third 5 (b"r3:5" forgotten).
    The same with writers tracked (every registration that fills a block a call: 6, against 3),
    which reports A as the writer of 7, 6 and 5."""
    reported = []
    a = BlockAllocator(8, 4, cache=VllmCache())
    t = BlockAllocator(8, 4, cache=VllmCache())
    t.track_evictions(lambda rid, writer, block: reported.append((rid, writer, block)))
    ka = BlockKeys(3, 12, 4, 8, hashes=[9300001])
    kt = BlockKeys(3, 12, 4, 8, hashes=[9300001])
    for x, keys in ((a, ka), (t, kt)):
        x.grow("A", 12)
        x.register_full_blocks("A", keys, 12)
        for rows in (16, 20):
            x.grow("A", rows)
            x.register_decoded("A", keys, rows)
        x.register_decoded("A", keys, 20)
        x.grow("A", 24)
        x.register_full_blocks("A", keys, 24)
        x.register_full_blocks("A", keys, 26)
        x.audit()
    e2 = ka.run_key[0]
    own = [b"r3:2", b"r3:3", b"r3:4", b"r3:5"]
    assert [c[1:] for c in calls] == [(0, 3), (3, 4),  # a: the prompt, A's first own block
                                      (0, 3), (3, 4), (4, 5), (5, 6)]  # t: each filling one
    assert _state(a, ka) == _state(t, kt) == (
        {"A": [0, 1, 2, 3, 4, 5]}, 6, 6, own, {e2: 0, e2 + 1: 1, b"r3:2": 2}, {},
        ([], []), {"A": ([0, 1, 2, 3, 4, 5], 3)})  # (the audit made the keys it checks)
    del calls[:]
    for x, keys in ((a, ka), (t, kt)):
        assert x.free_request("A", 0, 0) == 6
        hits = x.lookup(keys, 6)
        assert hits == [0, 1, 2, 3, 4, 5]
        x.share("A", hits, keys)
        for rows in (28, 32):
            x.grow("A", rows)
            x.register_decoded("A", keys, rows)
        x.audit()
    assert [c[1:] for c in calls] == [(6, 7), (6, 7), (7, 8)]
    assert _state(a, ka) == _state(t, kt) == (
        {"A": [0, 1, 2, 3, 4, 5, 6, 7]}, 8, 8, own + [b"r3:6", b"r3:7"],
        {e2: 0, e2 + 1: 1, b"r3:2": 2, b"r3:3": 3, b"r3:4": 4, b"r3:5": 5}, {},
        ([], []), {"A": ([0, 1, 2, 3, 4, 5, 6, 7], 6)})
    for x, keys in ((a, ka), (t, kt)):
        assert x.free_request("A", 0, 0, 32, True) == 8
        assert x.cache.queue_items() == ([7, 6, 5, 4, 3, 2, 1, 0],
                                         [None, None] + own[::-1] + [e2 + 1, e2])
        x.grow("B", 8)
        assert (x.table("B"), x.step_evictions) == ([7, 6], {"B": 2})
        x.grow("B", 12)
        assert (x.table("B"), x.step_evictions) == ([7, 6, 5], {"B": 3})
        assert x.cache.index == {e2: 0, e2 + 1: 1, b"r3:2": 2, b"r3:3": 3, b"r3:4": 4}
        x.audit()
    assert _state(a, ka) == _state(t, kt)
    assert reported == [("B", "A", 7), ("B", "A", 6), ("B", "A", 5)]


class _Reads:
    """An event listener that reads the given kinds only (`records.events.reads`)."""

    def __init__(self, kinds=None) -> None:
        self.events: list[dict] = []
        if kinds is not None:
            self.kinds = kinds

    def __call__(self, event) -> None:
        self.events.append(event.to_dict())


def test_replays_give_the_same_with_own_keys_noted_by_the_allocator(calls):
    """vllm with prefix caching on 12 seeded workloads (small pools: preemptions;
    about 40% of the prompts without token ids, their keys all their own): each
    replayed with the `evicted` records read (writers tracked: every registration
    the cache's) and without (own keys noted by the allocator). Every other record
    and every request's end the same; the second calls the cache less."""
    counts = []
    for seed in range(12):
        records, options = random_workload(seed)
        trace = parse_trace(trace_bytes(records), "random.jsonl")
        opts = Options.resolve(trace.config, dict(options, block_size=4, prefix_caching=True))
        every = _Reads()
        tracked = Engine(trace.workload, opts, "vllm", on_event=every, audit=True).run()
        before = len(calls)
        kinds = {e["event"] for e in every.events} - {"evicted"}
        some = _Reads(kinds)
        plain = Engine(trace.workload, opts, "vllm", on_event=some, audit=True).run()
        assert some.events == [e for e in every.events if e["event"] != "evicted"], seed
        assert ([(r.rid, r.status.label, r.outputs, r.useful_rows) for r in plain.requests]
                == [(r.rid, r.status.label, r.outputs, r.useful_rows)
                    for r in tracked.requests]), seed
        counts.append((before - (counts[-1][2] if counts else 0), len(calls) - before,
                       len(calls)))
    tracked_calls = sum(c[0] for c in counts)
    plain_calls = sum(c[1] for c in counts)
    assert all(c[1] <= c[0] for c in counts)
    assert plain_calls < tracked_calls, (plain_calls, tracked_calls)


def test_a_folds_registrations_in_one_call_as_one_at_a_time(calls):
    """`register_decoded_each`, a folded stretch's filled blocks keyed in one call.
    Pool of 16, blocks of 4, entries of 8 tokens. A (position 3, 12 prompt tokens)
    decoded to 16 rows (its block 3 keyed by the cache: A in `unindexed` from 3);
    B (position 4, 8 prompt tokens, its two blocks keyed) and C (position 5, 8
    prompt tokens, keyed); A grows 8 and 9, B 10, C 11. Then, in one call: A to 24 rows (no call: `registered`
    4 -> 6), B to 12 (the cache's call, (2, 3): B joins `unindexed` from 2), C to
    11 (no block filled: nothing). The same as `register_decoded` one at a time;
    with writers tracked every entry that fills a block is the cache's (two calls)."""
    states = []
    for tracked in (False, True):
        for each in (True, False):
            a = BlockAllocator(16, 4, cache=VllmCache())
            if tracked:
                a.track_evictions(lambda rid, writer, block: None)
            ka = BlockKeys(3, 12, 4, 8, hashes=[9300001])
            kb = BlockKeys(4, 8, 4, 8, hashes=[9400001])
            kc = BlockKeys(5, 8, 4, 8, hashes=[9500001])
            a.grow("A", 16)
            a.register_full_blocks("A", ka, 12)
            a.register_decoded("A", ka, 16)
            for rid, keys in (("B", kb), ("C", kc)):
                a.grow(rid, 8)
                a.register_full_blocks(rid, keys, 8)
            a.grow("A", 24)
            a.grow("B", 12)
            a.grow("C", 11)
            del calls[:]
            filled = [("A", ka, 24), ("B", kb, 12), ("C", kc, 11)]
            if each:
                a.register_decoded_each(filled)
            else:
                for rid, keys, rows in filled:
                    a.register_decoded(rid, keys, rows)
            a.audit()
            assert ([c[1:] for c in calls], ka.registered, kb.registered, kc.registered) == (
                ([(4, 6), (2, 3)] if tracked else [(2, 3)]), 6, 3, 2)
            cache = a.cache
            states.append((dict(a._tables), dict(cache.index.items()),
                           {rid: (list(t), s) for rid, (t, s) in cache.unindexed.items()}))
    assert states[0] == states[1] == states[2] == states[3]
    assert states[0][0] == {"A": [0, 1, 2, 3, 8, 9], "B": [4, 5, 10], "C": [6, 7, 11]}
    assert states[0][2] == {"A": ([0, 1, 2, 3, 8, 9], 3), "B": ([4, 5, 10], 2)}
