"""Several tables grown in one call (`BlockAllocator.grow_each`, and `grow_in_turn` for a
request grown several times; kv/block_openings.py):
the blocks growing request by request would give (the step's counts left alone), in a
tiny exact case, against `grow` on random pools, and taken by the folds of random
workloads; what a fold leaves in the step's counts read by nobody."""
from __future__ import annotations

import random

from conftest import trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.kv.vllm_cache import VllmCache
from scheduler_sim.records.options import Options


def _pool() -> BlockAllocator:
    """8 blocks of 4 rows: A's 4 keyed blocks freed (the queue, least recently
    freed first: 3, 2, 1, 0), S's 2 plain ones freed (the stack, top 5), 6 and 7
    never used."""
    a = BlockAllocator(8, 4, cache=VllmCache())
    ka = BlockKeys(0, 16, 4, 8, hashes=["x", "y"])
    a.grow("A", 16)
    a.register_full_blocks("A", ka, 16)
    a.grow("S", 8)
    a.free_request("A", 0, 0)
    a.free_request("S", 0, 0)
    return a


def _state(a: BlockAllocator):
    """All but the step's counts, which `grow` raises and `grow_each` leaves alone."""
    return (a._tables, a.held, a.peak_held, a._free, a._fresh, a.cache.queue_items(),
            dict(a.cache.index.items()))


def _count_takes(monkeypatch) -> list[int]:
    """The counts `VllmCache.take` is called with from now on, in call order."""
    takes: list[int] = []
    take = VllmCache.take
    monkeypatch.setattr(VllmCache, "take",
                        lambda self, rid, table, count: takes.append(count)
                        or take(self, rid, table, count))
    return takes


def test_the_blocks_come_in_the_order_growing_one_by_one_takes_them(monkeypatch):
    """D1, D2, D3 need 1, 2, 3 blocks: the stack's top first (5, 4), never-used ids
    (6, 7), then the two least recently freed cached blocks (3, 2), evicted by one
    `take` of 2. D3 evicted 2; the keys of 3 and 2 (entry y) leave the index. The
    step's counts stay empty (`grow` would count D1 1, D2 2, D3 3 and 2 evicted)."""
    takes = _count_takes(monkeypatch)
    a = _pool()
    assert (a._free, a._fresh, a.cache.queue_items()[0]) == ([4, 5], 6, [3, 2, 1, 0])
    a.grow_each([("D1", 4), ("D2", 8), ("D3", 12)])
    assert takes == [2]
    assert (a.table("D1"), a.table("D2"), a.table("D3")) == ([5], [4, 6], [7, 3, 2])
    assert (a.step_growth, a.step_evictions) == ({}, {})
    assert (a.held, a.free, a.cache.queue_items()[0]) == (6, 2, [1, 0])
    assert sorted(a.cache.index.items()) == [(k, b) for k, b in zip(sorted(
        key for key, _ in a.cache.index.items()), [0, 1])]
    a.audit()
    b = _pool()
    for rid, rows in (("D1", 4), ("D2", 8), ("D3", 12)):
        b.grow(rid, rows)
    assert _state(a) == _state(b)
    assert (b.step_growth, b.step_evictions) == ({"D1": 1, "D2": 2, "D3": 3}, {"D3": 2})


def test_a_request_grown_in_turn_several_times_takes_the_blocks_in_call_order(monkeypatch):
    """`grow_in_turn` (a folded chunk run's steps): C to 4 rows, D to 4, C to 12, D to
    8: 1, 1, 2, 1 blocks. The stack's top first (5, 4), never-used 6 and 7, then the
    least recently freed cached block, 3, evicted by one `take` of 1: C [5, 6, 7],
    D [4, 3], as four `grow` calls give them; the step's counts left empty."""
    takes = _count_takes(monkeypatch)
    a = _pool()
    a.grow_in_turn([("C", 4), ("D", 4), ("C", 12), ("D", 8)])
    assert takes == [1]
    assert (a.table("C"), a.table("D")) == ([5, 6, 7], [4, 3])
    assert (a.step_growth, a.step_evictions) == ({}, {})
    a.audit()
    b = _pool()
    for rid, rows in (("C", 4), ("D", 4), ("C", 12), ("D", 8)):
        b.grow(rid, rows)
    assert _state(a) == _state(b)
    assert (b.step_growth, b.step_evictions) == ({"C": 3, "D": 2}, {"D": 1})

