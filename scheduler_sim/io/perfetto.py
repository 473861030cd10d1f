"""`replay --perfetto FILE`: a replay as a Chrome trace event file (JSON object
format), which Perfetto (ui.perfetto.dev) and chrome://tracing open.

This module owns the file's layout and the listener that builds it from the
engine's event records:

- one process per policy, and per replica in a fleet: `pid` is
  1000 x (the policy's position, from 1) + the replica's number (0 outside
  a fleet); a `process_name` metadata event names it (`vllm`,
  `vllm replica 1`);
- one thread (track) per request in each process that saw it: `tid` is the
  request's line in the trace file; `thread_name` is its id and
  `thread_sort_index` its line, so tracks come in trace order;
- a request's phases are complete slices (`"ph":"X"`): `waiting` (arrival to
  admission), `prefill`, `decode`, `recompute` and `padding` (from the
  first dispatch of a phase to the end of its last one, while the request
  runs), `waiting again` (preempted, back in the queue), `kv transfer`
  (disaggregation); preemptions, cancellations, rejections, timeouts,
  stalls and `prefilled` are instants (`"ph":"i"`, thread scope);
- counters (`"ph":"C"`), written at each snapshot whose values changed:
  `kv blocks` (allocated, reserved, draining, free, and cached with prefix
  caching) and `queues` (waiting, running);
- the GPU's dispatches on a track of their own (`tid` 0, `GPU dispatches`,
  first in the process): one slice per run of back-to-back dispatches of
  the same kind (`decode`, or `prefill` when a dispatch carries prompt or
  recompute rows) and the same number of rows, with the dispatches, rows,
  tokens and prompt tokens in its args; a steady decode stretch is one
  slice, so the track grows with the changes of the batch, not its steps;
  with a cost model, a `GPU utilisation` counter beside it (perfetto_work).

On a long trace the request tracks dominate the file (one per request):
`sample` K keeps the tracks of every K-th request by trace line (lines K,
2K, ...) and drops the others' slices and instants, and draws the first
change of the kv blocks' and queues' counters and every K-th one after it;
the GPU track and its utilisation counter stay whole. `otherData` says so
(`sampled`).

Timestamps (`ts`, `dur`) are microseconds: under a cost model the clock's
seconds x 1e6; without one a clock step is `tick_seconds` of trace time
for a trace in seconds or milliseconds, and one tick is taken as 1 ms
(1000 us) for a tick trace. `otherData` in the file says which.

Only what is still open is kept: per live request its open slice and the
slices and instants it made so far, written out when the request ends (a
request that has only arrived is one int: its arrival and track number);
counters go out as they change. Track numbers come from `TrackNumbers`,
which reads the trace's requests again, in replay order, as they arrive
(not a table of every request). The output is the same bytes for the same
input. Each event is one line; `PerfettoFile` writes the head and tail and
`Part` one policy's events, either into the file itself or into a file of
its own that `PerfettoFile.join` copies in (`replay -j`).
"""
from __future__ import annotations

import json
from typing import Any, Callable, TextIO

from ..records.clock import Clock
from ..records.events import (Admitted, Cancelled, Dispatch, Event, Finished, Preempted,
                              Prefilled, Rejected, Snapshot, Stalled, Timeout,
                              TransferDone, TransferStarted)
from .outputs import Output
from .perfetto_tracks import TrackNumbers

__all__ = ["PerfettoFile", "Part", "TrackNumbers", "TICK_US", "fragment",
           "step_microseconds"]

TICK_US = 1000  # a tick of a tick trace without a cost model, in microseconds
_TID = (1 << 64) - 1  # the track number's bits in `_Track.waiting`
_ENDS = (Finished, Cancelled, Rejected, Timeout, Stalled, Prefilled)  # a request's last event
_string = json.encoder.encode_basestring_ascii


def step_microseconds(clock: Clock) -> float:
    """Microseconds per clock step (`TICK_US` for a tick trace without a cost model)."""
    if clock.step_seconds is None:
        return TICK_US
    us = clock.step_seconds * 1e6
    return round(us) if abs(us - round(us)) < 1e-9 * max(1.0, us) else us


def _time_note(clock: Clock) -> str:
    if clock.in_seconds:
        return "ts and dur are the cost model's seconds x 1e6 (microseconds)"
    if clock.step_seconds is None:
        return f"no cost model: 1 tick = {TICK_US} us (1 ms), a convention for display"
    return (f"no cost model: 1 tick = {step_microseconds(clock):g} us "
            f"(tick_seconds of trace time)")


