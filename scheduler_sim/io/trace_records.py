"""The records of a trace, one at a time: the fields each record kind may have
and the checks of each field (`RecordChecker`), a `request` record into a
`RequestSpec` and an `expect` record into an `Expectation`.

Every problem names the record and the field (`request 'r1': prompt_tokens must
be an integer >= 1, got 0`); what spans lines (duplicate ids, a cancel of an
unknown request) is `trace_validator`'s.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from ..engine.host_summary import HOST_RUN_FIELDS
from ..engine.summary import FLEET_REQUEST_FIELDS, FLEET_RUN_FIELDS, REQUEST_FIELDS, RUN_FIELDS
from ..kv.allocator import blocks_for
from ..policies import POLICIES, is_plugin
from ..records.frozen import Frozen, record
from ..records.option_values import show
from ..records.states import RequestStatus
from ..records.workload import RequestSpec
from .json_lines import NonFiniteConstant
from .problems import Problems, did_you_mean

__all__ = ["Expectation", "RecordChecker", "parse_request", "checked_spec", "parse_expect",
           "MAX_TIME", "SNAPSHOT_FIELDS", "BOUND_KEYS", "REQUEST_KEYS", "ACTION_KEYS"]

# The largest time a trace may give, in its own unit: far beyond any real
# trace, small enough that every conversion onto the clock stays finite.
MAX_TIME = 10 ** 15
SNAPSHOT_FIELDS = ("waiting", "running", "reserved", "allocated", "draining", "free")

BOUND_KEYS = ("min", "max", "approx", "rel", "abs")
REQUEST_KEYS = ("type", "id", "arrival", "prompt_tokens", "output_tokens", "max_tokens",
                "priority", "deadline", "prompt_token_ids", "output_token_ids", "block_hashes")
ACTION_KEYS = ("type", "id", "at")
STATUS_LABELS = tuple(s.label for s in RequestStatus)
BOOL_FIELDS = ("deadline_missed", "slo_met")


@record  # (frozen.py: no methods generated at start-up, as a frozen dataclass's)
class Expectation(Frozen):
    """One `expect` record: where it is, what it is about, what it asserts."""

    line: int
    policy: str | None
    id: str | None          # a per-request expectation
    at: float | None        # a snapshot expectation, in the trace's time unit
    fields: dict[str, Any]  # field -> expected value, or a dict of bounds (BOUND_KEYS)
    unit: str = "tick"      # the trace's time unit, for `at`

    @property
    def subject(self) -> str:
        """How a failure names what was checked: `r1`, `tick 3` or `run`."""
        if self.id is not None:
            return f"request {self.id!r}"
        if self.at is not None:
            return (f"tick {self.at}" if self.unit == "tick"
                    else f"time {show(self.at)} {self.unit}")
        return "run"


def _finite(value: int | float) -> bool:
    """Whether a JSON number is finite (an integer always is, however long: comparing
    it with a float limit is exact, converting it may overflow)."""
    return isinstance(value, int) or math.isfinite(value)


def _is_int(value: Any) -> bool:
    """Whether a JSON value is an integer (true and false are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


class RecordChecker:
    """Field checks for one record, all reported with the record's prefix."""

    def __init__(self, problems: Problems, line: int, kind: str, record: dict,
                 label: Any = None) -> None:
        self.problems = problems
        self.line = line
        self.kind = kind
        self.label = label  # the record's id, if it is a string
        self.record = record
        self.ok = True

    def fail(self, text: str) -> None:
        """Report `text` about this record; the record is then not ok."""
        self.ok = False
        label = self.label
        shown = f" {label!r}" if isinstance(label, str) else ""
        self.problems.add(self.line, f"{self.kind}{shown}: {text}")

    def unknown_fields(self, allowed: Iterable[str]) -> None:
        """Report each field of the record that is not in `allowed`."""
        allowed = tuple(allowed)
        for key in self.record:
            if key not in allowed:
                self.fail(f"unknown field {key!r}{did_you_mean(key, allowed)}")

    def time(self, key: str, unit: str, required: bool = True) -> float | None:
        """A time in the trace's unit: an integer >= 0 in ticks, a number >= 0 otherwise,
        at most MAX_TIME either way."""
        value = self.record.get(key)
        if (not isinstance(value, bool) and isinstance(value, (int, float))
                and _finite(value) and value > MAX_TIME):
            self.fail(f"{key} must be at most 1e15 (in the trace's time unit), got "
                      f"{show(value)}")
            return None
        if unit == "tick":
            if isinstance(value, float) and math.isfinite(value) and value >= 0:
                self.fail(f"{key} must be a whole number of ticks (the trace's time_unit is "
                          f'tick; a trace in seconds starts with {{"type":"config",'
                          f'"time_unit":"s"}}), got {show(value)}')
                return None
            return self.integer(key, 0, required)
        if key not in self.record:
            if required:
                self.fail(f"missing field {key!r}")
            return None
        value = self.record[key]
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not _finite(value) or value < 0):
            self.fail(f"{key} must be a number of {_UNIT_WORDS[unit]} >= 0, got {show(value)}")
            return None
        return value

    def integer(self, key: str, minimum: int | None = None, required: bool = True) -> int | None:
        """The field as an integer (at least `minimum`), or None, reported unless absent
        and not `required`."""
        if key not in self.record:
            if required:
                self.fail(f"missing field {key!r}")
            return None
        value = self.record[key]
        if not _is_int(value) or (minimum is not None and value < minimum):
            bound = f" >= {minimum}" if minimum is not None else ""
            self.fail(f"{key} must be an integer{bound}, got {show(value)}")
            return None
        return value

    def string_id(self, key: str = "id") -> str | None:
        """The field as a non-empty string, or None (reported)."""
        if key not in self.record:
            self.fail(f"missing field {key!r}")
            return None
        value = self.record[key]
        if not isinstance(value, str) or not value:
            self.fail(f"{key} must be a non-empty string, got {show(value)}")
            return None
        return value

    def int_list(self, key: str) -> tuple[int, ...] | None:
        """The field as a non-empty tuple of integers; None if absent or bad (reported)."""
        if key not in self.record:
            return None
        value = self.record[key]
        if (not isinstance(value, list) or not value
                or not all(_is_int(v) for v in value)):
            self.fail(f"{key} must be a non-empty list of integers, got {show(value)}")
            return None
        return tuple(value)


