"""The commands: each a small function from parsed arguments to an exit status.

`replay`, `validate`, `check`, `convert`, `generate`, `cost`, `sweep` and
`sweep merge` (`sweep-merge`). They raise
`TraceError`, `UsageError` (an `OutputError` when an output cannot be
written), `PipeClosed` or `InvariantError`; `cli.main` turns those into
messages and exit codes. Files are written through `io.outputs`, and every
line that can carry text from a trace or a file name is printed through
`report.printable`. Each command hands its outputs and its inputs, as
(flag, path) pairs, to `outputs.check_output_paths` before it reads anything.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from typing import Any, Callable, Iterable, TextIO

from ..engine.summary import FLEET_RUN_FIELDS, RUN_FIELDS
from ..gpu.catalogue import is_path
from ..gpu.calibration import is_file_spec, resolve_calibration
from ..gpu.costmodel import (MAX_SEQ, CostModel, PoolSizing, clock_for, fit_pool,
                             swap_vs_recompute)
from ..io.blis_run import convert_run, measured_records, model_name, read_run
from ..io.catalogue_table import format_catalogue
from ..io.expectations import check_trace
from ..io.html_report import html_report, sweep_report
from ..io.generator import (MAX_LENGTH, WorkloadSpec, check_workload, limit, parse_length,
                            spec_problems, weights_problem, workload_records)
from ..io.importers import FOREIGN_LINES, RUN_FORMATS, convert
from ..io.inference_perf import read_client_config
from ..io.junit import junit_xml
from ..io.outputs import (EventFile, Output, check_output_paths, jsonl, read_input,
                          read_limited, write_whole)
from ..io.perfetto import PerfettoFile, TrackNumbers
from ..io.progress import Progress, wanted
from ..io.specs import gpu_spec, model_spec, spec_inputs
from ..io.report import (csv_header, format_json, format_requests, format_table,
                         printable, table_rows)
from ..io.sweep import (Axis, Configuration, build_grid, check_axis, configuration_row,
                        file_digest, parse_shard, run_configuration, run_grid, shard_of)
from ..io.sweep import format_csv as sweep_csv
from ..io.sweep import format_jsonl as sweep_jsonl
from ..io.sweep import format_table as sweep_table
from ..io.sweep_merge import merge_shards, read_shard
from ..io.json_lines import json_value
from ..io.problems import MAX_PROBLEMS
from ..io.trace import Trace, parse_trace, read_trace
from ..io.trace_config import ALLOW_FLAG, allow_trace_plugins
from ..io.trace_config import resolve_options as resolve_trace_options
from ..policies import PluginError, is_plugin, plugin_file, policy_class
from ..records import interrupts
from ..records.errors import TraceError, UsageError
from ..records.options import OPTIONS, Options, show
from .runs import Finished, Plan, Sinks, run_all
from .workers import Workers
from .calibrate import cmd_calibrate

__all__ = ["COMMANDS", "resolve_options"]

PROG = "scheduler-sim"


# Options for which `none` is a value, not null: `--calibration none` is the uncalibrated
# physics, `--calibration null` the default (the GPU's shipped calibration).
_NONE_IS_A_VALUE = frozenset({"calibration"})


def _convert(spec_kind: str, text: str, name: str = "") -> Any:
    """Turn a flag's text into the JSON-like value `check_value` expects (`null`, and
    `none` but for the options in `_NONE_IS_A_VALUE`, are None)."""
    lowered = text.lower()
    if lowered == "none" and name in _NONE_IS_A_VALUE:
        return "none"
    if lowered in ("null", "none"):
        return None
    if spec_kind == "int":
        try:
            return int(text)
        except ValueError:
            return text
    if spec_kind in ("float", "duration"):
        try:
            return int(text) if spec_kind == "duration" else float(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return text
    return text


def _flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The option flags given, as the JSON-like values `check_value` expects."""
    raw: dict[str, Any] = {}
    for spec in OPTIONS.values():
        value = getattr(args, spec.name, None)
        if value is None:
            continue
        if spec.kind in ("int", "float", "str", "duration"):
            value = _convert(spec.kind, value, spec.name)
        raw[spec.name] = value
    return raw


