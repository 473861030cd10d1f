"""Timing a folded stretch (engine/stretch_timing.py): the lengths of a slice's
dispatches counted a run at a time give the counts of timing each one.

The reference is the plain loop of `Clock.end_step`, one dispatch at a time.
"""
from __future__ import annotations

import random
from functools import partial, reduce
from itertools import accumulate
from operator import add

import pytest

from scheduler_sim.engine import slice_runs, stretch_timing
from scheduler_sim.engine.slice_runs import count_runs, running, time_each
from scheduler_sim.engine.stretch_timing import _runs_may_count, time_stretch
from scheduler_sim.gpu.catalogue import gpu_named, model_named
from scheduler_sim.gpu.coefficients import Coefficients
from scheduler_sim.gpu.costmodel import CostModel
from scheduler_sim.records.clock import Clock

US = Clock("s", 1.0, 1e-6, True)   # the cost model's default resolution
MS = Clock("s", 1.0, 0.001, True)
INF = float("inf")


class Series:
    """A stand-in cost model: decode dispatches of `base + per * (context)` seconds
    (the contexts growing by `rows` a dispatch)."""

    def __init__(self, base: float, per: float) -> None:
        self.base = base
        self.per = per

    def decode_terms(self, rows):
        return self.base, self.per

    def decode_series(self, rows, contexts):
        while True:
            contexts += rows
            yield self.base + self.per * contexts


def one_at_a_time(cost, clock, exact, done, rows, contexts, most, until):
    """(dispatches, last completion step, its exact end, last length, busy
    seconds), and the output gaps by length (`rows` for each dispatch but the
    last), each dispatch timed by `Clock.end_step` in turn."""
    series = cost.decode_series(rows, contexts)
    gaps: dict[int, int] = {}
    n, busy, length = 0, 0.0, 0
    while n < most and done < until:
        if n:
            gaps[length] = gaps.get(length, 0) + rows
        seconds = next(series)
        busy += seconds
        exact += clock.steps(seconds)
        end = clock.end_step(exact, done)
        if exact <= done:
            exact = end
        length, done, n = end - done, end, n + 1
    return (n, done, exact, length, busy), gaps


def nonzero(counts):
    return {k: v for k, v in counts.items() if v}


def test_a_slice_counted_in_runs_by_hand(monkeypatch):
    """On 1 ms steps, dispatches of 2.3, 2.6, 2.9, 3.2, 3.5 and 3.8 steps from
    exact 0.5 (step 1): they end at 2.8, 5.4, 8.3, 11.5, 15.0 and 18.8, so at
    steps 3, 6, 9, 12, 15 and 19: lengths 2, 3, 3, 3, 3, 4. The second and third
    (x in (2, 3)) are one run: steps 3 to 9, 6 steps for 2 dispatches of 2 or 3,
    so both 3; the last three another: steps 9 to 19, 10 steps for 3 dispatches
    of 3 or 4, so one 4. (Runs this short are left to `time_each` in a replay:
    `RUN_COST` 0 counts them anyway.)"""
    monkeypatch.setattr(slice_runs, "RUN_COST", 0)
    steps = [2.3, 2.6, 2.9, 3.2, 3.5, 3.8]
    exacts = [0.5]
    for x in steps:
        exacts.append(exacts[-1] + x)
    del exacts[0]
    counts: dict[int, int] = {}
    assert count_runs(steps, 0.5, 1, INF, counts) == (6, 19, 4, exacts[-1])
    assert nonzero(counts) == {2: 1, 3: 4, 4: 1}
    lengths: list[int] = []
    assert time_each(MS, exacts, 1, INF, None, lengths) == (6, 19, 4)
    assert lengths == [2, 3, 3, 3, 3, 4]
    # Cut at step 10: the fourth starts at 9 (before 10) and is the last.
    counts = {}
    assert count_runs(steps, 0.5, 1, 10, counts) == (4, 12, 3, exacts[3])
    assert nonzero(counts) == {2: 1, 3: 3}


def test_runs_left_to_the_exact_passes(monkeypatch):
    """Runs too short for their cost, steps that shrink, a dispatch under one step,
    or one ending at or before its start: `count_runs` declines and counts
    nothing."""
    counts: dict[int, int] = {}
    steps = [2.0 + k / 8 for k in range(12)]  # 1.4 steps of growth: 3.4 x 4 > 12
    assert count_runs(steps, 0.0, 0, INF, counts) is None
    monkeypatch.setattr(slice_runs, "RUN_COST", 0)
    # Ends 2, 4.125, 6.375, ... 32.25: steps 2, 5, 7, 9, 12, 14, 17, 20, 23, 26, 29, 33.
    assert count_runs(steps, 0.0, 0, INF, counts) == (12, 33, 4, sum(steps))
    assert nonzero(counts) == {2: 4, 3: 7, 4: 1}
    counts = {}
    assert count_runs([3.0, 2.5], 1.0, 1, INF, counts) is None
    assert count_runs([0.5, 0.6], 1.0, 1, INF, counts) is None
    assert count_runs([1.5, 1.6], 0.0, 2, INF, counts) is None  # ends at 2
    assert counts == {}


