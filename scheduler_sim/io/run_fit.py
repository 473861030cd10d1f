"""Fitting the cost model's serving coefficients to real runs, by replaying them.

A measured run is a trace (its config names the model, GPU, tp and the
scheduler's settings) and the latencies a real server measured for its
requests: a JSONL file of `{"id": ..., "ttft": seconds, "e2e": seconds}`,
one object per request of the trace (`read_measured`).

What a kernel profile cannot tell is fitted here: `step_overhead`,
`row_overhead`, `request_overhead`, the per-layer floors `layer_floor` and
`decode_attention_floor` (a server runs its decode steps as CUDA graphs, a
kernel profile measures kernels one launch at a time) and, when some run
has tp > 1, `allreduce_latency`. A replay under the current coefficients records every
dispatch: when it ended, how many rows it ran, whether it decoded, and which
requests it gave a first or a last output. Each fitted coefficient changes every dispatch's
duration by a known amount (step: 1 per dispatch; row: per sampled row;
floors: 1 per layer, the decode floor when the dispatch decodes;
all-reduce: 2 per layer when tp > 1), so the requests are re-timed under
candidate coefficients in one pass, to first order (`Recording.latencies`):
a request's TTFT is the replayed one plus the change in every dispatch
that ran between its arrival and its first output (the one under way when
it arrived included), plus the request overhead; its end-to-end latency
likewise up to its last output. The loss over runs is the squared log
error of each run's mean TTFT, mean end-to-end latency, mean ITL ((e2e -
ttft) / (N - 1)) and p99 end-to-end latency; a bounded Nelder-Mead (gpu/fit.py) minimises it. To first
order the batches stay as replayed; faster steps make smaller batches
(and slower ones larger), which first order sees only in part, so the fit
replays again under what it found and fits once more (`rounds`, 3 by
default: a fixed-point iteration). Every round's coefficients are judged by
their replay (a recording under its own coefficients gives the replay's
latencies exactly), and the best of them is kept: on runs where the
iteration does not settle, a later round cannot make the fit worse.
"""
from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Sequence

from ..engine.core import Engine
from ..gpu.coefficients import Coefficients
from ..gpu.catalogue import cost_specs
from ..gpu.costmodel import CostModel
from ..gpu.fit import log_error, minimize
from ..records.errors import UsageError
from ..records.events import Arrival, Dispatch

__all__ = ["read_measured", "MeasuredRun", "Recording", "record", "run_statistics",
           "fit_runs", "SERVING_COEFFICIENTS", "MAX_MEASURED_BYTES"]

SERVING_COEFFICIENTS = ("step_overhead", "row_overhead", "request_overhead",
                        "allreduce_latency", "layer_floor", "decode_attention_floor")
MAX_MEASURED_BYTES = 256 * 2 ** 20
_BOX = {"step_overhead": (0.0, 0.05), "row_overhead": (0.0, 0.001),
        "request_overhead": (0.0, 0.5), "allreduce_latency": (0.0, 0.0005),
        "layer_floor": (0.0, 0.0002), "decode_attention_floor": (0.0, 0.0002)}


def read_measured(path: str, text: str) -> dict[str, tuple[float, float]]:
    """`{id: (ttft, e2e)}` from a measured-latency JSONL `text` read from `path`;
    UsageError listing every bad line (at most 50)."""
    if len(text) > MAX_MEASURED_BYTES:
        raise UsageError(f"{path}: a measured file is at most "
                         f"{MAX_MEASURED_BYTES // 2**20} MiB, got {len(text):,} characters")
    out: dict[str, tuple[float, float]] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            problems.append(f"{where}: not JSON: {exc}")
            continue
        if not isinstance(obj, dict):
            problems.append(f"{where}: a measured request is a JSON object, got "
                            f"{type(obj).__name__}")
            continue
        rid = obj.get("id")
        if not isinstance(rid, str) or not rid:
            problems.append(f"{where}: field 'id': must be a non-empty string, got {rid!r}")
            continue
        values = []
        for key in ("ttft", "e2e"):
            value = obj.get(key)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or not 0 < value <= 1e6):
                problems.append(f"{where}: field {key!r}: must be seconds in (0, 1e6], "
                                f"got {value!r}")
            values.append(value)
        if len(values) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                    and math.isfinite(v) for v in values) \
                and values[0] > values[1]:
            problems.append(f"{where}: ttft {values[0]} is after e2e {values[1]}")
        if rid in out:
            problems.append(f"{where}: request {rid!r} appears twice")
        out[rid] = (values[0], values[1])
        if len(problems) >= 50:
            problems.append(f"{path}: stopped after 50 problems")
            break
    if problems:
        raise UsageError("\n".join(problems))
    if not out:
        raise UsageError(f"{path}: no measured request")
    return out


