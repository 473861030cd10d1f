"""The event stream's JSON lines written by hand, where a run writes many alike:
a listener that takes lines (`LineListener`), a snapshot's and a dispatch's line
without building the record (`snapshot_line`, `dispatch_line`, the same bytes
as the record's own `to_json`), a dispatch's rows as text (`rows_text`, and
`decode_rows_text` for plain decodes from their ids), a folded stretch's
snapshot and dispatch lines at once, as the pieces of one text (`steady_parts`),
and a request's arrival, admission and finish (`arrival_line`, `admitted_line`,
`finished_line`: the records' own `to_json`, and a line listener's without them).
"""
from __future__ import annotations

import json
from itertools import compress
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:  # only named in annotations; events.py imports this module
    from .events import Event

__all__ = ["LineListener", "request_formats", "arrival_line", "admitted_line", "finished_line",
           "snapshot_line", "dispatch_line", "rows_text",
           "decodes_line", "counted_text", "prompt_row_text", "decode_rows_text",
           "steady_parts", "STEADY_STEP", "STEADY_ROWS",
           "json_string", "encode_json"]

encode_json = json.JSONEncoder(separators=(",", ":")).encode
json_string = json.encoder.encode_basestring_ascii  # a JSON string literal, C-accelerated


class LineListener:
    """A listener that writes each record as one JSON line (`write`): the engine
    may also hand it lines it wrote itself, without building the records, where
    it reports many alike (a folded stretch's snapshots and dispatches, a counted
    dispatch's, a request's arrival, admission and finish: `arrived`, `admitted`,
    `finished`, given the records' fields)."""

    def __init__(self, policy: str | None, clock: Any) -> None:
        self.policy = policy  # the tag of every line, when several policies run
        self.clock = clock
        # A request's lines: their formats and their time's text (`request_formats`).
        self.arrival, self.admission, self.finish, self.when = request_formats(policy, clock)
        # The requests whose plain decodes' rows `members_rows` wrote last; their text.
        self.rows_of: list = []
        self.rows_text = ""

    def __call__(self, event: "Event") -> None:
        self.write(event.to_json(self.policy, self.clock))

    def members_rows(self, reqs: list) -> str:
        """`decode_rows_text` of the ids of `reqs` (a list of requests, each row a plain
        decode: a counted dispatch's members, in order): the last call's text when
        `reqs` are the same requests (compared by identity, in C), else made again.

        Speed: an admission's decodes are mostly the requests of the counted start
        before it (1,581 of 1,902 admissions on the first 2,000 Azure requests
        under `continuous`): 1.7890e9 -> 1.7754e9 instructions with `--events`
        (callgrind). Editing the text where the requests differ by one request (3,606
        of the other 3,795 calls) ran more (1.7907e9): finding the place costs about
        what joining the ten or so rows does (benchmarks/README.md, "twenty-fourth
        steps", helper ev25)."""
        if reqs == self.rows_of:
            return self.rows_text
        text = _DECODE_SEP.join(map(_BY_REQUEST.__getitem__, reqs))  # (see `_ByRequest`)
        text = self.rows_text = f"{_DECODE_ROW[0]}{text}{_DECODE_ROW[1]}" if text else ""
        self.rows_of = reqs.copy()  # (the caller's list may change after)
        return text

    def write(self, line: str) -> None:
        """Write one line of the event stream (a subclass says where)."""
        raise NotImplementedError

    def write_all(self, lines: list[str]) -> None:
        """Write several lines, in order."""
        for line in lines:
            self.write(line)

    def write_text(self, text: str) -> None:
        """Write several lines given as one text, joined by newlines (no newline
        after the last): a counted start's (`counted_text`). A listener that
        writes lines one after another, each followed by a newline, may write
        the text as it is, as if one line (the events file does)."""
        self.write_all(text.split("\n"))

    def write_parts(self, parts: list[str]) -> None:
        """Write several lines given as the pieces of one text (`write_text`'s, joined by
        nothing): a folded stretch's (`steady_parts`). A listener that buffers pieces
        may keep them unjoined (the events file does). None: nothing."""
        if parts:
            self.write_text("".join(parts))

    # A request's lines, without their records (`Arrival` without a client wait,
    # `Admitted`, `Finished`): the engine hands a line listener their fields. Speed:
    # a record built (about 200 ns) and written through `to_json` was about 0.65 us a
    # line (58,098 on the Azure trace; benchmarks/README.md, "twenty-third steps", ev24).
    def arrived(self, tick: int, rid: str) -> None:
        """Write `Arrival(tick, rid)`'s line (no client wait)."""
        self.write(self.arrival % (self.when(tick), json_string(rid)))

    def admitted(self, tick: int, rid: str, reserved: int, resumed: bool, cached: int) -> None:
        """Write `Admitted(tick, rid, reserved, resumed, cached)`'s line."""
        self.write(self.admission % (self.when(tick), json_string(rid), reserved,
                                     "true" if resumed else "false", cached))

    def finished(self, tick: int, rid: str, status: str) -> None:
        """Write `Finished(tick, rid, status)`'s line."""
        self.write(self.finish % (self.when(tick), json_string(rid), json_string(status)))


