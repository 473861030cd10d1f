"""Trace validation (§2, rule T1) and registration order (rule T2).

Every test feeds bytes to `parse_trace` and checks the exact `file:line: ...`
messages of the `TraceError` it raises, or the `Trace` it returns.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from conftest import req, simulate
from scheduler_sim.records.errors import TraceError
from scheduler_sim.policies import POLICIES
from scheduler_sim.requests.queues import QUEUE_ORDERS
from scheduler_sim.io.problems import MAX_PROBLEMS
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.cli.main import main

NAME = "t.jsonl"


def jsonl(*lines) -> bytes:
    """JSONL bytes: dicts are dumped, str/bytes lines are kept verbatim."""
    out = []
    for line in lines:
        if isinstance(line, dict):
            line = json.dumps(line)
        if isinstance(line, str):
            line = line.encode()
        out.append(line + b"\n")
    return b"".join(out)


def problems(data: bytes, name: str = NAME) -> list[str]:
    """The problem list of the TraceError that parsing `data` must raise."""
    with pytest.raises(TraceError) as info:
        parse_trace(data, name)
    return info.value.problems


R1 = req("r1", 0, 4, 1)


# --- lines that are not records -------------------------------------------------------

def test_truncated_json_names_line_and_column():
    """A line cut off after `"r1"` (27 characters) fails at column 28 of line 1."""
    (msg,) = problems(b'{"type":"request","id":"r1"')
    assert msg.startswith("t.jsonl:1: invalid JSON: ")
    assert msg.endswith("at column 28, got the end of the line")


def test_invalid_json_quotes_what_it_found():
    """Where the text stops being JSON: what follows, whole when up to 20 characters
    (`x}` at column 7), cut with `...` when longer, the line's end when nothing."""
    assert problems(b'{"a": x}') == ["t.jsonl:1: invalid JSON: Expecting value at column 7, "
                                     "got 'x}'"]
    assert problems(b'{"a": 1} and then some more words') == [
        "t.jsonl:1: invalid JSON: Extra data at column 10, got 'and then some more w'..."]
    assert problems(b'{"a": ') == ["t.jsonl:1: invalid JSON: Expecting value at column 7, "
                                   "got the end of the line"]


@pytest.mark.parametrize("line, kind", [
    (b"[1, 2]", "array"), (b'"hello"', "string"), (b"42", "number"), (b"null", "null"),
])
def test_non_object_line_is_rejected(line, kind):
    """A JSON value that is not an object is an error naming what it is."""
    assert problems(line) == [f"t.jsonl:1: expected a JSON object, got {kind}"]


def test_unknown_type_suggests_the_closest_record_type():
    """`requst` is one letter off `request`: the message offers it and lists the known types."""
    assert problems(jsonl({"type": "requst", "id": "r1"})) == [
        "t.jsonl:1: unknown record type 'requst' (did you mean 'request'?) "
        "(known: config, request, cancel, preempt, expect)"]


def test_missing_type_is_an_error():
    """An object without `type` cannot be classified."""
    assert problems(jsonl({"id": "r1"})) == ["t.jsonl:1: missing field 'type'"]


def test_error_prefix_uses_the_given_file_name():
    """The file part of every message is the name passed to parse_trace."""
    assert problems(b"[]", "traces/x.jsonl") == [
        "traces/x.jsonl:1: expected a JSON object, got array"]


# --- request fields ------------------------------------------------------------------

def test_unknown_field_suggests_the_right_name():
    """`prompt_token` is unknown (did you mean prompt_tokens), and prompt_tokens is then missing."""
    rec = {"type": "request", "id": "r1", "arrival": 0, "prompt_token": 4, "output_tokens": 1}
    assert problems(jsonl(rec)) == [
        "t.jsonl:1: request 'r1': unknown field 'prompt_token' (did you mean 'prompt_tokens'?)",
        "t.jsonl:1: request 'r1': missing field 'prompt_tokens'",
    ]


def test_missing_fields_are_each_reported():
    """A request with only an id lacks arrival, prompt_tokens and output_tokens."""
    assert problems(jsonl({"type": "request", "id": "r1"})) == [
        "t.jsonl:1: request 'r1': missing field 'arrival'",
        "t.jsonl:1: request 'r1': missing field 'prompt_tokens'",
        "t.jsonl:1: request 'r1': missing field 'output_tokens'",
    ]


