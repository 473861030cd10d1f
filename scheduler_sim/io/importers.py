"""Importing public trace formats into trace v1 (the `convert` command, §10).

Each importer reads one format's text and returns trace v1 records with
times in seconds (`time_unit: "s"` in the config record). The rule for time
is the same everywhere: a request's arrival is its timestamp minus the
earliest timestamp of the file, computed exactly (integers and fractions)
and written as the float nearest to it, so a timestamp never rounds
differently on another machine; requests keep their file order. Ids are `<format>-<line>`, so every
request can be traced back to its line in the source file.

A bad row is reported with its line number; without `strict` it is
skipped and the conversion goes on, with `strict` the whole file fails
(exit 2). BurstGPT's failed requests (`Response tokens` of 0) are not bad
rows: they are skipped and counted.

Numbers are bounded before any exact arithmetic: a timestamp is a decimal
number from 0 to 1e15 in the file's unit (`MAX_TIMESTAMP`, the most a
trace's time may be) with at most 15 decimals (`TIMESTAMP_DECIMALS`), so
that no exponent can ask for a huge power of ten; a count is an integer of
at most 4,300 digits. A line nested too deeply for the JSON decoder, or a
CSV field longer than the csv module's limit (an unclosed quote, usually),
is a `file:line` problem like any other. A file whose first
`FOREIGN_LINES` lines are not rows of the format at all (not JSON objects
with the format's fields) is not read further, and `guess_format` names
the format the file looks like.

| format | input | time unit |
|---|---|---|
| mooncake | JSONL: timestamp, input_length, output_length, hash_ids (512-token blocks) | ms |
| azure | CSV: TIMESTAMP (`2023-11-16 18:17:03.9799600`), ContextTokens, GeneratedTokens | absolute time |
| vidur | CSV: arrived_at, num_prefill_tokens, num_decode_tokens | s |
| burstgpt | CSV by column name: Timestamp, Request tokens, Response tokens | s |

A real vLLM run as the BLIS project publishes it (`blis-run`: a JSON
document of requests, its client's config and its measured latencies) is a
whole run rather than rows, converted all or nothing: `blis_run.py`.
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import re
from fractions import Fraction
from typing import Any, Callable

from ..kv.allocator import blocks_for
from ..records.option_values import show
from .json_lines import json_value

__all__ = ["FORMATS", "RUN_FORMATS", "Conversion", "convert", "guess_format", "MOONCAKE_HASH_BLOCK",
           "MAX_TIMESTAMP", "TIMESTAMP_DECIMALS", "FOREIGN_LINES"]

MOONCAKE_HASH_BLOCK = 512
# The largest timestamp, in the file's own unit (ms for Mooncake, s for vidur and
# BurstGPT): the largest time a trace may hold, so every arrival stays within it.
MAX_TIMESTAMP = 10 ** 15
# Digits after the decimal point a timestamp may have (a step of 1e-15 of its unit).
TIMESTAMP_DECIMALS = 15
# Leading lines that are not rows of the format at all after which a file is not
# read further: it is another format (see `guess_format`).
FOREIGN_LINES = 5
# Digits of an integer Python converts from text (its default limit since 3.11).
_MAX_DIGITS = 4300
_INTEGER = re.compile(r"[+-]?[0-9]{1,%d}" % _MAX_DIGITS)
_DECIMAL = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?")
_LONG_NUMBER = re.compile(r"[0-9]{%d}" % (_MAX_DIGITS + 1))
# A CSV file's lines as io.StringIO(text, newline="") gives them (ending at CRLF, CR or
# LF), without its copy of the whole text at 4 bytes a character.
_CSV_LINE = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+")


@dataclasses.dataclass
class Conversion:
    """The records of a converted trace and what was left out, and why."""

    records: list[dict[str, Any]]
    problems: list[str]          # `file:line: ...` for every bad row
    failed_requests: int = 0     # rows the source marks as failed (BurstGPT)
    stopped_at: int | None = None  # the line after which a foreign file was left unread
    looks_like: str | None = None  # with no row converted: the format the file matches


class _Foreign(Exception):
    """The first FOREIGN_LINES lines are not rows of the format: stop reading."""

    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


class _Rows:
    """Collects (timestamp, fields) rows and the problems of the others."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rows: list[tuple[int, Fraction, dict[str, Any]]] = []  # (line, time in ms, fields)
        self.problems: list[str] = []
        self.foreign = 0  # leading lines that are not rows of the format at all

    def bad(self, line: int, text: str) -> None:
        self.problems.append(f"{self.name}:{line}: {text}")

    def not_a_row(self, line: int, text: str) -> None:
        """A line that is not a row of the format at all (not JSON, not an object, a
        field missing); FOREIGN_LINES of them before any row stop the reading."""
        self.bad(line, text)
        if len(self.problems) == self.foreign + 1 and not self.rows:
            self.foreign += 1
            if self.foreign >= FOREIGN_LINES:
                raise _Foreign(line)


