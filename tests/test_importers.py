"""The importers of public trace formats and the `convert` command (§10).

Real rows come from the committed slices in `tests/data/` (see its README for
sources and licences): the first 200 lines of Mooncake's FAST'25
conversation trace and the header plus the first 200 rows of Azure's 2023
conversation trace. vidur and BurstGPT rows are small inline CSV texts.

The time rule (importers docstring): times are in seconds (the config record
says `"time_unit": "s"`); arrival = (timestamp - earliest timestamp) in
seconds, computed exactly with fractions and written as the nearest float, or
as an int when it is integral (0, 3, but 5.999); there is no tick length any
more (`convert` has no `--tick-ms`). Ids are `<format>-<line>`; rows that tie
keep their file order; a bad row is reported as `file:line: ...` and skipped
unless `strict`, which makes the whole conversion fail with exit status 2.
"""
from __future__ import annotations

import io
import json
import os
import re
from fractions import Fraction
from pathlib import Path

import pytest

from scheduler_sim.cli.main import main
from scheduler_sim.io.importers import convert
from scheduler_sim.io.trace import parse_trace

DATA = Path(__file__).resolve().parent / "data"
MOONCAKE = DATA / "mooncake_conversation_head.jsonl"
AZURE = DATA / "azure_conv_head.csv"

VIDUR = (
    "arrived_at,num_prefill_tokens,num_decode_tokens\n"
    "0.5,100,20\n"      # line 2: earliest -> 0
    "2.51,7,3\n"        # line 3: 2.01 s later; 2.01 * 1000 is 2009.99.. in floats
    "0.75,64,1\n"       # line 4: 250 ms after the earliest
    "1.1,8,2\n"         # line 5: 0.6 s later; 1.1 - 0.5 in floats is 0.6000000000000001
)

BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"        # line 2
    "45,ChatGPT,1087,0,1087,Conversation log\n"      # line 3: failed (0 response tokens)
    "118.25,GPT-4,417,248,665,API log\n"             # line 4
)


