"""The dispatch ledger: what every dispatch adds to a run, written in one place.

A dispatch is started in one of three ways (engine/core.py): stepped, row by
row (`Engine._start`); counted, when every row is a steady decode the cohort
answers for (`Engine._start_counted`, fast/counted.py); or folded, a stretch of
identical decode dispatches applied at once (fast/folding.py). Whichever way, the
same three things follow from it, and `DispatchLedger` is the only code that
computes them:

- the run's dispatch statistics (`RunStats`: iterations, rows, tokens by
  kind, padding, outputs, busy seconds, empty iterations, the makespan);
- its timing: the cost model's seconds (`CostModel.dispatch_seconds`, or for
  a folded stretch `decode_series`, the same floats) turned into clock steps.
  A dispatch that starts at the step the previous one completed at starts
  from that one's exact end, so rounding to whole steps never adds up
  (records/clock.py); without a cost model a dispatch lasts one step;
- the inter-token gaps (ITL): a count per gap length, in clock steps.

Request statistics (latencies, statuses) are `RunStats.request_ended`'s, fed
as requests end.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable
from functools import reduce
from itertools import accumulate, chain, islice, repeat
from operator import add, lt, sub, truediv

from ..gpu.costmodel import CostModel
from ..records.clock import CEIL_SLACK, Clock
from .run_stats import RunStats

__all__ = ["DispatchLedger"]

# Folded stretches of at least this many dispatches are timed in slices (`_timed`).
SLICED = 32

INF = float("inf")


class DispatchLedger:
    """The statistics, timing and output gaps of one engine's dispatches."""

    __slots__ = ("stats", "cost", "clock", "exact_end", "end_step")

    def __init__(self, stats: RunStats, cost: CostModel | None, clock: Clock) -> None:
        self.stats = stats
        self.cost = cost
        self.clock = clock
        # The exact end of the last dispatch and the step it completed at.
        self.exact_end = 0.0
        self.end_step = -1

    # --- timing -----------------------------------------------------------------------

    def ended(self, step: int, exact: float) -> None:
        """A dispatch (or, under lockstep, every rank's step) ended at clock step
        `step`, exactly at `exact`: the next one starting at `step` starts there."""
        self.exact_end = exact
        self.end_step = step

    def start_of(self, now: int) -> float:
        """The exact time a dispatch starting at step `now` starts from."""
        return self.exact_end if self.end_step == now else now

    def timed(self, now: int, seconds: float) -> tuple[int, float]:
        """(completion step, exact end) of a dispatch of `seconds` starting at step
        `now`: it completes at the first step at or after its exact end, and at
        least one step later (a dispatch shorter than the rest of its first step
        then ends exactly there)."""
        # (`Clock.steps` and `Clock.end_step`, inlined: the same floats and roundings;
        # about 100,000 dispatches on the Azure trace are timed here.)
        exact = ((self.exact_end if self.end_step == now else now)
                 + seconds / self.clock.step_seconds)
        slack, rel = CEIL_SLACK
        done = math.ceil(exact - slack - exact * rel)
        if done <= now:
            done = now + 1
            if exact <= now:
                exact = done
        return done, exact

    # --- dispatches ---------------------------------------------------------------------

    def dispatch(self, now: int, rows: int, tokens: int, prompt: int, decode: int,
                 recompute: int, padding: int, chunks: list[tuple[int, int]],
                 contexts: int) -> tuple[int, float]:
        """Record a dispatch started at step `now`: `rows` rows besides `padding`
        padding rows, `tokens` tokens of which `prompt`, `decode` and `recompute`
        by kind; priced from its prefill `chunks` ((tokens, context before)
        pairs) and its `decode + padding` decode rows of summed context
        `contexts`. Returns (completion step, exact end)."""
        stats = self.stats
        stats.iterations += 1
        stats.rows += rows + padding
        stats.tokens += tokens
        stats.prompt_tokens += prompt
        stats.decode_tokens += decode
        stats.recompute_tokens += recompute
        stats.padding_rows += padding
        cost = self.cost
        if cost is None:
            return now + 1, now + 1  # without a cost model a dispatch is one step
        seconds = cost.dispatch_seconds(chunks, decode + padding, contexts)
        stats.busy_seconds += seconds
        return self.timed(now, seconds)

    def decodes(self, now: int, rows: int, contexts: int) -> tuple[int, float]:
        """`dispatch` of `rows` decode rows and nothing else, whose contexts sum to
        `contexts` (a dispatch of the decode cohort's members: fast/counted.py).
        Returns (completion step, exact end)."""
        stats = self.stats
        stats.iterations += 1
        stats.rows += rows
        stats.tokens += rows
        stats.decode_tokens += rows
        cost = self.cost
        if cost is None:
            return now + 1, now + 1  # without a cost model a dispatch is one step
        seconds = cost.decode_seconds(rows, contexts)  # (`dispatch_seconds` without chunks)
        stats.busy_seconds += seconds
        return self.timed(now, seconds)

    def empty(self) -> None:
        """The policy changed something but ran nothing: an empty iteration (E6b)."""
        self.stats.empty_iterations += 1

    def completed(self, now: int, exact: float, outputs: int, since: dict[int, int]) -> None:
        """A dispatch completed at step `now` (exactly at `exact`: `ended`) with
        `outputs` outputs; `since` counts them by the time of each one's previous
        output (the gaps end now)."""
        self.exact_end = exact
        self.end_step = now
        stats = self.stats
        stats.makespan = now
        stats.output_tokens += outputs
        if since:
            gaps = stats.itl
            for last, count in since.items():
                gap = now - last
                gaps[gap] = gaps.get(gap, 0) + count

    def gap(self, length: int, count: int) -> None:
        """`count` outputs came `length` steps after the previous output of theirs."""
        gaps = self.stats.itl
        gaps[length] = gaps.get(length, 0) + count

    def gaps(self, lengths: Iterable[int]) -> None:
        """One output gap of each of `lengths` steps."""
        gaps = self.stats.itl
        for length in lengths:
            gaps[length] = gaps.get(length, 0) + 1

    # --- folded stretches (fast/folding.py) --------------------------------------------

    def fold(self, exact: float, done: int, rows: int, contexts: int, most: int,
             until: float, starts: list[int] | None) -> tuple[int, int, float, int]:
        """Time and record the decode dispatches that follow one completing at step
        `done` (exact end `exact`), each of the same `rows` decode rows, whose
        contexts sum to `contexts` before the first and grow by `rows` a dispatch:
        at most `most` of them (at least one), each starting before `until` (which
        `done` is before; the starts are appended to `starts` when given).

        The statistics count every one of them as started. Completed are the
        dispatch in flight now, at `done` (its outputs; the gaps they end depend
        on when each of its rows last emitted, which the caller knows), and every
        folded one but the last, whose `rows` outputs each come one dispatch after
        the previous ones; the last stays in flight, and records its own outputs
        when it completes. Returns (dispatches, the last one's completion step,
        its exact end, its start step)."""
        if self.cost is None:  # every dispatch lasts one step
            folded = most if until - done >= most else math.ceil(until - done)
            if starts is not None:
                starts += range(done, done + folded)
            lengths = [1] * folded
            end = exact = done + folded
            busy = 0.0
        else:
            folded, end, exact, lengths, busy = self._timed(exact, done, rows, contexts,
                                                            most, until, starts)
        last = lengths[-1]
        # Output gaps of every dispatch but the last (the flight, still to complete),
        # by length, in the order the lengths first came. Speed: a short stretch
        # (under SLICED dispatches: about 90% of the 25,623 folds on the Azure trace
        # under continuous, 5.6 distinct lengths on average) adds its gaps one by
        # one; a `Counter` costs about 9 us to build, twice that loop.
        gaps = self.stats.itl
        if len(lengths) <= SLICED:
            get = gaps.get
            for length in islice(lengths, len(lengths) - 1):
                gaps[length] = get(length, 0) + rows
        else:
            counts = Counter(lengths)
            counts[last] -= 1
            for length, count in counts.items():
                if count:
                    gaps[length] = gaps.get(length, 0) + rows * count
        written = rows * folded
        stats = self.stats
        stats.iterations += folded
        stats.rows += written
        stats.tokens += written
        stats.decode_tokens += written
        stats.output_tokens += written
        stats.busy_seconds += busy
        return folded, end, exact, end - last

    def _timed(self, exact: float, done: int, rows: int, contexts: int, most: int,
               until: float, starts: list[int] | None
               ) -> tuple[int, int, float, list[int], float]:
        """The folded dispatches timed by the cost model (see `fold`): returns
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
        series = cost_series = self.cost.decode_series(rows, contexts)
        clock = self.clock
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
