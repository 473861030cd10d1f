"""What `sweep` and `sweep merge` read besides the trace: shards, grid files, `--shard`.

Every corrupted input gives its exact messages (`FILE:LINE: what is wrong, got what`,
every problem of the file, exit 2) and never a traceback, a hang or a guess. The shards
are those of one small sweep: traces/quickstart.jsonl over num_blocks 6 and 24 and the
policies vllm and sglang, 4 configurations in shards 0/2 (indices 0, 2) and 1/2 (1, 3).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from scheduler_sim.engine.summary import RUN_FIELDS
from scheduler_sim.io.request_rows import csv_field
from scheduler_sim.io.sweep import parse_shard
from scheduler_sim.io.sweep_merge import MAX_SHARD_BYTES
from scheduler_sim.records.errors import UsageError

QUICKSTART = str(ROOT / "traces" / "quickstart.jsonl")
GRID = ["--grid", "num_blocks=6,24", "--policy", "vllm", "--policy", "sglang"]


@pytest.fixture(scope="module")
def sweep_files(tmp_path_factory) -> dict[str, bytes]:
    """The unsharded sweep's JSONL and CSV, and the JSONL of its shards 0/2 and 1/2."""
    where = tmp_path_factory.mktemp("sweep")
    files = {"full.jsonl": [], "full.csv": [], "0.jsonl": ["--shard", "0/2"],
             "1.jsonl": ["--shard", "1/2"]}
    for name, extra in files.items():
        flag = "--csv" if name.endswith(".csv") else "--jsonl"
        status, _, err = run_cli(["sweep", QUICKSTART, *GRID, *extra, flag, str(where / name)])
        assert status == 0, err
    return {name: (where / name).read_bytes() for name in files}


def header_and_rows(data: bytes) -> tuple[dict, list[dict]]:
    """A shard's header and rows, decoded."""
    lines = data.decode().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def jsonl(records: list) -> str:
    """Records (dicts, or raw str lines) as the sweep writes them, one a line."""
    return "".join((r if isinstance(r, str) else json.dumps(r, separators=(",", ":")))
                   + "\n" for r in records)


def merge(tmp_path: Path, *texts: str | bytes, extra: tuple[str, ...] = ()
          ) -> tuple[int, str, str, list[str]]:
    """`sweep merge` of files holding `texts` (named c0.jsonl, c1.jsonl, ...): (status,
    stdout, stderr, the file names)."""
    names = []
    for i, text in enumerate(texts):
        path = tmp_path / f"c{i}.jsonl"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        names.append(str(path))
    status, out, err = run_cli(["sweep", "merge", *names, *extra])
    return status, out, err, names


# --- sweep merge: shards that are fine ----------------------------------------------------

def test_shards_merge_byte_for_byte_whatever_their_spelling(sweep_files, tmp_path):
    """CRLF line ends, blank lines after the last row, the shards in either order, keys
    in another order: the merge writes the unsharded sweep's JSONL and CSV exactly."""
    header, rows = header_and_rows(sweep_files["0.jsonl"])
    shuffled = [dict(reversed(list(row.items()))) for row in rows]
    first = jsonl([dict(reversed(list(header.items()))), *shuffled]).replace("\n", "\r\n")
    second = sweep_files["1.jsonl"] + b"\n \n\n"
    for texts in ((first, second), (second, first)):
        status, out, err, _ = merge(tmp_path, *texts, extra=("--csv", str(tmp_path / "m.csv")))
        assert (status, err) == (0, "scheduler-sim sweep merge: 4 configurations from 2 "
                                    "file(s)\n")
        assert (tmp_path / "m.csv").read_bytes() == sweep_files["full.csv"]
        status, out, err, _ = merge(tmp_path, *texts)
        assert out.encode() == sweep_files["full.jsonl"]


