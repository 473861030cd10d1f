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
"""
from __future__ import annotations

import dataclasses
import difflib
import heapq
import json
import math
import os
import sys
from array import array
from functools import partial
from hashlib import blake2b
from typing import Any, Callable, Iterable, Iterator

from ..engine.summary import FLEET_REQUEST_FIELDS, FLEET_RUN_FIELDS, REQUEST_FIELDS, RUN_FIELDS
from ..gpu.catalogue import GPUS, MODELS, is_path, parse_cost_model
from ..kv.allocator import blocks_for
from ..policies import POLICIES, is_plugin, spelling_problem
from ..records.errors import TraceError, UsageError
from ..records.options import OPTIONS, Options, check_value, show
from ..records.states import RequestStatus
from ..records.workload import Action, RequestSpec, Workload
from ..requests.queues import QUEUE_ORDERS
from .specs import load_specs

__all__ = ["Trace", "Expectation", "parse_trace", "read_trace", "check_options",
           "resolve_options", "unique_keys", "plugins_from_trace", "allow_trace_plugins", "ALLOW_FLAG",
           "SNAPSHOT_FIELDS", "MAX_PROBLEMS", "Problems"]

MAX_PROBLEMS = 50
# Trace files larger than this are validated and replayed as they are read
# (`read_trace`); smaller ones are read whole, which is faster.
STREAM_ABOVE = 4 * 2 ** 20
# "Did you mean" hints for an unknown request id come from the first ids.
SUGGEST_FROM = 10_000
# The largest time a trace may give, in its own unit: far beyond any real
# trace, small enough that every conversion onto the clock stays finite.
MAX_TIME = 10 ** 15
SNAPSHOT_FIELDS = ("waiting", "running", "reserved", "allocated", "draining", "free")

BOUND_KEYS = ("min", "max", "approx", "rel", "abs")
REQUEST_KEYS = ("type", "id", "arrival", "prompt_tokens", "output_tokens", "max_tokens",
                "priority", "deadline", "prompt_token_ids", "output_token_ids", "block_hashes")
ACTION_KEYS = ("type", "id", "at")
RECORD_TYPES = ("config", "request", "cancel", "preempt", "expect")
STATUS_LABELS = tuple(s.label for s in RequestStatus)
BOOL_FIELDS = ("deadline_missed", "slo_met")


@dataclasses.dataclass(frozen=True)
class Expectation:
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


@dataclasses.dataclass(frozen=True)
class Trace:
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


class _Problems:
    """Collects messages from anywhere in the file; reports them in line order."""

    def __init__(self, name: str) -> None:
        self.name = name
        # (line, order found, text): the first MAX_PROBLEMS in line order are kept
        # (a max-heap by negated keys), the others only counted.
        self.found: list[tuple[int, int, str]] = []
        self.count = 0

    def add(self, line: int, text: str, order: int | None = None) -> None:
        self.count += 1
        entry = (-line, -(self.count if order is None else order), text)
        if len(self.found) < MAX_PROBLEMS:
            heapq.heappush(self.found, entry)
        elif entry > self.found[0]:
            heapq.heapreplace(self.found, entry)

    def raise_if_any(self) -> None:
        """Raise TraceError with the problems in line order, the first MAX_PROBLEMS."""
        if self.count:
            ordered = sorted((-line, -order, text) for line, order, text in self.found)
            messages = [f"{self.name}:{line}: {text}" for line, _, text in ordered]
            if self.count > MAX_PROBLEMS:
                messages.append(f"{self.name}: ... and {self.count - MAX_PROBLEMS} more errors")
            raise TraceError(messages)


# The collector under its public name, for the other readers of files (sweep merge).
Problems = _Problems


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _finite(value: int | float) -> bool:
    """Whether a JSON number is finite (an integer always is, however long: comparing
    it with a float limit is exact, converting it may overflow)."""
    return isinstance(value, int) or math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class _Constant:
    """NaN or Infinity read from a line: kept as a value so that the field check
    that meets it names the field (`prompt_tokens must be an integer, got NaN`)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; ValueError naming a key given twice."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return out


# One decoder for every line: NaN and Infinity are refused (`_Constant`), and so
# are duplicate keys (`unique_keys`).
_DECODER = json.JSONDecoder(parse_constant=_Constant, object_pairs_hook=unique_keys)