def request_formats(policy: str | None, clock: Any) -> tuple[str, str, str, Any]:
    """The `%` formats of a request's arrival (time, quoted id), admission (time, id,
    reserved, resumed as `true`/`false`, cached tokens) and finish (time, id, quoted
    status) lines (the records' `to_json`) for `policy`'s tag and `clock`, and what
    makes a time's text from its tick (`Clock.text`, or `str` in ticks). Speed: a
    line listener makes them once, a line then one format, where it was two calls
    and two or three formats (58,098 request lines on the Azure trace;
    benchmarks/README.md, "twenty-eighth steps", helper ev30)."""
    seconds = clock is not None and clock.in_seconds
    key = '{"time":' if seconds else '{"tick":'
    tag = "" if policy is None else f'"policy":{json_string(policy)},'.replace("%", "%%")
    return (f'{key}%s,"event":"arrival",{tag}"id":%s}}',
            f'{key}%s,"event":"admitted",{tag}"id":%s,"reserved":%s,"resumed":%s,'
            '"cached_tokens":%s}', f'{key}%s,"event":"finished",{tag}"id":%s,"status":%s}}',
            clock.text if seconds else str)


def arrival_line(tick: int, rid: str, policy: str | None, clock: Any) -> str:
    """`Arrival(tick, rid).to_json(policy, clock)` (no client wait), without the record."""
    line, _, _, when = request_formats(policy, clock)
    return line % (when(tick), json_string(rid))


def admitted_line(tick: int, rid: str, reserved: int, resumed: bool, cached: int,
                  policy: str | None, clock: Any) -> str:
    """`Admitted(tick, rid, reserved, resumed, cached).to_json(policy, clock)`."""
    _, line, _, when = request_formats(policy, clock)
    return line % (when(tick), json_string(rid), reserved, "true" if resumed else "false",
                   cached)


def finished_line(tick: int, rid: str, status: str, policy: str | None, clock: Any) -> str:
    """`Finished(tick, rid, status).to_json(policy, clock)`, without the record."""
    _, _, line, when = request_formats(policy, clock)
    return line % (when(tick), json_string(rid), json_string(status))


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
    return _dispatch(tick, rows_text(rows), tokens, done, policy, clock)


def decodes_line(tick: int, ids: Iterable[str], tokens: int, done: int, policy: str | None,
                 clock: Any) -> str:
    """`dispatch_line` of a dispatch of plain decodes only, from their requests' ids
    (a dispatch of the decode cohort's members, without the rows tuple)."""
    return _dispatch(tick, decode_rows_text(ids), tokens, done, policy, clock)