def _slices_counted(monkeypatch) -> list[bool]:
    """Record each call of `count_runs` (whether it counted its slice) in the
    list returned."""
    taken: list[bool] = []
    real = stretch_timing.count_runs

    def counting(*args):
        out = real(*args)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(stretch_timing, "count_runs", counting)
    return taken


def test_a_stretch_is_counted_in_one_slice_sized_from_its_first_dispatch(monkeypatch):
    """A stretch of 100 dispatches of about 6.5 ms on 1 us steps, no limit: one
    slice of all 100, counted in runs. Cut by `until` 330,000 steps away: the
    first dispatch lasts 0.0065 + 1e-8 x 8,002 s, 6,580.02 steps, and none less
    than 6,579, so at most 330,000 // 6,579 + 1 = 51 start before it: one slice of
    51, and all 51 do (the 51st at about 329,026 steps: 50 x 6,580.02 plus 25)."""
    taken = _slices_counted(monkeypatch)
    cost = Series(0.0065, 1e-8)
    gaps = {6501: 7}
    got = time_stretch(cost, US, 1000.25, 1001, 2, 8000, 100, INF, None, gaps)
    assert taken == [True]
    expected, expected_gaps = one_at_a_time(cost, US, 1000.25, 1001, 2, 8000, 100, INF)
    assert got == expected
    expected_gaps[6501] = expected_gaps.get(6501, 0) + 7
    assert gaps == expected_gaps
    taken.clear()
    gaps = {}
    got = time_stretch(cost, US, 1000.25, 1001, 2, 8000, 100, 331_001, None, gaps)
    assert taken == [True] and got[0] == 51 and got[1] - got[3] < 331_001 <= got[1]
    assert (got, gaps) == one_at_a_time(cost, US, 1000.25, 1001, 2, 8000, 100, 331_001)
    # With event records (starts wanted) the slices are timed one by one.
    taken.clear()
    starts: list[int] = []
    assert time_stretch(cost, US, 1000.25, 1001, 2, 8000, 100, INF, starts, {})[0] == 100
    assert taken == [] and len(starts) == 100


def test_a_cut_found_past_an_end_on_a_whole_step_by_hand(monkeypatch):
    """Six dispatches of 2.5 steps (1 ms steps) from exact 0.5 (step 1), 3 rows: ends
    3.0, 5.5, 8.0, 10.5, 13.0, 15.5, at steps 3, 6, 8, 11, 13, 16. The first lasts 2,
    the other five are one run of 2 or 3. Up to `until` 9 four start before it (at
    1, 3, 6 and 8): the first exact end at or past 8 (`until` - 1) is the third's,
    8.0, which completes at 8, before 9, so the cut is one further, the fourth
    (ending at 11, 3 steps after 8). Lengths 2, 3, 2, 3: two each, 3 rows each.
    With the fourth and later of 3 steps (a whole number: each by itself), ends 3,
    6, 8, 11, 14, 17, and the same four start before 9."""
    monkeypatch.setattr(slice_runs, "RUN_COST", 0)
    for steps in ([2.5] * 6, [2.5, 2.5, 2.5, 3.0, 3.0, 3.0]):
        exacts = list(accumulate(steps, initial=0.5))[1:]
        assert exacts[:4] == [3.0, 5.5, 8.0, 10.5 if steps[3] == 2.5 else 11.0]
        counts: dict[int, int] = {}
        assert count_runs(steps, 0.5, 1, 9, counts, True, 3) == (4, 11, 3, exacts[3])
        assert counts == {2: 6, 3: 6}
        lengths: list[int] = []
        assert time_each(MS, exacts, 1, 9, None, lengths) == (4, 11, 3)
        assert lengths == [2, 3, 2, 3]


def test_a_cost_models_rising_steps_are_not_tested_again(monkeypatch):
    """100 dispatches of about 6.5 ms on 1 us steps, as above: with kv >= 0 the
    slice's steps only grow, so `count_runs` is told so (`rising`, no test of
    its own: the slice counted); with kv < 0 (1e-8 less a dispatch's step
    each) it tests them, declines, and the slice is timed one by one. Either
    way the stretch is timed as one dispatch at a time would be."""
    risings: list[bool] = []
    real = stretch_timing.count_runs

    def counting(*args):
        risings.append(args[5])
        return real(*args)

    monkeypatch.setattr(stretch_timing, "count_runs", counting)
    for per, flags in ((1e-8, [True]), (-1e-8, [False])):
        risings.clear()
        gaps: dict[int, int] = {}
        cost = Series(0.0065, per)
        got = time_stretch(cost, US, 1000.25, 1001, 2, 8000, 100, INF, None, gaps)
        assert risings == flags
        assert (got, gaps) == one_at_a_time(cost, US, 1000.25, 1001, 2, 8000, 100, INF)


