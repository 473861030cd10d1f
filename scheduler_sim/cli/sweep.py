"""`sweep` and `sweep merge`: replay every configuration of a grid of options
(from `--grid` flags and a grid file), or one shard of it, in this process or
in `-j N` workers, and write its rows (JSONL, CSV, a table, an HTML plot); join
the shards' JSONL files back into the whole table.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Any, TextIO

from ..engine.host_summary import HOST_RUN_FIELDS
from ..engine.summary import FLEET_RUN_FIELDS, RUN_FIELDS
from ..gpu.run_cost import clock_for
from ..io.html_report import sweep_report
from ..io.inputs import read_limited
from ..io.json_lines import json_value
from ..io.output_paths import check_output_paths
from ..io.outputs import Output, write_whole
from ..io.problems import MAX_PROBLEMS
from ..io.progress import SweepProgress, wanted
from ..io.report import table_rows
from ..io.terminal_text import printable
from ..io.sweep import (Axis, Configuration, build_grid, check_axis, file_digest, parse_shard,
                        shard_of)
from ..io.sweep_rows import format_csv as sweep_csv
from ..io.sweep_rows import format_jsonl as sweep_jsonl
from ..io.sweep_rows import format_table as sweep_table
from ..io.sweep_runs import configuration_row, run_configuration, run_grid
from ..io.sweep_merge import merge_shards, read_shard
from ..io.trace import Trace, parse_trace, read_trace
from ..io.trace_config import ALLOW_FLAG, allow_trace_plugins
from ..io.trace_config import resolve_options as resolve_trace_options
from ..policies import is_plugin
from ..records.errors import TraceError, UsageError
from ..records.option_table import OPTIONS
from ..records.option_values import show
from .entry import PROG
from .flags import (check_outputs_and_jobs, flag_value, flag_values, load_plugins,
                    plugin_sources)
from .workers import Workers

__all__ = ["cmd_sweep", "cmd_sweep_merge"]


def _grid_value(spec: Any, text: str) -> Any:
    """One value of `--grid NAME=...` as its flag would give it (booleans as true/false)."""
    if spec.kind == "bool":
        return {"true": True, "false": False}.get(text.lower(), text)
    if spec.kind in ("int", "float", "str", "duration"):
        return flag_value(spec.kind, text, spec.name)
    return text


def _grid_flag(text: str) -> Axis:
    """`--grid NAME=V1,V2,...` (`slo` values, which hold commas, separated by `;`)."""
    name, sep, rest = text.partition("=")
    name = name.strip().removeprefix("--").replace("-", "_")
    if not sep or not name:
        raise UsageError(f"--grid must look like NAME=V1,V2,..., got {show(text)}")
    spec = OPTIONS.get(name)
    if spec is None or spec.trace_only:
        check_axis(name, [], "--grid")  # names what is wrong
    if not rest.strip():
        raise UsageError(f"--grid: {name} needs at least one value, got {show(text)}")
    parts = rest.split(";" if name == "slo" else ",")
    return check_axis(name, [_grid_value(spec, part.strip()) for part in parts], "--grid")


# A grid file is a few lines; one of 16 MiB would hold millions of values.
MAX_GRID_FILE_BYTES = 16 * 2 ** 20


def _grid_file(path: str) -> list[Axis]:
    """A grid file: a JSON object of option names and lists of values, in axis order.
    Every problem of the file is listed (a TraceError): a JSON error with its line, a
    bad axis named by its option."""
    name = "<stdin>" if path == "-" else path

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) != len(items):
            seen = [key for key, _ in items]
            key = next(key for key in seen if seen.count(key) > 1)
            if key not in OPTIONS:  # in an objective's object, say
                raise ValueError(f"duplicate key {key!r}")
            raise TraceError([f"{name}: the option {key} is swept twice; give all its "
                              "values in one list"])
        return out

    def decode(text: str) -> Any:
        try:
            return json.loads(text, object_pairs_hook=pairs)
        except json.JSONDecodeError as exc:  # the line too: a grid file has several
            raise TraceError([f"{name}:{exc.lineno}: invalid JSON: {exc.msg} at column "
                              f"{exc.colno}"]) from None

    data = read_limited(path, MAX_GRID_FILE_BYTES, "which no grid file is")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError([f"{name}: invalid UTF-8 at byte {exc.start + 1}, got "
                          f"{data[exc.start:exc.start + 1]!r}"]) from None
    grid, problem = json_value(decode, text)  # nested too deeply, say
    if problem is not None:
        raise TraceError([f"{name}: {problem}"])
    if not isinstance(grid, dict) or not grid:
        raise TraceError([f"{name}: a grid file is a JSON object of option names and lists "
                          f"of values, got {show(grid)}"])
    axes, problems = [], []
    for option, values in grid.items():
        try:
            axes.append(check_axis(option, values, name))
        except UsageError as exc:
            problems.append(str(exc))
    if problems:
        if len(problems) > MAX_PROBLEMS:
            problems[MAX_PROBLEMS:] = [f"{name}: ... and {len(problems) - MAX_PROBLEMS} more "
                                       "errors"]
        raise TraceError(problems)
    return axes


def cmd_sweep(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Replay every configuration of the grid (or one shard of it); write its rows."""
    written = (("--csv", args.csv), ("--jsonl", args.jsonl), ("--report", args.report))
    check_outputs_and_jobs(written, args.jobs)
    read = [("the trace", args.trace), ("the grid file", args.grid_file)]
    check_output_paths(written, read + plugin_sources(args.policy))
    shard = parse_shard(args.shard) if args.shard is not None else None
    from_file = _grid_file(args.grid_file) if args.grid_file else []
    axes = from_file + [_grid_flag(text) for text in args.grid or ()]
    fixed = flag_values(args)
    policies = fixed.pop("policy", None)
    if policies is not None:
        if any(axis.name == "policy" for axis in axes):
            raise UsageError("--policy and a grid's policy list both give the policies; "
                             "use one of them")
        axes.append(check_axis("policy", policies, "--policy"))
    if args.trace == "-":
        data = sys.stdin.buffer.read()
        digest = hashlib.sha256(data).hexdigest()
        trace = parse_trace(data, "<stdin>")
    else:
        digest = file_digest(args.trace)
        trace = read_trace(args.trace)
    plugin_dir, swept = _sweep_plugins(args, trace, axes, from_file, fixed)
    # The grid's policies (--grid, the grid file, the trace's config) may be plugins.
    check_output_paths(written, read + plugin_sources(swept, plugin_dir))
    load_plugins(swept, plugin_dir)
    grid = build_grid(trace, axes, fixed, digest, plugin_dir)
    plot = _sweep_plot(args, grid) if args.report else None
    configurations = shard_of(grid, shard)
    # The outputs are opened before anything runs: one that cannot be written
    # stops the sweep at once, not after the grid ran.
    outputs: dict[str, Output] = {}
    try:
        for name, target, what in (("jsonl", args.jsonl, "cannot write rows"),
                                   ("csv", args.csv, "cannot write rows"),
                                   ("report", args.report, "cannot write the report")):
            if target:
                outputs[name] = Output(target, out, what, ".sweep-")
        progress = SweepProgress(err, wanted(err, args.quiet), len(configurations),
                                 args.jobs)
        try:
            rows = _run_configurations(trace, configurations, args.jobs,
                                       _progress_line(progress, args.metric))
        finally:
            progress.close()
        which = f" (shard {shard[0]}/{shard[1]})" if shard else ""
        table = sweep_table(grid, rows)
        if "jsonl" in outputs:
            outputs["jsonl"].write(sweep_jsonl(grid, rows, shard))
        if "csv" in outputs:
            outputs["csv"].write(sweep_csv(grid, rows))
        if plot is not None:
            x, unit = plot
            outputs["report"].write(sweep_report(trace.name, [a.name for a in grid.axes],
                                                 rows, x, args.metric, unit, table))
        for output in outputs.values():
            output.commit()
    except BaseException:
        for output in outputs.values():
            output.abort()
        raise
    text = (f"{PROG} sweep {printable(trace.name)}: {len(rows)} of {len(grid)} "
            f"configurations{which}\n" + table)
    (err if "-" in (args.csv, args.jsonl, args.report) else out).write(text)
    stalled = [str(row["index"]) for row in rows if row["stalled"]]
    if stalled:
        err.write(f"{PROG}: the run stalled in configuration(s) {', '.join(stalled)}: stuck "
                  "requests ended as finished_error\n")
        return 1
    return 0