def resolve_options(trace: Trace, args: argparse.Namespace,
                    err: TextIO | None = None) -> tuple[Options, PoolSizing | None]:
    """Defaults, then the trace's config, then the flags; then the KV pool from the GPU
    when a cost model runs (`costmodel.fit_pool`). Bad flags raise UsageError.

    A flag that moves the trace's own times (`--tick-seconds` over a tick
    trace's config, under a cost model) is worth a warning on `err`. A plugin
    policy that only the trace's config names is refused unless the command
    line allows it (`--allow-trace-plugins`); `load_plugins` then loads them.
    """
    options, flags = resolve_trace_options(trace.config, _flag_values(args), trace.directory)
    options = allow_trace_plugins(trace, options, getattr(args, "allow_trace_plugins", False))
    ticks = trace.config.get("tick_seconds")
    if (err is not None and options.has_cost_model and options.time_unit == "tick"
            and "tick_seconds" in flags and ticks is not None and flags["tick_seconds"] != ticks):
        err.write(f"{PROG}: warning: --tick-seconds {flags['tick_seconds']:g} overrides the "
                  f"trace's tick of {ticks:g} s: every arrival and wait in the trace moves "
                  "with it\n")
    return fit_pool(options)


def load_plugins(policies, base: str | None) -> None:
    """Load every plugin among `policies` now (a relative file from `base`): a name
    that leads nowhere is a UsageError; a module that raises, the plugin's
    PolicyError."""
    for name in policies:
        if is_plugin(name):
            try:
                policy_class(name, base)
            except PluginError as exc:
                raise UsageError(str(exc)) from None


def _plugin_sources(policies: Iterable[Any] | None,
                    base: str | None = None) -> list[tuple[str, str]]:
    """The source files of the plugin policies spelled FILE.py:CLASS (a relative one
    taken from `base`), as inputs for `check_output_paths` (a plugin's source is read
    like a trace is)."""
    sources = []
    for spec in policies or ():
        path = plugin_file(str(spec), base) if is_plugin(str(spec)) else None
        if path is not None:
            sources.append((f"the source of policy {spec}", path))
    return sources


