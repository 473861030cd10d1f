"""The decode cohort (engine/fast/cohort.py): steady decoders counted, not written,
with the same results as writing every row."""
from __future__ import annotations

import math
import random

import pytest

from conftest import slow_beyond, stir, trace_bytes
from scheduler_sim.engine.fast.cohort import Cohort
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.records.errors import InvariantError
from scheduler_sim.records.options import Options
from scheduler_sim.requests.request import Request


def _decoding(rid: str, resident: int, outputs: int, output_tokens: int) -> Request:
    req = Request(rid, 0, 0, 3, output_tokens)
    req.resident = req.high_water = req.useful_rows = resident
    req.outputs = outputs
    return req


def _pool(block_size: int, tables: dict[str, int]) -> BlockAllocator:
    """An allocator of 40 blocks in which each request of `tables` holds a credit of
    10 blocks and the blocks of that many rows."""
    allocator = BlockAllocator(40, block_size)
    for rid, rows in tables.items():
        allocator.reserve(rid, 10)
        allocator.grow(rid, rows)
    return allocator


def test_a_member_is_counted_then_settled_with_its_rows_blocks_and_outputs():
    """Blocks of 4. After two completions (at 1 and 2), a (P=3, N=6) has written 4 rows
    (1 block, ids [0]) and emitted 2 outputs; it joins. Four dispatches run it: the
    first writes row 4, the first of block 2 (one block opened, counted: held 2,
    granted 2, a's table still [0]), the others rows 5, 6, 7 (no block); contexts
    before each are 4, 5, 6, 7. The fourth completion (count 6, at tick 6) is its
    last output: it leaves settled with 8 rows, all useful, 6 outputs, the last at
    6, and its table takes the counted block: [0, 1], 2 allocated of its credit."""
    allocator = _pool(4, {"a": 4})
    cohort = Cohort(allocator)
    cohort.completed, cohort.last_done = 2, 2
    a = _decoding("a", 4, 2, 6)
    cohort.join(a)
    contexts = []
    finished = []
    counts = []
    for tick in (3, 4, 5, 6):
        contexts.append(cohort.start())
        counts.append((allocator.held, allocator.granted, allocator.counted))
        finished.append([r.rid for r in cohort.complete(tick)])
    assert counts == [(2, 2, 1)] * 4
    assert contexts == [4, 5, 6, 7]
    assert finished == [[], [], [], ["a"]]
    assert (a.resident, a.high_water, a.useful_rows, a.outputs, a.last_output_at) == \
        (8, 8, 8, 6, 6)
    assert len(cohort) == 0
    assert (allocator.table("a"), allocator.free, allocator.counted) == ([0, 1], 38, 0)
    allocator.audit()


def test_members_finishing_together_are_each_caught_up_from_their_own_joining():
    """Blocks of 4. a (4 rows, 2 of 5 outputs; ids [0]) joins after completion 2
    with none started: group 0, finishing at count 2 + 3 = 5. The first dispatch
    opens its block (counted: id 3) and completes at 3; b (6 rows, 3 of 5 outputs;
    ids [1, 2]) joins then: 1 started, group (6 - 1) % 4 = 1, finishing at 3 + 2 =
    5 too. Two more dispatches, completing at 4 and 7: count 5 ends [a, b], in the
    order they joined, each from its own joining: a 3 rows (7, all useful) and 3
    outputs (5), b 2 rows (8) and 2 outputs (5), both last at 7; a's table takes the
    counted block ([0, 3]), b's rows stay in its two blocks."""
    allocator = _pool(4, {"a": 4, "b": 6})
    cohort = Cohort(allocator)
    cohort.completed, cohort.last_done = 2, 2
    a, b = _decoding("a", 4, 2, 5), _decoding("b", 6, 3, 5)
    cohort.join(a)
    cohort.start()
    assert cohort.complete(3) == []
    cohort.join(b)
    ended = []
    for tick in (4, 7):
        cohort.start()
        ended.append(cohort.complete(tick))
    assert ended == [[], [a, b]]
    assert [(r.resident, r.high_water, r.useful_rows, r.outputs, r.last_output_at)
            for r in (a, b)] == [(7, 7, 7, 5, 7), (8, 8, 8, 5, 7)]
    assert (allocator.table("a"), allocator.table("b")) == ([0, 3], [1, 2])
    assert (len(cohort), allocator.held, allocator.counted) == (0, 4, 0)
    allocator.audit()


