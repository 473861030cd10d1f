"""`sweep merge`: the JSONL shards of a sweep read back and joined.

A shard is a file anybody may hand over, so it is read as strictly as a
trace: every file checked whole (its header field by field against the
grid it states, every row against the header's columns and grid), every
problem of every file listed as `FILE:LINE: what is wrong, got what` (at
most MAX_PROBLEMS a file), within limits no real sweep reaches
(MAX_CONFIGURATIONS configurations, MAX_SHARD_BYTES a file), never a
traceback or a hang. Nothing in a shard is run: its policies are names.
`Merged` writes what the unsharded sweep writes, byte for byte.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Callable, Iterable, Iterator

from ..engine.host_summary import HOST_RUN_FIELDS
from ..engine.summary import FLEET_RUN_FIELDS
from ..records.errors import TraceError, UsageError
from ..records.option_table import OPTIONS
from ..records.option_values import check_value, show
from .inputs import read_limited
from .json_lines import json_value, unique_keys
from .problems import Problems
from .sweep import MAX_CONFIGURATIONS, SWEEP_VERSION, fingerprint, parse_shard
from .sweep_rows import csv_text

__all__ = ["MAX_SHARD_BYTES", "HEADER_FIELDS", "Merged", "merge_shards", "read_shard"]

# What `sweep merge` reads, with limits no real sweep reaches: a grid of at most
# MAX_CONFIGURATIONS (each one a whole replay), and shard files of at most 1 GiB
# each (a row is about 2 KB: some 500,000 rows in one file).
MAX_SHARD_BYTES = 2 ** 30
# The header's fields, in the order the sweep writes them.
HEADER_FIELDS = ("sweep", "trace", "trace_sha256", "grid", "options", "configurations",
                 "shard", "columns", "fingerprint")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTENT = re.compile(rb"[^ \t\r\n]")
_TIME_UNITS = ("ticks", "s")
_NUMBERS = (int, float)  # exactly: JSON's true and false are not numbers


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


# Shards are read strictly: a duplicate key, NaN or Infinity is a problem of the line.
_DECODER = json.JSONDecoder(object_pairs_hook=unique_keys, parse_constant=_no_constant)


def _decode(raw: bytes) -> tuple[Any, str | None]:
    """One line of a shard as a JSON value, or why it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, (f"invalid UTF-8 at byte {exc.start + 1}, got "
                      f"{raw[exc.start:exc.start + 1]!r}")
    return json_value(_DECODER.decode, text)


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(number, text without its line end) of each line of a shard, read lazily, up to
    the last line that holds anything (blank lines after it are not lines)."""
    size = len(data)
    pos = number = 0
    content = 0  # the first non-blank byte at or after `pos`, once looked for
    while pos <= size:
        if pos >= content:
            found = _CONTENT.search(data, pos)
            if found is None:
                return
            content = found.start()
        end = data.find(b"\n", pos)
        end = size if end < 0 else end
        number += 1
        line = data[pos:end]
        yield number, line[:-1] if line.endswith(b"\r") else line
        pos = end + 1


def read_shard(path: str) -> bytes:
    """The bytes of a shard file (`-`: standard input), at most MAX_SHARD_BYTES."""
    return read_limited(path, MAX_SHARD_BYTES, "which no shard of a sweep is; split the "
                        "sweep into more shards")


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON spells them: 1, 1.0 and true differ, and so does key order."""
    return json.dumps(a) == json.dumps(b)


def _checked_grid(header: dict[str, Any], fail: Callable[[str], None]) -> bool:
    """Whether the header's grid is an object of sweepable options and non-empty lists
    of values each of which the option takes (checked as the sweep checks them,
    without loading a policy of one's own)."""
    grid = header.get("grid")
    if not isinstance(grid, dict) or not grid or not all(
            isinstance(values, list) and values for values in grid.values()):
        fail(f"grid must be an object of option names and non-empty lists of values, got "
             f"{show(grid)}")
        return False
    ok = True
    for name, values in grid.items():
        spec = OPTIONS.get(name)
        if spec is None or spec.trace_only:
            fail(f"grid: {name!r} is not an option a sweep can sweep")
            ok = False
            continue
        for value in values:
            problem = check_value(name, value)[1]
            if problem is None and name == "policy" and not isinstance(value, str):
                problem = f"policy values are single policy names, got {show(value)}"
            if problem is not None:
                fail(f"grid: {problem}")
                ok = False
                break
    return ok


