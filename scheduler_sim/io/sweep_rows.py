"""A sweep's rows as text: the JSONL a shard writes (`format_jsonl`: a header
line that `sweep merge` checks, then one row per configuration), their CSV
(`format_csv`, `csv_text`) and the aligned table `sweep` prints
(`format_table`: the swept values and key metrics, under headings and units);
and `RowStream`, which writes the JSONL and CSV a row at a time as the
configurations finish, in grid order whatever order they finish in.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from ..records import interrupts
from .outputs import Output
from .report import format_number
from .request_rows import csv_field
from .sweep import SWEEP_VERSION, Grid, cell_text
from .terminal_text import printable, text_width

__all__ = ["format_jsonl", "format_csv", "csv_text", "format_table", "RowStream"]


def _header(grid: Grid, shard: tuple[int, int] | None) -> dict[str, Any]:
    return {"sweep": SWEEP_VERSION, "trace": grid.trace_name,
            "trace_sha256": grid.trace_sha256,
            "grid": {axis.name: list(axis.values) for axis in grid.axes},
            "options": grid.fixed, "configurations": len(grid),
            "shard": None if shard is None else f"{shard[0]}/{shard[1]}",
            "columns": list(grid.columns), "fingerprint": grid.fingerprint}


def _json_line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"


def _jsonl(header: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    return "".join(map(_json_line, [header, *rows]))


def format_jsonl(grid: Grid, rows: list[dict[str, Any]],
                 shard: tuple[int, int] | None = None) -> str:
    """The header line (what `merge` checks), then one row per configuration."""
    return _jsonl(_header(grid, shard), rows)


def _csv_line(columns: list[str], row: dict[str, Any]) -> str:
    return ",".join(csv_field(cell_text(name, row.get(name))) for name in columns) + "\n"


def csv_text(columns: Iterable[str], rows: Iterable[dict[str, Any]]) -> str:
    """The CSV of `rows` under `columns` (the header line first)."""
    columns = list(columns)
    return ",".join(columns) + "\n" + "".join(_csv_line(columns, row) for row in rows)


def format_csv(grid: Grid, rows: list[dict[str, Any]]) -> str:
    """One line per configuration: `index`, the swept values, `time_unit`, `stalled` and
    every summary field (a fleet's fields too when the grid has one); each field as
    `request_rows.csv_field` writes it (RFC 4180 quoting, control characters escaped), LF line
    ends."""
    return csv_text(grid.columns, rows)


class RowStream:
    """The rows of a sweep's configurations, taken as each finishes (in any order) and
    written to its JSONL and CSV outputs (either may be None) in grid order: a row as
    soon as the rows of every configuration before it are in, so that a pipe reads
    them as they come and the files hold the same bytes whatever order the
    configurations finished in. The header lines go with the first row (so a sweep
    interrupted before any finished writes nothing, even to a pipe); `finish` writes
    them if no row did, and the rows still held back behind one that never finished
    (an interrupted sweep's), in grid order, gap and all.

    Each step runs with SIGINT and SIGTERM held back, so that an interrupt finds
    every row either written to both outputs or to neither."""

    def __init__(self, grid: Grid, shard: tuple[int, int] | None, indexes: list[int],
                 jsonl: Output | None, csv: Output | None) -> None:
        self.jsonl, self.csv = jsonl, csv
        self.columns = list(grid.columns)
        self.rows: dict[int, dict[str, Any]] = {}  # by configuration index
        self._order = indexes  # the indexes of the configurations run, in grid order
        self._written = 0  # how many of them (a prefix of `_order`) are written
        self._headers: tuple[str, str] | None = (_json_line(_header(grid, shard)),
                                                 ",".join(self.columns) + "\n")

    def add(self, row: dict[str, Any]) -> None:
        """Take a finished configuration's row (again: ignored); write what it completes."""
        if row["index"] in self.rows:
            return
        with interrupts.held():
            self.rows[row["index"]] = row
            ready = []
            while self._written < len(self._order) and self._order[self._written] in self.rows:
                ready.append(self.rows[self._order[self._written]])
                self._written += 1
            self._put(ready)

    def finish(self) -> None:
        """Write the rows held back behind a configuration that did not finish."""
        with interrupts.held():
            self._put([self.rows[index] for index in self._order[self._written:]
                       if index in self.rows], headers_anyway=True)
            self._written = len(self._order)

    def in_order(self) -> list[dict[str, Any]]:
        """The rows taken so far, in grid order."""
        return [self.rows[index] for index in self._order if index in self.rows]

    def _put(self, rows: list[dict[str, Any]], headers_anyway: bool = False) -> None:
        if not rows and not (headers_anyway and self._headers):
            return
        jsonl_text = "".join(map(_json_line, rows))
        csv_text = "".join(_csv_line(self.columns, row) for row in rows)
        if self._headers is not None:
            jsonl_text, csv_text = self._headers[0] + jsonl_text, self._headers[1] + csv_text
            self._headers = None
        for output, text in ((self.jsonl, jsonl_text), (self.csv, csv_text)):
            if output is not None:
                output.write(text)
                try:
                    output.handle.flush()
                except OSError as exc:
                    raise output.failed(exc) from None


# (heading, summary field, kind) of the table `sweep` prints.
_TABLE = (("completed", "completed", "count"), ("ttft p50", "ttft_p50", "time"),
          ("ttft p99", "ttft_p99", "time"), ("tpot p50", "tpot_p50", "time"),
          ("e2el p99", "e2el_p99", "time"), ("throughput", "request_throughput", "rate"),
          ("output", "output_throughput", "tokens"), ("preempted", "preemptions", "count"),
          ("makespan", "makespan", "time"))
_UNITS = {"count": lambda unit: "", "time": lambda unit: unit,
          "rate": lambda unit: "req/" + ("s" if unit == "s" else "tick"),
          "tokens": lambda unit: "tok/" + ("s" if unit == "s" else "tick")}


def _column(values: list[Any], kind: str, units: list[str]) -> list[str]:
    """A column of the table: counts with separators, rates to 2 decimals (3 figures
    below 0.01), seconds to 4 decimals, ticks whole unless one has a fraction."""
    fractions = any(isinstance(v, float) for v, u in zip(values, units) if u != "s")
    out = []
    for value, unit in zip(values, units):
        if value is None:
            out.append("-")
        elif kind == "count":
            out.append(format_number(value))
        elif kind in ("rate", "tokens"):
            out.append(f"{value:.3g}" if value and abs(value) < 0.01 else f"{value:,.2f}")
        elif unit == "s":
            out.append(f"{value:,.4f}")
        else:
            out.append(f"{value:,.2f}" if fractions else format_number(value))
    return out


def format_table(grid: Grid, rows: list[dict[str, Any]]) -> str:
    """One aligned line per configuration: its number, swept values and key metrics,
    under a line of headings and a line of units (a `unit` column instead when the
    configurations do not share one)."""
    units = [row["time_unit"] for row in rows]
    shared = units[0] if units and len(set(units)) == 1 else None
    heads = ["#", *(axis.name for axis in grid.axes)]
    under = [""] * len(heads)
    columns = [[str(row["index"]) for row in rows]]
    columns += [[printable(cell_text(a.name, row[a.name])) or "null" for row in rows]
                for a in grid.axes]
    if shared is None:
        heads.append("unit")
        under.append("")
        columns.append(units)
    for head, field, kind in _TABLE:
        heads.append(head)
        under.append(_UNITS[kind](shared) if shared else "")
        columns.append(_column([row.get(field) for row in rows], kind, units))
    heads.append("")
    under.append("")
    columns.append(["stalled" if row["stalled"] else "" for row in rows])
    widths = [max(text_width(h), text_width(u), *map(text_width, c))
              for h, u, c in zip(heads, under, columns)]
    left = set(range(1, 1 + len(grid.axes))) | {len(heads) - 1}

    def line(values: list[str]) -> str:
        return "  ".join(v + " " * (w - text_width(v)) if i in left
                         else " " * (w - text_width(v)) + v
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    out = [line(heads)]
    if any(under):
        out.append(line(under))
    out.extend(line([c[r] for c in columns]) for r in range(len(rows)))
    return "\n".join(out) + "\n"