def counted_text(tick: int, counts: tuple | None, rows: str, tokens: int, done: int | None,
                 policy: str | None, clock: Any) -> str:
    """A dispatch, its rows given as text (`decode_rows_text` for plain decodes), after
    its snapshot if `counts` gives one (`Snapshot`'s counts in its field order:
    waiting, running, reserved, allocated, draining, free, cached or None): the
    lines `snapshot_line` and `dispatch_line` write, joined by a newline into one
    text for `LineListener.write_text`, the start's time made once for both (the
    counted dispatches' and admissions' starts, engine/fast/counted.py); `done`
    None: the text ends at the dispatch's `"done":`, its end written by a folded
    stretch after it (`steady_parts`'s `start`). Speed:
    the counts a tuple, not a dictionary read by name (54,306 snapshots on the
    Azure trace; benchmarks/README.md, "fifteenth steps", helper ev11)."""
    if clock is None or not clock.in_seconds:
        key, start, end = '{"tick":', tick, done
    else:
        key, start = '{"time":', clock.text(tick)
        end = None if done is None else clock.text(done)
    close = "}"
    if end is None:  # (its end left open: see `steady_parts`'s `start`)
        end = close = ""
    tag = "" if policy is None else f'"policy":{json_string(policy)},'
    if counts is None:
        return (f'{key}{start},"event":"dispatch",{tag}"rows":[{rows}],"tokens":{tokens},'
                f'"done":{end}{close}')
    waiting, running, reserved, allocated, draining, free, cached = counts
    cached = "" if cached is None else f',"cached":{cached}'
    # (Both lines in one format: the rows' text, most of the bytes, copied once.
    # Speed: the first 2,000 Azure requests under continuous with --events,
    # 2.2152e9 -> 2.2106e9 instructions, callgrind; benchmarks/README.md,
    # "thirteenth steps", helper ev9. The time's text put in twice rather than a
    # head made first and copied in: see "fourteenth steps", helper ev10.)
    return (f'{key}{start},"event":"snapshot",{tag}"waiting":{waiting},'
            f'"running":{running},"reserved":{reserved},'
            f'"allocated":{allocated},"draining":{draining},'
            f'"free":{free}{cached}}}\n'
            f'{key}{start},"event":"dispatch",{tag}"rows":[{rows}],"tokens":{tokens},'
            f'"done":{end}{close}')


def prompt_row_text(rid: str, tokens: int, ids: list[int] | None) -> str:
    """`rows_text` of one row of a fresh prompt (`tokens` of prefill that emits, its
    token ids if given), from its parts: an admission's newcomer
    (engine/fast/counted.py). Speed: no rows tuple built and read again (18,253
    admissions on the Azure trace; see `counted_text`)."""
    row = f'{{"id":{_QUOTED[rid]},"phase":"prefill","tokens":{tokens},"emits":true'
    if ids is not None:
        return f'{row},"token_ids":[{",".join(map(str, ids))}]}}'
    return row + "}"


def _dispatch(tick: int, rows: str, tokens: int, done: int, policy: str | None,
              clock: Any) -> str:
    """A dispatch's line, its rows given as text."""
    if clock is None or not clock.in_seconds:
        head = f'{{"tick":{tick},"event":"dispatch",'
    else:
        head = f'{{"time":{clock.text(tick)},"event":"dispatch",'
        done = clock.text(done)
    if policy is not None:
        head += f'"policy":{json_string(policy)},'
    return f'{head}"rows":[{rows}],"tokens":{tokens},"done":{done}}}'


def rows_text(rows: tuple) -> str:
    """The JSON text of a dispatch's rows, inside the brackets."""
    last = _LAST_ROWS
    if last[0] is rows:  # a dispatch line written again for the same record
        return last[1]
    others = list(compress(range(len(rows)), map(_PLAIN_DECODE.__ne__, map(_row_kind, rows))))
    if not others:
        text = decode_rows_text(map(_row_id, rows))  # (the common dispatch, in C)
    else:
        # The rows other than plain decodes one by one, each run of plain decodes
        # between them at once (`decode_rows_text`). Speed: a dispatch the engine
        # steps is mostly decodes and a prompt's chunk (about 11 rows on the Azure
        # trace: 18,299 such lines); a Python step per row was about half the
        # instructions of its line.
        parts = []
        start = 0
        for i in others:
            if i > start:
                parts.append(decode_rows_text(map(_row_id, rows[start:i])))
            rid, phase, count, emits, ids = rows[i]
            row = (f'{{"id":{json_string(rid)},"phase":"{phase}","tokens":{count},'
                   f'"emits":{"true" if emits else "false"}')
            if ids is not None:
                row += f',"token_ids":[{",".join(map(str, ids))}]'
            parts.append(row + "}")
            start = i + 1
        if start < len(rows):
            parts.append(decode_rows_text(map(_row_id, rows[start:])))
        text = ",".join(parts)
    last[0], last[1] = rows, text
    return text


def decode_rows_text(ids: Iterable[str]) -> str:
    """`rows_text` of rows that are all plain decodes (one token, emitting, no token
    ids), from their requests' ids.

    Speed: one `str.join` with the text between two ids as its separator, each
    id's quoted text looked up in C (`_QUOTED`; `members_rows` looks them up by
    request): no Python step per row. Was a loop over the rows; then each id
    quoted by the C encoder every time (240e6 instructions of the full Azure
    trace's run under `continuous`, callgrind), ten times a look-up."""
    text = _DECODE_SEP.join(map(_QUOTED.__getitem__, ids))
    # (One format, the rows copied once: `+` twice copied them twice. Speed: see
    # `counted_text`.)
    return f"{_DECODE_ROW[0]}{text}{_DECODE_ROW[1]}" if text else ""