def cmd_replay(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Replay the trace under each policy (`-j N`: in N processes); print the
    side-by-side table. Interrupted, it prints the policies that finished and
    lets the interrupt go on (exit 130), with no output file left behind."""
    to_stdout = [flag for flag, target in (("--events", args.events),
                                            ("--requests-csv", args.requests_csv),
                                            ("--perfetto", args.perfetto),
                                            ("--report", args.report)) if target == "-"]
    if len(to_stdout) > 1:
        raise UsageError(f"{to_stdout[0]} - and {to_stdout[1]} - cannot both write to standard "
                         "output; send one of them to a file")
    if args.jobs < 1:
        raise UsageError(f"-j must be at least 1, got {args.jobs}")
    written = (("--events", args.events), ("--requests-csv", args.requests_csv),
               ("--report", args.report), ("--perfetto", args.perfetto))
    check_output_paths(written, [("the trace", args.trace)] + _plugin_sources(args.policy))
    trace = read_trace(args.trace)
    options, pool = resolve_options(trace, args, err)
    # The trace's config may name plugin policies of its own.
    check_output_paths(written, [("the trace", args.trace)] + spec_inputs(options)
                       + _plugin_sources(options.policy, options.plugin_dir))
    load_plugins(options.policy, options.plugin_dir)  # one that fails stops us now
    clock = clock_for(options)
    policies = list(options.policy)
    outputs = Sinks()
    perfetto = None
    finished: list[Finished] = []
    progress = Progress(err, wanted(err, args.quiet), clock, len(trace.workload),
                        len(policies))
    interrupted = False
    report: Output | None = None
    opened: list = []  # every output file, committed together at the end
    try:
        if args.events:
            outputs.events = EventFile(args.events, out, len(policies) > 1, clock)
        if args.requests_csv:
            outputs.csv = Output(args.requests_csv, out, "cannot write requests", ".requests-")
            outputs.csv.write(csv_header(options.fleet))
        if args.perfetto:
            perfetto = PerfettoFile(args.perfetto, out, trace.name, clock,
                                    TrackNumbers(trace.workload))
        if args.report:
            report = Output(args.report, out, "cannot write the report", ".report-")
        opened = [o for o in (outputs.events, outputs.csv, perfetto, report) if o]
        plan = Plan(trace, options, clock, bool(args.requests), len(policies) > 1,
                    bool(args.events), bool(args.requests_csv), bool(args.perfetto),
                    perfetto.tids if perfetto else None, bool(args.report))
        run_all(plan, policies, args.jobs, outputs, perfetto, progress, finished.append)
        runs = _replay_runs(finished, args)
        if report is not None:
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
        if not isinstance(exc, KeyboardInterrupt):
            raise
        interrupted = True
        runs = _replay_runs(finished, args)
    finally:
        progress.close()
    stalled = [f.policy for f in finished if f.stalled]
    if interrupted and not runs:
        raise KeyboardInterrupt
    text = (format_json if args.json else format_table)(trace.name, options, runs, clock, pool)
    if args.requests and not args.json:
        closed = options.max_concurrency is not None
        text += "".join("\n" + format_requests(f.policy, f.records, clock, closed)
                        for f in finished)
    (err if to_stdout else out).write(text)
    if interrupted:
        raise KeyboardInterrupt
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
    trace = read_trace(args.trace)
    out.write(printable(trace.describe()) + "\n")
    return 0


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Replay the trace and verify its `expect` records; exit 1 on any failure."""
    written = [("--junit", args.junit)]
    check_output_paths(written, [("the trace", args.trace)] + _plugin_sources(args.policy))
    trace = read_trace(args.trace)
    options, _ = resolve_options(trace, args, err)
    check_output_paths(written, [("the trace", args.trace)] + spec_inputs(options)
                       + _plugin_sources(options.policy, options.plugin_dir))
    load_plugins(options.policy, options.plugin_dir)
    name = printable(trace.name)
    expects = list(trace.expects)
    results = check_trace(trace, options)
    if args.junit:
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


def _article(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


_RUN_FLAGS = (("client_config", "--client-config"), ("model", "--model"), ("gpu", "--gpu"),
              ("measured", "--measured"), ("ground_truth", "--ground-truth"))


def _ground_truth_path(run: str) -> str:
    """`RUN_ground_truth.json[.gz]` beside `RUN.json[.gz]`, as inference-sim/training
    names them."""
    for suffix in (".json.gz", ".json"):
        if run.endswith(suffix):
            return run[:-len(suffix)] + "_ground_truth" + suffix
    return run + "_ground_truth.json"


def _from_output(path: str, output: str | None) -> str:
    """`path` (a file named on the command line) as seen from the folder of `output`,
    where a trace's config takes its relative paths from; absolute when written to
    standard output."""
    if output is None or output == "-":
        return os.path.abspath(path)
    return os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(output)))