def _int_field(value: Any, field: str, minimum: int = 1) -> int:
    """An integer >= minimum: an int, or a string of at most 4,300 ASCII digits."""
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field} must be an integer >= {minimum}, got {show(value)}")
    return value


def _timestamp(text: str, field: str, unit: str) -> Fraction:
    """A decimal timestamp, exactly: from 0 to MAX_TIMESTAMP with at most
    TIMESTAMP_DECIMALS decimals (trailing zeros aside). Its size is known from the
    digits and the exponent before any power of ten is computed."""
    shown = show(text.strip())
    if isinstance(text, _JsonDecimal):
        shown = shown[1:-1]  # a JSON number, shown as one
    text = text.strip()
    out_of_range = ValueError(f"{field} must be a number of {unit} from 0 to 1e15, "
                              f"got {shown}")
    too_fine = ValueError(f"{field} must have at most {TIMESTAMP_DECIMALS} decimals "
                          f"(a step of 1e-15 {unit}), got {shown}")
    match = _DECIMAL.fullmatch(text)
    if match is None or not (match[2] or match[3]):
        raise out_of_range
    sign, whole, fraction, exponent = match[1], match[2], match[3] or "", match[4] or "0"
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return Fraction(0)  # zero, whatever its sign or exponent
    if sign == "-":
        raise out_of_range
    significant = digits.rstrip("0")
    power = exponent.lstrip("+-").lstrip("0")
    if len(power) > 6:  # |exponent| >= 10**6: far outside the range either way
        raise too_fine if exponent.startswith("-") else out_of_range
    # value = int(significant) x 10**scale, and 10**(top - 1) <= value < 10**top
    scale = int(exponent) - len(fraction) + len(digits) - len(significant)
    top = scale + len(significant)
    if top > 16:
        raise out_of_range
    if scale < -TIMESTAMP_DECIMALS:
        raise too_fine
    value = Fraction(int(significant) * 10 ** max(scale, 0), 10 ** max(-scale, 0))
    if value > MAX_TIMESTAMP:
        raise out_of_range
    return value


class _JsonDecimal(str):
    """A JSON number with a fraction or an exponent, kept as its text so that it is
    read exactly (`_timestamp`) and its size bounded before any arithmetic."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str.__str__(self)


_MOONCAKE_DECODER = json.JSONDecoder(parse_float=_JsonDecimal)


def _json_line(raw: str) -> tuple[Any, str | None]:
    """A line's JSON value, or why it is not one (as the trace parser words it)."""
    if _LONG_NUMBER.search(raw):
        return None, f"invalid JSON: a number of more than {_MAX_DIGITS:,} digits"
    return json_value(_MOONCAKE_DECODER.decode, raw)


def _mooncake_timestamp(ts: Any) -> Fraction:
    if isinstance(ts, _JsonDecimal):
        return _timestamp(ts, "timestamp", "ms")
    if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts <= MAX_TIMESTAMP:
        raise ValueError(f"timestamp must be a number of ms from 0 to 1e15, got {show(ts)}")
    return Fraction(ts)


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str) and not isinstance(value, _JsonDecimal):
        return "a string"
    return show(value)  # a number, true, false or null


