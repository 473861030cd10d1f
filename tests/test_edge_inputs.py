"""Bad input never produces a traceback or a hang: `convert`, `generate`, `cost` (issue 12).

First the cases fuzzing found, each with its exact message and exit status
(inputs in `tests/data/edge/`, or inline when tiny or when they are long
runs of one character); then seeded fuzz runs of each command, drawn from
`benchmarks/fuzz_cli.py` (`make_case(..., small=True)`), run in-process.

Every command line runs under `deadline`: an alarm that raises `Hang` (a
BaseException, so no `except OSError` or `except Exception` in the code
under test can swallow it) when the call runs too long, so a hang fails
the test instead of stalling the suite.

The limits (README "Real traces and synthetic workloads", spec §10):
- `convert`: a timestamp is a decimal number from 0 to 1e15 in the file's
  unit with at most 15 decimals, decided from its digits and exponent before
  any power of ten is computed; a count is an integer of at most 4,300 ASCII
  digits; a JSON line nested too deeply and a CSV field past 131,072
  characters are `file:line` problems; a file whose first 5 lines are not
  rows of the format stops there and names the format it looks like.
- `generate`: requests 1 to 1,000,000; lengths 1 to 1,000,000; rate >= 1e-6;
  cv 0.01 to 100; sigma <= 10; patience <= 1e12; weights 0 to 1e6; with
  prefix groups at most 10,000,000 prompt token ids.
- `cost`: --seq 1 to 1,000,000,000; --mfu 1e-6 to 1.
"""
from __future__ import annotations

import contextlib
import io
import json
import random
import signal
from pathlib import Path

import pytest

from conftest import ROOT, load_script, run_parts
from scheduler_sim.cli.main import main
from scheduler_sim.io import generator
from scheduler_sim.io.generator import WorkloadSpec, generate
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.option_values import show

EDGE = Path(__file__).resolve().parent / "data" / "edge"
DATA = Path(__file__).resolve().parent / "data"


fuzz_cli = load_script(ROOT / "benchmarks" / "fuzz_cli.py", "fuzz_cli")


