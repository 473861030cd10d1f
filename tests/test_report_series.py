"""What `replay --report` keeps of a run (io/report_series.py, io/bounded_series.py):
time series thinned per time bucket, marks counted per bucket, latency distributions
exact then binned, and a timeline of a bounded number of requests, all in memory that
does not grow with the number of requests."""
from __future__ import annotations

import json
import math
import random
from array import array

import pytest

from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io import bounded_series as bs
from scheduler_sim.io import density_grid as dg
from scheduler_sim.io import report_series as rs
from scheduler_sim.io.generator import WorkloadSpec, generate
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.io.trace_config import resolve_options
from scheduler_sim.records.clock import Clock


def _trace(records: list[dict]):
    """A parsed trace of request records."""
    return parse_trace("".join(json.dumps(r) + "\n" for r in records).encode(), "t.jsonl")


def _series(trace, policy: str = "continuous") -> rs.RunSeries:
    """Replay `trace` under `policy` into a RunSeries, finished."""
    options, _ = resolve_options(trace.config, {})
    seen = rs.RunSeries(policy, Clock.of(options), options.num_blocks,
                        requests=len(trace.workload))
    Engine(trace.workload, options, policy, on_event=seen, on_request_end=seen.ended).run()
    seen.finish()
    return seen


# --- time series ------------------------------------------------------------------------

def test_compaction_keeps_each_buckets_first_minimum_and_maximum(monkeypatch):
    """Times 0..7 in two buckets of 4 steps: a = 5 1 7 1 | 3 9 0 9 keeps, per bucket,
    the first minimum and first maximum (1 at t1, 7 at t2; 0 at t6, 9 at t5) and the
    last row (t7), in time order; the arrays are the same objects, rewritten."""
    monkeypatch.setattr(bs, "TIME_BUCKETS", 2)
    series = bs.TimeSeries(("a",))
    t, a = series.t, series.columns["a"]
    t.extend(range(8))
    a.extend([5, 1, 7, 1, 3, 9, 0, 9])
    series.compact()
    assert series.width == 4
    assert (list(t), list(a)) == ([1, 2, 5, 6, 7], [1, 7, 9, 0, 9])
    assert series.t is t and series.columns["a"] is a


def test_compaction_keeps_the_rows_of_every_column():
    """Two columns share the rows: a row is kept if it holds either column's extreme in
    its bucket. Rows at times 0, 0, 1, 1, 2, 2 (buckets of one step): a = 1 2 1 2 1 2
    and b = 2 1 2 1 2 1 keep every row; once both are constant, each bucket keeps its
    first row, and the last row of all stays."""
    series = bs.TimeSeries(("a", "b"))
    series.t.extend([0, 0, 1, 1, 2, 2])
    series.columns["a"].extend([1, 2, 1, 2, 1, 2])
    series.columns["b"].extend([2, 1, 2, 1, 2, 1])
    series.compact()
    assert series.width == 1 and len(series) == 6
    series.columns["a"][:] = array("q", [7] * 6)
    series.columns["b"][:] = array("q", [5] * 6)
    series.compact()
    assert list(series.t) == [0, 1, 2, 2]


def test_compacting_twice_is_compacting_once_at_the_wider_bucket(monkeypatch):
    """Thinning already thinned rows with a bucket twice as wide keeps exactly what
    thinning the raw rows at that width keeps (buckets nest: powers of two from 0)."""
    rng = random.Random(5)
    times = sorted(rng.randrange(4000) for _ in range(3000))
    values = [rng.randrange(-50, 50) for _ in times]
    monkeypatch.setattr(bs, "TIME_BUCKETS", 64)
    twice = bs.TimeSeries(("v",))
    twice.t.extend(times[:1500])
    twice.columns["v"].extend(values[:1500])
    twice.compact()
    twice.t.extend(times[1500:])
    twice.columns["v"].extend(values[1500:])
    twice.compact()
    once = bs.TimeSeries(("v",))
    once.t.extend(times)
    once.columns["v"].extend(values)
    once.width = twice.width
    once.compact()
    assert (list(twice.t), list(twice.columns["v"])) == (list(once.t), list(once.columns["v"]))


