"""A counted start and its fold in one ledger call (engine/folded_ledger.py's
`DispatchLedger.decodes_folded`, used by engine/fast/counted_fold.py): by hand,
and field for field the same as `decodes`, then `fold` and the start's gap.

The stand-in cost model is test_ledger.py's: a decode dispatch of R rows whose
contexts sum to X lasts 2.5 ms + 0.24 ms a row + 0.01 ms a token of X + R; the
clock's step is 1 ms.
"""
from __future__ import annotations

from contextlib import contextmanager

import pytest

from scheduler_sim.engine.ledger import DispatchLedger
from scheduler_sim.engine.run_stats import RunStats
from scheduler_sim.records.clock import Clock

from test_ledger import MS, Linear as Priced

INF = float("inf")


class Linear(Priced):
    """test_ledger.py's stand-in, with `decode_seconds` (a counted start's price)."""

    def decode_seconds(self, rows, contexts):
        base, kv = self.decode_terms(rows)
        return base + kv * (contexts + rows)


def _fields(stats: RunStats) -> tuple:
    return (stats.iterations, stats.rows, stats.tokens, stats.decode_tokens,
            stats.output_tokens, stats.busy_seconds, dict(stats.itl), stats.work.as_tuple())


def _apart(cost, clock, now, rows, contexts, most, until, after, ended=None):
    """The same, as the engine made it before: `decodes`, then (if long enough)
    `fold` and the gap of the start's outputs (`ended`: the last dispatch's end)."""
    stats = RunStats(clock)
    ledger = DispatchLedger(stats, cost, clock)
    if ended is not None:
        ledger.ended(*ended)
    done, exact = ledger.decodes(now, rows, contexts)
    got = (done, exact, 0, done, exact, now)
    if most > 0 and until - done >= after * (done - now):
        folded, end, last_exact, start = ledger.fold(exact, done, rows, contexts + rows,
                                                     most, until, None)
        ledger.gap(done - now, rows)
        got = (done, exact, folded, end, last_exact, start)
    return got, _fields(stats)


def test_a_start_and_three_folded_dispatches_by_hand():
    stats = RunStats(MS)
    ledger = DispatchLedger(stats, Linear(), MS)
    got = ledger.decodes_folded(10, 2, 150, 3, INF, 2)
    # The start: 2.5 + 0.48 + 0.01 x 152 = 4.5 ms from step 10, ends at 14.5 (step 15);
    # folded: 4.52 ms (to 19.02, step 20), 4.54 (23.56, step 24), 4.56 (28.12, step 29).
    assert got[:3] == (15, pytest.approx(14.5), 3)
    assert got[3:] == (29, pytest.approx(28.12), 24)
    # Output gaps: the start's 5 steps and the first two folded ones' 5 and 4, two
    # rows each; the last's outputs come when it completes.
    assert stats.itl == {5: 4, 4: 2}
    assert (stats.iterations, stats.rows, stats.decode_tokens, stats.output_tokens) == (
        4, 8, 8, 6)
    assert stats.busy_seconds == pytest.approx(0.0045 + 0.00452 + 0.00454 + 0.00456)
    # Work: 4 dispatches of 2 tokens, KV read 152 + 154 + 156 + 158.
    assert stats.work.as_tuple() == (8, 8, 620, 620, ((2, 4),))
    assert (got, _fields(stats)) == _apart(Linear(), MS, 10, 2, 150, 3, INF, 2)


def test_the_folded_dispatches_starts_are_handed_back_for_a_listener():
    """With `starts` given (a listener's fold: fast/counted_fold.py), the folded
    dispatches' start steps are appended to it, and nothing else changes."""
    stats = RunStats(MS)
    starts = []
    got = DispatchLedger(stats, Linear(), MS).decodes_folded(10, 2, 150, 3, INF, 2, starts)
    # (As in the test above: the start ends at step 15, the folded ones at 20 and 24,
    # the last in flight from 24 to 29.)
    assert starts == [15, 20, 24]
    assert got[2:4] == (3, 29) and got[5] == 24
    assert (got, _fields(stats)) == _apart(Linear(), MS, 10, 2, 150, 3, INF, 2)
    starts = []  # without a cost model: one step each, from the start's end at 8
    DispatchLedger(RunStats(), None, Clock()).decodes_folded(7, 3, 40, 4, INF, 2, starts)
    assert starts == [8, 9, 10, 11]
    starts = []  # nothing folded: none
    DispatchLedger(RunStats(MS), Linear(), MS).decodes_folded(10, 2, 150, 3, 16, 2, starts)
    assert starts == []


def test_no_fold_when_the_stretch_left_is_short_or_nothing_may_fold():
    for most, until in ((3, 16), (0, INF)):
        stats = RunStats(MS)
        ledger = DispatchLedger(stats, Linear(), MS)
        got = ledger.decodes_folded(10, 2, 150, most, until, 2)
        assert got == (15, pytest.approx(14.5), 0, 15, pytest.approx(14.5), 10)
        assert stats.itl == {}  # (the start's gap comes at its completion)
        assert (stats.iterations, stats.output_tokens) == (1, 0)
        assert (got, _fields(stats)) == _apart(Linear(), MS, 10, 2, 150, most, until, 2)


