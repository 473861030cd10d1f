"""Reading and validating trace files (§2, rule T1).

A trace is JSONL: one object per line, `type` selecting the record. Every
problem is reported as `file:line: what is wrong, got what`, all problems of
a file together (capped at `MAX_PROBLEMS`), and never as a traceback. The
result is a `Trace`: the validated config, the `Workload` the engine replays
and the `expect` records `check` verifies.

Times in a trace (arrival, deadline, a cancel's or preempt's `at`, an
expect's `at`) are in the config's `time_unit`: whole ticks by default, or
numbers of seconds or milliseconds (`s`, `ms`) for real traces.

An expectation compares a field for equality, or holds it to a bound or a
tolerance: `{"max": 0.5}`, `{"min": 1, "max": 3}`, `{"approx": 3504.1,
"rel": 0.001}` (or `"abs"`; `approx` alone allows a relative 1e-6).

This module reads a file (whole, or streamed when large) into a `Trace`; the
checks live in `trace_records` (one record), `trace_validator` (across lines)
and `trace_config` (the options), the line decoding in `json_lines`.
"""
from __future__ import annotations

import dataclasses
import json
import os
from bisect import bisect_right
from functools import partial
from itertools import chain, groupby
from operator import itemgetter
from typing import Any, Callable, Iterable, Iterator

from ..records.errors import UsageError
from ..records.frozen import Frozen, record
from ..records.workload import RequestSpec, Workload
from .inputs import read_bounded, read_stdin
from .json_lines import decode_line
from .problems import Problems
from .trace_fast_path import Columns, block_specs, common_block, common_request
from .trace_records import Expectation, RecordChecker, checked_spec, parse_request
from .trace_validator import Validator
from .validated_copy import ValidatedCopy

__all__ = ["Trace", "parse_trace", "read_trace", "read_whole_trace"]

# Trace files larger than this are validated and replayed as they are read
# (`read_trace`); smaller ones are read whole, which is faster.
STREAM_ABOVE = 4 * 2 ** 20
# Lines are validated in blocks of about this many bytes (whole lines: about 1,500
# generated requests), each offered whole to `common_block` first, and kept so for
# the replays (`ValidatedCopy`). A streamed replay holds one block's specs at a time
# (about 0.3 MB).
BLOCK = 2 ** 17


@record  # (frozen.py: no methods generated at start-up, as a frozen dataclass's)
class Trace(Frozen):
    """A validated trace."""

    name: str
    config: dict[str, Any]
    workload: Workload
    expects: tuple[Expectation, ...]
    # The folder of the trace file (None: read from standard input or built in
    # memory): a relative FILE.py:CLASS its config names is taken from there.
    directory: str | None = None

    @property
    def time_unit(self) -> str:
        """The unit of the trace's times: `tick`, `s` or `ms`."""
        return self.config.get("time_unit", "tick")

    def describe(self) -> str:
        """The one-line summary `validate` prints."""
        w = self.workload

        def count(n: int, noun: str) -> str:
            return f"{n:,} {noun}" + ("" if n == 1 else "s")

        parts = [count(len(w), "request")]
        if len(w):
            unit = "ticks" if self.time_unit == "tick" else self.time_unit
            parts.append(f"arrivals {w.first_arrival:,}..{w.last_arrival:,} {unit}")
        parts.append(count(len(w.cancels), "cancel"))
        parts.append(count(len(w.preempts), "preempt"))
        parts.append(count(len(self.expects), "expect"))
        if self.config:
            parts.append("config: " + ", ".join(
                f"{k}={json.dumps(v)}" for k, v in self.config.items()))
        return f"{self.name}: ok, " + ", ".join(parts)


def _validated(checker: Validator, name: str, workload: Workload | None = None) -> Trace:
    """The trace a validator has checked (its requests in memory unless `workload` is
    given)."""
    cancels, preempts = checker.cancels_and_preempts()
    if workload is None:
        workload = _in_memory(checker.specs, checker.blocks, cancels, preempts)
    return Trace(name, checker.config, workload, tuple(checker.expects))


def _plain(spec: RequestSpec) -> bool:
    """Whether `spec` is what `Workload.plain` makes of its id, arrival and counts."""
    return (type(spec.max_tokens) is int and spec.max_tokens == spec.output_tokens
            and type(spec.priority) is int and spec.priority == 0 and spec.deadline is None
            and spec.prompt_token_ids is None and spec.output_token_ids is None
            and spec.block_hashes is None)