def _lf_lines(text: str):
    """text.split("\n"), one line at a time."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1
    yield text[start:]


def _read_mooncake(text: str, rows: _Rows) -> None:
    # Lines end at LF (CRLF too), as in the trace parser: U+2028 or a lone CR is not a
    # line end, so line numbers (and ids) are those `sed -n` and `wc -l` count.
    for line, raw in enumerate(_lf_lines(text), start=1):
        if not raw.strip():
            continue
        rec, problem = _json_line(raw)
        if problem is None and not isinstance(rec, dict):
            problem = f"expected a JSON object, got {_json_kind(rec)}"
        if problem is None:
            missing = [k for k in ("timestamp", "input_length", "output_length") if k not in rec]
            if missing:
                problem = f"missing field {missing[0]!r}"
        if problem is not None:
            rows.not_a_row(line, problem)
            continue
        try:
            ms = _mooncake_timestamp(rec["timestamp"])
            prompt = _int_field(rec["input_length"], "input_length")
            output = _int_field(rec["output_length"], "output_length")
            hashes = rec.get("hash_ids", [])
            if (not isinstance(hashes, list)
                    or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes)):
                numbers = ([float(h) if isinstance(h, _JsonDecimal) else h for h in hashes]
                           if isinstance(hashes, list) else hashes)
                raise ValueError(f"hash_ids must be a list of integers, got {show(numbers)}")
            if len(hashes) > blocks_for(prompt, MOONCAKE_HASH_BLOCK):
                raise ValueError(f"hash_ids has {len(hashes)} entries, more than "
                                 f"ceil(input_length / {MOONCAKE_HASH_BLOCK})")
        except ValueError as exc:
            rows.bad(line, str(exc))
            continue
        fields = {"prompt_tokens": prompt, "output_tokens": output}
        if hashes:
            fields["block_hashes"] = hashes
        rows.rows.append((line, ms, fields))


def _csv_problem(exc: csv.Error) -> str:
    if "field limit" in str(exc):
        return (f"a field longer than {csv.field_size_limit():,} characters starts on this "
                "line (a quote that is never closed?)")
    return f"bad CSV: {exc}"


def _header_cells(header: list[str]) -> str:
    shown = ", ".join(show(h) for h in header[:8])
    return shown + (f", ... ({len(header):,} columns)" if len(header) > 8 else "")


def _csv_rows(text: str, rows: _Rows, needed: tuple[str, ...]):
    """Yield (line, row dict) of a CSV whose header names the `needed` columns. A CSV
    error (a field past the csv module's size limit, say) ends the file as a problem
    at the line where the row that failed starts."""
    reader = csv.reader(m.group() for m in _CSV_LINE.finditer(text))
    try:
        header = next(reader)
    except StopIteration:
        rows.bad(1, "empty file: expected a header line")
        return
    except csv.Error as exc:
        rows.bad(1, _csv_problem(exc))
        return
    header = [h.strip() for h in header]
    missing = [c for c in needed if c not in header]
    if missing:
        rows.bad(1, f"header lacks column(s) {', '.join(repr(m) for m in missing)}, "
                    f"got {_header_cells(header)}")
        return
    index = {name: header.index(name) for name in needed}
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            rows.bad(start, _csv_problem(exc))
            return
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            rows.bad(line, f"expected {len(header)} columns, got {len(row)}")
            continue
        yield line, {name: row[i] for name, i in index.items()}


_AZURE_FRACTION = re.compile(r"[0-9]{1,%d}" % TIMESTAMP_DECIMALS)


def _azure_time(text: str) -> Fraction:
    """`2023-11-16 18:17:03.9799600` -> ms since the epoch, exactly (7-digit fraction)."""
    text = text.strip()
    whole, _, frac = text.partition(".")
    try:
        moment = datetime.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise ValueError(f"TIMESTAMP must look like 2023-11-16 18:17:03.9799600, "
                         f"got {show(text)}") from None
    if frac and not _AZURE_FRACTION.fullmatch(frac):
        raise ValueError(f"TIMESTAMP must end in at most {TIMESTAMP_DECIMALS} digits after "
                         f"the point, got {show(text)}")
    seconds = int(moment.replace(tzinfo=datetime.timezone.utc).timestamp())
    fraction = Fraction(int(frac), 10 ** len(frac)) if frac else Fraction(0)
    return (seconds + fraction) * 1000


def _read_timed(text: str, rows: _Rows, columns: tuple[str, str, str],
                ms_of: Callable[[str], Fraction]) -> None:
    """Rows of (arrival, prompt tokens, output tokens) columns; `ms_of` reads the first
    into milliseconds."""
    when, prompt_column, output_column = columns
    for line, row in _csv_rows(text, rows, columns):
        try:
            ms = ms_of(row[when])
            prompt = _int_field(row[prompt_column], prompt_column)
            output = _int_field(row[output_column], output_column)
        except ValueError as exc:
            rows.bad(line, str(exc))
            continue
        rows.rows.append((line, ms, {"prompt_tokens": prompt, "output_tokens": output}))


def _read_azure(text: str, rows: _Rows) -> None:
    _read_timed(text, rows, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), _azure_time)


def _read_vidur(text: str, rows: _Rows) -> None:
    _read_timed(text, rows, ("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
                lambda value: _timestamp(value, "arrived_at", "seconds") * 1000)


def _read_burstgpt(text: str, rows: _Rows) -> int:
    failed = 0
    columns = ("Timestamp", "Request tokens", "Response tokens")
    for line, row in _csv_rows(text, rows, columns):
        try:
            ms = _timestamp(row["Timestamp"], "Timestamp", "seconds") * 1000
            prompt = _int_field(row["Request tokens"], "Request tokens")
            output = _int_field(row["Response tokens"], "Response tokens", minimum=0)
        except ValueError as exc:
            rows.bad(line, str(exc))
            continue
        if output == 0:
            failed += 1  # BurstGPT marks a failed request with no response tokens
            continue
        rows.rows.append((line, ms, {"prompt_tokens": prompt, "output_tokens": output}))
    return failed


# Formats that hold a whole run (server settings, requests, measurements) rather
# than rows: each is converted by its own module, all or nothing.
RUN_FORMATS = ("blis-run",)

FORMATS: dict[str, Callable[[str, _Rows], Any]] = {
    "mooncake": _read_mooncake,
    "azure": _read_azure,
    "vidur": _read_vidur,
    "burstgpt": _read_burstgpt,
}


def _read(fmt: str, text: str, rows: _Rows) -> tuple[int, int | None]:
    """Read `text` as `fmt` into `rows`: (failed requests, the line a foreign file
    was left at, or None)."""
    try:
        return FORMATS[fmt](text, rows) or 0, None
    except _Foreign as stop:
        return 0, stop.line


def guess_format(text: str, exclude: str | None = None) -> str | None:
    """The format whose reader accepts more rows than it refuses among the first 20
    lines of `text` (None if none does), `exclude` aside."""
    head = "\n".join(text.lstrip("\ufeff").split("\n", 20)[:20])
    for fmt in FORMATS:
        if fmt == exclude:
            continue
        rows = _Rows("")
        failed, _ = _read(fmt, head, rows)
        if len(rows.rows) + failed > len(rows.problems):
            return fmt
    return None


def convert(fmt: str, text: str, name: str) -> Conversion:
    """Convert `text` in format `fmt` to trace v1 records (a config record first).

    A leading byte-order mark is ignored. When no row converts, `looks_like`
    names the format the file seems to be in (`guess_format`).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark, as spreadsheets write them
    rows = _Rows(name)
    failed, stopped_at = _read(fmt, text, rows)
    config: dict[str, Any] = {"type": "config", "time_unit": "s"}
    if fmt == "mooncake":
        config["hash_block_size"] = MOONCAKE_HASH_BLOCK
    records = [config]
    if rows.rows:
        start = min(ms for _, ms, _ in rows.rows)
        for line, ms, fields in rows.rows:
            seconds = float((ms - start) / 1000)
            arrival = int(seconds) if seconds.is_integer() else seconds
            records.append({"type": "request", "id": f"{fmt}-{line}", "arrival": arrival,
                            **fields})
    looks_like = guess_format(text, fmt) if rows.problems and not rows.rows else None
    return Conversion(records, rows.problems, failed, stopped_at, looks_like)