def test_a_fleet_grid_merges_byte_for_byte(tmp_path):
    """Rows of a grid with and without fleets (a fleet's fields only where a fleet ran,
    some of them only under lockstep) merge back into the unsharded bytes."""
    grid = ["--grid", "replicas=1,2", "--grid", "dp_lockstep=false,true", "--policy", "vllm"]
    for name, extra in (("full.jsonl", []), ("0.jsonl", ["--shard", "0/2"]),
                        ("1.jsonl", ["--shard", "1/2"])):
        status, _, err = run_cli(["sweep", QUICKSTART, *grid, *extra, "--jsonl",
                                  str(tmp_path / name)])
        assert status == 0, err
    rows = header_and_rows((tmp_path / "full.jsonl").read_bytes())[1]
    assert [len(row) for row in rows] == [6 + 69, 6 + 69, 6 + 69, 6 + 69 + 3]
    status, out, err = run_cli(["sweep", "merge", str(tmp_path / "1.jsonl"),
                                str(tmp_path / "0.jsonl")])
    assert status == 0, err
    assert out.encode() == (tmp_path / "full.jsonl").read_bytes()


# --- sweep merge: corrupted headers --------------------------------------------------------

def _without(header: dict, name: str) -> dict:
    return {k: v for k, v in header.items() if k != name}


HEADER_CASES = [
    # (what the header becomes, the messages after "FILE:1: "; FINGERPRINT stands for
    # the first 37 digits of the header's fingerprint)
    (lambda h: _without(h, "configurations"), ["header: missing field 'configurations'"]),
    (lambda h: _without(h, "columns"), ["header: missing field 'columns'"]),
    (lambda h: {**h, "configurations": "4"},
     ["header: configurations must be an integer from 1 to 1,000,000, got '4'"]),
    (lambda h: {**h, "configurations": None},
     ["header: configurations must be an integer from 1 to 1,000,000, got null"]),
    (lambda h: {**h, "configurations": True},
     ["header: configurations must be an integer from 1 to 1,000,000, got true"]),
    (lambda h: {**h, "configurations": 1_000_000_000},  # hung, listing missing indices
     ["header: configurations must be an integer from 1 to 1,000,000, got 1000000000"]),
    (lambda h: {**h, "configurations": 5},
     ["header: configurations must be 4, the product of the lengths of the grid's lists, "
      "got 5"]),
    (lambda h: {**h, "columns": "index"},
     ["header: columns must be a list of distinct names that starts with index, num_blocks, "
      "policy, time_unit and stalled, got 'index'"]),
    (lambda h: {**h, "columns": ["index", "index"]},
     ["header: columns must be a list of distinct names that starts with index, num_blocks, "
      "policy, time_unit and stalled, got [\"index\", \"index\"]"]),
    (lambda h: {**h, "sweep": True},  # True == 1 in Python
     ["header: sweep must be 1 (the version of the format this scheduler-sim reads), "
      "got true"]),
    (lambda h: {**h, "sweep": 2},
     ["header: sweep must be 1 (the version of the format this scheduler-sim reads), "
      "got 2"]),
    (lambda h: {**h, "grid": {"num_blocks": [6, 0], "policy": ["vllm", "sglang"]}},
     ["header: grid: num_blocks must be an integer >= 1, got 0"]),
    (lambda h: {**h, "grid": {"num_blocks": 6, "policy": ["vllm", "sglang"]}},
     ["header: grid must be an object of option names and non-empty lists of values, got "
      "{\"num_blocks\": 6, \"policy\": [\"vllm\", ..."]),
    (lambda h: {**h, "grid": {"time_unit": ["s"], "policy": ["vllm", "sglang"]}},
     ["header: grid: 'time_unit' is not an option a sweep can sweep"]),
    (lambda h: {**h, "options": {"num_block": 8}}, ["header: options: unknown option "
                                                    "'num_block'"]),
    (lambda h: {**h, "options": []}, ["header: options must be an object of option values, "
                                      "got []"]),
    (lambda h: {**h, "shard": "2/2"},
     ["header: shard must be null or K/N with 0 <= K < N, got '2/2'"]),
    (lambda h: {**h, "trace": 7}, ["header: trace must be a string (the trace's name), "
                                   "got 7"]),
    (lambda h: {**h, "trace_sha256": "ab"},
     ["header: trace_sha256 must be null or 64 lowercase hexadecimal digits, got 'ab'"]),
    (lambda h: {**h, "fingerprint": "0" * 64},
     ["header: fingerprint does not match the header's trace_sha256, grid and options (an "
      "edited header?), got '0000000000000000000000000000000000000...'"]),
    (lambda h: {**h, "options": {"num_blocks": 8}},  # fixed options the fingerprint lacks
     ["header: fingerprint does not match the header's trace_sha256, grid and options (an "
      "edited header?), got 'FINGERPRINT...'"]),
    (lambda h: {**h, "rows": 4}, ["header: unknown field 'rows'"]),
    (lambda h: {**_without(h, "fingerprint"), "configurations": -1, "trace": None},
     ["header: missing field 'fingerprint'",
      "header: trace must be a string (the trace's name), got null",
      "header: configurations must be an integer from 1 to 1,000,000, got -1"]),
    (lambda h: {"type": "config"},
     ["not the JSONL output of a sweep (its first line must be the sweep's header), got "
      "{\"type\": \"config\"}"]),
    (lambda h: "[" * 100_000,
     ["not the JSONL output of a sweep (its first line must be the sweep's header): JSON "
      "nested too deeply"]),
    (lambda h: "index,num_blocks",
     ["not the JSONL output of a sweep (its first line must be the sweep's header): invalid "
      "JSON: Expecting value at column 1, got 'index,num_blocks'"]),
]