@pytest.mark.parametrize("field, value, bound", [
    ("prompt_tokens", 0, 1), ("prompt_tokens", -3, 1), ("output_tokens", 0, 1),
    ("output_tokens", -1, 1), ("arrival", -1, 0), ("max_tokens", 0, 1),
])
def test_counts_out_of_range_name_field_and_value(field, value, bound):
    """Counts below their minimum are rejected with the field, the bound and the value."""
    rec = dict(R1, **{field: value})
    assert problems(jsonl(rec)) == [
        f"t.jsonl:1: request 'r1': {field} must be an integer >= {bound}, got {value}"]


@pytest.mark.parametrize("raw, shown", [
    ("true", "true"), ("false", "false"), ("4.0", "4.0"), ('"4"', "'4'"),
    ("null", "null"), ("[4]", "[4]"), ("1e3", "1000.0"),
])
def test_non_integers_where_integers_belong(raw, shown):
    """Booleans, floats (even 4.0), strings, null and lists are not integers."""
    line = ('{"type":"request","id":"r1","arrival":0,"prompt_tokens":%s,'
            '"output_tokens":1}' % raw)
    assert problems(line.encode()) == [
        f"t.jsonl:1: request 'r1': prompt_tokens must be an integer >= 1, got {shown}"]


def test_string_arrival_is_not_an_integer():
    """`"arrival": "0"` is a string, quoted back as '0'."""
    rec = dict(R1, arrival="0")
    assert problems(jsonl(rec)) == [
        "t.jsonl:1: request 'r1': arrival must be an integer >= 0, got '0'"]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_rejected_naming_field_and_value(constant):
    """T1: every error names the line, the field and the bad value, NaN/Infinity included."""
    line = ('{"type":"request","id":"r1","arrival":0,"prompt_tokens":%s,'
            '"output_tokens":1}' % constant)
    (msg,) = problems(line.encode())
    assert msg.startswith("t.jsonl:1: ")
    assert "prompt_tokens" in msg
    assert constant in msg


def test_duplicate_request_id_names_the_first_line():
    """The second `r1` (line 3, after a blank line) points back at line 1."""
    data = jsonl(R1, "", req("r1", 2, 4, 1))
    assert problems(data) == [
        "t.jsonl:3: request 'r1': duplicate request id 'r1' (first on line 1)"]


def test_third_duplicate_still_names_the_first_line():
    """Every later copy of an id points at its first occurrence."""
    data = jsonl(R1, req("r1", 1, 4, 1), req("r1", 2, 4, 1))
    assert problems(data) == [
        "t.jsonl:2: request 'r1': duplicate request id 'r1' (first on line 1)",
        "t.jsonl:3: request 'r1': duplicate request id 'r1' (first on line 1)",
    ]


def test_duplicate_json_key_in_one_object():
    """`id` twice in one object is an error rather than last-one-wins."""
    line = b'{"type":"request","id":"r1","id":"r2","arrival":0,"prompt_tokens":4,"output_tokens":1}'
    (msg,) = problems(line)
    assert msg.startswith("t.jsonl:1: ")
    assert "duplicate key 'id'" in msg


def test_prompt_token_ids_length_must_match_prompt_tokens():
    """Two prompt ids but prompt_tokens 3."""
    rec = dict(req("r1", 0, 3, 1), prompt_token_ids=[1, 2])
    assert problems(jsonl(rec)) == [
        "t.jsonl:1: request 'r1': prompt_tokens must equal len(prompt_token_ids) = 2, got 3"]


def test_output_token_ids_length_must_match_output_tokens():
    """Two output ids but output_tokens 3."""
    rec = dict(req("r1", 0, 2, 3), output_token_ids=[7, 8])
    assert problems(jsonl(rec)) == [
        "t.jsonl:1: request 'r1': output_tokens must equal len(output_token_ids) = 2, got 3"]


def test_token_id_lists_alone_give_the_counts():
    """prompt_token_ids [1,2,3] and output_token_ids [5,6] make P=3, N=2 (and M defaults to N)."""
    rec = {"type": "request", "id": "r1", "arrival": 0,
           "prompt_token_ids": [1, 2, 3], "output_token_ids": [5, 6]}
    (spec,) = parse_trace(jsonl(rec), NAME).workload.requests
    assert (spec.prompt_tokens, spec.output_tokens, spec.max_tokens) == (3, 2, 2)
    assert spec.prompt_token_ids == (1, 2, 3)


