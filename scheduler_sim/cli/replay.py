"""`replay`, `validate` and `check`: the commands that read a trace and replay it
(or only validate it). `replay` prints the side-by-side table (or JSON) and
writes the event stream, the per-request CSV, the Perfetto file and the HTML
report, all or none of them; `check` verifies the trace's `expect` records
(and writes their JUnit XML).
"""
from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..gpu.run_cost import clock_for
from ..io.event_file import EventFile
from ..io.output_paths import check_output_paths
from ..io.outputs import Output, write_whole
from ..io.progress import Progress, wanted
from ..io.report import format_json, format_table
from ..io.request_rows import csv_header, format_requests
from ..io.terminal_text import printable
from ..io.specs import spec_inputs
from ..io.trace import read_trace
from ..records import interrupts
from ..records.errors import UsageError
from .entry import PROG
from .flags import check_outputs_and_jobs, load_plugins, plugin_sources, resolve_options
from .runs import Finished, Plan, Sinks, run_all

__all__ = ["cmd_replay", "cmd_validate", "cmd_check"]


def cmd_replay(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Replay the trace under each policy (`-j N`: in N processes); print the
    side-by-side table. Interrupted (SIGINT) or terminated (SIGTERM), it prints
    the policies that finished and lets the interrupt go on (exit 130 or 143),
    with no output file left behind."""
    written = (("--events", args.events), ("--requests-csv", args.requests_csv),
               ("--report", args.report), ("--perfetto", args.perfetto))
    to_stdout = check_outputs_and_jobs(written, args.jobs)
    if args.perfetto_sample < 1:
        raise UsageError(f"--perfetto-sample must be an integer >= 1, got {args.perfetto_sample}")
    if args.perfetto_sample != 1 and not args.perfetto:
        raise UsageError("--perfetto-sample samples the tracks of --perfetto: give --perfetto")
    check_output_paths(written, [("the trace", args.trace)] + plugin_sources(args.policy))
    trace = read_trace(args.trace)
    options, pool = resolve_options(trace, args, err)
    # The trace's config may name plugin policies of its own.
    check_output_paths(written, [("the trace", args.trace)] + spec_inputs(options)
                       + plugin_sources(options.policy, options.plugin_dir))
    load_plugins(options.policy, options.plugin_dir)  # one that fails stops us now
    clock = clock_for(options)
    policies = list(options.policy)
    outputs = Sinks()
    perfetto = None
    finished: list[Finished] = []
    progress = Progress(err, wanted(err, args.quiet), clock, len(trace.workload),
                        len(policies))
    interrupted: BaseException | None = None
    report: Output | None = None
    opened: list = []  # every output file, committed together at the end
    try:
        if args.events:
            outputs.events = EventFile(args.events, out, len(policies) > 1, clock)
        if args.requests_csv:
            outputs.csv = Output(args.requests_csv, out, "cannot write requests", ".requests-")
            outputs.csv.write(csv_header(options.fleet))
        if args.perfetto:
            from ..io.perfetto import PerfettoFile, TrackNumbers  # (only when asked for)
            perfetto = PerfettoFile(args.perfetto, out, trace.name, clock,
                                    TrackNumbers(trace.workload, args.perfetto_sample))
        if args.report:
            report = Output(args.report, out, "cannot write the report", ".report-")
        opened = [o for o in (outputs.events, outputs.csv, perfetto, report) if o]
        plan = Plan(trace, options, clock, bool(args.requests), len(policies) > 1,
                    bool(args.events), bool(args.requests_csv), bool(args.perfetto),
                    perfetto.tids if perfetto else None, bool(args.report))
        run_all(plan, policies, args.jobs, outputs, perfetto, progress, finished.append)
        runs = _replay_runs(finished, args)
        if report is not None:
            from ..io.html_report import html_report  # (only when asked for)
            report.write(html_report(trace.name, options, runs,
                                     [f.series for f in finished], clock, pool))
        # Every output appears, or none: an interrupt that arrives while they are put
        # in place waits until they all are.
        with interrupts.held():
            for output in opened:
                output.commit()
    except BaseException as exc:
        for output in opened:
            output.abort()
        if not interrupts.is_interrupt(exc):
            raise
        interrupted = exc  # Ctrl-C, or SIGTERM (what a batch system sends at its limit)
        runs = _replay_runs(finished, args)
    finally:
        progress.close()
    stalled = [f.policy for f in finished if f.stalled]
    if interrupted is not None and not runs:
        raise interrupted
    text = (format_json if args.json else format_table)(trace.name, options, runs, clock, pool)
    if args.requests and not args.json:
        closed = options.max_concurrency is not None
        text += "".join("\n" + format_requests(f.policy, f.records, clock, closed)
                        for f in finished)
    (err if to_stdout else out).write(text)
    if interrupted is not None:
        raise interrupted
    if stalled:
        err.write(f"{PROG}: the run stalled under {printable(', '.join(stalled))}: stuck "
                  "requests ended as finished_error (see the 'stalled' events)\n")
        return 1
    return 0


def _replay_runs(finished: list[Finished], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The finished policies' summary rows in the policies' order (with their
    per-request records under --requests --json)."""
    finished.sort(key=lambda f: f.position)
    runs = []
    for f in finished:
        if args.requests and args.json:
            f.run["per_request"] = f.records
        runs.append(f.run)
    return runs


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Check the trace and print a one-line summary."""
    trace = read_trace(args.trace, keep=False)  # (nothing replays it: no copy kept)
    out.write(printable(trace.describe()) + "\n")
    return 0


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Replay the trace and verify its `expect` records; exit 1 on any failure."""
    written = [("--junit", args.junit)]
    check_output_paths(written, [("the trace", args.trace)] + plugin_sources(args.policy))
    trace = read_trace(args.trace)
    options, _ = resolve_options(trace, args, err)
    check_output_paths(written, [("the trace", args.trace)] + spec_inputs(options)
                       + plugin_sources(options.policy, options.plugin_dir))
    load_plugins(options.policy, options.plugin_dir)
    name = printable(trace.name)
    expects = list(trace.expects)
    from ..io.expectations import check_trace  # (`check` only: replay never loads it)
    results = check_trace(trace, options)
    if args.junit:
        from ..io.junit import junit_xml
        write_whole(args.junit, junit_xml(trace.name, results), out)
        if args.junit == "-":
            out = err  # the XML owns standard output
    runs = printable(", ".join(options.policy))
    if not results:
        why = ("it has no expect records" if not expects else
               f"none of its {len(expects)} expect record(s) applies to the policies "
               f"replayed ({runs})")
        out.write(f"{name}: FAILED: nothing was checked: {why}\n")
        return 1
    failed = [r for r in results if not r.ok]
    for result in failed:
        for message in result.messages(trace.name):
            out.write(printable(message) + "\n")
    skipped = sum(1 for e in expects if e.policy is not None and e.policy not in options.policy)
    note = f"; {skipped} for policies not replayed" if skipped else ""
    if failed:
        fields = sum(len(r.failures) for r in failed)
        out.write(f"{name}: FAILED: {len(failed)} of {len(results)} expectation(s) "
                  f"failed, {fields} field(s) differ ({runs}){note}\n")
        return 1
    out.write(f"{name}: ok: {len(results)} expectation(s) hold ({runs}){note}\n")
    return 0
