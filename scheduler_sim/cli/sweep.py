"""`sweep` and `sweep merge`: replay every configuration of a grid of options
(from `--grid` flags and a grid file), or one shard of it, in this process or
in `-j N` workers, and write its rows (JSONL, CSV, a table, an HTML plot); join
the shards' JSONL files back into the whole table. Rows are written as they
finish, in grid order; a sweep interrupted (Ctrl-C, SIGTERM) keeps the rows of
the configurations that finished: its files hold them, it prints them, and one
line says how far it got.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Callable, TextIO

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
from ..io.sweep import (Axis, Configuration, build_grid, check_axis, parse_shard,
                        shard_of, trace_and_digest, with_policies)
from ..io.sweep_rows import RowStream
from ..io.sweep_rows import format_table as sweep_table
from ..io.sweep_runs import configuration_row, run_configuration, run_grid
from ..io.sweep_merge import merge_shards, read_shard
from ..io.trace import Trace
from ..io.trace_config import ALLOW_FLAG, allow_trace_plugins
from ..io.trace_config import resolve_options as resolve_trace_options
from ..policies import is_plugin
from ..records import interrupts
from ..records.errors import TraceError, UsageError
from ..records.option_table import OPTIONS
from ..records.option_values import show
from .entry import EXIT_INTERRUPTED, EXIT_TERMINATED, PROG
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


def flag_axes(args: argparse.Namespace) -> tuple[list[Axis], list[Axis], dict[str, Any]]:
    """What a command's flags make of a grid (`sweep`, `search`): the grid file's axes,
    every axis (the file's, then --grid's, then --policy's) and the other options."""
    from_file = _grid_file(args.grid_file) if args.grid_file else []
    fixed = flag_values(args)
    axes = with_policies(from_file + [_grid_flag(text) for text in args.grid or ()],
                         fixed.pop("policy", None), "--policy")
    return from_file, axes, fixed


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
    from_file, axes, fixed = flag_axes(args)
    trace, digest = trace_and_digest(args.trace)
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
    stream: RowStream | None = None
    interrupted: BaseException | None = None
    rows: list[dict[str, Any]] | None = None  # once set, every output is committed
    try:
        for name, target, what in (("jsonl", args.jsonl, "cannot write rows"),
                                   ("csv", args.csv, "cannot write rows"),
                                   ("report", args.report, "cannot write the report")):
            if target:
                outputs[name] = Output(target, out, what, ".sweep-")
        stream = RowStream(grid, shard, [c.index for c in configurations],
                           outputs.get("jsonl"), outputs.get("csv"))
        progress = SweepProgress(err, wanted(err, args.quiet), len(configurations),
                                 args.jobs)
        try:
            _run_configurations(trace, configurations, args.jobs, stream.add,
                                _progress_line(progress, args.metric))
        finally:
            progress.close()
        with interrupts.held():  # (an interrupt meanwhile comes once all are committed)
            interrupts.raise_if_signalled()  # (one whose exception was lost)
            rows = _keep(stream, outputs, trace, grid, plot, args.metric)
    except BaseException as exc:
        if not interrupts.is_interrupt(exc) or stream is None or not stream.rows:
            for output in outputs.values():
                output.abort()
            raise
        # Ctrl-C, or SIGTERM (what a batch system sends at its time limit): the rows
        # of the configurations that finished are kept.
        interrupted = exc
        if rows is None:
            with interrupts.held():
                rows = _keep(stream, outputs, trace, grid, plot, args.metric,
                             interrupted=True)
    which = f" (shard {shard[0]}/{shard[1]})" if shard else ""
    text = (f"{PROG} sweep {printable(trace.name)}: {len(rows)} of {len(grid)} "
            f"configurations{which}\n" + sweep_table(grid, rows))
    (err if "-" in (args.csv, args.jsonl, args.report) else out).write(text)
    if interrupted is not None:
        err.write(_interrupted_line(interrupted, len(rows), len(configurations), which,
                                    [args.jsonl, args.csv, args.report]))
        return (EXIT_TERMINATED if isinstance(interrupted, interrupts.Terminated)
                else EXIT_INTERRUPTED)
    stalled = [str(row["index"]) for row in rows if row["stalled"]]
    if stalled:
        err.write(f"{PROG}: the run stalled in configuration(s) {', '.join(stalled)}: stuck "
                  "requests ended as finished_error\n")
        return 1
    return 0


def _keep(stream: RowStream, outputs: dict[str, Output], trace: Trace, grid,
          plot: tuple[str, str] | None, metric: str,
          interrupted: bool = False) -> list[dict[str, Any]]:
    """Complete the outputs with the rows `stream` took (every configuration's, or, when
    `interrupted`, those that finished), commit them all and return the rows in grid
    order; any failure aborts them all. (Called with signals held: every output
    appears, or none.)"""
    try:
        rows = stream.in_order()
        stream.finish()
        if plot is not None:
            x, unit = plot
            outputs["report"].write(sweep_report(
                trace.name, [a.name for a in grid.axes], rows, x, metric, unit,
                sweep_table(grid, rows)))
        for output in outputs.values():
            output.commit(interrupted)
    except BaseException:
        for output in outputs.values():
            output.abort()
        raise
    return rows


def _interrupted_line(exc: BaseException, done: int, total: int, which: str,
                      targets: list[str | None]) -> str:
    """`scheduler-sim: terminated after 2 of 8 configurations; rows.jsonl holds those 2`."""
    word = "terminated" if isinstance(exc, interrupts.Terminated) else "interrupted"
    files = [printable(t) if t != "-" else "standard output" for t in targets if t]
    line = f"{PROG}: {word} after {done} of {total} configurations{which}"
    if files:
        names = ", ".join(files[:-1]) + (" and " if len(files) > 1 else "") + files[-1]
        line += (f"; {names} {'holds' if len(files) == 1 else 'hold'} "
                 f"{'that one' if done == 1 else f'those {done}'}")
    return line + "\n"


def _configuration_task(shared: tuple[Trace, list[Configuration]], position: int) -> Any:
    """A worker's task of `sweep -j`: (position, run summary, stalled) of one
    configuration of the list (its position too, for the rows an interrupt keeps)."""
    trace, configurations = shared
    return (position, *run_configuration(trace, configurations[position].options))


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
                        keep: Callable[[dict[str, Any]], None], on_row=None) -> None:
    """Run the configurations, in this process or in at most `jobs` worker processes
    (one per configuration at most), and give `keep` each one's row: in grid order,
    and, when an interrupt (KeyboardInterrupt, Terminated) stops them, also those of
    the configurations a worker had finished (after a gap), before the interrupt goes
    on. `keep` may be given a row twice. `on_row(configuration, row)` is told of each
    as it finishes, in the order they finish."""
    if min(jobs, len(configurations)) <= 1:
        def finished(config: Configuration, row: dict[str, Any]) -> None:
            keep(row)
            if on_row is not None:
                on_row(config, row)
        run_grid(trace, configurations, on_row=finished)
        return

    def describe(position: int) -> str:
        config = configurations[position]
        return f"running configuration {config.index} ({config.label()})"

    def row_of(result: tuple[int, dict[str, Any], bool]) -> dict[str, Any]:
        return configuration_row(configurations[result[0]], result[1], result[2])

    with Workers(_configuration_task, (trace, configurations),
                 list(range(len(configurations))), jobs, describe) as workers:
        if on_row is not None:
            workers.on_result = lambda position, result: on_row(
                configurations[position], row_of(result))
        current = None  # handed out by `results`, perhaps not kept yet
        try:
            for _, current in workers.results():
                keep(row_of(current))
        except (KeyboardInterrupt, interrupts.Terminated):
            for result in ([current] if current else []) + workers.received():
                keep(row_of(result))
            raise


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

