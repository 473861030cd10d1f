"""The command line: argument parsing, the commands, and the one error handler.

`main(argv)` returns the exit status (SPEC §10): 0 success, 1 a check failed
or a replay stalled, 2 bad input or usage, 3 an internal invariant failed,
130 interrupted. Every option of `options.OPTIONS` is also a flag
(`block_size` -> `--block-size`); flags override the trace's config record.
This is the only module that touches argv, stdout, stderr and files it writes.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any, Callable, TextIO

from . import __version__
from .engine import Engine
from .errors import InvariantError, TraceError, UsageError
from .events import Event
from .expectations import StateProbe, snapshot_ticks, verify
from .options import OPTIONS, Options
from .report import format_json, format_requests, format_table
from .summary import request_record
from .trace import Trace, check_options, read_trace

__all__ = ["main", "build_parser"]

PROG = "scheduler-sim"


# --- options from flags ------------------------------------------------------------

def _add_option_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("simulation options (override the trace's config)")
    for spec in OPTIONS.values():
        default = "null" if spec.default is None else spec.default
        if spec.name == "policy":
            group.add_argument("--policy", action="append", dest="policy", metavar="NAME",
                               help="policy to replay; repeat to compare side by side "
                                    "(default: the trace's config, else continuous)")
        elif spec.kind == "bool":
            group.add_argument(spec.flag, dest=spec.name, action=argparse.BooleanOptionalAction,
                               default=None, help=f"{spec.help} (default: {str(default).lower()})")
        else:
            group.add_argument(spec.flag, dest=spec.name, default=None, metavar="VALUE",
                               help=f"{spec.help} (default: {default})")


def _convert(spec_kind: str, text: str) -> Any:
    """Turn a flag's text into the JSON-like value `check_value` expects."""
    if text.lower() in ("null", "none"):
        return None
    if spec_kind == "int":
        try:
            return int(text)
        except ValueError:
            return text
    if spec_kind == "float":
        try:
            return float(text)
        except ValueError:
            return text
    return text


def resolve_options(trace: Trace, args: argparse.Namespace) -> Options:
    """Defaults, then the trace's config, then the flags; bad flags raise UsageError."""
    raw: dict[str, Any] = {}
    for spec in OPTIONS.values():
        value = getattr(args, spec.name, None)
        if value is None:
            continue
        if spec.kind in ("int", "float", "str"):
            value = _convert(spec.kind, value)
        raw[spec.name] = value
    problems: list[str] = []
    flags = check_options(raw, problems.append)
    if problems:
        raise UsageError("; ".join(problems))
    options = Options.resolve(trace.config, flags)
    if options.problems():
        raise UsageError("; ".join(options.problems()))
    return options


# --- writing files whole ---------------------------------------------------------------

class EventFile:
    """Streams event records to a file that appears only when complete.

    Records go to a temporary file beside the target, renamed over it at
    `commit`; `abort` removes it. `-` streams to standard output instead.
    """

    def __init__(self, target: str, stdout: TextIO, tag_policy: bool) -> None:
        self.target = target
        self.tag_policy = tag_policy
        self._tmp: str | None = None
        if target == "-":
            self.handle = stdout
        elif os.path.isdir(target):
            raise UsageError(f"{target}: cannot write events: it is a directory")
        else:
            directory = os.path.dirname(os.path.abspath(target))
            try:
                fd, self._tmp = tempfile.mkstemp(prefix=".events-", suffix=".tmp", dir=directory)
            except OSError as exc:
                raise UsageError(f"{target}: cannot write events: {exc.strerror or exc}") from None
            self.handle = os.fdopen(fd, "w", encoding="utf-8", newline="\n")

    def listener(self, policy: str) -> Callable[[Event], None]:
        """The `on_event` callback for one policy's run."""
        write = self.handle.write
        tag = policy if self.tag_policy else None

        def on_event(event: Event) -> None:
            write(event.to_json(tag) + "\n")
        return on_event

    def commit(self) -> None:
        """Make the file appear under its name, complete."""
        if self._tmp is None:
            self.handle.flush()
            return
        self.handle.close()
        os.replace(self._tmp, self.target)
        self._tmp = None

    def abort(self) -> None:
        """Leave nothing behind."""
        if self._tmp is not None:
            self.handle.close()
            os.unlink(self._tmp)
            self._tmp = None


# --- commands ---------------------------------------------------------------------------

