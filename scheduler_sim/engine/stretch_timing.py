"""Timing a folded stretch: the completion step and exact end of each of a run of decode
dispatches the cost model prices one after another (`DispatchLedger.fold`, ledger.py,
records what they add to the run; this module only times them).

Each dispatch starts where the previous one ended exactly and completes at the first clock step
at or after its own exact end (at least one step later), with exactly the floats and roundings
of timing them one at a time (`Clock.end_step`): a long stretch whose lengths grow slowly enough
to be counted in runs (slice_runs.py), and whose starts nobody asks for (event records), is
timed a slice at a time in C, any other in a plain loop. What the ledger needs of the lengths
(in steps) is how many dispatches lasted each length (their output gaps), and the last one's.
"""
from __future__ import annotations

import math
from collections import Counter
from itertools import accumulate, repeat
from operator import add, mul, truediv

from ..gpu.costmodel import CostModel
from ..records.clock import CEIL_SLACK, Clock
from .context_prices import TOP as PRICED_TOP, priced
from .slice_runs import RUN_COST, count_runs, running, time_each

__all__ = ["time_stretch", "SLICED"]

# Folded stretches of at least this many dispatches may be timed in slices (when
# their lengths may be counted in runs and nobody asks for their starts).
SLICED = 32

INF = float("inf")


def time_stretch(cost: CostModel, clock: Clock, exact: float, done: int, rows: int,
                 contexts: int, most: int, until: float, starts: list[int] | None,
                 gaps: dict[int, int], terms: tuple[float, float] | None = None
                 ) -> tuple[int, int, float, int, float]:
    """The folded dispatches timed by the cost model (`DispatchLedger.fold`): returns (dispatches,
    the last one's completion step, its exact end, its length in steps, their busy seconds).
    Each dispatch but the last adds `rows` output gaps of its length to `gaps` (the run's, by
    length in steps). `terms`: `cost.decode_terms(rows)`, if the caller has them.

    Speed: a long stretch whose lengths may be counted in runs is timed a slice at a time in C
    (`_time_slices`), any other one dispatch at a time below."""
    step_seconds = clock.step_seconds
    base, kv = terms if terms is not None else cost.decode_terms(rows)
    # A short stretch (a dozen dispatches on the Azure trace) is timed one at a time below:
    # slicing costs more there (Ir +2.4% on its first 2,000 requests under continuous). Short is
    # fewer than SLICED allowed (`most`), or fewer that may start before `until` (the dispatches
    # only grow longer: of the 7,223 folds allowed SLICED or more on that trace, about 4,300 end
    # sooner). Only a stretch whose first slice may be counted in runs is sliced
    # (`_runs_may_count`: C passes cost more than the loop below).
    if most >= SLICED and starts is None and _runs_may_count(rows * kv / step_seconds) and (
            until == INF
            or (until - done) * step_seconds >= (SLICED - 1) * (base + kv * (contexts + rows))):
        folded, done, exact, last, busy = _time_slices(
            base, kv, step_seconds, clock, exact, done, rows, contexts, most, until, gaps)
    else:
        folded, busy, last = 0, 0.0, 0  # (the slices' state kept apart: fifteenth steps, az11)
    # From a dispatch that would end before it starts (if any), one at a time: `timed`, with
    # `Clock.steps` and `Clock.end_step` inlined (the same floats and roundings; two calls a
    # dispatch were a fifth of the stretch's timing: benchmarks/README.md, "fourth steps"). Each
    # one's seconds are priced inline, `base + kv * c` for c its rows' contexts and rows (the
    # floats of `decode_series`): cheaper than a series and a `next` a dispatch.
    get, ceil = gaps.get, math.ceil
    slack, rel = CEIL_SLACK
    add_start = starts.append if starts is not None else None
    # (The count timed here is taken from the last context priced, `c`, and `until` tested
    # after each dispatch: fewer operations; "eleventh steps", az7.)
    first = contexts + rows * (folded + 1)
    c = None
    if done < until:
        # The lengths go to `gaps` a run of equal ones at a time (`same` of `last` steps).
        # Speed: a length is an int past the cached ones (about 7,000 steps of 1 us), so a dict
        # update compares int objects; 41% of the loop's Azure dispatches last as long as the
        # one before: 827.9e6 -> 818.8e6 Ir on its first 6,000 requests' calls ("fifteenth
        # steps", az11).
        same = 0
        for c in range(first, contexts + rows * (most + 1), rows):
            if add_start is not None:
                add_start(done)
            seconds = base + kv * c
            busy += seconds
            exact += seconds / step_seconds
            end = ceil(exact - slack - exact * rel)
            if end <= done:  # at least one step ...
                end = done + 1
                if exact <= done:
                    exact = end  # ... and shorter than the rest of its first step: one
            if end - done == last:
                same += 1
            else:
                if same:
                    gaps[last] = get(last, 0) + rows * same
                last = end - done
                same = 1
            done = end
            if done >= until:
                break
        if c is not None:
            folded += (c - first) // rows + 1
            # The last dispatch is still in flight: its outputs end no gaps yet.
            if same > 1:
                gaps[last] = get(last, 0) + rows * (same - 1)
            return folded, done, exact, last, busy
    # The last dispatch (of a slice) is still in flight: its outputs end no gaps yet.
    # (A stretch timed to its end in its slices, as most are, comes here through the loop's
    # set-up with nothing to time: a return of its own after the slices, a copy of these
    # lines, saved 0.08% of the instructions of the first 2,000 Mooncake requests on 64
    # prefix-affinity replicas, within the layout's spread; not kept.)
    left = gaps[last] - rows
    if left:
        gaps[last] = left
    else:
        del gaps[last]
    return folded, done, exact, last, busy


