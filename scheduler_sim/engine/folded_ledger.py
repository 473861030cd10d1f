"""The dispatch ledger's folded stretches: what a run of identical decode dispatches adds.

`FoldedStretches` is the part of `DispatchLedger` (ledger.py) that records a
folded stretch (fast/folding.py): its dispatches timed by the cost model one
after another (stretch_timing.py), their statistics, work and output gaps at
once (`fold`), and a counted start with the stretch folded after it in one
call (`decodes_folded`, fast/counted_fold.py). The same numbers as the
dispatches recorded one by one (`DispatchLedger.decodes`): see ledger.py.
"""
from __future__ import annotations

import math
from itertools import islice

from .stretch_timing import time_stretch

__all__ = ["FoldedStretches", "TERMS_KEPT"]

# The most row counts whose decode terms a ledger keeps (as the cost model keeps
# its decode bases: `CostModel._decode_base`).
TERMS_KEPT = 4096


class FoldedStretches:
    """`DispatchLedger`'s folded stretches (mixed into it: its `stats`, `cost`,
    `clock`, `work_series`, `decodes` and `timed`)."""

    __slots__ = ()

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
            if folded > 1:
                gaps = self.stats.itl
                gaps[1] = gaps.get(1, 0) + rows * (folded - 1)
            last = 1
            end = exact = done + folded
            busy = 0.0
        else:
            start = exact
            # (The folded dispatches' output gaps, but the last one's, go to the
            # run's ITL counts as they are timed.)
            folded, end, exact, last, busy = time_stretch(
                self.cost, self.clock, exact, done, rows, contexts, most, until, starts,
                self.stats.itl)
            self.stats.work.add_decodes(folded, rows, contexts)
            if self.work_series is not None:
                self.work_series.decodes(
                    start, list(islice(self.cost.decode_series(rows, contexts), folded)),
                    rows, contexts)
        written = rows * folded
        stats = self.stats
        stats.iterations += folded
        stats.rows += written
        stats.tokens += written
        stats.decode_tokens += written
        stats.output_tokens += written
        stats.busy_seconds += busy
        return folded, end, exact, end - last

    def decodes_folded(self, now: int, rows: int, contexts: int, most: int, until: float,
                       after: int, starts: list[int] | None = None
                       ) -> tuple[int, float, int, int, float, int]:
        """`decodes(now, rows, contexts)`, then, if `most` > 0 and the time left to
        `until` is at least `after` times that dispatch's length, `fold` of at most
        `most` dispatches after it (contexts + rows before the first) and the gaps
        its completion ends (`rows`, one dispatch long): a counted start and the
        stretch folded after it (fast/counted_fold.py). Returns (completion step,
        exact end) of that dispatch, then the fold's (dispatches, 0 if none, the
        last one's completion step, exact end and start step); the folded
        dispatches' starts are appended to `starts` when given (`fold`'s).

        Speed: one call where the start and the fold made about ten (their
        pricing, timing, work counts and gap each); see benchmarks/README.md,
        "thirteenth steps ... az9"."""
        cost = self.cost
        if cost is None or self.work_series is not None:
            done, exact = self.decodes(now, rows, contexts)
            if most <= 0 or until - done < after * (done - now):
                return done, exact, 0, done, exact, now
            folded, end, last_exact, start = self.fold(exact, done, rows, contexts + rows,
                                                       most, until, starts)
        else:
            # `decodes`, its seconds from the terms the fold prices with (the same
            # float as `decode_seconds`), its work counted with the fold's below.
            stats = self.stats
            # (The terms kept by rows: a dict look-up where a call was, for the
            # 36,007 counted starts of the Azure conversation trace;
            # benchmarks/README.md, "fifteenth steps ... az11".)
            terms = self.terms.get(rows)
            if terms is None:
                terms = self._terms_of(rows)
            seconds = terms[0] + terms[1] * (contexts + rows)
            stats.busy_seconds += seconds
            done, exact = self.timed(now, seconds)
            folded = 0
            if most > 0 and until - done >= after * (done - now):
                folded, end, last_exact, last, busy = time_stretch(
                    cost, self.clock, exact, done, rows, contexts + rows, most, until, starts,
                    stats.itl, terms)
                stats.busy_seconds += busy
                start = end - last
            # (`WorkCounts.add_decodes` of this dispatch and the folded ones after it
            # at once: their closed forms add up to it.)
            stats.work.add_decodes(folded + 1, rows, contexts)
            written = rows * (folded + 1)
            stats.iterations += folded + 1
            stats.rows += written
            stats.tokens += written
            stats.decode_tokens += written
            if not folded:
                return done, exact, 0, done, exact, now
            stats.output_tokens += rows * folded
        gaps = self.stats.itl  # (`gap`: this dispatch's outputs, at its completion)
        gaps[done - now] = gaps.get(done - now, 0) + rows
        return done, exact, folded, end, last_exact, start

    def _terms_of(self, rows: int) -> tuple[float, float]:
        """`cost.decode_terms(rows)`, kept in `terms` (for at most TERMS_KEPT row
        counts: a decode batch has at most `max_rows` rows)."""
        terms = self.cost.decode_terms(rows)
        if len(self.terms) < TERMS_KEPT:
            self.terms[rows] = terms
        return terms