def _checked_options(header: dict[str, Any], fail: Callable[[str], None]) -> bool:
    """Whether the header's fixed options are an object of valid option values."""
    options = header.get("options")
    if not isinstance(options, dict):
        fail(f"options must be an object of option values, got {show(options)}")
        return False
    ok = True
    for name, value in options.items():
        if name not in OPTIONS:
            fail(f"options: unknown option {name!r}")
            ok = False
            continue
        problem = check_value(name, value)[1]
        if problem is not None:
            fail(f"options: {problem}")
            ok = False
    return ok


def _check_header(problems: Problems, line: tuple[int, bytes] | None
                  ) -> dict[str, Any] | None:
    """A shard's header (its first line), each field checked; None when it is not a
    sweep's header or any field is wrong (every problem reported)."""
    if line is None:
        problems.add(1, "empty, not the JSONL output of a sweep (its first line is the "
                     "sweep's header)")
        return None
    number, raw = line
    value, problem = _decode(raw)
    if problem is not None or not isinstance(value, dict) or "sweep" not in value:
        why = f", got {show(value)}" if problem is None else f": {problem}"
        problems.add(number, "not the JSONL output of a sweep (its first line must be the "
                     f"sweep's header){why}")
        return None
    before = problems.count

    def fail(text: str) -> None:
        problems.add(number, "header: " + text)

    version = value["sweep"]
    if not _is_count(version) or version != SWEEP_VERSION:  # not true, nor 1.0
        fail(f"sweep must be {SWEEP_VERSION} (the version of the format this scheduler-sim "
             f"reads), got {show(version)}")
        return None
    for name in value:
        if name not in HEADER_FIELDS:
            fail(f"unknown field {name!r}")
    missing = [name for name in HEADER_FIELDS if name not in value]
    for name in missing:
        fail(f"missing field {name!r}")
    if "trace" not in missing and not isinstance(value["trace"], str):
        fail(f"trace must be a string (the trace's name), got {show(value['trace'])}")
    digest = value.get("trace_sha256")
    digest_ok = digest is None or (isinstance(digest, str) and _SHA256.fullmatch(digest))
    if not digest_ok:
        fail(f"trace_sha256 must be null or 64 lowercase hexadecimal digits, got "
             f"{show(digest)}")
    grid_ok = "grid" not in missing and _checked_grid(value, fail)
    options_ok = "options" not in missing and _checked_options(value, fail)
    total = value.get("configurations")
    if "configurations" in missing:
        pass
    elif not _is_count(total) or not 1 <= total <= MAX_CONFIGURATIONS:
        fail(f"configurations must be an integer from 1 to {MAX_CONFIGURATIONS:,}, got "
             f"{show(total)}")
    elif grid_ok:
        product = 1
        for values in value["grid"].values():
            product *= len(values)
        if total != product:
            fail(f"configurations must be {product:,}, the product of the lengths of the "
                 f"grid's lists, got {show(total)}")
    shard = value.get("shard")
    if shard is not None and not (isinstance(shard, str) and _shard_or_none(shard)):
        fail(f"shard must be null or K/N with 0 <= K < N, got {show(shard)}")
    columns = value.get("columns")
    if "columns" not in missing and grid_ok:
        first = ["index", *value["grid"], "time_unit", "stalled"]
        if (not isinstance(columns, list) or not all(isinstance(c, str) for c in columns)
                or len(set(columns)) != len(columns) or columns[:len(first)] != first):
            fail(f"columns must be a list of distinct names that starts with "
                 f"{', '.join(first[:-1])} and stalled, got {show(columns)}")
    given = value.get("fingerprint")
    if "fingerprint" in missing:
        pass
    elif not isinstance(given, str) or not _SHA256.fullmatch(given):
        fail(f"fingerprint must be 64 lowercase hexadecimal digits, got {show(given)}")
    elif digest_ok and grid_ok and options_ok and "trace_sha256" not in missing:
        grid = [[name, values] for name, values in value["grid"].items()]
        if given != fingerprint(digest, grid, value["options"]):
            fail(f"fingerprint does not match the header's trace_sha256, grid and options "
                 f"(an edited header?), got {show(given)}")
    return value if problems.count == before else None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shard_or_none(text: str) -> tuple[int, int] | None:
    """`K/N` as `parse_shard` takes it, or None."""
    try:
        return parse_shard(text)
    except UsageError:
        return None