def test_the_last_member_finishing_with_counted_blocks_left_is_an_invariant_error():
    """a (4 rows, 1 output to go, blocks of 4) joins; its dispatch opens a block,
    counted, and one more counted block is taken by hand: a's completion leaves
    the cohort empty with 1 counted block nobody holds."""
    allocator = _pool(4, {"a": 4})
    cohort = Cohort(allocator)
    cohort.join(_decoding("a", 4, 2, 3))
    cohort.start()
    allocator.take_counted(1)
    with pytest.raises(InvariantError, match=r"left 1 counted blocks"):
        cohort.complete(1)


def test_the_survivors_of_a_completion_in_order():
    """Blocks of 4. a (3 outputs to go) and b (2 to go) join; the rows' order is
    [b, a]. The first completion ends nobody: [b, a], a new list; the second ends
    b (its last output): [b, a] less [b] = [a]. Handed no list of those that ended
    while one did leave, the count disagrees (1 member, 2 rows) and the members
    are looked up: [a] still."""
    allocator = _pool(4, {"a": 4, "b": 4})
    cohort = Cohort(allocator)
    cohort.completed, cohort.last_done = 2, 2
    a, b = _decoding("a", 4, 2, 5), _decoding("b", 4, 2, 4)
    cohort.join(a)
    cohort.join(b)
    order = [b, a]
    cohort.start()
    ended = cohort.complete(3)
    assert ended == []
    got = cohort.survivors(order, ended)
    assert got == [b, a] and got is not order
    cohort.start()
    ended = cohort.complete(4)
    assert ended == [b]
    assert cohort.survivors(order, ended) == [a]
    assert cohort.survivors(order, None) == [a]
    assert order == [b, a]


def test_settling_mid_dispatch_counts_the_rows_written_but_not_the_outputs_to_come():
    """b (5 rows, 1 output, N=9) joins after completion 1 (at tick 1). Two dispatches
    start and one completes (at tick 2): settled then, b has 7 rows and 2 outputs (the
    second dispatch's output is still to come), its last output at 2, and still its
    2 blocks (rows 5 and 6 open none); it is gone from the residue groups and the
    finishing counts (the next starts open nothing, and its finishing count
    finishes nobody)."""
    allocator = _pool(4, {"b": 5})
    cohort = Cohort(allocator)
    cohort.completed, cohort.last_done = 1, 1
    b = _decoding("b", 5, 1, 9)
    cohort.join(b)
    cohort.start()
    cohort.complete(2)
    cohort.start()
    cohort.settle(b)
    assert (b.resident, b.outputs, b.last_output_at, b.useful_rows) == (7, 2, 2, 7)
    assert (allocator.table("b"), allocator.held, allocator.counted) == ([0, 1], 2, 0)
    for tick in range(3, 12):
        cohort.start()
        assert cohort.complete(tick) == []
    assert (allocator.held, cohort.fewest_left()) == (2, None)


def test_a_fold_counts_the_members_blocks_and_each_takes_its_own_as_it_leaves():
    """Blocks of 4; a, b, c have written 4, 6 and 7 rows (1, 2 and 2 blocks: ids [0],
    [1, 2], [3, 4]) and join. A fold of 6 dispatches: a writes rows 4..9 (2 blocks
    more), b 6..11 (1), c 7..12 (2): 5 blocks taken by count, held 10, granted 10,
    no table changed. Settled one by one, b, then a, then c: each table takes what its
    rows need (b 12 rows: 3 blocks; a 10: 3; c 13: 4), the counted blocks run out
    with the last, and every credit is charged its own: allocated 3, 3 and 4."""
    allocator = _pool(4, {"a": 4, "b": 6, "c": 7})
    cohort = Cohort(allocator)
    members = {rid: _decoding(rid, rows, 1, 20) for rid, rows in (("a", 4), ("b", 6), ("c", 7))}
    for req in members.values():
        cohort.join(req)
    cohort.advance(6, 6)
    assert (allocator.held, allocator.granted, allocator.counted) == (10, 10, 5)
    assert [len(allocator.table(rid)) for rid in "abc"] == [1, 2, 2]
    allocated = []
    for rid in "bac":
        cohort.settle(members[rid])
        allocated.append((rid, members[rid].resident, len(allocator.table(rid)),
                          allocator.counted))
    assert allocated == [("b", 12, 3, 4), ("a", 10, 3, 2), ("c", 13, 4, 0)]
    assert [allocator._grown[rid] for rid in "abc"] == [3, 3, 4]
    allocator.audit()