def _configuration_task(shared: tuple[Trace, list[Configuration]], position: int) -> Any:
    """A worker's task of `sweep -j`: the run summary of one configuration of the list."""
    trace, configurations = shared
    return run_configuration(trace, configurations[position].options)


def _progress_line(progress: SweepProgress, metric: str):
    """What tells `progress` of a finished configuration's row (None when it is off)."""
    if not progress.enabled:
        return None

    def finished(config: Configuration, row: dict[str, Any]) -> None:
        value = row.get(metric)
        shown = f"{value:,.4g}" if isinstance(value, float) else show(value)
        units = {field: unit for _, unit, field in table_rows(clock_for(config.options))}
        unit = f" {units[metric]}" if units.get(metric) else ""
        progress.finished(f"configuration {config.index} ({printable(config.label())}): "
                          f"{metric} {shown}{unit}" + (" (stalled)" if row["stalled"] else ""))
    return finished


def _run_configurations(trace: Trace, configurations: list[Configuration], jobs: int,
                        on_row=None) -> list[dict[str, Any]]:
    """The rows of the configurations, in their order: in this process, or in at most
    `jobs` worker processes (one per configuration at most). `on_row(configuration,
    row)` is told of each as it finishes, in the order they finish."""
    if min(jobs, len(configurations)) <= 1:
        return run_grid(trace, configurations, on_row=on_row)

    def describe(position: int) -> str:
        config = configurations[position]
        return f"running configuration {config.index} ({config.label()})"

    with Workers(_configuration_task, (trace, configurations),
                 list(range(len(configurations))), jobs, describe) as workers:
        if on_row is not None:
            workers.on_result = lambda position, result: on_row(
                configurations[position], configuration_row(configurations[position], *result))
        return [configuration_row(configurations[position], *result)
                for position, result in workers.results()]


