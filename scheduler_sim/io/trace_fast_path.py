"""The common request line of a trace recognised in a few operations (issue 26):
`common_request` gives the `RequestSpec` of a line that is a well-formed `request`
record of one of the shapes real traces are made of, and None for any other line.

A line it refuses is read by the full checks (`trace_validator`, `trace_records`),
which alone word problems: so the fast path changes no message, no order and no
exit status, only the cost of a line it accepts. It accepts a line only when the
full checks would accept it and make the same `RequestSpec` of it:

- the JSON is decoded by the scanner that `json.loads` runs, called directly; a line
  with a backslash (an escape, perhaps a lone surrogate), not UTF-8, not one JSON
  value, with NaN or Infinity (`NonFiniteConstant`, which no check below accepts), or
  with a key given twice (its pairs make a shorter dict) is refused;
- its keys are exactly `COUNTED` (type, id, arrival and the two counts: what
  `convert` writes for Azure and `generate` writes) or `HASHED` (those and
  `block_hashes`: what `convert` writes for Mooncake);
- each value has its type and range, as `parse_request` checks them.

Before the JSON scanner, the line is matched whole against the one spelling that
`generate` and `convert` write for a request without hashes (`_WRITTEN`: those
keys in that order, no spaces, an id without escapes or control characters,
whole numbers, an arrival with at most a decimal fraction): what it matches, the
scanner would decode to the same values (integers by `int`, a fraction by `float`
of the same digits, as the scanner does), so the same checks give the same spec.
A line it does not match goes to the scanner as before.

A block of whole lines (`common_block`: what `trace.py` reads at a time) is matched
in one pass when every line of it has that spelling, each ending in a newline
alone: its four columns (ids, arrivals, prompts, outputs) come back as lists, the
values each line's match gives (the block decoded as UTF-8 once: its ids are the
ones each line's bytes decode to, the rest being ASCII). A block with any other
line, or with an arrival `common_request` refuses, gives None: its lines are then
read one at a time, as above, and the full checks word whatever is wrong.
"""
from __future__ import annotations

import json
import re
from typing import NamedTuple

from ..records.workload import RequestSpec
from .json_lines import NonFiniteConstant
from .trace_records import MAX_TIME

__all__ = ["common_request", "common_block", "block_specs", "Columns", "COUNTED", "HASHED"]

COUNTED = frozenset(("type", "id", "arrival", "prompt_tokens", "output_tokens"))
HASHED = COUNTED | {"block_hashes"}
_HASH_TYPES = frozenset((int, str))  # a block hash is an integer or a string

# The JSON scanner of `json.loads` called directly, which skips its two whitespace
# matches and its Python frames (2.9 us -> 0.96 us a line of the Azure trace, pairs
# included). Each object comes back as the tuple of its pairs, so that a key given
# twice shows as a dict shorter than its pairs (+0.4 us a line); NaN and Infinity
# come back as the markers the full decoder (`json_lines`) makes of them.
_SCAN = json.JSONDecoder(parse_constant=NonFiniteConstant, object_pairs_hook=tuple).scan_once


# The request line as `generate` and `convert` write it (see the module): matched in
# C, with the numbers' digits and the id's bytes as groups. Every request of a
# generated trace and of the converted Azure trace matches; the line then costs
# about 0.6 of the scanner's path (timeit, a generated line and an Azure line, on
# the loaded machine; more in benchmarks/README.md, "Issue 26, fifth steps").
_WRITTEN = re.compile(
    rb'\{"type":"request","id":"([^"\\\x00-\x1f]+)",'
    rb'"arrival":(0|[1-9][0-9]{0,17})(\.[0-9]{1,17})?,'
    rb'"prompt_tokens":([1-9][0-9]{0,17}),"output_tokens":([1-9][0-9]{0,17})\}'
    rb'[ \t\r\n]*').fullmatch


