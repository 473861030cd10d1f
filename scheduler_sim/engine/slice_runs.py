"""A slice of a folded stretch timed without event records: its dispatches' lengths (in clock
steps) counted a run at a time (`count_runs`), or each one's in C passes (`time_each`), for
stretch_timing.py's slices.

Lengths counted a run at a time: a dispatch of x steps (its seconds over the step) that starts
where the previous ended exactly lasts ceil(end) - ceil(previous end) steps, which is floor(D)
or floor(D) + 1 for D the difference of the two rounded ends; D is x within a few units in the
last place of the ends (the slack). The dispatches only grow longer, so those whose x lies
inside one interval (a + slack, a + 1 - slack) run on one after another, and each lasts a or
a + 1 steps: how many lasted a + 1 is the run's steps beyond a each, which takes only two
completion steps, the run's last one and the one before it. A dispatch whose x lies within the
slack of a whole number is timed exactly, by itself. The exact end of a run's last dispatch is
the one before the run's plus the run's steps added one after another (`running`): the same
float as accumulating every end, which only the last run does (for its last two ends and,
cut by `until`, the one that starts last).
"""
from __future__ import annotations

import math
import sys
from bisect import bisect_left
from functools import partial, reduce
from itertools import accumulate, islice
from operator import add, le, lt, sub

from ..records.clock import CEIL_SLACK, Clock

__all__ = ["RUN_COST", "count_runs", "running", "time_each"]

# A run of lengths (`count_runs`) costs about as much as timing this many dispatches in C passes.
RUN_COST = 4

# `running(values, start)`: start + values[0] + values[1] + ..., each added to the sum before
# it (the float `reduce(add, values, start)` gives). Speed: CPython before 3.12 adds floats
# in `sum` so, in a C double, without a float object each (3.12 compensates sum's rounding:
# `reduce` there). A run's end and a slice's busy seconds so: 0.25x the instructions of
# `accumulate` and `reduce` over a slice of 258 ("thirty-second steps", st36).
running = sum if sys.version_info < (3, 12) else partial(reduce, add)


def time_each(clock: Clock, exacts: list[float], done: int, until: float,
              starts: list[int] | None, lengths: list[int]) -> tuple[int, int, int] | None:
    """A slice's dispatches (their exact ends `exacts`, the first starting at step
    `done`) timed one by one in C passes (`Clock.end_steps`): the lengths of those
    that start before `until` are appended to `lengths` (and their starts to
    `starts`); returns (how many, the last one's completion step, its length),
    or None, appending nothing, if one ends at or before its start."""
    ends = clock.end_steps(exacts)
    begins = [done]
    begins += ends[:-1]
    if not all(map(lt, begins, ends)):
        return None
    # Those that start before `until`: all, or up to the first starting after.
    n = bisect_left(ends, until) + 1
    if n < len(ends):
        del ends[n:], begins[n:]
    if starts is not None:
        starts += begins
    lengths += map(sub, ends, begins)
    return len(ends), ends[-1], ends[-1] - begins[-1]


def count_runs(steps: list[float], exact: float, done: int, until: float,
               counts: dict[int, int], rising: bool = False, rows: int = 1
               ) -> tuple[int, int, int, float] | None:
    """`time_each` without event records, for a slice of dispatches of `steps` steps from
    exact end `exact` (step `done`), counting their lengths a run at a time (see the module
    docstring): `rows` added to `counts` for each dispatch that starts before `until` (no
    count of 0 added). Returns (how many, the last one's completion step, its length, its
    exact end); None, counting nothing, where that does not apply: steps that do not grow,
    or a dispatch that may last under one step (then `time_each` decides). `rising`: the
    steps are known not to shrink (not tested again)."""
    # About one run per whole step the lengths grow by: counted a run at a time
    # only when runs are long (speed: a run costs about four dispatches' worth
    # of C passes; a lone engine's larger batches grow a step every dispatch or
    # two, a fleet replica's single row one every twenty or so).
    n = len(steps)
    if (steps[-1] - steps[0] + 2) * RUN_COST > n:
        return None
    if not rising and not all(map(le, steps, islice(steps, 1, None))):
        return None
    # How far the difference of two successive rounded ends (ceil's argument below) lies
    # from the later dispatch's steps at most: the rounding of the accumulated end (half a
    # unit in the last place of the largest, at most `top`), of each end's slack subtracted
    # (one unit each), and the relative slack of a step (`CEIL_SLACK`); four times over.
    top = abs(exact) + n * max(abs(steps[0]), abs(steps[-1])) + 1.0
    abs_slack, rel = CEIL_SLACK  # (`Clock.end_step`'s rounding, inlined: a call each saved)
    slack = 4 * (3 * math.ulp(top) + steps[-1] * rel) + 1e-12
    e = exact + steps[0]
    previous = math.ceil(e - abs_slack - e * rel)  # the last completion step counted
    length = previous - done
    if steps[0] - slack < 1 or length <= 0:
        return None
    # Every dispatch now lasts at least one step: completion steps increase.
    get = counts.get
    counts[length] = get(length, 0) + rows
    floor, ceil = math.floor, math.ceil
    i = 1
    while i < n and previous < until:
        x = steps[i]
        a = floor(x - slack)
        if x + slack >= a + 1:  # near a whole number: this one by itself
            e += x
            end = ceil(e - abs_slack - e * rel)
            length = end - previous
            counts[length] = get(length, 0) + rows
            previous = end
            i += 1
            continue
        # The run i .. j - 1 of dispatches lasting a or a + 1 steps each.
        j = bisect_left(steps, a + 1 - slack, i, n)
        ended = running(steps[i:j], e)
        end = ceil(ended - abs_slack - ended * rel)
        m = j - i
        final = j == n or end >= until
        if final:  # the last run: each end (ends[k]: dispatch i - 1 + k)
            ends = list(accumulate(steps[i:j], initial=e))
            if end >= until:  # up to the first completing at or after `until` (none whose
                m = bisect_left(ends, until - 1, 1)  # exact end is before `until` - 1 does)
                while ceil(ends[m] - abs_slack - ends[m] * rel) < until:
                    m += 1
                ended = ends[m]
                end = ceil(ended - abs_slack - ended * rel)
            e = ends[m - 1]
            length = end - (ceil(e - abs_slack - e * rel) if m > 1 else previous)
        longer = end - previous - a * m
        if longer < m:
            counts[a] = get(a, 0) + rows * (m - longer)
        if longer:
            counts[a + 1] = get(a + 1, 0) + rows * longer
        if final:
            return i + m, end, length, ended
        e = ended
        previous = end
        i = j
    return i, previous, length, e