class MeasuredRun:
    """A trace's workload and options (with a cost model), and its measured latencies."""

    def __init__(self, name: str, workload, options, policy: str,
                 measured: dict[str, tuple[float, float]], outputs: dict[str, int]) -> None:
        if not options.has_cost_model:
            raise UsageError(f"{name}: a measured run needs a cost model in its trace's "
                             f"config (model and gpu, or cost_model)")
        self.name = name
        self.workload = workload
        self.options = options
        self.policy = policy
        self.measured = measured
        self.outputs = outputs  # id -> output tokens generated
        missing = sorted(set(outputs) - set(measured))
        if len(missing) == len(outputs):
            raise UsageError(f"{name}: no request of the trace is in its measured file "
                             f"(the first trace id is {next(iter(outputs), None)!r})")


class Recording:
    """One replay's dispatches, enough to time its requests again under other serving
    coefficients, to first order (see the module's docstring)."""

    def __init__(self, run: MeasuredRun, layers: int, k: Coefficients) -> None:
        self.run = run
        self.tp = run.options.tp
        self.layers = layers
        self.k = k                        # the coefficients the replay ran under
        self.ends: list[float] = []       # seconds, as replayed
        self.sampled: list[int] = []      # rows of each dispatch (row overhead)
        self.decodes: list[bool] = []     # the dispatch decodes (decode attention floor)
        self.first: dict[str, int] = {}   # request -> dispatch of its first output
        self.last: dict[str, int] = {}    # request -> dispatch of its last output
        self.arrival: dict[str, float] = {}
        self._cached: list[tuple] | None = None

    def _spans(self) -> list[tuple]:
        """Per measured request that finished: its id, replayed TTFT and E2E (without the
        request overhead), and for each the dispatches that ran while it waited: how
        many, their sampled rows, and how many decoded (from the one under way when it
        arrived). Computed once: every coefficient's change is linear in these."""
        if self._cached is not None:
            return self._cached
        count = [0]
        rows = [0]
        decoding = [0]
        for sampled, decodes in zip(self.sampled, self.decodes):
            count.append(count[-1] + 1)
            rows.append(rows[-1] + sampled)
            decoding.append(decoding[-1] + decodes)
        ends = self.ends
        spans = []
        for rid, first in self.first.items():
            last = self.last.get(rid)
            if last is None or rid not in self.run.measured:
                continue
            arrival = self.arrival[rid]
            b = bisect.bisect_right(ends, arrival, 0, first)
            spans.append((rid, ends[first] - arrival, ends[last] - arrival,
                          count[first + 1] - count[b], rows[first + 1] - rows[b],
                          decoding[first + 1] - decoding[b],
                          count[last + 1] - count[b], rows[last + 1] - rows[b],
                          decoding[last + 1] - decoding[b]))
        self._cached = spans
        return spans

    def latencies(self, k: Coefficients) -> dict[str, tuple[float, float]]:
        """`{id: (ttft, e2e)}` of every measured request that finished, under the serving
        coefficients of `k`: as replayed, plus what `k` changes in the dispatches that
        ran while the request waited for its first and its last output (the dispatch
        under way when it arrived, and every one after it up to that output)."""
        layers = self.layers
        old = self.k

        def fixed(c: Coefficients) -> float:
            return (c.step_overhead + layers * c.layer_floor
                    + (2 * layers * c.allreduce_latency if self.tp > 1 else 0.0))

        per_dispatch = fixed(k) - fixed(old)
        per_row = k.row_overhead - old.row_overhead
        per_decode = layers * (k.decode_attention_floor - old.decode_attention_floor)
        extra = k.request_overhead
        out = {}
        for rid, ttft, e2e, n1, r1, d1, n2, r2, d2 in self._spans():
            out[rid] = (ttft + per_dispatch * n1 + per_row * r1 + per_decode * d1 + extra,
                        e2e + per_dispatch * n2 + per_row * r2 + per_decode * d2 + extra)
        return out