class _Sink:
    """Event lines to an `Output`, comma-separated, written 4,096 at a time."""

    def __init__(self, output: Output) -> None:
        self.output = output
        self.lines: list[str] = []
        self.first = True  # no comma before the first event of this sink

    def add(self, line: str) -> None:
        lines = self.lines
        lines.append(line)
        if len(lines) >= 4096:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            text = ",\n".join(self.lines)
            self.output.write(("\n" if self.first else ",\n") + text)
            self.first = False
            self.lines.clear()


class _Request:
    """What one request's track still needs: its slices and instants so far, the
    phase slice open now ([name, start, end]) and where its wait began."""

    __slots__ = ("tid", "events", "phase", "wait_from", "wait_name")

    def __init__(self, tid: int) -> None:
        self.tid = tid
        self.events: list[str] = []
        self.phase: list | None = None
        self.wait_from: int | None = None
        self.wait_name = "waiting"


class _Track:
    """The listener of one process (a policy, or one replica of it)."""

    def __init__(self, part: "Part", pid: int, name: str) -> None:
        self.part = part
        self.pid = pid
        self.live: dict[str, _Request] = {}
        # A request that has only arrived: (arrival step << 64) | its track number,
        # one int instead of a `_Request` (a long queue holds many of them).
        self.waiting: dict[str, int] = {}
        self.counts: tuple | None = None
        self.prefix = f'"pid":{pid},"tid":'
        self.changes = 0  # changes of the counters' values seen (`Part.sample`)
        # Requests sampled out (`Part.sample`): id -> track number, while they live.
        self.skipped: dict[str, int] = {}
        # The GPU track's open slice: [kind, start, end, dispatches, rows, tokens,
        # prompt tokens], or None.
        self.gpu: list | None = None
        add = part.sink.add
        add(f'{{"name":"process_name","ph":"M","pid":{pid},"tid":0,'
            f'"args":{{"name":{_string(name)}}}}}')
        add(f'{{"name":"process_sort_index","ph":"M","pid":{pid},"tid":0,'
            f'"args":{{"sort_index":{pid}}}}}')
        add(f'{{"name":"thread_name","ph":"M","pid":{pid},"tid":0,'
            f'"args":{{"name":"GPU dispatches"}}}}')
        add(f'{{"name":"thread_sort_index","ph":"M","pid":{pid},"tid":0,'
            f'"args":{{"sort_index":-1}}}}')
        self.last = 0

    # --- helpers -------------------------------------------------------------------

    def _first_sight(self, rid: str) -> int:
        """Name the track of a request new to this process; its track number."""
        tid = self.part.track_number(rid)
        self._name_track(rid, tid)
        return tid

    def _name_track(self, rid: str, tid: int) -> None:
        sink = self.part.sink
        head = f'"ph":"M",{self.prefix}{tid},"args":'
        sink.add(f'{{"name":"thread_name",{head}{{"name":{_string(rid)}}}}}')
        sink.add(f'{{"name":"thread_sort_index",{head}{{"sort_index":{tid}}}}}')

    def _request(self, rid: str) -> _Request:
        req = self.live.get(rid)
        if req is None:
            waiting = self.waiting.pop(rid, None)
            if waiting is None:
                req = _Request(self._first_sight(rid))
            else:
                req = _Request(waiting & _TID)
                req.wait_from = waiting >> 64
            self.live[rid] = req
        return req

    def _slice(self, req: _Request, name: str, start: int, end: int) -> None:
        us = self.part.us
        req.events.append(f'{{"name":"{name}","ph":"X",{self.prefix}{req.tid},'
                          f'"ts":{us(start)},"dur":{us(end - start)}}}')

    def _instant(self, req: _Request, name: str, at: int, args: dict | None = None) -> None:
        extra = "" if not args else f',"args":{json.dumps(args, separators=(",", ":"))}'
        req.events.append(f'{{"name":"{name}","ph":"i","s":"t",{self.prefix}{req.tid},'
                          f'"ts":{self.part.us(at)}{extra}}}')

    def _close_phase(self, req: _Request) -> None:
        if req.phase is not None:
            name, start, end = req.phase
            self._slice(req, name, start, end)
            req.phase = None

    def _close_wait(self, req: _Request, at: int) -> None:
        if req.wait_from is not None:
            if at > req.wait_from:
                self._slice(req, req.wait_name, req.wait_from, at)
            req.wait_from = None

    def _end(self, rid: str, at: int, instant: str | None = None,
             args: dict | None = None) -> None:
        req = self._request(rid)
        self._close_phase(req)
        self._close_wait(req, at)
        if instant is not None:
            self._instant(req, instant, at, args)
        add = self.part.sink.add
        for line in req.events:
            add(line)
        del self.live[rid]
        if instant == "prefilled":
            self.part.hand_off(rid, req.tid)

    # --- the listener ----------------------------------------------------------------

    def _dispatch(self, event: Dispatch) -> None:
        """The GPU track: `event` extends the open slice (back to back, the same kind
        and rows) or closes it and opens another."""
        rows = event.rows
        prompt = sum(row[2] for row in rows if row[1] != "decode")
        kind = "prefill" if prompt else "decode"
        gpu = self.gpu
        if (gpu is not None and gpu[0] == kind and gpu[2] == event.tick
                and gpu[4] == len(rows)):
            gpu[2] = event.done
            gpu[3] += 1
            gpu[5] += event.tokens
            gpu[6] += prompt
            return
        self._close_gpu()
        self.gpu = [kind, event.tick, event.done, 1, len(rows), event.tokens, prompt]

    def _close_gpu(self) -> None:
        gpu = self.gpu
        if gpu is not None:
            kind, start, end, count, rows, tokens, prompt = gpu
            us = self.part.us
            self.part.sink.add(
                f'{{"name":"{kind}","ph":"X",{self.prefix}0,"ts":{us(start)},'
                f'"dur":{us(end - start)},"args":{{"dispatches":{count},"rows":{rows},'
                f'"tokens":{tokens},"prompt_tokens":{prompt}}}}}')
            self.gpu = None

    def __call__(self, event: Event) -> None:
        kind = type(event)
        at = event.tick
        self.last = at
        if self.skipped:
            rid = getattr(event, "id", None)
            if rid is not None and rid in self.skipped:
                if kind in _ENDS:
                    tid = self.skipped.pop(rid)
                    if kind is Prefilled:
                        self.part.hand_off(rid, tid)
                return
        if kind is Dispatch:
            self._dispatch(event)
            done = event.done
            live = self.live
            for row in event.rows:
                req = live.get(row[0])
                if req is None:
                    if row[0] not in self.waiting:
                        continue
                    req = self._request(row[0])
                phase = req.phase
                if phase is not None and phase[0] == row[1]:
                    phase[2] = done
                else:
                    if phase is not None:
                        self._close_phase(req)
                    req.phase = [row[1], at, done]
        elif kind is Snapshot:
            counts = (event.allocated, event.reserved, event.draining, event.free,
                      event.cached, event.waiting, event.running)
            if counts != self.counts:
                self.counts = counts
                self.changes += 1
                if (self.changes - 1) % self.part.sample:
                    return  # sampled: the first change, then every sample-th, is drawn
                ts = self.part.us(at)
                cached = "" if event.cached is None else f',"cached":{event.cached}'
                add = self.part.sink.add
                add(f'{{"name":"kv blocks","ph":"C","pid":{self.pid},"tid":0,"ts":{ts},'
                    f'"args":{{"allocated":{event.allocated},"reserved":{event.reserved},'
                    f'"draining":{event.draining},"free":{event.free}{cached}}}}}')
                add(f'{{"name":"queues","ph":"C","pid":{self.pid},"tid":0,"ts":{ts},'
                    f'"args":{{"waiting":{event.waiting},"running":{event.running}}}}}')
        elif kind is Admitted:
            req = self._request(event.id)
            self._close_wait(req, at)
        elif kind is Preempted:
            req = self._request(event.id)
            self._close_phase(req)
            args = {"reason": event.reason}
            if event.rule is not None:
                args["rule"] = event.rule
            self._instant(req, "preempted", at, args)
            req.wait_from, req.wait_name = at, "waiting again"
        elif kind is Finished:
            self._end(event.id, at)
        elif kind is Cancelled:
            self._end(event.id, at, "cancelled", {"state": event.state})
        elif kind is Rejected:
            self._end(event.id, at, "rejected", {"reason": event.reason})
        elif kind is Timeout:
            self._end(event.id, at, "timeout")
        elif kind is Stalled:
            self._end(event.id, at, "stalled", {"reason": event.reason})
        elif kind is Prefilled:
            self._end(event.id, at, "prefilled")
        elif kind is TransferStarted:
            req = self._request(event.id)
            self._close_wait(req, at)
            self._slice(req, "kv transfer", at, event.done)
        elif kind is TransferDone:
            req = self.live.get(event.id)
            if req is not None:  # not a copy aborted by a cancel: the request ended
                req.wait_from, req.wait_name = at, "waiting"
        elif event.kind == "arrival":
            rid = event.id
            req = self.live.get(rid)
            if req is not None:
                req.wait_from = at
            else:
                known = self.waiting.get(rid)
                if known is None:
                    tid = self.part.track_number(rid)
                    if tid % self.part.sample:
                        self.skipped[rid] = tid  # sampled out: no track
                        return
                    self._name_track(rid, tid)
                else:
                    tid = known & _TID
                self.waiting[rid] = (at << 64) | tid

    def close(self) -> None:
        """Write out the requests still open (none, unless the run was cut short):
        those past their arrival, then those that only arrived; and the GPU
        track's open slice."""
        for rid in list(self.live) + list(self.waiting):
            self._end(rid, self.last)
        self._close_gpu()


