"""The keyed decode cohort (engine/fast/cohort.py under prefix caching) and vllm's
running loop over it (policies/vllm_counted.py): the members at a block's edge,
blocks with their ids, and the same results as writing every row."""
from __future__ import annotations

import random

import pytest

from conftest import slow_beyond, trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.fast.cohort import Cohort
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.records.options import Options
from scheduler_sim.requests.request import Request


def _decoding(rid: str, resident: int, outputs: int, output_tokens: int) -> Request:
    req = Request(rid, 0, 0, 3, output_tokens)
    req.resident = req.high_water = req.useful_rows = resident
    req.outputs = outputs
    return req


def _keyed(tables: dict[str, int]) -> tuple[BlockAllocator, Cohort, dict[str, Request]]:
    """Blocks of 4, 40 of them; each request of `tables` holds the blocks of that many
    rows (grown in that order: ids from 0), has 1 output of 20 and joins a keyed
    cohort (nothing reserved: vllm's)."""
    allocator = BlockAllocator(40, 4)
    cohort = Cohort(allocator, False, keyed=True)
    cohort.completed, cohort.last_done = 1, 1
    members = {}
    for rid, rows in tables.items():
        allocator.grow(rid, rows)
        members[rid] = req = _decoding(rid, rows, 1, 20)
        cohort.join(req)
    return allocator, cohort, members


def test_edges_are_the_members_whose_next_decode_opens_or_fills_a_block():
    """Blocks of 4: a has written 4 rows (its next, row 4, opens block 2), b 7 (row 7
    fills block 2), c 6 (row 6 neither). After one dispatch: a's next row is 5
    (neither), b's 8 (opens), c's 7 (fills). A keyed start takes no block (the
    policy grew them): held stays 5 (1 + 2 + 2), nothing counted."""
    allocator, cohort, m = _keyed({"a": 4, "b": 7, "c": 6})
    assert cohort.edges() == ([(m["a"], 4)], [(m["b"], 7)])
    assert cohort.start() == 4 + 7 + 6
    assert (allocator.held, allocator.counted) == (5, 0)
    assert cohort.edges() == ([(m["b"], 8)], [(m["c"], 7)])
    assert cohort.contexts() == 5 + 8 + 7


def test_a_keyed_fold_opens_each_members_blocks_with_ids_in_the_flights_order():
    """Blocks of 4: a holds [0] (4 rows), b [1, 2] (6 rows). A fold of 3 dispatches,
    the flight's order [b, a]: b writes rows 6..8 and opens block 3 (row 8), a rows
    4..6 and opens block 2 (row 4); taken in that order, b gets id 3, then a id 4.
    Settled, a has 7 rows and 4 outputs, b 9 and 4; their tables are unchanged by
    it (nothing counted)."""
    allocator, cohort, m = _keyed({"a": 4, "b": 6})
    cohort.advance(3, 7, [m["b"], m["a"]])
    assert (allocator.table("a"), allocator.table("b")) == ([0, 4], [1, 2, 3])
    assert (cohort.started, cohort.completed, cohort.last_done) == (3, 4, 7)
    cohort.settle_all()
    assert [(r.resident, r.outputs, r.last_output_at) for r in (m["a"], m["b"])] == \
        [(7, 4, 7), (9, 4, 7)]
    assert (allocator.table("a"), allocator.table("b"), allocator.counted) == \
        ([0, 4], [1, 2, 3], 0)


def test_a_keyed_cohort_is_not_settled_before_the_call():
    """`before_schedule` settles every member of a counted cohort and none of a keyed
    one (vllm plans them)."""
    _, keyed, _ = _keyed({"a": 4})
    keyed.before_schedule()
    assert len(keyed) == 1
    allocator = BlockAllocator(40, 4)
    allocator.grow("x", 4)
    counted = Cohort(allocator, False)
    counted.join(_decoding("x", 4, 1, 20))
    counted.before_schedule()
    assert len(counted) == 0


