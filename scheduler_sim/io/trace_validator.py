"""A trace validated a line at a time (`Validator.feed`), then what spans lines
(`Validator.finish`): duplicate request ids, and cancels, preempts and expects
that name a request the trace does not have or act before its arrival.

In memory it keeps every request; streamed, a 64-bit digest of each id, in
memory that does not grow with the trace (`id_digests`: past 65,536 of
them, in a temporary file), reading the file again only to name duplicates,
or to find the requests that cancels, preempts and expects name. (The ids of
the file's first blocks, while they rise strictly, cannot repeat one another:
they are digested only if some id after them is, reading their lines again.)

A line is first offered to `trace_fast_path.common_request`, which recognises the
common well-formed request in a few operations; every other line, and a request
whose id an earlier line has, goes through the full checks, which alone report.
A block of lines (`feed_block`) is first offered whole to `common_block`: when
every line of it is a request as `generate` and `convert` write it, it is kept
as each line's `_take` would keep it; any other block is fed a line at a time.
"""
from __future__ import annotations

import os
from itertools import islice
from operator import lt
from typing import Any, Callable, Iterable

from ..records.option_values import show
from ..records.options import Options
from ..records.workload import Action, RequestSpec
from .id_digests import IdDigests
from .json_lines import decode_line, json_kind
from .problems import Problems, did_you_mean
from .trace_config import check_options
from .trace_fast_path import Columns, common_block, common_request
from .trace_records import ACTION_KEYS, Expectation, RecordChecker, parse_expect, parse_request

__all__ = ["Validator", "RECORD_TYPES"]

RECORD_TYPES = ("config", "request", "cancel", "preempt", "expect")
# "Did you mean" hints for an unknown request id come from the first ids.
SUGGEST_FROM = 10_000
HEAD_LINES = 20  # the lines a raw public trace is recognised by (`importers.guess_format`)
_DIGESTS_AT_ONCE = 4096  # the run's ids digested again, this many at a time at most


# A request id as a signed 64-bit digest (streamed validation keeps these): the
# string's own hash, made in C and cached in the string. Equal ids have equal
# digests, which is all the check needs; two different ids sharing one (about once
# in 2^64 pairs, whatever the hash's per-process seed) only make `finish` read
# the file again, where `_report_duplicates` compares the ids themselves. (A
# blake2b digest of the UTF-8 bytes before: 5.2 against 0.35 us an id, timeit on
# the loaded machine; about 1 us of each streamed request's validation.)
_digest = hash


