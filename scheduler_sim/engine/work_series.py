"""The work of a run's dispatches over time: busy seconds, FLOPs and HBM bytes per
time bucket, in memory that does not grow with the run, for the HTML report and
the Perfetto file (utilisation over time; the per-run figures are
`RunStats`', gpu/utilisation.py says how FLOPs and bytes are counted).

`WorkSeries` is fed by the dispatch ledger (ledger.py) when attached to it
(`DispatchLedger.draw_work`, before the run: only a run that draws it pays
for it). Time is cut into buckets of `width` clock steps from step 0: the
width starts at one step and doubles (each pair of buckets merged) whenever
a dispatch would end past `BUCKETS` buckets, so a run has at most `BUCKETS`
buckets however long it is. A dispatch's seconds, FLOPs and bytes are
spread over the buckets its exact time (from its exact start to its exact
end, in clock steps) overlaps, in proportion to the overlap; a folded stretch is spread dispatch by dispatch (its
dispatches' FLOPs and bytes from the closed form of their growing
contexts), which costs a few operations per dispatch, like the event
records the report and the Perfetto file read anyway.

`points` gives per bucket its start and end in seconds, the busy share (busy
seconds over the bucket's length), and MFU and MBU over the bucket's length:
the utilisation of wall-clock time, which is the busy share times the
utilisation over busy time. The buckets' sums equal the run's totals within
float rounding; the exact per-run figures are the summary's. `pooled` makes
one series of several replicas' (a fleet), against the peaks of all their
GPUs.
"""
from __future__ import annotations

import math
from itertools import accumulate
from typing import Any

__all__ = ["WorkSeries", "BUCKETS"]

BUCKETS = 2048  # time buckets a series holds at most (a chart is under 2,000 pixels wide)


class WorkSeries:
    """Busy seconds, FLOPs and bytes per time bucket (see the module)."""

    def __init__(self, work: Any, clock: Any, engines: int = 1) -> None:
        self.work = work      # a gpu.utilisation.DispatchWork: the formulas and the peaks
        self.clock = clock
        self.engines = engines  # engines (of tp GPUs each) whose peaks the buckets are against
        self.width = 1        # clock steps per bucket, a power of two
        self.busy: list[float] = []
        self.flops: list[float] = []
        self.bytes: list[float] = []
        self.end = 0.0        # the latest exact end seen, in clock steps

    # --- feeding ---------------------------------------------------------------------

    def _room(self, end: float) -> None:
        """Widen the buckets until time `end` (in clock steps) falls in one of the
        first `BUCKETS`, and have buckets up to it."""
        last = max(math.ceil(end) - 1, 0)
        while last // self.width >= BUCKETS:
            for column in (self.busy, self.flops, self.bytes):
                merged = [a + b for a, b in zip(column[0::2], column[1::2])]
                if len(column) % 2:
                    merged.append(column[-1])
                column[:] = merged
            self.width *= 2
        need = last // self.width + 1
        if need > len(self.busy):
            more = need - len(self.busy)
            self.busy += [0.0] * more
            self.flops += [0.0] * more
            self.bytes += [0.0] * more
        if end > self.end:
            self.end = end

    def _spread(self, start: float, end: float, seconds: float, flops: float,
                bytes_: float) -> None:
        width = self.width
        first = int(start // width)
        last = max(math.ceil(end / width) - 1, first)
        if first == last:
            self.busy[first] += seconds
            self.flops[first] += flops
            self.bytes[first] += bytes_
            return
        length = end - start
        for i in range(first, last + 1):
            share = (min(end, (i + 1) * width) - max(start, i * width)) / length
            self.busy[i] += seconds * share
            self.flops[i] += flops * share
            self.bytes[i] += bytes_ * share

    def dispatch(self, start: float, end: float, seconds: float, chunks, rows: int,
                 contexts: int) -> None:
        """A dispatch from time `start` to `end` (exact, in clock steps), of `seconds`,
        whose shape is (`chunks`, `rows`, `contexts`) as the cost model priced it."""
        flops, bytes_ = self.work.dispatch(chunks, rows, contexts)
        self._room(end)
        self._spread(start, end, seconds, flops, bytes_)

    def decodes(self, start: float, seconds: list[float], rows: int, contexts: int) -> None:
        """The dispatches of a folded stretch, back to back from time `start` (exact,
        in clock steps), lasting `seconds` each, each of `rows` decodes whose
        contexts sum to `contexts` in the first and grow by `rows` a dispatch."""
        if not seconds:
            return
        step = self.clock.step_seconds
        ends = list(accumulate([s / step for s in seconds], initial=start))
        self._room(ends[-1])
        flops0, bytes0 = self.work.dispatch((), rows, contexts)
        flops1, bytes1 = self.work.dispatch((), rows, contexts + rows)
        dflops, dbytes = flops1 - flops0, bytes1 - bytes0  # what each dispatch adds
        spread = self._spread
        for k, length in enumerate(seconds):
            spread(ends[k], ends[k + 1], length, flops0 + dflops * k, bytes0 + dbytes * k)

    # --- reading ---------------------------------------------------------------------

    def points(self, end: int | None = None) -> list[tuple[float, float, float, float, float]]:
        """Per bucket up to step `end` (default: the last completion): (start, end)
        in seconds, the busy share, MFU and MBU over the bucket's length (fractions;
        see the module)."""
        end = self.end if end is None else end
        step = self.clock.step_seconds
        peak = self.work.peak_flops * self.engines
        bandwidth = self.work.bandwidth * self.engines
        out = []
        width = self.width
        for i, (busy, flops, bytes_) in enumerate(zip(self.busy, self.flops, self.bytes)):
            lo = i * width
            hi = min((i + 1) * width, max(math.ceil(end), lo + 1))
            seconds = (hi - lo) * step
            gpus = seconds * self.engines
            out.append((lo * step, hi * step, busy / gpus, flops / (seconds * peak),
                        bytes_ / (seconds * bandwidth)))
        return out

    @classmethod
    def pooled(cls, parts: list["WorkSeries"]) -> "WorkSeries":
        """One series of several engines' (a fleet's replicas, alike), at the widest
        of their widths, against the peaks of all of them."""
        out = cls(parts[0].work, parts[0].clock, sum(p.engines for p in parts))
        out.width = width = max(p.width for p in parts)
        for part in parts:
            factor = width // part.width
            out._room(part.end)
            for i, (busy, flops, bytes_) in enumerate(zip(part.busy, part.flops, part.bytes)):
                j = i // factor
                out.busy[j] += busy
                out.flops[j] += flops
                out.bytes[j] += bytes_
        return out
