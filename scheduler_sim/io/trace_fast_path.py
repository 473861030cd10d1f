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
"""
from __future__ import annotations

import json
import re

from ..records.workload import RequestSpec
from .json_lines import NonFiniteConstant
from .trace_records import MAX_TIME

__all__ = ["common_request", "COUNTED", "HASHED"]

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