def test_without_a_cost_model_each_dispatch_lasts_one_step():
    stats = RunStats()
    ledger = DispatchLedger(stats, None, Clock())
    got = ledger.decodes_folded(7, 3, 40, 4, INF, 2)
    assert got == (8, 8, 4, 12, 12, 11)
    assert stats.itl == {1: 12}  # the start's and three folded dispatches' outputs
    assert (got, _fields(stats)) == _apart(None, Clock(), 7, 3, 40, 4, INF, 2)


def test_the_same_as_apart_on_many_shapes():
    for rows in (1, 3, 9):
        for contexts in (0, 100, 5000):
            for most in (0, 1, 2, 5, 40, 200):
                for until in (INF, 30, 60, 400):
                    for now in (10, 11):
                        stats = RunStats(MS)
                        ledger = DispatchLedger(stats, Linear(), MS)
                        ledger.ended(10, 9.75)
                        got = ledger.decodes_folded(now, rows, contexts, most, until, 2)
                        apart = _apart(Linear(), MS, now, rows, contexts, most, until, 2,
                                       (10, 9.75))
                        assert (got, _fields(stats)) == apart



@contextmanager
def _counting_start_and_fold():
    """Count `start_and_fold`'s calls by caller while the block runs: after an
    admission (through counted_fold's own name) and at carry_counted's
    boundaries (finishes' import of it)."""
    from scheduler_sim.engine.fast import counted_fold, finishes
    calls = {counted_fold: 0, finishes: 0}
    start = counted_fold.start_and_fold

    def counting(module):
        def call(*args):
            calls[module] += 1
            return start(*args)
        return call

    for module in calls:
        module.start_and_fold = counting(module)
    try:
        yield calls
    finally:
        for module in calls:
            module.start_and_fold = start


def test_replays_with_a_cost_model_take_this_path_and_match_the_stepped_ones():
    """Requests arriving into and finishing inside counted stretches under a cost
    model: `start_and_fold` starts and folds them (counted below), and the results
    are those of the stepped replay (no fast-forward), request for request."""
    from conftest import trace_bytes, twelve_arrivals
    from scheduler_sim.engine.core import Engine
    from scheduler_sim.engine.summary import request_record
    from scheduler_sim.io.trace import parse_trace
    from scheduler_sim.records.options import Options

    trace = parse_trace(trace_bytes(twelve_arrivals()), "counted.jsonl")
    for policy in ("continuous", "vllm"):
        outcomes = []
        for fast in (True, False):
            options = Options.resolve(trace.config, {"cost_model": "llama-3-8b/h100-sxm",
                                                     "block_size": 16, "num_blocks": 512})
            engine = Engine(trace.workload, options, policy, fast_forward=fast)
            with _counting_start_and_fold() as calls:
                result = engine.run()
            outcomes.append((result.summary, [request_record(r) for r in result.requests]))
            if fast:
                # 12 starts after an admission, 12 at carry_counted's boundaries,
                # 39 dispatches folded (a change in when the path applies shows here)
                assert list(calls.values()) == [12, 12] and engine.steadiness.folded == 39
        assert outcomes[0] == outcomes[1]


def test_the_decode_terms_are_asked_once_a_row_count_and_forgotten_with_the_cost():
    """The ledger keeps `decode_terms` by rows for its counted starts (at most
    TERMS_KEPT row counts), and forgets them when priced by another model."""
    asked = []

    class Counting(Linear):
        def decode_terms(self, rows):
            asked.append(rows)
            return super().decode_terms(rows)

    from scheduler_sim.engine import folded_ledger
    ledger = DispatchLedger(RunStats(MS), Counting(), MS)
    first = ledger.decodes_folded(10, 2, 150, 0, INF, 2)
    again = ledger.decodes_folded(first[0], 2, 152, 0, INF, 2)
    ledger.decodes_folded(again[0], 3, 154, 0, INF, 2)
    assert asked == [2, 3]
    assert ledger.terms == {2: Linear().decode_terms(2), 3: Linear().decode_terms(3)}
    ledger.priced_by(Counting())
    assert ledger.terms == {}
    ledger.decodes_folded(20, 2, 150, 0, INF, 2)
    assert asked == [2, 3, 2]
    full = DispatchLedger(RunStats(MS), Counting(), MS)
    full.terms.update((rows, (1.0, 0.5)) for rows in range(100, 100 + folded_ledger.TERMS_KEPT))
    full.decodes_folded(10, 2, 150, 0, INF, 2)
    full.decodes_folded(20, 2, 150, 0, INF, 2)
    assert asked == [2, 3, 2, 2, 2] and 2 not in full.terms


def test_listened_replays_take_this_path_and_write_the_stepped_replays_lines():
    """With an event listener (lines, or records), both callers start and fold
    through `start_and_fold` too, and the event stream is the stepped replay's
    (no fast-forward), line for line."""
    from conftest import twelve_arrivals_stepped
    from scheduler_sim.engine.core import Engine
    from scheduler_sim.records.event_lines import LineListener

    trace, options, clock, stepped = twelve_arrivals_stepped()
    lines: list[str] = []

    class Collect(LineListener):
        def write(self, line):
            lines.extend(line.split("\n"))

    as_records: list[str] = []
    for listener, out in ((Collect("p", clock), lines),
                          (lambda e: as_records.append(e.to_json("p", clock)), as_records)):
        with _counting_start_and_fold() as calls:
            engine = Engine(trace.workload, options, "continuous", on_event=listener)
            engine.run()
        assert list(calls.values()) == [12, 12] and engine.steadiness.folded == 39
        assert out == stepped
