"""The dispatch ledger (engine/ledger.py): statistics, timing and output gaps, by hand.

A stand-in cost model prices a dispatch at 2.5 ms plus 1 ms per prefill token
plus 0.25 ms per decode row plus 0.01 ms per token of decode context; the
clock's step is 1 ms (a run in seconds, as under a cost model).
"""
from __future__ import annotations

import random

import pytest

from scheduler_sim.engine.ledger import DispatchLedger
from scheduler_sim.engine.run_stats import RunStats
from scheduler_sim.records.clock import Clock

MS = Clock("s", 1.0, 0.001, True)
COARSE = Clock("s", 1.0, 0.01, True)  # 10 ms steps: most dispatches end inside their first


class Linear:
    """dispatch_seconds, decode_terms and decode_series of the formula in the module
    docstring, in the cost model's form: a part of the chunks and rows, plus the
    per-token KV time times contexts + rows (0.24 ms a row and 0.01 ms a token of
    context and row: 0.25 ms a row), so that all three give the same floats."""

    kv = 0.00001

    def base(self, chunks, rows):
        return 0.0025 + 0.001 * sum(c for c, _ in chunks) + 0.00024 * rows

    def dispatch_seconds(self, chunks, rows, contexts):
        return self.base(chunks, rows) + self.kv * (contexts + rows)

    def decode_terms(self, rows):
        return self.base((), rows), self.kv

    def decode_series(self, rows, contexts):
        base, kv = self.decode_terms(rows)
        while True:
            contexts += rows
            yield base + kv * contexts


def test_without_a_cost_model_a_dispatch_lasts_one_step():
    stats = RunStats()
    ledger = DispatchLedger(stats, None, Clock())
    assert ledger.dispatch(7, 3, 12, 10, 2, 0, 1, [(10, 0)], 40) == (8, 8)
    assert (stats.iterations, stats.rows, stats.tokens, stats.prompt_tokens,
            stats.decode_tokens, stats.recompute_tokens, stats.padding_rows,
            stats.busy_seconds) == (1, 4, 12, 10, 2, 0, 1, 0.0)


def test_a_priced_dispatch_completes_at_the_first_step_at_or_after_its_end():
    stats = RunStats(MS)
    ledger = DispatchLedger(stats, Linear(), MS)
    # A 4-token prefill chunk and 2 decode rows of contexts 100 + 50:
    # 2.5 + 4 + 0.5 + 1.5 = 8.5 ms from step 10: completes at step 19 (18.5 rounded up).
    done, exact = ledger.dispatch(10, 3, 6, 4, 2, 0, 0, [(4, 0)], 150)
    assert (done, exact) == (19, pytest.approx(18.5))
    assert stats.busy_seconds == pytest.approx(0.0085)
    # The next one starts at step 19 from the exact end 18.5, not from 19:
    # 2 decode rows of contexts 102 + 52 = 3 + 1.54 = 4.54 ms: ends at 23.04, step 24.
    ledger.ended(done, exact)
    assert ledger.start_of(19) == pytest.approx(18.5)
    assert ledger.start_of(20) == 20
    done, exact = ledger.dispatch(19, 2, 2, 0, 2, 0, 0, [], 154)
    assert (done, exact) == (24, pytest.approx(23.04))


def test_a_dispatch_shorter_than_the_rest_of_its_step_ends_on_the_next_step():
    ledger = DispatchLedger(RunStats(MS), Linear(), MS)
    ledger.ended(5, 2.0)  # ended long before step 5 (a stand-in, not a real history)
    # 2.5 + 0.25 + 0.01 = 2.76 ms from the exact end 2.0: 4.76 <= 5, so one step.
    assert ledger.dispatch(5, 1, 1, 0, 1, 0, 0, [], 1) == (6, 6)


def test_completions_count_outputs_and_gaps_by_length():
    stats = RunStats(MS)
    ledger = DispatchLedger(stats, None, Clock())
    ledger.completed(30, 29.5, 5, {24: 3, 27: 2})
    ledger.completed(33, 33.0, 1, {30: 1})
    ledger.gap(3, 4)
    ledger.gaps([6, 6, 9])
    ledger.empty()
    assert stats.makespan == 33
    assert (ledger.end_step, ledger.exact_end) == (33, 33.0)
    assert stats.output_tokens == 6
    assert stats.itl == {6: 3 + 2, 3: 2 + 1 + 4, 9: 1}
    assert stats.empty_iterations == 1


def test_a_counted_completion_is_completed_with_one_previous_output_time():
    """`completed_since(now, exact, outputs, since, count)` is `completed` with
    `{since: count}`: 3 members that last emitted at 24 and 2 newcomers' first
    outputs complete at 30 (3 gaps of 6), then 4 members at 33 (4 of 3)."""
    by_count, by_dict = RunStats(MS), RunStats(MS)
    counted = DispatchLedger(by_count, None, Clock())
    written = DispatchLedger(by_dict, None, Clock())
    counted.completed_since(30, 29.5, 5, 24, 3)
    counted.completed_since(33, 33.0, 4, 30, 4)
    written.completed(30, 29.5, 5, {24: 3})
    written.completed(33, 33.0, 4, {30: 4})
    assert by_count.itl == by_dict.itl == {6: 3, 3: 4}
    assert (by_count.makespan, by_count.output_tokens) == (33, 9)
    assert (counted.end_step, counted.exact_end) == (33, 33.0)
    assert (by_dict.makespan, by_dict.output_tokens) == (33, 9)


