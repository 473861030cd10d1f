"""The event stream's JSON lines written by hand, where a run writes many alike:
a listener that takes lines (`LineListener`), a snapshot's and a dispatch's line
without building the record (`snapshot_line`, `dispatch_line`, the same bytes
as the record's own `to_json`), a dispatch's rows as text (`rows_text`, kept
for a folded stretch that repeats one rows tuple), and a folded stretch's
snapshot and dispatch lines at once (`steady_lines`).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only named in annotations; events.py imports this module
    from .events import Event

__all__ = ["LineListener", "snapshot_line", "dispatch_line", "rows_text", "steady_lines",
           "json_string", "encode_json"]

encode_json = json.JSONEncoder(separators=(",", ":")).encode
json_string = json.encoder.encode_basestring_ascii  # a JSON string literal, C-accelerated


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
        """Write one line of the event stream (a subclass says where)."""
        raise NotImplementedError

    def write_all(self, lines: list[str]) -> None:
        """Write several lines, in order."""
        for line in lines:
            self.write(line)



def snapshot_line(tick: int, waiting: int, running: int, reserved: int, allocated: int,
                  draining: int, free: int, cached: int | None, policy: str | None,
                  clock: Any) -> str:
    """`Snapshot(...).to_json(policy, clock)` without the record: one per dispatch,
    written by hand, the same bytes as the generic path."""
    tag = "" if policy is None else f'"policy":{json_string(policy)},'
    cached = "" if cached is None else f',"cached":{cached}'
    when = (f'"tick":{tick}' if clock is None or not clock.in_seconds
            else f'"time":{clock.text(tick)}')
    return (f'{{{when},"event":"snapshot",{tag}"waiting":{waiting},'
            f'"running":{running},"reserved":{reserved},'
            f'"allocated":{allocated},"draining":{draining},'
            f'"free":{free}{cached}}}')


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
        head += f'"policy":{json_string(policy)},'
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
                    row = plain[rid] = (f'{{"id":{json_string(rid)},"phase":"decode",'
                                        '"tokens":1,"emits":true}')
                parts.append(row)
                continue
            row = (f'{{"id":{json_string(rid)},"phase":"{phase}","tokens":{count},'
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
    one's start, so each time is written once).

    Speed: the lines are made by `str.format` mapped over the columns, in C, not
    by a loop over the steps (a folded stretch on the Azure trace with
    `--events` is about 13 dispatches, 377,000 of them in all)."""
    if not steps:
        return []
    seconds = clock is not None and clock.in_seconds
    key = '{{"time":' if seconds else '{{"tick":'  # (a `format` template's braces)
    tag = "" if policy is None else f'"policy":{json_string(policy)},'
    ticks, dones, held, free = (list(column) for column in zip(*steps))
    done_texts = clock.texts(dones) if seconds else list(map(str, dones))
    if ticks[1:] == dones[:-1]:  # (always, in a fold: each starts where the last ended)
        tick_texts = [clock.text(ticks[0]) if seconds else str(ticks[0])]
        tick_texts += done_texts[:-1]
    else:
        tick_texts = clock.texts(ticks) if seconds else list(map(str, ticks))
    # The constant parts, braces doubled for `format` (a rows text holds ids).
    snapshot = _formatting(f',"event":"snapshot",{tag}"waiting":{waiting},"running":'
                           f'{running},"reserved":{reserved},"allocated":')
    drain = f',"draining":{draining},"free":'
    dispatch = _formatting(f',"event":"dispatch",{tag}"rows":[{rows_text(rows)}],'
                           f'"tokens":{tokens},"done":')
    out: list[str] = [""] * (2 * len(steps))
    out[0::2] = map((key + "{}" + snapshot + "{}" + drain + "{}}}").format,
                    tick_texts, held, free)
    out[1::2] = map((key + "{}" + dispatch + "{}}}").format, tick_texts, done_texts)
    return out


def _formatting(text: str) -> str:
    """`text` as a literal part of a `str.format` template."""
    return text.replace("{", "{{").replace("}", "}}")


# The last rows tuple written and its JSON text (kept with the tuple itself, so
# that the identity test cannot match a new tuple at a reused address).
_LAST_ROWS: list = [None, ""]
_DECODE_ROWS: dict[str, str] = {}  # a request's plain decode row, as text