class Part:
    """One policy's events (all its replicas), written to `output`'s sink.

    `position` is the policy's place on the command line (from 0); `tids`
    gives requests their track number (`TrackNumbers`, or a dict)."""

    def __init__(self, sink: _Sink, position: int, policy: str, clock: Clock,
                 tids: "TrackNumbers | dict[str, int]") -> None:
        self.sink = sink
        self.position = position
        self.policy = policy
        self.sample = 1  # every sample-th request (by trace line) has a track
        if isinstance(tids, TrackNumbers):
            self.sample = tids.sample
            reader = tids.reader()
            self.track_number: Callable[[str], int] = reader.line
            self.hand_off: Callable[[str, int], None] = reader.hand_off
        else:
            self.track_number = lambda rid: tids.get(rid, 0)
            self.hand_off = lambda rid, tid: None
        self.tracks: list[_Track] = []
        per = step_microseconds(clock)
        if isinstance(per, int):
            self.us: Callable[[int], Any] = (lambda steps: steps * per) if per != 1 else int
        else:
            self.us = lambda steps: repr(round(steps * per, 3))

    def listener(self, replica: int | None = None) -> Callable[[Event], None]:
        """The `on_event` callback of the policy's run, or of one replica of it."""
        pid = 1000 * (self.position + 1) + (replica or 0)
        name = self.policy if replica is None else f"{self.policy} replica {replica}"
        track = _Track(self, pid, name)
        self.tracks.append(track)
        return track

    def finish(self) -> None:
        """Close what is still open and write everything buffered."""
        for track in self.tracks:
            track.close()
        self.sink.flush()