def test_a_start_owing_its_blocks_takes_them_with_the_folds_in_one_take(monkeypatch):
    """Blocks of 4; a, b, c have written 4, 6 and 7 rows (ids [0], [1, 2], [3, 4]) and
    join. A start opens a's block of row 4 (1 block; contexts 4 + 6 + 7 = 17); a fold
    of 5 dispatches after it opens the blocks of row 8 for a (rows 5..9), b (7..11)
    and c (8..12), and c's of row 12: 4. `start_owing` and `advance` with the 1 owed
    take the 5 in one take, the same ids in the same order, [5, 6, 7, 8, 9], as
    `start` and `advance` in two (held 10, granted 10)."""
    results = []
    for owing in (False, True):
        allocator = _pool(4, {"a": 4, "b": 6, "c": 7})
        takes = []
        take = allocator.take_counted
        monkeypatch.setattr(allocator, "take_counted", lambda blocks: (takes.append(blocks),
                                                                       take(blocks)))
        cohort = Cohort(allocator)
        for rid, rows in (("a", 4), ("b", 6), ("c", 7)):
            cohort.join(_decoding(rid, rows, 1, 20))
        if owing:
            owed, contexts = cohort.start_owing()
            assert (owed, contexts, takes) == (1, 17, [])
            cohort.advance(5, 9, owed)
        else:
            assert cohort.start() == 17
            cohort.advance(5, 9)
        results.append((allocator._counted, allocator.held, allocator.granted,
                        allocator.peak_held, cohort.started, cohort.completed, cohort.last_done))
        assert takes == ([5] if owing else [1, 4])
    assert results[0] == results[1] == ([5, 6, 7, 8, 9], 10, 10, 10, 6, 5, 9)


def test_counted_blocks_are_in_the_audit():
    """Blocks of 4, 10 blocks: r holds 1 block and a credit of 10. Three blocks taken
    by count are held (held 4, free 6) and granted; the audit counts them. Taking 7
    more than the 6 free fails with the conservation equation; r then takes 2 of the
    counted ones for 9 rows (3 blocks, allocated 3 of its credit; 1 still counted),
    and the audit holds, until r's credit is charged a block short."""
    allocator = BlockAllocator(10, 4)
    allocator.reserve("r", 10)
    allocator.grow("r", 4)
    allocator.take_counted(3)
    assert (allocator.held, allocator.free, allocator.granted, allocator.counted) == (4, 6, 4, 3)
    allocator.audit()
    with pytest.raises(InvariantError, match=r"free\(6\) < 7: held\(4\) \+ draining\(0\)"):
        allocator.take_counted(7)
    allocator.give_counted("r", 9)
    assert (allocator.table("r"), allocator.counted) == ([0, 2, 3], 1)
    allocator.audit()
    allocator._grown["r"] = 2  # (as if r had taken a block without its charge)
    with pytest.raises(InvariantError,
                       match=r"^sum of grown\(2\) \+ counted\(1\) == granted\(4\) is false$"):
        allocator.audit()


