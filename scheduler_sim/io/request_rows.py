"""Per-request records as people and spreadsheets read them: the `--requests`
table (`format_requests`, one aligned line per request) and the
`--requests-csv` rows (`format_csv`, `csv_header`, `csv_row`), each CSV field
quoted as RFC 4180 says and with what a CSV reader chokes on or a terminal
obeys written as an escape (`csv_field`).
"""
from __future__ import annotations

import re
from typing import Any

from ..engine.summary import REQUEST_FIELDS, TIME_REQUEST_FIELDS
from ..records.clock import Clock
from .report import format_number, format_time
from .terminal_text import ljust, printable, rjust, text_width

__all__ = ["format_requests", "format_csv", "csv_header", "csv_row", "csv_field", "csv_text",
           "REQUEST_COLUMNS"]


# (heading, per-request field) of the `--requests` table.
REQUEST_COLUMNS = (
    ("id", "id"), ("arrival", "arrival"), ("sent", "sent"), ("admitted", "admitted"),
    ("first token", "first_token"), ("finished", "finished"), ("status", "status"),
    ("P", "prompt_tokens"), ("N", "output_tokens"), ("cached", "cached_tokens"),
    ("preempt", "preemptions"),
    ("useful rows", "useful_rows"), ("replayed", "replay_rows"),
)


def format_requests(policy: str, records: list[dict[str, Any]], clock: Clock | None = None,
                    closed_loop: bool = False) -> str:
    """One line per request: when it was admitted, produced, ended, and the work it cost.

    The `sent` column appears only with closed-loop clients, where it can
    differ from the arrival.
    """
    clock = clock or Clock()
    columns = [c for c in REQUEST_COLUMNS if closed_loop or c[1] != "sent"]
    if records and "replica" in records[0]:  # a fleet's: which replica served it
        columns.insert(1, ("replica", "replica"))
    heads = [h for h, _ in columns]

    def cell(record: dict[str, Any], field: str) -> str:
        value = record[field]
        if isinstance(value, str):  # the id, from the trace, and the status
            return printable(value, backslashes=True)
        if field in TIME_REQUEST_FIELDS:
            return format_time(value, clock)
        return format_number(value)

    cells = [[cell(r, f) for _, f in columns] for r in records]
    widths = [max(len(h), *(text_width(c[i]) for c in cells)) if cells else len(h)
              for i, h in enumerate(heads)]
    left = {heads.index("id"), heads.index("status")}  # read better left-aligned

    def line(values: list[str]) -> str:
        return "  ".join(ljust(v, w) if i in left else rjust(v, w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    out = [f"requests under {printable(policy)} (times in {clock.label})", line(heads)]
    out.extend(line(c) for c in cells)
    return "\n".join(out) + "\n"


def format_csv(per_policy: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """Every per-request field, one row per request and policy (`policy` first), rows
    ending in LF (RFC 4180 quoting: a field is quoted when it holds a comma, a quote,
    CR or LF; the csv module, with LF line ends, would leave a CR unquoted)."""
    fleet = any("replica" in r for _, records in per_policy for r in records)
    return csv_header(fleet) + "".join(csv_row(policy, record)
                                  for policy, records in per_policy for record in records)


def csv_header(fleet: bool = False) -> str:
    """The first line of `format_csv` (a fleet's rows have `replica` after `policy`)."""
    return ",".join(("policy",) + ("replica",) * fleet + REQUEST_FIELDS) + "\n"


def csv_row(policy: str, record: dict[str, Any]) -> str:
    """One request's line of `format_csv`."""
    replica = [csv_text(record["replica"])] if "replica" in record else []
    return ",".join([csv_field(policy)] + replica
                    + [csv_field(csv_text(record[f])) for f in REQUEST_FIELDS]) + "\n"


def csv_text(value: Any) -> str:
    """A value as a CSV cell spells it: null empty, booleans lowercase, floats
    exactly (repr)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


# What a CSV field never holds raw: a backslash, C0 controls but TAB, LF and CR, DEL,
# C1 controls, and lone surrogates (which UTF-8 cannot carry).
_CSV_ESCAPED = re.compile(r"[\\\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_CSV_QUOTED = re.compile('[,"\r\n]')
_CSV_PLAIN = re.compile(r'[^\\\x00-\x1f\x7f-\x9f\ud800-\udfff,"]*')  # needs neither


def _csv_escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ch == "\\":
        return "\\\\"
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def csv_field(text: str) -> str:
    """A CSV field (RFC 4180): the text, quoted (its quotes doubled) when it holds a
    comma, a quote, CR or LF; a control character other than TAB, CR and LF, and a
    lone surrogate, written as a backslash escape (`\\x00`, `\\x1b`, `\\x85`,
    `\\ud800`), and so a backslash doubled, so that distinct texts stay distinct."""
    if _CSV_PLAIN.fullmatch(text):
        return text
    if _CSV_ESCAPED.search(text):
        text = _CSV_ESCAPED.sub(_csv_escape, text)
    if _CSV_QUOTED.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text
