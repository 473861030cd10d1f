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
ones each line's bytes decode to, the rest being ASCII). So is a block whose every
line has that spelling with `"block_hashes":[...]` last (what `convert` writes for
a Mooncake request): a fifth column holds each line's hashes, a tuple, all the
block's hashes read by the JSON scanner at once (whole numbers only) and held to
`common_request`'s check (at most one a hash block). A block with any other line
(the two spellings mixed, too), or with an arrival or hashes `common_request`
refuses, gives None: its lines are then read one at a time, as above, and the full
checks word whatever is wrong.
"""
from __future__ import annotations

import json
import re
from itertools import accumulate, repeat
from operator import add, lt, mul
from typing import Callable, NamedTuple

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
# checks word it). Keyed by (in ticks, hashed): a hashed line is the same with
# `"block_hashes":[...]` last, as `convert` writes a Mooncake request: digits and
# commas only, which `common_block` has the JSON scanner read (it refuses what is not
# a list of whole numbers, such as `01`, `1,,2` or `1,`). Speed: 9.3 against 22.5 ms
# for the whole Mooncake trace's lines with each hash matched as a whole number
# (`0|[1-9][0-9]{0,17}`), json.loads of each line 78 ms (the loaded machine).
_ID = r'"id":"([^"\\\x00-\x1f]+)"'
_COUNTS = r'"prompt_tokens":([1-9][0-9]{0,17}),"output_tokens":([1-9][0-9]{0,17})'
_HASHES = r',"block_hashes":\[([0-9,]*)\]'
_ARRIVALS = {True: r'(0|[1-9][0-9]{0,17})',
             False: r'((?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,17})?)'}
_LINES: dict[tuple[bool, bool], Callable[[str], list]] = {}  # (made by `_lines`)


def _lines(tick: bool, hashed: bool) -> Callable[[str], list]:
    """The `findall` of `_LINES`' pattern for lines in ticks or not, hashed or not,
    compiled when first asked for. Speed (issue 26): compiling one takes about 1.2 ms
    (4.7 ms the four, the loaded machine), and a run needs one: compiled at import,
    the quick Azure replay took 3.5 million instructions more with the four than
    with the two of before (callgrind)."""
    find = _LINES.get((tick, hashed))
    if find is None:
        find = _LINES[tick, hashed] = re.compile(
            r'(?m)^\{"type":"request",' + _ID + r',"arrival":' + _ARRIVALS[tick] + ","
            + _COUNTS + (_HASHES if hashed else "") + r'\}$').findall
    return find


# The characters of a line `_LINES` matches, with its newline, besides its fields
# (four; five with its hashes, whose list's brackets are counted here).
_LINE_CHARS = {
    False: len('{"type":"request","id":"","arrival":,"prompt_tokens":,"output_tokens":}\n'),
    True: len('{"type":"request","id":"","arrival":,"prompt_tokens":,"output_tokens":,'
              '"block_hashes":[]}\n')}


class Columns(NamedTuple):
    """The values of a block of written request lines, a list per field, in line order
    (`hashes`: each line's block hashes, a tuple, or None for a block of lines without
    them)."""

    ids: list[str]
    arrivals: list[int | float]
    prompts: list[int]
    outputs: list[int]
    hashes: list[tuple[int, ...]] | None = None


def common_block(block: bytes, unit: str, hash_block_size: int) -> Columns | None:
    """The columns of `block` (lines of a trace) if every line of it is a request in
    the written spelling that `common_request` accepts, each ending in a newline, in a
    trace whose time unit is `unit` and whose prefix hashes cover `hash_block_size`
    tokens each; else None (its lines are then read one at a time). The block's first
    line chooses the spelling (with hashes or without), so a block of lines of both
    is read a line at a time.

    Speed (issue 26): a block of them is matched, split and converted in C; a line's
    validation took 21,400 instructions through `common_request` and `_take`, 12,800
    a block at a time, and the replay's read 14,200 and 12,700 (callgrind, the
    100,000 generated requests; benchmarks/README.md, "Issue 26, tenth steps"). The
    whole Mooncake trace's hashed lines, a line at a time through the scanner before:
    `read_trace` 95.8 -> 50.0 ms CPU, json.loads of each line 61 ms, on the loaded
    machine; with it quiet, interleaved in one process, 2.74x -> 1.48x the time of
    json.loads (benchmarks/README.md, "thirtieth steps", helper tr33 and the lead)."""
    # (A last line without its newline: read alone. A block whose first line is not
    # a request as written cannot match: no pass over it.)
    if not block.endswith(b"\n") or not block.startswith(b'{"type":"request","id":"'):
        return None
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        return None
    tick = unit == "tick"
    hashed = text.endswith("]}", 0, text.find("\n"))
    rows = _lines(tick, hashed)(text)
    if not rows:
        return None
    if hashed:
        ids, arrivals, prompts, outputs, lists = zip(*rows)
    else:
        ids, arrivals, prompts, outputs = zip(*rows)
    numbers = [",".join(column) for column in (arrivals, prompts, outputs)]
    # Every line of the block matched iff the matched lines, with their newlines, are
    # as long as the text: each match is one whole line (`_LINES`), so matches are
    # distinct lines, and a line not matched adds at least its newline to the text.
    # A match is `_LINE_CHARS` characters with its newline, and its fields; a joined
    # column is its fields and a comma between each two. Speed (issue 26): counting
    # the text's newlines cost 453 instructions a line (`unicode_count`); with these
    # lengths instead, validation took 213 a line fewer (callgrind, 100,000 generated
    # requests; benchmarks/README.md, "fifteenth steps", helper mil11).
    lines = len(rows)
    length = (lines * _LINE_CHARS[hashed] + sum(map(len, ids)) + sum(map(len, numbers))
              - 3 * (lines - 1))
    if hashed:
        joined = ",".join(lists)
        length += len(joined) - (lines - 1)
    if len(text) != length:
        return None
    if tick:
        arrivals = _integers(numbers[0])
    else:  # (a fraction by `float` of its digits, as `common_request`)
        arrivals = [float(a) if "." in a else int(a) for a in arrivals]
    if max(arrivals) > MAX_TIME:
        return None
    prompts = _integers(numbers[1])
    hashes = None
    if hashed:
        # Every line's hashes at once, as one JSON array: each whole number made by the
        # scanner in C, as it makes it in `common_request`'s path (`_SCAN`); anything
        # else refuses the block. A line's hashes are its commas and one more, all
        # together as many as the array's numbers unless a list is empty (`[]`, read
        # alone: the block is refused; a list that is empty and not alone makes two
        # commas together, or one at an end, which the scanner refuses).
        try:
            every = tuple(_SCAN("[" + joined + "]", 0)[0])
        except (ValueError, StopIteration):
            return None
        counts = list(map(add, map(str.count, lists, repeat(",")), repeat(1)))
        if len(every) != sum(counts):
            return None
        # At most one hash a hash block, `len(hashes) <= ceil(prompt / size)`, as
        # `common_request` checks it: for whole numbers, `(len - 1) * size < prompt`,
        # i.e. `len * size < prompt + size`.
        if not all(map(lt, map(mul, counts, repeat(hash_block_size)),
                       map(add, prompts, repeat(hash_block_size)))):
            return None
        # Each line's hashes a slice of them (a tuple). Speed: the whole Mooncake trace's
        # hashes in 25 against 28 ms read as an array of arrays, each made a tuple
        # (process time, the loaded machine). (No Python frame a line: all in C.)
        hashes = list(map(every.__getitem__, map(slice, accumulate(counts, initial=0),
                                                 accumulate(counts))))
    return Columns(list(ids), arrivals, prompts, _integers(numbers[2]), hashes)


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
    lines = range(first_line, first_line + len(outputs))
    if columns.hashes is None:
        return list(map(RequestSpec, columns.ids, lines, columns.arrivals, columns.prompts,
                        outputs, outputs))
    return list(map(RequestSpec, columns.ids, lines, columns.arrivals, columns.prompts,
                    outputs, outputs, repeat(0), repeat(None), repeat(None), repeat(None),
                    columns.hashes))