_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds"}


def parse_request(c: RecordChecker, hash_block_size: int, unit: str) -> RequestSpec | None:
    """A `request` record checked into a RequestSpec; None when anything is wrong
    (every problem reported through `c`)."""
    rec = c.record
    if len(rec) == 5:
        # The common record, type, id, arrival and the two counts, all well formed:
        # what the checks below would return, without them.
        rid = rec.get("id")
        arrival = rec.get("arrival")
        prompt = rec.get("prompt_tokens")
        output = rec.get("output_tokens")
        kind = type(arrival)
        if (type(rid) is str and rid and type(prompt) is int and prompt >= 1
                and type(output) is int and output >= 1
                and (kind is int or (kind is float and unit != "tick"))
                and 0 <= arrival <= MAX_TIME):
            return RequestSpec(rid, c.line, arrival, prompt, output, output, 0, None, None,
                               None, None)
    c.unknown_fields(REQUEST_KEYS)
    rid = c.string_id()
    arrival = c.time("arrival", unit)
    prompt_ids = c.int_list("prompt_token_ids")
    output_ids = c.int_list("output_token_ids")
    prompt = c.integer("prompt_tokens", 1, required=prompt_ids is None and
                       "prompt_token_ids" not in rec)
    output = c.integer("output_tokens", 1, required=output_ids is None and
                       "output_token_ids" not in rec)
    if prompt_ids is not None:
        if prompt is not None and prompt != len(prompt_ids):
            c.fail(f"prompt_tokens must equal len(prompt_token_ids) = {len(prompt_ids)}, "
                   f"got {prompt}")
        prompt = len(prompt_ids)
    if output_ids is not None:
        if output is not None and output != len(output_ids):
            c.fail(f"output_tokens must equal len(output_token_ids) = {len(output_ids)}, "
                   f"got {output}")
        output = len(output_ids)
    max_tokens = c.integer("max_tokens", 1, required=False)
    if max_tokens is not None and output is not None and max_tokens < output:
        c.fail(f"max_tokens must be an integer >= output_tokens ({output}), got {max_tokens}")
    priority = c.integer("priority", None, required=False)
    deadline = c.time("deadline", unit, required=False)
    hashes = None
    if "block_hashes" in rec:
        value = rec["block_hashes"]
        if not isinstance(value, list) or not all(
                _is_int(v) or isinstance(v, str) for v in value):
            c.fail(f"block_hashes must be a list of integers or strings, got {show(value)}")
        elif prompt is not None and len(value) > blocks_for(prompt, hash_block_size):
            c.fail(f"block_hashes may have at most ceil(prompt_tokens / hash_block_size) = "
                   f"{blocks_for(prompt, hash_block_size)} entries, got {len(value)}")
        else:
            hashes = tuple(value)
    if not c.ok:
        return None
    return RequestSpec(rid, c.line, arrival, prompt, output,
                       output if max_tokens is None else max_tokens,
                       priority or 0, deadline, prompt_ids, output_ids, hashes)


