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
"""
from __future__ import annotations

import json

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


def common_request(raw: bytes, line: int, unit: str, hash_block_size: int
                   ) -> RequestSpec | None:
    """The RequestSpec of line `line` (`raw`, without its newline) if it is a
    well-formed request record of a common shape, in a trace whose time unit is
    `unit` and whose prefix hashes cover `hash_block_size` tokens each; else None
    (then the full checks read the line)."""
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