@pytest.mark.parametrize("change, messages", HEADER_CASES)
def test_a_corrupted_header_lists_every_problem(sweep_files, tmp_path, change, messages):
    """A shard whose header is corrupted: exit 2, one `FILE:1: header: ...` line per
    problem (the rows of that file are not read), nothing on standard output."""
    header, rows = header_and_rows(sweep_files["0.jsonl"])
    status, out, err, names = merge(tmp_path, jsonl([change(header), *rows]),
                                    sweep_files["1.jsonl"])
    assert (status, out) == (2, "")
    shown = header["fingerprint"][:37]
    assert err.splitlines() == [f"{names[0]}:1: {message}".replace("FINGERPRINT", shown)
                                for message in messages]


def test_an_empty_shard(tmp_path, sweep_files):
    """An empty file (or blank lines only) is not a sweep's output."""
    for text in ("", "\n \n"):
        status, out, err, names = merge(tmp_path, text, sweep_files["1.jsonl"])
        assert (status, out) == (2, "")
        assert err == (f"{names[0]}:1: empty, not the JSONL output of a sweep (its first "
                       "line is the sweep's header)\n")


# --- sweep merge: corrupted rows -----------------------------------------------------------

def _row(row: dict, **changes) -> dict:
    """`row` with fields changed (a value of ... drops the field)."""
    out = dict(row)
    for key, value in changes.items():
        if value is ...:
            del out[key]
        else:
            out[key] = value
    return out