def test_empty_token_id_list_is_rejected():
    """An empty prompt_token_ids list cannot define a prompt."""
    rec = {"type": "request", "id": "r1", "arrival": 0, "prompt_token_ids": [],
           "output_tokens": 1}
    assert problems(jsonl(rec)) == [
        "t.jsonl:1: request 'r1': prompt_token_ids must be a non-empty list of integers, got []"]


def test_max_tokens_below_output_tokens():
    """max_tokens 2 < output_tokens 4 is impossible."""
    rec = dict(req("r1", 0, 3, 4), max_tokens=2)
    assert problems(jsonl(rec)) == [
        "t.jsonl:1: request 'r1': max_tokens must be an integer >= output_tokens (4), got 2"]


def test_max_tokens_defaults_to_output_tokens():
    """Without max_tokens, M = N; with it, M is kept."""
    data = jsonl(req("a", 0, 4, 3), dict(req("b", 0, 4, 3), max_tokens=9))
    a, b = parse_trace(data, NAME).workload.requests
    assert (a.max_tokens, b.max_tokens) == (3, 9)


def test_non_string_id_is_rejected():
    """An id must be a non-empty string; the prefix then has no id."""
    rec = dict(R1, id=5)
    assert problems(jsonl(rec)) == ["t.jsonl:1: request: id must be a non-empty string, got 5"]


# --- cancels and preempts --------------------------------------------------------------

def test_cancel_and_preempt_of_unknown_ids():
    """Both name the unknown id; `r1x` is close enough to `r1` for a suggestion."""
    data = jsonl(R1, {"type": "cancel", "id": "r2", "at": 0},
                 {"type": "preempt", "id": "r1x", "at": 0})
    assert problems(data) == [
        "t.jsonl:2: cancel 'r2': cancel of unknown request 'r2'",
        "t.jsonl:3: preempt 'r1x': preempt of unknown request 'r1x' (did you mean 'r1'?)",
    ]


def test_cancel_and_preempt_before_arrival():
    """r1 arrives at 5: a cancel at 3 and a preempt at 4 are before it exists."""
    data = jsonl(req("r1", 5, 4, 1), {"type": "cancel", "id": "r1", "at": 3},
                 {"type": "preempt", "id": "r1", "at": 4})
    assert problems(data) == [
        "t.jsonl:2: cancel 'r1': at must be >= the request's arrival (5), got 3",
        "t.jsonl:3: preempt 'r1': at must be >= the request's arrival (5), got 4",
    ]


def test_cancel_may_precede_its_request_in_the_file():
    """Records need not be sorted: a cancel on line 1 of a request on line 2 is fine (T2)."""
    data = jsonl({"type": "cancel", "id": "r1", "at": 5}, req("r1", 5, 4, 1))
    trace = parse_trace(data, NAME)
    assert [(a.kind, a.id, a.at) for a in trace.workload.cancels] == [("cancel", "r1", 5)]


def test_cancel_unknown_field_and_bad_at():
    """A cancel has only type, id and at; `at` must be an integer >= 0."""
    data = jsonl(R1, {"type": "cancel", "id": "r1", "at": -1, "tick": 2})
    assert problems(data) == [
        "t.jsonl:2: cancel 'r1': unknown field 'tick'",
        "t.jsonl:2: cancel 'r1': at must be an integer >= 0, got -1",
    ]


# --- config ---------------------------------------------------------------------------

def test_config_must_be_the_first_record():
    """A config on line 2, after a request, is an error."""
    data = jsonl(R1, {"type": "config", "block_size": 4})
    assert problems(data) == ["t.jsonl:2: config: a config record must be the first record"]


def test_config_after_leading_blank_lines_is_first():
    """Blank lines are not records: a config on line 3 after two blank lines is accepted."""
    trace = parse_trace(jsonl("", "  ", {"type": "config", "block_size": 4}, R1), NAME)
    assert trace.config == {"block_size": 4}