def test_a_folded_stretch_is_the_dispatches_stepped_one_by_one():
    """On random stretches: fold() gives the timing, statistics and gaps of dispatch()
    and completed() called for each dispatch in turn. The dispatch in flight when
    the stretch is folded completes first: its outputs are counted here, its gaps
    (which depend on when its rows last emitted) by the caller; the last folded
    dispatch stays in flight: started, not completed."""
    rng = random.Random(3)
    for _ in range(300):
        rows = rng.randint(1, 40)
        contexts = rng.randint(rows, 40 * rows)
        done = rng.randint(1, 50)
        exact = done - rng.random() * 0.999
        most = rng.randint(1, 30)
        until = done + rng.randint(1, 400)
        clock = rng.choice((MS, MS, COARSE, Clock()))
        cost = Linear() if clock.in_seconds else None

        folded_stats = RunStats(clock)
        folded = DispatchLedger(folded_stats, cost, clock)
        starts: list[int] = []
        n, last_done, last_exact, last_start = folded.fold(
            exact, done, rows, contexts, most, until, starts)

        stepped_stats = RunStats(clock)
        stepped = DispatchLedger(stepped_stats, cost, clock)
        stepped.ended(done, exact)
        t, ctx, count, previous, e = done, contexts, 0, None, exact
        expected_starts = []
        while count < most and t < until:
            if previous is None:  # the flight completes: outputs, gaps left to the caller
                stepped.completed(t, exact, rows, {})
            else:  # the dispatch before this one completes at t
                stepped.completed(t, e, rows, {previous: rows})
            expected_starts.append(t)
            d, e = stepped.dispatch(t, rows, rows, 0, rows, 0, 0, [], ctx)
            previous, t, ctx, count = t, d, ctx + rows, count + 1
        assert n == count and starts == expected_starts
        assert (last_done, last_start) == (t, previous)
        assert last_exact == (e if cost is not None else t)
        for name in ("iterations", "rows", "tokens", "decode_tokens", "busy_seconds"):
            assert getattr(folded_stats, name) == getattr(stepped_stats, name), name
        assert folded_stats.output_tokens == stepped_stats.output_tokens
        # The gap lengths too in the order they first came (the summary's is theirs).
        assert list(folded_stats.itl.items()) == list(stepped_stats.itl.items())


class NearOneStep(Linear):
    """Decode dispatches of 9.4 ms plus 0.001 ms per token of context and row: on
    10 ms steps some end inside the step they start in, after others that did not."""

    kv = 0.000001

    def base(self, chunks, rows):
        return 0.0094


def test_long_folded_stretches_match_step_by_step_gaps_in_the_same_order():
    """fold() times long stretches several slices at a time: the same timing,
    statistics and output gaps as one dispatch at a time, the gap lengths in the
    order they first came; also when a dispatch in a later slice ends inside its
    first step (then the rest is timed one by one)."""
    rng = random.Random(5)
    for _ in range(60):
        rows = rng.randint(1, 8)
        contexts = rng.randint(rows, 400 * rows)
        done = rng.randint(1, 50)
        exact = done - rng.random() * 0.999
        most = rng.randint(1, 700)
        until = done + rng.randint(1, 5000)
        clock, cost = rng.choice(((MS, Linear()), (COARSE, NearOneStep()), (Clock(), None)))
        stats = RunStats(clock)
        n, last_done, last_exact, last_start = DispatchLedger(stats, cost, clock).fold(
            exact, done, rows, contexts, most, until, None)
        # The reference: one dispatch at a time, as `fold` was written before.
        series = cost.decode_series(rows, contexts) if cost is not None else None
        itl: dict[int, int] = {}
        t, e, count, busy, length = done, exact, 0, 0.0, 0
        while count < most and t < until:
            if count:
                itl[length] = itl.get(length, 0) + rows
            if series is None:
                end = e = t + 1
            else:
                seconds = next(series)
                busy += seconds
                e += clock.steps(seconds)
                end = clock.end_step(e, t)
                if e <= t:
                    e = end
            length, t, count = end - t, end, count + 1
        assert (n, last_done, last_exact, last_start) == (count, t, e, t - length)
        assert stats.busy_seconds == busy
        assert list(stats.itl.items()) == list(itl.items())


def test_a_folded_stretch_by_hand():
    """Three dispatches of one row from step 10 (exact end 9.5) on 1 ms steps, of
    2.75, 2.76 and 2.77 ms (contexts 0, 1, 2): they end at 12.25, 15.01 and 17.78,
    completing at steps 13, 16 and 18; gaps of 3 steps for the first two (the last
    stays in flight)."""
    stats = RunStats(MS)
    n, done, exact, start = DispatchLedger(stats, Linear(), MS).fold(9.5, 10, 1, 0, 3,
                                                                     100, None)
    assert (n, done, start) == (3, 18, 16)
    assert exact == pytest.approx(17.78)
    assert stats.itl == {3: 2}
    assert stats.busy_seconds == pytest.approx(0.00828)
