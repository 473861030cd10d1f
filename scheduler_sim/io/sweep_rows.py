"""A sweep's rows as text: the JSONL a shard writes (`format_jsonl`: a header
line that `sweep merge` checks, then one row per configuration), their CSV
(`format_csv`, `csv_text`) and the aligned table `sweep` prints
(`format_table`: the swept values and key metrics, under headings and units).
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from .report import format_number
from .request_rows import csv_field
from .sweep import SWEEP_VERSION, Grid, cell_text
from .terminal_text import printable, text_width

__all__ = ["format_jsonl", "format_csv", "csv_text", "format_table"]


def _header(grid: Grid, shard: tuple[int, int] | None) -> dict[str, Any]:
    return {"sweep": SWEEP_VERSION, "trace": grid.trace_name,
            "trace_sha256": grid.trace_sha256,
            "grid": {axis.name: list(axis.values) for axis in grid.axes},
            "options": grid.fixed, "configurations": len(grid),
            "shard": None if shard is None else f"{shard[0]}/{shard[1]}",
            "columns": list(grid.columns), "fingerprint": grid.fingerprint}


def _jsonl(header: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(record, separators=(",", ":")) + "\n"
                   for record in [header, *rows])


def format_jsonl(grid: Grid, rows: list[dict[str, Any]],
                 shard: tuple[int, int] | None = None) -> str:
    """The header line (what `merge` checks), then one row per configuration."""
    return _jsonl(_header(grid, shard), rows)


def csv_text(columns: Iterable[str], rows: Iterable[dict[str, Any]]) -> str:
    """The CSV of `rows` under `columns` (the header line first)."""
    columns = list(columns)
    lines = [",".join(columns)]
    lines.extend(",".join(csv_field(cell_text(name, row.get(name))) for name in columns)
                 for row in rows)
    return "\n".join(lines) + "\n"


def format_csv(grid: Grid, rows: list[dict[str, Any]]) -> str:
    """One line per configuration: `index`, the swept values, `time_unit`, `stalled` and
    every summary field (a fleet's fields too when the grid has one); each field as
    `request_rows.csv_field` writes it (RFC 4180 quoting, control characters escaped), LF line
    ends."""
    return csv_text(grid.columns, rows)


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
