"""Per-run statistics: what the run's summary needs, gathered request by request (§12).

`RunStats` is fed by the engine (through the dispatch ledger, ledger.py) as
requests end and dispatches run; it keeps only the numbers the statistics
need: each latency's values as a count per distinct value (latency_sample.py:
exact, and bounded by the distinct values, not the requests, as long as
they repeat), and a count per distinct gap for the inter-token latency
(ITL), and with a cost model the integer counts of the dispatches' work
(`work`, gpu/utilisation.py) from which the run's FLOPs, HBM bytes, MFU and
MBU over its busy time follow (`utilisation`). `summary` gives the run's record in
the run's unit (summary.py names its fields and the latency metrics). A
fleet's statistics are its replicas' combined (`combined`).
"""
from __future__ import annotations

from operator import mul
from typing import Any

from ..gpu.utilisation import DispatchWork, Utilisation, WorkCounts
from ..records.clock import Clock
from ..records.states import RequestStatus
from ..requests.request import Request
from .latency_sample import LatencySample, counted_ranks
from .summary import (METRICS, PERCENTILES, RUN_FIELDS, STATUS_FIELDS, latencies,
                      meets_slo)

__all__ = ["RunStats"]


class RunStats:
    """Accumulates what the per-run summary needs, request by request."""

    def __init__(self, clock: Clock | None = None, slo: tuple | None = None) -> None:
        self.clock = clock or Clock()
        self.slo = slo
        # Each metric's values, counted (whole clock steps, and TPOT's fractions): read
        # through `samples`, which counts the values still pending first.
        self._samples: dict[str, LatencySample] = {m: LatencySample(floats=m == "tpot")
                                                   for m in METRICS if m != "itl"}
        # Without an SLO, the values of the requests ended since the last count, a list
        # per metric of `_PENDING` (client wait, queue delay, TTFT, E2EL, TPOT), counted
        # into the samples `PENDING_AT` at a time (`_count_pending`).
        self._pending: tuple[list, ...] = tuple([] for _ in _PENDING)
        self.itl: dict[int, int] = {}  # gap in steps -> how many output gaps lasted it
        self.status_counts = {label: 0 for label in STATUS_FIELDS}
        self.requests = 0
        self.iterations = 0
        self.empty_iterations = 0
        self.makespan = 0
        self.rows = 0
        self.tokens = 0
        self.prompt_tokens = 0
        self.decode_tokens = 0
        self.recompute_tokens = 0
        self.padding_rows = 0
        self.output_tokens = 0
        self.useful_rows = 0
        self.replay_rows = 0
        self.preemptions = 0
        self.cached_tokens = 0
        self.busy_seconds = 0.0  # modelled GPU time, with a cost model
        # What the dispatches computed (with a cost model), and the formulas and peaks
        # of its model and GPUs (the dispatch ledger sets them).
        self.work = WorkCounts()
        self.dispatch_work: DispatchWork | None = None
        self._pooled: Utilisation | None = None  # a fleet's: its replicas' together
        self.completed_input = 0   # prompt tokens of completed requests
        self.completed_output = 0  # output tokens of completed requests
        self.slo_met = 0
        self.deadlines = 0
        self.deadline_misses = 0

    @classmethod
    def combined(cls, parts: list["RunStats"]) -> "RunStats":
        """The statistics of several engines' runs as one (a fleet): counts add up,
        samples are pooled, the makespan is the latest."""
        out = cls(parts[0].clock, parts[0].slo)
        for part in parts:
            for metric, sample in part.samples.items():
                out.samples[metric].update(sample)
            for gap, count in part.itl.items():
                out.itl[gap] = out.itl.get(gap, 0) + count
            for label, count in part.status_counts.items():
                out.status_counts[label] += count
            for name in _SUMMED:
                setattr(out, name, getattr(out, name) + getattr(part, name))
            out.makespan = max(out.makespan, part.makespan)
            out.work.update(part.work)
            used = part.utilisation()
            if used is not None:
                if out._pooled is None:
                    out._pooled = Utilisation()
                out._pooled.add(used)
        return out

    @property
    def samples(self) -> dict[str, LatencySample]:
        """Each latency's values so far (those of every request ended), by metric."""
        if self._pending[0]:
            self._count_pending()
        return self._samples

    @samples.setter
    def samples(self, samples: dict[str, LatencySample]) -> None:
        """These samples instead of every value so far (a disaggregated fleet's
        statistics take its requests' ends from one `RunStats`, disagg_result.py)."""
        for values in self._pending:
            values.clear()
        self._samples = samples

    def _count_pending(self) -> None:
        """Count the values pending into their samples, in the order the requests ended
        (so each sample's counts and array are those of counting them one by one)."""
        samples = self._samples
        for metric, values in zip(_PENDING, self._pending):
            samples[metric].add_all(values)
            values.clear()

    def utilisation(self) -> Utilisation | None:
        """The run's FLOPs and bytes against the peaks of its busy time (None without
        a cost model); a fleet's adds its replicas'."""
        if self._pooled is not None:
            return self._pooled
        if self.dispatch_work is None:
            return None
        return Utilisation.of(self.dispatch_work, self.work, self.busy_seconds)

    def request_ended(self, req: Request) -> None:
        """Fold one request's numbers in, once, when it reaches a terminal state.

        Every request pays this once, so the latencies are computed here, as
        `summary.latencies` defines them, and kept for counting (`_pending`),
        without the dict of `latencies` or a call per metric: with an SLO, whose
        check reads that dict, `latencies` is made and counted as before.
        (Callgrind, 20,000 generated requests, the whole replay: see
        benchmarks/README.md, "Issue 26, fifth steps: the per-request floor".)"""
        status = req.status
        self.status_counts[_LABELS[status]] += 1
        self.useful_rows += req.useful_rows
        self.replay_rows += req.replay_rows
        self.preemptions += req.preemptions
        self.cached_tokens += req.cached_tokens
        completed = status is _STOPPED or status is _CAPPED
        if self.slo is not None:
            lat = latencies(req, self.clock.request_overhead)
            for metric, sample in self._samples.items():
                value = lat[metric]
                if value is not None:
                    sample.add(value)
            if completed and meets_slo(lat, self.slo, self.clock):
                self.slo_met += 1
        else:
            sent = req.sent
            if sent is not None:
                # Each value appended to its metric's list (`list.append`, which the
                # interpreter runs without a call), counted `PENDING_AT` at a time in C
                # (`_count_pending`), instead of a Python call counting each: 3,200
                # instructions a request fewer on 20,000 generated requests (callgrind;
                # benchmarks/README.md, "fourteenth steps: ... per-request cost
                # outside the engine").
                waits, delays, ttfts, e2els, tpots = self._pending
                waits.append(sent - req.arrival)
                if req.admitted_at is not None:
                    delays.append(req.admitted_at - sent)
                first = req.first_token_at
                if first is not None:
                    overhead = self.clock.request_overhead
                    ttfts.append(first - sent + overhead)
                    if completed:
                        finished = req.finished_at
                        e2els.append(finished - sent + overhead)
                        if req.output_tokens > 1:
                            tpots.append((finished - first) / (req.output_tokens - 1))
                elif completed:  # (no first token: E2EL alone, as `latencies` gives)
                    e2els.append(req.finished_at - sent + self.clock.request_overhead)
                if len(waits) >= PENDING_AT:  # (every other list has at most as many)
                    self._count_pending()
        if completed:
            self.completed_input += req.prompt_tokens
            self.completed_output += req.output_tokens
        if req.deadline is not None:
            self.deadlines += 1
            if not completed or req.finished_at > req.deadline:
                self.deadline_misses += 1

    def summary(self, peak_reserved: int, peak_allocated: int,
                first_arrival: int = 0) -> dict[str, Any]:
        """The per-run summary of §12, fields in `RUN_FIELDS` order, times in the
        run's unit. The duration runs from `first_arrival` to the last completion."""
        clock = self.clock
        report = clock.report
        completed = (self.status_counts["finished_stopped"]
                     + self.status_counts["finished_length_capped"])
        span = self.makespan - first_arrival if self.iterations else 0
        out: dict[str, Any] = {
            "requests": self.requests,
            "iterations": self.iterations,
            "empty_iterations": self.empty_iterations,
            "makespan": report(self.makespan),
            "duration": report(span) if span > 0 else None,
            "completed": completed,
        }
        out.update(self.status_counts)
        out.update({
            "request_throughput": clock.rate(completed, span),
            "input_throughput": clock.rate(self.completed_input, span),
            "output_throughput": clock.rate(self.completed_output, span),
            "total_token_throughput": clock.rate(self.completed_input
                                                 + self.completed_output, span),
        })
        for metric in METRICS:
            if metric == "itl":
                out.update(self._itl())
                continue
            mean, ranked, top = self.samples[metric].stats(PERCENTILES)
            out[f"{metric}_mean"] = report(mean) if mean is not None else None
            for p, value in zip(PERCENTILES, ranked):
                out[f"{metric}_p{p}"] = report(value)
            out[f"{metric}_max"] = report(top) if top is not None else None
        slo = self.slo is not None
        iters = self.iterations
        out.update({
            "slo_met": self.slo_met if slo else None,
            "slo_attainment": (round(self.slo_met / self.requests, 4)
                               if slo and self.requests else None),
            "request_goodput": clock.rate(self.slo_met, span) if slo else None,
            "deadlines": self.deadlines,
            "deadline_misses": self.deadline_misses,
            "prompt_tokens": self.prompt_tokens,
            "decode_tokens": self.decode_tokens,
            "recompute_tokens": self.recompute_tokens,
            "padding_rows": self.padding_rows,
            "output_tokens": self.output_tokens,
            "useful_rows": self.useful_rows,
            "replay_rows": self.replay_rows,
            "cached_tokens": self.cached_tokens,
            "preemptions": self.preemptions,
            "peak_reserved": peak_reserved,
            "peak_allocated": peak_allocated,
            "mean_batch_rows": _round(self.rows / iters) if iters else None,
            "mean_batch_tokens": _round(self.tokens / iters) if iters else None,
            "busy_seconds": round(self.busy_seconds, 6) if self.busy_seconds else None,
        })
        used = self.utilisation()
        mfu = used.mfu if used is not None else None
        mbu = used.mbu if used is not None else None
        out.update({
            "model_flops": float(used.flops) if mfu is not None else None,
            "hbm_bytes": float(used.bytes) if mbu is not None else None,
            "model_flops_utilisation": round(mfu, 6) if mfu is not None else None,
            "hbm_bandwidth_utilisation": round(mbu, 6) if mbu is not None else None,
        })
        assert tuple(out) == RUN_FIELDS, "summary fields drifted from RUN_FIELDS"
        return out

    def _itl(self) -> dict[str, Any]:
        report = self.clock.report
        # (The gaps' lengths and counts summed in C, the percentiles found by
        # bisection: `counted_ranks`.)
        pairs = sorted(self.itl.items())
        lengths, counts = zip(*pairs) if pairs else ((), ())
        total = sum(counts)
        out = {"itl_mean": report(sum(map(mul, lengths, counts)) / total) if total else None}
        for p, value in zip(PERCENTILES, counted_ranks(lengths, counts, PERCENTILES)):
            out[f"itl_p{p}"] = report(value)
        out["itl_max"] = report(lengths[-1]) if total else None
        return out


# The counters of RunStats that add up over the engines of a fleet.
_SUMMED = ("requests", "iterations", "empty_iterations", "rows", "tokens", "prompt_tokens",
           "decode_tokens", "recompute_tokens", "padding_rows", "output_tokens", "useful_rows",
           "replay_rows", "preemptions", "cached_tokens", "busy_seconds", "completed_input",
           "completed_output", "slo_met", "deadlines", "deadline_misses")


_STOPPED = RequestStatus.FINISHED_STOPPED
_CAPPED = RequestStatus.FINISHED_LENGTH_CAPPED
_LABELS = {status: status.label for status in RequestStatus}  # (`label` is a property)


# The metrics whose values `request_ended` keeps pending, in `_pending`'s order, and
# how many requests' values are kept before they are counted (at most this many
# values a metric: about 40 KB in all).
_PENDING = ("client_wait", "queue_delay", "ttft", "e2el", "tpot")
PENDING_AT = 256


def _round(value: float) -> float | int:
    value = round(value, 4)
    return int(value) if value.is_integer() else value