def _convert_run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`convert --from blis-run`: a real vLLM run, all or nothing (blis_run.py)."""
    if not args.client_config:
        raise UsageError("--from blis-run needs --client-config FILE: the run's resolved "
                         "inference-perf config (results/config.yaml of its folder)")
    truth = None
    if args.measured:
        if args.file == "-" and not args.ground_truth:
            raise UsageError("--measured of a run read from standard input needs "
                             "--ground-truth FILE")
        truth = args.ground_truth or _ground_truth_path(args.file)
        if not args.ground_truth and not os.path.exists(truth):
            raise UsageError(f"--measured needs the run's ground truth: {truth} was not "
                             "found; name it with --ground-truth FILE")
    elif args.ground_truth:
        raise UsageError("--ground-truth is read only for --measured OUT")
    check_output_paths([("-o", args.out), ("--measured", args.measured)],
                       [("the input", args.file), ("--client-config", args.client_config),
                        ("--ground-truth", truth)]
                       + [(flag, value) for flag, value in (("--model", args.model),
                                                             ("--gpu", args.gpu))
                          if value is not None and is_path(value)])
    name = "<stdin>" if args.file == "-" else args.file
    run = read_run(read_input(args.file), name)
    client = read_client_config(read_input(args.client_config), args.client_config)
    model = model_name(run, name, args.model)
    gpu = args.gpu or "h100-sxm"
    specs = model_spec(model), gpu_spec(gpu)
    # A spec file is written as the trace's folder will find it.
    written = [_from_output(value, args.out) if is_path(value) else value
               for value in (model, gpu)]
    result = convert_run(run, client, name, *written, specs=specs)
    measured = measured_records(read_input(truth), truth, run) if truth else None
    outputs = [Output("-" if args.out is None else args.out, out)]
    if measured is not None:
        outputs.append(Output(args.measured, out, "cannot write the measured file",
                              ".measured-"))
    try:
        for record in result.records:
            outputs[0].write(json.dumps(record, separators=(",", ":")) + "\n")
        for record in measured or ():
            outputs[1].write(json.dumps(record, separators=(",", ":")) + "\n")
        with interrupts.held():  # both files appear, or neither
            for output in outputs:
                output.commit()
    except BaseException:
        for output in outputs:
            output.abort()
        raise
    note = f"{name}: {result.note()}"
    if measured is not None:
        note += (f"; measured {len(measured):,} completed requests to "
                 f"{args.measured}")
    err.write(printable(note) + "\n")
    return 0


def cmd_convert(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Import a public trace format into trace v1 (times in seconds)."""
    if args.fmt in RUN_FORMATS:
        return _convert_run(args, out, err)
    for attr, flag in _RUN_FLAGS:
        if getattr(args, attr) is not None:
            raise UsageError(f"{flag} is read only with --from blis-run")
    check_output_paths([("-o", args.out)], [("the input", args.file)])
    name = "<stdin>" if args.file == "-" else args.file
    result = convert(args.fmt, read_input(args.file), name)
    requests = len(result.records) - 1
    if result.stopped_at is not None or (result.problems and (args.strict or not requests)):
        # --strict, or nothing usable at all (a wrong header or format, say): fail whole.
        shown = result.problems[:MAX_PROBLEMS]
        if len(result.problems) > MAX_PROBLEMS:
            shown.append(f"{name}: ... and {len(result.problems) - MAX_PROBLEMS:,} more bad rows")
        if result.stopped_at is not None:
            why = (f"stopped at line {result.stopped_at:,}: none of the first {FOREIGN_LINES} "
                   f"lines is {_article(args.fmt)} row")
        elif requests:
            why = f"--strict: {len(result.problems):,} bad rows"
        else:
            why = f"not one {args.fmt} row converted"
        if result.looks_like:
            why += (f"; it looks like {_article(result.looks_like)} file "
                    f"(--from {result.looks_like})")
        raise TraceError(shown + [f"{name}: {why}; no file written"])
    write_whole(args.out, jsonl(result.records), out)
    notes = [f"{name}: converted {requests:,} requests from {args.fmt}"]
    if result.failed_requests:
        notes.append(f"skipped {result.failed_requests:,} failed requests (Response tokens == 0)")
    if result.problems:
        notes.append(f"skipped {len(result.problems):,} bad rows (--strict makes them fatal)")
    err.write(printable("; ".join(notes)) + "\n")
    for problem in result.problems[:20]:
        err.write(printable(problem) + "\n")
    if len(result.problems) > 20:
        err.write(f"... and {len(result.problems) - 20} more\n")
    return 0