def test_marks_are_counted_per_bucket_past_the_limit(monkeypatch):
    """ROW_LIMIT 4, TIME_BUCKETS 2: marks at 0, 1, 2, 3 are kept one by one; a fifth at 9
    makes buckets of 8 steps: (0, 4 marks) and (9, 1 mark); 5 in all."""
    monkeypatch.setattr(bs, "ROW_LIMIT", 4)
    monkeypatch.setattr(bs, "TIME_BUCKETS", 2)
    marks = bs.Marks()
    for tick in (0, 1, 2, 3):
        marks.add(tick)
    assert (list(marks.times), list(marks.counts)) == ([0, 1, 2, 3], [1, 1, 1, 1])
    marks.add(9)
    assert marks.width == 8
    assert (list(marks.times), list(marks.counts), marks.total) == ([0, 9], [4, 1], 5)


# --- distributions ----------------------------------------------------------------------

def test_bucket_numbers_by_hand():
    """Four buckets per doubling: 1.0 and 1.2 share [1, 1.25) (key (1 + 1100) x 4 = 4404),
    1.3 is in [1.25, 1.5) (4405), 1.5 in [1.5, 1.75) (4406), 2.0 starts the next doubling
    (4408); half as many buckets is the key halved; 0 is 0, -1.3 is -4405."""
    assert [bs._bucket(v, 4) for v in (1.0, 1.2, 1.3, 1.5, 1.99, 2.0)] == [
        4404, 4404, 4405, 4406, 4407, 4408]
    assert bs._bucket(1.5, 2) == 4406 // 2 == 2203
    assert (bs._bucket(0, 4), bs._bucket(-1.3, 4)) == (0, -4405)


def test_distribution_is_exact_then_a_histogram(monkeypatch):
    """EXACT_VALUES 3, FINEST 4: 1.0, 1.2, 1.2 and 1.3 are counted exactly until a fourth
    distinct value (1.1) moves them into buckets: [1, 1.25) holds 4 values, largest
    1.2; [1.25, 1.5) holds 1.3. A later 3.0 joins at the next read. Each pair is a
    point of the exact CDF: 4 of 6 values are <= 1.2, 5 are <= 1.3, 6 <= 3.0."""
    monkeypatch.setattr(bs, "EXACT_VALUES", 3)
    monkeypatch.setattr(bs, "FINEST", 4)
    d = bs.Distribution()
    for value in (1.0, 1.2, 1.2, 1.3):
        d.add(value)
    assert d.is_exact and d.pairs() == [(1.0, 1), (1.2, 2), (1.3, 1)]
    d.add(1.1)
    assert not d.is_exact and d.exact == {}
    assert d.pairs() == [(1.2, 4), (1.3, 1)]
    d.add(3.0)
    assert d.pairs() == [(1.2, 4), (1.3, 1), (3.0, 1)]
    assert (d.total, d.buckets, d.per_doubling) == (6, 3, 4)


def test_a_histogram_past_its_bucket_limit_merges_neighbours(monkeypatch):
    """MAX_BUCKETS 2: the three buckets above become [1, 1.5) (5 values, largest 1.3)
    and [3, 4) (3.0), at 2 buckets per doubling."""
    monkeypatch.setattr(bs, "EXACT_VALUES", 3)
    monkeypatch.setattr(bs, "FINEST", 4)
    monkeypatch.setattr(bs, "MAX_BUCKETS", 2)
    d = bs.Distribution()
    for value in (1.0, 1.2, 1.2, 1.3, 1.1, 3.0):
        d.add(value)
    assert d.pairs() == [(1.3, 5), (3.0, 1)]
    assert d.per_doubling == 2


def test_a_histogram_does_not_depend_on_the_order_of_its_values(monkeypatch):
    """5,000 values in two orders end in the same buckets, and each bucket's largest
    value is a point of the exact CDF (the share of values at most it)."""
    monkeypatch.setattr(bs, "EXACT_VALUES", 100)
    monkeypatch.setattr(bs, "MAX_BUCKETS", 300)
    rng = random.Random(3)
    values = [rng.lognormvariate(0, 2) for _ in range(5000)]
    forward, backward = bs.Distribution(), bs.Distribution()
    for value in values:
        forward.add(value)
    for value in reversed(values):
        backward.add(value)
    assert forward.pairs() == backward.pairs()
    assert forward.buckets <= 300 and forward.per_doubling < bs.FINEST
    ordered = sorted(values)
    seen = 0
    for top, count in forward.pairs():
        seen += count
        assert ordered[seen - 1] == top and (seen == len(values) or ordered[seen] > top)


# --- the timeline's requests ------------------------------------------------------------