def _bounds(c: RecordChecker, key: str, value: dict) -> dict | None:
    """Check a bound or tolerance object `{"max": 0.5}`; None (reported) when bad."""
    unknown = [k for k in value if k not in BOUND_KEYS]
    if unknown:
        c.fail(f"{key}: unknown bound {unknown[0]!r}{did_you_mean(unknown[0], BOUND_KEYS)} "
               f"(known: {', '.join(BOUND_KEYS)})")
        return None
    for k, number in value.items():
        if (isinstance(number, bool) or not isinstance(number, (int, float))
                or not _finite(number) or abs(number) > 1e300):
            c.fail(f"{key}: {k} must be a finite number of at most 1e300 in size, "
                   f"got {show(number)}")
            return None
    if not value:
        c.fail(f"{key}: a bound needs min, max or approx, got {{}}")
        return None
    if ("rel" in value or "abs" in value) and "approx" not in value:
        c.fail(f"{key}: rel and abs are tolerances of approx, which is missing")
        return None
    if any(value.get(k, 0) < 0 for k in ("rel", "abs")):
        c.fail(f"{key}: rel and abs must be >= 0, got {show(value)}")
        return None
    if "min" in value and "max" in value and value["min"] > value["max"]:
        c.fail(f"{key}: min must be <= max, got {show(value)}")
        return None
    return dict(value)


def parse_expect(c: RecordChecker, unit: str) -> Expectation | None:
    """An `expect` record checked into an Expectation; None when anything is wrong
    (every problem reported through `c`)."""
    rec = c.record
    policy = rec.get("policy")
    if "policy" in rec and (not isinstance(policy, str)
                            or (policy not in POLICIES and not is_plugin(policy))):
        hint = did_you_mean(policy, POLICIES) if isinstance(policy, str) else ""
        c.fail(f"policy must be one of {', '.join(POLICIES)}, got {show(policy)}{hint}")
    rid = at = None
    if "id" in rec and "at" in rec:
        c.fail("an expect has either 'id' (a request) or 'at' (a tick), not both")
        return None
    if "id" in rec:
        rid = c.string_id()
        allowed = [f for f in REQUEST_FIELDS if f != "id"] + list(FLEET_REQUEST_FIELDS)
        what = "request field"
    elif "at" in rec:
        at = c.time("at", unit)
        allowed = list(SNAPSHOT_FIELDS)
        what = "snapshot field"
    else:
        allowed = list(RUN_FIELDS) + list(FLEET_RUN_FIELDS) + list(HOST_RUN_FIELDS)
        what = "run field"
    fields = {}
    for key, value in rec.items():
        if key in ("type", "policy", "id", "at"):
            continue
        if key not in allowed:
            c.fail(f"unknown {what} {key!r}{did_you_mean(key, allowed)}")
            continue
        if isinstance(value, dict) and key != "status":
            bounds = _bounds(c, key, value)
            if bounds is not None:
                fields[key] = bounds
            continue
        flag = key in BOOL_FIELDS and rid is not None  # per request a yes/no; per run a count
        if isinstance(value, bool) and flag:
            fields[key] = value
            continue
        if isinstance(value, (list, dict, bool, NonFiniteConstant)):
            c.fail(f"{key} must be a number, string, null or a bound like "
                   f'{{"max": 5}}, got {show(value)}')
            continue
        if key == "status":
            if value not in STATUS_LABELS:
                c.fail(f"status must be one of {', '.join(STATUS_LABELS)}, got {show(value)}"
                       f"{did_you_mean(str(value), STATUS_LABELS)}")
                continue
        elif flag:
            if value is not None:
                c.fail(f"{key} must be true, false or null, got {show(value)}")
                continue
        elif isinstance(value, str) or (isinstance(value, float) and not math.isfinite(value)):
            c.fail(f"{key} must be a finite number or null, got {show(value)}")
            continue
        fields[key] = value
    if c.ok and not fields:
        c.fail("an expect must compare at least one field")
    if not c.ok:
        return None
    return Expectation(c.line, policy, rid, at, fields, unit)


def checked_spec(rec: dict, line: int) -> RequestSpec:
    """`parse_request`'s result for a record already validated, without the checks."""
    prompt_ids = rec.get("prompt_token_ids")
    output_ids = rec.get("output_token_ids")
    prompt = len(prompt_ids) if prompt_ids is not None else rec["prompt_tokens"]
    output = len(output_ids) if output_ids is not None else rec["output_tokens"]
    max_tokens = rec.get("max_tokens")
    hashes = rec.get("block_hashes")
    return RequestSpec(rec["id"], line, rec["arrival"], prompt, output,
                       output if max_tokens is None else max_tokens, rec.get("priority") or 0,
                       rec.get("deadline"), None if prompt_ids is None else tuple(prompt_ids),
                       None if output_ids is None else tuple(output_ids),
                       None if hashes is None else tuple(hashes))