def test_random_openings_equal_growing_request_by_request():
    """Random pools (keyed and plain blocks freed, some tables partly grown): one
    `grow_each` leaves what the `grow` calls in its order leave, but for the
    step's counts (left as they were where it takes the blocks at once)."""
    for seed in range(40):
        rng = random.Random(seed)
        twins = []
        for _ in range(2):
            r = random.Random(seed)
            a = BlockAllocator(r.randint(12, 40), 4, cache=VllmCache())
            for i in range(r.randint(1, 5)):
                rows = r.randint(1, 16)
                keys = BlockKeys(i, rows, 4, 8, hashes=[r.randrange(4) for _ in range(4)])
                hits = a.lookup(keys, rows // 4)
                a.share(f"P{i}", hits, keys)
                a.grow(f"P{i}", rows)
                a.register_full_blocks(f"P{i}", keys, rows)
            for i in range(r.randint(0, 5)):
                a.free_request(f"P{i}", 0, 0)
            twins.append(a)
        a, b = twins
        openings = []
        for i in range(rng.randint(2, 5)):
            rows = rng.randint(1, 9)
            a.grow(f"D{i}", rows)
            b.grow(f"D{i}", rows)
            openings.append((f"D{i}", rows + rng.randint(0, 8)))
        a.step_growth.clear(), b.step_growth.clear()
        a.step_evictions.clear(), b.step_evictions.clear()
        need = sum(a.blocks_to_grow(rid, rows) for rid, rows in openings)
        if need > a.free:
            continue
        a.grow_each(openings)
        for rid, rows in openings:
            b.grow(rid, rows)
        assert _state(a) == _state(b), seed
        at_once = not (a._credits or a._report is not None)  # (else `grow` for each)
        assert not at_once or (a.step_growth, a.step_evictions) == ({}, {}), seed
        a.audit()


def _four_decoding():
    """Four requests decoding together (prompts of 8 rows, 40 outputs) in a pool of
    20 blocks of 4 full of cached blocks (four earlier requests'): the trace and
    the options."""
    records = [{"type": "config", "hash_block_size": 8}]
    records += [{"type": "request", "id": f"w{i}", "arrival": 0, "prompt_tokens": 16,
                "output_tokens": 2, "block_hashes": [10 * i, 10 * i + 1]} for i in range(4)]
    records += [{"type": "request", "id": f"r{i}", "arrival": 100, "prompt_tokens": 8,
                 "output_tokens": 40, "block_hashes": [100 + i]} for i in range(4)]
    trace = parse_trace(trace_bytes(records), "openings.jsonl")
    opts = Options.resolve(trace.config, dict(block_size=4, num_blocks=20, token_budget=64,
                                              max_rows=8, prefix_caching=True))
    return trace, opts


def test_folds_under_prefix_caching_open_their_blocks_in_one_call(monkeypatch):
    """vllm with prefix caching, four requests decoding together in a pool full of
    cached blocks: the folds open blocks for several of them at once."""
    batched = []
    grow_each = BlockAllocator.grow_each
    monkeypatch.setattr(BlockAllocator, "grow_each",
                        lambda self, openings: batched.append(len(openings))
                        or grow_each(self, openings))
    keyed = []  # (rid, rows, registered before) of each fold's one call keying filled blocks
    each = BlockAllocator.register_decoded_each
    monkeypatch.setattr(BlockAllocator, "register_decoded_each",
                        lambda self, filled: keyed.append(
                            [(rid, rows, keys.registered) for rid, keys, rows in filled])
                        or each(self, filled))
    counted = []  # the ids of each fold's requests whose counts the fold raised itself
    keys_counted = BlockAllocator.keys_counted

    class Seen:  # (vLLM's `unindexed`, noting each request found in it)
        def __init__(self, ids):
            self.ids = ids
            counted.append([])

        def __contains__(self, rid):
            found = rid in self.ids
            if found:
                counted[-1].append(rid)
            return found

    monkeypatch.setattr(BlockAllocator, "keys_counted",
                        lambda self: None if keys_counted(self) is None
                        else Seen(keys_counted(self)))
    trace, opts = _four_decoding()
    engine = Engine(trace.workload, opts, "vllm", fast_forward=True)
    folded = engine.run()
    # Six folds open blocks: 4 requests at once, then 2, 1, 2, 2, 1 (the ones
    # whose rows cross a block boundary); those of 2 or more in one `take`.
    assert (engine.folded > 0, batched) == (True, [4, 2, 1, 2, 2, 1])
    # Each fold keys the blocks its rows filled: the requests whose rows reach a
    # multiple of 4 (the first fold's all four, 8 prompt rows and 12 decoded:
    # `registered` 2 -> 5; the second's three to 24 rows, filling their sixth
    # block and opening none), in row order, whatever their openings. Those whose
    # decoded keys vLLM's cache only counts (in its `unindexed` once their own keys
    # were first registered) have their counts raised by the fold itself; the
    # others go to one call a fold.
    assert keyed == [[("r0", 20, 2), ("r1", 20, 2), ("r2", 20, 2), ("r3", 20, 2)],
                     [("r2", 31, 6)], [("r3", 33, 5)], [("r3", 47, 8)]]
    assert [ids for ids in counted if ids] == [["r0", "r1", "r2"], ["r0", "r1"], ["r0"],
                                               ["r1"], ["r2"]]
    stepped = Engine(trace.workload, opts, "vllm", fast_forward=False).run()
    assert folded.summary == stepped.summary


def test_what_a_fold_leaves_in_the_step_counts_is_read_by_nobody(monkeypatch):
    """The workload above folded with a state callback (which reads the step's
    counts in the snapshot of each step's plan, before its dispatch; those after a
    dispatch show a fold's blocks taken ahead), each fold's openings leaving
    counts no step took (999 blocks for a request named nobody, in both): every
    snapshot equals the stepped replay's at the same boundary, and the results
    too. (Were a count read before the next step cleared them, the snapshot's
    allocated, free and cached blocks would be 999 off.)"""
    grow_each = BlockAllocator.grow_each
    opened = []

    def grow_each_leaving_junk(self, openings):
        grow_each(self, openings)
        opened.append(len(openings))
        self.step_growth["nobody"] = self.step_evictions["nobody"] = 999

    monkeypatch.setattr(BlockAllocator, "grow_each", grow_each_leaving_junk)
    trace, opts = _four_decoding()
    runs = []
    for fast in (True, False):
        states = {}
        engine = Engine(trace.workload, opts, "vllm", fast_forward=fast,
                        on_state=lambda t, state, after: states.setdefault(
                            (t, after), []).append(dict(state)))
        runs.append((engine.run(), states, engine.folded))
    (folded, seen, count), (stepped, every, _) = runs
    assert (count > 0, len(opened) > 0) == (True, True)
    planned = {at: state for at, state in seen.items() if not at[1]}  # (a step's plan)
    assert len(planned) < len(every)
    assert {at: every[at] for at in planned} == planned
    assert folded.summary == stepped.summary