def _in_memory(specs: list[RequestSpec], blocks: list[tuple[int, Columns]], cancels,
               preempts) -> Workload:
    """The workload of a trace read in memory: `specs`, read a line at a time, and
    `blocks`, (first line, columns) of blocks read whole (`Validator`). Plain
    (`Workload.plain`) when every request is: the columns in line order, then by
    arrival, ties in line order (T2: `Workload.build`'s order, a stable sort)."""
    if (not blocks or not all(map(_plain, specs))
            or any(columns.hashes is not None for _, columns in blocks)):
        return Workload.build(specs + [spec for number, columns in blocks
                                       for spec in block_specs(columns, number)],
                              cancels, preempts)
    starts = [number for number, _ in blocks]
    pieces = [(number, c.ids, range(number, number + len(c.ids)), c.arrivals, c.prompts,
               c.outputs) for number, c in blocks]
    for _, run in groupby(specs, key=lambda s: bisect_right(starts, s.index)):
        run = list(run)  # (lines between two blocks)
        pieces.append((run[0].index, [s.id for s in run], [s.index for s in run],
                       [s.arrival for s in run], [s.prompt_tokens for s in run],
                       [s.output_tokens for s in run]))
    pieces.sort(key=itemgetter(0))
    columns = [list(chain.from_iterable(map(itemgetter(k), pieces))) for k in range(1, 6)]
    arrivals = columns[2]
    if arrivals != sorted(arrivals):
        order = sorted(range(len(arrivals)), key=arrivals.__getitem__)
        columns = [list(map(column.__getitem__, order)) for column in columns]
    return Workload.plain(*columns, cancels, preempts)


def _head(block: bytes, whole: int) -> int:
    """The length of the lines of a trace's first block before its first request line
    as `generate` and `convert` write it (a config), among its first `whole` bytes
    (whole lines) and within `BLOCK`: 0 if the block starts with one or has none.
    They are a block of their own, so that the rest of the first block can be read
    whole (`common_block`). Speed (issue 26): the converted Azure trace's config
    line had its first 1,350 requests read a line at a time (benchmarks/README.md,
    "twenty-seventh steps", helper az29)."""
    if block.startswith(b'{"type":"request"'):
        return 0
    return block.find(b'\n{"type":"request"', 0, min(whole, BLOCK)) + 1