ROW_CASES = [
    # (what the first row (index 0) becomes, (line, message) of each problem)
    (lambda r: {"index": 0},  # no fields but the index: accepted before
     [(2, f"configuration 0: missing fields 'num_blocks', 'policy', 'time_unit', 'stalled', "
          f"'requests' and {4 + len(RUN_FIELDS) - 5} more")]),
    (lambda r: _row(r, makespan=...), [(2, "configuration 0: missing field 'makespan'")]),
    (lambda r: _row(r, extra=1, more=2),
     [(2, "configuration 0: unknown fields 'extra', 'more'")]),
    (lambda r: _row(r, index=...), [(2, "missing field 'index'")]),
    (lambda r: _row(r, index=4), [(2, "index must be an integer from 0 to 3, got 4")]),
    (lambda r: _row(r, index=False), [(2, "index must be an integer from 0 to 3, got false")]),
    (lambda r: _row(r, index=1, policy="sglang"),
     [(2, "configuration 1: not in shard 0/2 (the file's header): its index modulo 2 is 1")]),
    (lambda r: _row(r, num_blocks=24),
     [(2, "configuration 0: num_blocks must be 6, the header's grid at this index, got 24")]),
    (lambda r: _row(r, num_blocks=6.0),
     [(2, "configuration 0: num_blocks must be 6, the header's grid at this index, got 6.0")]),
    (lambda r: _row(r, time_unit="min", stalled=0, makespan="21", completed=True),
     [(2, "configuration 0: time_unit must be 'ticks' or 's', got 'min'"),
      (2, "configuration 0: stalled must be true or false, got 0"),
      (2, "configuration 0: makespan must be a number or null (a field of the run summary), "
          "got '21'"),
      (2, "configuration 0: completed must be a number or null (a field of the run summary), "
          "got true")]),
    (lambda r: json.dumps(r).replace('"makespan": 21', '"makespan": NaN'),
     [(2, "invalid JSON: NaN is not a number JSON allows")]),
    (lambda r: json.dumps(r).replace('"makespan": 21', '"makespan": 21, "makespan": 22'),
     [(2, "invalid JSON: duplicate key 'makespan'")]),
    (lambda r: "[" * 100_000, [(2, "JSON nested too deeply")]),
    (lambda r: "[1, 2]", [(2, "expected a JSON object (a row of the sweep), got [1, 2]")]),
    (lambda r: "", [(2, "blank line (a sweep writes none)")]),
]


@pytest.mark.parametrize("change, problems", ROW_CASES)
def test_a_corrupted_row_lists_every_problem(sweep_files, tmp_path, change, problems):
    """A shard with one corrupted row: exit 2 and exactly its problems, each on the row's
    line; the other rows and the other shard are fine."""
    header, rows = header_and_rows(sweep_files["0.jsonl"])
    status, out, err, names = merge(tmp_path, jsonl([header, change(rows[0]), rows[1]]),
                                    sweep_files["1.jsonl"])
    assert (status, out) == (2, "")
    assert err.splitlines() == [f"{names[0]}:{line}: {text}" for line, text in problems]


def test_invalid_utf8_in_a_row(sweep_files, tmp_path):
    """A byte that is not UTF-8 is named with its place."""
    header, rows = header_and_rows(sweep_files["0.jsonl"])
    text = jsonl([header, rows[0]]).encode() + b'{"index":2,"policy":"vl\xffm"}\n'
    status, out, err, names = merge(tmp_path, text, sweep_files["1.jsonl"])
    assert (status, err) == (2, f"{names[0]}:3: invalid UTF-8 at byte 24, got b'\\xff'\n")


def test_overlaps_other_sweeps_and_other_columns_across_files(sweep_files, tmp_path):
    """The same configuration twice (in one file or two), a file of another sweep, and one
    of another version's columns: each named on its line, every file's problems listed."""
    header, rows = header_and_rows(sweep_files["0.jsonl"])
    status, out, err, names = merge(tmp_path, jsonl([header, *rows, rows[0]]),
                                    sweep_files["0.jsonl"],
                                    jsonl([{**header, "columns": header["columns"][:-1]}]))
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"{names[0]}:4: configuration 0 is also in {names[0]} (line 2): shards overlap",
        f"{names[1]}:2: configuration 0 is also in {names[0]} (line 2): shards overlap",
        f"{names[1]}:3: configuration 2 is also in {names[0]} (line 3): shards overlap",
        f"{names[2]}:1: header: columns differ from those of {names[0]} (written by another "
        f"version of scheduler-sim?), got [\"index\", \"num_blocks\", \"policy\", \"ti...",
    ]
    status, _, err = run_cli(["sweep", QUICKSTART, "--grid", "num_blocks=6,25", "--policy",
                            "vllm", "--policy", "sglang", "--shard", "1/2", "--jsonl",
                            str(tmp_path / "other.jsonl")])
    assert status == 0, err
    status, out, err, names = merge(tmp_path, sweep_files["0.jsonl"],
                                    (tmp_path / "other.jsonl").read_bytes())
    theirs = json.loads((tmp_path / "other.jsonl").read_text().splitlines()[0])
    assert (status, err) == (2, (
        f"{names[1]}:1: header: from another sweep than {names[0]} (trace bytes, grid or "
        f"fixed options differ): fingerprint '{theirs['fingerprint'][:37]}...', expected "
        f"'{header['fingerprint'][:37]}...'\n"))


