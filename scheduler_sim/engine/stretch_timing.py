"""Timing a folded stretch: the completion step and exact end of each of a run of
decode dispatches the cost model prices one after another (`DispatchLedger.fold`,
ledger.py, records what they add to the run; this module only times them).

Each dispatch starts where the previous one ended exactly and completes at the
first clock step at or after its own exact end (at least one step later), with
exactly the floats and roundings of timing them one at a time
(`Clock.end_step`): a long stretch is timed a slice at a time in C, a short one
in a plain loop.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from functools import reduce
from itertools import accumulate, chain, islice, repeat
from operator import add, lt, sub, truediv

from ..gpu.costmodel import CostModel
from ..records.clock import CEIL_SLACK, Clock

__all__ = ["time_stretch", "SLICED"]

# Folded stretches of at least this many dispatches are timed in slices.
SLICED = 32

INF = float("inf")


def time_stretch(cost: CostModel, clock: Clock, exact: float, done: int, rows: int,
                 contexts: int, most: int, until: float, starts: list[int] | None
                 ) -> tuple[int, int, float, list[int], float]:
    """The folded dispatches timed by the cost model (`DispatchLedger.fold`): returns
    (dispatches, the last one's completion step, its exact end, every one's
    length in steps, their busy seconds).

    Speed: the dispatches are timed a slice at a time in C (`map`,
    `accumulate`), with exactly the floats and roundings of one dispatch at a
    time (`Clock.end_step`). A fleet's replicas run small batches, so the
    Mooncake trace on 64 replicas folds 4.1 million dispatches (one engine:
    170,000), and this loop, one Python iteration each, was a quarter of
    that replay's profile. A dispatch shorter than the rest of its first step
    (its exact end at or before its start: a coarse clock) is timed one at a
    time from there, as before."""
    series = cost_series = cost.decode_series(rows, contexts)
    step_seconds = clock.step_seconds
    folded = 0
    busy = 0.0
    lengths: list[int] = []
    size = 32  # dispatches timed at once, then as many as may start before `until`
    # A short stretch (a lone engine's, ended by its next finish: a dozen
    # dispatches on the Azure trace) is timed one at a time below: slicing
    # costs more than it saves there (Ir +2.4% on the first 2,000 Azure
    # requests under continuous, callgrind).
    while folded < most and done < until and most >= SLICED:
        seconds = list(islice(cost_series, min(size, most - folded)))
        exacts = list(accumulate(map(truediv, seconds, repeat(step_seconds)),
                                 initial=exact))
        del exacts[0]
        ends = clock.end_steps(exacts)
        begins = [done]
        begins += ends[:-1]
        if not all(map(lt, begins, ends)):  # one ends at or before its start
            series = chain(seconds, cost_series)
            break
        # Those that start before `until`: all, or up to the first starting after.
        n = bisect_left(ends, until) + 1
        if n < len(ends):
            del seconds[n:], ends[n:], begins[n:]
        busy = reduce(add, seconds, busy)
        if starts is not None:
            starts += begins
        lengths += map(sub, ends, begins)
        folded += len(ends)
        exact = exacts[len(ends) - 1]
        done = ends[-1]
        # Dispatches only grow longer (their contexts do), give or take a step.
        shortest = max(done - begins[-1] - 1, 1)
        size = int((until - done) // shortest) + 1 if until < INF else most
    # From a dispatch that would end before it starts (if any), one at a time:
    # `timed`, with `Clock.steps` and `Clock.end_step` inlined (the same floats
    # and roundings). Speed: this loop times most of a lone engine's folded
    # dispatches (about 250,000 on the Azure conversation trace, against 61,000
    # timed by `timed`); the two calls a dispatch were a fifth of the stretch's
    # timing (see benchmarks/README.md, "Issue 26, fourth steps").
    ceil = math.ceil
    slack, rel = CEIL_SLACK
    add_length = lengths.append
    add_start = starts.append if starts is not None else None
    while folded < most and done < until:
        if add_start is not None:
            add_start(done)
        seconds = next(series)
        busy += seconds
        exact += seconds / step_seconds
        end = ceil(exact - slack - exact * rel)
        if end <= done:  # at least one step ...
            end = done + 1
            if exact <= done:
                exact = end  # ... and shorter than the rest of its first step: one
        add_length(end - done)
        folded += 1
        done = end
    return folded, done, exact, lengths, busy