def common_request(raw: bytes, line: int, unit: str, hash_block_size: int
                   ) -> RequestSpec | None:
    """The RequestSpec of line `line` (`raw`, without its newline) if it is a
    well-formed request record of a common shape, in a trace whose time unit is
    `unit` and whose prefix hashes cover `hash_block_size` tokens each; else None
    (then the full checks read the line)."""
    written = _WRITTEN(raw)
    if written is not None:
        rid, whole, fraction, prompt, output = written.groups()
        if fraction is None:
            arrival = int(whole)
        elif unit == "tick":  # a fraction of a tick: the full checks word it
            return None
        else:
            arrival = float(whole + fraction)
        if arrival > MAX_TIME:
            return None
        try:
            rid = rid.decode("utf-8")
        except UnicodeDecodeError:  # (the scanner's path refuses the line too)
            return None
        output = int(output)
        return RequestSpec(rid, line, arrival, int(prompt), output, output, 0, None, None,
                           None, None)
    if b"\\" in raw:
        return None
    try:
        text = raw.decode("utf-8")
        pairs, end = _SCAN(text, 0)
    except (ValueError, StopIteration, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if end != len(text) and text[end:].strip(" \t\r\n"):  # JSON's whitespace may follow
        return None
    if type(pairs) is not tuple:  # not an object
        return None
    record = dict(pairs)
    if len(record) != len(pairs):  # a key given twice
        return None
    keys = record.keys()
    if keys != COUNTED and keys != HASHED:
        return None
    rid = record["id"]
    arrival = record["arrival"]
    prompt = record["prompt_tokens"]
    output = record["output_tokens"]
    kind = type(arrival)
    if not (record["type"] == "request" and type(rid) is str and rid
            and type(prompt) is int and prompt >= 1 and type(output) is int and output >= 1
            and (kind is int or (kind is float and unit != "tick"))
            and 0 <= arrival <= MAX_TIME):
        return None
    hashes = None
    if keys == HASHED:
        listed = record["block_hashes"]
        if (type(listed) is not list or not set(map(type, listed)) <= _HASH_TYPES
                or len(listed) > -(-prompt // hash_block_size)):  # at most one a block
            return None
        hashes = tuple(listed)
    return RequestSpec(rid, line, arrival, prompt, output, output, 0, None, None, None, hashes)


# `_WRITTEN`'s line on a block decoded to text, one line a match (`(?m)`: `^` and `$`
# at each line's ends; nothing in it matches a newline, so a line is matched whole
# or not at all, and a block whose matched lines are as long as its text is made of
# these lines only: `common_block`). In ticks a fraction is not matched (the full
# checks word it).
_ID = r'"id":"([^"\\\x00-\x1f]+)"'
_COUNTS = r'"prompt_tokens":([1-9][0-9]{0,17}),"output_tokens":([1-9][0-9]{0,17})\}$'
_LINES = {
    True: re.compile(r'(?m)^\{"type":"request",' + _ID
                     + r',"arrival":(0|[1-9][0-9]{0,17}),' + _COUNTS).findall,
    False: re.compile(r'(?m)^\{"type":"request",' + _ID
                      + r',"arrival":((?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,17})?),'
                      + _COUNTS).findall,
}


# The characters of a line `_LINES` matches, with its newline, besides its four fields.
_LINE_CHARS = len('{"type":"request","id":"","arrival":,"prompt_tokens":,"output_tokens":}\n')


class Columns(NamedTuple):
    """The values of a block of written request lines, a list per field, in line order."""

    ids: list[str]
    arrivals: list[int | float]
    prompts: list[int]
    outputs: list[int]


def common_block(block: bytes, unit: str) -> Columns | None:
    """The columns of `block` (lines of a trace) if every line of it is a request in
    the written spelling that `common_request` accepts, each ending in a newline, in a
    trace whose time unit is `unit`; else None (its lines are then read one at a time).

    Speed (issue 26): a block of them is matched, split and converted in C; a line's
    validation took 21,400 instructions through `common_request` and `_take`, 12,800
    a block at a time, and the replay's read 14,200 and 12,700 (callgrind, the
    100,000 generated requests; benchmarks/README.md, "Issue 26, tenth steps")."""
    if not block.endswith(b"\n"):  # (a last line without its newline: read alone)
        return None
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        return None
    tick = unit == "tick"
    rows = _LINES[tick](text)
    if not rows:
        return None
    ids, arrivals, prompts, outputs = zip(*rows)
    numbers = [",".join(column) for column in (arrivals, prompts, outputs)]
    # Every line of the block matched iff the matched lines, with their newlines, are
    # as long as the text: each match is one whole line (`_LINES`), so matches are
    # distinct lines, and a line not matched adds at least its newline to the text.
    # A match is `_LINE_CHARS` characters with its newline, and its four fields; a
    # joined column is its fields and a comma between each two. Speed (issue 26):
    # counting the text's newlines cost 453 instructions a line (`unicode_count`);
    # with these lengths instead, validation took 213 a line fewer (callgrind, 100,000
    # generated requests; benchmarks/README.md, "fifteenth steps", helper mil11).
    lines = len(rows)
    if len(text) != (lines * _LINE_CHARS + sum(map(len, ids)) + sum(map(len, numbers))
                     - 3 * (lines - 1)):
        return None
    if tick:
        arrivals = _integers(numbers[0])
    else:  # (a fraction by `float` of its digits, as `common_request`)
        arrivals = [float(a) if "." in a else int(a) for a in arrivals]
    if max(arrivals) > MAX_TIME:
        return None
    return Columns(list(ids), arrivals, _integers(numbers[1]), _integers(numbers[2]))


def _integers(joined: str) -> list[int]:
    """The integers that `joined` spells, strings of decimal digits joined by commas
    (`_LINES`' groups: no sign, no leading zero, at most 18 digits), as `int` makes
    each.

    Speed (issue 26): read as one JSON array by the scanner, which converts each in C
    without a call of `int` (a class call) a string: 373 against 542 ns a line for the
    three columns of the 20,000 generated requests (timeit, the loaded machine)."""
    return _SCAN("[" + joined + "]", 0)[0]


def block_specs(columns: Columns, first_line: int) -> list[RequestSpec]:
    """The RequestSpec of each line of a block whose first line is `first_line`: what
    `common_request` gives for each."""
    outputs = columns.outputs
    return list(map(RequestSpec, columns.ids, range(first_line, first_line + len(outputs)),
                    columns.arrivals, columns.prompts, outputs, outputs))