@pytest.mark.parametrize("option, value, message", [
    ("block_sise", 4, "unknown option 'block_sise' (did you mean 'block_size'?)"),
    ("block_size", 0, "block_size must be an integer from 1 to 65,536, got 0"),
    ("num_blocks", 2.0, "num_blocks must be an integer >= 1, got 2.0"),
    ("watermark", 1.5, "watermark must be a number in [0.0, 1.0), got 1.5"),
    ("policy", "contnuous",
     "unknown policy 'contnuous' (did you mean 'continuous'?) (known: "
     + ", ".join(POLICIES) + ", or MODULE:CLASS or FILE.py:CLASS for your own)"),
    ("order", "lifo", "unknown order 'lifo' (known: " + ", ".join(QUEUE_ORDERS) + ")"),
    ("policy", ["continuous", "serial", "continuous"],
     'policy lists a name twice, got ["continuous", "serial", "continuous"]'),
    ("policy", [], "policy must be a policy name or a non-empty list of policy names, got []"),
])
def test_invalid_config_options(option, value, message):
    """Each bad option in a config record is reported with its name and value."""
    data = jsonl({"type": "config", option: value}, R1)
    assert problems(data) == [f"t.jsonl:1: config: {message}"]


def test_every_bad_option_of_a_config_is_reported():
    """Three bad options in one config record give three messages, in record order."""
    data = jsonl({"type": "config", "block_sise": 4, "num_blocks": 0, "order": "lifo"}, R1)
    assert problems(data) == [
        "t.jsonl:1: config: unknown option 'block_sise' (did you mean 'block_size'?)",
        "t.jsonl:1: config: num_blocks must be an integer >= 1, got 0",
        "t.jsonl:1: config: unknown order 'lifo' (known: " + ", ".join(QUEUE_ORDERS) + ")",
    ]


def test_valid_config_is_kept():
    """A good config record is returned normalised (a single policy becomes a list)."""
    data = jsonl({"type": "config", "block_size": 4, "policy": "serial", "watermark": 0}, R1)
    assert parse_trace(data, NAME).config == {"block_size": 4, "policy": ["serial"],
                                              "watermark": 0.0}


# --- bytes and lines --------------------------------------------------------------------

def test_deeply_nested_json_gives_a_clean_message():
    """100000 nested arrays on line 1 give one message (no RecursionError); line 2 is still checked."""
    data = b"[" * 100000 + b"]" * 100000 + b"\n" + b"{}\n"
    msgs = problems(data)
    assert len(msgs) == 2
    assert msgs[0].startswith("t.jsonl:1: ")
    assert "nested" in msgs[0]
    assert msgs[1] == "t.jsonl:2: missing field 'type'"


def test_deeply_nested_objects_give_a_clean_message():
    """100000 nested objects inside a field are refused the same way."""
    data = b'{"type":"request","x":' + b'{"a":' * 100000 + b"1" + b"}" * 100001
    (msg,) = problems(data)
    assert msg.startswith("t.jsonl:1: ")
    assert "nested" in msg


def test_invalid_utf8_names_the_byte():
    """A 0xff byte as the 26th byte of line 2 is reported with its position."""
    line = b'{"type":"request","id":"r\xff1","arrival":0,"prompt_tokens":4,"output_tokens":1}'
    assert problems(jsonl(R1, line)) == [
        "t.jsonl:2: invalid UTF-8 at byte 26, got b'\\xff'"]


def test_crlf_line_endings_are_accepted():
    """Windows line endings parse like LF ones; ids carry no stray carriage return."""
    data = jsonl(R1, req("r2", 1, 4, 1)).replace(b"\n", b"\r\n")
    trace = parse_trace(data, NAME)
    assert [s.id for s in trace.workload.requests] == ["r1", "r2"]


def test_crlf_errors_keep_line_numbers():
    """With CRLF endings an error on the second record is still on line 2."""
    data = jsonl(R1, req("r2", 1, 0, 1)).replace(b"\n", b"\r\n")
    assert problems(data) == [
        "t.jsonl:2: request 'r2': prompt_tokens must be an integer >= 1, got 0"]


def test_blank_lines_are_allowed_and_counted():
    """Lines 1, 3 and 4 are blank or whitespace: the bad record on line 5 is reported as line 5."""
    data = jsonl("", R1, "   ", "\t", req("r2", 0, 4, 0), "")
    assert problems(data) == [
        "t.jsonl:5: request 'r2': output_tokens must be an integer >= 1, got 0"]


def test_file_without_trailing_newline_and_empty_file():
    """The last line needs no newline, and an empty trace is valid (no requests)."""
    assert len(parse_trace(json.dumps(R1).encode(), NAME).workload.requests) == 1
    assert parse_trace(b"", NAME).workload.requests == ()


