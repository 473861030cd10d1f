"""Turning run summaries into what people read: aligned tables and JSON.

The replay table puts policies side by side, one metric per line, each with
its unit. Rows for statuses that did not occur (cancelled, rejected, ...)
are left out so the table stays short.
"""
from __future__ import annotations

import json
from typing import Any

from .options import Options

__all__ = ["format_table", "format_json", "format_number", "format_requests", "TABLE_ROWS",
           "REQUEST_COLUMNS", "TIME_FIELDS", "in_seconds"]

# (label, unit, summary field); a None field starts a heading line.
TABLE_ROWS: tuple[tuple[str, str, str | None], ...] = (
    ("requests", "", "requests"),
    ("completed", "", "completed"),
    ("cancelled", "", "finished_aborted"),
    ("rejected", "", "finished_ignored"),
    ("timed out", "", "finished_timeout"),
    ("stalled", "", "finished_error"),
    ("iterations", "dispatches", "iterations"),
    ("empty iterations", "ticks", "empty_iterations"),
    ("makespan", "ticks", "makespan"),
    ("queue delay  mean", "ticks", "queue_delay_mean"),
    ("             p50", "ticks", "queue_delay_p50"),
    ("             p99", "ticks", "queue_delay_p99"),
    ("TTFT         mean", "ticks", "ttft_mean"),
    ("             p50", "ticks", "ttft_p50"),
    ("             p99", "ticks", "ttft_p99"),
    ("TPOT         mean", "ticks/token", "tpot_mean"),
    ("end-to-end   mean", "ticks", "e2e_mean"),
    ("             p50", "ticks", "e2e_p50"),
    ("             p99", "ticks", "e2e_p99"),
    ("padding rows", "rows", "padding_rows"),
    ("preemptions", "", "preemptions"),
    ("useful rows", "rows", "useful_rows"),
    ("replayed rows", "rows", "replay_rows"),
    ("cached tokens", "tokens", "cached_tokens"),
    ("peak reserved", "blocks", "peak_reserved"),
    ("peak allocated", "blocks", "peak_allocated"),
    ("mean batch", "rows", "mean_batch_rows"),
    ("mean batch", "tokens", "mean_batch_tokens"),
)

# Rows shown only when some policy has a non-zero value.
_OPTIONAL = {"finished_aborted", "finished_ignored", "finished_timeout", "finished_error",
             "empty_iterations", "padding_rows", "cached_tokens"}


def format_number(value: Any) -> str:
    """Integers with thousands separators, other numbers with two decimals, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def options_line(options: Options, requests: int) -> str:
    """The line under the title: the numbers that shape every result."""
    noun = "request" if requests == 1 else "requests"
    return (f"{requests:,} {noun} · block_size {options.block_size} tokens · num_blocks "
            f"{options.num_blocks:,} · token_budget {options.token_budget:,} tokens · max_rows "
            f"{options.max_rows} · prefill_chunk {options.prefill_chunk:,} tokens · "
            f"release_delay {options.release_delay} ticks · order {options.order}")


# Summary fields measured in ticks: shown in seconds when ticks have a length.
TIME_FIELDS = ("makespan",) + tuple(
    f"{m}_{s}" for m in ("queue_delay", "ttft", "tpot", "e2e")
    for s in ("mean", "p50", "p90", "p99", "max"))


def in_seconds(run: dict[str, Any], tick_seconds: float) -> dict[str, Any]:
    """The time fields of a run summary converted from ticks to seconds."""
    return {f: (None if run.get(f) is None else round(run[f] * tick_seconds, 6))
            for f in TIME_FIELDS}


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value:,.3f}"


def format_table(trace_name: str, options: Options, runs: list[dict[str, Any]]) -> str:
    """The side-by-side table of `replay`: one column per policy.

    With `tick_seconds` set (a cost model), times are shown in seconds.
    """
    policies = [run["policy"] for run in runs]
    lines = [f"scheduler-sim replay {trace_name}",
             options_line(options, runs[0]["requests"] if runs else 0)]
    tick = options.tick_seconds
    if options.cost_model:
        lines.append(f"cost model {options.cost_model} · 1 tick = {tick * 1000:g} ms")
    lines.append("")
    converted = [in_seconds(run, tick) for run in runs] if tick else None
    rows = []
    for label, unit, field in TABLE_ROWS:
        values = [run.get(field) for run in runs]
        if field in _OPTIONAL and not any(values):
            continue
        if converted and field in TIME_FIELDS:
            unit = unit.replace("ticks", "s")
            rows.append((label, unit, [_seconds(c[field]) for c in converted]))
            continue
        rows.append((label, unit, [format_number(v) for v in values]))
    label_w = max(len(r[0]) for r in rows)
    unit_w = max(len(r[1]) for r in rows)
    col_w = [max(len(p), *(len(r[2][i]) for r in rows)) for i, p in enumerate(policies)]
    header = " " * (label_w + 2 + unit_w) + "".join(
        "  " + p.rjust(w) for p, w in zip(policies, col_w))
    lines.append(header.rstrip())
    for label, unit, cells in rows:
        line = label.ljust(label_w) + "  " + unit.ljust(unit_w) + "".join(
            "  " + c.rjust(w) for c, w in zip(cells, col_w))
        lines.append(line.rstrip())
    return "\n".join(lines) + "\n"


def format_json(trace_name: str, options: Options, runs: list[dict[str, Any]]) -> str:
    """The same content as the table, as one JSON document (times in ticks, and in
    seconds under `seconds` when ticks have a length)."""
    if options.tick_seconds:
        runs = [{**run, "seconds": in_seconds(run, options.tick_seconds)} for run in runs]
    doc = {"trace": trace_name, "options": options.as_dict(), "runs": runs}
    return json.dumps(doc, indent=2) + "\n"


# (heading, per-request field) of the `--requests` table.
REQUEST_COLUMNS = (
    ("id", "id"), ("arrival", "arrival"), ("admitted", "admitted"),
    ("first token", "first_token"), ("finished", "finished"), ("status", "status"),
    ("P", "prompt_tokens"), ("N", "output_tokens"), ("cached", "cached_tokens"),
    ("preempt", "preemptions"),
    ("useful rows", "useful_rows"), ("replayed", "replay_rows"),
)


def format_requests(policy: str, records: list[dict[str, Any]]) -> str:
    """One line per request: when it was admitted, produced, ended, and the work it cost."""
    heads = [h for h, _ in REQUEST_COLUMNS]
    cells = [[format_number(r[f]) for _, f in REQUEST_COLUMNS] for r in records]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, h in enumerate(heads)]
    left = {0, 5}  # id and status read better left-aligned

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) if i in left else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    out = [f"requests under {policy} (times in ticks)", line(heads)]
    out.extend(line(c) for c in cells)
    return "\n".join(out) + "\n"