class Hang(BaseException):
    """A command line ran past its deadline."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise Hang if the block runs longer than `seconds`."""
    def expire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run(argv: list[str], seconds: float = 10) -> tuple[int, str, str]:
    """Call the command line in-process under a deadline; (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with deadline(seconds):
        status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def arrivals(text: str) -> list[tuple[str, float]]:
    """(id, arrival) of the requests of a written trace, which the trace parser must
    accept: `convert` and `generate` never write a trace that `validate` refuses."""
    trace = parse_trace(text.encode(), "written.jsonl")
    by_line = sorted(trace.workload.requests, key=lambda r: r.index)
    return [(r.id, r.arrival) for r in by_line]


# Python's json decoder gives up on an array nested 1,000 deep on this interpreter
# (3.11: RecursionError); an interpreter whose C stack allows it parses the line, and
# then the row is refused for what it is.
try:
    json.loads("[" * 1000 + "]" * 1000)
    NESTED_LINE = "expected a JSON object, got an array"
    NESTED_FIELD = "hash_ids must be a list of integers, got " + show(
        json.loads("[" * 1000 + "]" * 1000))
except RecursionError:
    NESTED_LINE = NESTED_FIELD = "JSON nested too deeply"


# --- convert: nesting, numbers, CSV fields ---------------------------------------------

def test_mooncake_lines_nested_1000_deep_are_bad_rows():
    """mooncake_nested.jsonl: line 2 is an array nested 1,000 deep, line 3 a row whose
    hash_ids nest 1,000 deep (a RecursionError before); both are bad rows at their line,
    lines 1 (0 ms) and 4 (250 ms) convert; with --strict nothing is written."""
    path = str(EDGE / "mooncake_nested.jsonl")
    status, out, err = run(["convert", "--from", "mooncake", path])
    assert status == 0
    assert err.splitlines() == [
        f"{path}: converted 2 requests from mooncake; skipped 2 bad rows (--strict makes "
        "them fatal)",
        f"{path}:2: {NESTED_LINE}",
        f"{path}:3: {NESTED_FIELD}"]
    assert arrivals(out) == [("mooncake-1", 0), ("mooncake-4", 0.25)]
    status, out, err = run(["convert", "--from", "mooncake", path, "--strict"])
    assert (status, out) == (2, "")
    assert err.splitlines() == [f"{path}:2: {NESTED_LINE}", f"{path}:3: {NESTED_FIELD}",
                                f"{path}: --strict: 2 bad rows; no file written"]


def test_mooncake_line_nested_100000_deep_is_a_bad_row():
    """An array nested 100,000 deep defeats the JSON decoder on every interpreter: the
    line is `JSON nested too deeply`, the next line still converts."""
    text = ("[" * 100_000 + "]" * 100_000 + "\n"
            '{"timestamp": 7, "input_length": 4, "output_length": 2}\n')
    from scheduler_sim.io.importers import convert
    with deadline(5):
        conv = convert("mooncake", text, "deep.jsonl")
    assert conv.problems == ["deep.jsonl:1: JSON nested too deeply"]
    assert [r["id"] for r in conv.records[1:]] == ["mooncake-2"]


def test_mooncake_timestamps_are_bounded_before_arithmetic():
    """mooncake_numbers.jsonl: 10**400 ms (an OverflowError before), 1e999, 1e-999999999
    (an exponent no Fraction may see), 5e-324 (324 decimals), 1e15 + 1 ms and 1e15 + 0.1
    ms (exactly: a float would round it to 1e15 and keep it) are refused with the range;
    0, 1e15 (as an integer and as 1e15), 0.5 and -0.0 ms convert; a count in other
    digits, a fractional hash id and a 4,301-digit integer are bad rows. In bounded time,
    and the trace written passes the trace parser."""
    path = str(EDGE / "mooncake_numbers.jsonl")
    status, out, err = run(["convert", "--from", "mooncake", path], seconds=5)
    assert status == 0
    assert err.splitlines() == [
        f"{path}: converted 5 requests from mooncake; skipped 9 bad rows (--strict makes "
        "them fatal)",
        f"{path}:2: timestamp must be a number of ms from 0 to 1e15, got "
        "1000000000000000000000000000000000000...",
        f"{path}:3: timestamp must be a number of ms from 0 to 1e15, got 1e999",
        f"{path}:4: timestamp must have at most 15 decimals (a step of 1e-15 ms), got "
        "1e-999999999",
        f"{path}:5: timestamp must have at most 15 decimals (a step of 1e-15 ms), got 5e-324",
        f"{path}:7: timestamp must be a number of ms from 0 to 1e15, got 1000000000000001",
        f"{path}:8: timestamp must be a number of ms from 0 to 1e15, got "
        "1.0000000000000001e15",
        f"{path}:12: input_length must be an integer >= 1, got '\u0663'",
        f"{path}:13: hash_ids must be a list of integers, got [1.5]",
        f"{path}:14: invalid JSON: a number of more than 4,300 digits"]
    assert arrivals(out) == [("mooncake-1", 0), ("mooncake-6", 1e12), ("mooncake-9", 0.0005),
                             ("mooncake-10", 1e12), ("mooncake-11", 0)]


@pytest.mark.parametrize("fmt, field", [("vidur", "arrived_at"), ("burstgpt", "Timestamp")])
def test_csv_timestamps_are_bounded_before_arithmetic(fmt, field):
    """vidur and BurstGPT timestamps: 1e9999 (a ValueError from json.dumps before),
    1e999999999 and 1e-999999999 (a hang before: a Fraction of 10**999999999), -1,
    1e15 + 0.1, 1e-16, 1/2, inf and nan are refused with the range, within 5 s; 0, 1e15,
    1e-15 and 12.5 followed by 30 zeros convert, and the trace written (arrivals up to
    1e15 s) passes the trace parser."""
    path = str(EDGE / f"{fmt}_timestamps.csv")
    status, out, err = run(["convert", "--from", fmt, path], seconds=5)
    assert status == 0
    rule = f"{field} must be a number of seconds from 0 to 1e15, got"
    fine = f"{field} must have at most 15 decimals (a step of 1e-15 seconds), got"
    assert err.splitlines() == [
        f"{path}: converted 4 requests from {fmt}; skipped 9 bad rows (--strict makes them "
        "fatal)",
        f"{path}:3: {rule} '1e9999'",
        f"{path}:4: {rule} '1e999999999'",
        f"{path}:5: {fine} '1e-999999999'",
        f"{path}:6: {rule} '-1'",
        f"{path}:8: {rule} '1000000000000000.1'",
        f"{path}:10: {fine} '0.0000000000000001'",
        f"{path}:11: {rule} '1/2'",
        f"{path}:12: {rule} 'inf'",
        f"{path}:13: {rule} 'nan'"]
    assert arrivals(out) == [(f"{fmt}-2", 0), (f"{fmt}-7", 1e15), (f"{fmt}-9", 1e-15),
                             (f"{fmt}-14", 12.5)]


def test_azure_fractions_of_a_second_are_bounded():
    """An Azure TIMESTAMP with 16 digits after the point, or a superscript 2, is a bad row;
    15 digits, year 9999 and year 1 convert (arrivals up to 3.2e11 s, within 1e15)."""
    path = str(EDGE / "azure_timestamps.csv")
    status, out, err = run(["convert", "--from", "azure", path])
    assert status == 0
    assert err.splitlines() == [
        f"{path}: converted 4 requests from azure; skipped 2 bad rows (--strict makes them "
        "fatal)",
        f"{path}:3: TIMESTAMP must end in at most 15 digits after the point, got "
        "'2023-11-16 18:15:47.1234567890123456'",
        f"{path}:5: TIMESTAMP must end in at most 15 digits after the point, got "
        "'2023-11-16 18:15:48.\u00b2'"]
    assert arrivals(out) == [("azure-2", 63835755346.68059), ("azure-4", 63835755347.12346),
                             ("azure-6", 315537897600), ("azure-7", 0)]


CSV_ROWS = {
    "azure": ("TIMESTAMP,ContextTokens,GeneratedTokens",
              "2023-11-16 18:15:46.6805900,4,2"),
    "vidur": ("arrived_at,num_prefill_tokens,num_decode_tokens", "0.5,4,2"),
    "burstgpt": ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
                 "5,ChatGPT,4,2,6,Conversation log"),
}


@pytest.mark.parametrize("fmt", sorted(CSV_ROWS))
def test_an_unclosed_quote_past_the_csv_field_limit_is_a_bad_row(tmp_path, fmt):
    """Line 3 opens a quote that is never closed and 140,000 characters follow (a
    `_csv.Error: field larger than field limit` before): one problem at line 3, and the
    row of line 2 converts; with --strict nothing is written."""
    header, row = CSV_ROWS[fmt]
    path = tmp_path / f"{fmt}.csv"
    path.write_text(f"{header}\n{row}\n\"{row}\n" + "x" * 140_000 + f"\n{row}\n")
    status, out, err = run(["convert", "--from", fmt, str(path)])
    problem = (f"{path}:3: a field longer than 131,072 characters starts on this line (a "
               "quote that is never closed?)")
    assert status == 0
    assert err.splitlines() == [
        f"{path}: converted 1 requests from {fmt}; skipped 1 bad rows (--strict makes them "
        "fatal)", problem]
    assert arrivals(out) == [(f"{fmt}-2", 0)]
    status, out, err = run(["convert", "--from", fmt, str(path), "--strict"])
    assert (status, out) == (2, "")
    assert err.splitlines() == [problem, f"{path}: --strict: 1 bad rows; no file written"]


@pytest.mark.parametrize("value", ["inf", "nan", "1e-7"])
def test_tick_ms_is_no_flag_of_convert(tmp_path, value):
    """`convert --tick-ms inf`, `nan` or `1e-7` (a ValueError, or a trace replay refused,
    in the version that had the flag): `convert` takes no tick, times are in seconds, so
    it is a usage error naming the flag and the value; nothing is written."""
    target = tmp_path / "out.jsonl"
    status, out, err = run(["convert", "--from", "azure", str(DATA / "azure_conv_head.csv"),
                            "--tick-ms", value, "-o", str(target)])
    assert (status, out) == (2, "")
    assert err.splitlines()[-1] == \
        f"scheduler-sim convert: error: unrecognized arguments: --tick-ms {value}"
    assert not target.exists()


# --- convert: the wrong format, BOMs and line ends -----------------------------------------

FILES = {
    "mooncake": (DATA / "mooncake_conversation_head.jsonl").read_text(encoding="utf-8"),
    "azure": (DATA / "azure_conv_head.csv").read_bytes().decode("utf-8"),
    "vidur": "arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,100,20\n2.51,7,3\n",
    "burstgpt": ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,API log\n"),
}
PAIRS = [(given, actual) for given in FILES for actual in FILES if given != actual]


@pytest.mark.parametrize("given, actual", PAIRS)
def test_a_file_of_another_format_stops_early_and_names_its_format(tmp_path, given, actual):
    """Each format given a file of each other one: exit 2, at most 5 problems (the
    Mooncake slice has 200 lines and the Azure slice 201, not 200 problems), and a last
    line naming the format the file matches; nothing is written. A CSV format stops at
    its header (1 problem); mooncake stops after 5 lines that are not JSON objects (or at
    the end of a shorter file)."""
    path = tmp_path / f"{actual}.txt"
    path.write_bytes(FILES[actual].encode("utf-8"))
    target = tmp_path / "out.jsonl"
    status, out, err = run(["convert", "--from", given, str(path), "-o", str(target)])
    lines = err.splitlines()
    article = "an" if actual == "azure" else "a"
    hint = f"it looks like {article} {actual} file (--from {actual}); no file written"
    assert (status, out) == (2, "")
    if given != "mooncake":
        assert len(lines) == 2
        assert lines[-1] == f"{path}: not one {given} row converted; {hint}"
    elif FILES[actual].count("\n") >= 5:
        assert len(lines) == 6
        assert lines[-1] == (f"{path}: stopped at line 5: none of the first 5 lines is a "
                             f"mooncake row; {hint}")
    else:
        assert len(lines) == FILES[actual].count("\n") + 1
        assert lines[-1] == f"{path}: not one mooncake row converted; {hint}"
    assert not target.exists()


def test_a_mooncake_file_read_as_vidur_names_mooncake():
    """The whole message: the header problem shows at most 8 of the 17 cells."""
    path = str(DATA / "mooncake_conversation_head.jsonl")
    status, out, err = run(["convert", "--from", "vidur", path])
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"{path}:1: header lacks column(s) 'arrived_at', 'num_prefill_tokens', "
        "'num_decode_tokens', got '{\"timestamp\": 0', '\"input_length\": 6758', "
        "'\"output_length\": 500', '\"hash_ids\": [0', '1', '2', '3', '4', ... (17 columns)",
        f"{path}: not one vidur row converted; it looks like a mooncake file (--from "
        "mooncake); no file written"]


def test_bad_rows_after_a_good_one_do_not_stop_the_reading(tmp_path):
    """A Mooncake file whose line 1 converts and whose next 7 lines are not JSON is read to
    the end: the good line 9 converts too, and the 7 bad lines are listed."""
    path = tmp_path / "m.jsonl"
    good = '{"timestamp": 5, "input_length": 4, "output_length": 2}\n'
    path.write_text(good + "not json\n" * 7 + good)
    status, out, err = run(["convert", "--from", "mooncake", str(path)])
    assert status == 0
    assert arrivals(out) == [("mooncake-1", 0), ("mooncake-9", 0)]
    assert [line.split(": ")[0] for line in err.splitlines()[1:]] == \
        [f"{path}:{n}" for n in range(2, 9)]


def test_a_byte_order_mark_and_crlf_convert_like_the_plain_file(tmp_path):
    """A vidur file with a UTF-8 BOM and CRLF line ends, and a Mooncake file with a BOM,
    convert exactly as without them (before, the BOM made the header lack 'arrived_at')."""
    plain = tmp_path / "v.csv"
    plain.write_text(FILES["vidur"])
    marked = tmp_path / "v-bom.csv"
    marked.write_bytes(b"\xef\xbb\xbf" + FILES["vidur"].replace("\n", "\r\n").encode())
    first = run(["convert", "--from", "vidur", str(plain)])[1]
    status, out, _ = run(["convert", "--from", "vidur", str(marked)])
    assert status == 0 and out == first
    assert arrivals(out) == [("vidur-2", 0), ("vidur-3", 2.01)]
    moon = tmp_path / "m.jsonl"
    moon.write_bytes(b"\xef\xbb\xbf" + FILES["mooncake"].encode())
    status, out, _ = run(["convert", "--from", "mooncake", str(moon)])
    assert status == 0 and len(arrivals(out)) == 200


def test_mooncake_lines_end_only_at_lf(tmp_path):
    """A U+2028 inside a JSON string, or a NEL, is not a line end: the row after it is
    line 2 (id mooncake-2), as `sed -n 2p` and the trace parser count; before, the line was
    split in two and every later id was off by one."""
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2, '
                    '"note": "a\u2028b\x85c"}\n'
                    '{"timestamp": 1000, "input_length": 4, "output_length": 2}\n',
                    encoding="utf-8")
    status, out, err = run(["convert", "--from", "mooncake", str(path)])
    assert status == 0
    assert arrivals(out) == [("mooncake-1", 0), ("mooncake-2", 1)]


# --- generate ------------------------------------------------------------------------------

def generate_error(*args: str) -> str:
    """`generate --seed 1 --requests 5 ARGS`: exit 2 within 5 s, nothing on stdout; the
    message."""
    status, out, err = run(["generate", "--seed", "1", "--requests", "5", *args], seconds=5)
    assert (status, out) == (2, "")
    return err


@pytest.mark.parametrize("args, message", [
    (["--rate", "1e-320"],
     "--rate must be a finite number >= 1e-6 (requests per tick), got 1e-320"),
    (["--arrival", "gamma", "--cv", "1e200"],
     "--cv must be a finite number from 0.01 to 100, got 1e+200"),
    (["--arrival", "gamma", "--cv", "1e-200"],
     "--cv must be a finite number from 0.01 to 100, got 1e-200"),
    (["--arrival", "gamma", "--cv", "1e-160"],
     "--cv must be a finite number from 0.01 to 100, got 1e-160"),
    (["--priorities", "0:1e308,1:1e308"],
     "--priorities weights must be finite numbers from 0 to 1e6, not all 0, got "
     "'0:1e308,1:1e308'"),
    (["--cancel-rate", "1", "--cancel-after", "1e308"],
     "--cancel-after must be a finite number > 0 and <= 1e12 (ticks), got 1e+308"),
    (["--prompt-len", "lognormal:1e308:1e308"],
     "lognormal:MEDIAN:SIGMA needs 0 < MEDIAN <= 1,000,000 and 0 <= SIGMA <= 10, got "
     "'lognormal:1e308:1e308'"),
    (["--output-len", "fixed:1000001"],
     "fixed:N needs an integer N from 1 to 1,000,000, got 'fixed:1000001'"),
    (["--prompt-len", "uniform:1:1000001"],
     "uniform:LOW:HIGH needs integers 1 <= LOW <= HIGH <= 1,000,000, got 'uniform:1:1000001'"),
    (["--prefix-groups", "1", "--prefix-tokens", "1000001"],
     "--prefix-tokens must be an integer from 0 to 1,000,000, got 1000001"),
    (["--rate", "inf", "--cv", "nan"],
     "--rate must be a finite number >= 1e-6 (requests per tick), got inf; --cv must be a "
     "finite number from 0.01 to 100, got nan"),
])
def test_generate_refuses_values_out_of_range(args, message):
    """Each found case (a traceback before: OverflowError, ZeroDivisionError, ValueError
    from random.choices or math.exp) is a usage error naming the flag, its range and the
    value given; two bad flags are both named."""
    assert generate_error(*args) == f"scheduler-sim: error: {message}\n"


def test_generate_refuses_too_many_requests():
    """--requests 4294967296 would run for hours: refused at once."""
    status, out, err = run(["generate", "--seed", "1", "--requests", "4294967296"], seconds=5)
    assert (status, out) == (2, "")
    assert err == ("scheduler-sim: error: --requests must be an integer from 1 to 1,000,000, "
                   "got 4294967296\n")


@pytest.mark.parametrize("args, requests", [
    (["--rate", "1e-6"], 30),
    (["--arrival", "gamma", "--cv", "0.01"], 50),
    (["--arrival", "gamma", "--cv", "100", "--rate", "1e-6"], 50),
    (["--cancel-rate", "1", "--cancel-after", "1e12"], 50),
    (["--prompt-len", "lognormal:1000000:10", "--output-len", "fixed:1000000"], 50),
    (["--priorities", "0:1e6,1:1e6,2:0"], 50),
    (["--prefix-groups", "1000000", "--prefix-tokens", "1000"], 3),
])
def test_generate_values_at_the_limits_give_valid_traces(args, requests):
    """Values at the edge of each range are accepted and give a trace the parser accepts,
    within 5 s; a million prefix groups no longer builds a million shared prompts up front
    (1e9 token ids: a hang before)."""
    status, out, err = run(["generate", "--seed", "3", "--requests", str(requests), *args],
                           seconds=5)
    assert (status, err) == (0, "")
    written = arrivals(out)
    assert len(written) == requests
    assert all(0 <= a <= 1e15 for _, a in written)


def test_prefix_token_ids_are_capped(monkeypatch):
    """With prefix groups every prompt token id is written; past MAX_TOKEN_IDS (here
    lowered to 5,000) the command stops with a message naming the request: each request
    of fixed:1000 with 1000 shared tokens writes 1,001 ids, so g04 brings them to 5,005."""
    monkeypatch.setattr(generator, "MAX_TOKEN_IDS", 5000)
    err = generate_error("--requests", "20", "--prefix-groups", "2", "--prefix-tokens", "1000",
                         "--prompt-len", "fixed:1000")
    assert err == ("scheduler-sim: error: --prefix-groups writes every prompt's token ids, and "
                   "request g04 takes them past 5,000: lower --requests, --prompt-len or "
                   "--prefix-tokens\n")


def test_times_past_1e15_are_refused_even_without_the_flag_bounds(monkeypatch):
    """The rate and patience bounds keep every time within 1e15 ticks; with them lifted the
    generator still refuses to write a time the trace parser would refuse."""
    monkeypatch.setattr(generator, "MIN_RATE", 0.0)
    monkeypatch.setattr(generator, "MAX_CANCEL_AFTER", float("inf"))
    with pytest.raises(ValueError) as arrival:
        generate(WorkloadSpec(seed=1, requests=5, rate=1e-20))
    assert str(arrival.value) == ("request g1 would arrive at tick 1.88e+20, past the 1e15 a "
                                  "trace may hold: raise --rate or lower --requests")
    with pytest.raises(ValueError) as cancel:
        generate(WorkloadSpec(seed=1, requests=1, cancel_rate=1.0, cancel_after=1e300))
    assert str(cancel.value) == ("request g0 would be cancelled at tick 1.443e+300, past the "
                                 "1e15 a trace may hold: lower --cancel-after")


def test_empirical_lengths_above_the_limit_are_listed_by_line(tmp_path):
    """An empirical trace whose request on line 2 has 10**30 prompt tokens (fine for a
    replay, which rejects it) cannot be drawn from: exit 2, `file:line` naming it."""
    path = tmp_path / "lengths.jsonl"
    path.write_text('{"type":"request","id":"a","arrival":0,"prompt_tokens":5,'
                    '"output_tokens":7}\n'
                    '{"type":"request","id":"b","arrival":1,"prompt_tokens":' + "1" + "0" * 30
                    + ',"output_tokens":1}\n')
    err = generate_error("--prompt-len", f"empirical:{path}", "--prefix-groups", "2",
                         "--prefix-tokens", "4")
    assert err == (f"{path}:2: request 'b': prompt_tokens must be at most 1,000,000 to be "
                   "drawn from, got 1000000000000000000000000000000\n")


# --- cost ----------------------------------------------------------------------------------

COST = ["cost", "--model", "llama-3-8b", "--gpu", "h100-sxm"]


@pytest.mark.parametrize("seq", ["1" + "0" * 154, "0", "1000000001"],
                         ids=["1e154", "0", "1e9+1"])
def test_cost_refuses_a_seq_out_of_range(seq):
    """--seq 1 followed by 154 zeros overflowed the FLOPs (OverflowError): refused, the
    value shown by its leading digits; so are 0 and 1e9 + 1."""
    status, out, err = run(COST + ["--seq", seq])
    assert (status, out) == (2, "")
    shown = show(int(seq))
    assert err == ("scheduler-sim: error: --seq must be an integer from 1 to 1,000,000,000, "
                   f"got {shown}\n")
    assert shown == ("1000000000000000000000000000000000000..." if len(seq) > 40 else seq)


def test_cost_of_the_longest_seq_is_finite():
    """--seq 1,000,000,000 prints finite figures: 122,070.312 GiB of KV."""
    status, out, err = run(COST + ["--seq", "1000000000"])
    assert (status, err) == (0, "")
    assert out.splitlines()[0] == ("swap against recompute: llama-3-8b on h100-sxm, "
                                   "S = 1,000,000,000 tokens")
    assert "122,070.312 GiB" in out
    assert "inf" not in out and "nan" not in out


@pytest.mark.parametrize("mfu, shown", [("1e-320", "1e-320"), ("nan", "nan"), ("0", "0.0"),
                                        ("1.5", "1.5"), ("-inf", "-inf")])
def test_cost_refuses_an_mfu_out_of_range(mfu, shown):
    """--mfu outside the option table's [1e-6, 1] (1e-320 printed infinite times before)."""
    status, out, err = run(COST + ["--seq", "8", f"--mfu={mfu}"])
    assert (status, out) == (2, "")
    assert err == f"scheduler-sim: error: --mfu must be a number from 1e-6 to 1, got {shown}\n"


