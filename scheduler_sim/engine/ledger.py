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
  a folded stretch `decode_series`, the same floats, timed by
  stretch_timing.py) turned into clock steps.
  A dispatch that starts at the step the previous one completed at starts
  from that one's exact end, so rounding to whole steps never adds up
  (records/clock.py); without a cost model a dispatch lasts one step;
- the inter-token gaps (ITL): a count per gap length, in clock steps;
- with a cost model, the work of its dispatches (`RunStats.work`, a
  `gpu.utilisation.WorkCounts`: the integer counts FLOPs and HBM bytes
  follow from), a folded stretch's in closed form (`WorkCounts.add_decodes`,
  the same counts as one dispatch at a time); and, when a `WorkSeries` is
  attached (`work_series`: only when a report or a Perfetto file draws it),
  the busy time, FLOPs and bytes per time bucket (work_series.py).

Request statistics (latencies, statuses) are `RunStats.request_ended`'s, fed
as requests end.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

from ..gpu.costmodel import CostModel
from ..gpu.utilisation import DispatchWork
from ..records.clock import CEIL_SLACK, Clock
from .folded_ledger import FoldedStretches
from .run_stats import RunStats
from .work_series import WorkSeries

__all__ = ["DispatchLedger"]



class DispatchLedger(FoldedStretches):
    """The statistics, timing and output gaps of one engine's dispatches (a folded
    stretch's: `FoldedStretches`, folded_ledger.py)."""

    __slots__ = ("stats", "cost", "clock", "exact_end", "end_step", "work_series", "terms")

    def __init__(self, stats: RunStats, cost: CostModel | None, clock: Clock) -> None:
        self.stats = stats
        self.clock = clock
        self.priced_by(cost)
        # The exact end of the last dispatch and the step it completed at.
        self.exact_end = 0.0
        self.end_step = -1
        # The busy time, FLOPs and bytes over time, when somebody draws them.
        self.work_series: WorkSeries | None = None

    def priced_by(self, cost: CostModel | None) -> None:
        """Price the dispatches with `cost` (None: each lasts one step); the run's
        FLOPs and bytes are then `cost`'s model's on its GPUs (`RunStats.dispatch_work`;
        none for a stand-in without a model, as tests use)."""
        self.cost = cost
        # `cost.decode_terms(rows)` by rows, as a counted start asks them
        # (`FoldedStretches.decodes_folded`).
        self.terms: dict[int, tuple[float, float]] = {}
        self.stats.dispatch_work = (DispatchWork.of(cost) if getattr(cost, "model", None)
                                    is not None else None)

    def draw_work(self) -> WorkSeries:
        """Attach (before the run) and return a `WorkSeries` of the dispatches' busy
        time, FLOPs and bytes over time (a cost model's run only)."""
        if self.stats.dispatch_work is None:
            raise ValueError("a run without a cost model has no FLOPs to draw")
        self.work_series = WorkSeries(self.stats.dispatch_work, self.clock)
        return self.work_series

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
        decoding = decode + padding
        seconds = cost.dispatch_seconds(chunks, decoding, contexts)
        stats.busy_seconds += seconds
        work = stats.work
        if chunks:
            work.add(chunks, decoding, contexts)
        else:  # (`WorkCounts.add` of decodes only, inlined: most dispatches)
            read = contexts + decoding
            work.tokens += decoding
            work.sampled += decoding
            work.pairs += read
            work.kv_read += read
            by_tokens = work.by_tokens
            by_tokens[decoding] = by_tokens.get(decoding, 0) + 1
        if self.work_series is None:  # (as in `decodes`: a call fewer a dispatch; measured
            return self.timed(now, seconds)  # in benchmarks/README.md, "twenty-second steps", az22)
        return self._timed_and_drawn(now, seconds, chunks, decoding, contexts)

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
        # (`WorkCounts.add_decodes(1, rows, contexts)`, inlined as `dispatch` does:
        # about 36,000 counted starts on the Azure conversation trace.)
        work = stats.work
        read = contexts + rows
        work.tokens += rows
        work.sampled += rows
        work.pairs += read
        work.kv_read += read
        by_tokens = work.by_tokens
        by_tokens[rows] = by_tokens.get(rows, 0) + 1
        if self.work_series is None:  # (`_timed_and_drawn`'s test: one call fewer a start)
            return self.timed(now, seconds)
        return self._timed_and_drawn(now, seconds, (), rows, contexts)

    def _timed_and_drawn(self, now: int, seconds: float, chunks, rows: int,
                         contexts: int) -> tuple[int, float]:
        """`timed`, and the dispatch's work added to the work series when one is drawn."""
        if self.work_series is None:
            return self.timed(now, seconds)
        start = self.start_of(now)
        done, exact = self.timed(now, seconds)
        self.work_series.dispatch(start, exact, seconds, chunks, rows, contexts)
        return done, exact

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

    def completed_since(self, now: int, exact: float, outputs: int, since: int,
                        count: int) -> None:
        """`completed` where `count` of the `outputs` outputs came after a previous
        output at step `since` and the others were first outputs: a dispatch of
        the decode cohort's members (each one's previous output came when it
        started), with the newcomers' prompts beside them or not (fast/).

        Speed: `completed` without the dict `since` and its loop, for the about
        54,000 counted completions on the Azure conversation trace."""
        self.exact_end = exact
        self.end_step = now
        stats = self.stats
        stats.makespan = now
        stats.output_tokens += outputs
        gaps = stats.itl
        gap = now - since
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