class Validator:
    """Validates a trace a line at a time (`feed`), then checks what spans lines
    (duplicate ids, cancels and expects naming requests) in `finish`.

    In memory (`streamed` false) it keeps every request. Streamed, it keeps
    per request only a 64-bit digest of its id (8 bytes), so that a file of
    millions of requests validates in little memory, and the requests are read
    again from the file when replayed.
    """

    def __init__(self, name: str, streamed: bool) -> None:
        self.problems = Problems(name)
        self.streamed = streamed
        self.config: dict[str, Any] = {}
        # What the config says of every record: the unit of its times, and the tokens a
        # prefix hash covers (config.hash_block_size, else config.block_size, else 16).
        self.unit = "tick"
        self.hash_block_size = 16
        self.specs: list[RequestSpec] = []  # in memory: those read a line at a time
        self.blocks: list[tuple[int, Columns]] = []  # and (first line, columns) of blocks
        self.actions: list[tuple[Action, RecordChecker]] = []
        self.expects: list[Expectation] = []
        self.first_line: dict[str, int] = {}  # in memory: id -> its line
        # Streamed: each request's id digest, in bounded memory (id_digests.py), but for
        # the leading run of blocks whose ids rise (`run`).
        self.digests = IdDigests()
        # Streamed: the file's first requests, while their ids rise strictly, each above
        # every id before it, are kept without digests: no id among them can repeat
        # another. `run` lists the (first line, lines) of their blocks (`_take_block`); a
        # request read alone (`_take_alone`: a file's last line without its newline, a
        # block shared with cancels) stretches the last pair to its line. The first id
        # digested after them ends the run (`run_open` false); `finish` reads the run's
        # lines again to digest their ids (`_digest_run`) only if an id digested after
        # it is not above the run's last (`after_least`). Speed (issue 26): the
        # validation of 100,000 generated requests, whose ids rise from the first to the
        # last, 13,107 -> 10,770 instructions a line (a digest put in its bucket 1,515,
        # looked for among its bucket's 661; callgrind, benchmarks/README.md,
        # "fifteenth steps", helper mil11).
        self.run: list[tuple[int, int]] = []
        self.run_open = streamed
        self.run_last: str | None = None  # the run's highest id
        self.after_least: str | None = None  # the least id digested after the run
        # Streamed only (in memory, `Workload.build` finds them from the requests):
        self.count = 0
        self.span: tuple[float, float] | None = None
        self.in_order = True  # arrivals never decrease in file order
        self.largest: RequestSpec | None = None  # the most prompt + max_tokens
        self.some_ids: list[str] = []  # the first SUGGEST_FROM ids, for "did you mean"
        self.seen_record = False
        # Lines of the file's head that are no trace record at all (no JSON object,
        # or one without `type`), and whether any line is a record of a known type:
        # a file of the first kind only is most likely a raw public trace (`_hint_convert`).
        self.untyped_head: list[bytes] = []
        self.typed = False

    def feed(self, number: int, raw: bytes) -> None:
        """Check one line (with or without its newline)."""
        spec = common_request(raw, number, self.unit, self.hash_block_size)
        if spec is None or not self._take(spec, number):
            self._check(number, raw)

    def feed_block(self, number: int, block: bytes) -> Columns | None:
        """Check a block of lines, the first being line `number`: whole lines, each
        ending in a newline, or one last line without it. Return its columns if every
        line of it is a request as `generate` and `convert` write it (`common_block`),
        else None."""
        columns = common_block(block, self.unit, self.hash_block_size)
        if columns is None or not self._take_block(columns, number):
            lines = block.split(b"\n")
            if block.endswith(b"\n"):
                lines.pop()  # (what follows the last newline: no line)
            for line, raw in enumerate(lines, number):
                self.feed(line, raw)
        return columns

    def _take_block(self, columns: Columns, number: int) -> bool:
        """Keep a block of well-formed requests (`common_block`) as `_take` keeps each
        of them; False, keeping nothing, if any id is not new (in memory) or, streamed,
        if an arrival comes before the one above it (the span as `_note_arrival`
        makes it)."""
        ids, arrivals = columns.ids, columns.arrivals
        if self.streamed:
            span = self.span
            if (span is not None and arrivals[0] < span[1]) or arrivals != sorted(arrivals):
                return False
            last = self.run_last
            if (self.run_open and (last is None or ids[0] > last)
                    and all(map(lt, ids, islice(ids, 1, None)))):
                self.run.append((number, len(ids)))
                self.run_last = ids[-1]
            else:
                self._past_run(min(ids))
                self.digests.add_all(list(map(_digest, ids)))
            self.count += len(ids)
            self.span = (arrivals[0] if span is None else span[0], arrivals[-1])
            sums = list(map(int.__add__, columns.prompts, columns.outputs))
            most = max(sums)
            largest = self.largest
            if largest is None or most > largest.prompt_tokens + largest.max_tokens:
                at = sums.index(most)  # (the first of them, as `_note_arrival` keeps)
                output = columns.outputs[at]
                hashes = columns.hashes
                self.largest = RequestSpec(ids[at], number + at, arrivals[at],
                                           columns.prompts[at], output, output, 0, None,
                                           None, None, None if hashes is None else hashes[at])
        else:
            first = self.first_line
            if len(set(ids)) != len(ids) or not first.keys().isdisjoint(ids):
                return False
            first.update(zip(ids, range(number, number + len(ids))))
            self.blocks.append((number, columns))
        room = SUGGEST_FROM - len(self.some_ids)
        if room > 0:
            self.some_ids += ids[:room]
        self.seen_record = True
        return True

    def _take(self, spec: RequestSpec, number: int) -> bool:
        """Keep a well-formed request (`common_request`) as the full checks would;
        False, keeping nothing, if its id is not new (the full checks word that)."""
        rid = spec.id
        if self.streamed:
            self._take_alone(rid, number)
            self._note_arrival(spec)
        elif rid in self.first_line:
            return False
        else:
            self.first_line[rid] = number
            self.specs.append(spec)
        if len(self.some_ids) < SUGGEST_FROM:
            self.some_ids.append(rid)
        self.seen_record = True
        return True

    def _take_alone(self, rid: str, number: int) -> None:
        """Streamed: the id of a request read alone, on line `number`: in the run if
        the run is open and the id is above its last (the last pair stretched to this
        line, over any lines of other records between), else digested."""
        last = self.run_last
        if self.run_open and (last is None or rid > last):
            run = self.run
            if run:
                start = run[-1][0]
                run[-1] = (start, number - start + 1)
            else:
                run.append((number, 1))
            self.run_last = rid
            return
        self._past_run(rid)
        self.digests.add(_digest(rid))

    def _past_run(self, least: str) -> None:
        """Ids are digested from here on (the run, if open, ends); `least` the least
        of those about to be (`after_least` keeps the least of all)."""
        self.run_open = False
        if self.after_least is None or least < self.after_least:
            self.after_least = least

    def _check(self, number: int, raw: bytes) -> None:
        """Check one line with every check, reporting each problem."""
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw.strip():
            return
        problems = self.problems
        value, problem = decode_line(raw)
        if problem or not isinstance(value, dict) or value.get("type") is None:
            problems.add(number, problem or (f"expected a JSON object, got {json_kind(value)}"
                                             if not isinstance(value, dict)
                                             else "missing field 'type'"))
            self.seen_record = True
            if number <= HEAD_LINES:
                self.untyped_head.append(raw)
            return
        kind = value["type"]
        if kind not in RECORD_TYPES:
            hint = did_you_mean(kind, RECORD_TYPES) if isinstance(kind, str) else ""
            problems.add(number, f"unknown record type {show(kind)}{hint} "
                         f"(known: {', '.join(RECORD_TYPES)})")
            self.seen_record = True
            return
        self.typed = True
        if kind == "config":
            if self.seen_record:
                problems.add(number, "config: a config record must be the first record")
            else:
                options = {k: v for k, v in value.items() if k != "type"}
                self.config = config = check_options(
                    options, lambda text: problems.add(number, "config: " + text))
                self.unit = config.get("time_unit", "tick")
                self.hash_block_size = (config.get("hash_block_size")
                                        or config.get("block_size") or 16)
                for text in Options.resolve(self.config).problems():
                    problems.add(number, "config: " + text)
            self.seen_record = True
            return
        self.seen_record = True
        label = value.get("id")
        c = RecordChecker(problems, number, kind, value, label)
        unit = self.unit
        if kind == "request":
            if isinstance(label, str) and label and len(self.some_ids) < SUGGEST_FROM:
                self.some_ids.append(label)
            hbs = self.hash_block_size
            if self.streamed:
                spec = parse_request(c, hbs, unit)
                if isinstance(label, str) and label:
                    self._take_alone(label, number)
                    if spec is not None:
                        self._note_arrival(spec)
                return
            first = self.first_line
            duplicate = isinstance(label, str) and label in first
            if duplicate:
                c.fail(f"duplicate request id {label!r} (first on line {first[label]})")
            spec = parse_request(c, hbs, unit)
            if isinstance(label, str) and label and not duplicate:
                first[label] = number  # a known id for cancels and expects
            if spec is not None and not duplicate:
                self.specs.append(spec)
        elif kind in ("cancel", "preempt"):
            c.unknown_fields(ACTION_KEYS)
            rid = c.string_id()
            at = c.time("at", unit)
            if c.ok:
                self.actions.append((Action(kind, rid, at, number), c))
        else:
            exp = parse_expect(c, unit)
            if exp is not None:
                self.expects.append(exp)

    def _note_arrival(self, spec: RequestSpec) -> None:
        arrival = spec.arrival
        largest = self.largest
        if largest is None or (spec.prompt_tokens + spec.max_tokens
                               > largest.prompt_tokens + largest.max_tokens):
            self.largest = spec
        span = self.span
        self.count += 1
        if span is None:
            self.span = (arrival, arrival)
        elif arrival < span[1]:
            self.in_order = False
            self.span = (min(span[0], arrival), span[1])
        else:
            self.span = (span[0], arrival)

    def finish(self, again: Callable[[], Iterable[tuple[int, bytes]]] | None = None) -> None:
        """The checks across lines; raise TraceError if anything is wrong. Streamed,
        `again` reads the lines once more (only if two ids share a digest)."""
        known = self._known_ids(again) if self.streamed else {
            rid: None for rid in self.first_line}
        arrivals = ({s.id: s.arrival for s in self.specs} if not self.streamed else known)
        for _, columns in self.blocks:
            arrivals.update(zip(columns.ids, columns.arrivals))
        problems = self.problems
        some = self.some_ids
        early = []
        for action, c in self.actions:
            if action.id not in known:
                c.fail(f"{action.kind} of unknown request {action.id!r}"
                       f"{did_you_mean(action.id, some)}")
            elif arrivals.get(action.id) is not None and action.at < arrivals[action.id]:
                early.append((action, c))
        for action, c in early:
            c.fail(f"at must be >= the request's arrival ({show(arrivals[action.id])}), "
                   f"got {show(action.at)}")
        for exp in self.expects:
            if exp.id is not None and exp.id not in known:
                problems.add(exp.line, f"expect: unknown request {exp.id!r}"
                             f"{did_you_mean(exp.id, some)}")
        if problems.count and self.untyped_head and not (
                self.typed or self.specs or self.blocks or self.count):
            self._hint_convert()
        problems.raise_if_any()

    def _hint_convert(self) -> None:
        """A file none of whose lines is a trace record, whose head reads as a format
        `convert` knows (a raw Mooncake, Azure, Vidur or BurstGPT file): its problems
        end with the command that converts it."""
        from .importers import guess_format  # (only on this error path)
        name = self.problems.name
        fmt = guess_format(b"\n".join(self.untyped_head).decode("utf-8", "replace"))
        if fmt is None:
            return
        source = "-" if name == "<stdin>" else name
        stem = "trace" if source == "-" else os.path.splitext(os.path.basename(name))[0]
        self.problems.hints.append(
            f"{name}: this looks like a raw {fmt} file, not a trace: convert it first, "
            f"e.g. scheduler-sim convert --from {fmt} {source} -o {stem}-v1.jsonl")

    def _known_ids(self, again) -> dict[str, Any]:
        """Streamed: report duplicate ids; return the arrival as the trace wrote it
        (None if the request was invalid) of every id that a cancel, preempt or
        expect names and a request has (reading the lines again if any is named)."""
        least = self.after_least  # (set when the run ended: an id after it may repeat one of it)
        if self.run and least is not None and least <= self.run_last:
            self._digest_run(again)
        shared = self.digests.repeated()
        if shared and again is not None:
            self._report_duplicates(shared, again)
        wanted = {a.id for a, _ in self.actions} | {e.id for e in self.expects if e.id}
        if not wanted or again is None:
            return {}
        return self._first_arrivals(wanted, again)

    def _digest_run(self, again) -> None:
        """Digest the ids of the run's lines (`run`), read again, as `_take_block` would
        have digested them."""
        if again is None:
            raise ValueError("a streamed trace's validation reads the file again to finish")
        blocks = iter(self.run)
        first, count = next(blocks)
        end = self.run[-1][0] + self.run[-1][1]  # the line after the run's last block
        digests: list[int] = []
        for number, raw in again():
            if number >= end:
                break
            while number >= first + count:
                first, count = next(blocks)
            if number < first:
                continue
            spec = common_request(raw, number, self.unit, self.hash_block_size)
            if spec is None:  # (a line the full checks read, or another record: as they read it)
                value, _ = decode_line(raw.rstrip(b"\r"))
                if not isinstance(value, dict) or value.get("type") != "request":
                    continue
                label = value.get("id")
                if not isinstance(label, str) or not label:
                    continue
            else:
                label = spec.id
            digests.append(_digest(label))
            if len(digests) >= _DIGESTS_AT_ONCE:
                self.digests.add_all(digests)
                digests = []
        self.digests.add_all(digests)

    def _first_arrivals(self, ids: set[str], again) -> dict[str, Any]:
        """Read the lines again for the first request of each id in `ids`: its arrival
        as the trace wrote it, or None if that request is not valid."""
        found: dict[str, Any] = {}
        unit, hbs = self.unit, self.hash_block_size
        quiet = Problems(self.problems.name)
        for number, raw in again():
            # (A request as `generate` and `convert` write it is read by the fast path:
            # valid, its arrival as written. Speed: 100,000 generated requests and a
            # cancel after them, 4.6674e9 -> 3.0724e9 instructions to validate; callgrind.)
            spec = common_request(raw, number, unit, hbs)
            if spec is not None:
                if spec.id in ids and spec.id not in found:
                    found[spec.id] = spec.arrival
                    if len(found) == len(ids):
                        break
                continue
            value, problem = decode_line(raw.rstrip(b"\r")) if raw.strip() else (None, "-")
            if (not problem and isinstance(value, dict) and value.get("type") == "request"
                    and isinstance(value.get("id"), str) and value["id"] in ids
                    and value["id"] not in found):
                label = value["id"]
                spec = parse_request(RecordChecker(quiet, number, "request", value, label),
                                     hbs, unit)
                found[label] = None if spec is None else value.get("arrival")
                if len(found) == len(ids):
                    break
        return found

    def _report_duplicates(self, shared: set[int], again) -> None:
        """Read the lines again to name each duplicate id with its first line."""
        first: dict[str, int] = {}
        for number, raw in again():
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            value, problem = decode_line(raw) if raw.strip() else (None, "blank")
            if problem or not isinstance(value, dict) or value.get("type") != "request":
                continue
            label = value.get("id")
            if not isinstance(label, str) or not label or _digest(label) not in shared:
                continue
            if label in first:
                self.problems.add(number, f"request {label!r}: duplicate request id "
                                  f"{label!r} (first on line {first[label]})", order=0)
            else:
                first[label] = number

    def cancels_and_preempts(self) -> tuple[list[Action], list[Action]]:
        """The valid cancel records and the valid preempt records, each in file order."""
        cancels = [a for a, _ in self.actions if a.kind == "cancel"]
        preempts = [a for a, _ in self.actions if a.kind == "preempt"]
        return cancels, preempts