# --- option values: integers beyond a float ------------------------------------------------

def test_a_400_digit_option_is_out_of_range(tmp_path):
    """A release_delay flag or an mfu in a config record of 10**400 (an OverflowError from
    math.isfinite before) is out of range: exit 2, shown by its leading digits."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"type":"request","id":"a","arrival":0,"prompt_tokens":4,'
                    '"output_tokens":2}\n')
    status, out, err = run(["replay", str(path), "--release-delay", "1" + "0" * 400])
    assert (status, out) == (2, "")
    assert err == ("scheduler-sim: error: release_delay must be a number >= 0 and <= 1e15, "
                   "got 1000000000000000000000000000000000000...\n")
    path.write_text('{"type":"config","mfu":1' + "0" * 400 + '}\n')
    status, out, err = run(["validate", str(path)])
    assert (status, out) == (2, "")
    assert err == (f"{path}:1: config: mfu must be a number in [1e-06, 1] or null, got "
                   "1000000000000000000000000000000000000...\n")


def test_a_huge_block_size_is_refused_before_any_memory_is_taken(tmp_path):
    """A block_size of 10**20 filled memory (the decode cohort made a group per row of a
    block: 15 GB in a minute, never finishing); one past 65,536 is refused, by a flag
    and in a config record, and the largest runs."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"type":"request","id":"a","arrival":0,"prompt_tokens":4,'
                    '"output_tokens":2}\n')
    status, out, err = run(["replay", str(path), "--block-size", "1" + "0" * 20])
    assert (status, out) == (2, "")
    assert err == ("scheduler-sim: error: block_size must be an integer from 1 to 65,536, "
                   "got 100000000000000000000\n")
    status, out, err = run(["replay", str(path), "--block-size", "65536", "--json"])
    assert (status, err) == (0, "")
    assert json.loads(out)["runs"][0]["peak_allocated"] == 1
    path.write_text('{"type":"config","block_size":65537}\n')
    status, out, err = run(["validate", str(path)])
    assert (status, out) == (2, "")
    assert err == (f"{path}:1: config: block_size must be an integer from 1 to 65,536, "
                   "got 65537\n")


