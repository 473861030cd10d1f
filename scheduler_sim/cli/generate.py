"""`generate`: a seeded synthetic workload written as a trace (its lengths drawn
from distributions or from another trace's requests, `empirical:TRACE`),
streamed to its output and renamed into place only when whole.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any, TextIO

from ..io.generator import (MAX_LENGTH, WorkloadSpec, check_workload, parse_length,
                            spec_problems, weights_problem, workload_records)
from ..io.output_paths import check_output_paths
from ..io.outputs import Output, jsonl
from ..io.problems import MAX_PROBLEMS
from ..io.trace import read_trace
from ..records.errors import TraceError, UsageError
from ..records.option_values import show

__all__ = ["cmd_generate"]


def _length(text: str) -> Any:
    kind, _, rest = text.partition(":")
    if kind == "empirical":
        return ("empirical", rest)
    try:
        return parse_length(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _empirical(spec: Any, field: str, traces: dict[str, Any]) -> Any:
    """A length spec, with `empirical:TRACE` filled from the trace's requests (each at
    most MAX_LENGTH, or the lines that are not are listed). `traces` holds those read
    already, by name: one named by both flags is read once (a second read of a FIFO
    waited for a writer that had gone, and of `-` found nothing)."""
    if not isinstance(spec, tuple):
        return spec
    if not spec[1]:
        raise UsageError("empirical lengths need a trace: empirical:TRACE, got 'empirical:'")
    if spec[1] not in traces:
        traces[spec[1]] = read_trace(spec[1])
    trace = traces[spec[1]]
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
    if args.burstiness is not None and (args.arrival == "poisson" or args.cv is not None):
        raise UsageError("--burstiness draws gamma gaps of its own shape: give it without "
                         f"{'--arrival poisson' if args.arrival == 'poisson' else '--cv'}")
    if args.cv is not None and args.arrival == "poisson":
        raise UsageError("--cv is the coefficient of variation of gamma gaps: give it "
                         "without --arrival poisson")
    # --cv or --burstiness alone draws gamma gaps, as --help says (--cv was ignored).
    gamma = args.arrival == "gamma" or args.burstiness is not None or args.cv is not None
    spec = WorkloadSpec(
        seed=args.seed, requests=args.requests, rate=args.rate,
        arrival="gamma" if gamma else "poisson", cv=1.0 if args.cv is None else args.cv,
        burstiness=args.burstiness, time_unit=args.time_unit,
        prefix_groups=args.prefix_groups, prefix_tokens=args.prefix_tokens,
        priorities=_priorities(args.priorities), cancel_rate=args.cancel_rate,
        cancel_after=args.cancel_after)
    problems = spec_problems(spec)
    if problems:
        raise UsageError("; ".join(problems))
    traces: dict[str, Any] = {}
    spec = dataclasses.replace(
        spec, prompt=_empirical(_length(args.prompt), "prompt_tokens", traces),
        output=_empirical(_length(args.output), "output_tokens", traces))
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
