"""What `replay --report` keeps of a run: compact series gathered by an event listener,
in memory that does not grow with the number of requests.

`RunSeries` owns the collection for one policy's run (every replica of a
fleet). It listens to the engine's event records (`records/events.py`) and
keeps, instead of the event stream itself:

- one row of block and queue counts per `snapshot` (a fleet's rows are the
  sums over its replicas, each replica's latest counts), and the tokens of
  every `dispatch`, as `TimeSeries`: exact up to `ROW_LIMIT` rows, then
  thinned to the rows that hold a column's first minimum or first maximum
  within a time bucket (at most `TIME_BUCKETS` buckets), so no peak is lost;
- per time bucket the mean of the free blocks, the waiting and the running
  requests, and of the tokens per dispatch (each `TimeSeries`'s `means`),
  the line drawn inside each min/max band;
- per ended request its TTFT and its queue delay at its arrival (`sent`)
  time, counted in a `DensityGrid` each (every request, in bounded cells);
- the times of preemptions and of retractions (`preempted`, reason
  `retract`) as `Marks`: exact up to `ROW_LIMIT`, then counted per bucket;
- the inter-token gaps (ITL) counted by length, exactly as the summary
  counts them (every gap between two consecutive outputs), and per ended
  request (`ended`, the engine's `on_request_end`) its TTFT, TPOT and
  end-to-end latency in the run's unit, from `engine.summary.request_record`:
  each a `Distribution`, exact up to `EXACT_VALUES` distinct values, then a
  histogram of at most `MAX_BUCKETS` buckets less than 0.1% wide;
- per request its phase changes (waiting, prefill, decode, preempted,
  recompute, end) for the requests the timeline will show: every request of
  a trace of at most `TIMELINE_ROWS`; else `SPACED` evenly spaced by arrival
  (chosen from the trace's request count, known before the run, so the same
  under every policy) and the `SLOWEST` slowest by end-to-end latency among
  the others (a bounded heap), so that each of the slowest is shown. Then a
  request costs nothing while it waits for its first dispatch (its arrival
  is the `sent` time `ended` reads), a line of its phase changes while it
  runs, and nothing once it has ended unless the timeline shows it.

With a cost model, `work` (set after the run, cli/runs.py) is the run's
utilisation over time, a fleet's replicas pooled: an `engine.work_series.
WorkSeries` of at most 2,048 time buckets, whose `points()` gives per bucket
its start and end in seconds, the busy share, and MFU and MBU over the
bucket's length (fractions); None without a cost model. The dispatch
ledger fills it, since the event records do not carry a dispatch's
contexts.

The bounded series themselves (`TimeSeries`, `Marks`, `Distribution`, and
their limits) are `bounded_series`'. Times are kept in clock steps;
`html_report` turns them into the run's unit.
A folded stretch hands the listener the same rows tuple dispatch after
dispatch; it is recognised and counted without walking its rows.
"""
from __future__ import annotations

import heapq
from typing import Any, Callable

from ..engine.summary import request_record
from ..engine.work_series import WorkSeries
from ..records.clock import Clock
from . import bounded_series as bounded  # its limits read at run time (tests lower them)
from .bounded_series import Distribution, Marks, TimeSeries, appended
from .density_grid import DensityGrid

__all__ = ["RunSeries", "SNAPSHOT_FIELDS", "MEAN_FIELDS", "PHASES", "WAITING", "PREFILL", "DECODE",
           "PREEMPTED", "RECOMPUTE", "END", "tee", "TIMELINE_ROWS", "SLOWEST", "SPACED"]

# The counts of a `snapshot` record kept, in this order.
SNAPSHOT_FIELDS = ("allocated", "reserved", "cached", "draining", "free", "waiting", "running")

# The snapshot counts whose mean per time bucket is kept (`snapshots.means`), in order.
MEAN_FIELDS = ("free", "waiting", "running")

# A request's phases on the timeline, by code.
WAITING, PREFILL, DECODE, PREEMPTED, RECOMPUTE, END = range(6)
PHASES = ("waiting", "prefill", "decode", "preempted", "recompute", "end")
_ROW_PHASE = {"prefill": PREFILL, "decode": DECODE, "recompute": RECOMPUTE}
_ENDS = ("finished", "cancelled", "timeout", "stalled", "rejected", "prefilled")
# The record kinds the series read (`records.events.reads`: the engine keeps no
# writer per cached block for `evicted` records, which the report ignores).
KINDS = frozenset(("snapshot", "dispatch", "preempted", "arrival", *_ENDS))

