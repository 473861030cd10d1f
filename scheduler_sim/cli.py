"""The command line: argument parsing, the commands, and the one error handler.

`main(argv)` returns the exit status (SPEC §10): 0 success, 1 a check failed
or a replay stalled, 2 bad input or usage, 3 an internal invariant failed,
130 interrupted. Every option of `options.OPTIONS` is also a flag
(`block_size` -> `--block-size`); flags override the trace's config record.
This is the only module that touches argv, stdout, stderr and files it writes.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from typing import Any, Callable, TextIO

from . import __version__
from .costmodel import GPUS, MODELS, swap_vs_recompute
from .engine import Engine
from .generator import WorkloadSpec, generate, parse_length
from .importers import FORMATS, convert
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

def _file_mode() -> int:
    """The mode a new file gets from the umask (mkstemp's are private: 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


class EventFile:
    """Streams event records to a file that appears only when complete.

    Records go to a temporary file beside the target, renamed over it at
    `commit`; `abort` removes it. `-` streams to standard output instead.
    """

    def __init__(self, target: str, stdout: TextIO, tag_policy: bool) -> None:
        self.target = target
        self.tag_policy = tag_policy
        self._tmp: str | None = None
        self._lines: list[str] = []
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
        """The `on_event` callback for one policy's run (lines are written in
        batches; `flush` writes the rest)."""
        tag = policy if self.tag_policy else None
        lines = self._lines
        append = lines.append
        handle = self.handle

        def on_event(event: Event) -> None:
            append(event.to_json(tag))
            if len(lines) >= 4096:
                handle.write("\n".join(lines) + "\n")
                lines.clear()
        return on_event

    def flush(self) -> None:
        """Write the lines still buffered."""
        if self._lines:
            self.handle.write("\n".join(self._lines) + "\n")
            self._lines.clear()

    def commit(self) -> None:
        """Make the file appear under its name, complete."""
        self.flush()
        if self._tmp is None:
            self.handle.flush()
            return
        self.handle.close()
        os.chmod(self._tmp, _file_mode())
        os.replace(self._tmp, self.target)
        self._tmp = None

    def abort(self) -> None:
        """Leave nothing behind."""
        if self._tmp is not None:
            self.handle.close()
            os.unlink(self._tmp)
            self._tmp = None


def write_whole(target: str | None, text: str, stdout: TextIO) -> None:
    """Write `text` to `target` under a temporary name, then rename (or to stdout)."""
    if target in (None, "-"):
        stdout.write(text)
        return
    if os.path.isdir(target):
        raise UsageError(f"{target}: cannot write: it is a directory")
    directory = os.path.dirname(os.path.abspath(target))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".out-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise UsageError(f"{target}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(tmp, _file_mode())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _jsonl(records: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8", errors="replace")
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


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


def cmd_convert(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Import a public trace format into trace v1."""
    if args.tick_ms <= 0:
        raise UsageError(f"--tick-ms must be > 0, got {args.tick_ms:g}")
    name = "<stdin>" if args.file == "-" else args.file
    result = convert(args.fmt, _read_text(args.file), name, args.tick_ms)
    if result.problems and (args.strict or len(result.records) == 1):
        # --strict, or nothing usable at all (a wrong header, say): fail whole.
        raise TraceError(result.problems)
    write_whole(args.output, _jsonl(result.records), out)
    requests = len(result.records) - 1
    notes = [f"{name}: converted {requests:,} requests from {args.fmt}"]
    if result.failed_requests:
        notes.append(f"skipped {result.failed_requests:,} failed requests (Response tokens == 0)")
    if result.problems:
        notes.append(f"skipped {len(result.problems):,} bad rows (--strict makes them fatal)")
    err.write("; ".join(notes) + "\n")
    for problem in result.problems[:20]:
        err.write(problem + "\n")
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
    if not isinstance(spec, tuple):
        return spec
    if not spec[1]:
        raise UsageError(f"empirical lengths need a trace: empirical:TRACE, got 'empirical:'")
    trace = read_trace(spec[1])
    values = tuple(getattr(r, field) for r in trace.workload.requests)
    if not values:
        raise UsageError(f"{spec[1]}: has no requests to draw {field} from")
    return parse_length("empirical:" + spec[1], values)


def cmd_generate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Write a seeded synthetic workload as a trace."""
    if args.requests < 1:
        raise UsageError(f"--requests must be >= 1, got {args.requests}")
    for flag, value in (("--rate", args.rate), ("--cv", args.cv),
                        ("--cancel-after", args.cancel_after)):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag} must be a finite number > 0, got {value:g}")
    if not 0 <= args.cancel_rate <= 1:
        raise UsageError(f"--cancel-rate must be in [0, 1], got {args.cancel_rate:g}")
    if args.prefix_groups < 0 or args.prefix_tokens < 0:
        raise UsageError("--prefix-groups and --prefix-tokens must be >= 0")
    priorities = []
    if args.priorities:
        try:
            for part in args.priorities.split(","):
                level, _, weight = part.partition(":")
                priorities.append((int(level), float(weight or 1)))
        except ValueError:
            raise UsageError(f"--priorities must look like 0:3,1:1, got {args.priorities!r}") from None
        weights = [w for _, w in priorities]
        if not all(math.isfinite(w) and w >= 0 for w in weights) or not sum(weights) > 0:
            raise UsageError(f"--priorities weights must be finite, >= 0 and not all 0, "
                             f"got {args.priorities!r}")
    spec = WorkloadSpec(
        seed=args.seed, requests=args.requests, rate=args.rate, arrival=args.arrival,
        cv=args.cv, prompt=_empirical(_length(args.prompt), "prompt_tokens"),
        output=_empirical(_length(args.output), "output_tokens"),
        prefix_groups=args.prefix_groups, prefix_tokens=args.prefix_tokens,
        priorities=tuple(priorities), cancel_rate=args.cancel_rate,
        cancel_after=args.cancel_after)
    write_whole(args.out, _jsonl(generate(spec)), out)
    return 0


def cmd_cost(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Print the swap-versus-recompute analysis of a preempted request."""
    if args.model not in MODELS:
        raise UsageError(f"unknown model {args.model!r} (known: {', '.join(MODELS)})")
    if args.gpu not in GPUS:
        raise UsageError(f"unknown gpu {args.gpu!r} (known: {', '.join(GPUS)})")
    if args.seq < 1 or not 0 < args.mfu <= 1:
        raise UsageError(f"--seq must be >= 1 and --mfu in (0, 1], got {args.seq}, {args.mfu:g}")
    model, gpu = MODELS[args.model], GPUS[args.gpu]
    r = swap_vs_recompute(model, gpu, args.seq, args.mfu)
    rows = [
        ("KV bytes per token", f"{r['kv_bytes_per_token']:,} B",
         f"2 x {model.layers} layers x {model.kv_heads} KV heads x {model.head_dim} x "
         f"{model.dtype_bytes} B"),
        ("KV of the request", f"{r['kv_bytes'] / 2**30:,.3f} GiB", f"{args.seq:,} tokens"),
        ("prefill FLOPs", f"{r['prefill_flops']:.4g}",
         f"2 N S + 2 L S^2 d, N = {model.parameters:.3g}"),
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


COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO, TextIO], int]] = {
    "replay": cmd_replay,
    "validate": cmd_validate,
    "check": cmd_check,
    "convert": cmd_convert,
    "generate": cmd_generate,
    "cost": cmd_cost,
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

    p = sub.add_parser("convert", help="import a public trace format into trace v1",
                       description="Convert FILE (mooncake, azure, vidur or burstgpt) into "
                                   "trace v1. Arrival ticks are timestamps relative to the "
                                   "earliest one, divided by --tick-ms, rounded down.")
    p.add_argument("--from", dest="fmt", required=True, choices=list(FORMATS),
                   help="the input format")
    p.add_argument("file", metavar="FILE", help="the input file, or - for stdin")
    p.add_argument("--tick-ms", type=float, default=1.0, metavar="MS",
                   help="milliseconds per tick (default: 1)")
    p.add_argument("-o", "--output", metavar="OUT", help="write here (default: stdout)")
    p.add_argument("--strict", action="store_true",
                   help="fail on any bad row (exit 2); a file with no good row always fails")

    p = sub.add_parser("generate", help="write a seeded synthetic workload",
                       description="Generate a synthetic trace; the same arguments always "
                                   "give the same trace.")
    p.add_argument("--seed", type=int, required=True, help="random seed")
    p.add_argument("--requests", type=int, required=True, help="number of requests")
    p.add_argument("--rate", type=float, default=1.0, help="requests per tick (default: 1)")
    p.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson",
                   help="inter-arrival distribution (default: poisson)")
    p.add_argument("--cv", type=float, default=1.0,
                   help="coefficient of variation of gamma gaps (default: 1)")
    p.add_argument("--prompt", default="uniform:16:512", metavar="LENGTH",
                   help="prompt lengths: fixed:N, uniform:A:B, lognormal:MEDIAN:SIGMA or "
                        "empirical:TRACE (default: uniform:16:512)")
    p.add_argument("--output", default="uniform:16:256", metavar="LENGTH",
                   help="output lengths, same forms (default: uniform:16:256)")
    p.add_argument("--prefix-groups", type=int, default=0, metavar="G",
                   help="groups of requests sharing a system prompt (default: none)")
    p.add_argument("--prefix-tokens", type=int, default=0, metavar="L",
                   help="tokens of each group's shared system prompt")
    p.add_argument("--priorities", metavar="MIX", help="priority levels and weights: 0:3,1:1")
    p.add_argument("--cancel-rate", type=float, default=0.0,
                   help="fraction of requests the client cancels (default: 0)")
    p.add_argument("--cancel-after", type=float, default=50.0, metavar="TICKS",
                   help="mean patience before a cancellation (default: 50 ticks)")
    p.add_argument("-o", "--out", metavar="OUT", help="write here (default: stdout)")

    p = sub.add_parser("cost", help="price swap against recompute for one request",
                       description="The roofline analysis of a preempted request: recompute "
                                   "its prefill, or swap its KV to host memory and back.")
    p.add_argument("--model", required=True, help=f"one of {', '.join(MODELS)}")
    p.add_argument("--gpu", required=True, help=f"one of {', '.join(GPUS)}")
    p.add_argument("--seq", type=int, required=True, help="tokens of the request")
    p.add_argument("--mfu", type=float, default=400 / 989,
                   help="achieved fraction of peak FLOP/s (default: 400 of 989 TFLOP/s)")
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