# --- expect records ---------------------------------------------------------------------

def test_expect_unknown_fields_for_each_form():
    """Unknown request, run and snapshot fields are errors with a did-you-mean each."""
    data = jsonl(R1, {"type": "expect", "id": "r1", "finishd": 3},
                 {"type": "expect", "iteratons": 3},
                 {"type": "expect", "at": 0, "fre": 3})
    assert problems(data) == [
        "t.jsonl:2: expect 'r1': unknown request field 'finishd' (did you mean 'finished'?)",
        "t.jsonl:3: expect: unknown run field 'iteratons' (did you mean 'iterations'?)",
        "t.jsonl:4: expect: unknown snapshot field 'fre' (did you mean 'free'?)",
    ]


def test_expect_fields_of_another_form_are_unknown():
    """`free` is a snapshot field, not a request field: an id-expect may not compare it."""
    data = jsonl(R1, {"type": "expect", "id": "r1", "free": 3})
    (msg,) = problems(data)
    assert msg.startswith("t.jsonl:2: expect 'r1': unknown request field 'free'")


def test_expect_unknown_policy():
    """`contnuous` is not a policy; the message offers `continuous`."""
    data = jsonl(R1, {"type": "expect", "policy": "contnuous", "iterations": 1})
    assert problems(data) == [
        "t.jsonl:2: expect: policy must be one of " + ", ".join(POLICIES) + ", got 'contnuous' "
        "(did you mean 'continuous'?)"]


def test_expect_with_id_and_at():
    """An expect is about a request or a tick, never both."""
    data = jsonl(R1, {"type": "expect", "id": "r1", "at": 0, "free": 1})
    assert problems(data) == [
        "t.jsonl:2: expect 'r1': an expect has either 'id' (a request) or 'at' (a tick), not both"]


def test_expect_that_compares_nothing():
    """A request, run or snapshot expect without a field to compare would silently pass."""
    data = jsonl(R1, {"type": "expect", "id": "r1"}, {"type": "expect"},
                 {"type": "expect", "at": 2}, {"type": "expect", "policy": "serial"})
    assert problems(data) == [
        "t.jsonl:2: expect 'r1': an expect must compare at least one field",
        "t.jsonl:3: expect: an expect must compare at least one field",
        "t.jsonl:4: expect: an expect must compare at least one field",
        "t.jsonl:5: expect: an expect must compare at least one field",
    ]


def test_expect_unknown_status_value():
    """`finshed_stopped` is not a status; the message lists the statuses and suggests one."""
    data = jsonl(R1, {"type": "expect", "id": "r1", "status": "finshed_stopped"})
    (msg,) = problems(data)
    assert msg.startswith("t.jsonl:2: expect 'r1': status must be one of ")
    assert "finished_length_capped" in msg
    assert msg.endswith("got 'finshed_stopped' (did you mean 'finished_stopped'?)")


def test_expect_of_unknown_request():
    """An expect about `r2` when only `r1` exists."""
    data = jsonl(R1, {"type": "expect", "id": "r2", "finished": 1})
    assert problems(data) == ["t.jsonl:2: expect: unknown request 'r2'"]


def test_expect_bad_at_and_bad_value():
    """`at` must be a tick >= 0; compared values may not be lists or booleans."""
    data = jsonl(R1, {"type": "expect", "at": -2, "free": 1},
                 {"type": "expect", "iterations": [1]},
                 {"type": "expect", "id": "r1", "finished": True})
    assert problems(data) == [
        "t.jsonl:2: expect: at must be an integer >= 0, got -2",
        't.jsonl:3: expect: iterations must be a number, string, null or a bound like '
        '{"max": 5}, got [1]',
        "t.jsonl:4: expect 'r1': finished must be a number, string, null or a bound like "
        '{"max": 5}, got true',
    ]


def test_valid_expects_are_parsed():
    """Request, run and snapshot expects keep their line, policy, subject and fields."""
    data = jsonl(R1, {"type": "expect", "id": "r1", "finished": 1},
                 {"type": "expect", "policy": "serial", "iterations": 1},
                 {"type": "expect", "at": 0, "free": 0, "reserved": 1})
    e1, e2, e3 = parse_trace(data, NAME).expects
    assert (e1.line, e1.policy, e1.id, e1.at, e1.fields) == (2, None, "r1", None, {"finished": 1})
    assert (e2.line, e2.policy, e2.id, e2.at, e2.fields) == (3, "serial", None, None,
                                                            {"iterations": 1})
    assert (e3.line, e3.at, e3.fields) == (4, 0, {"free": 0, "reserved": 1})
    assert [e.subject for e in (e1, e2, e3)] == ["request 'r1'", "run", "tick 0"]


