"""Event records: what the engine reports, one frozen dataclass per kind (§11).

Each record knows its JSON form (`to_dict`, `to_json`) and can be rebuilt from
it (`event_from_dict`), which the round-trip tests use. Every record carries
its time and `event`; request records carry `id`. Records are built only when
somebody listens, so a run without `--events` pays nothing for them.

Records hold times in clock steps. Written out, they are in the run's unit
(`clock.Clock`): `tick` in ticks; with a cost model `time` in seconds, and
every other time field (`done`, `waited`, `client_wait`) in seconds too.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar

__all__ = [
    "Event", "Arrival", "Rejected", "Admitted", "AdmissionBlocked", "Snapshot",
    "Dispatch", "Finished", "Cancelled", "CancelIgnored", "Preempted",
    "PreemptIgnored", "Released", "Evicted", "Stalled", "Timeout", "Ratio", "Prefilled",
    "TransferStarted", "TransferDone", "EVENT_TYPES",
    "event_from_dict", "LineListener", "snapshot_line", "dispatch_line", "steady_lines",
    "reads",
]


def reads(listener: Any, kind: str) -> bool:
    """Whether an event listener reads records of `kind`: a listener may say which
    kinds it reads as a `kinds` attribute (a set of `Event.kind` names); without
    one it reads them all. The engine skips the bookkeeping of a kind nobody
    reads (a fleet's replicas would each keep the writer of every cached
    block for `evicted` records)."""
    kinds = getattr(listener, "kinds", None)
    return kinds is None or kind in kinds


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """Base of all records: the tick at which it happened."""

    kind: ClassVar[str] = ""
    times: ClassVar[tuple[str, ...]] = ()  # fields other than `tick` that hold a time
    tick: int

    def to_dict(self, policy: str | None = None, clock: Any = None) -> dict[str, Any]:
        """The JSON object of this record; `policy` is added when several policies run.

        With a `clock` that reports seconds, `tick` becomes `time` and every
        time field is in seconds.
        """
        out: dict[str, Any] = {"tick": self.tick, "event": self.kind}
        if policy is not None:
            out["policy"] = policy
        for name, optional in _field_names(type(self)):
            value = getattr(self, name)
            # Optional fields (default None) are left out when they do not apply.
            if value is None and optional:
                continue
            out[name] = value
        if clock is not None and clock.in_seconds:
            report = clock.report
            out = {("time" if k == "tick" else k):
                   (report(v) if k == "tick" or k in self.times else v)
                   for k, v in out.items()}
        return out

    def to_json(self, policy: str | None = None, clock: Any = None) -> str:
        """One line of the event stream (compact JSON, fields in a fixed order):
        `to_dict` encoded, written field by field."""
        seconds = clock is not None and clock.in_seconds
        parts = [f'{{"time":{clock.text(self.tick)}' if seconds else f'{{"tick":{self.tick}',
                 f'"event":"{self.kind}"']
        if policy is not None:
            parts.append('"policy":' + _string(policy))
        times = self.times
        for name, optional in _field_names(type(self)):
            value = getattr(self, name)
            kind = type(value)
            if value is None:
                if optional:
                    continue
                text = "null"
            elif seconds and name in times:
                text = _ENCODE(clock.report(value))
            elif kind is str:
                text = _string(value)
            elif kind is int:
                text = str(value)
            elif kind is bool:
                text = "true" if value else "false"
            else:
                text = _ENCODE(value)
            parts.append(f'"{name}":{text}')
        return ",".join(parts) + "}"


class LineListener:
    """A listener that writes each record as one JSON line (`write`): the engine
    may also hand it lines it wrote itself, without building the records, where
    it reports many alike (a folded stretch's snapshots and dispatches)."""

    def __init__(self, policy: str | None, clock: Any) -> None:
        self.policy = policy  # the tag of every line, when several policies run
        self.clock = clock

    def __call__(self, event: "Event") -> None:
        self.write(event.to_json(self.policy, self.clock))

    def write(self, line: str) -> None:
        raise NotImplementedError

    def write_all(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)


_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_string = json.encoder.encode_basestring_ascii  # a JSON string literal, C-accelerated
_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _field_names(cls: type) -> tuple[tuple[str, bool], ...]:
    """(name, optional) of a record's fields after `tick`, computed once per class."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(
            (f.name, f.default is None) for f in dataclasses.fields(cls)[1:])
    return names


def _record(kind: str):
    def wrap(cls):
        cls = dataclasses.dataclass(frozen=True, slots=True)(cls)
        cls.kind = kind
        return cls
    return wrap


@_record("arrival")
class Arrival(Event):
    """A request reached the server (E2); `client_wait` is how long it waited for a
    client slot (`max_concurrency`), left out when it did not wait."""
    times = ("client_wait",)
    id: str
    client_wait: int | None = None


@_record("rejected")
class Rejected(Event):
    """A request could never be served and was refused at registration (E6)."""
    id: str
    reason: str
    needed: int
    capacity: int


@_record("admitted")
class Admitted(Event):
    """A request entered the running set; `reserved` is its credit in blocks (A1).

    `resumed` is true when a preempted request comes back; `cached_tokens`
    counts prompt tokens found in the prefix cache (0 without one).
    """
    id: str
    reserved: int
    resumed: bool
    cached_tokens: int


@_record("admission_blocked")
class AdmissionBlocked(Event):
    """The queue head could not be admitted at this boundary, and why.

    `free` is what the admission saw. A policy that gives this step's rows
    their blocks before it looks at the queue (vllm, sglang) has by then
    taken `step_allocated` blocks (left out when none), which the snapshot
    that follows still counts as free.
    """
    id: str
    reason: str
    needed: int
    free: int
    reserved: int
    draining: int
    step_allocated: int | None = None


@_record("snapshot")
class Snapshot(Event):
    """Counts just before a dispatch: after admission, before it allocates blocks.

    With prefix caching, `cached` counts the free blocks that still keep a key.
    """
    waiting: int
    running: int
    reserved: int
    allocated: int
    draining: int
    free: int
    cached: int | None = None

    def to_json(self, policy: str | None = None, clock: Any = None) -> str:
        return snapshot_line(self.tick, self.waiting, self.running, self.reserved,
                             self.allocated, self.draining, self.free, self.cached,
                             policy, clock)


def snapshot_line(tick: int, waiting: int, running: int, reserved: int, allocated: int,
                  draining: int, free: int, cached: int | None, policy: str | None,
                  clock: Any) -> str:
    """`Snapshot(...).to_json(policy, clock)` without the record: one per dispatch,
    written by hand, the same bytes as the generic path."""
    tag = "" if policy is None else f'"policy":{_string(policy)},'
    cached = "" if cached is None else f',"cached":{cached}'
    when = (f'"tick":{tick}' if clock is None or not clock.in_seconds
            else f'"time":{clock.text(tick)}')
    return (f'{{{when},"event":"snapshot",{tag}"waiting":{waiting},'
            f'"running":{running},"reserved":{reserved},'
            f'"allocated":{allocated},"draining":{draining},'
            f'"free":{free}{cached}}}')


@_record("dispatch")
class Dispatch(Event):
    """One forward pass: per request, its phase, tokens and whether it emits an output.

    `rows` holds tuples (id, phase, tokens, emits, token_ids or None); in JSON
    each is an object `{id, phase, tokens, emits[, token_ids]}`. `done` is the
    completion tick.
    """
    times = ("done",)
    rows: tuple
    tokens: int
    done: int

    def to_dict(self, policy: str | None = None, clock: Any = None) -> dict[str, Any]:
        seconds = clock is not None and clock.in_seconds
        out: dict[str, Any] = ({"time": clock.report(self.tick)} if seconds
                               else {"tick": self.tick})
        out["event"] = self.kind
        if policy is not None:
            out["policy"] = policy
        rows = []
        for rid, phase, tokens, emits, ids in self.rows:
            row = {"id": rid, "phase": phase, "tokens": tokens, "emits": emits}
            if ids is not None:
                row["token_ids"] = ids
            rows.append(row)
        out["rows"] = rows
        out["tokens"] = self.tokens
        out["done"] = clock.report(self.done) if seconds else self.done
        return out

    def to_json(self, policy: str | None = None, clock: Any = None) -> str:
        return dispatch_line(self.tick, self.rows, self.tokens, self.done, policy, clock)


def dispatch_line(tick: int, rows: tuple, tokens: int, done: int, policy: str | None,
                  clock: Any) -> str:
    """`Dispatch(...).to_json(policy, clock)` without the record. The event stream
    is mostly dispatches: written by hand, the same bytes as the generic encoder
    would produce, several times faster."""
    if clock is None or not clock.in_seconds:
        head = f'{{"tick":{tick},"event":"dispatch",'
    else:
        head = f'{{"time":{clock.text(tick)},"event":"dispatch",'
        done = clock.text(done)
    if policy is not None:
        head += f'"policy":{_string(policy)},'
    return f'{head}"rows":[{rows_text(rows)}],"tokens":{tokens},"done":{done}}}'


def rows_text(rows: tuple) -> str:
    """The JSON text of a dispatch's rows, inside the brackets."""
    last = _LAST_ROWS
    if last[0] is rows:  # a folded stretch repeats one rows tuple
        text = last[1]
    else:
        plain = _DECODE_ROWS
        if len(plain) > 65536:
            plain.clear()
        parts = []
        for rid, phase, count, emits, ids in rows:
            if phase == "decode" and count == 1 and emits and ids is None:
                row = plain.get(rid)
                if row is None:
                    row = plain[rid] = (f'{{"id":{_string(rid)},"phase":"decode",'
                                        '"tokens":1,"emits":true}')
                parts.append(row)
                continue
            row = (f'{{"id":{_string(rid)},"phase":"{phase}","tokens":{count},'
                   f'"emits":{"true" if emits else "false"}')
            if ids is not None:
                row += f',"token_ids":[{",".join(map(str, ids))}]'
            parts.append(row + "}")
        text = ",".join(parts)
        last[0], last[1] = rows, text
    return text


def steady_lines(steps: list[tuple[int, int, int, int]], waiting: int, running: int,
                 reserved: int, draining: int, rows: tuple, tokens: int,
                 policy: str | None, clock: Any) -> list[str]:
    """The snapshot and dispatch lines of a folded stretch, for each (tick, done,
    allocated, free) of `steps`: what `snapshot_line` and `dispatch_line` write,
    with the parts that do not change written once (a dispatch's end is the next
    one's start, so each time is written once)."""
    seconds = clock is not None and clock.in_seconds
    text = clock.text if seconds else str
    key = '{"time":' if seconds else '{"tick":'
    tag = "" if policy is None else f'"policy":{_string(policy)},'
    snapshot = (f',"event":"snapshot",{tag}"waiting":{waiting},"running":{running},'
                f'"reserved":{reserved},"allocated":')
    drain = f',"draining":{draining},"free":'
    dispatch = f',"event":"dispatch",{tag}"rows":[{rows_text(rows)}],"tokens":{tokens},"done":'
    out: list[str] = []
    add = out.append
    last_done = last_text = None
    for tick, done, held, free in steps:
        when = last_text if tick == last_done else text(tick)
        last_done, last_text = done, text(done)
        add(f'{key}{when}{snapshot}{held}{drain}{free}}}')
        add(f'{key}{when}{dispatch}{last_text}}}')
    return out


# The last rows tuple written and its JSON text (kept with the tuple itself, so
# that the identity test cannot match a new tuple at a reused address).
_LAST_ROWS: list = [None, ""]
_DECODE_ROWS: dict[str, str] = {}  # a request's plain decode row, as text



@_record("finished")
class Finished(Event):
    """A request produced its last output (first among its tick's events, E1)."""
    id: str
    status: str


@_record("cancelled")
class Cancelled(Event):
    """A client cancellation took effect; `state` is where the request was."""
    id: str
    state: str


@_record("cancel_ignored")
class CancelIgnored(Event):
    """A cancellation of a request that had already ended (E5)."""
    id: str
    status: str


@_record("preempted")
class Preempted(Event):
    """A running request lost its blocks and went back to wait (L2).

    `outputs` is the output index it keeps; `rows` the resident rows it loses;
    `blocks_freed` the blocks that actually drain (shared or pinned ones stay).
    `reason` is `manual` (a trace record), `out_of_blocks` (vllm: `rule` names
    the victim rule and `trigger` the request that needed a block) or
    `retract` (sglang, rule `fewest-outputs`).
    """
    id: str
    outputs: int
    rows: int
    blocks_freed: int
    reason: str
    rule: str | None = None
    trigger: str | None = None


@_record("preempt_ignored")
class PreemptIgnored(Event):
    """A manual preemption of a request that was not running."""
    id: str
    status: str


@_record("timeout")
class Timeout(Event):
    """A request waited longer than `waiting_timeout` and was aborted."""
    times = ("waited",)
    id: str
    waited: int


@_record("ratio")
class Ratio(Event):
    """sglang's new_token_ratio changed: `reason` is `retract` (a jump), `decay`, or
    `idle` (back to its initial value on an idle server)."""
    value: float
    reason: str


@_record("released")
class Released(Event):
    """Draining blocks became free (A4)."""
    blocks: int


@_record("evicted")
class Evicted(Event):
    """Request `id` took a free block that still held a cached prefix: block number
    `block` (rows block x block_size onwards) of request `written_by`, which wrote it."""
    id: str
    written_by: str
    block: int


@_record("stalled")
class Stalled(Event):
    """The run could make no more progress; this request ends as finished_error (E6b)."""
    id: str
    reason: str


@_record("prefilled")
class Prefilled(Event):
    """Disaggregation (fleet/disagg.py): on a prefill replica, a request's prompt is
    computed and its one hidden output recorded; its run there ends (in place of
    `finished`) and its `pinned` blocks stay held for the copy to a decode replica."""
    id: str
    pinned: int


@_record("transfer_started")
class TransferStarted(Event):
    """Disaggregation: a decode replica admitted a request and began copying `tokens`
    rows of its prompt's KV into `blocks` blocks, from replica `prefill_replica` to
    replica `decode_replica`; it lands at `done`."""
    times = ("done",)
    id: str
    prefill_replica: int
    decode_replica: int
    tokens: int
    blocks: int
    done: int


@_record("transfer_done")
class TransferDone(Event):
    """Disaggregation: a copy started at `done - duration` ended; the request waits
    again with its prompt's rows resident, or, when `aborted` (it was cancelled
    meanwhile), the prefill replica's pinned blocks are let go."""
    times = ("duration",)
    id: str
    prefill_replica: int
    decode_replica: int
    tokens: int
    duration: int
    aborted: bool


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (Arrival, Rejected, Admitted, AdmissionBlocked, Snapshot, Dispatch,
                Finished, Cancelled, CancelIgnored, Preempted, PreemptIgnored,
                Timeout, Ratio, Released, Evicted, Stalled, Prefilled, TransferStarted,
                TransferDone)
}


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild a record from its JSON object (ignores a `policy` field)."""
    cls = EVENT_TYPES[data["event"]]
    values = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
    if cls is Dispatch:
        values["rows"] = tuple((r["id"], r["phase"], r["tokens"], r["emits"],
                                r.get("token_ids")) for r in values["rows"])
    return cls(**values)
