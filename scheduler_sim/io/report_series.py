"""What `replay --report` keeps of a run: compact series gathered by an event listener.

`RunSeries` owns the collection for one policy's run (every replica of a
fleet). It listens to the engine's event records (`records/events.py`) and
keeps, instead of the event stream itself:

- one row of block and queue counts per `snapshot` (a fleet's rows are the
  sums over its replicas, each replica's latest counts), and the tokens of
  every `dispatch`, in flat integer arrays;
- the times of preemptions and of retractions (`preempted`, reason `retract`);
- the inter-token gaps (ITL) as a count per gap length, exactly as the
  summary counts them: every gap between two consecutive outputs;
- per request, its phase changes only (waiting, prefill, decode, preempted,
  recompute, end): a few integers a request, not a row per dispatch;
- per ended request (`ended`, the engine's `on_request_end`), its TTFT, TPOT
  and end-to-end latency in the run's unit, from `engine.summary.request_record`.

Times are kept in clock steps; `html_report` turns them into the run's unit.
A folded stretch hands the listener the same rows tuple dispatch after
dispatch; it is recognised and counted without walking its rows.
"""
from __future__ import annotations

from array import array
from typing import Any, Callable

from ..engine.summary import request_record
from ..records.clock import Clock

__all__ = ["RunSeries", "SNAPSHOT_FIELDS", "PHASES", "WAITING", "PREFILL", "DECODE",
           "PREEMPTED", "RECOMPUTE", "END", "tee"]

# The counts of a `snapshot` record kept, in this order.
SNAPSHOT_FIELDS = ("allocated", "reserved", "cached", "draining", "free", "waiting", "running")

# A request's phases on the timeline, by code.
WAITING, PREFILL, DECODE, PREEMPTED, RECOMPUTE, END = range(6)
PHASES = ("waiting", "prefill", "decode", "preempted", "recompute", "end")
_ROW_PHASE = {"prefill": PREFILL, "decode": DECODE, "recompute": RECOMPUTE}
_ENDS = ("finished", "cancelled", "timeout", "stalled", "rejected", "prefilled")
# The record kinds the series read (`records.events.reads`: the engine keeps no
# writer per cached block for `evicted` records, which the report ignores).
KINDS = frozenset(("snapshot", "dispatch", "preempted", "arrival", *_ENDS))


def _appended(steps: array | list[int], step: int) -> array | list[int]:
    """`steps` with `step` appended: an array of 64-bit integers, or a list once a step
    does not fit one (a cost model's microsecond clock over a trace that reaches 1e15 s
    counts 1e21 steps)."""
    try:
        steps.append(step)
    except OverflowError:
        steps = [*steps, step]
    return steps