# --- all errors, in order, capped -----------------------------------------------------

def test_three_bad_lines_give_three_problems_in_line_order():
    """A non-object (line 2), an unknown type (line 4) and a bad count (line 5) are all listed."""
    data = jsonl(R1, "[]", req("r2", 0, 4, 1), {"type": "requests"}, req("r3", 0, -1, 1))
    assert problems(data) == [
        "t.jsonl:2: expected a JSON object, got array",
        "t.jsonl:4: unknown record type 'requests' (did you mean 'request'?) "
        "(known: config, request, cancel, preempt, expect)",
        "t.jsonl:5: request 'r3': prompt_tokens must be an integer >= 1, got -1",
    ]


def test_cross_reference_errors_are_listed_in_line_order_too():
    """Errors found after reading the whole file (unknown ids on lines 2 and 4) still sort by line."""
    data = jsonl(R1, {"type": "cancel", "id": "zz", "at": 0}, req("r3", 0, 0, 1),
                 {"type": "expect", "id": "qq", "finished": 1}, "7")
    assert [m.split(":")[1] for m in problems(data)] == ["2", "3", "4", "5"]


def test_cap_keeps_the_earliest_lines_including_cross_reference_errors():
    """A cancel of an unknown id on line 1 followed by 60 bad lines: line 1 is among the 50 shown."""
    data = jsonl({"type": "cancel", "id": "zz", "at": 0}, *(["[]"] * 60))
    msgs = problems(data)
    assert msgs[0] == "t.jsonl:1: cancel 'zz': cancel of unknown request 'zz'"
    assert msgs[49] == "t.jsonl:50: expected a JSON object, got array"
    assert msgs[50] == "t.jsonl: ... and 11 more errors"


def test_problem_list_is_capped():
    """200 bad lines: the first 50 messages (lines 1..50) and one '... and 150 more errors' line."""
    assert MAX_PROBLEMS == 50
    msgs = problems(b"[]\n" * 200)
    assert len(msgs) == 51
    assert msgs[:50] == [f"t.jsonl:{n}: expected a JSON object, got array" for n in range(1, 51)]
    assert msgs[50] == "t.jsonl: ... and 150 more errors"


def test_exactly_fifty_problems_are_not_truncated():
    """50 bad lines give exactly 50 messages and no '... more' line."""
    msgs = problems(b"[]\n" * 50)
    assert len(msgs) == 50
    assert msgs[-1] == "t.jsonl:50: expected a JSON object, got array"


def test_valid_lines_among_bad_ones_do_not_add_problems():
    """A good request between two bad lines yields only the two problems."""
    data = jsonl("1", R1, "2")
    assert problems(data) == ["t.jsonl:1: expected a JSON object, got number",
                              "t.jsonl:3: expected a JSON object, got number"]


# --- T2: registration order --------------------------------------------------------------

def test_requests_are_ordered_by_arrival_then_file_order():
    """File order c@5, a@0, b@5, d@0 registers a, d (tick 0) then c, b (tick 5)."""
    data = jsonl(req("c", 5, 4, 1), req("a", 0, 4, 1), req("b", 5, 4, 1), req("d", 0, 4, 1))
    specs = parse_trace(data, NAME).workload.requests
    assert [(s.id, s.arrival) for s in specs] == [("a", 0), ("d", 0), ("c", 5), ("b", 5)]


def test_arrival_events_follow_file_order_within_a_tick():
    """The engine emits `arrival` for a, d at tick 0 and c, b at tick 5, in that order."""
    s = simulate([req("c", 5, 4, 1), req("a", 0, 4, 1), req("b", 5, 4, 1), req("d", 0, 4, 1)],
                 block_size=4, num_blocks=8)
    assert [(e["tick"], e["id"]) for e in s.of("arrival")] == [
        (0, "a"), (0, "d"), (5, "c"), (5, "b")]