def record(run: MeasuredRun, k: Coefficients) -> Recording:
    """Replay `run` under coefficients `k` and record its dispatches: when each ended,
    how many rows it ran (as `CostModel.dispatch_seconds` counts them for the row
    overhead), whether it decoded, and which requests it gave an output."""
    options = run.options
    model, gpu = cost_specs(options)
    rec = Recording(run, model.layers, k)

    def listen(event) -> None:
        kind = type(event)
        if kind is Dispatch:
            index = len(rec.ends)
            decodes = False
            for rid, phase, _, emits, _ in event.rows:
                if phase == "decode" or phase == "padding":
                    decodes = True
                if emits:
                    rec.first.setdefault(rid, index)
                    rec.last[rid] = index
            rec.ends.append(engine.clock.report(event.done))
            rec.sampled.append(len(event.rows))
            rec.decodes.append(decodes)
        elif kind is Arrival:
            rec.arrival[event.id] = engine.clock.report(event.tick)

    engine = Engine(run.workload, options, run.policy, on_event=listen)
    engine.cost = CostModel(model, gpu, k, options.tp)
    engine.run()
    return rec


def run_statistics(latencies: dict[str, tuple[float, float]], outputs: dict[str, int]
                   ) -> dict[str, float]:
    """Mean TTFT, mean end-to-end, mean ITL ((e2e - ttft) / (N - 1) over requests of
    N > 1 outputs) and p99 end-to-end (nearest rank) of `{id: (ttft, e2e)}`."""
    ttfts = [t for t, _ in latencies.values()]
    e2es = sorted(e for _, e in latencies.values())
    itls = [(e - t) / (outputs[rid] - 1) for rid, (t, e) in latencies.items()
            if outputs.get(rid, 0) > 1]
    n = len(e2es)
    return {"ttft": sum(ttfts) / n, "e2e": sum(e2es) / n,
            "itl": sum(itls) / len(itls) if itls else 0.0,
            "e2e_p99": e2es[max(0, math.ceil(0.99 * n) - 1)]}


def _loss(recordings: Sequence[Recording], k: Coefficients,
          targets: Sequence[dict[str, float]]) -> float:
    total = 0.0
    for rec, target in zip(recordings, targets):
        stats = run_statistics(rec.latencies(k), rec.run.outputs)
        total += sum(log_error(stats[key], target[key]) for key in target)
    return total


def fit_runs(runs: Sequence[MeasuredRun], start: Coefficients, rounds: int = 3,
             progress: Callable[[str], None] | None = None
             ) -> tuple[Coefficients, list[dict]]:
    """Fit the serving coefficients to `runs` from `start`: the coefficients, and per
    run its measured and predicted statistics under them."""
    names = [n for n in SERVING_COEFFICIENTS
             if n != "allreduce_latency" or any(r.options.tp > 1 for r in runs)]
    targets = [run_statistics({rid: v for rid, v in r.measured.items() if rid in r.outputs},
                              r.outputs) for r in runs]
    k = start
    best: tuple | None = None  # (loss as replayed, coefficients, their recordings)
    for round_number in range(rounds + 1):
        recordings = []
        for run in runs:
            if progress:
                what = (f"round {round_number + 1}" if round_number < rounds
                        else "checking what the last round found")
                progress(f"{what}: replaying {run.name}")
            recordings.append(record(run, k))
        # A recording under the coefficients it was replayed with gives the replay's own
        # latencies: this is the loss of `k` as replayed, not to first order.
        replayed = _loss(recordings, k, targets)
        if best is None or replayed < best[0]:
            best = (replayed, k, recordings)
        if round_number == rounds:
            break
        fit = minimize(lambda x: _loss(recordings, k.replace(**dict(zip(names, x))), targets),
                       [getattr(k, n) for n in names], [_BOX[n] for n in names],
                       iterations=3000, restarts=2)
        k = k.replace(**dict(zip(names, fit.point)))
    _, k, recordings = best  # the round whose replay fitted best, the last one if it did
    rows = [{"run": run.name, "measured": target,
             "predicted": run_statistics(rec.latencies(k), run.outputs)}
            for run, target, rec in zip(runs, targets, recordings)]
    return k, rows
