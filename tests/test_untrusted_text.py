"""Text from a trace in what people read: ids escaped in tables and messages (no terminal
control codes, no forged lines, columns aligned); in CSV quoted, controls escaped.

The inputs are tests/data/edge/control_ids.jsonl (see its README).
"""
from __future__ import annotations

import csv
import io
import json
import re

import pytest

import scheduler_sim.cli.replay
from conftest import ROOT
from scheduler_sim.cli.main import main
from scheduler_sim.records.errors import TraceError, UsageError
from scheduler_sim.io.request_rows import format_requests
from scheduler_sim.io.terminal_text import printable, text_width

CONTROL_IDS = ROOT / "tests" / "data" / "edge" / "control_ids.jsonl"


def run(argv: list[str]) -> tuple[int, str, str]:
    """main in-process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


# The ids of tests/data/edge/control_ids.jsonl as the --requests table shows them.
SHOWN_IDS = ["plain", "cr\\rr9      0  forged", "lf\\nr9      0  forged",
             "esc\\x1b[2J\\x1b[31mred", "c1\\x9b31m\\x85nel", "seps\\u2028ls\\u2029ps",
             "bidi\\u202eexe.txt", "tab\\tdel\\x7fnul\\x00", "wide\u65e5\u672c", "back\\\\x1b"]
RAW_IDS = ["plain", "cr\rr9      0  forged", "lf\nr9      0  forged", "esc\x1b[2J\x1b[31mred",
           "c1\x9b31m\x85nel", "seps\u2028ls\u2029ps", "bidi\u202eexe.txt",
           "tab\tdel\x7fnul\x00", "wide\u65e5\u672c", "back\\x1b"]


def test_requests_table_escapes_ids_and_stays_aligned():
    """`replay --requests` on ids with CR, LF, ESC, C1, U+2028/9, a bidi override, TAB,
    DEL, NUL, CJK and a backslash: every line printable, one line per request, each id
    escaped and padded to 21 columns (the widest, `esc\\x1b[2J\\x1b[31mred`; the CJK
    id is 8 columns wide in 6 characters), every other column where the header puts it."""
    status, out, err = run(["replay", str(CONTROL_IDS), "--requests"])
    assert (status, err) == (0, "")
    assert all(line.isprintable() for line in out.split("\n"))
    lines = out.split("\n")
    start = lines.index("requests under continuous (times in ticks)")
    assert text_width("wide\u65e5\u672c") == 8
    assert lines[start + 1] == ("id".ljust(21) + "  arrival  admitted  first token  finished  "
                                "status                  P  N  cached  preempt  useful rows  "
                                "replayed")
    rows = lines[start + 2:-1]
    assert lines[-1] == ""
    expected = []
    for i, shown in enumerate(SHOWN_IDS):
        pad = " " * (21 - (8 if i == 8 else len(shown)))
        expected.append(f"{shown}{pad}  {i:>7}  {i:>8}  {i + 1:>11}  {i + 2:>8}  "
                        f"finished_length_capped  4  2  {0:>6}  {0:>7}  {5:>11}  {0:>8}")
    assert rows == expected


def test_check_messages_escape_ids():
    """A failed expectation on an id with ESC sequences prints one escaped line."""
    status, out, err = run(["check", str(CONTROL_IDS), "--policy", "serial"])
    assert (status, err) == (1, "")
    assert out.splitlines() == [
        f"{CONTROL_IDS}:12: [serial] request 'esc\\x1b[2J\\x1b[31mred' finished: "
        "expected 5, got 8",
        f"{CONTROL_IDS}: FAILED: 1 of 2 expectation(s) failed, 1 field(s) differ (serial)"]


# The ids of tests/data/edge/control_ids.jsonl as a CSV reader reads them back from
# --requests-csv: CR, LF, TAB, the separators, the bidi override and CJK raw; ESC, C1,
# DEL and NUL escaped, and so the backslash doubled.
CSV_IDS = ["plain", "cr\rr9      0  forged", "lf\nr9      0  forged",
           "esc\\x1b[2J\\x1b[31mred", "c1\\x9b31m\\x85nel", "seps\u2028ls\u2029ps",
           "bidi\u202eexe.txt", "tab\tdel\\x7fnul\\x00", "wide\u65e5\u672c", "back\\\\x1b"]


def unescape(text: str) -> str:
    """The text a --requests-csv field was escaped from."""
    return re.sub(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4})",
                  lambda m: "\\" if m[1] == "\\" else chr(int(m[1][1:], 16)), text)


def test_requests_csv_escapes_controls_and_keeps_the_rest(tmp_path):
    """`--requests-csv`: no control character but TAB, CR and LF reaches the file (no NUL,
    ESC, C1 or DEL), CR and LF stay raw in quoted fields (the csv module with LF line ends
    would leave `cr\\r...` unquoted), a backslash is doubled, and unescaping what a CSV
    reader reads gives every raw id back exactly."""
    target = tmp_path / "req.csv"
    status, _, err = run(["replay", str(CONTROL_IDS), "--requests-csv", str(target)])
    assert (status, err) == (0, "")
    text = target.read_bytes().decode("utf-8")
    assert '\ncontinuous,"cr\rr9      0  forged",1,1,1,2,3,' in text
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", text)
    with open(target, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert [row[1] for row in rows] == ["id"] + CSV_IDS
    assert [unescape(row[1]) for row in rows[1:]] == RAW_IDS


def test_lone_surrogates_in_the_table_never_raise():
    """Ids with lone surrogates (which a trace may come to refuse): the table escapes
    them and its text encodes as UTF-8."""
    status, out, _ = run(["replay", str(CONTROL_IDS), "--json", "--requests"])
    assert status == 0
    records = json.loads(out)["runs"][0]["per_request"][:2]
    records[0]["id"], records[1]["id"] = "\ud800x", "y\udfff"
    table = format_requests("continuous", records)
    table.encode("utf-8")
    assert table.splitlines()[2:] == [
        "\\ud800x        0         0            1         2  finished_length_capped  4  2"
        "       0        0            5         0",
        "y\\udfff        1         1            2         3  finished_length_capped  4  2"
        "       0        0            5         0"]


def test_printable_escapes_what_a_terminal_would_obey():
    """The escapes, one by one; printable text (CJK, accents, emoji) is kept."""
    assert printable("a\rb\nc\td\x1b\x7f\x00\x85\x9b") == "a\\rb\\nc\\td\\x1b\\x7f\\x00\\x85\\x9b"
    assert printable("\u2028\u2029\u202e\u200b\ufeff\ud800\udfff\U000e0001") == (
        "\\u2028\\u2029\\u202e\\u200b\\ufeff\\ud800\\udfff\\U000e0001")
    assert printable("caf\u00e9 \u65e5\u672c \U0001f600") == "caf\u00e9 \u65e5\u672c \U0001f600"
    assert printable("a\\x1b") == "a\\x1b"
    assert printable("a\\x1b", backslashes=True) == "a\\\\x1b"
    assert [text_width(t) for t in ("abc", "\u65e5\u672c", "e\u0301", "\U0001f600")] == [3, 4, 1, 2]


@pytest.mark.parametrize("error, expected", [
    (TraceError(["t.jsonl:1: bad id 'a\x1b[2J\nb'", "t.jsonl:2: raw a\x1b[2J\nforged\u2028",
                 "t.jsonl:3: quoted " + repr("a\x1b")]),
     "t.jsonl:1: bad id 'a\\x1b[2J\\nb'\nt.jsonl:2: raw a\\x1b[2J\\nforged\\u2028\n"
     "t.jsonl:3: quoted 'a\\x1b'\n"),
    (UsageError("x\rforged"), "scheduler-sim: error: x\\rforged\n"),
])
def test_error_messages_are_escaped_whatever_built_them(monkeypatch, error, expected):
    """A message that carries raw text (not quoted by repr where it was built) still prints
    as one escaped line per problem; text already escaped by repr is left as it is."""
    def fail(path, keep=True):
        raise error

    monkeypatch.setattr(scheduler_sim.cli.replay, "read_trace", fail)
    assert run(["validate", "t.jsonl"]) == (2, "", expected)