# A folded stretch's pieces as `steady_parts` lays them out: STEADY_STEP pieces a
# dispatch, the piece at STEADY_ROWS among them its dispatch line's middle, the rows'
# text (the bulk of the stretch's characters; the events file counts them by it).
STEADY_STEP, STEADY_ROWS = 7, 6


def steady_parts(starts: list[int], last_done: int, held: Iterable[int], ids: Iterable[str],
                 waiting: int, running: int, reserved: int, draining: int, total: int,
                 tokens: int, policy: str | None, clock: Any, rows: str | None = None,
                 start: tuple | None = None) -> list[str]:
    """The snapshot and dispatch lines of a folded stretch, as the pieces of one text
    (joined by nothing they are the lines joined by newlines, no newline after
    the last; none when `starts` is empty): for the dispatch starting at
    each of `starts`, each ending where the next starts and the last at
    `last_done`, its snapshot (`held` blocks allocated, the rest of the `total`
    less `draining` free) and its dispatch of a plain decode for each of the
    requests `ids` (`rows`: their rows' text, `decode_rows_text(ids)`, if the
    caller has it), what `snapshot_line` and `dispatch_line` write. `start`: a
    counted start just before the stretch, as (its time, its snapshot's counts in
    `counted_text`'s order), written first as `counted_text` writes it, its end
    left open for the stretch's first start (fast/fold_records.py's `counted_fold`
    lays it out as the stretch's first dispatch where it can: `steady_lines`).

    Speed: the text is a list of its pieces, the parts that do not change (the
    rows' text among them) one shared string each, laid out by slice
    assignments in C, and each time written once (a dispatch's end is the next
    one's start); the events file joins them with its batch (io/event_file.py).
    On the Azure trace with `--events` 29,973 folded stretches write 784,862
    lines: about a third of the CPU of making them a line at a time with
    `str.format` (1.36-1.73 s against 0.54-0.59 s in one process, three runs
    each), one string to buffer, not 26. A snapshot's block counts are one piece
    looked up by the blocks held (`_BlockCounts`), not two numbers formatted."""
    if not starts:
        return []
    if rows is None:
        rows = decode_rows_text(ids)
    head = None if start is None else counted_text(*start, rows, tokens, None, policy, clock)
    return steady_lines(starts + [last_done], held, waiting, running, reserved, draining,
                        total, tokens, policy, clock, rows, head)


def steady_lines(times: list[int], held: Iterable[int], waiting: int, running: int,
                 reserved: int, draining: int, total: int, tokens: int, policy: str | None,
                 clock: Any, rows: str, head: str | None = None) -> list[str]:
    """`steady_parts`' pieces from every dispatch's start, then the last one's end
    (`times`, a list this changes; at least one dispatch), the blocks each holds
    (`held`), the rows' text and `head`, a counted start's text up to its open end,
    if any (`steady_parts`' `start`). A counted start's fold hands its times here,
    its start's first (fast/fold_records.py's `counted_fold`)."""
    seconds = clock is not None and clock.in_seconds
    key = '{"time":' if seconds else '{"tick":'
    tag = "" if policy is None else f'"policy":{json_string(policy)},'
    k = len(times) - 1
    texts = clock.texts(times, True) if seconds else list(map(str, times))
    # Step i's pieces: the end of the step before (its start) and the next line's
    # key, its start and snapshot, its block counts and the next line's key, its
    # start and dispatch; after the last, its end. So every time but the last
    # fills three places, laid out by one slice and two of the same list.
    parts: list[Any] = [None, "}\n" + key, None,
                        (f',"event":"snapshot",{tag}"waiting":{waiting},"running":{running},'
                         f'"reserved":{reserved},"allocated":'),
                        None, None,
                        f',"event":"dispatch",{tag}"rows":[{rows}],"tokens":{tokens},"done":'
                        ] * k
    # (Its last two pieces added in place: `+ [None, "}"]` made a second list and
    # copied the first into it. Speed: the first 2,000 Azure requests under
    # `continuous` with `--events`, 1.8524e9 -> 1.8490e9 instructions (callgrind),
    # about 15 ns a folded dispatch in one process; benchmarks/README.md,
    # "twenty-second steps", helper ev22.)
    parts += (None, "}")
    parts[0::STEADY_STEP] = texts  # (k + 1 places: each step's start, then the last end)
    texts.pop()
    parts[2::STEADY_STEP] = parts[5::STEADY_STEP] = texts
    if head is None:
        parts[0], parts[1] = "", key  # (the first line ends nothing before it)
    else:
        # (It ends the head's dispatch. Speed: the counted start's end made once,
        # not by `Clock.text` and again here; see `Counting._write_counted`.)
        parts[0], parts[1] = head, parts[0] + parts[1]
    counts = _COUNTS.get((draining, total, key))  # (`_block_counts`, its common case inline)
    if counts is None:
        counts = _block_counts(draining, total, key)
    parts[4::STEADY_STEP] = map(counts.__getitem__, held)
    return parts


