"""Event records: what the engine reports, one frozen record per kind (§11; frozen.py).

Each record knows its JSON form (`to_dict`, `to_json`) and can be rebuilt from
it (`event_from_dict`), which the round-trip tests use. Every record carries
its time and `event`; request records carry `id`. Records are built only when
somebody listens, so a run without `--events` pays nothing for them.

Records hold times in clock steps. Written out, they are in the run's unit
(`clock.Clock`): `tick` in ticks; with a cost model `time` in seconds, and
every other time field (`done`, `waited`, `client_wait`) in seconds too. The
lines written by hand, where a run writes many alike (snapshots, dispatches,
folded stretches), are `event_lines`'.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from .event_lines import (LineListener, admitted_line, arrival_line, dispatch_line, encode_json,
                          finished_line, json_string, snapshot_line)
from .frozen import Frozen, make_inits, record_class

__all__ = ["Event", "Arrival", "Rejected", "Admitted", "report_admitted", "AdmissionBlocked",
           "Snapshot", "Dispatch", "Finished", "Cancelled", "CancelIgnored", "Preempted",
           "PreemptIgnored", "Released", "Evicted", "Stalled", "Timeout", "Ratio", "Prefilled",
           "TransferStarted", "TransferDone", "KvStored", "KvLoadStarted", "KvLoadDone",
           "SwappedOut", "SwapRefused", "EVENT_TYPES", "event_from_dict", "reads"]


def reads(listener: Any, kind: str) -> bool:
    """Whether an event listener reads records of `kind`: a listener may say which kinds
    it reads as a `kinds` attribute (a set of `Event.kind` names); without one it reads
    them all. The engine skips the bookkeeping of a kind nobody reads (a fleet's
    replicas would each keep the writer of every cached block for `evicted` records)."""
    kinds = getattr(listener, "kinds", None)
    return kinds is None or kind in kinds


@record_class
class Event(Frozen):
    """Base of all records: the tick at which it happened. Frozen by `frozen.Frozen`
    (a record class of one's own: `record_class`, not `dataclass(frozen=True)`)."""

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
            parts.append('"policy":' + json_string(policy))
        times = self.times
        for name, optional in _field_names(type(self)):
            value = getattr(self, name)
            kind = type(value)
            if value is None:
                if optional:
                    continue
                text = "null"
            elif seconds and name in times:
                text = encode_json(clock.report(value))
            elif kind is str:
                text = json_string(value)
            elif kind is int:
                text = str(value)
            elif kind is bool:
                text = "true" if value else "false"
            else:
                text = encode_json(value)
            parts.append(f'"{name}":{text}')
        return ",".join(parts) + "}"


_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _field_names(cls: type) -> tuple[tuple[str, bool], ...]:
    """(name, optional) of a record's fields after `tick`, computed once per class."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(
            (f.name, f.default is None) for f in dataclasses.fields(cls)[1:])
    return names


# The records made by `_record`, given their `__init__` at the end of the module.
_MADE: list[type] = []


def _record(kind: str):
    def wrap(cls):
        cls = record_class(cls)
        cls.kind = kind
        _MADE.append(cls)
        return cls
    return wrap


@_record("arrival")
class Arrival(Event):
    """A request reached the server (E2); `client_wait` is how long it waited for a
    client slot (`max_concurrency`), left out when it did not wait."""
    times = ("client_wait",)
    id: str
    client_wait: int | None = None

    def to_json(self, policy: str | None = None, clock: Any = None) -> str:
        if self.client_wait is not None:
            return Event.to_json(self, policy, clock)
        return arrival_line(self.tick, self.id, policy, clock)


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

    def to_json(self, policy: str | None = None, clock: Any = None) -> str:
        return admitted_line(self.tick, self.id, self.reserved, self.resumed, self.cached_tokens,
                             policy, clock)


def report_admitted(emit: Any, *fields: Any) -> None:
    """`emit(Admitted(*fields))`; a line listener writes the line without the record."""
    if isinstance(emit, LineListener):
        emit.admitted(*fields)
    else:
        emit(Admitted(*fields))


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


@_record("finished")
class Finished(Event):
    """A request produced its last output (first among its tick's events, E1)."""
    id: str
    status: str

    def to_json(self, policy: str | None = None, clock: Any = None) -> str:
        return finished_line(self.tick, self.id, self.status, policy, clock)


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
    `retract` (sglang, rule `fewest-outputs`) or `priority` (sglang under order
    priority: `trigger` the more important request that needed the row).
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
    `idle` (back to its initial value on an idle server). A jump also carries the
    ratio it replaced (`previous`) and how many requests that step retracted
    (`retracted`), the figures of SGLang's retraction warning."""
    value: float
    reason: str
    previous: float | None = None
    retracted: int | None = None


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


@_record("kv_stored")
class KvStored(Event):
    """Host memory (write-through): `blocks` full blocks (of prompts, keyed by the
    dispatch starting now; or, at a request's finish or preemption, its blocks that
    hold outputs) are copied to host memory; they can be found there from `done`."""
    times = ("done",)
    blocks: int
    done: int


@_record("kv_load_started")
class KvLoadStarted(Event):
    """Host memory: a request holding its GPU prefix hit (`cached_tokens` rows) has
    `tokens` rows of its KV (`blocks` blocks) copied back into GPU blocks it holds,
    from `source` `cache` (blocks the tier cached) or `swap` (its own swapped KV);
    the copy lands at `done` (meanwhile it waits off the batch, or under `sglang`
    its batch's dispatch ends no earlier)."""
    times = ("done",)
    id: str
    source: str
    cached_tokens: int
    tokens: int
    blocks: int
    done: int


@_record("kv_load_done")
class KvLoadDone(Event):
    """Host memory: a copy back into the GPU ended after `duration`; the request
    waits again with those rows resident, or, when `aborted` (it ended meanwhile),
    nothing changes."""
    times = ("duration",)
    id: str
    source: str
    tokens: int
    duration: int
    aborted: bool


@_record("swapped_out")
class SwappedOut(Event):
    """Preemption by swap: the victim's `tokens` rows (`blocks` blocks) are copied to
    host memory; its GPU blocks drain until the copy ends at `done`."""
    times = ("done",)
    id: str
    tokens: int
    blocks: int
    done: int


@_record("swap_refused")
class SwapRefused(Event):
    """Preemption by swap found no room: the victim needs `blocks` blocks of host
    memory and only `host_free` are not held by other swapped requests, so it is
    recomputed instead."""
    id: str
    blocks: int
    host_free: int


make_inits([Event, *_MADE])  # (one exec for all: frozen.py; the base too, as a dataclass had it)


# (Every record class, by its kind, in the order of the classes above.)
EVENT_TYPES: dict[str, type[Event]] = {cls.kind: cls for cls in _MADE}


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild a record from its JSON object (ignores a `policy` field)."""
    cls = EVENT_TYPES[data["event"]]
    values = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
    if cls is Dispatch:
        values["rows"] = tuple((r["id"], r["phase"], r["tokens"], r["emits"],
                                r.get("token_ids")) for r in values["rows"])
    return cls(**values)