def test_more_lines_than_configurations_stops_the_reading(sweep_files, tmp_path):
    """A file cannot hold more rows than the sweep has configurations: past the header and
    4 rows it is read no further (a stream of repeated rows ends)."""
    header, rows = header_and_rows(sweep_files["0.jsonl"])
    status, out, err, names = merge(tmp_path, jsonl([header] + [rows[0]] * 1000))
    assert status == 2
    assert err.splitlines() == [
        f"{names[0]}:{n}: configuration 0 is also in {names[0]} (line 2): shards overlap"
        for n in (3, 4, 5)] + [
        f"{names[0]}:6: more lines than a sweep of 4 configurations writes (a header and a "
        "row each); read no further"]


def test_at_most_50_problems_a_file(sweep_files, tmp_path):
    """A row whose 60 summary fields are all strings: the first 50 problems, then a count
    of the others."""
    header, rows = header_and_rows(sweep_files["0.jsonl"])
    bad = {**rows[0], **{field: "x" for field in RUN_FIELDS[:60]}}
    status, out, err, names = merge(tmp_path, jsonl([header, bad, rows[1]]),
                                    sweep_files["1.jsonl"])
    lines = err.splitlines()
    assert status == 2 and len(lines) == 51
    assert lines[0] == (f"{names[0]}:2: configuration 0: {RUN_FIELDS[0]} must be a number or "
                        "null (a field of the run summary), got 'x'")
    assert lines[-1] == f"{names[0]}: ... and 10 more errors"


def test_a_shard_larger_than_the_limit_is_not_read(tmp_path, sweep_files):
    """A file past MAX_SHARD_BYTES (1 GiB; a sparse file here) is refused before it is
    read; so is standard input given twice."""
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as handle:
        handle.truncate(MAX_SHARD_BYTES + 1)
    status, out, err = run_cli(["sweep", "merge", str(big)])
    assert (status, out) == (2, "")
    assert err == (f"scheduler-sim: error: {big}: larger than 1 GiB, which no shard of a sweep "
                   "is; split the sweep into more shards\n")
    status, out, err = run_cli(["sweep", "merge", "-", "-"])
    assert (status, err) == (2, "scheduler-sim: error: standard input (-) can be only one of "
                                "the shards, got it 2 times\n")


