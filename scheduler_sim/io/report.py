"""Turning run summaries into what people read: aligned tables, JSON and CSV.

The replay table puts policies side by side, one metric per line, each with
its unit. Every output of a run speaks one time unit (`clock.Clock.label`):
ticks without a cost model, seconds with one; the header says which, what
ran (every option away from its default, and where it came from) and, with
a cost model, how the KV pool follows from the GPU. Rows for things that did
not happen (cancellations, client waits, SLOs nobody set) are left out so
the table stays short.

Text from a trace (request ids above all) is shown through `printable`: a
control character, a line or paragraph separator, a bidi override or a
lone surrogate is shown as its escape (`\\x1b`, `\\n`, `\\u2028`, `\\ud800`;
in a request id a backslash is doubled, so that what is shown names one id),
so a trace can neither move the terminal's cursor nor forge a table line,
and columns are padded to the text's width on a terminal (`text_width`: CJK
characters take two columns, combining marks none). CSV keeps the text as it
is, quoted whenever it holds a comma, a quote, CR or LF, except what a CSV
reader chokes on or a terminal obeys: a control character other than TAB, CR
and LF, and a lone surrogate, are written as escapes (`csv_field`), and so a
backslash is doubled.
"""
from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from ..engine.summary import (METRICS, REQUEST_FIELDS, STATS, TIME_REQUEST_FIELDS,
                      TIME_RUN_FIELDS)
from ..gpu.catalogue import is_path
from ..gpu.costmodel import PoolSizing, calibration_for, clock_for
from ..records.clock import Clock
from ..records.errors import SimError
from ..records.option_table import OPTIONS, format_slo
from ..records.options import Options

__all__ = ["format_table", "format_json", "format_number", "format_requests", "format_csv",
           "table_rows", "REQUEST_COLUMNS", "header_lines", "options_text", "printable",
           "text_width", "csv_field", "cost_model_line"]

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def printable(text: str, backslashes: bool = False) -> str:
    """`text` safe to print on one line of a terminal: every character that is not
    printable (`str.isprintable`: C0 and C1 controls, DEL, line and paragraph
    separators, format characters such as bidi overrides, lone surrogates,
    private and unassigned code points) becomes `\\n`, `\\r`, `\\t`, `\\xNN`,
    `\\uNNNN` or `\\UNNNNNNNN`, as Python's repr writes them; with `backslashes`
    a backslash becomes `\\\\` too, so that distinct strings never look alike.
    Never raises, whatever the str."""
    if text.isprintable() and not (backslashes and "\\" in text):
        return text
    out = []
    for ch in text:
        if ch.isprintable() and (ch != "\\" or not backslashes):
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def text_width(text: str) -> int:
    """The columns printable `text` takes on a terminal: wide and fullwidth characters
    (CJK) two, combining marks none, every other character one."""
    if text.isascii():
        return len(text)
    width = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me"):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def _ljust(text: str, width: int) -> str:
    return text + " " * (width - text_width(text))


def _rjust(text: str, width: int) -> str:
    return " " * (width - text_width(text)) + text