def test_timeline_keeps_spaced_and_slowest_by_hand(monkeypatch):
    """TIMELINE_ROWS 3, SPACED 2, SLOWEST 1; five requests, one at a time, each lasting its
    output length (3, 9, 20, 5, 9 ticks). Spaced by arrival: positions 0 and 5 // 2 = 2
    (r0, r2, the slowest of all); the slowest among the others: r1 and r4 tie at 9, the
    earlier arrival wins."""
    monkeypatch.setattr(rs, "TIMELINE_ROWS", 3)
    monkeypatch.setattr(rs, "SPACED", 2)
    monkeypatch.setattr(rs, "SLOWEST", 1)
    records = [{"type": "request", "id": f"r{i}", "arrival": 100 * i, "prompt_tokens": 4,
                "output_tokens": out} for i, out in enumerate((3, 9, 20, 5, 9))]
    seen = _series(_trace(records))
    assert not seen.every and seen.spaced == {0, 2}
    kept = seen.timeline()
    assert sorted(kept) == ["r0", "r1", "r2"] and seen.slowest_ids() == {"r1"}
    # r1 (sent at 100, line 2): waiting from 100, prefill at 100, decode from 101, ended
    # at 109; E2EL 9 ticks.
    assert kept["r1"] == ((100, 2), [100, rs.WAITING, 100, rs.PREFILL, 101, rs.DECODE, 109,
                                     rs.END], 9)


def test_a_request_never_sent_takes_its_place_by_arrival(monkeypatch):
    """One client slot (max_concurrency 1): r1 is cancelled at 5 before it was sent, so
    it has no arrival record; it still takes place 1 by arrival (as its cancel comes
    before r2 is sent at 20), so the spaced places 0 and 2 are r0 and r2; among the
    others r4 (E2EL 6, from its send at 29 to 35) is the slowest."""
    monkeypatch.setattr(rs, "TIMELINE_ROWS", 3)
    monkeypatch.setattr(rs, "SPACED", 2)
    monkeypatch.setattr(rs, "SLOWEST", 1)
    records = ([{"type": "config", "max_concurrency": 1}]
               + [{"type": "request", "id": f"r{i}", "arrival": i, "prompt_tokens": 4,
                   "output_tokens": out} for i, out in enumerate((20, 3, 4, 5, 6))]
               + [{"type": "cancel", "id": "r1", "at": 5}])
    seen = _series(_trace(records))
    kept = seen.timeline()
    assert sorted(kept) == ["r0", "r2", "r4"] and seen.slowest_ids() == {"r4"}
    assert kept["r4"] == ((29, 6), [29, rs.WAITING, 29, rs.PREFILL, 30, rs.DECODE, 35,
                                    rs.END], 6)


def _held(seen: rs.RunSeries) -> dict[str, int]:
    """Every entry the series holds after a run."""
    return {"timeline": len(seen.kept) + len(seen.slowest),
            "live": len(seen._live) + len(seen._spaced_ids) + len(seen._ended)
            + len(seen._ending),
            "snapshots": len(seen.snap_t), "dispatches": len(seen.disp_t),
            "marks": len(seen.preemptions.times) + len(seen.retractions.times),
            "values": sum(len(d.exact) + d.buckets
                          for d in (seen.itl, seen.ttft, seen.tpot, seen.e2el))}


@pytest.mark.slow  # replays 4,400 requests: 2 s of CPU
def test_what_a_run_holds_does_not_grow_with_its_requests(monkeypatch):
    """Small limits (ROW_LIMIT 256, TIME_BUCKETS 16, EXACT_VALUES 64, MAX_BUCKETS 128)
    so that 400 and 4,000 requests both pass them: after either run the series holds
    at most 300 timelines, no live request, at most 256 rows of each series and
    2 x 64 + 128 values per distribution; the tenfold run holds no more than that."""
    for name, value in (("ROW_LIMIT", 256), ("TIME_BUCKETS", 16), ("EXACT_VALUES", 64),
                        ("MAX_BUCKETS", 128)):
        monkeypatch.setattr(bs, name, value)
    held = []
    for requests in (400, 4000):
        records = generate(WorkloadSpec(seed=2, requests=requests, rate=0.5))
        held.append(_held(_series(_trace(records), "vllm")))
    for entry in held:
        assert entry["timeline"] == 300 and entry["live"] == 0
        assert entry["snapshots"] <= 256 and entry["dispatches"] <= 256
        assert entry["marks"] <= 256 and entry["values"] <= 4 * (64 + 128)
    small, large = held
    assert large["snapshots"] > 0 and large["values"] > 0
    bound = {"timeline": 300, "live": 0, "snapshots": 256, "dispatches": 256, "marks": 256,
             "values": 4 * (64 + 128)}
    assert all(large[k] <= bound[k] and small[k] <= bound[k] for k in bound)


