"""Blocks as counts (kv/block_counts.py): a request's blocks a count, the pool a
counter, where nothing reads a block id; the same counts as the general allocator."""
from __future__ import annotations

import random

import pytest

from conftest import random_engine_options, slow_beyond, trace_bytes
from scheduler_sim.engine import core
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.fast.cohort import Cohort
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.kv.block_counts import BlockCounts, allocator_for
from scheduler_sim.records.errors import InvariantError
from scheduler_sim.records.options import Options
from scheduler_sim.requests.request import Request


def _counts(pool: BlockAllocator) -> tuple:
    return (pool.held, pool.free, pool.reserved, pool.granted, pool.counted,
            pool.peak_held, dict(pool.step_growth))


def test_growth_is_counted_and_credited_as_the_general_allocator_counts_it():
    """Blocks of 4, a pool of 10. a holds a credit of 5: rows 1..5 take 2 blocks
    (held 2, granted 2, free 8), row 8 none more, row 9 a third (3 held, step
    growth 3); b, with no credit, grows 4 blocks for 13 rows (held 7, free 3,
    granted still 3). 17 rows of b need one block more (`blocks_to_grow`), and
    `try_grow` of 29 rows (8 blocks, 4 more) does not fit the 3 free: nothing is
    taken; a could let go of its 3 (`reclaimable`). Freeing a gives back its 3 blocks, its credit and its grant: held 4,
    free 6, reserved 0, granted 0; b's count then frees 4."""
    pools = [BlockAllocator(10, 4), BlockCounts(10, 4)]
    seen = []
    for pool in pools:
        pool.reserve("a", 5)
        grown = [pool.grow("a", 5), pool.grow("a", 8), pool.open_block("a", 9),
                 pool.grow("b", 13)]
        state = [_counts(pool), pool.blocks_to_grow("b", 17), pool.try_grow("b", 29),
                 _counts(pool), pool.reclaimable("a")]
        pool.check()
        pool.audit()
        freed = [pool.free_request("a", 0, 0)]
        state.append(_counts(pool))
        freed.append(pool.free_plain("b"))
        state.append(_counts(pool))
        seen.append((grown, state, freed))
    assert seen[0] == seen[1]
    assert seen[1] == (
        [2, 0, 1, 4],
        [(7, 3, 5, 3, 0, 7, {"a": 3, "b": 4}), 1, False,
         (7, 3, 5, 3, 0, 7, {"a": 3, "b": 4}), 3,
         (4, 6, 0, 0, 0, 7, {"b": 4}), (0, 10, 0, 0, 0, 7, {})],
        [3, 4])


def test_the_cohorts_counted_blocks_are_a_count_given_to_members_as_they_leave():
    """Blocks of 4, a pool of 10. a (credit 4) holds 1 block for 4 rows and joins
    the cohort; a dispatch opens its second block by count (held 2, granted 2,
    counted 1), and a fold of 4 more dispatches (rows 5..8 to 9) its third
    (counted 2). It leaves, settled, with 9 rows: its count takes both (3
    blocks), counted 0, and the audit agrees."""
    seen = []
    for pool in (BlockAllocator(10, 4), BlockCounts(10, 4)):
        pool.reserve("a", 4)
        pool.grow("a", 4)
        a = Request("a", 0, 0, 3, 20)
        a.resident = a.high_water = a.useful_rows = 4
        a.outputs = 2
        cohort = Cohort(pool)
        cohort.join(a)
        cohort.start()
        cohort.complete(1)
        first = (pool.held, pool.granted, pool.counted)
        cohort.advance(4, 5)
        second = (pool.held, pool.granted, pool.counted)
        cohort.settle(a)
        pool.audit()
        seen.append((first, second, (a.resident, pool.held, pool.granted, pool.counted,
                                     pool.reclaimable("a"))))
    assert seen[0] == seen[1] == ((2, 2, 1), (3, 3, 2), (9, 3, 3, 0, 3))


def test_a_member_that_ends_is_freed_from_its_rows_without_a_give():
    """Blocks of 4, a pool of 10. a (credit 4, 4 rows in 1 block, 2 of 4 outputs)
    joins; the first dispatch opens its second block by count (held 2, granted
    2, counted 1); the second completion is its last output, 6 rows. The
    general allocator gives it the counted block as it ends (table 2 blocks,
    counted 0); counting, nothing is given (its count 1, counted 1) and the
    free takes the block its 6 rows need beyond its count from the counted
    ones: both free 2 blocks and end with held, granted, reserved and counted
    0. A free whose rows need more counted blocks than there are raises."""
    seen = []
    for pool in (BlockAllocator(10, 4), BlockCounts(10, 4)):
        pool.reserve("a", 4)
        pool.grow("a", 4)
        a = Request("a", 0, 0, 3, 4)
        a.resident = a.high_water = a.useful_rows = 4
        a.outputs = 2
        cohort = Cohort(pool)
        cohort.join(a)
        cohort.start()
        cohort.complete(1)
        cohort.start()
        ended = [r.rid for r in cohort.complete(2)]
        at_end = (ended, a.resident, a.outputs, pool.held, pool.granted, pool.counted,
                  pool.reclaimable("a"))
        freed = pool.free_plain("a", a.resident)
        seen.append((at_end, freed, _counts(pool)))
    assert seen[0][1:] == seen[1][1:] == (2, (0, 10, 0, 0, 0, 2, {}))
    assert seen[0][0] == (["a"], 6, 4, 2, 2, 0, 2)
    assert seen[1][0] == (["a"], 6, 4, 2, 2, 1, 1)
    pool = BlockCounts(10, 4)
    pool.grow("b", 4)
    with pytest.raises(InvariantError, match=r"needs 2 counted blocks: counted\(0\) >= 2"):
        pool.free_plain("b", 12)