_METRIC_LABELS = {"queue_delay": "queue delay", "client_wait": "client wait", "ttft": "TTFT",
                  "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}


def table_rows(clock: Clock) -> tuple[tuple[str, str, str], ...]:
    """(label, unit, summary field) of the replay table, units in the run's clock."""
    t = clock.label
    per = "s" if clock.in_seconds else "tick"
    rows = [
        ("requests", "", "requests"),
        ("completed", "", "completed"),
        ("finished_aborted", "cancelled", "finished_aborted"),
        ("finished_ignored", "rejected", "finished_ignored"),
        ("finished_timeout", "timed out", "finished_timeout"),
        ("finished_error", "stalled", "finished_error"),
        ("iterations", "dispatches", "iterations"),
        ("empty iterations", "", "empty_iterations"),
        ("makespan", t, "makespan"),
        ("duration", t, "duration"),
        ("throughput   requests", f"req/{per}", "request_throughput"),
        ("             input", f"tok/{per}", "input_throughput"),
        ("             output", f"tok/{per}", "output_throughput"),
        ("             total", f"tok/{per}", "total_token_throughput"),
    ]
    for metric in METRICS:
        label = _METRIC_LABELS[metric]
        for i, stat in enumerate(STATS):
            unit = f"{t}/token" if metric == "tpot" else t
            rows.append(((label.ljust(13) if i == 0 else " " * 13) + stat, unit,
                         f"{metric}_{stat}"))
    rows += [
        ("SLO met", "requests", "slo_met"),
        ("SLO attainment", "%", "slo_attainment"),
        ("goodput", f"req/{per}", "request_goodput"),
        ("deadlines", "requests", "deadlines"),
        ("deadline misses", "requests", "deadline_misses"),
        ("padding rows", "rows", "padding_rows"),
        ("preemptions", "", "preemptions"),
        ("useful rows", "rows", "useful_rows"),
        ("replayed rows", "rows", "replay_rows"),
        ("cached tokens", "tokens", "cached_tokens"),
        ("peak reserved", "blocks", "peak_reserved"),
        ("peak allocated", "blocks", "peak_allocated"),
        ("mean batch", "rows", "mean_batch_rows"),
        ("mean batch", "tokens", "mean_batch_tokens"),
        ("busy", "s", "busy_seconds"),
        # A fleet's, under data-parallel lockstep only (fleet/lockstep.py).
        ("lockstep steps", "steps", "lockstep_steps"),
        ("dummy steps", "dispatches", "dummy_steps"),
        ("lockstep wait", t, "lockstep_wait"),
        # Prefill/decode disaggregation (fleet/disagg.py): the KV copies.
        ("KV transfers", "copies", "transfers"),
        ("KV transfers aborted", "copies", "transfers_aborted"),
        ("KV transferred", "tokens", "transfer_tokens"),
        ("KV transfer time mean", t, "transfer_time_mean"),
        ("KV transfer time max", t, "transfer_time_max"),
    ]
    return tuple(rows)


# Rows shown only when some policy has a value other than 0 or null.
_OPTIONAL = {"finished_aborted", "finished_ignored", "finished_timeout", "finished_error",
             "empty_iterations", "padding_rows", "cached_tokens", "deadlines",
             "deadline_misses", "busy_seconds", "transfers", "transfers_aborted",
             "transfer_tokens", "transfer_time_mean", "transfer_time_max"}
_SLO_FIELDS = ("slo_met", "slo_attainment", "request_goodput")
_RATES = ("request_throughput", "input_throughput", "output_throughput",
          "total_token_throughput", "request_goodput")


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


def format_rate(value: Any) -> str:
    """A rate: two decimals, or three significant figures below 0.01 (0.00324), so
    that a slow rate never shows as 0.00."""
    if value is None:
        return "-"
    if value and abs(value) < 0.01:
        return f"{value:.3g}"
    return f"{value:,.2f}"


def format_time(value: Any, clock: Clock) -> str:
    """A time in the run's unit: seconds with 4 decimals, ticks as numbers."""
    if value is None:
        return "-"
    if clock.in_seconds:
        return f"{value:,.4f}"
    return format_number(value)


def _time_cells(values: list[Any], clock: Clock) -> list[str]:
    """A row of times: in ticks, all with 2 decimals as soon as one has a fraction."""
    if not clock.in_seconds and any(isinstance(v, float) for v in values):
        return ["-" if v is None else f"{v:,.2f}" for v in values]
    return [format_time(v, clock) for v in values]


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def options_text(options: Options) -> list[str]:
    """`name value (source)` for every option away from its default, and every flag
    given, in table order."""
    out = []
    for name, spec in OPTIONS.items():
        source = options.origin.get(name)
        if source is None:
            continue
        value = getattr(options, name)
        default = spec.default
        if name == "policy":
            default = tuple(default)
        if value == default and source not in ("derived", "flag"):
            continue  # a trace that restates a default; a flag always shows
        if name == "slo" and value is not None:
            text = format_slo(value)
        elif value is None:
            text = "null"
        else:
            text = _value_text(value)
        out.append(f"{name} {printable(text)} ({source})")
    return out


def _wrap(prefix: str, items: list[str], width: int = 100) -> list[str]:
    lines, line = [], prefix
    for item in items:
        piece = item if line == prefix else " · " + item
        if line != prefix and len(line) + len(piece) > width:
            lines.append(line)
            line, piece = " " * len(prefix) + item, ""
        line += piece
    lines.append(line)
    return lines


def header_lines(command: str, trace_name: str, options: Options, clock: Clock,
                 requests: int, pool: PoolSizing | None) -> list[str]:
    """The lines above a table: what ran, in which unit, and with which options."""
    noun = "request" if requests == 1 else "requests"
    lines = [f"scheduler-sim {command} {printable(trace_name)}",
             f"{requests:,} {noun} · {clock.describe()}"]
    if options.has_cost_model:
        lines.append(printable(cost_model_line(options)))
    if pool is not None:
        derived = options.origin.get("num_blocks") == "derived"
        lines.append(pool.describe(None if derived else options.num_blocks))
    lines += _wrap("options: ", options_text(options) or ["all defaults"])
    lines += [f"note: {printable(text)}" for text in options.unused()]
    return lines


def cost_model_line(options: Options) -> str:
    """`cost model llama-3-8b/h100-sxm on 4 GPUs`: the model and GPU priced, by their
    names, and the files they were read from (as given) when a path named them."""
    specs = options.cost_specs
    if specs is None:
        text = options.cost_model or f"{options.model}/{options.gpu}"
    else:
        text = f"{specs[0].name}/{specs[1].name}"
    line = f"cost model {text}" + (f" on {options.tp} GPUs" if options.tp > 1 else "")
    files = [f"{key} from {value}" for key in ("model", "gpu")
             if (value := getattr(options, key)) is not None and is_path(value)]
    line += f" ({', '.join(files)})" if files else ""
    try:
        calibration = calibration_for(options)
    except SimError:
        return line  # the run itself reports what is wrong
    line += f" · calibration {calibration.name}"
    gpu = options.cost_specs[1].name if options.cost_specs is not None else None
    if gpu is not None and calibration.gpu not in ("any", gpu):
        line += f" (fitted on {calibration.gpu}, run on {gpu})"
    if calibration.path is not None and not calibration.path.startswith("shipped:"):
        line += f" (from {calibration.path})"
    overhead = calibration.coefficients.request_overhead
    if overhead:
        line += f" · serving overhead {overhead * 1e3:.1f} ms per request, in TTFT and E2EL"
    return line


# Rows of fields only some runs have (a fleet's): shown when a run has them.
_WHEN_PRESENT = {"lockstep_steps", "dummy_steps", "lockstep_wait"}


def _shown(field: str, values: list[Any], options: Options) -> bool:
    if field in _WHEN_PRESENT:
        return any(v is not None for v in values)
    if field.startswith("client_wait_"):
        return options.max_concurrency is not None  # closed-loop clients only
    if field in _SLO_FIELDS:
        return options.slo is not None  # 0 requests meeting it is a result
    if field in _OPTIONAL:
        return any(v not in (None, 0) for v in values)
    return True


def format_table(trace_name: str, options: Options, runs: list[dict[str, Any]],
                 clock: Clock | None = None, pool: PoolSizing | None = None) -> str:
    """The side-by-side table of `replay`: one column per policy, times in the run's unit.
    A fleet's run (`replicas` in the run) adds a table of its replicas below."""
    clock = clock or clock_for(options)
    policies = [printable(run["policy"]) for run in runs]
    lines = header_lines("replay", trace_name, options, clock,
                         runs[0]["requests"] if runs else 0, pool)
    lines.append("")
    lines += _columns(policies, runs, options, clock)
    for run in runs:
        if "replicas" in run:
            replicas = run["replicas"]
            roles = [r.get("role") for r in replicas]
            heads = [f"{r['replica']}" + (f" {roles[i]}" if roles[i] else "")
                     for i, r in enumerate(replicas)]
            lines += ["", f"replicas under {printable(run['policy'])} "
                      f"(router {options.router}"
                      + (", lockstep" if options.dp_lockstep else "") + ")"]
            lines += _columns(heads, replicas, options, clock, replica_rows(clock))
    return "\n".join(lines) + "\n"


def replica_rows(clock: Clock) -> tuple[tuple[str, str, str], ...]:
    """(label, unit, summary field) of a fleet's per-replica table."""
    t = clock.label
    per = "s" if clock.in_seconds else "tick"
    labels = {row[2]: row for row in table_rows(clock)}
    rows = [labels[f] for f in ("requests", "completed", "finished_aborted",
                                "finished_ignored", "finished_timeout", "finished_error",
                                "iterations")]
    rows += [("dummy steps", "dispatches", "dummy_steps"), ("lockstep wait", t, "lockstep_wait"),
             labels["makespan"],
             ("throughput requests", f"req/{per}", "request_throughput"),
             ("throughput output", f"tok/{per}", "output_throughput")]
    for metric, stat in (("queue_delay", "p50"), ("queue_delay", "p99"), ("ttft", "p50"),
                         ("ttft", "p99"), ("tpot", "p50"), ("tpot", "p99"), ("e2el", "p99")):
        unit = f"{t}/token" if metric == "tpot" else t
        rows.append((f"{_METRIC_LABELS[metric]} {stat}", unit, f"{metric}_{stat}"))
    rows += [labels[f] for f in ("preemptions", "replay_rows", "cached_tokens",
                                 "peak_allocated", "mean_batch_tokens", "busy_seconds")]
    return tuple(rows)


def _columns(heads: list[str], runs: list[dict[str, Any]], options: Options, clock: Clock,
             every: tuple[tuple[str, str, str], ...] | None = None) -> list[str]:
    """Aligned lines: one metric per line, one column per run (policy or replica)."""
    time_fields = set(TIME_RUN_FIELDS) | {"lockstep_wait", "transfer_time_mean",
                                          "transfer_time_max"}
    rows = []
    for label, unit, field in every or table_rows(clock):
        values = [run.get(field) for run in runs]
        if not _shown(field, values, options):
            continue
        if field in time_fields:
            cells = _time_cells(values, clock)
        elif field == "slo_attainment":
            cells = ["-" if v is None else f"{v * 100:.2f}" for v in values]
        elif field == "busy_seconds":
            cells = ["-" if v is None else f"{v:,.4f}" for v in values]
        elif field in _RATES:
            cells = [format_rate(v) for v in values]
        elif any(isinstance(v, float) for v in values):
            # One style per row: 2.00 beside 1.33, not 2 beside 1.33.
            cells = ["-" if v is None else f"{v:,.2f}" for v in values]
        else:
            cells = [format_number(v) for v in values]
        rows.append((label, unit, cells))
    label_w = max(len(r[0]) for r in rows)
    unit_w = max(len(r[1]) for r in rows)
    col_w = [max(text_width(p), *(len(r[2][i]) for r in rows)) for i, p in enumerate(heads)]
    header = " " * (label_w + 2 + unit_w) + "".join(
        "  " + _rjust(p, w) for p, w in zip(heads, col_w))
    lines = [header.rstrip()]
    for label, unit, cells in rows:
        line = label.ljust(label_w) + "  " + unit.ljust(unit_w) + "".join(
            "  " + c.rjust(w) for c, w in zip(cells, col_w))
        lines.append(line.rstrip())
    return lines


def format_json(trace_name: str, options: Options, runs: list[dict[str, Any]],
                clock: Clock | None = None, pool: PoolSizing | None = None) -> str:
    """The same content as the table, as one JSON document; `results_time_unit`
    (`ticks` or `s`) names the unit of every time in the runs."""
    clock = clock or clock_for(options)
    doc: dict[str, Any] = {"trace": trace_name, "results_time_unit": clock.label,
                           "options": options.as_dict(), "origin": dict(options.origin)}
    if pool is not None:
        doc["pool"] = {"blocks": pool.blocks, "block_bytes": pool.block_bytes,
                       "usable_bytes": pool.usable, "weight_bytes": pool.weights,
                       "reserve_bytes": pool.reserve, "kv_bytes": pool.kv}
    doc["runs"] = runs
    return json.dumps(doc, indent=2) + "\n"


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
        return "  ".join(_ljust(v, w) if i in left else _rjust(v, w)
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
    replica = [_csv_value(record["replica"])] if "replica" in record else []
    return ",".join([csv_field(policy)] + replica
                    + [csv_field(_csv_value(record[f])) for f in REQUEST_FIELDS]) + "\n"


def _csv_value(value: Any) -> str:
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