def _cached_workload(seed: int) -> list[dict]:
    """Requests whose prompts share prefixes (token ids), long enough outputs to decode
    across several blocks, some arriving together; a few cancelled or preempted."""
    rng = random.Random(seed)
    groups = [[rng.randint(1, 9) for _ in range(rng.randint(4, 24))] for _ in range(3)]
    records = []
    t = 0
    n = rng.randint(3, 24)
    for i in range(n):
        t += rng.choice([0, 0, 1, 3, 10])
        base = rng.choice(groups)
        ids = base[:rng.randint(1, len(base))] + [rng.randint(1, 9)
                                                  for _ in range(rng.randint(0, 12))]
        records.append({"type": "request", "id": f"r{i}", "arrival": t,
                        "prompt_token_ids": ids, "output_tokens": rng.randint(1, 60)})
    for i in range(n):
        roll = rng.random()
        at = records[i]["arrival"] + rng.randint(0, 60)
        if roll < 0.08:
            records.append({"type": "cancel", "id": f"r{i}", "at": at})
        elif roll < 0.16:
            records.append({"type": "preempt", "id": f"r{i}", "at": at})
    return records


def _cached_options(seed: int) -> dict:
    rng = random.Random(9000 + seed)
    options = dict(block_size=rng.choice([2, 4]), num_blocks=rng.randint(12, 60),
                   token_budget=rng.randint(4, 64), max_rows=rng.randint(1, 10),
                   release_delay=rng.choice([0, 0, 2]), prefix_caching=True,
                   watermark=rng.choice([0.0, 0.0, 0.1]),
                   prefill_chunk=rng.choice([None, 3, 8]))
    if seed % 3 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    return options


def _replay(records: list[dict], fast: bool = True, **options):
    """vllm's results, and the pool left at the end: the plain blocks' stack and the
    LRU queue of cached free blocks (the order block ids came back in); and the
    dispatches the keyed cohort counted."""
    trace = parse_trace(trace_bytes(records), "keyed.jsonl")
    opts = Options.resolve(trace.config, {k: v for k, v in options.items() if v is not None})
    engine = Engine(trace.workload, opts, "vllm", fast_forward=fast)
    result = engine.run()
    allocator = engine.allocator
    pool = (list(allocator._free), list(allocator.cache.free_blocks))
    counted = engine.cohort.started if engine.cohort is not None else 0
    return (result.summary, [request_record(r) for r in result.requests], pool), counted


def _without_cohort(monkeypatch) -> None:
    """Engines made from now on keep no cohort under prefix caching (folding stays)."""
    import scheduler_sim.engine.core as core
    made = core.decode_cohort
    monkeypatch.setattr(core, "decode_cohort", lambda allocator, policy, options, *rest: (
        None if options.prefix_caching else made(allocator, policy, options, *rest)))


@pytest.mark.parametrize("seed", slow_beyond(range(40), 6))
def test_the_keyed_cohort_changes_no_result_nor_block(seed, monkeypatch):
    """Random workloads with shared prefixes, small pools (preemptions, blocked
    heads), chunks, cancellations and forced preemptions: every summary field,
    request record and the pool's final order of free blocks (plain and cached:
    which id each request got, and when it came back) is the same with the keyed
    cohort as without it (folding either way); and the results are those of
    writing every row, without folding (whose pool may end in another order)."""
    records = _cached_workload(seed)
    options = _cached_options(seed)
    counted, used = _replay(records, **options)
    written, _ = _replay(records, False, **options)
    _without_cohort(monkeypatch)
    folded, none = _replay(records, **options)
    assert none == 0
    assert counted == folded
    assert counted[:2] == written[:2]


def test_the_cached_workloads_count_decoders():
    """The workloads above use the keyed cohort: the exact number of dispatches it
    counted over the 40 seeds (a change in when it applies shows here)."""
    total = sum(_replay(_cached_workload(seed), **_cached_options(seed))[1]
                for seed in range(40))
    assert total == 5871


def test_a_keyed_cohort_only_for_vllm_alone_and_unwatched():
    """Under prefix caching vllm gets a keyed cohort; not with an event listener or
    without folding, and continuous (which does not plan members) gets none."""
    trace = parse_trace(trace_bytes(_cached_workload(1)), "keyed.jsonl")
    cached = Options.resolve(trace.config, {"prefix_caching": True})
    assert Engine(trace.workload, cached, "vllm").cohort.keyed
    assert Engine(trace.workload, cached, "vllm", on_event=lambda e: None).cohort is None
    assert Engine(trace.workload, cached, "vllm", fast_forward=False).cohort is None
    assert Engine(trace.workload, cached, "continuous").cohort is None
    plain = Options.resolve(trace.config, {})
    assert not Engine(trace.workload, plain, "vllm").cohort.keyed