def _length(text: str) -> Any:
    kind, _, rest = text.partition(":")
    if kind == "empirical":
        return ("empirical", rest)
    try:
        return parse_length(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _empirical(spec: Any, field: str) -> Any:
    """A length spec, with `empirical:TRACE` filled from the trace's requests (each at
    most MAX_LENGTH, or the lines that are not are listed)."""
    if not isinstance(spec, tuple):
        return spec
    if not spec[1]:
        raise UsageError("empirical lengths need a trace: empirical:TRACE, got 'empirical:'")
    trace = read_trace(spec[1])
    requests = trace.workload.requests
    if not requests:
        raise UsageError(f"{spec[1]}: has no requests to draw {field} from")
    long = [r for r in sorted(requests, key=lambda r: r.index)
            if getattr(r, field) > MAX_LENGTH]
    if long:
        problems = [f"{trace.name}:{r.index}: request {r.id!r}: {field} must be at most "
                    f"{MAX_LENGTH:,} to be drawn from, got {show(getattr(r, field))}"
                    for r in long[:MAX_PROBLEMS]]
        if len(long) > MAX_PROBLEMS:
            problems.append(f"{trace.name}: ... and {len(long) - MAX_PROBLEMS} more errors")
        raise TraceError(problems)
    return parse_length("empirical:" + spec[1], tuple(getattr(r, field) for r in requests))


def _priorities(text: str | None) -> tuple[tuple[int, float], ...]:
    """`0:3,1:1` -> ((0, 3.0), (1, 1.0)); a missing weight is 1."""
    if not text:
        return ()
    priorities = []
    try:
        for part in text.split(","):
            level, _, weight = part.partition(":")
            priorities.append((int(level), float(weight or 1)))
    except ValueError:
        raise UsageError(f"--priorities must look like 0:3,1:1, got {show(text)}") from None
    problem = weights_problem(tuple(priorities), text)
    if problem:
        raise UsageError(problem)
    return tuple(priorities)


def cmd_generate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Write a seeded synthetic workload as a trace."""
    check_output_paths([("-o", args.out)],
                       [(f"the trace of {flag}", text.partition(":")[2])
                        for flag, text in (("--prompt-len", args.prompt),
                                           ("--output-len", args.output))
                        if text.startswith("empirical:")])
    spec = WorkloadSpec(
        seed=args.seed, requests=args.requests, rate=args.rate, arrival=args.arrival,
        cv=args.cv, prefix_groups=args.prefix_groups, prefix_tokens=args.prefix_tokens,
        priorities=_priorities(args.priorities), cancel_rate=args.cancel_rate,
        cancel_after=args.cancel_after)
    problems = spec_problems(spec)
    if problems:
        raise UsageError("; ".join(problems))
    spec = dataclasses.replace(
        spec, prompt=_empirical(_length(args.prompt), "prompt_tokens"),
        output=_empirical(_length(args.output), "output_tokens"))
    # Streamed: a file appears only whole (renamed into place when complete); what
    # is written in place (standard output, a FIFO) is drawn once first, so that a
    # limit passed part way stops it before the first line goes out.
    output = Output("-" if args.out is None else args.out, out)
    try:
        if output.tmp is None:
            check_workload(spec)
        batch: list[dict[str, Any]] = []
        for record in workload_records(spec):
            batch.append(record)
            if len(batch) == 4096:
                output.write(jsonl(batch))
                batch.clear()
        output.write(jsonl(batch))
        output.commit()
    except ValueError as exc:
        output.abort()
        raise UsageError(str(exc)) from None
    except BaseException:
        output.abort()
        raise
    return 0


_MAX_SHAPE = 10 ** 7  # tokens, rows or context of one part of a priced dispatch


def _shape_part(flag: str, text: str, context_needed: bool) -> tuple[int, int]:
    """`N@C` (or `N` when the context may be left out) as (N, C)."""
    head, sep, tail = text.partition("@")
    if context_needed and not sep:
        raise UsageError(f"{flag} must look like ROWS@CONTEXT, got {show(text)}")
    try:
        count, context = int(head), int(tail) if sep else 0
    except ValueError:
        raise UsageError(f"{flag} must look like {'ROWS@CONTEXT' if context_needed else 'TOKENS[@CONTEXT]'}"
                         f" with whole numbers, got {show(text)}") from None
    if not 1 <= count <= _MAX_SHAPE or not 0 <= context <= _MAX_SHAPE:
        raise UsageError(f"{flag}: {'rows' if context_needed else 'tokens'} must be from 1 to "
                         f"{_MAX_SHAPE:,} and the context from 0 to {_MAX_SHAPE:,}, got "
                         f"{show(text)}")
    return count, context


# How `cost --prefill/--decode` explains each term (see CostModel's docstring).
_TERM_NOTES = {
    "linear": "attention projections and MLP: weights read, blended with FLOPs",
    "lm_head": "vocabulary projection of the sampled rows",
    "attention_prefill": "causal attention FLOPs of the chunks",
    "attention_decode": "KV every decode row reads",
    "kv_write": "KV of the new tokens",
    "elementwise": "norms, activation, rotary, residual adds",
    "floors": "per-layer kernel floors",
    "allreduce": "tensor-parallel all-reduces, 2 per layer",
    "step": "CPU per dispatch and per sampled row",
}


def _cost_dispatch(args: argparse.Namespace, out: TextIO) -> int:
    """`cost --prefill ... --decode ...`: one dispatch's seconds, term by term."""
    from ..io.specs import read_calibration_file
    chunks = [_shape_part("--prefill", text, False) for text in args.prefill]
    decodes = [_shape_part("--decode", text, True) for text in args.decode]
    if not 1 <= args.tp <= 8:
        raise UsageError(f"--tp must be from 1 to 8, got {show(args.tp)}")
    model, gpu = model_spec(args.model), gpu_spec(args.gpu)
    calibration = (read_calibration_file(args.calibration) if is_file_spec(args.calibration)
                   else resolve_calibration(args.calibration, gpu.name))
    cost = CostModel(model, gpu, calibration.coefficients, args.tp)
    rows = sum(n for n, _ in decodes)
    contexts = sum(n * c for n, c in decodes)
    terms = cost.breakdown(chunks, rows, contexts)
    total = cost.dispatch_seconds(chunks, rows, contexts)
    tp = f", tp {args.tp}" if args.tp > 1 else ""
    out.write(f"one dispatch: {model.name} on {gpu.name}{tp}, calibration "
              f"{calibration.name}\n")
    parts = [f"prefill {n:,} tokens after {c:,}" for n, c in chunks]
    parts += [f"decode {n:,} rows at context {c:,}" for n, c in decodes]
    tokens = rows + sum(n for n, _ in chunks)
    out.write(f"  {'; '.join(parts)} ({tokens:,} tokens)\n\n")
    table = [("term", "ms", "share", "")]
    for name, seconds in terms.items():
        table.append((name, f"{seconds * 1e3:.4f}",
                      f"{seconds / total:.1%}" if total else "-", _TERM_NOTES[name]))
    table.append(("total", f"{total * 1e3:.4f}", "100.0%", ""))
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    for i, (a, b, c, d) in enumerate(table):
        line = f"{a.ljust(widths[0])}  {b.rjust(widths[1])}  {c.rjust(widths[2])}  {d}".rstrip()
        out.write(line + "\n")
        if i == 0 or i == len(table) - 2:
            out.write("-" * (sum(widths) + 4) + "\n")
    return 0


def cmd_cost(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Price one dispatch term by term (--prefill, --decode), or the swap-versus-recompute
    analysis of a preempted request (--seq)."""
    shape = bool(args.prefill or args.decode)
    if shape == (args.seq is not None):
        raise UsageError("cost needs --prefill/--decode (one dispatch) or --seq (swap against "
                         "recompute), not both")
    if shape:
        return _cost_dispatch(args, out)
    if not 1 <= args.seq <= MAX_SEQ:
        raise UsageError(f"--seq must be an integer from 1 to {MAX_SEQ:,}, got {show(args.seq)}")
    mfu = OPTIONS["mfu"]
    if not mfu.minimum <= args.mfu <= mfu.maximum:  # False for nan
        raise UsageError(f"--mfu must be a number from {limit(mfu.minimum)} to "
                         f"{limit(mfu.maximum)}, got {show(args.mfu)}")
    model, gpu = model_spec(args.model), gpu_spec(args.gpu)
    r = swap_vs_recompute(model, gpu, args.seq, args.mfu)
    width = (f"({model.mla.kv_lora_rank} + {model.mla.qk_rope_head_dim}) latent"
             if model.mla is not None and model.kv_width else
             f"{model.kv_token_width}" if model.kv_width else
             f"2 x {model.kv_heads} KV heads x {model.head_dim}")
    rows = [
        ("KV bytes per token", f"{r['kv_bytes_per_token']:,} B",
         f"{model.layers} layers x {width} x {model.kv_dtype_bytes:g} B"),
        ("KV of the request", f"{r['kv_bytes'] / 2**30:,.3f} GiB", f"{args.seq:,} tokens"),
        ("prefill FLOPs", f"{r['prefill_flops']:.4g}",
         f"2 N S + A S (S + 1) / 2, N = {model.active_linear_params:.3g}, "
         f"A = {model.attention_flops_per_pair_total:.3g}"),
        ("cold recompute", f"{r['recompute_seconds']:.4f} s",
         f"at {gpu.peak_flops * args.mfu / 1e12:,.0f} TFLOP/s"),
        ("swap, one way", f"{r['swap_one_way_seconds']:.4f} s",
         f"host link {gpu.host_link / 1e9:,.0f} GB/s"),
        ("swap, round trip", f"{r['swap_round_trip_seconds']:.4f} s", "out and back"),
        ("swap is cheaper by", f"{r['swap_advantage']:.1f}x", "cold recompute / round trip"),
        ("crossover prefill rate", f"{r['crossover_tokens_per_second'] / 1e3:,.0f}k tok/s",
         "recompute would tie with swap at this rate"),
        ("recompute wins above", f"{r['survival_threshold'] * 100:.1f}%",
         "of the prefix still in the prefix cache"),
    ]
    out.write(f"swap against recompute: {model.name} on {gpu.name}, S = {args.seq:,} tokens\n\n")
    w0 = max(len(a) for a, _, _ in rows)
    w1 = max(len(b) for _, b, _ in rows)
    for a, b, c in rows:
        out.write(f"{a.ljust(w0)}  {b.rjust(w1)}  {c}\n")
    return 0


def cmd_models(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """List the model and GPU catalogues."""
    out.write(format_catalogue())
    return 0


# --- sweep ------------------------------------------------------------------------

def _grid_value(spec: Any, text: str) -> Any:
    """One value of `--grid NAME=...` as its flag would give it (booleans as true/false)."""
    if spec.kind == "bool":
        return {"true": True, "false": False}.get(text.lower(), text)
    if spec.kind in ("int", "float", "str", "duration"):
        return _convert(spec.kind, text, spec.name)
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
    to_stdout = [flag for flag, target in (("--csv", args.csv), ("--jsonl", args.jsonl),
                                            ("--report", args.report)) if target == "-"]
    if len(to_stdout) > 1:
        raise UsageError(f"{to_stdout[0]} - and {to_stdout[1]} - cannot both write to standard "
                         "output; send one of them to a file")
    if args.jobs < 1:
        raise UsageError(f"-j must be an integer >= 1, got {args.jobs}")
    written = (("--csv", args.csv), ("--jsonl", args.jsonl), ("--report", args.report))
    read = [("the trace", args.trace), ("the grid file", args.grid_file)]
    check_output_paths(written, read + _plugin_sources(args.policy))
    shard = parse_shard(args.shard) if args.shard is not None else None
    from_file = _grid_file(args.grid_file) if args.grid_file else []
    axes = from_file + [_grid_flag(text) for text in args.grid or ()]
    fixed = _flag_values(args)
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
    check_output_paths(written, read + _plugin_sources(swept, plugin_dir))
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
        rows = _run_configurations(trace, configurations, args.jobs)
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


def _run_configurations(trace: Trace, configurations: list[Configuration],
                        jobs: int) -> list[dict[str, Any]]:
    """The rows of the configurations, in their order: in this process, or in at most
    `jobs` worker processes (one per configuration at most)."""
    if min(jobs, len(configurations)) <= 1:
        return run_grid(trace, configurations)

    def describe(position: int) -> str:
        config = configurations[position]
        return f"running configuration {config.index} ({config.label()})"

    with Workers(_configuration_task, (trace, configurations),
                 list(range(len(configurations))), jobs, describe) as workers:
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
        base = resolve_trace_options(trace.config, dict(fixed), specs=False)[0]
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
    if args.metric not in RUN_FIELDS + FLEET_RUN_FIELDS:
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


COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO, TextIO], int]] = {
    "replay": cmd_replay,
    "validate": cmd_validate,
    "check": cmd_check,
    "convert": cmd_convert,
    "generate": cmd_generate,
    "cost": cmd_cost,
    "models": cmd_models,
    "sweep": cmd_sweep,
    "sweep-merge": cmd_sweep_merge,
    "calibrate": cmd_calibrate,
}