def test_a_plain_end_asks_no_property_and_drops_no_eviction():
    """Blocks of 4, a pool of 10, both allocators: a (credit 3) grows 9 rows, 3
    blocks; `frees_plainly` is true (nothing shared: on `BlockCounts` a class
    attribute, no property's call); `can_reserve` counts held 3 + reserved 3 -
    granted 3, so 7 more fit and 8 do not; no block is evicted
    (`step_evictions` stays empty), and the free sends the 3 blocks back: held
    0, free 10."""
    seen = []
    for pool in (BlockAllocator(10, 4), BlockCounts(10, 4)):
        pool.reserve("a", 3)
        pool.grow("a", 9)
        fits = (pool.can_reserve(7), pool.can_reserve(8))
        plainly = pool.frees_plainly
        evictions = dict(pool.step_evictions)
        freed = pool.free_plain("a", 9)
        seen.append((plainly, fits, evictions, freed, _counts(pool), dict(pool.step_evictions)))
    assert "frees_plainly" in vars(BlockCounts)
    assert seen[0] == seen[1] == (True, (True, False), {}, 3, (0, 10, 0, 0, 0, 3, {}), {})


def test_running_out_and_over_credit_raise_with_the_general_equations():
    """A pool of 3 blocks of 4: 13 rows need 4 blocks (free 3); a credit of 1 is
    exceeded by a second block; the cohort's 4 counted blocks do not fit; a
    table, a share, a pin, a cache or a release delay asks for ids."""
    pool = BlockCounts(3, 4)
    with pytest.raises(InvariantError, match=r"needs 4 new blocks but free\(3\) < 4"):
        pool.grow("a", 13)
    pool.reserve("b", 1)
    pool.grow("b", 4)
    with pytest.raises(InvariantError, match=r"allocated\(2\) <= credit\(1\) is false"):
        pool.grow("b", 5)
    with pytest.raises(InvariantError, match=r"needs 4 new blocks but free\(2\) < 4"):
        pool.take_counted(4)
    for ask in (lambda: pool.table("b"), lambda: pool.share("b", [0]),
                lambda: pool.pin([0]), lambda: pool.free_request("b", 0, 2),
                lambda: pool.bind_cache(None)):
        with pytest.raises(InvariantError, match="counts blocks"):
            ask()


@pytest.mark.parametrize("settings, counts", [
    ({}, True),
    ({"prefix_caching": True}, False),
    ({"release_delay": 1.0}, True),  # (the delay in clock steps is given apart)
    ({"victim": "most-blocks"}, False),
    ({"victim": "most-reclaimable"}, True),
])
def test_the_allocator_counts_blocks_only_where_no_id_is_read(settings, counts):
    options = Options(**settings)
    assert isinstance(allocator_for(options, 0, True), BlockCounts) is counts
    assert not isinstance(allocator_for(options, 0, False), BlockCounts)
    assert not isinstance(allocator_for(options, 1, True), BlockCounts)


def _trace(records):
    return parse_trace(trace_bytes(records), "counts.jsonl")


def test_an_engine_counts_blocks_without_a_state_callback_audit_or_release_delay():
    trace = _trace([{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 5,
                     "output_tokens": 3}])
    options = Options.resolve(trace.config, {})
    assert isinstance(Engine(trace.workload, options, "continuous").allocator, BlockCounts)
    for engine in (Engine(trace.workload, options, "continuous", audit=True),
                   Engine(trace.workload, options, "continuous",
                          on_state=lambda tick, state, after: None),
                   Engine(trace.workload, Options.resolve(trace.config, {"release_delay": 1}),
                          "continuous"),
                   Engine(trace.workload, Options.resolve(trace.config, {"prefix_caching": True}),
                          "vllm")):
        assert not isinstance(engine.allocator, BlockCounts)


def _workload(seed: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for i in range(40):
        records.append({"type": "request", "id": f"r{i}", "arrival": rng.randint(0, 200),
                        "prompt_tokens": rng.randint(1, 40),
                        "output_tokens": rng.randint(1, 30)})
        roll = rng.random()
        if roll < 0.1:
            records.append({"type": "cancel", "id": f"r{i}",
                            "at": records[-1]["arrival"] + rng.randint(0, 60)})
        elif roll < 0.2:
            records.append({"type": "preempt", "id": f"r{i}",
                            "at": records[-1]["arrival"] + rng.randint(0, 60)})
    return records


@pytest.mark.parametrize("seed", slow_beyond(range(30), 4))
@pytest.mark.parametrize("policy", ["continuous", "serial", "vllm", "sglang"])
def test_counting_blocks_changes_no_result_or_event(seed, policy, monkeypatch):
    """Random workloads with cancellations and forced preemptions, small pools
    (preemptions out of blocks), cost model or not: the summary, every request
    record and every event are the same with blocks counted as with block ids."""
    rng = random.Random(seed)
    trace = _trace(_workload(seed))
    settings = random_engine_options(rng, cost_model=seed % 2 == 1)
    settings.pop("release_delay", None)
    options = Options.resolve(trace.config, settings)
    runs = []
    for make in (allocator_for, lambda options, delay, unwatched: BlockAllocator(
            options.num_blocks, options.block_size)):
        monkeypatch.setattr(core, "allocator_for", make)
        events = []
        engine = Engine(trace.workload, options, policy, on_event=events.append)
        result = engine.run()
        runs.append((type(engine.allocator), result.summary,
                     [request_record(r) for r in result.requests], events))
    assert runs[0][0] is BlockCounts and runs[1][0] is BlockAllocator
    assert runs[0][1:] == runs[1][1:]