def test_a_stretch_ended_soon_by_until_is_not_sliced(monkeypatch):
    """100 dispatches allowed, the first of 0.0065 + 1e-8 x 8,002 s: 6,580.02 steps
    on 1 us steps, and longer after. Before `until` 203,980 steps away no more
    than 31 of them fit (31 x 6,580.02 = 203,980.62): timed one at a time, no
    slice (they are 31); a step further away and a slice is timed (32 may fit)."""
    taken = _slices_counted(monkeypatch)
    cost = Series(0.0065, 1e-8)
    for away, slices, n in ((203_980, [], 31), (203_981, [True], 31)):
        taken.clear()
        gaps: dict[int, int] = {}
        got = time_stretch(cost, US, 1000.25, 1001, 2, 8000, 100, 1001 + away, None, gaps)
        assert taken == slices and got[0] == n
        assert (got, gaps) == one_at_a_time(cost, US, 1000.25, 1001, 2, 8000, 100, 1001 + away)


def test_runs_may_count_a_first_slice_growing_by_under_six_31sts_of_a_step():
    """A first slice of 32 dispatches growing by g steps each is counted in runs
    when (31 g + 2) x 4 <= 32, that is g <= 6/31 (about 0.1935)."""
    assert _runs_may_count(0.0) and _runs_may_count(0.19) and _runs_may_count(6 / 31)
    assert not _runs_may_count(0.2) and not _runs_may_count(0.48)


def test_a_stretch_growing_too_fast_for_runs_is_timed_one_at_a_time(monkeypatch):
    """100 dispatches of 9 rows of 0.0065 + 5e-8 x context s on 1 us steps: each
    0.45 steps longer than the one before, too fast for runs of a slice
    (`_runs_may_count`), so none is sliced, with or without event records; the
    same results as the one-at-a-time loop, and a start each."""
    taken = _slices_counted(monkeypatch)
    passes: list[int] = []
    real = stretch_timing.time_each

    def timing(*args):
        passes.append(1)
        return real(*args)

    monkeypatch.setattr(stretch_timing, "time_each", timing)
    cost = Series(0.0065, 5e-8)
    expected = one_at_a_time(cost, US, 1000.25, 1001, 9, 8000, 100, INF)
    for starts in (None, []):
        gaps: dict[int, int] = {}
        assert (time_stretch(cost, US, 1000.25, 1001, 9, 8000, 100, INF, starts, gaps),
                gaps) == expected
        assert taken == [] and passes == []
    (n, end, _, last, _), _ = expected
    assert len(starts) == n == 100 and starts[0] == 1001 and starts[-1] == end - last
    assert all(a < b for a, b in zip(starts, starts[1:]))
    # Growing by 0.018 steps (2 rows of 9e-9 s a token): sliced, counted in runs.
    cost = Series(0.0065, 9e-9)
    assert time_stretch(cost, US, 1000.25, 1001, 2, 8000, 100, INF, None, {})[0] == 100
    assert taken == [True]


def test_a_short_stretch_timed_one_at_a_time_by_hand():
    """Dispatches of 2 ms on 1 ms steps, 3 rows, from step 1000 (exactly): each
    lasts 2 steps. Up to `until` 1005: three start before it (at 1000, 1002 and
    1004), the last ends at 1006, and the two before it end 3 gaps of 2 steps
    each; `until` 1002: one, ending there, no gap yet; at most 2, no `until`:
    two (the count is taken after the loop from the last context priced)."""
    cost = Series(0.002, 0.0)
    for most, until, got, gaps, starts in (
            (5, 1005, (3, 1006, 1006.0, 2, 0.006), {2: 6}, [1000, 1002, 1004]),
            (5, 1002, (1, 1002, 1002.0, 2, 0.002), {}, [1000]),
            (2, INF, (2, 1004, 1004.0, 2, 0.004), {2: 3}, [1000, 1002])):
        seen: dict[int, int] = {}
        begun: list[int] = []
        assert time_stretch(cost, MS, 1000.0, 1000, 3, 10, most, until, begun, seen) == got
        assert seen == gaps and begun == starts
        seen.clear()
        assert time_stretch(cost, MS, 1000.0, 1000, 3, 10, most, until, None, seen) == got
        assert seen == gaps