def test_a_merge_never_loads_a_policy_named_in_a_shard(tmp_path):
    """A shard of a sweep over a policy of one's own (FILE.py:CLASS): the merge checks the
    header's policy names without importing the file (which would run its code)."""
    plugin = tmp_path / "mine.py"
    marker = tmp_path / "imported"
    plugin.write_text("import pathlib\n"
                      f"pathlib.Path({str(marker)!r}).write_text('yes')\n"
                      "from scheduler_sim.policies.continuous import ContinuousPolicy\n"
                      "class Mine(ContinuousPolicy):\n"
                      "    name = 'mine'\n")
    status, _, err = run_cli(["sweep", QUICKSTART, "--grid", "num_blocks=6",
                              "--policy", f"{plugin}:Mine", "--jsonl", str(tmp_path / "s.jsonl")])
    assert status == 0, err
    marker.unlink()
    proc = subprocess.run([sys.executable, "-m", "scheduler_sim", "sweep", "merge",
                           str(tmp_path / "s.jsonl")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (tmp_path / "s.jsonl").read_text()
    assert not marker.exists()


# --- grid files -----------------------------------------------------------------------------

GRID_FILE_CASES = [
    # (the file's text, the messages, NAME standing for the file's path)
    ("[" * 100_000, ["NAME: JSON nested too deeply"]),
    ('{"num_blocks":' * 100_000, ["NAME: JSON nested too deeply"]),
    ('{"num_blocks": [6,\n  8,,]}', ["NAME:2: invalid JSON: Expecting value at column 5"]),
    ('{"num_blocks": [6, 0], "watermark": [2], "policy": ["vllm", 3], "nope": [1]}',
     ["NAME: num_blocks must be an integer >= 1, got 0",
      "NAME: watermark must be a number in [0.0, 1.0), got 2",
      "NAME: policy values are single policy names, got 3",
      "NAME: unknown option 'nope'"]),
    ('{"num_blocks": [6], "num_blocks": [8]}',
     ["NAME: the option num_blocks is swept twice; give all its values in one list"]),
    ('{"slo": [{"ttft": 1, "ttft": 2}]}', ["NAME: invalid JSON: duplicate key 'ttft'"]),
    ('{"num_blocks": [NaN]}', ["NAME: num_blocks must be an integer >= 1, got nan"]),
    ("[1]", ["NAME: a grid file is a JSON object of option names and lists of values, "
             "got [1]"]),
    (b'{"policy": ["\xff"]}', ["NAME: invalid UTF-8 at byte 14, got b'\\xff'"]),
]


@pytest.mark.parametrize("text, messages", GRID_FILE_CASES)
def test_a_bad_grid_file_lists_every_problem(tmp_path, text, messages):
    """A grid file that is not a grid: exit 2, every problem, nothing run."""
    grid = tmp_path / "grid.json"
    grid.write_bytes(text if isinstance(text, bytes) else text.encode())
    status, out, err = run_cli(["sweep", QUICKSTART, "--grid-file", str(grid)])
    assert (status, out) == (2, "")
    assert err.splitlines() == [m.replace("NAME", str(grid)) for m in messages]


def test_a_grid_file_past_16_mib_is_not_read(tmp_path):
    """A grid file (or /dev/zero) is read no further than 16 MiB."""
    grid = tmp_path / "grid.json"
    with open(grid, "wb") as handle:
        handle.truncate(16 * 2 ** 20 + 1)
    status, out, err = run_cli(["sweep", QUICKSTART, "--grid-file", str(grid)])
    assert (status, err) == (2, f"scheduler-sim: error: {grid}: larger than 16 MiB, which no "
                                "grid file is\n")


# --- --shard ------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [" 1/ 3", "1/3 ", "\u0661/\u0663", "1_0/2_0", "+1/3", "-0/3",
                                  "1/3\n", "1//3", "1/3/5", "/3", "1/", "", "0x1/3", "1.0/3",
                                  "３/４"])
def test_shard_takes_ascii_digits_only(text):
    """K and N are ASCII digits and nothing else, though Python's int() takes spaces,
    underscores, signs and other scripts' digits."""
    status, out, err = run_cli(["sweep", QUICKSTART, "--grid", "num_blocks=6", f"--shard={text}"])
    assert (status, out) == (2, "")
    assert err == ("scheduler-sim: error: --shard must be K/N with 0 <= K < N (K counts from "
                   f"0), got {text!r}\n")


def test_shard_spellings_that_are_fine():
    """`K/N`, a leading zero included, up to 18 digits each."""
    assert parse_shard("0/1") == (0, 1)
    assert parse_shard("02/10") == (2, 10)
    assert parse_shard("17/" + "9" * 18) == (17, 10 ** 18 - 1)
    with pytest.raises(UsageError):
        parse_shard("3/3")


# --- CSV fields -----------------------------------------------------------------------------

@pytest.mark.parametrize("text, field", [
    ("plain", "plain"), ("0.25", "0.25"), ("", ""), ("a,b", '"a,b"'), ('say "hi"', '"say ""hi"""'),
    ("cr\rlf\n", '"cr\rlf\n"'), ("tab\there", "tab\there"), ("nul\x00", "nul\\x00"),
    ("esc\x1b[2J", "esc\\x1b[2J"), ("del\x7f", "del\\x7f"), ("c1\x85\x9b", "c1\\x85\\x9b"),
    ("back\\slash", "back\\\\slash"), ("lone\ud800", "lone\\ud800"),
    ("\u2028\u202e\u65e5", "\u2028\u202e\u65e5"), ("a,\x00", '"a,\\x00"'),
])
def test_csv_fields_escape_controls_and_double_backslashes(text, field):
    """What every CSV field becomes: RFC 4180 quoting; C0 (but TAB, CR, LF), DEL and C1
    controls and lone surrogates escaped, a backslash doubled, other text as it is."""
    assert csv_field(text) == field