def _time_slices(base: float, kv: float, step_seconds: float, clock: Clock, exact: float,
                 done: int, rows: int, contexts: int, most: int, until: float,
                 gaps: dict[int, int]) -> tuple[int, int, float, int, float]:
    """`time_stretch`'s long stretch, nobody asking for its starts: its dispatches
    timed a slice at a time in C, up to `most`, `until` or one that ends at or
    before its start (timed by `time_stretch`'s loop from there). Returns, and
    adds to `gaps`, what `time_stretch` does for the dispatches timed here (the
    last one's outputs included: `time_stretch` takes them out). `base`, `kv`:
    `cost.decode_terms(rows)`.

    Speed: a fleet's replicas run small batches (the Mooncake trace on 64 replicas
    folds 4.1 million dispatches); timed one by one in C passes this was about 20%
    of that replay; a slice's lengths are counted a run at a time (`count_runs`),
    its seconds (`decode_series`'s floats) priced over a `range` of contexts (an
    `islice` of the series was 28% of what 64 replicas add to one engine; one
    row's are sliced out of `context_prices`' tables: 36 -> 12 us a slice of 260,
    "twentieth steps", flt21), and with kv >= 0 they only grow (roundings are
    monotone: `rising`, no `all` test; benchmarks/README.md, "sixteenth steps").
    The first slice is as long as may start before `until` (the dispatches only
    grow: none lasts less than the first's steps, less one), so one slice mostly
    does (speed: a first slice of 32, then the rest, was two passes of the
    Python around the C ones; "thirty-second steps", st36)."""
    folded, busy = 0, 0.0
    lengths: list[int] = []  # lengths of the dispatches timed one by one (`time_each`)
    last = 0
    rising = kv >= 0
    if until == INF:
        size = most
    else:
        shortest = int((base + kv * (contexts + rows)) / step_seconds) - 1
        size = int((until - done) // (shortest if shortest > 1 else 1)) + 1
    while folded < most and done < until:
        k = min(size, most - folded)
        c = contexts + rows * (folded + 1)
        top = c + rows * k
        if rows == 1 and top <= PRICED_TOP and base > 0.0 < kv:  # one row: the prices' slice
            prices = priced(base, kv, step_seconds, top)
            seconds, steps = prices[0][c:top], prices[1][c:top]
        else:
            seconds = list(map(add, repeat(base), map(mul, repeat(kv), range(c, top, rows))))
            steps = list(map(truediv, seconds, repeat(step_seconds)))
        timed = count_runs(steps, exact, done, until, gaps, rising, rows)
        if timed is None:
            exacts = list(accumulate(steps, initial=exact))
            del exacts[0]
            timed = time_each(clock, exacts, done, until, None, lengths)
            if timed is None:  # one ends at or before its start: timed by the loop from it
                break
            n, end, last = timed
            ended = exacts[n - 1]
        else:
            n, end, last, ended = timed
        busy = running(seconds if n == k else seconds[:n], busy)
        folded += n
        exact = ended
        done = end
        # Dispatches only grow longer (their contexts do), give or take a step.
        shortest = max(last - 1, 1)
        size = int((until - done) // shortest) + 1 if until < INF else most
    if lengths:
        get = gaps.get
        for length, count in Counter(lengths).items():
            gaps[length] = get(length, 0) + rows * count
    return folded, done, exact, last, busy


def _runs_may_count(growth: float) -> bool:
    """Whether `count_runs` may count a slice of SLICED dispatches (the shortest
    stretch sliced; a slice is as long as may start before `until`, or `most`) whose
    lengths grow by `growth` steps a dispatch (`rows * kv` seconds over the
    step): its own test, `(steps[-1] - steps[0] + 2) * RUN_COST > len(steps)`,
    with the slice's growth taken as (SLICED - 1) * growth.

    Speed: otherwise the slice is timed by `time_each`'s C passes, which cost
    more than timing each dispatch in `time_stretch`'s loop: on the Azure
    conversation trace (rows of 9 grow by about 0.48 steps a dispatch) its
    27,747 stretches took 0.847 of the instructions without those slices (a
    harness replaying the trace's calls, callgrind: 1.512e9 against 1.786e9),
    and 60 stretches of 3,000 dispatches of 9 to 200 rows with no end about
    3,290 instructions a dispatch against 5,030 in slices
    (benchmarks/README.md, "fourteenth steps ... az10")."""
    return ((SLICED - 1) * growth + 2) * RUN_COST <= SLICED