def _lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in any string of a decoded JSON value, if any."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            for ch in item:
                if "\ud800" <= ch <= "\udfff":
                    return ch
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _decode_line(raw: bytes) -> tuple[Any, str | None]:
    """Parse one line into a JSON value, or return the reason it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"invalid UTF-8 at byte {exc.start + 1}, got {raw[exc.start:exc.start + 1]!r}"
    if text.startswith("\ufeff"):  # as json.loads
        return None, "invalid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig) at column 1"
    value, problem = json_value(_DECODER.decode, text)
    if problem is None and (b"\\ud" in raw or b"\\uD" in raw):
        bad = _lone_surrogate(value)
        if bad is not None:
            return None, (f"invalid text: a string holds a lone surrogate "
                          f"(\\u{ord(bad):04x}), which is not a character, got {ascii(bad)}")
    return value, problem


def json_value(decode: Callable[[str], Any], text: str) -> tuple[Any, str | None]:
    """`decode(text)`, or why the text is not JSON, worded as every reader words it."""
    try:
        return decode(text), None
    except RecursionError:
        return None, "JSON nested too deeply"
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} at column {exc.colno}"
    except ValueError as exc:
        return None, f"invalid JSON: {exc}"


def resolve_options(config: dict[str, Any], values: dict[str, Any],
                    directory: str | None = None, specs: bool = True
                    ) -> tuple[Options, dict[str, Any]]:
    """Defaults, then a trace's `config`, then `values` (flags or keyword options),
    checked: the options and the checked values, with the model and GPU a cost model
    prices read when `specs` (`specs.load_specs`; a file the config names is taken from
    the trace's `directory`; a sweep's base options, whose axes may give the model or the
    GPU, leave them to each configuration). Every problem raises UsageError (ConfigError
    for a bad spec file)."""
    problems: list[str] = []
    checked = check_options(values, problems.append)
    if problems:
        raise UsageError("; ".join(problems))
    options = dataclasses.replace(Options.resolve(config, checked), trace_dir=directory)
    if options.problems():
        raise UsageError("; ".join(options.problems()))
    return (load_specs(options) if specs else options), checked


def check_options(values: dict[str, Any], report) -> dict[str, Any]:
    """Validate option values (config record or flags); `report(msg)` each problem."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in OPTIONS:
            report(f"unknown option {key!r}{_suggest(key, OPTIONS)}")
            continue
        checked, problem = check_value(key, value)
        if problem:
            report(problem)
            continue
        if key == "policy":
            unknown = [p for p in checked if p not in POLICIES and not is_plugin(p)]
            if unknown:
                report(f"unknown policy {unknown[0]!r}{_suggest(unknown[0], POLICIES)} "
                       f"(known: {', '.join(POLICIES)}, or MODULE:CLASS or FILE.py:CLASS "
                       "for your own)")
                continue
            # A plugin's spelling is checked here; its code is never run (a trace is
            # data: `plugins_from_trace`).
            broken = [spelling_problem(name) for name in checked if is_plugin(name)]
            broken = [problem for problem in broken if problem]
            if broken:
                report(broken[0])
                continue
            if len(set(checked)) != len(checked):
                report(f"policy lists a name twice, got {show(checked)}")
                continue
        if key == "cost_model" and checked is not None:
            try:
                parse_cost_model(checked)
            except ValueError as exc:
                report(str(exc))
                continue
        if key in ("model", "gpu") and checked is not None and not is_path(checked):
            known = MODELS if key == "model" else GPUS
            if checked not in known:
                what = "a config.json" if key == "model" else "a GPU spec .json"
                report(f"unknown {key} {checked!r}{_suggest(checked, known)} (known: "
                       f"{', '.join(known)}; or the path of {what})")
                continue
        if key == "order" and checked not in QUEUE_ORDERS:
            report(f"unknown order {checked!r}{_suggest(checked, QUEUE_ORDERS)} "
                   f"(known: {', '.join(QUEUE_ORDERS)})")
            continue
        out[key] = checked
    return out