def _sweep_plugins(args: argparse.Namespace, trace: Trace, axes: list[Axis],
                   from_file: list[Axis], fixed: dict[str, Any]) -> tuple[str | None, list]:
    """(the folder relative plugin files are taken from, the policies swept). Plugins
    named by a file (the grid file's policy list, or the trace's config when no
    policy is swept) run only with --allow-trace-plugins, and are then taken from
    that file's folder."""
    axis = next((a for a in axes if a.name == "policy"), None)
    if axis is None:  # the trace's policies (or the default)
        # (Each configuration's options are checked together later: an axis may
        # complete them, as `--preemption-mode swap --grid host_kv_gib=1,2` does.)
        base = resolve_trace_options(trace.config, dict(fixed), specs=False,
                                     combined=False)[0]
        base = allow_trace_plugins(trace, base, args.allow_trace_plugins,
                                   f"pass {ALLOW_FLAG} (or name it with --policy)")
        return base.plugin_dir, list(base.policy)
    named = [name for name in axis.values if is_plugin(name)]
    if axis not in from_file or not named:
        return None, list(axis.values)
    if not args.allow_trace_plugins:
        listed = ", ".join(repr(name) for name in named)
        raise UsageError(f"{args.grid_file}: its policy list names the plugin "
                         f"{'policy' if len(named) == 1 else 'policies'} {listed}: Python "
                         f"code, which a grid file never runs on its own; to run it, pass "
                         f"{ALLOW_FLAG} (or name it with --policy)")
    return os.path.dirname(os.path.abspath(args.grid_file)), list(axis.values)


def _sweep_plot(args: argparse.Namespace, grid) -> tuple[str, str]:
    """(x axis, unit of the metric) of a sweep's --report, or a UsageError."""
    names = [axis.name for axis in grid.axes]
    if args.metric not in RUN_FIELDS + FLEET_RUN_FIELDS + HOST_RUN_FIELDS:
        raise UsageError(f"--metric must be a field of the run summary (for example "
                         f"ttft_p99, output_throughput, preemptions), got {show(args.metric)}")
    if args.x is not None:
        x = args.x.replace("-", "_")
        if x not in names:
            raise UsageError(f"--x must be one of the swept options ({', '.join(names)}), "
                             f"got {show(args.x)}")
    else:
        x = next((name for name in names if name != "policy"), "policy")
    clock = clock_for(grid.configurations[0].options)
    units = {field: unit for _, unit, field in table_rows(clock)}
    return x, units.get(args.metric) or ""


def cmd_sweep_merge(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Join the JSONL shards of a sweep into its full table (JSONL, or CSV). The files
    are read one at a time (each at most MAX_SHARD_BYTES) and checked whole."""
    if args.csv == "-" and args.jsonl == "-":
        raise UsageError("--csv - and --jsonl - cannot both write to standard output; send "
                         "one of them to a file")
    check_output_paths((("--csv", args.csv), ("--jsonl", args.jsonl)),
                       [("a shard", path) for path in args.shards])
    if args.shards.count("-") > 1:
        raise UsageError("standard input (-) can be only one of the shards, got it "
                         f"{args.shards.count('-')} times")
    merged = merge_shards(("<stdin>" if path == "-" else path, read_shard(path))
                          for path in args.shards)
    target = args.jsonl if args.jsonl or args.csv else "-"
    if target:
        write_whole(target, merged.jsonl(), out)
    if args.csv:
        write_whole(args.csv, merged.csv(), out)
    err.write(f"{PROG} sweep merge: {len(merged.rows)} configurations from {merged.files} "
              "file(s)\n")
    return 0