def test_actions_are_ordered_by_tick_then_file_order():
    """Cancels listed at ticks 3, 1, 3 are replayed as tick 1, then the two tick-3 ones in file order."""
    data = jsonl({"type": "cancel", "id": "b", "at": 3}, {"type": "cancel", "id": "a", "at": 1},
                 {"type": "cancel", "id": "c", "at": 3},
                 req("a", 0, 4, 1), req("b", 0, 4, 1), req("c", 0, 4, 1))
    cancels = parse_trace(data, NAME).workload.cancels
    assert [(a.id, a.at) for a in cancels] == [("a", 1), ("b", 3), ("c", 3)]


def test_a_duplicate_id_is_reported_even_when_both_records_have_other_errors():
    """Line 1 has a bad count and line 2 repeats its id with its own error: the duplicate
    is named on line 2, with line 2's other problem."""
    data = jsonl({"type": "request", "id": "r1", "arrival": 0, "prompt_tokens": -3,
                  "output_tokens": 1},
                 {"type": "request", "id": "r1", "arrival": 0, "prompt_tokens": 4,
                  "output_tokens": 0})
    assert problems(data) == [
        "t.jsonl:1: request 'r1': prompt_tokens must be an integer >= 1, got -3",
        "t.jsonl:2: request 'r1': duplicate request id 'r1' (first on line 1)",
        "t.jsonl:2: request 'r1': output_tokens must be an integer >= 1, got 0",
    ]


def test_an_expect_of_a_number_with_a_string_is_refused():
    """`iterations: "9"` can never equal a count: a trace error, not a silent failure."""
    data = jsonl(R1, {"type": "expect", "iterations": "9"})
    assert problems(data) == ["t.jsonl:2: expect: iterations must be a finite number or null, got '9'"]


def test_an_expect_of_an_infinite_number_is_refused():
    """1e400 reads as infinity: an expectation can never equal it, so it is a trace error."""
    data = b'{"type":"request","id":"r1","arrival":0,"prompt_tokens":4,"output_tokens":1}\n' \
           b'{"type":"expect","makespan":1e400}\n'
    assert problems(data) == [
        "t.jsonl:2: expect: makespan must be a finite number or null, got inf"]


def test_option_combinations_of_the_config_are_trace_errors():
    """`order: lpm` without prefix caching cannot run: validate reports it at the config
    line, as replay and check would."""
    data = jsonl({"type": "config", "order": "lpm"}, R1)
    assert problems(data) == [
        "t.jsonl:1: config: order 'lpm' needs prefix_caching: true (it sorts by cached "
        "prefix)"]


def test_a_lone_surrogate_in_a_string_is_refused_with_its_line():
    """tests/data/edge/lone_surrogate.jsonl: line 1's id is "\\ud800", half of a UTF-16
    pair, which no output can encode; line 2's "\\ud83d\\ude00" is a whole pair (one
    emoji) and is fine. `validate` names line 1 only and exits 2."""
    path = Path(__file__).resolve().parent / "data" / "edge" / "lone_surrogate.jsonl"
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", str(path)], out=out, err=err) == 2
    assert err.getvalue() == (f"{path}:1: invalid text: a string holds a lone surrogate "
                              "(\\ud800), which is not a character, got '\\ud800'\n")


def test_integers_too_large_for_a_float_are_out_of_range_not_a_traceback():
    """tests/data/edge/huge_integers.jsonl: an arrival and a cancel's `at` of 10**400
    (too large to convert to a float) are reported at their lines, exit 2; so is an
    expectation bound of 10**400 (which `check` would have multiplied by a float)."""
    path = Path(__file__).resolve().parent / "data" / "edge" / "huge_integers.jsonl"
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", str(path)], out=out, err=err) == 2
    big = "1000000000000000000000000000000000000..."
    assert err.getvalue().splitlines() == [
        f"{path}:2: request 'a': arrival must be at most 1e15 (in the trace's time unit), "
        f"got {big}",
        f"{path}:4: cancel 'b': at must be at most 1e15 (in the trace's time unit), got {big}"]
    data = (json.dumps({"type": "request", "id": "b", "arrival": 0, "prompt_tokens": 1,
                        "output_tokens": 1}) + "\n"
            + json.dumps({"type": "expect", "id": "b", "ttft": {"approx": 1, "rel": 10 ** 400}}))
    with pytest.raises(TraceError) as exc:
        parse_trace(data.encode(), NAME)
    assert exc.value.problems == [
        f"{NAME}:2: expect 'b': ttft: rel must be a finite number of at most 1e300 in size, "
        f"got {big}"]
