"""`convert`: a public trace format (Azure, Mooncake, BurstGPT, ...) into a trace,
times in seconds, or with `--from blis-run` a real vLLM run (its trace, and with
`--measured` what the server measured), written all or nothing.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import TextIO

from ..gpu.catalogue import is_path
from ..io.blis_measured import measured_records
from ..io.blis_run import convert_run, model_name, read_run
from ..io.importers import FOREIGN_LINES, RUN_FORMATS, convert
from ..io.inference_perf import read_client_config
from ..io.inputs import read_input
from ..io.output_paths import check_output_paths
from ..io.outputs import Output, jsonl, write_whole
from ..io.problems import MAX_PROBLEMS
from ..io.terminal_text import printable
from ..io.specs import gpu_spec, model_spec
from ..records import interrupts
from ..records.errors import TraceError, UsageError

__all__ = ["cmd_convert"]


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