class _RecordChecker:
    """Field checks for one record, all reported with the record's prefix."""

    def __init__(self, problems: _Problems, line: int, kind: str, record: dict,
                 label: Any = None) -> None:
        self.problems = problems
        self.line = line
        self.kind = kind
        self.label = label  # the record's id, if it is a string
        self.record = record
        self.ok = True

    def fail(self, text: str) -> None:
        self.ok = False
        label = self.label
        shown = f" {label!r}" if isinstance(label, str) else ""
        self.problems.add(self.line, f"{self.kind}{shown}: {text}")

    def unknown_fields(self, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        for key in self.record:
            if key not in allowed:
                self.fail(f"unknown field {key!r}{_suggest(key, allowed)}")

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
        if key not in self.record:
            self.fail(f"missing field {key!r}")
            return None
        value = self.record[key]
        if not isinstance(value, str) or not value:
            self.fail(f"{key} must be a non-empty string, got {show(value)}")
            return None
        return value

    def int_list(self, key: str) -> tuple[int, ...] | None:
        if key not in self.record:
            return None
        value = self.record[key]
        if (not isinstance(value, list) or not value
                or not all(_is_int(v) for v in value)):
            self.fail(f"{key} must be a non-empty list of integers, got {show(value)}")
            return None
        return tuple(value)


_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds"}


def _parse_request(c: _RecordChecker, hash_block_size: int, unit: str) -> RequestSpec | None:
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


def _bounds(c: _RecordChecker, key: str, value: dict) -> dict | None:
    """Check a bound or tolerance object `{"max": 0.5}`; None (reported) when bad."""
    unknown = [k for k in value if k not in BOUND_KEYS]
    if unknown:
        c.fail(f"{key}: unknown bound {unknown[0]!r}{_suggest(unknown[0], BOUND_KEYS)} "
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


def _parse_expect(c: _RecordChecker, unit: str) -> Expectation | None:
    rec = c.record
    policy = rec.get("policy")
    if "policy" in rec and (not isinstance(policy, str)
                            or (policy not in POLICIES and not is_plugin(policy))):
        hint = _suggest(policy, POLICIES) if isinstance(policy, str) else ""
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
        allowed = list(RUN_FIELDS) + list(FLEET_RUN_FIELDS)
        what = "run field"
    fields = {}
    for key, value in rec.items():
        if key in ("type", "policy", "id", "at"):
            continue
        if key not in allowed:
            c.fail(f"unknown {what} {key!r}{_suggest(key, allowed)}")
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
        if isinstance(value, (list, dict, bool, _Constant)):
            c.fail(f"{key} must be a number, string, null or a bound like "
                   f'{{"max": 5}}, got {show(value)}')
            continue
        if key == "status":
            if value not in STATUS_LABELS:
                c.fail(f"status must be one of {', '.join(STATUS_LABELS)}, got {show(value)}"
                       f"{_suggest(str(value), STATUS_LABELS)}")
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


def _digest(rid: str) -> int:
    """A request id as a signed 64-bit digest (streamed validation keeps these)."""
    return int.from_bytes(blake2b(rid.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                          "little", signed=True)


class _Validator:
    """Validates a trace a line at a time (`feed`), then checks what spans lines
    (duplicate ids, cancels and expects naming requests) in `finish`.

    In memory (`streamed` false) it keeps every request. Streamed, it keeps
    per request only a 64-bit digest of its id and its arrival (16 bytes), so
    that a file of millions of requests validates in bounded memory, and the
    requests are read again from the file when replayed.
    """

    def __init__(self, name: str, streamed: bool) -> None:
        self.problems = _Problems(name)
        self.streamed = streamed
        self.config: dict[str, Any] = {}
        self.specs: list[RequestSpec] = []
        self.actions: list[tuple[Action, _RecordChecker]] = []
        self.expects: list[Expectation] = []
        self.first_line: dict[str, int] = {}  # in memory: id -> its line
        self.digests = array("q")             # streamed: each request's id digest ...
        self.arrivals = array("d")            # ... and arrival
        self.count = 0
        self.span: tuple[float, float] | None = None
        self.in_order = True  # arrivals never decrease in file order
        self.largest: RequestSpec | None = None  # the most prompt + max_tokens
        self.some_ids: list[str] = []  # the first SUGGEST_FROM ids, for "did you mean"
        self.seen_record = False

    def feed(self, number: int, raw: bytes) -> None:
        """Check one line (without its newline)."""
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw.strip():
            return
        problems = self.problems
        value, problem = _decode_line(raw)
        if problem:
            problems.add(number, problem)
            self.seen_record = True
            return
        if not isinstance(value, dict):
            problems.add(number, f"expected a JSON object, got {_kind(value)}")
            self.seen_record = True
            return
        kind = value.get("type")
        if kind is None:
            problems.add(number, "missing field 'type'")
            self.seen_record = True
            return
        if kind not in RECORD_TYPES:
            hint = _suggest(kind, RECORD_TYPES) if isinstance(kind, str) else ""
            problems.add(number, f"unknown record type {show(kind)}{hint} "
                         f"(known: {', '.join(RECORD_TYPES)})")
            self.seen_record = True
            return
        config = self.config
        if kind == "config":
            if self.seen_record:
                problems.add(number, "config: a config record must be the first record")
            else:
                options = {k: v for k, v in value.items() if k != "type"}
                self.config = check_options(
                    options, lambda text: problems.add(number, "config: " + text))
                for text in Options.resolve(self.config).problems():
                    problems.add(number, "config: " + text)
            self.seen_record = True
            return
        self.seen_record = True
        label = value.get("id")
        c = _RecordChecker(problems, number, kind, value, label)
        unit = config.get("time_unit", "tick")
        if kind == "request":
            if isinstance(label, str) and label and len(self.some_ids) < SUGGEST_FROM:
                self.some_ids.append(label)
            hbs = config.get("hash_block_size") or config.get("block_size") or 16
            if self.streamed:
                spec = _parse_request(c, hbs, unit)
                if isinstance(label, str) and label:
                    self.digests.append(_digest(label))
                    arrival = spec.arrival if spec is not None else math.nan
                    self.arrivals.append(arrival)
                    if spec is not None:
                        self._note_arrival(spec)
                return
            first = self.first_line
            duplicate = isinstance(label, str) and label in first
            if duplicate:
                c.fail(f"duplicate request id {label!r} (first on line {first[label]})")
            spec = _parse_request(c, hbs, unit)
            if isinstance(label, str) and label and not duplicate:
                first[label] = number  # a known id for cancels and expects
            if spec is not None and not duplicate:
                self.specs.append(spec)
                self._note_arrival(spec)
        elif kind in ("cancel", "preempt"):
            c.unknown_fields(ACTION_KEYS)
            rid = c.string_id()
            at = c.time("at", unit)
            if c.ok:
                self.actions.append((Action(kind, rid, at, number), c))
        else:
            exp = _parse_expect(c, unit)
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
        problems = self.problems
        some = self.some_ids
        early = []
        for action, c in self.actions:
            if action.id not in known:
                c.fail(f"{action.kind} of unknown request {action.id!r}"
                       f"{_suggest(action.id, some)}")
            elif arrivals.get(action.id) is not None and action.at < arrivals[action.id]:
                early.append((action, c))
        if early and self.streamed and again is not None:
            arrivals = self._exact_arrivals({a.id for a, _ in early}, again)
        for action, c in early:
            c.fail(f"at must be >= the request's arrival ({show(arrivals[action.id])}), "
                   f"got {show(action.at)}")
        for exp in self.expects:
            if exp.id is not None and exp.id not in known:
                problems.add(exp.line, f"expect: unknown request {exp.id!r}"
                             f"{_suggest(exp.id, some)}")
        problems.raise_if_any()

    def _known_ids(self, again) -> dict[str, float | None]:
        """Streamed: report duplicate ids; return the arrival (None if the request
        was invalid) of every id that a cancel, preempt or expect names."""
        digests = self.digests
        ordered = sorted(digests)
        shared = {a for a, b in zip(ordered, ordered[1:]) if a == b}
        del ordered
        if shared and again is not None:
            self._report_duplicates(shared, again)
        wanted = {a.id for a, _ in self.actions} | {e.id for e in self.expects if e.id}
        by_digest = {_digest(rid): rid for rid in wanted}
        known: dict[str, float | None] = {}
        arrivals = self.arrivals
        for i, digest in enumerate(digests):
            rid = by_digest.get(digest)
            if rid is not None and rid not in known:
                arrival = arrivals[i]
                known[rid] = None if math.isnan(arrival) else arrival
        return known

    def _exact_arrivals(self, ids: set[str], again) -> dict[str, Any]:
        """Read the lines again for the arrivals of `ids` as the trace wrote them
        (streamed, arrivals are kept as floats)."""
        found: dict[str, Any] = {}
        for _, raw in again():
            value, problem = _decode_line(raw.rstrip(b"\r")) if raw.strip() else (None, "-")
            if (not problem and isinstance(value, dict) and value.get("type") == "request"
                    and value.get("id") in ids and value["id"] not in found):
                found[value["id"]] = value.get("arrival")
        return found

    def _report_duplicates(self, shared: set[int], again) -> None:
        """Read the lines again to name each duplicate id with its first line."""
        first: dict[str, int] = {}
        for number, raw in again():
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            value, problem = _decode_line(raw) if raw.strip() else (None, "blank")
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

    def trace(self, name: str, workload: Workload | None = None) -> Trace:
        """The validated trace (its requests in memory unless `workload` is given)."""
        cancels = [a for a, _ in self.actions if a.kind == "cancel"]
        preempts = [a for a, _ in self.actions if a.kind == "preempt"]
        if workload is None:
            workload = Workload.build(self.specs, cancels, preempts)
        return Trace(name, self.config, workload, tuple(self.expects))


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    return enumerate(data.split(b"\n"), start=1)


def parse_trace(data: bytes, name: str) -> Trace:
    """Validate a whole trace held in memory; raise `TraceError` listing every problem."""
    checker = _Validator(name, streamed=False)
    for number, raw in _lines(data):
        checker.feed(number, raw)
    checker.finish()
    return checker.trace(name)


def _file_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its newline) of a file, read as it goes."""
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    with handle:
        try:
            for number, raw in enumerate(handle, start=1):
                yield number, raw[:-1] if raw.endswith(b"\n") else raw
        except OSError as exc:
            raise UsageError(f"{path}: cannot read trace: {exc.strerror or exc}") from None


def _stream_requests(path: str, config: dict[str, Any]) -> Iterator[RequestSpec]:
    """The requests of a validated trace file, read again in file order."""
    hbs = config.get("hash_block_size") or config.get("block_size") or 16
    unit = config.get("time_unit", "tick")
    problems = _Problems(path)
    for number, raw in _file_lines(path):
        if b"request" not in raw:
            continue
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        value, problem = _decode_line(raw)
        if problem or not isinstance(value, dict) or value.get("type") != "request":
            continue
        try:
            yield _checked_spec(value, number)
        except (KeyError, TypeError):  # the file changed since it was checked
            label = value.get("id")
            _parse_request(_RecordChecker(problems, number, "request", value, label),
                           hbs, unit)
            problems.raise_if_any()
            raise


def _checked_spec(rec: dict, line: int) -> RequestSpec:
    """`_parse_request`'s result for a record already validated, without the checks."""
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


def read_trace(path: str) -> Trace:
    """Read and validate a trace file (`-` is standard input, read whole).

    A file larger than STREAM_ABOVE bytes is read twice: once to validate
    it, and again at each replay, so a replay holds only the requests that
    are live. Its requests out of arrival order in the file are sorted in
    memory instead (about 1 KB each). A smaller file is read whole.
    """
    if path == "-":
        data = sys.stdin.buffer.read()
        return parse_trace(data, "<stdin>")
    if not os.path.isfile(path) or os.path.getsize(path) <= STREAM_ABOVE:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise UsageError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
        return dataclasses.replace(parse_trace(data, path), directory=_folder(path))
    checker = _Validator(path, streamed=True)
    for number, raw in _file_lines(path):
        checker.feed(number, raw)
    checker.finish(lambda: _file_lines(path))
    config = checker.config
    source = partial(_stream_requests, path, config)
    cancels = [a for a, _ in checker.actions if a.kind == "cancel"]
    preempts = [a for a, _ in checker.actions if a.kind == "preempt"]
    if checker.in_order:
        workload = Workload.streamed(source, checker.count, checker.span, cancels, preempts,
                                     checker.largest)
    else:
        workload = Workload.build(list(source()), cancels, preempts)
    return dataclasses.replace(checker.trace(path, workload), directory=_folder(path))


def _folder(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


# --- a trace is data -----------------------------------------------------------------

ALLOW_FLAG = "--allow-trace-plugins"


def plugins_from_trace(options: Options) -> list[str]:
    """The plugin policies (`FILE.py:CLASS`, `MODULE:CLASS`) that `options` would run
    because a trace's config names them (no flag or argument gave the policies)."""
    if options.origin.get("policy") != "trace":
        return []
    return [name for name in options.policy if is_plugin(name)]


def allow_trace_plugins(trace: Trace, options: Options, allowed: bool,
                        how: str = f"pass {ALLOW_FLAG} (or name it with --policy)"
                        ) -> Options:
    """`options` as they may run: a plugin named only by the trace's config is code
    the user did not ask for on the command line, refused (UsageError naming it and
    `how` to allow it) unless `allowed`; allowed, a relative file is taken from the
    trace's folder."""
    named = plugins_from_trace(options)
    if not named:
        return options
    if not allowed:
        listed = ", ".join(repr(name) for name in named)
        noun = "policy" if len(named) == 1 else "policies"
        raise UsageError(f"{trace.name}: its config names the plugin {noun} {listed}: "
                         f"Python code, which a trace never runs on its own; to run it, "
                         f"{how}")
    return dataclasses.replace(options, plugin_dir=trace.directory)