def test_a_long_axis_is_checked_for_repeats_by_value():
    """A 20,001-value axis whose last value repeats an earlier one (0.5 and 1/2 for a
    float option) is refused naming it; a long list of distinct values is taken whole."""
    from scheduler_sim.io.sweep import check_axis
    with pytest.raises(UsageError, match=r"grid: watermark lists the value 0\.5 twice"):
        check_axis("watermark", [i / 20001 for i in range(20001)] + [0.5, 1 / 2])
    assert len(check_axis("num_blocks", list(range(1, 20002))).values) == 20001


# --- a trace that can be read only once -----------------------------------------------------

def _pipe_path(data: bytes) -> tuple[str, int]:
    """`/dev/fd/N` of a pipe holding `data`, its writer closed: read once, then empty (as
    the shell's `<(cat t.jsonl)`)."""
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return f"/dev/fd/{read}", read


@pytest.mark.parametrize("command", [
    ["sweep", "--grid", "num_blocks=6,24", "--jsonl", "-"],
    ["search", "--slo", "ttft=50", "--max-replicas", "2"]])
def test_a_trace_read_once_is_swept_and_searched_as_its_file(command):
    """`sweep <(cat t.jsonl)` read the pipe twice (its digest, then the trace): the
    second read was empty, and every row replayed 0 requests, exit 0. Now it is read
    once: the file's rows and digest (`search` read the trace first: its digest only)."""
    path, fd = _pipe_path(Path(QUICKSTART).read_bytes())
    try:
        piped = run_cli([command[0], path, *command[1:]])
    finally:
        os.close(fd)
    from_file = run_cli([command[0], QUICKSTART, *command[1:]])
    assert piped[0] == from_file[0] == 0
    assert piped[1].replace(path, "T") == from_file[1].replace(QUICKSTART, "T")
    if command[0] == "sweep":
        assert header_and_rows(piped[1].encode())[1][0]["requests"] == 6


def test_generate_reads_a_trace_named_twice_once():
    """`generate --prompt-len empirical:P --output-len empirical:P` of a pipe (or a FIFO,
    or -) read it twice: the second found nothing (`has no requests to draw
    output_tokens from`, or a wait for a writer); now the same bytes as from the file."""
    path, fd = _pipe_path(Path(QUICKSTART).read_bytes())
    argv = ["generate", "--seed", "1", "--requests", "3"]
    try:
        piped = run_cli([*argv, "--prompt-len", f"empirical:{path}",
                         "--output-len", f"empirical:{path}"])
    finally:
        os.close(fd)
    assert piped == run_cli([*argv, "--prompt-len", f"empirical:{QUICKSTART}",
                             "--output-len", f"empirical:{QUICKSTART}"])
    assert piped[0] == 0 and piped[1].count("\n") == 3


def test_search_of_a_fifo_ends(tmp_path):
    """`search FIFO` read the trace, then opened the FIFO again for its digest and waited
    for a writer that had gone: a hang (here an alarm after 20 s)."""
    import signal
    import threading
    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(Path(QUICKSTART).read_bytes()))
    writer.start()

    def expire(signum, frame):
        raise TimeoutError("search of a FIFO still running after 20 s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    try:
        status, out, err = run_cli(["search", str(fifo), "--slo", "ttft=50",
                                    "--max-replicas", "2"])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        if writer.is_alive():  # (its reader never came: open the FIFO to let it go)
            with open(fifo, "rb") as handle:
                handle.read()
        writer.join()
    assert (status, err) == (0, "")
    assert "cheapest: policy=continuous with 1 replica" in out