def _workload(seed: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    t = 0
    n = rng.randint(1, 30)
    for i in range(n):
        t += rng.choice([0, 0, 1, 2, 5, 20])
        records.append({"type": "request", "id": f"r{i}", "arrival": t,
                        "prompt_tokens": rng.randint(1, 30),
                        "output_tokens": rng.randint(1, 50)})
    return stir(records, rng, 60)


def _replay(records, policy, fast, **options):
    trace = parse_trace(trace_bytes(records), "cohort.jsonl")
    opts = Options.resolve(trace.config, options)
    engine = Engine(trace.workload, opts, policy, fast_forward=fast)
    result = engine.run()
    counted = engine.cohort.started if engine.cohort is not None else 0
    return (result.summary, [request_record(r) for r in result.requests]), counted


@pytest.mark.parametrize("seed", slow_beyond(range(40), 5))
@pytest.mark.parametrize("policy", ["continuous", "serial", "vllm"])
def test_counting_steady_decoders_changes_no_result(seed, policy):
    """Random workloads with cancellations and forced preemptions at any time, rows
    and budgets that leave decoders out (rotation), drains, cost model or not: every
    summary field and request record is the same with the cohort (and folding) as
    writing every row."""
    options = _options(seed)
    records = _workload(seed)
    counted, with_cohort = _replay(records, policy, True, **options)
    written, none = _replay(records, policy, False, **options)
    assert none == 0
    assert counted == written


def test_the_random_workloads_count_decoders():
    """The workloads above do use the cohort, under every policy: the exact number of
    counted dispatches (a change in when the cohort applies shows here). (vllm counts
    fewer: its `schedule` writes every member in, and in these small pools something
    waits most of the time; 628 before the decodes after a dispatch of whole
    prompts started without a call, fast/arrivals.py's `after_admission`; 1,454
    before arrivals at the completion of an admission were admitted without one,
    `admit_after_prompts`, 1,467 before arrivals together were.)"""
    expected = {"continuous": 6873, "serial": 10393, "vllm": 1477}
    for policy in ("continuous", "serial", "vllm"):
        total = 0
        for seed in range(40):
            rng = random.Random(5000 + seed)
            options = dict(block_size=rng.choice([1, 2, 4]), num_blocks=rng.randint(12, 80),
                           token_budget=rng.randint(2, 64), max_rows=rng.randint(1, 10),
                           release_delay=rng.choice([0, 0, 3]))
            total += _replay(_workload(seed), policy, True, **options)[1]
        assert total == expected[policy], policy


def _event_streams(records, policy, **options):
    """The event stream of a replay with the cohort (and folding), as lines handed to a
    line listener and as records, and of a replay writing every row; and how many
    dispatches the first counted and how many boundaries the counted stretch's
    loop took (fast/finishes.py) in the first and the second."""
    from scheduler_sim.records.clock import Clock
    from scheduler_sim.records.event_lines import LineListener
    trace = parse_trace(trace_bytes(records), "cohort.jsonl")
    opts = Options.resolve(trace.config, options)
    clock = Clock.of(opts)
    lines: list[str] = []

    class Collect(LineListener):
        def write(self, line):
            lines.append(line)

    engine = Engine(trace.workload, opts, policy, on_event=Collect("p", clock),
                    fast_forward=True)
    engine.run()
    streams = [lines]
    through = [engine.steadiness.through_counted]
    for fast in (True, False):
        out: list[str] = []
        replay = Engine(trace.workload, opts, policy, fast_forward=fast,
                        on_event=lambda e: out.append(e.to_json("p", clock)))
        replay.run()
        streams.append(out)
        through.append(replay.steadiness.through_counted)
    return streams, (engine.cohort.started, through[0], through[1])


def _options(seed: int) -> dict:
    rng = random.Random(5000 + seed)
    options = dict(block_size=rng.choice([1, 2, 4]), num_blocks=rng.randint(12, 80),
                   token_budget=rng.randint(2, 64), max_rows=rng.randint(1, 10),
                   release_delay=rng.choice([0, 0, 3]))
    if seed % 4 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    return options


def _with_output_ids(records: list[dict], seed: int) -> list[dict]:
    """`records` with the outputs of about a third of the requests given as token ids
    (whose rows' records name them: such a request is never counted under a
    listener)."""
    rng = random.Random(7000 + seed)
    out = []
    for record in records:
        record = dict(record)
        if record["type"] == "request" and rng.random() < 0.3:
            record["output_token_ids"] = [rng.randint(1, 9)
                                          for _ in range(record.pop("output_tokens"))]
        out.append(record)
    return out


@pytest.mark.parametrize("seed", slow_beyond(range(40), 4))
@pytest.mark.parametrize("policy", ["continuous", "serial", "vllm"])
def test_counted_decoders_write_the_event_stream_of_written_ones(seed, policy):
    """With an event listener the cohort stays on: its dispatches, folds (lines written
    by hand or records) and finishes give, byte for byte, the stream of a replay
    that writes every row (the workloads above, some outputs given as token ids)."""
    records = _with_output_ids(_workload(seed), seed) if seed % 2 else _workload(seed)
    (lines, records_out, written), _ = _event_streams(records, policy, **_options(seed))
    assert lines == written
    assert records_out == written


def test_the_event_streams_count_decoders():
    """The workloads of the test above count decoders with a listener too: the exact
    number of counted dispatches over its first 8 seeds (vllm: 4 before the decodes
    after an admission could start counted, fast/arrivals.py; 13 of the 128 start there,
    the others follow from them; 130 since arrivals at the completion of an
    admission are admitted without a call, `admit_after_prompts`; 131 with arrivals
    together admitted so too), and the boundaries of counted stretches taken in
    one loop with a listener, lines or records (fast/finishes.py: one at a time
    through `carry_on` before)."""
    expected = {"continuous": (1690, 8, 8), "serial": (1769, 8, 8), "vllm": (131, 6, 6)}
    for policy in ("continuous", "serial", "vllm"):
        total = [0, 0, 0]
        for seed in range(8):
            records = _with_output_ids(_workload(seed), seed) if seed % 2 else _workload(seed)
            counts = _event_streams(records, policy, **_options(seed))[1]
            total = [a + b for a, b in zip(total, counts)]
        assert tuple(total) == expected[policy], policy


def test_no_cohort_when_somebody_watches_or_caches_or_for_other_policies():
    """Prefix caching, fast_forward=False and policies without
    `lazy_decoders` (sglang) run without a cohort, events with one; vllm, which reads its decoders'
    progress only in `schedule` (the engine writes the members in first), with one."""
    trace = parse_trace(trace_bytes(_workload(1)), "cohort.jsonl")
    opts = Options.resolve(trace.config, {})
    assert Engine(trace.workload, opts, "continuous").cohort is not None
    # (an event listener of a lone engine is handed the members' records too)
    assert Engine(trace.workload, opts, "continuous", on_event=lambda e: None).cohort \
        is not None
    assert Engine(trace.workload, opts, "continuous", fast_forward=False).cohort is None
    assert Engine(trace.workload, opts, "sglang").cohort is None
    assert Engine(trace.workload, opts, "vllm").cohort is not None
    cached = Options.resolve(trace.config, {"prefix_caching": True})
    assert Engine(trace.workload, cached, "continuous").cohort is None


def test_the_full_audit_holds_while_decoders_are_counted():
    """With the O(blocks) audit at every boundary and the cohort on, 40 requests (one
    per tick, blocks of 4, 200 blocks) replay without an invariant failure, the same
    as without the cohort, and the cohort did count decoders."""
    rng = random.Random(3)
    records = [{"type": "request", "id": f"r{i}", "arrival": i,
                "prompt_tokens": rng.randint(1, 20), "output_tokens": rng.randint(2, 40)}
               for i in range(40)]
    trace = parse_trace(trace_bytes(records), "audit.jsonl")
    opts = Options.resolve(trace.config, dict(block_size=4, num_blocks=200))
    engine = Engine(trace.workload, opts, "continuous", audit=True, fast_forward=True)
    counted = engine.run()
    plain = Engine(trace.workload, opts, "continuous", audit=True, fast_forward=False).run()
    assert engine.cohort.started > 0
    assert counted.summary == plain.summary
    assert [request_record(r) for r in counted.requests] == \
        [request_record(r) for r in plain.requests]


def test_blocks_within_counts_each_members_new_blocks_by_its_residue():
    """Blocks of 4; members a, b, c have written 4, 6 and 7 rows (1, 2 and 2 blocks).
    One more row each: only a's row 4 starts a block (1). Five more: a rows 4..8 (2
    blocks), b rows 6..10 (1), c rows 7..11 (1): 4. After one dispatch (5, 7 and 8
    rows, the first opening a's block) one more row: only c's row 8 starts one (1).
    Contexts: 17 rows, then 20. Three more rows each (more than half a block: the
    members less those of the other residues) open a's row 4, b's 8 and c's 8 (3),
    two more a's 4 and c's 8 (2); after the dispatch three more b's 8 and c's 8 (2)."""
    allocator = _pool(4, {"a": 4, "b": 6, "c": 7})
    cohort = Cohort(allocator)
    members = [_decoding("a", 4, 1, 9), _decoding("b", 6, 1, 9), _decoding("c", 7, 1, 9)]
    for req in members:
        cohort.join(req)
    assert (cohort.blocks_within(1), cohort.blocks_within(5), cohort.contexts()) == (1, 4, 17)
    assert (cohort.blocks_within(3), cohort.blocks_within(2)) == (3, 2)
    cohort.start()
    assert allocator.counted == 1  # a's
    assert (cohort.blocks_within(1), cohort.blocks_within(3), cohort.contexts()) == (1, 2, 20)


@pytest.mark.parametrize("seed", slow_beyond(range(20), 8))
def test_a_plan_given_as_a_list_is_counted_the_same(seed, monkeypatch):
    """When the policy plans its decodes as a plain list of pairs (the engine does
    not take them as the policy's own list), the members are found row by row: the
    results are still those of writing every row."""
    from scheduler_sim.engine import core
    made = []
    original = core.Engine.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(core.Engine, "__init__", init)
    monkeypatch.setattr(core.Engine, "takes_decodes_first", False)
    rng = random.Random(7000 + seed)
    options = dict(block_size=rng.choice([1, 2, 4]), num_blocks=rng.randint(12, 80),
                   token_budget=rng.randint(2, 64), max_rows=rng.randint(1, 10))
    records = _workload(seed)
    counted, used = _replay(records, "continuous", True, **options)
    written, _ = _replay(records, "continuous", False, **options)
    assert counted == written
    assert made[0].cohort is not None


def test_blocks_within_is_each_members_count_summed():
    """`blocks_within` (a residues' range summed) against each member's new blocks,
    ceil((rows written + more) / B) - ceil(rows written / B), on random cohorts:
    block sizes 1 to 16, more rows than a block or fewer, counters at any value."""
    rng = random.Random(11)
    for _ in range(400):
        size = rng.choice([1, 2, 3, 4, 16])
        allocator = BlockAllocator(4000, size)
        cohort = Cohort(allocator, credited=False)
        cohort.started = cohort.completed = rng.randint(0, 50)
        written = []
        for i in range(rng.randint(0, 12)):
            req = _decoding(f"r{i}", rng.randint(1, 100), 1, 500)
            allocator.grow(req.rid, req.resident)
            cohort.join(req)
            written.append(req.resident)
        more = rng.randint(0, 70)
        assert cohort.blocks_within(more) == sum(math.ceil((w + more) / size)
                                                 - math.ceil(w / size) for w in written)


def test_members_by_residue_follow_the_dispatches_started():
    """Blocks of 4; a joins with 5 rows and b with 8 after no dispatch (groups 1 and
    0): by residue of their rows [1, 1, 0, 0] (b at 0, a at 1); after three starts
    (a at 8, b at 11) [1, 0, 0, 1]."""
    allocator = _pool(4, {"a": 5, "b": 8})
    cohort = Cohort(allocator)
    cohort.join(_decoding("a", 5, 2, 20))
    cohort.join(_decoding("b", 8, 5, 20))
    assert cohort.by_residue() == [1, 1, 0, 0]
    for _ in range(3):
        cohort.start()
    assert cohort.by_residue() == [1, 0, 0, 1]


def test_fewest_left_after_members_leave_and_finish():
    """Blocks of 4, at completion 0: a (1 output to go, finishing count 1), b (3 to
    go: count 3), c (5 to go: count 5) join. Fewest left 1; a completion (count 1)
    finishes a, then 2 (b at count 3, 2 to go); b settled (a preemption would): 4 (c),
    b's count taken off the heap of counts by that look; two more completions finish
    nobody; a member joining at count 3 with 1 to go (count 4) is fewest then, 1."""
    allocator = _pool(4, {"a": 4, "b": 4, "c": 4, "d": 4})
    cohort = Cohort(allocator)
    cohort.last_done = 0
    a, b, c = (_decoding(rid, 4, 1, 1 + left) for rid, left in (("a", 1), ("b", 3), ("c", 5)))
    for req in (a, b, c):
        cohort.join(req)
    assert cohort.fewest_left() == 1
    cohort.start()
    assert cohort.complete(1) == [a]
    assert cohort.fewest_left() == 2
    cohort.settle(b)
    assert cohort.fewest_left() == 4
    for tick in (2, 3):
        cohort.start()
        assert cohort.complete(tick) == []
    assert cohort._counts == [5]
    d = _decoding("d", 4, 1, 2)
    cohort.join(d)
    assert (cohort.fewest_left(), sorted(cohort._counts)) == (1, [4, 5])


def test_fits_counted_is_blocks_at_most_free():
    """An allocator of 40 blocks of 4, a holding 1 (4 rows): 39 free, so 39 blocks fit
    and 40 do not; 3 taken by count: 36 free, 36 fit, 37 do not."""
    allocator = _pool(4, {"a": 4})
    assert (allocator.fits_counted(39), allocator.fits_counted(40)) == (True, False)
    allocator.take_counted(3)
    assert allocator.free == 36
    assert (allocator.fits_counted(36), allocator.fits_counted(37)) == (True, False)