@pytest.mark.parametrize("requests", [5, 300])
def test_a_small_trace_keeps_every_request(requests):
    """Up to TIMELINE_ROWS requests the timeline keeps every one, nothing else."""
    records = generate(WorkloadSpec(seed=4, requests=requests, rate=0.5))
    seen = _series(_trace(records))
    assert seen.every and len(seen.timeline()) == requests and seen.slowest == []


@pytest.mark.slow  # replays 3,000 requests with a listener: 1.3 s of CPU
def test_a_waiting_request_costs_nothing(monkeypatch):
    """3,000 requests at 2 a tick overload `continuous`: more than 1,000 wait at once,
    yet at every snapshot the series holds a line only for requests it saw dispatched,
    no more than are running (this run preempts none)."""
    records = generate(WorkloadSpec(seed=1, requests=3000, rate=2))
    trace = _trace(records)
    options, _ = resolve_options(trace.config, {})
    seen = rs.RunSeries("continuous", Clock.of(options), options.num_blocks,
                        requests=len(trace.workload))
    most = {"waiting": 0, "excess": 0}

    def listen(event):
        seen(event)
        if event.kind == "snapshot":
            most["waiting"] = max(most["waiting"], event.waiting)
            most["excess"] = max(most["excess"], len(seen._live) - event.running)

    result = Engine(trace.workload, options, "continuous", on_event=listen,
                    on_request_end=seen.ended).run()
    seen.finish()
    assert result.summary["preemptions"] == 0
    assert most["waiting"] > 1000 and most["excess"] <= 0
    assert len(seen.timeline()) == 300


# --- every request against its arrival: the density grid ---------------------------------

def _cells(grid: dg.DensityGrid) -> dict[int, dict[int, int]]:
    return {column: dict(cell) for column, cell in grid.cells.items()}


def test_density_grid_columns_merge_pairwise_and_keep_every_request(monkeypatch):
    """COLUMNS 4, 8 rows per doubling: 1.0 is row (1 + 1100) x 8 = 8808, 2.0 is 8816,
    3.0 is 8820 (frexp 0.75 x 2^2: step 4), 0 has row 0. Arrivals at 0 and 3 fit
    columns of one step; one at 5 doubles the width (columns 0 and 3 become 0 and
    1, it lands in 2); one at 17 doubles it twice more (everything before it in
    column 0 of 8 steps, it in 2). The counts always sum to the requests added."""
    monkeypatch.setattr(dg, "COLUMNS", 4)
    grid = dg.DensityGrid()
    for t, value in ((0, 1.0), (3, 1.0), (3, 0)):
        grid.add(t, value)
    assert grid.width == 1 and _cells(grid) == {0: {8808: 1}, 3: {8808: 1, 0: 1}}
    grid.add(5, 3.0)
    assert grid.width == 2 and _cells(grid) == {0: {8808: 1}, 1: {8808: 1, 0: 1},
                                                2: {8820: 1}}
    grid.add(17, 2.0)
    assert grid.width == 8 and _cells(grid) == {0: {8808: 2, 0: 1, 8820: 1}, 2: {8816: 1}}
    assert grid.total == 5 == sum(sum(cell.values()) for cell in grid.cells.values())
    assert grid.rows == {8808: 2, 0: 1, 8820: 1, 8816: 1}
    assert grid.row_range(8808) == (1.0, 1.125) and grid.row_range(0) == (0.0, 0.0)
    assert grid.column_count() == 3


def test_density_grid_rows_merge_and_percentiles_by_hand(monkeypatch):
    """MAX_ROWS 2: 1.0 (row 8808), 1.2 (mantissa 0.6: step 1, 8809) and 1.9 (step 7,
    8815) are three rows at 8 per doubling; at 4 per doubling they are two, [1, 1.25)
    holding two requests and [1.75, 2) one. The median (rank 2 of 3) is drawn at the
    first row's geometric middle, sqrt(1.25); p99 (rank 3) at sqrt(1.75 x 2)."""
    monkeypatch.setattr(dg, "MAX_ROWS", 2)
    grid = dg.DensityGrid()
    for value in (1.0, 1.2, 1.9):
        grid.add(0, value)
    assert grid.per_doubling == 4 and _cells(grid) == {0: {4404: 2, 4407: 1}}
    assert grid.rows == {4404: 2, 4407: 1} and grid.total == 3
    assert grid.row_range(4407) == (1.75, 2.0)
    assert grid.percentile(range(0, 1), 0.5) == math.sqrt(1.25)
    assert grid.percentile(range(0, 1), 0.99) == math.sqrt(3.5)
    assert grid.percentile(range(1, 3), 0.5) is None


