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

This module writes the run summaries (the table, JSON); the per-request table
and CSV are `request_rows`', and `printable` and `text_width` are
`terminal_text`'s.
"""
from __future__ import annotations

import json
from typing import Any

from ..engine.summary import METRICS, STATS, TIME_RUN_FIELDS
from ..gpu.catalogue import is_path
from ..gpu.kv_pool import PoolSizing
from ..gpu.run_cost import calibration_for, clock_for
from ..records.clock import Clock
from ..records.errors import SimError
from ..records.option_table import OPTIONS, format_slo
from ..records.options import Options
from .terminal_text import printable, rjust, text_width

__all__ = ["format_table", "format_json", "format_number", "format_time", "table_rows",
           "header_lines", "options_text", "cost_model_line"]


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
        ("MFU over busy time", "%", "model_flops_utilisation"),
        ("MBU over busy time", "%", "hbm_bandwidth_utilisation"),
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
        # Host memory (engine/host_moves.py): only when it is on.
        ("host memory", "blocks", "host_kv_blocks"),
        ("host peak", "blocks", "host_peak_blocks"),
        ("stored to host", "blocks", "host_stored_blocks"),
        ("evicted from host", "blocks", "host_evicted_blocks"),
        ("loaded from host", "tokens", "host_loaded_tokens"),
        ("swap-outs", "", "swap_outs"),
        ("swap-ins", "", "swap_ins"),
        ("swaps refused", "", "swap_refused"),
        ("load wait mean", t, "load_wait_mean"),
        ("link out busy", "%", "link_out_utilisation"),
        ("link in busy", "%", "link_in_utilisation"),
        ("recompute avoided", "tokens", "recompute_avoided_tokens"),
        ("resumes", "", "resumes"),
        ("rebuilt   from GPU", "rows", "rebuilt_from_gpu"),
        ("          from host", "rows", "rebuilt_from_host"),
        ("          recomputed", "rows", "rebuilt_by_recompute"),
        ("survival p10", "%", "survival_p10"),
        ("survival p50", "%", "survival_p50"),
        ("survival p90", "%", "survival_p90"),
    ]
    return tuple(rows)


# Rows shown only when some policy has a value other than 0 or null.
_OPTIONAL = {"finished_aborted", "finished_ignored", "finished_timeout", "finished_error",
             "empty_iterations", "padding_rows", "cached_tokens", "deadlines",
             "deadline_misses", "busy_seconds", "model_flops_utilisation",
             "hbm_bandwidth_utilisation", "transfers", "transfers_aborted",
             "transfer_tokens", "transfer_time_mean", "transfer_time_max",
             "host_kv_blocks", "host_peak_blocks", "host_stored_blocks",
             "host_evicted_blocks", "host_loaded_tokens", "swap_outs", "swap_ins",
             "swap_refused", "load_wait_mean", "link_out_utilisation",
             "link_in_utilisation", "recompute_avoided_tokens"}
# Fractions shown as percentages.
_PERCENTS = {"slo_attainment", "model_flops_utilisation", "hbm_bandwidth_utilisation",
             "link_out_utilisation", "link_in_utilisation",
             "survival_p10", "survival_p50", "survival_p90"}
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
_WHEN_PRESENT = {"lockstep_steps", "dummy_steps", "lockstep_wait", "resumes",
                 "rebuilt_from_gpu", "rebuilt_from_host", "rebuilt_by_recompute",
                 "survival_p10", "survival_p50", "survival_p90"}


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
                                 "peak_allocated", "mean_batch_tokens", "busy_seconds",
                                 "model_flops_utilisation", "hbm_bandwidth_utilisation")]
    return tuple(rows)


def _columns(heads: list[str], runs: list[dict[str, Any]], options: Options, clock: Clock,
             every: tuple[tuple[str, str, str], ...] | None = None) -> list[str]:
    """Aligned lines: one metric per line, one column per run (policy or replica)."""
    time_fields = set(TIME_RUN_FIELDS) | {"lockstep_wait", "transfer_time_mean",
                                          "transfer_time_max", "load_wait_mean"}
    rows = []
    for label, unit, field in every or table_rows(clock):
        values = [run.get(field) for run in runs]
        if not _shown(field, values, options):
            continue
        if field in time_fields:
            cells = _time_cells(values, clock)
        elif field in _PERCENTS:
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
        "  " + rjust(p, w) for p, w in zip(heads, col_w))
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