class _BlockCounts(dict):
    """A snapshot line's text from its count of blocks held to the next line's key:
    `H,"draining":D,"free":F}\n{"time":` (or `"tick":`) for each H, F = total - D
    - H, made when first asked. Speed: a folded stretch's snapshots take their
    counts from here (the held counts of a run repeat: on the Azure trace under
    `continuous` the 392,000 folded snapshots hold one of a few thousand), where
    formatting the two numbers of each was a fifth of `steady_parts`'s
    instructions."""

    def __init__(self, draining: int, total: int, key: str) -> None:
        super().__init__()
        self.drain = f',"draining":{draining},"free":'
        self.free = total - draining
        self.end = "}\n" + key

    def __missing__(self, held: int) -> str:
        if len(self) >= 1 << 14:
            self.clear()  # (a bound on memory: each text is made again when asked)
        text = self[held] = f"{held}{self.drain}{self.free - held}{self.end}"
        return text


def _block_counts(draining: int, total: int, key: str) -> _BlockCounts:
    """The `_BlockCounts` of a pool of `total` blocks, `draining` of them draining."""
    counts = _COUNTS.get((draining, total, key))
    if counts is None:
        if len(_COUNTS) >= 64:
            _COUNTS.clear()
        counts = _COUNTS[draining, total, key] = _BlockCounts(draining, total, key)
    return counts


class _QuotedIds(dict):
    """Each request id's JSON string literal (`json_string`), made when first asked:
    a running request's id is quoted in every dispatch line that names it."""

    def __missing__(self, rid: str) -> str:
        if len(self) >= 1 << 14:
            self.clear()  # (a bound on memory: each text is made again when asked)
        text = self[rid] = json_string(rid)
        return text


_QUOTED = _QuotedIds()


class _ByRequest(dict):
    """Each request's quoted id (`_QUOTED[req.rid]`) by the request itself (by identity;
    the table holds it, so no other takes its place), made when first asked. Speed:
    `members_rows` read each row's id, then looked it up (36,351 texts, 369,523 rows
    on the Azure trace with `--events`): 630 -> 460 ns a text of ten rows made again;
    1.7372e9 -> 1.7265e9 instructions on its first 2,000 requests (callgrind;
    benchmarks/README.md, "twenty-sixth steps", helper ev28)."""

    def __missing__(self, req: Any) -> str:
        if len(self) >= 1 << 10:
            self.clear()  # (a bound on the requests kept: +0.5 MB of the Azure run's peak)
        text = self[req] = _QUOTED[req.rid]
        return text


_BY_REQUEST = _ByRequest()


# The texts of block counts by pool (draining, total blocks, the line's time key).
_COUNTS: dict[tuple[int, int, str], _BlockCounts] = {}


# The last rows tuple written and its JSON text (kept with the tuple itself, so
# that the identity test cannot match a new tuple at a reused address).
_LAST_ROWS: list = [None, ""]
# A plain decode row: (phase, tokens, emits, token ids) of its tuple, and its
# text before and after the request's quoted id.
_PLAIN_DECODE = ("decode", 1, True, None)
_row_kind = itemgetter(1, 2, 3, 4)
_row_id = itemgetter(0)
_DECODE_ROW = ('{"id":', ',"phase":"decode","tokens":1,"emits":true}')
_DECODE_SEP = _DECODE_ROW[1] + "," + _DECODE_ROW[0]  # (between two ids)