def test_dispatches_shorter_than_a_step_last_one_step_each_by_hand():
    """Dispatches of 0.3 ms on 1 ms steps, 2 rows, from exact 9.5 (step 10): the
    first ends at 9.8, before its start, so it lasts one step (to 11, its exact end
    11: its rounded length 0 is no run's, there being no length before it); the
    second ends at 11.3, step 12; the third at 11.6, before its start (12), so at
    13 (exact 13). Lengths 1, 1, 1: the first two end 2 gaps of 1 step each (a
    row's), 4 in all; the last is in flight. `until` 12: two start before it; 11:
    one. At most 40: the slices (`_time_slices`) time none (the first ends before
    it starts), the loop all 40, ending at 50 (exact 49.3: the last one not held
    to a step), 39 dispatches ending 2 gaps of 1 each, 78."""
    cost = Series(0.0003, 0.0)
    for until, got, gaps, starts in (
            (INF, (3, 13, 13, 1, 0.0003 + 0.0003 + 0.0003), {1: 4}, [10, 11, 12]),
            (12, (2, 12, 11.3, 1, 0.0003 + 0.0003), {1: 2}, [10, 11]),
            (11, (1, 11, 11, 1, 0.0003), {}, [10])):
        seen: dict[int, int] = {}
        begun: list[int] = []
        assert time_stretch(cost, MS, 9.5, 10, 2, 10, 3, until, begun, seen) == got
        assert seen == gaps and begun == starts
        seen.clear()
        assert time_stretch(cost, MS, 9.5, 10, 2, 10, 3, until, None, seen) == got
        assert seen == gaps
    seen.clear()
    got = time_stretch(cost, MS, 9.5, 10, 2, 10, 40, INF, None, seen)
    assert got[:4] == (40, 50, 49.3, 1) and seen == {1: 78}
    assert (got, seen) == one_at_a_time(cost, MS, 9.5, 10, 2, 10, 40, INF)


def llama_on_h100():
    return CostModel(model_named("llama-3-8b"), gpu_named("h100-sxm"), Coefficients(), 1)


def test_running_adds_one_after_another():
    """`running` adds each value to the sum before it, as a loop would: 1e16 + 1 rounds
    to 1e16 (to even), less 1e16 is 0.0 (a compensated sum would give 1.0); and 0.1,
    0.2, 0.3 from 1.0 give (1.1 + 0.2) + 0.3."""
    assert running([1.0, -1e16], 1e16) == 0.0
    assert running([0.1, 0.2, 0.3], 1.0) == ((1.0 + 0.1) + 0.2) + 0.3 == reduce(
        add, [0.1, 0.2, 0.3], 1.0)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("adding", ["running", "reduce"])
def test_stretches_counted_in_runs_are_those_timed_one_at_a_time(seed, adding, monkeypatch):
    """Random stretches, under the real cost model on 1 us steps and stand-ins
    whose dispatches sit on or a hair off whole numbers of steps (at starts up to
    1e12 steps, where a unit in the last place is 1e-4 of a step), against the
    one-at-a-time loop: the same count, ends, exact end, busy seconds and gaps;
    with `running` as it is and as `reduce` (what it is from Python 3.12 on)."""
    if adding == "reduce":
        for module in (slice_runs, stretch_timing):
            monkeypatch.setattr(module, "running", partial(reduce, add))
    rng = random.Random(seed)
    llama = llama_on_h100()
    for _ in range(60):
        kind = rng.randrange(4)
        clock = US
        if kind == 0:
            cost = llama
        elif kind == 1:  # whole numbers of steps, growing by a whole step now and then
            cost, clock = Series(0.003, 0.001 / rng.choice((7, 16, 64))), MS
        elif kind == 2:  # a hair off whole numbers
            cost = Series(0.005 + rng.choice((1e-15, -1e-15, 1e-13)), rng.choice((0.0, 1e-17)))
            clock = MS
        else:  # slowly growing, many runs
            cost = Series(rng.uniform(0.001, 0.02), rng.uniform(0.0, 1e-7))
        rows = rng.randint(1, 6)
        contexts = rng.randint(rows, 20_000)
        done = rng.choice((rng.randint(1, 1000), rng.randint(10**9, 4 * 10**9),
                           rng.randint(10**11, 10**12)))
        exact = done - rng.random() * 0.999
        most = rng.randint(32, 900)
        until = rng.choice((INF, done + rng.randint(1, 3_000_000)))
        gaps: dict[int, int] = {}
        got = time_stretch(cost, clock, exact, done, rows, contexts, most, until, None, gaps)
        assert (got, gaps) == one_at_a_time(cost, clock, exact, done, rows, contexts, most,
                                            until)