class _RowSchema:
    """What a row of one file must be, from the file's (checked) header."""

    def __init__(self, header: dict[str, Any]) -> None:
        self.total = header["configurations"]
        self.shard_text = header["shard"]
        self.shard = None if self.shard_text is None else parse_shard(self.shard_text)
        self.columns = header["columns"]
        self.axes = list(header["grid"].items())
        self.known = frozenset(self.columns)
        # Every column but the index (checked first), a fleet's fields, which a
        # configuration that is not such a fleet leaves out, and the host fields,
        # which one without host memory leaves out.
        self.required = [c for c in self.columns if c != "index"
                         and c not in FLEET_RUN_FIELDS and c not in HOST_RUN_FIELDS]
        self.summary = frozenset(self.columns) - {"index", "time_unit", "stalled",
                                                  *header["grid"]}

    def problems(self, row: dict[str, Any]) -> list[str]:
        """What is wrong with a row (a JSON object), each problem worded whole."""
        found = []
        index = row.get("index")
        label = ""
        if "index" not in row:
            found.append("missing field 'index'")
        elif not _is_count(index) or not 0 <= index < self.total:
            found.append(f"index must be an integer from 0 to {self.total - 1:,}, got "
                         f"{show(index)}")
        else:
            label = f"configuration {index}: "
            if self.shard is not None and index % self.shard[1] != self.shard[0]:
                found.append(f"{label}not in shard {self.shard_text} (the file's header): its "
                             f"index modulo {self.shard[1]} is {index % self.shard[1]}")
        unknown = [key for key in row if key not in self.known]
        if unknown:
            found.append(f"{label}unknown {_fields(unknown)}")
        missing = [key for key in self.required if key not in row]
        if missing:
            found.append(f"{label}missing {_fields(missing)}")
        if label:
            rest = index
            for axis, values in reversed(self.axes):
                expected = values[rest % len(values)]
                rest //= len(values)
                if axis in row and not _same(row[axis], expected):
                    found.append(f"{label}{axis} must be {show(expected)}, the header's grid "
                                 f"at this index, got {show(row[axis])}")
        unit, stalled = row.get("time_unit", "s"), row.get("stalled", False)
        if unit not in _TIME_UNITS:
            found.append(f"{label}time_unit must be 'ticks' or 's', got {show(unit)}")
        if not isinstance(stalled, bool):
            found.append(f"{label}stalled must be true or false, got {show(stalled)}")
        summary = self.summary
        found.extend(f"{label}{key} must be a number or null (a field of the run summary), "
                     f"got {show(value)}" for key, value in row.items()
                     if key in summary and value is not None and type(value) not in _NUMBERS)
        return found


class _Rows:
    """The rows of a merge so far, each checked against its file's header, and kept as
    its JSON line (fields in the header's order) until the merge writes them."""

    def __init__(self) -> None:
        self.text: dict[int, str] = {}  # configuration -> its row
        self.where: dict[int, tuple[str, int]] = {}  # configuration -> (file, line)

    def read(self, name: str, problems: Problems, header: dict[str, Any],
             lines: Iterator[tuple[int, bytes]]) -> None:
        """Check and keep the rows of one file (the lines after its header)."""
        schema = _RowSchema(header)
        total, columns = schema.total, schema.columns
        for number, raw in lines:
            if number > total + 1:
                problems.add(number, f"more lines than a sweep of {total:,} configurations "
                             "writes (a header and a row each); read no further")
                return
            if not raw.strip():
                problems.add(number, "blank line (a sweep writes none)")
                continue
            row, problem = _decode(raw)
            if problem is None and not isinstance(row, dict):
                problem = f"expected a JSON object (a row of the sweep), got {show(row)}"
            found = [problem] if problem is not None else schema.problems(row)
            if not found:
                index = row["index"]
                if index in self.text:
                    other, line = self.where[index]
                    found.append(f"configuration {index} is also in {other} (line {line}): "
                                 "shards overlap")
            if found:
                for text in found:
                    problems.add(number, text)
                continue
            self.text[index] = json.dumps({c: row[c] for c in columns if c in row},
                                          separators=(",", ":"))
            self.where[index] = (name, number)