def tee(*listeners: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """One `on_event` or `on_request_end` callback that calls each given one in turn."""
    given = [f for f in listeners if f is not None]
    if len(given) <= 1:
        return given[0] if given else None

    def both(item: Any) -> None:
        for f in given:
            f(item)
    return both


class RunSeries:
    """The series of one policy's run, for the HTML report (see the module's docstring).

    Use `listener(replica)` (or the object itself, for one engine) as the
    `on_event` callback and `ended` as `on_request_end`.
    """

    kinds = KINDS  # the record kinds it reads

    def __init__(self, policy: str, clock: Clock, num_blocks: int, replicas: int = 1) -> None:
        self.policy = policy
        self.clock = clock
        self.num_blocks = num_blocks * replicas  # the pool, a fleet's in all
        self.replicas = replicas
        self.snap_t = array("q")
        self.snap = {name: array("q") for name in SNAPSHOT_FIELDS}
        self._latest = [(0,) * len(SNAPSHOT_FIELDS) for _ in range(replicas)]
        self._totals = [0] * len(SNAPSHOT_FIELDS)
        self.disp_t = array("q")
        self.disp_tokens = array("q")
        self.preempt_t = array("q")  # preemptions other than retractions
        self.retract_t = array("q")  # sglang's retractions
        self.itl: dict[int, int] = {}  # gap in clock steps -> how many gaps lasted it
        self.timeline: dict[str, list[int]] = {}  # id -> [step, phase, step, phase, ...]
        self._phase: dict[str, int] = {}  # live request -> its phase now
        self._last_out: dict[str, int] = {}  # live request -> step of its last output
        # A folded stretch: the rows tuple of the last dispatch, whose outputs are
        # not yet in `_last_out` while the same tuple repeats.
        self._rows: tuple | None = None
        self._rows_done = 0
        self._rows_replica: int | None = None
        self._rows_plain = False
        self.arrival: dict[str, int] = {}  # id -> arrival step (first seen)
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.e2el: list[float] = []
        self.e2el_of: dict[str, float] = {}  # id -> end-to-end latency, completed or not
        self.end = 0  # the last step seen
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
        """The engine's `on_request_end`: keep the request's latencies."""
        record = request_record(req, self.clock)
        for name in ("ttft", "tpot", "e2el"):
            value = record[name]
            if value is not None:
                getattr(self, name).append(value)
        if record["e2el"] is not None:
            self.e2el_of[req.rid] = record["e2el"]

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
        self.snap_t = _appended(self.snap_t, ev.tick)
        for name, value in zip(SNAPSHOT_FIELDS, values):
            snap[name].append(value)
        if ev.tick > self.end:
            self.end = ev.tick

    def _flush_rows(self) -> None:
        """Leave a folded stretch: its requests' last outputs were at its last end."""
        rows = self._rows
        if rows is not None:
            done = self._rows_done
            last = self._last_out
            for row in rows:
                if row[3]:
                    last[row[0]] = done
            self._rows = None

    def _dispatch(self, ev: Any, replica: int) -> None:
        tick, done, rows = ev.tick, ev.done, ev.rows
        self.disp_t = _appended(self.disp_t, tick)
        self.disp_tokens.append(ev.tokens)
        if done > self.end:
            self.end = done
        itl = self.itl
        if rows is self._rows and self._rows_plain and replica == self._rows_replica:
            # The same decode rows again (folding): every row's gap is the same.
            gap = done - self._rows_done
            itl[gap] = itl.get(gap, 0) + len(rows)
            self._rows_done = done
            return
        self._flush_rows()
        phase_of, timeline, last = self._phase, self.timeline, self._last_out
        plain = True
        for rid, phase, _tokens, emits, _ids in rows:
            code = _ROW_PHASE.get(phase)
            if code is None:  # a static batch's padding row: no request's progress
                plain = False
                continue
            if phase_of.get(rid) != code:
                phase_of[rid] = code
                line = timeline.get(rid)
                if line is None:
                    line = timeline[rid] = [tick, WAITING]
                line += (tick, code)
            if emits:
                prev = last.get(rid)
                if prev is not None:
                    gap = done - prev
                    itl[gap] = itl.get(gap, 0) + 1
                last[rid] = done
            else:
                plain = False
            if code != DECODE:
                plain = False
        # Outputs are in `_last_out` already; a repeat of these rows (a folded
        # stretch) only moves their last output, which `_flush_rows` writes.
        self._rows = rows if plain else None
        self._rows_done, self._rows_replica, self._rows_plain = done, replica, plain

    def _arrival(self, ev: Any, replica: int) -> None:
        rid = ev.id
        if rid not in self.timeline:
            self.timeline[rid] = [ev.tick, WAITING]
            self.arrival[rid] = ev.tick
        self._phase[rid] = WAITING

    def _preempted(self, ev: Any, replica: int) -> None:
        self._flush_rows()
        if ev.reason == "retract":
            self.retract_t = _appended(self.retract_t, ev.tick)
        else:
            self.preempt_t = _appended(self.preempt_t, ev.tick)
        self._mark(ev.id, ev.tick, PREEMPTED)

    def _ended_event(self, ev: Any, replica: int) -> None:
        self._flush_rows()
        rid = ev.id
        self._mark(rid, ev.tick, END)
        self._phase.pop(rid, None)
        self._last_out.pop(rid, None)

    def _mark(self, rid: str, tick: int, code: int) -> None:
        line = self.timeline.get(rid)
        if line is None:
            line = self.timeline[rid] = [tick, WAITING]
            self.arrival.setdefault(rid, tick)
        line += (tick, code)
        if code != END:
            self._phase[rid] = code
        if tick > self.end:
            self.end = tick

    def finish(self) -> None:
        """After the run: fold in what a last folded stretch left pending."""
        self._flush_rows()