class PerfettoFile:
    """The `--perfetto` output: `part` gives each policy's listener in turn (in
    the policies' order), or `join` copies in a part written elsewhere;
    `commit` ends the JSON and makes the file appear, `abort` leaves none."""

    def __init__(self, target: str, stdout: TextIO, trace_name: str, clock: Clock,
                 tids: "TrackNumbers | dict[str, int]") -> None:
        self.clock = clock
        self.tids = tids
        self.output = Output(target, stdout, "cannot write the Perfetto trace", ".perfetto-")
        self.sink = _Sink(self.output)
        other = {"tool": "scheduler-sim", "trace": trace_name,
                 "time_unit": clock.label, "microseconds_per_step": step_microseconds(clock),
                 "timestamps": _time_note(clock)}
        sample = getattr(tids, "sample", 1)
        if sample > 1:
            other["sampled"] = (
                f"the tracks of one request in {sample} (trace lines {sample}, "
                f"{2 * sample}, ...), the others left out; the kv blocks' and queues' "
                f"counters' first change of values and one in {sample} after it; the GPU "
                "dispatches and utilisation whole")
        self.output.write('{"displayTimeUnit":"ms","otherData":'
                          + json.dumps(other, separators=(",", ":"), sort_keys=True)
                          + ',"traceEvents":[')

    def part(self, position: int, policy: str) -> Part:
        """The part of the policy at `position`, written straight into this file."""
        return Part(self.sink, position, policy, self.clock, self.tids)

    def join(self, path: str) -> None:
        """Copy in a part written by `Part` into a file of its own (`fragment`)."""
        self.sink.flush()
        with open(path, encoding="utf-8", newline="") as handle:
            chunk = handle.read(1 << 20)
            if chunk:
                # A fragment starts with "\n" (its first event); this file may need a comma.
                self.output.write(chunk if self.sink.first else "," + chunk)
                self.sink.first = False
            while chunk:
                chunk = handle.read(1 << 20)
                if chunk:
                    self.output.write(chunk)

    def commit(self) -> None:
        self.sink.flush()
        self.output.write("\n]}\n")
        self.output.commit()

    def abort(self) -> None:
        self.output.abort()


def fragment(output: Output, position: int, policy: str, clock: Clock,
             tids: "TrackNumbers | dict[str, int]") -> Part:
    """A part written to an output of its own, for `PerfettoFile.join`."""
    return Part(_Sink(output), position, policy, clock, tids)