@pytest.mark.parametrize("scale", ["1e-320", "9.9e-7"])
def test_a_rate_scale_below_1e_6_is_refused(tmp_path, scale):
    """--rate-scale 1e-320 divided an arrival into infinity: a ValueError traceback
    (records/clock.py, `_ceil`); below 1e-6 (the mirror of its 1e6 maximum) it is
    refused, and 1e-6 runs: an arrival at 1 tick comes at 1,000,000."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"type":"request","id":"a","arrival":1,"prompt_tokens":4,'
                    '"output_tokens":2}\n')
    status, out, err = run(["replay", str(path), "--rate-scale", scale])
    assert (status, out) == (2, "")
    assert err == (f"scheduler-sim: error: rate_scale must be a number in [1e-06, 1e+06], "
                   f"got {float(scale)}\n")
    status, out, err = run(["replay", str(path), "--rate-scale", "1e-6", "--json",
                            "--requests"])
    assert (status, err) == (0, "")
    assert json.loads(out)["runs"][0]["per_request"][0]["arrival"] == 1_000_000


def test_show_never_fails_on_a_value():
    """show() quotes an integer of any size by its leading digits (repr refuses past 4,300
    digits) and a list too deep to repr as such."""
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    assert show(nested) == "an array nested too deeply to show"
    assert show(-(10 ** 5000)) == "-100000000000000000000000000000000000..."
    assert show(123) == "123"


# --- seeded fuzzing, in-process --------------------------------------------------------------

def fuzz(command: str, part: range, seed: int, tmp_path: Path, fmt: str | None = None) -> int:
    """Run the cases numbered `part` of a run of small random cases of `command`
    (`run_parts`) in-process, each under a 5 s deadline: no exception escapes `main`,
    stderr holds no traceback, the status is 0 or 2, and a trace written with status 0
    passes the trace parser. Returns how many exited 0."""
    rng = random.Random(seed)
    ok = 0
    for n in range(part.stop):
        case = fuzz_cli.make_case(rng, command, small=True, stdin=False, fmt=fmt)
        if n not in part:
            continue
        directory = tmp_path / f"{command}-{fmt}-{n}"
        directory.mkdir()
        argv = case.materialise(str(directory))
        out, err = io.StringIO(), io.StringIO()
        try:
            with deadline(5):
                status = main(argv, out=out, err=err)
        except BaseException as exc:  # a Hang, or anything main let through
            pytest.fail(f"{case.shown()}: {type(exc).__name__}: {exc}")
        assert "Traceback" not in err.getvalue(), case.shown()
        assert status in (0, 2), (case.shown(), status, err.getvalue()[-300:])
        if status == 0 and case.writes:
            written = (out.getvalue().encode() if case.writes == "-"
                       else (directory / case.writes).read_bytes())
            parse_trace(written, case.shown())
        ok += status == 0
    return ok


@pytest.mark.parametrize("part", run_parts(50, 8))
@pytest.mark.parametrize("fmt", ["mooncake", "azure", "vidur", "burstgpt"])
def test_fuzz_convert(tmp_path, fmt, part):
    """50 seeded cases per format (mutated files, wrong formats, --strict, bad paths)."""
    assert fuzz("convert", part, 1201 + len(fmt), tmp_path, fmt) > 0


@pytest.mark.parametrize("part", run_parts(120, 20))
def test_fuzz_generate(tmp_path, part):
    """120 seeded cases of random flag values."""
    assert fuzz("generate", part, 1202, tmp_path) > 0


@pytest.mark.parametrize("part", run_parts(80, 12))
def test_fuzz_cost(tmp_path, part):
    """80 seeded cases of random --model, --gpu, --seq and --mfu."""
    assert fuzz("cost", part, 1203, tmp_path) > 0


def test_the_readme_states_the_limits_the_code_has():
    """The README's table of limits gives the code's constants (and spec §10 repeats
    them), so a changed limit is a changed document."""
    from scheduler_sim.gpu.swap import MAX_SEQ
    from scheduler_sim.io import importers
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    spec = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    assert (importers.MAX_TIMESTAMP, importers.TIMESTAMP_DECIMALS, importers.FOREIGN_LINES) \
        == (10 ** 15, 15, 5)
    assert (generator.MAX_REQUESTS, generator.MAX_LENGTH, generator.MAX_TOKEN_IDS,
            generator.MIN_RATE, generator.CV_RANGE, generator.MAX_SIGMA,
            generator.MAX_CANCEL_AFTER, generator.MAX_WEIGHT, MAX_SEQ) == \
        (1_000_000, 1_000_000, 10_000_000, 1e-6, (0.01, 100.0), 10.0, 1e12, 1e6, 10 ** 9)
    for row in ("| `convert` | a timestamp: Mooncake `timestamp` (ms), vidur `arrived_at` and "
                "BurstGPT `Timestamp` (s) | a decimal number from 0 to 1e15 in the file's unit, "
                "with at most 15 decimals",
                "| `generate` | `--requests` | 1 to 1,000,000 |",
                "| `generate` | `--rate`, `--cv`, `--burstiness` | a finite number >= 1e-6 "
                "requests per tick (per second under `--time-unit s`); 0.01 to 100; 0.0001 to "
                "10000, not with `--cv` or `--arrival poisson` |",
                "| `generate` | `--prefix-groups`, `--prefix-tokens` | 0 to 1,000,000 each; the "
                "trace holds at most 10,000,000 prompt token ids in all |",
                "| `generate` | `--priorities` | weights finite, 0 to 1e6, not all 0 |",
                "| `generate` | `--cancel-rate`, `--cancel-after` | 0 to 1; a finite number > 0 "
                "and at most 1e12 (ticks, or seconds) |",
                "| `cost` | `--seq`, `--mfu` | an integer from 1 to 1,000,000,000; 1e-6 to 1 |"):
        assert row in readme, row
    words = " ".join(spec.split())
    for phrase in ("from 0 to 1e15 in the file's unit (ms for Mooncake, s for vidur and "
                   "BurstGPT) with at most 15 decimals", "requests 1 to 1,000,000",
                   "rate >= 1e-6 per tick", "gamma cv 0.01 to 100",
                   "at most 10,000,000 prompt token ids", "priority weights 0 to 1e6",
                   "at most 1e12 ticks", "`--seq` 1 to 1,000,000,000; `--mfu` 1e-6 to 1",
                   "none of the first 5 lines is a JSON object with its three fields"):
        assert phrase in words, phrase


def test_a_misspelt_choice_is_named_with_its_nearest():
    """An option of a few choices, misspelt: the message lists them, quotes the value
    and names the nearest; a value near none gets no guess."""
    from scheduler_sim.records.option_values import check_value
    choices = "'round-robin', 'least-loaded', 'prefix-affinity', 'power-of-two'"
    assert check_value("router", "prefix-afinity") == (None, (
        f"router must be one of {choices}, got 'prefix-afinity' "
        "(did you mean 'prefix-affinity'?)"))
    assert check_value("router", "zzz") == (None, f"router must be one of {choices}, got 'zzz'")
    assert check_value("router", "least-loaded") == ("least-loaded", None)