def run(argv: list[str]) -> tuple[int, str, str]:
    """Call the command line in-process; return (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def requests_of(records: list[dict]) -> dict[str, dict]:
    """The request records of a conversion, by id."""
    return {r["id"]: r for r in records if r["type"] == "request"}


def problem_lines(problems: list[str], name: str) -> list[int]:
    """The line numbers of `name:line: ...` problems, in order."""
    lines = []
    for p in problems:
        match = re.match(re.escape(name) + r":(\d+): ", p)
        assert match, f"problem does not start with {name}:LINE: {p!r}"
        lines.append(int(match.group(1)))
    return lines


def mooncake_text() -> str:
    """The Mooncake slice as text."""
    return MOONCAKE.read_text(encoding="utf-8")


def azure_text() -> str:
    """The Azure slice as text (CRLF kept)."""
    return AZURE.read_bytes().decode("utf-8")


# --- the committed slices ------------------------------------------------------------

def test_slices_keep_the_upstream_shape_and_licences():
    """The Mooncake slice is 200 LF lines; the Azure slice is a header plus 200 CRLF rows with
    no final newline (as upstream); both licences and the README sit beside them."""
    moon = MOONCAKE.read_bytes()
    assert moon.count(b"\n") == 200 and moon.endswith(b"\n") and b"\r" not in moon
    az = AZURE.read_bytes()
    assert az.count(b"\r\n") == 200 and az.count(b"\n") == 200
    assert not az.endswith(b"\n")
    assert az.startswith(b"TIMESTAMP,ContextTokens,GeneratedTokens\r\n")
    assert b"Apache License" in (DATA / "LICENSE-APACHE").read_bytes()
    assert b"Attribution 4.0 International" in (DATA / "LICENSE-CC-BY-4.0").read_bytes()
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for word in ("kvcache-ai/Mooncake", "Apache-2.0", "Azure/AzurePublicDataset",
                 "CC-BY-4.0", "Splitwise", "Patel"):
        assert word in readme


# --- Mooncake ---------------------------------------------------------------------------

def test_mooncake_slice_first_rows_in_seconds():
    """Mooncake timestamps are ms from 0 (the first line is at 0): the arrival is the
    timestamp / 1000 s; lines 1-3 are at 0, line 11 at 3000 ms -> 3, line 27 at 5999 ms ->
    5.999, line 200 at 72000 ms -> 72; hash_ids become block_hashes and the config says
    seconds and 512-token hash blocks."""
    conv = convert("mooncake", mooncake_text(), "m.jsonl")
    assert conv.problems == [] and conv.failed_requests == 0
    assert conv.records[0] == {"type": "config", "time_unit": "s", "hash_block_size": 512}
    assert list(conv.records[0]) == ["type", "time_unit", "hash_block_size"]
    assert len(conv.records) == 201
    assert conv.records[1] == {"type": "request", "id": "mooncake-1", "arrival": 0,
                               "prompt_tokens": 6758, "output_tokens": 500,
                               "block_hashes": list(range(14))}
    assert conv.records[2] == {"type": "request", "id": "mooncake-2", "arrival": 0,
                               "prompt_tokens": 7322, "output_tokens": 490,
                               "block_hashes": [0] + list(range(14, 28))}
    assert conv.records[3] == {"type": "request", "id": "mooncake-3", "arrival": 0,
                               "prompt_tokens": 7236, "output_tokens": 794,
                               "block_hashes": [0] + list(range(28, 42))}
    by_id = requests_of(conv.records)
    assert by_id["mooncake-27"] == {"type": "request", "id": "mooncake-27", "arrival": 5.999,
                                    "prompt_tokens": 1053, "output_tokens": 26,
                                    "block_hashes": [0, 773, 774]}
    assert by_id["mooncake-11"]["arrival"] == 3
    assert by_id["mooncake-11"]["prompt_tokens"] == 13544
    assert by_id["mooncake-11"]["output_tokens"] == 71
    assert by_id["mooncake-200"]["arrival"] == 72
    assert by_id["mooncake-200"]["prompt_tokens"] == 19978
    assert by_id["mooncake-200"]["output_tokens"] == 448


def test_mooncake_slice_seconds_are_exact_not_rounded():
    """Nothing is rounded to a tick: 3000 ms -> 3, 5999 ms -> 5.999 (not 5 or 6), 9000 ->
    9, 41999 (line 120) -> 41.999, 65999 (line 181) -> 65.999, 72000 -> 72; integral
    arrivals are ints (3, not 3.0), the others are the floats nearest to n / 1000."""
    by_id = requests_of(convert("mooncake", mooncake_text(), "m.jsonl").records)
    lines = (1, 10, 11, 26, 27, 29, 30, 120, 181, 200)
    arrivals = [by_id[f"mooncake-{n}"]["arrival"] for n in lines]
    assert arrivals == [0, 0, 3, 3, 5.999, 5.999, 9, 41.999, 65.999, 72]
    assert [type(a) for a in arrivals] == [int, int, int, int, float, float, int, float,
                                           float, int]
    assert arrivals[4] == float(Fraction(5999, 1000))
    assert arrivals[8] == float(Fraction(65999, 1000))


def test_mooncake_unsorted_timestamps_are_relative_to_the_earliest():
    """Timestamps 500, 100, 300, 2100 (ms): the earliest is 100, so the arrivals are
    0.4, 0, 0.2 and 2 s, in file order."""
    text = "".join(json.dumps({"timestamp": t, "input_length": 4, "output_length": 2}) + "\n"
                   for t in (500, 100, 300, 2100))
    conv = convert("mooncake", text, "u.jsonl")
    assert [(r["id"], r["arrival"]) for r in conv.records[1:]] == [
        ("mooncake-1", 0.4), ("mooncake-2", 0), ("mooncake-3", 0.2), ("mooncake-4", 2)]


def test_ties_keep_file_order():
    """Lines 1-10 of the Mooncake slice all have timestamp 0: their records come out in
    file order, and the parsed trace registers them in that order (T2); so do lines 120-126,
    all at 41999 ms -> 41.999 s (requests 120-126 of the 200 in the parsed trace)."""
    conv = convert("mooncake", mooncake_text(), "m.jsonl")
    tied = [r["id"] for r in conv.records[1:] if r["arrival"] == 0]
    assert tied == [f"mooncake-{n}" for n in range(1, 11)]
    trace = parse_trace("".join(json.dumps(r) + "\n" for r in conv.records).encode(), "m")
    assert trace.config == {"time_unit": "s", "hash_block_size": 512}
    assert [r.id for r in trace.workload.requests[:10]] == tied
    at_41_999 = [r["id"] for r in conv.records[1:] if r["arrival"] == 41.999]
    assert at_41_999 == [f"mooncake-{n}" for n in range(120, 127)]
    assert [(r.id, r.arrival) for r in trace.workload.requests[119:126]] == \
        [(i, 41.999) for i in at_41_999]


def test_ties_of_unsorted_rows_keep_file_order_in_the_replay_order():
    """Timestamps 7, 3, 7, 3 (ms): arrivals 0.004, 0, 0.004, 0 s; the parsed trace
    registers the pair at 0 as lines 2 then 4, and the pair at 0.004 s as lines 1 then 3."""
    text = "".join(json.dumps({"timestamp": t, "input_length": 4, "output_length": 2}) + "\n"
                   for t in (7, 3, 7, 3))
    conv = convert("mooncake", text, "t.jsonl")
    assert [r["arrival"] for r in conv.records[1:]] == [0.004, 0, 0.004, 0]
    trace = parse_trace("".join(json.dumps(r) + "\n" for r in conv.records).encode(), "t")
    assert [(r.id, r.arrival) for r in trace.workload.requests] == [
        ("mooncake-2", 0), ("mooncake-4", 0), ("mooncake-1", 0.004), ("mooncake-3", 0.004)]


def test_mooncake_bad_rows_are_reported_by_line_and_skipped():
    """Each bad line (bad JSON, missing field, zero / negative / non-integer / boolean count,
    bad timestamp, too many hash ids, a non-object) is one problem `m.jsonl:LINE: ...`
    naming the field; the good lines 1 and 12 are kept, relative to the earliest good
    timestamp (line 12 at 100 ms -> 0, line 1 at 500 ms -> 0.4 s)."""
    lines = [
        {"timestamp": 500, "input_length": 10, "output_length": 2},                    # 1 ok
        "{not json",                                                                    # 2
        {"timestamp": 100, "input_length": 10},                                         # 3
        {"timestamp": 100, "input_length": 0, "output_length": 2},                      # 4
        {"timestamp": 100, "input_length": -4, "output_length": 2},                     # 5
        {"timestamp": 100, "input_length": 4.5, "output_length": 2},                    # 6
        {"timestamp": "soon", "input_length": 4, "output_length": 2},                   # 7
        {"timestamp": -1, "input_length": 4, "output_length": 2},                       # 8
        {"timestamp": 100, "input_length": 4, "output_length": True},                   # 9
        {"timestamp": 100, "input_length": 1024, "output_length": 2,
         "hash_ids": [1, 2, 3]},                                                        # 10
        [1, 2],                                                                         # 11
        {"timestamp": 100, "input_length": 1024, "output_length": 3,
         "hash_ids": [5, 6]},                                                           # 12 ok
    ]
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    conv = convert("mooncake", text, "m.jsonl")
    assert problem_lines(conv.problems, "m.jsonl") == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    fields = {3: "output_length", 4: "input_length", 5: "input_length", 6: "input_length",
              7: "timestamp", 8: "timestamp", 9: "output_length", 10: "hash_ids"}
    for line, field in fields.items():
        assert field in conv.problems[line - 2], conv.problems[line - 2]
    assert conv.records[1:] == [
        {"type": "request", "id": "mooncake-1", "arrival": 0.4, "prompt_tokens": 10,
         "output_tokens": 2},
        {"type": "request", "id": "mooncake-12", "arrival": 0, "prompt_tokens": 1024,
         "output_tokens": 3, "block_hashes": [5, 6]},
    ]


def test_mooncake_nan_and_infinite_timestamps_are_bad_rows():
    """Python's json accepts NaN and Infinity; a timestamp must be a finite number of ms, so
    lines 2 and 3 are bad rows (reported, skipped), never a crash; line 1 is kept."""
    text = ('{"timestamp": 0, "input_length": 4, "output_length": 2}\n'
            '{"timestamp": NaN, "input_length": 4, "output_length": 2}\n'
            '{"timestamp": Infinity, "input_length": 4, "output_length": 2}\n')
    conv = convert("mooncake", text, "n.jsonl")
    assert problem_lines(conv.problems, "n.jsonl") == [2, 3]
    assert all("timestamp" in p for p in conv.problems)
    assert [r["id"] for r in conv.records[1:]] == ["mooncake-1"]


# --- Azure ------------------------------------------------------------------------------

def test_azure_slice_first_rows_in_seconds():
    """Earliest TIMESTAMP 18:15:46.6805900 (line 2). Line 3 at 50.9951690: 4.3145790 s;
    line 4 at 51.2224670: 4.5418770; line 5 at 51.3910170: 4.7104270; line 201 at
    18:16:47.9441270: 61.2635370 (no ms truncated away). No hash_block_size in the config."""
    conv = convert("azure", azure_text(), "a.csv")
    assert conv.problems == [] and conv.failed_requests == 0
    assert conv.records[0] == {"type": "config", "time_unit": "s"}
    assert len(conv.records) == 201
    assert conv.records[1:5] == [
        {"type": "request", "id": "azure-2", "arrival": 0, "prompt_tokens": 374,
         "output_tokens": 44},
        {"type": "request", "id": "azure-3", "arrival": 4.314579, "prompt_tokens": 396,
         "output_tokens": 109},
        {"type": "request", "id": "azure-4", "arrival": 4.541877, "prompt_tokens": 879,
         "output_tokens": 55},
        {"type": "request", "id": "azure-5", "arrival": 4.710427, "prompt_tokens": 91,
         "output_tokens": 16},
    ]
    assert conv.records[-1] == {"type": "request", "id": "azure-201", "arrival": 61.263537,
                                "prompt_tokens": 1143, "output_tokens": 409}


def test_azure_slice_arrivals_are_exact_differences_of_the_timestamps():
    """Line 6 at 52.5732450 - 46.6805900 = 5.892655 s, line 7 at 52.9921190: 6.311529, line
    8 at 54.4260870: 7.745497, each the float nearest the exact 7-digit difference; line 201
    is 61.263537 = float(Fraction(612635370, 10**7))."""
    conv = convert("azure", azure_text(), "a.csv")
    assert [r["arrival"] for r in conv.records[1:8]] == \
        [0, 4.314579, 4.541877, 4.710427, 5.892655, 6.311529, 7.745497]
    assert conv.records[5] == {"type": "request", "id": "azure-6", "arrival": 5.892655,
                               "prompt_tokens": 91, "output_tokens": 16}
    assert conv.records[5]["arrival"] == float(Fraction("52.5732450") - Fraction("46.6805900"))
    assert conv.records[-1]["arrival"] == float(Fraction(612635370, 10**7))


def test_azure_seventh_fraction_digit_survives():
    """The 7th digit of an Azure fraction is kept: line 3 is 0.0000001 s after line 2 ->
    1e-07 (as float epoch seconds, ~1.7e9 with a step of 2.4e-7 s, it would be 0), and
    line 4 at 18:17:03.9799607 is 1 min 17.2993707 s after -> 77.2993707."""
    text = ("TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
            "2023-11-16 18:15:46.6805900,1,1\r\n"
            "2023-11-16 18:15:46.6805901,2,2\r\n"
            "2023-11-16 18:17:03.9799607,3,3")
    conv = convert("azure", text, "a.csv")
    assert conv.problems == []
    assert [(r["id"], r["arrival"]) for r in conv.records[1:]] == \
        [("azure-2", 0), ("azure-3", 1e-07), ("azure-4", 77.2993707)]
    assert conv.records[2]["arrival"] == float(Fraction(1, 10**7))
    assert conv.records[3]["arrival"] == float(Fraction(772993707, 10**7))


def test_azure_bad_rows_are_reported_by_line_and_skipped():
    """CRLF rows: a bad TIMESTAMP shape (line 3), a bad fraction (line 4), an hour 25 (line
    5), a short row (line 6), a zero and a non-integer count (lines 7, 8) are reported;
    lines 2 and 9 are kept (line 9 is 1.5 s after line 2: arrival 1.5)."""
    text = ("TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
            "2023-11-16 18:15:46.0000000,374,44\r\n"
            "2023-11-16T18:15:46.5,1,1\r\n"
            "2023-11-16 18:15:46.5x,1,1\r\n"
            "2023-11-16 25:15:46.5,1,1\r\n"
            "2023-11-16 18:15:46.5,1\r\n"
            "2023-11-16 18:15:46.5,0,1\r\n"
            "2023-11-16 18:15:46.5,1,2.5\r\n"
            "2023-11-16 18:15:47.5000000,10,3")
    conv = convert("azure", text, "a.csv")
    assert problem_lines(conv.problems, "a.csv") == [3, 4, 5, 6, 7, 8]
    assert "TIMESTAMP" in conv.problems[0] and "ContextTokens" in conv.problems[4]
    assert "GeneratedTokens" in conv.problems[5]
    assert conv.records[1:] == [
        {"type": "request", "id": "azure-2", "arrival": 0, "prompt_tokens": 374,
         "output_tokens": 44},
        {"type": "request", "id": "azure-9", "arrival": 1.5, "prompt_tokens": 10,
         "output_tokens": 3},
    ]


# --- vidur ------------------------------------------------------------------------------

def test_vidur_rows_in_seconds_exactly():
    """arrived_at is seconds; the earliest is line 2 (0.5 s). Line 3 is 2.51 - 0.5 = 2.01 s
    later (float(Fraction('2.51') - Fraction('0.5')); 2.01 * 1000 in floats is
    2009.999..., so no float detour through ms); line 4 is 0.25 s later; line 5 is
    1.1 - 0.5 = 0.6 exactly, where float subtraction gives 0.6000000000000001."""
    conv = convert("vidur", VIDUR, "v.csv")
    assert conv.problems == []
    assert conv.records == [
        {"type": "config", "time_unit": "s"},
        {"type": "request", "id": "vidur-2", "arrival": 0, "prompt_tokens": 100,
         "output_tokens": 20},
        {"type": "request", "id": "vidur-3", "arrival": 2.01, "prompt_tokens": 7,
         "output_tokens": 3},
        {"type": "request", "id": "vidur-4", "arrival": 0.25, "prompt_tokens": 64,
         "output_tokens": 1},
        {"type": "request", "id": "vidur-5", "arrival": 0.6, "prompt_tokens": 8,
         "output_tokens": 2},
    ]
    # the traps the exact arithmetic avoids, as this Python computes them
    assert 2.01 * 1000 != 2010 and 1.1 - 0.5 == 0.6000000000000001
    assert conv.records[2]["arrival"] == float(Fraction("2.51") - Fraction("0.5"))
    assert conv.records[4]["arrival"] == float(Fraction("1.1") - Fraction("0.5"))
    assert conv.records[4]["arrival"] != 1.1 - 0.5


def test_vidur_bad_rows_are_reported_by_line_and_skipped():
    """A short row (line 3), a bad timestamp (4), a negative timestamp (5), zero prompt (6),
    negative decode count (7), non-integer count (8) are reported; lines 2 and 9 stay."""
    text = ("arrived_at,num_prefill_tokens,num_decode_tokens\n"
            "1,5,6\n"
            "2,7\n"
            "later,3,3\n"
            "-1,3,3\n"
            "1.5,0,3\n"
            "1.5,3,-1\n"
            "1.5,3.5,1\n"
            "3,8,9\n")
    conv = convert("vidur", text, "v.csv")
    assert problem_lines(conv.problems, "v.csv") == [3, 4, 5, 6, 7, 8]
    for index, field in ((1, "arrived_at"), (2, "arrived_at"), (3, "num_prefill_tokens"),
                         (4, "num_decode_tokens"), (5, "num_prefill_tokens")):
        assert field in conv.problems[index], conv.problems[index]
    assert conv.records[1:] == [
        {"type": "request", "id": "vidur-2", "arrival": 0, "prompt_tokens": 5,
         "output_tokens": 6},
        {"type": "request", "id": "vidur-9", "arrival": 2, "prompt_tokens": 8,
         "output_tokens": 9},
    ]


def test_a_header_lacking_a_column_is_reported_at_line_1():
    """A vidur header without num_prefill_tokens is a problem at line 1 naming the missing
    column, and no request is produced from the rows under it."""
    conv = convert("vidur", "arrived_at,num_decode_tokens\n1,2\n", "h.csv")
    assert problem_lines(conv.problems, "h.csv") == [1]
    assert "num_prefill_tokens" in conv.problems[0]
    assert conv.records == [{"type": "config", "time_unit": "s"}]


# --- BurstGPT ---------------------------------------------------------------------------

def test_burstgpt_skips_and_counts_failed_requests():
    """Line 3 has Response tokens 0 (a failed request): skipped, counted, not a bad row.
    Earliest is line 2 (5 s); line 4 (118.25 s) is 113.25 s later: arrival 113.25."""
    conv = convert("burstgpt", BURSTGPT, "b.csv")
    assert conv.problems == []
    assert conv.failed_requests == 1
    assert conv.records == [
        {"type": "config", "time_unit": "s"},
        {"type": "request", "id": "burstgpt-2", "arrival": 0, "prompt_tokens": 472,
         "output_tokens": 18},
        {"type": "request", "id": "burstgpt-4", "arrival": 113.25, "prompt_tokens": 417,
         "output_tokens": 248},
    ]


def test_burstgpt_reads_columns_by_name():
    """The same rows with the columns in another order give the same requests."""
    text = ("Log Type,Response tokens,Model,Total tokens,Request tokens,Timestamp\n"
            "Conversation log,18,ChatGPT,490,472,5\n"
            "Conversation log,0,ChatGPT,1087,1087,45\n"
            "API log,248,GPT-4,665,417,118.25\n")
    assert convert("burstgpt", text, "b.csv").records == \
        convert("burstgpt", BURSTGPT, "b.csv").records


def test_burstgpt_bad_rows_are_reported_by_line_and_skipped():
    """A negative Response tokens (line 3), a zero Request tokens (4), a bad Timestamp (5)
    and a short row (6) are bad rows; the failed request (line 7) is only counted."""
    text = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "1,ChatGPT,10,5,15,Conversation log\n"
            "2,ChatGPT,10,-5,5,Conversation log\n"
            "3,ChatGPT,0,5,5,Conversation log\n"
            "x,ChatGPT,10,5,15,Conversation log\n"
            "4,ChatGPT,10\n"
            "5,ChatGPT,10,0,10,Conversation log\n")
    conv = convert("burstgpt", text, "b.csv")
    assert problem_lines(conv.problems, "b.csv") == [3, 4, 5, 6]
    assert "Response tokens" in conv.problems[0] and "Request tokens" in conv.problems[1]
    assert "Timestamp" in conv.problems[2]
    assert conv.failed_requests == 1
    assert [r["id"] for r in conv.records[1:]] == ["burstgpt-2"]


# --- the convert command ------------------------------------------------------------------

def test_convert_command_writes_a_valid_trace(tmp_path):
    """Converting the Mooncake slice to a file: exit 0, nothing on stdout, the file parses
    as trace v1 with 200 requests and its config, and stderr names the count."""
    out = tmp_path / "m.jsonl"
    status, stdout, stderr = run(["convert", "--from", "mooncake", str(MOONCAKE),
                                  "-o", str(out)])
    assert status == 0 and stdout == ""
    trace = parse_trace(out.read_bytes(), str(out))
    assert len(trace.workload.requests) == 200
    assert trace.config == {"time_unit": "s", "hash_block_size": 512}
    first = trace.workload.requests[0]
    assert (first.id, first.arrival, first.prompt_tokens, first.output_tokens,
            first.block_hashes) == ("mooncake-1", 0, 6758, 500, tuple(range(14)))
    assert re.search(r"\b200 requests?\b", stderr) and "mooncake" in stderr


def test_convert_command_writes_seconds_to_stdout():
    """The Azure slice, written to stdout, gives the arrivals in seconds (0, 4.314579,
    4.541877, ...); the first arrival is written as the JSON integer 0, not 0.0, and the
    output parses as a trace in seconds."""
    status, stdout, stderr = run(["convert", "--from", "azure", str(AZURE)])
    assert status == 0
    lines = stdout.splitlines()
    records = [json.loads(line) for line in lines]
    assert records[0] == {"type": "config", "time_unit": "s"}
    assert [r["arrival"] for r in records[1:8]] == \
        [0, 4.314579, 4.541877, 4.710427, 5.892655, 6.311529, 7.745497]
    assert '"arrival":0,' in lines[1] and '"arrival":4.314579,' in lines[2]
    assert len(records) == 201
    trace = parse_trace(stdout.encode(), "stdout")
    assert trace.config == {"time_unit": "s"}
    assert trace.workload.requests[-1].arrival == 61.263537
    assert re.search(r"\b200 requests?\b", stderr)


def test_convert_command_rejects_tick_ms(tmp_path):
    """`--tick-ms` is gone: `convert ... --tick-ms 1` is an argparse error (exit 2, the
    flag named on stderr, no traceback, no output file), and `convert` takes no tick."""
    out = tmp_path / "a.jsonl"
    status, stdout, stderr = run(["convert", "--from", "azure", str(AZURE), "-o", str(out),
                                  "--tick-ms", "1"])
    assert status == 2 and stdout == ""
    assert "unrecognized arguments: --tick-ms 1" in stderr
    assert "Traceback" not in stderr
    assert not out.exists()
    with pytest.raises(TypeError):
        convert("vidur", VIDUR, "v.csv", 1)  # type: ignore[call-arg]


def test_convert_command_reports_bad_rows_and_failed_requests(tmp_path):
    """A BurstGPT file with two bad rows (lines 3, 4) and one failed request (line 5): exit
    0, a valid trace of the 2 good rows (line 2 at 1 s -> 0, line 6 at 4 s -> 3), and
    stderr gives the counts 2 (requests), 1 (failed) and 2 (bad rows), and lists both bad
    lines (the failed row is not listed)."""
    src = tmp_path / "b.csv"
    src.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   "1,ChatGPT,10,5,15,Conversation log\n"
                   "2,ChatGPT,0,5,5,Conversation log\n"
                   "x,ChatGPT,10,5,15,Conversation log\n"
                   "3,ChatGPT,10,0,10,Conversation log\n"
                   "4,ChatGPT,7,2,9,Conversation log\n", encoding="utf-8")
    out = tmp_path / "b.jsonl"
    status, _, stderr = run(["convert", "--from", "burstgpt", str(src), "-o", str(out)])
    assert status == 0
    trace = parse_trace(out.read_bytes(), str(out))
    assert [(r.id, r.arrival) for r in trace.workload.requests] == \
        [("burstgpt-2", 0), ("burstgpt-6", 3)]
    assert re.search(r"\b2 requests\b", stderr)
    assert re.search(r"\b1 failed request", stderr)
    assert re.search(r"\b2 bad rows?\b", stderr)
    assert f"{src}:3:" in stderr and f"{src}:4:" in stderr
    assert f"{src}:5:" not in stderr


def test_convert_strict_fails_on_bad_rows_and_leaves_no_file(tmp_path):
    """With --strict, a vidur file with bad lines 3, 5 and 6 exits 2, lists every bad line
    on stderr, and leaves no output file (nor a temporary one) behind."""
    src = tmp_path / "v.csv"
    src.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                   "0,5,6\n"
                   "1,0,6\n"
                   "2,5,6\n"
                   "3,5\n"
                   "x,5,6\n", encoding="utf-8")
    out = tmp_path / "v.jsonl"
    status, stdout, stderr = run(["convert", "--from", "vidur", str(src), "-o", str(out),
                                  "--strict"])
    assert status == 2 and stdout == ""
    for line in (3, 5, 6):
        assert f"{src}:{line}:" in stderr
    assert f"{src}:2:" not in stderr and f"{src}:4:" not in stderr
    assert "Traceback" not in stderr
    assert sorted(os.listdir(tmp_path)) == ["v.csv"]


def test_convert_strict_lists_every_bad_line_beyond_twenty(tmp_path):
    """With --strict, all 25 bad lines (1..25) are listed, not a capped subset of them."""
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps({"timestamp": 0, "input_length": 0,
                                       "output_length": 1}) + "\n" for _ in range(25))
                   + json.dumps({"timestamp": 0, "input_length": 1, "output_length": 1})
                   + "\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    status, _, stderr = run(["convert", "--from", "mooncake", str(src), "-o", str(out),
                             "--strict"])
    assert status == 2
    assert [int(m) for m in re.findall(re.escape(str(src)) + r":(\d+):", stderr)] == \
        list(range(1, 26))
    assert not out.exists()


def test_convert_strict_accepts_a_clean_file(tmp_path):
    """--strict on the clean Azure slice converts it like the default does."""
    out = tmp_path / "a.jsonl"
    status, _, _ = run(["convert", "--from", "azure", str(AZURE), "-o", str(out), "--strict"])
    assert status == 0
    assert len(parse_trace(out.read_bytes(), "a").workload.requests) == 200


def test_convert_missing_input_file_exits_2(tmp_path):
    """A missing input file is bad input: exit 2, a message naming it, no output file."""
    missing = tmp_path / "nope.csv"
    out = tmp_path / "o.jsonl"
    status, stdout, stderr = run(["convert", "--from", "azure", str(missing), "-o", str(out)])
    assert status == 2 and stdout == ""
    assert str(missing) in stderr and "Traceback" not in stderr
    assert not out.exists()


def test_convert_nan_timestamp_through_the_command_is_not_a_crash(tmp_path):
    """A Mooncake line with a NaN timestamp: without --strict, exit 0 and the line is listed
    as bad; with --strict, exit 2 (never an uncaught exception)."""
    src = tmp_path / "n.jsonl"
    src.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n'
                   '{"timestamp": NaN, "input_length": 4, "output_length": 2}\n',
                   encoding="utf-8")
    status, stdout, stderr = run(["convert", "--from", "mooncake", str(src)])
    assert status == 0 and f"{src}:2:" in stderr
    assert [json.loads(x)["id"] for x in stdout.splitlines()[1:]] == ["mooncake-1"]
    status, _, stderr = run(["convert", "--from", "mooncake", str(src), "--strict"])
    assert status == 2 and f"{src}:2:" in stderr


# --- round trip through the replay ------------------------------------------------------

def repeated_prefix_tokens(path: Path) -> tuple[list[int], list[str]]:
    """For each line of a Mooncake file: min(512 k, P - 1), where k is the number of leading
    hash ids whose whole prefix (ids 0..k-1) already began an earlier line."""
    seen: set[tuple[int, ...]] = set()
    bounds = []
    ids = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        rec = json.loads(raw)
        hashes = rec["hash_ids"]
        k = 0
        while k < len(hashes) and tuple(hashes[:k + 1]) in seen:
            k += 1
        bounds.append(min(512 * k, rec["input_length"] - 1))
        ids.append(f"mooncake-{number}")
        seen.update(tuple(hashes[:i + 1]) for i in range(len(hashes)))
    return bounds, ids


def test_mooncake_round_trip_prefix_hits_match_repeated_hash_ids(tmp_path):
    """Convert the Mooncake slice and replay it under vllm with prefix caching (block_size
    16, 20000 blocks: no preemption, asserted). A 16-token block can be a cache hit only if
    the chain of hash ids covering it (all 512-token ids up to the one holding its last
    token) already began an earlier request, so a request's cached_tokens is at most 512 x
    (its leading hash ids repeated from earlier lines), and at most P - 1 since the last
    prompt token is always computed; without preemption each request looks up the cache
    once, so the sum over requests is bounded by the sum of those per-request bounds
    (164,864 tokens for this slice). Every request starts with hash id 0, so some hit
    must happen: the sum is positive."""
    trace = tmp_path / "m.jsonl"
    assert run(["convert", "--from", "mooncake", str(MOONCAKE), "-o", str(trace)])[0] == 0
    status, stdout, stderr = run(["replay", str(trace), "--policy", "vllm", "--prefix-caching",
                                  "--num-blocks", "20000", "--block-size", "16", "--json",
                                  "--requests"])
    assert status == 0, stderr
    run_ = json.loads(stdout)["runs"][0]
    assert run_["preemptions"] == 0 and run_["completed"] == 200
    records = {r["id"]: r for r in run_["per_request"]}
    bounds, ids = repeated_prefix_tokens(MOONCAKE)
    assert sum(bounds) == 164864
    for rid, bound in zip(ids, bounds):
        assert 0 <= records[rid]["cached_tokens"] <= bound, (rid, records[rid], bound)
        assert records[rid]["cached_tokens"] % 16 == 0
    total = sum(r["cached_tokens"] for r in run_["per_request"])
    assert 0 < total <= sum(bounds)