def cmd_replay(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Replay the trace under each policy; print the side-by-side table."""
    trace = read_trace(args.trace)
    options = resolve_options(trace, args)
    events = EventFile(args.events, out, len(options.policy) > 1) if args.events else None
    runs = []
    per_request = []
    stalled = []
    try:
        for policy in options.policy:
            on_event = events.listener(policy) if events else None
            result = Engine(trace.workload, options, policy, on_event=on_event).run()
            run = {"policy": policy, **result.summary}
            if args.requests:
                records = [request_record(r) for r in
                           sorted(result.requests, key=lambda r: (r.arrival, r.index))]
                per_request.append((policy, records))
                if args.json:
                    run["per_request"] = records
            runs.append(run)
            if result.stalled:
                stalled.append(policy)
        if events:
            events.commit()
    except BaseException:
        if events:
            events.abort()
        raise
    text = (format_json if args.json else format_table)(trace.name, options, runs)
    if per_request and not args.json:
        text += "".join("\n" + format_requests(p, records) for p, records in per_request)
    (err if args.events == "-" else out).write(text)
    if stalled:
        err.write(f"{PROG}: the run stalled under {', '.join(stalled)}: stuck requests ended "
                  "as finished_error (see the 'stalled' events)\n")
        return 1
    return 0


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Check the trace and print a one-line summary."""
    trace = read_trace(args.trace)
    out.write(trace.describe() + "\n")
    return 0


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Replay the trace and verify its `expect` records; exit 1 on any failure."""
    trace = read_trace(args.trace)
    options = resolve_options(trace, args)
    expects = list(trace.expects)
    failures = []
    checked = 0
    for policy in options.policy:
        ticks = snapshot_ticks(expects, policy)
        probe = StateProbe(ticks, options.num_blocks) if ticks else None
        result = Engine(trace.workload, options, policy, on_state=probe).run()
        if probe:
            probe.finish()
        failures.extend(verify(expects, result, probe))
        checked += sum(1 for e in expects if e.policy in (None, policy))
    skipped = sum(1 for e in expects if e.policy is not None and e.policy not in options.policy)
    for failure in failures:
        out.write(failure.message(trace.name) + "\n")
    runs = ", ".join(options.policy)
    note = f"; {skipped} for policies not replayed" if skipped else ""
    if not expects:
        out.write(f"{trace.name}: no expect records to check\n")
        return 0
    if failures:
        out.write(f"{trace.name}: FAILED: {len(failures)} field(s) differ in {checked} "
                  f"expectation(s) checked ({runs}){note}\n")
        return 1
    out.write(f"{trace.name}: ok: {checked} expectation(s) hold ({runs}){note}\n")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO, TextIO], int]] = {
    "replay": cmd_replay,
    "validate": cmd_validate,
    "check": cmd_check,
}


def _parser_class(out: TextIO, err: TextIO) -> type[argparse.ArgumentParser]:
    """An ArgumentParser whose help goes to `out` and whose errors go to `err`."""

    class Parser(argparse.ArgumentParser):
        def _print_message(self, message: str, file: Any = None) -> None:
            if message:
                (err if file is None or file is sys.stderr else out).write(message)

    return Parser


def build_parser(out: TextIO | None = None, err: TextIO | None = None) -> argparse.ArgumentParser:
    """The argument parser of every command (printing to `out` and `err`)."""
    parser = _parser_class(out or sys.stdout, err or sys.stderr)(
        prog=PROG,
        description="Replay a JSONL trace of LLM-serving requests through a simulated "
                    "scheduler and report what happened and why.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("replay", help="replay a trace under one or more policies",
                       description="Replay TRACE under each policy and print a side-by-side "
                                   "summary table.")
    p.add_argument("trace", metavar="TRACE", help="trace file (JSONL), or - for stdin")
    p.add_argument("--events", metavar="FILE", help="write event records (JSONL) to FILE, "
                   "or - for stdout (the table then goes to stderr)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--requests", action="store_true",
                   help="also print one line per request (under --json: a per_request list)")
    _add_option_flags(p)

    p = sub.add_parser("validate", help="check a trace and summarise it",
                       description="Validate TRACE (rule T1) and print a one-line summary.")
    p.add_argument("trace", metavar="TRACE", help="trace file (JSONL), or - for stdin")

    p = sub.add_parser("check", help="replay a trace and verify its expect records",
                       description="Replay TRACE and verify its expect records; exit 1 "
                                   "if any does not hold.")
    p.add_argument("trace", metavar="TRACE", help="trace file (JSONL), or - for stdin")
    _add_option_flags(p)
    return parser


def main(argv: list[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run one command; return its exit status. Never raises for bad input."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser(out, err)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed usage or help
        return int(exc.code or 0)
    try:
        return COMMANDS[args.command](args, out, err)
    except TraceError as exc:
        for problem in exc.problems:
            err.write(problem + "\n")
        return 2
    except UsageError as exc:
        err.write(f"{PROG}: error: {exc}\n")
        return 2
    except InvariantError as exc:
        err.write(f"{PROG}: internal invariant failed: {exc}\n")
        return 3
    except KeyboardInterrupt:
        err.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


def main_entry() -> None:
    """The console script: exit with `main`'s status."""
    raise SystemExit(main())