def test_density_grid_does_not_depend_on_the_order_of_its_requests(monkeypatch):
    """3,000 requests added in two orders, through merges of both columns and rows, end
    in the same cells, and the cells count every one of them."""
    monkeypatch.setattr(dg, "COLUMNS", 8)
    monkeypatch.setattr(dg, "MAX_ROWS", 10)
    rng = random.Random(7)
    requests = [(rng.randrange(10_000), rng.choice((0, rng.lognormvariate(0, 1.5))))
                for _ in range(3000)]
    forward, backward = dg.DensityGrid(), dg.DensityGrid()
    for t, value in requests:
        forward.add(t, value)
    for t, value in reversed(requests):
        backward.add(t, value)
    assert _cells(forward) == _cells(backward) and forward.rows == backward.rows
    assert forward.width == 2048 and forward.per_doubling < dg.FINEST
    assert sum(sum(c.values()) for c in forward.cells.values()) == 3000 == forward.total


def test_a_run_counts_every_request_in_its_cell(monkeypatch):
    """A replay of 40 requests with COLUMNS 2 (so the columns merge as the run goes):
    each request sits in the cell of its `sent` step and its TTFT (its queue delay)
    as its per-request record gives them, and the counts sum to the 40 requests."""
    monkeypatch.setattr(dg, "COLUMNS", 2)
    records = generate(WorkloadSpec(seed=3, requests=40, rate=0.5))
    trace = _trace(records)
    options, _ = resolve_options(trace.config, {})
    seen = rs.RunSeries("vllm", Clock.of(options), options.num_blocks,
                        requests=len(trace.workload))
    result = Engine(trace.workload, options, "vllm", on_event=seen, on_request_end=seen.ended,
                    keep_requests=True).run()
    seen.finish()
    for grid, field in ((seen.ttft_grid, "ttft"), (seen.queue_grid, "queue_delay")):
        expected: dict[int, dict[int, int]] = {}
        for req in result.requests:
            value = request_record(req)[field]
            row = bs.bucket_key(value, grid.per_doubling) if value > 0 else 0
            cell = expected.setdefault(req.sent // grid.width, {})
            cell[row] = cell.get(row, 0) + 1
        assert grid.width > 1 and _cells(grid) == expected
        assert grid.total == 40 == sum(sum(c.values()) for c in grid.cells.values())


# --- means inside the bands -------------------------------------------------------------

def test_bucket_means_merge_pairwise_by_hand(monkeypatch):
    """TIME_BUCKETS 4: rows (t, value) (0, 2), (1, 4), (3, 6) fill buckets of one step;
    (9, 10) needs buckets of 4 steps: [0, 4) holds 3 rows summing to 12 (mean 4), [8,
    12) the last (mean 10)."""
    monkeypatch.setattr(bs, "TIME_BUCKETS", 4)
    means = bs.BucketMeans(1)
    for t, value in ((0, 2), (1, 4), (3, 6)):
        means.add(t, (value,))
    assert (means.counts, means.sums) == ([1, 1, 0, 1], [[2, 4, 0, 6]])
    means.add(9, (10,))
    assert means.width == 4 and (means.counts, means.sums) == ([3, 0, 1], [[12, 0, 10]])
    assert means.means(0) == [(0, 3, 4.0), (8, 1, 10.0)]


def test_a_series_counts_each_row_once_in_its_means_through_compactions(monkeypatch):
    """ROW_LIMIT 4, TIME_BUCKETS 2: rows (t, a) appended as RunSeries appends them,
    compacting past 4 rows. Compaction thins the rows but the means count every row
    once: 0..9 with a = t x 10 end in buckets of 8 steps, [0, 8) 8 rows summing to
    280 (mean 35), [8, 16) 2 rows summing to 170 (mean 85)."""
    monkeypatch.setattr(bs, "ROW_LIMIT", 4)
    monkeypatch.setattr(bs, "TIME_BUCKETS", 2)
    series = bs.TimeSeries(("a", "b"), ("a",))
    for t in range(10):
        series.t.append(t)
        series.columns["a"].append(t * 10)
        series.columns["b"].append(0)
        if len(series.t) > bs.ROW_LIMIT:
            series.compact()
    assert series.compactions > 0 and len(series.t) < 10
    series.fold()
    series.fold()  # (a second fold adds nothing)
    assert series.means.width == 8 and series.means.means(0) == [(0, 8, 35.0), (8, 2, 85.0)]
