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

| format | input | time unit |
|---|---|---|
| mooncake | JSONL: timestamp, input_length, output_length, hash_ids (512-token blocks) | ms |
| azure | CSV: TIMESTAMP (`2023-11-16 18:17:03.9799600`), ContextTokens, GeneratedTokens | absolute time |
| vidur | CSV: arrived_at, num_prefill_tokens, num_decode_tokens | s |
| burstgpt | CSV by column name: Timestamp, Request tokens, Response tokens | s |
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import json
import math
from fractions import Fraction
from typing import Any, Callable

from ..kv.allocator import blocks_for

__all__ = ["FORMATS", "Conversion", "convert", "MOONCAKE_HASH_BLOCK"]

MOONCAKE_HASH_BLOCK = 512


@dataclasses.dataclass
class Conversion:
    """The records of a converted trace and what was left out, and why."""

    records: list[dict[str, Any]]
    problems: list[str]          # `file:line: ...` for every bad row
    failed_requests: int = 0     # rows the source marks as failed (BurstGPT)


class _Rows:
    """Collects (timestamp, fields) rows and the problems of the others."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rows: list[tuple[int, Fraction, dict[str, Any]]] = []  # (line, time in ms, fields)
        self.problems: list[str] = []

    def bad(self, line: int, text: str) -> None:
        self.problems.append(f"{self.name}:{line}: {text}")


def _int_field(value: Any, field: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value.strip())
        else:
            raise ValueError(f"{field} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{field} must be an integer >= {minimum}, got {value}")
    return value


def _seconds_field(text: str, field: str) -> Fraction:
    try:
        value = Fraction(text.strip())
    except (ValueError, ZeroDivisionError, OverflowError):
        raise ValueError(f"{field} must be a number of seconds, got {text!r}") from None
    if value < 0:
        raise ValueError(f"{field} must be >= 0, got {text.strip()}")
    return value


def _read_mooncake(text: str, rows: _Rows) -> None:
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError as exc:
            rows.bad(line, f"invalid JSON: {exc}")
            continue
        try:
            if not isinstance(rec, dict):
                raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
            for key in ("timestamp", "input_length", "output_length"):
                if key not in rec:
                    raise ValueError(f"missing field {key!r}")
            ts = rec["timestamp"]
            if (isinstance(ts, bool) or not isinstance(ts, (int, float))
                    or not math.isfinite(ts) or ts < 0):
                raise ValueError(f"timestamp must be a number of ms >= 0, got {ts!r}")
            prompt = _int_field(rec["input_length"], "input_length")
            output = _int_field(rec["output_length"], "output_length")
            hashes = rec.get("hash_ids", [])
            if (not isinstance(hashes, list)
                    or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes)):
                raise ValueError(f"hash_ids must be a list of integers, got {hashes!r}")
            if len(hashes) > blocks_for(prompt, MOONCAKE_HASH_BLOCK):
                raise ValueError(f"hash_ids has {len(hashes)} entries, more than "
                                 f"ceil(input_length / {MOONCAKE_HASH_BLOCK})")
        except ValueError as exc:
            rows.bad(line, str(exc))
            continue
        fields = {"prompt_tokens": prompt, "output_tokens": output}
        if hashes:
            fields["block_hashes"] = hashes
        rows.rows.append((line, Fraction(ts), fields))


def _csv_rows(text: str, rows: _Rows, needed: tuple[str, ...]):
    """Yield (line, row dict) of a CSV whose header names the `needed` columns."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        rows.bad(1, "empty file: expected a header line")
        return
    header = [h.strip() for h in header]
    missing = [c for c in needed if c not in header]
    if missing:
        rows.bad(1, f"header lacks column(s) {', '.join(repr(m) for m in missing)}, "
                    f"got {', '.join(repr(h) for h in header)}")
        return
    index = {name: header.index(name) for name in needed}
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            rows.bad(line, f"expected {len(header)} columns, got {len(row)}")
            continue
        yield line, {name: row[i] for name, i in index.items()}


def _azure_time(text: str) -> Fraction:
    """`2023-11-16 18:17:03.9799600` -> ms since the epoch, exactly (7-digit fraction)."""
    text = text.strip()
    whole, _, frac = text.partition(".")
    try:
        moment = datetime.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise ValueError(f"TIMESTAMP must look like 2023-11-16 18:17:03.9799600, "
                         f"got {text!r}") from None
    if frac and not frac.isdigit():
        raise ValueError(f"TIMESTAMP has a bad fraction of a second, got {text!r}")
    seconds = int(moment.replace(tzinfo=datetime.timezone.utc).timestamp())
    fraction = Fraction(int(frac), 10 ** len(frac)) if frac else Fraction(0)
    return (seconds + fraction) * 1000


def _read_azure(text: str, rows: _Rows) -> None:
    for line, row in _csv_rows(text, rows, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        try:
            ms = _azure_time(row["TIMESTAMP"])
            prompt = _int_field(row["ContextTokens"], "ContextTokens")
            output = _int_field(row["GeneratedTokens"], "GeneratedTokens")
        except ValueError as exc:
            rows.bad(line, str(exc))
            continue
        rows.rows.append((line, ms, {"prompt_tokens": prompt, "output_tokens": output}))


def _read_vidur(text: str, rows: _Rows) -> None:
    columns = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
    for line, row in _csv_rows(text, rows, columns):
        try:
            ms = _seconds_field(row["arrived_at"], "arrived_at") * 1000
            prompt = _int_field(row["num_prefill_tokens"], "num_prefill_tokens")
            output = _int_field(row["num_decode_tokens"], "num_decode_tokens")
        except ValueError as exc:
            rows.bad(line, str(exc))
            continue
        rows.rows.append((line, ms, {"prompt_tokens": prompt, "output_tokens": output}))


def _read_burstgpt(text: str, rows: _Rows) -> int:
    failed = 0
    columns = ("Timestamp", "Request tokens", "Response tokens")
    for line, row in _csv_rows(text, rows, columns):
        try:
            ms = _seconds_field(row["Timestamp"], "Timestamp") * 1000
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


FORMATS: dict[str, Callable[[str, _Rows], Any]] = {
    "mooncake": _read_mooncake,
    "azure": _read_azure,
    "vidur": _read_vidur,
    "burstgpt": _read_burstgpt,
}


def convert(fmt: str, text: str, name: str) -> Conversion:
    """Convert `text` in format `fmt` to trace v1 records (a config record first)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    rows = _Rows(name)
    failed = FORMATS[fmt](text, rows) or 0
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
    return Conversion(records, rows.problems, failed)