def _fields(names: list[str]) -> str:
    """`field 'x'`, or `fields 'x', 'y', 'z' and 4 more`."""
    if len(names) == 1:
        return f"field {names[0]!r}"
    shown = ", ".join(repr(n) for n in names[:5])
    return f"fields {shown}" + (f" and {len(names) - 5} more" if len(names) > 5 else "")


@dataclasses.dataclass(frozen=True)
class Merged:
    """The shards of a sweep joined back: the header (its `shard` null) and every
    configuration's row in grid order, as the unsharded sweep writes them."""

    header: dict[str, Any]
    rows: tuple[str, ...]  # each configuration's JSONL line, without its newline
    files: int

    def jsonl(self) -> str:
        """The JSONL the unsharded sweep writes, byte for byte."""
        head = json.dumps(self.header, separators=(",", ":"))
        return head + "\n" + "".join(row + "\n" for row in self.rows)

    def csv(self) -> str:
        """The CSV the unsharded sweep writes, byte for byte."""
        return csv_text(self.header["columns"], (json.loads(row) for row in self.rows))


def merge_shards(shards: Iterable[tuple[str, bytes]]) -> Merged:
    """Join the JSONL outputs of a sharded sweep, given as (name, bytes).

    Each file is checked whole, as a trace is: its header field by field, then
    every row against the header (the index, the fields its columns name, the
    swept values the grid gives that index, the kind of every other value),
    and every problem of every file is raised at once as a TraceError
    (`file:line: what is wrong, got what`, MAX_PROBLEMS a file). A file from
    another sweep (another trace's bytes, grid or fixed options) or another
    version's columns, or a configuration in two files, is a problem of its
    line; configurations in no file raise UsageError."""
    first: tuple[str, dict[str, Any]] | None = None
    rows = _Rows()
    messages: list[str] = []
    files = 0
    for name, data in shards:
        files += 1
        problems = Problems(name)
        lines = _lines(data)
        header = _check_header(problems, next(lines, None))
        if header is not None and first is not None:
            header = _same_sweep(problems, header, *first)
        if header is not None:
            first = first or (name, header)
            rows.read(name, problems, header, lines)
        try:
            problems.raise_if_any()
        except TraceError as exc:
            messages.extend(exc.problems)
    if messages:
        raise TraceError(messages)
    if first is None:
        raise UsageError("sweep merge needs at least one shard file (JSONL), got none")
    header = {field: first[1][field] for field in HEADER_FIELDS}
    header["shard"] = None
    total = header["configurations"]
    missing = [i for i in range(total) if i not in rows.text]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        raise UsageError(f"sweep merge: {len(missing)} of {total} configurations are in no "
                         f"file (a shard is missing, or a sweep was interrupted?): {shown}")
    return Merged(header, tuple(rows.text[i] for i in range(total)), files)


def _same_sweep(problems: Problems, header: dict[str, Any], first: str,
                theirs: dict[str, Any]) -> dict[str, Any] | None:
    """The header of a later file if it belongs to the same sweep as the first's (the
    same fingerprint and columns), else None with the problem reported."""
    if header["fingerprint"] != theirs["fingerprint"]:
        problems.add(1, f"header: from another sweep than {first} (trace bytes, grid or "
                     f"fixed options differ): fingerprint {show(header['fingerprint'])}, "
                     f"expected {show(theirs['fingerprint'])}")
        return None
    if header["columns"] != theirs["columns"]:
        problems.add(1, f"header: columns differ from those of {first} (written by another "
                     f"version of scheduler-sim?), got {show(header['columns'])}")
        return None
    return header