def _blocks(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(number of its first line, block) of a trace in memory: its head (`_head`), then
    blocks of whole lines of about `BLOCK` bytes, each ending in a newline, then what
    follows the last newline (one line, if not empty)."""
    whole = data.rfind(b"\n") + 1
    number, start = 1, _head(data, whole)
    if start:
        yield number, data[:start]
        number += data.count(b"\n", 0, start)
    while start < whole:
        end = data.find(b"\n", start + BLOCK - 1, whole) + 1 or whole
        block = data[start:end]
        yield number, block
        number += block.count(b"\n")
        start = end
    if whole < len(data):
        yield number, data[whole:]


def parse_trace(data: bytes, name: str) -> Trace:
    """Validate a whole trace held in memory; raise `TraceError` listing every problem."""
    checker = Validator(name, streamed=False)
    for number, block in _blocks(data):
        checker.feed_block(number, block)
    checker.finish()
    return _validated(checker, name)


def _file_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its newline) of a file, read as it goes."""
    for number, raw in _raw_lines(path):
        yield number, raw[:-1] if raw.endswith(b"\n") else raw


def _raw_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line with its newline) of a file, read as it goes."""
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    with handle:
        try:
            yield from enumerate(handle, start=1)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read trace: {exc.strerror or exc}") from None


def _file_blocks(path: str) -> Iterator[bytes]:
    """The blocks of a file read as it goes, as `_blocks` gives them (without their
    lines' numbers: the reader counts them): the validation of a long trace takes it
    a block at a time, each offered whole to `common_block`."""
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    with handle:
        rest = b""
        head = True
        while True:
            try:
                data = handle.read(BLOCK)
            except OSError as exc:
                raise UsageError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
            if not data:
                break
            whole = data.rfind(b"\n") + 1
            if not whole:  # (a line longer than a block: read on)
                rest += data
                continue
            block = rest + data[:whole]
            if head:
                head = _head(block, len(block))
                if head:
                    yield block[:head]
                    block = block[head:]
                head = False
            yield block
            rest = data[whole:]
        if rest:
            yield rest


def _stream_requests(path: str, config: dict[str, Any], copy: ValidatedCopy
                     ) -> Iterator[RequestSpec]:
    """The requests of a validated trace file in file order, read back from what its
    validation kept (`copy`): a block at a time, whose specs are handed out by `chain`
    (in C: no Python frame a request)."""
    return chain.from_iterable(_block_requests(path, config, copy))


def _block_requests(path: str, config: dict[str, Any], copy: ValidatedCopy
                    ) -> Iterator[Iterable[RequestSpec]]:
    """The requests of each block of a validated trace file, in file order."""
    hbs = config.get("hash_block_size") or config.get("block_size") or 16
    unit = config.get("time_unit", "tick")
    blocks = copy.blocks() if copy.kept else _converted_blocks(path, unit, hbs)
    for first, kept in blocks:
        if type(kept) is bytes:
            yield _line_requests(path, first, kept, unit, hbs)
        else:  # every line of the block written by `generate` or `convert`, converted
            yield block_specs(kept, first)


def _numbered_blocks(path: str, convert: Callable[[int, bytes], Columns | None]
                     ) -> Iterator[tuple[int, bytes, Columns | None]]:
    """(first line's number, block, its columns or None) of each block of a trace file
    (`_file_blocks`), `convert(number, block)` giving a block's columns: validation's
    (`read_trace`) and a replay's reading the file again (`_converted_blocks`) number
    the lines here alike."""
    number = 1
    for block in _file_blocks(path):
        columns = convert(number, block)
        yield number, block, columns
        # (a block of columns has a line a request: its newlines need no count)
        number += len(columns.ids) if columns is not None else block.count(b"\n")


def _converted_blocks(path: str, unit: str, hbs: int
                      ) -> Iterator[tuple[int, bytes | Columns]]:
    """(first line's number, columns or bytes) of each block of a validated trace file
    read again, as its validation converted them (`ValidatedCopy.blocks`): for a copy
    that kept nothing (it was sent to another process)."""
    for number, block, columns in _numbered_blocks(
            path, lambda _number, block: common_block(block, unit, hbs)):
        yield number, block if columns is None else columns


def _line_requests(path: str, first: int, block: bytes, unit: str, hbs: int
                   ) -> Iterator[RequestSpec]:
    """The requests of a block of a validated trace file, a line at a time."""
    lines = block.split(b"\n")
    if block.endswith(b"\n"):
        lines.pop()  # (what follows the last newline: no line)
    problems = Problems(path)
    for number, raw in enumerate(lines, first):
        spec = common_request(raw, number, unit, hbs)  # the common line, in few operations
        if spec is not None:
            yield spec
            continue
        if b"request" not in raw:
            continue
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        value, problem = decode_line(raw)
        if problem or not isinstance(value, dict) or value.get("type") != "request":
            continue
        try:
            yield checked_spec(value, number)
        except (KeyError, TypeError):  # the file changed since it was checked
            label = value.get("id")
            parse_request(RecordChecker(problems, number, "request", value, label),
                          hbs, unit)
            problems.raise_if_any()
            raise


def read_trace(path: str, keep: bool = True) -> Trace:
    """Read and validate a trace file (`-` is standard input, read whole).

    A file larger than STREAM_ABOVE bytes is read once, a block at a time, to
    validate it; each block, as validation converted it, goes to a temporary
    file (`ValidatedCopy`) that each replay reads back a block at a time, so a
    replay holds only the requests that are live. `keep` false (`validate`,
    which replays nothing): no copy is written, and a replay would read the
    file again. Its requests out of arrival
    order in the file are sorted in memory instead (about 1 KB each). A
    smaller file is read whole.
    """
    if path == "-" or not os.path.isfile(path) or os.path.getsize(path) <= STREAM_ABOVE:
        return read_whole_trace(path)[0]
    checker = Validator(path, streamed=True)
    copy = ValidatedCopy(keep)  # (each block as validation read it, for the replays)
    try:
        for number, block, columns in _numbered_blocks(path, checker.feed_block):
            copy.add(number, block, columns)
        checker.finish(lambda: _file_lines(path))
        copy.seal()  # (before any replay, or a worker process inheriting it)
    except BaseException:
        copy.close()
        raise
    config = checker.config
    source = partial(_stream_requests, path, config, copy)
    cancels, preempts = checker.cancels_and_preempts()
    if checker.in_order:
        workload = Workload.streamed(source, checker.count, checker.span, cancels, preempts,
                                     checker.largest)
    else:
        workload = Workload.build(list(source()), cancels, preempts)
    return dataclasses.replace(_validated(checker, path, workload), directory=_folder(path))


def read_whole_trace(path: str) -> tuple[Trace, bytes]:
    """The trace at `path` (`-`: standard input) read whole, and its bytes: for a
    caller that needs both from one read (a sweep's digest of what is not a regular
    file, which a second read would find empty or wait on)."""
    if path == "-":
        data = read_stdin()
        return parse_trace(data, "<stdin>"), data
    try:
        with open(path, "rb") as handle:
            data = read_bounded(handle, path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    return dataclasses.replace(parse_trace(data, path), directory=_folder(path)), data


def _folder(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))