TIMELINE_ROWS = 300  # a trace of at most this many requests has all of them on the timeline
SLOWEST = 100        # else: the slowest by end-to-end latency under the policy ...
SPACED = 200         # ... and this many evenly spaced by arrival (the same under every policy)


def tee(*listeners: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """One `on_event` or `on_request_end` callback that calls each given one in turn."""
    given = [f for f in listeners if f is not None]
    if len(given) <= 1:
        return given[0] if given else None

    def both(item: Any) -> None:
        for f in given:
            f(item)
    return both


# --- the listener --------------------------------------------------------------------


class RunSeries:
    """The series of one policy's run, for the HTML report (see the module's docstring).

    `requests` is the trace's request count (it decides, before the run, which
    requests the timeline samples by arrival). Use `listener(replica)` (or the
    object itself, for one engine) as the `on_event` callback and `ended` as
    `on_request_end`; call `finish` after the run.
    """

    kinds = KINDS  # the record kinds it reads

    def __init__(self, policy: str, clock: Clock, num_blocks: int, replicas: int = 1, *,
                 requests: int) -> None:
        self.policy = policy
        self.clock = clock
        self.num_blocks = num_blocks * replicas  # the pool, a fleet's in all
        self.replicas = replicas
        self.requests = requests
        self.snapshots = TimeSeries(SNAPSHOT_FIELDS, MEAN_FIELDS)
        self.snap_t, self.snap = self.snapshots.t, self.snapshots.columns
        self._latest = [(0,) * len(SNAPSHOT_FIELDS) for _ in range(replicas)]
        self._totals = [0] * len(SNAPSHOT_FIELDS)
        self.dispatches = TimeSeries(("tokens",), ("tokens",))
        self.ttft_grid = DensityGrid()   # TTFT against arrival, every request
        self.queue_grid = DensityGrid()  # queue delay against arrival
        self.disp_t, self.disp_tokens = self.dispatches.t, self.dispatches.columns["tokens"]
        self.preemptions = Marks()  # preemptions other than retractions
        self.retractions = Marks()  # sglang's retractions
        self.itl = Distribution()   # gap in clock steps
        self.ttft = Distribution()
        self.tpot = Distribution()
        self.e2el = Distribution()
        # The timeline. A request's line: [arrival rank, step of its last output
        # (-1: none yet), step, phase, step, phase, ...], its last phase where it
        # is now. Every request has one from its arrival when all are shown
        # (`every`); else only once it is dispatched (or ends), its arrival step
        # filled in when it ends (0 for its rank).
        self._live: dict[str, list[int]] = {}
        self.arrived = 0  # requests that arrived so far (the next one's arrival rank)
        self.every = requests <= TIMELINE_ROWS
        self.spaced = frozenset() if self.every else frozenset(
            i * requests // SPACED for i in range(SPACED))
        self._spaced_ids: set[str] = set()  # arrived at a spaced rank, not yet ended
        # Kept for the timeline: id -> (line, E2EL, order), order the sort key by
        # arrival: (step, rank) when every request is kept, else (sent, trace line).
        self.kept: dict[str, tuple[list[int], float | None, tuple]] = {}
        self.slowest: list[tuple] = []  # heap of (e2el, -sent, -line, id, line)
        self._ended: dict[str, tuple] = {}      # `ended`, its end record not seen yet
        self._ending: dict[str, list[int]] = {}  # end record seen, not yet `ended`
        # A folded stretch: the rows tuple of the last dispatch, whose outputs are
        # not yet in their lines while the same tuple repeats.
        self._rows: tuple | None = None
        self._rows_done = 0
        self._rows_replica: int | None = None
        self._rows_plain = False
        self.end = 0  # the last step seen
        # With host memory: (surviving fraction, resumes) pairs of the run, set when
        # it is over (engine/host_summary.survival_counts).
        self.survival: list[tuple[float, int]] = []
        # With a cost model: busy share, MFU and MBU over time (see the module).
        self.work: WorkSeries | None = None
        self._handlers = {
            "snapshot": self._snapshot, "dispatch": self._dispatch,
            "preempted": self._preempted, "arrival": self._arrival,
            **{kind: self._ended_event for kind in _ENDS},
        }

    # --- listening ----------------------------------------------------------------

    def listener(self, replica: int | None = None) -> Callable[[Any], None]:
        """The `on_event` callback of one replica (None: the only engine)."""
        handlers = self._handlers
        index = replica or 0

        def on_event(event: Any) -> None:
            handler = handlers.get(event.kind)
            if handler is not None:
                handler(event, index)
        on_event.kinds = KINDS  # type: ignore[attr-defined]
        return on_event

    def __call__(self, event: Any) -> None:
        handler = self._handlers.get(event.kind)
        if handler is not None:
            handler(event, 0)

    def ended(self, req: Any) -> None:
        """The engine's `on_request_end`: count the request's latencies; its timeline
        is kept or dropped once its end record is seen too."""
        record = request_record(req, self.clock)
        for name in ("ttft", "tpot", "e2el"):
            value = record[name]
            if value is not None:
                getattr(self, name).add(value)
        if req.sent is not None:
            if record["ttft"] is not None:
                self.ttft_grid.add(req.sent, record["ttft"])
            if record["queue_delay"] is not None:
                self.queue_grid.add(req.sent, record["queue_delay"])
        end = (record["e2el"], req.sent, req.index)
        line = self._ending.pop(req.rid, None)
        if line is None:
            self._ended[req.rid] = end
        else:
            self._keep(req.rid, line, end)

    def _snapshot(self, ev: Any, replica: int) -> None:
        cached = ev.cached or 0
        new = (ev.allocated, ev.reserved, cached, ev.draining, ev.free, ev.waiting, ev.running)
        snap = self.snap
        if self.replicas == 1:
            values = new
        else:
            old = self._latest[replica]
            self._latest[replica] = new
            totals = self._totals
            for i, value in enumerate(new):
                totals[i] += value - old[i]
            values = totals
        self.snap_t = self.snapshots.t = appended(self.snap_t, ev.tick)
        for name, value in zip(SNAPSHOT_FIELDS, values):
            snap[name].append(value)
        if len(self.snap_t) > bounded.ROW_LIMIT:
            self.snapshots.compact()
        if ev.tick > self.end:
            self.end = ev.tick

    def _flush_rows(self) -> None:
        """Leave a folded stretch: its requests' last outputs were at its last end."""
        rows = self._rows
        if rows is not None:
            done = self._rows_done
            live = self._live
            for row in rows:
                if row[3]:
                    line = live.get(row[0])
                    if line is not None:
                        line[1] = done
            self._rows = None

    def _line(self, rid: str, tick: int) -> list[int]:
        """The live line of `rid`, begun (waiting since `tick`) if it is new."""
        line = self._live.get(rid)
        if line is None:
            if self.every:
                line = [self.arrived, -1, tick, WAITING]
                self.arrived += 1
            else:
                line = [0, -1, tick, WAITING]
            self._live[rid] = line
        return line

    def _dispatch(self, ev: Any, replica: int) -> None:
        tick, done, rows = ev.tick, ev.done, ev.rows
        self.disp_t = self.dispatches.t = appended(self.disp_t, tick)
        self.disp_tokens.append(ev.tokens)
        if len(self.disp_t) > bounded.ROW_LIMIT:
            self.dispatches.compact()
        if done > self.end:
            self.end = done
        itl = self.itl.exact
        if rows is self._rows and self._rows_plain and replica == self._rows_replica:
            # The same decode rows again (folding): every row's gap is the same.
            gap = done - self._rows_done
            itl[gap] = itl.get(gap, 0) + len(rows)
            self._rows_done = done
            if len(itl) > bounded.EXACT_VALUES:
                self.itl.spill()
            return
        self._flush_rows()
        live = self._live
        plain = True
        for rid, phase, _tokens, emits, _ids in rows:
            if phase == "decode":
                code = DECODE
            else:
                plain = False
                code = _ROW_PHASE.get(phase)
                if code is None:  # a static batch's padding row: no request's progress
                    continue
            line = live.get(rid)
            if line is None:
                line = self._line(rid, tick)
            if line[-1] != code:
                line += (tick, code)
            if emits:
                prev = line[1]
                if prev >= 0:
                    gap = done - prev
                    itl[gap] = itl.get(gap, 0) + 1
                line[1] = done
            else:
                plain = False
        if len(itl) > bounded.EXACT_VALUES:
            self.itl.spill()
        # Outputs are in the lines already; a repeat of these rows (a folded
        # stretch) only moves their last output, which `_flush_rows` writes.
        self._rows = rows if plain else None
        self._rows_done, self._rows_replica, self._rows_plain = done, replica, plain

    def _arrival(self, ev: Any, replica: int) -> None:
        rid = ev.id
        if rid in self._live:
            return  # handed to a decode replica: its line goes on
        if self.every:
            self._line(rid, ev.tick)
            return
        if self.arrived in self.spaced:
            self._spaced_ids.add(rid)
        self.arrived += 1

    def _preempted(self, ev: Any, replica: int) -> None:
        self._flush_rows()
        (self.retractions if ev.reason == "retract" else self.preemptions).add(ev.tick)
        self._mark(ev.id, ev.tick, PREEMPTED)

    def _ended_event(self, ev: Any, replica: int) -> None:
        self._flush_rows()
        rid = ev.id
        line = self._mark(rid, ev.tick, END)
        line[1] = -1  # a decode replica's first output follows no gap
        if ev.kind == "prefilled":
            return  # the prompt-only run on a prefill replica: the request goes on
        del self._live[rid]
        end = self._ended.pop(rid, None)
        if end is not None and end[1] is None and not self.every:
            # Never sent (a client's request cancelled or stalled before it was):
            # it had no arrival record; it takes its place by arrival now.
            if self.arrived in self.spaced:
                self._spaced_ids.add(rid)
            self.arrived += 1
        if end is not None:
            self._keep(rid, line, end)
        else:
            self._ending[rid] = line

    def _mark(self, rid: str, tick: int, code: int) -> list[int]:
        line = self._line(rid, tick)
        line += (tick, code)
        if tick > self.end:
            self.end = tick
        return line

    def _keep(self, rid: str, line: list[int], end: tuple | None) -> None:
        """An ended request (`end`: its E2EL, sent time and trace line, None if not
        known): keep its line if the timeline may show it."""
        e2el, sent, index = end if end is not None else (None, None, 0)
        if self.every:
            if line[0] < TIMELINE_ROWS:
                self.kept[rid] = (line, e2el, (line[2], line[0]))
            return
        if sent is not None:
            line[2] = sent  # it waited from its arrival, which `sent` is
        order = (line[2], index)
        if rid in self._spaced_ids:
            self._spaced_ids.discard(rid)
            self.kept[rid] = (line, e2el, order)
        elif e2el is not None:
            entry = (e2el, -order[0], -index, rid, line)
            if len(self.slowest) < SLOWEST:
                heapq.heappush(self.slowest, entry)
            elif entry[:3] > self.slowest[0][:3]:
                heapq.heapreplace(self.slowest, entry)

    def finish(self) -> None:
        """After the run: fold in what a last folded stretch left pending, count the
        last rows of the series into their means, and keep the lines of requests
        that did not end (a run cut short)."""
        self._flush_rows()
        self.snapshots.fold()
        self.dispatches.fold()
        for rid, line in list(self._ending.items()):
            self._keep(rid, line, None)
        for rid, line in list(self._live.items()):
            self._keep(rid, line, None)
        self._ending.clear()
        self._live.clear()
        self._ended.clear()
        self._spaced_ids.clear()

    # --- what the timeline shows -----------------------------------------------------

    def timeline(self) -> dict[str, tuple[tuple, list[int], float | None]]:
        """The requests kept for the timeline: id -> (its place by arrival, [step,
        phase, step, phase, ...], end-to-end latency or None)."""
        out = {rid: (order, line[2:], e2el) for rid, (line, e2el, order) in self.kept.items()}
        for e2el, before, earlier, rid, line in self.slowest:
            out[rid] = ((-before, -earlier), line[2:], e2el)
        return out

    def slowest_ids(self) -> set[str]:
        """The ids of the slowest requests kept (none when every request is kept)."""
        return {entry[3] for entry in self.slowest}
