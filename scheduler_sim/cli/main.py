"""The command line: argument parsing and the one error handler.

`main(argv)` parses the arguments, runs one command of `commands` and returns
the exit status (§10): 0 success, 1 a check failed or a replay stalled,
2 bad input or usage, or an output that cannot be written (one line: disk
full, file too large, permission denied, a directory), 3 an internal
invariant failed, a plugin policy failed, or a worker process of -j died
(`workers.WorkerDied`), 130 interrupted (SIGINT), 141 the reader of standard
output or of a FIFO went away (quietly, as a tool killed by SIGPIPE), 143
terminated (SIGTERM). Every option of `option_table.OPTIONS` is also a flag
(`block_size` -> `--block-size`); flags override the trace's config record.
Messages are printed through `terminal_text.printable`, one line each whatever
text they carry. Together with `commands` and `outputs` this is the only
layer that touches argv, stdout, stderr and files.

`main_entry` (behind the console script, `command`, and `python -m
scheduler_sim`) lives in `cli.entry`, which sets the process up (signals, standard output) before it
imports this module and the simulator behind it; it is also importable from
here.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from .. import __version__
from ..io.outputs import GuardedStream, PipeClosed, abort_unfinished
from ..io.terminal_text import printable
from ..io.trace_config import ALLOW_FLAG
from ..policies import POLICIES
from ..records import interrupts
from ..records.errors import (InvariantError, PolicyError, SimError, TraceError, UsageError,
                              WorkerDied)
from ..records.interrupts import Terminated
from ..records.option_table import OPTIONS
from ..records.spelling import closest
from ..requests.queues import QUEUE_ORDERS
from .asked_command import Subcommands, asked_command
from .calibrate_parser import add_calibrate_parser
from .commands import COMMANDS, command
from .entry import EXIT_INTERRUPTED, EXIT_TERMINATED, PROG, main_entry

__all__ = ["main", "main_entry", "build_parser", "Terminated", "EXIT_INTERRUPTED",
           "EXIT_PIPE", "EXIT_TERMINATED"]

EXIT_PIPE = 141  # 128 + SIGPIPE: what a shell shows for a tool whose reader went away

# What `convert --from` reads: io/importers.py's FORMATS and RUN_FORMATS, named here so
# that building the parser does not load the importers (tests/test_cli.py checks the two
# agree).
CONVERT_FORMATS = ["mooncake", "azure", "vidur", "burstgpt", "blis-run"]


# --- options from flags ------------------------------------------------------------

def _add_option_flags(parser: argparse.ArgumentParser) -> None:
    if not isinstance(parser, argparse.ArgumentParser):
        return  # a command not asked for (cli/asked_command.py): its 60 flags unmade
    group = parser.add_argument_group("simulation options (override the trace's config)")
    for spec in OPTIONS.values():
        default = "null" if spec.default is None else spec.default
        if spec.trace_only:
            continue  # a property of the trace file, set in its config record
        if spec.name == "policy":
            group.add_argument("--policy", action="append", dest="policy", metavar="NAME",
                               help="policy to replay, repeat to compare side by side: "
                                    f"{', '.join(POLICIES)}, or one of your own as "
                                    "MODULE:CLASS or FILE.py:CLASS (default: the trace's "
                                    "config, else continuous)")
        elif spec.name == "order":
            group.add_argument("--order", dest="order", default=None, metavar="VALUE",
                               help=f"{spec.help}: {', '.join(QUEUE_ORDERS)} (default: fcfs)")
        elif spec.kind == "bool":
            group.add_argument(spec.flag, dest=spec.name, action=argparse.BooleanOptionalAction,
                               default=None, help=f"{spec.help} (default: {str(default).lower()})")
        else:
            shown = f"{default:g}" if isinstance(default, float) else default
            text = spec.help if "default:" in spec.help else f"{spec.help} (default: {shown})"
            if spec.choices:
                text += f"; one of {', '.join(spec.choices)}"
            group.add_argument(spec.flag, dest=spec.name, default=None, metavar="VALUE",
                               help=text)


def _add_allow_flag(parser: argparse.ArgumentParser, what: str = "config") -> None:
    parser.add_argument(ALLOW_FLAG, action="store_true", dest="allow_trace_plugins",
                        help=f"run a plugin policy (FILE.py:CLASS, MODULE:CLASS) that the "
                             f"trace's {what} names; without it a trace never runs code "
                             "(a relative FILE.py is taken from the trace's folder)")


def _parser_class(out: TextIO, err: TextIO) -> type[argparse.ArgumentParser]:
    """An ArgumentParser whose help goes to `out` and whose errors go to `err`."""

    class Parser(argparse.ArgumentParser):
        def _print_message(self, message: str, file: Any = None) -> None:
            if message:
                (err if file is None or file is sys.stderr else out).write(message)

    return Parser


def build_parser(out: TextIO | None = None, err: TextIO | None = None,
                 asked: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of every command (printing to `out` and `err`); given the
    command `asked`, the others' arguments left out (cli/asked_command.py)."""
    parser = _parser_class(out or sys.stdout, err or sys.stderr)(
        prog=PROG,
        description="Replay a JSONL trace of LLM-serving requests through a simulated "
                    "scheduler and report what happened and why.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = Subcommands(parser, asked, dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("replay", help="replay a trace under one or more policies",
                       description="Replay TRACE under each policy and print a side-by-side "
                                   "summary table.")
    p.add_argument("trace", metavar="TRACE", help="trace file (JSONL), or - for stdin")
    p.add_argument("--events", metavar="FILE", help="write event records (JSONL) to FILE, "
                   "or - for stdout (the table then goes to stderr)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--requests", action="store_true",
                   help="also print one line per request (under --json: a per_request list)")
    p.add_argument("--requests-csv", metavar="FILE",
                   help="write every per-request field as CSV to FILE, or - for stdout "
                        "(the table then goes to stderr)")
    p.add_argument("--report", metavar="FILE",
                   help="write a self-contained HTML report (charts over time, latency "
                        "CDFs, a per-request timeline, the summary) to FILE, or - for "
                        "stdout (the table then goes to stderr)")
    p.add_argument("--perfetto", metavar="FILE",
                   help="write a Chrome trace event file (JSON) for Perfetto or "
                        "chrome://tracing to FILE, or - for stdout: a track per request, "
                        "counters for KV blocks and queues, a track of the GPU's dispatches")
    p.add_argument("--perfetto-sample", type=int, default=1, metavar="K",
                   help="--perfetto: keep the tracks of every K-th request only (by trace "
                        "line), to bound the file on a long trace (default: 1, every one)")
    p.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                   help="replay the policies in N parallel processes; every output is "
                        "the same as with -j 1 (default: 1)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress line on standard error (shown only on a terminal, "
                        "for runs longer than about a second)")
    _add_allow_flag(p)
    _add_option_flags(p)

    p = sub.add_parser("validate", help="check a trace and summarise it",
                       description="Validate TRACE (rule T1) and print a one-line summary.")
    p.add_argument("trace", metavar="TRACE", help="trace file (JSONL), or - for stdin")

    p = sub.add_parser("check", help="replay a trace and verify its expect records",
                       description="Replay TRACE and verify its expect records; exit 1 "
                                   "if any does not hold.")
    p.add_argument("trace", metavar="TRACE", help="trace file (JSONL), or - for stdin")
    p.add_argument("--junit", metavar="FILE",
                   help="also write the results as JUnit XML to FILE (a test case per "
                        "expectation and policy), or - for stdout")
    _add_allow_flag(p)
    _add_option_flags(p)

    p = sub.add_parser("convert", help="import a public trace format into trace v1",
                       description="Convert FILE (mooncake, azure, vidur or burstgpt; or "
                                   "blis-run, a real vLLM run) into trace v1 with times in "
                                   "seconds: each arrival is its timestamp less the earliest "
                                   "one, exactly. A gzipped FILE is read as its content.")
    p.add_argument("--from", dest="fmt", required=True, choices=CONVERT_FORMATS,
                   help="the input format")
    p.add_argument("file", metavar="FILE", help="the input file, or - for stdin")
    p.add_argument("-o", "--out", metavar="OUT", help="write here (default: stdout)")
    p.add_argument("--strict", action="store_true",
                   help="fail on any bad row (exit 2); a file with no good row always fails "
                        "(blis-run is always strict)")
    g = p.add_argument_group("blis-run (a real vLLM run of inference-sim/training)")
    g.add_argument("--client-config", metavar="FILE",
                   help="the run's resolved inference-perf config (results/config.yaml): "
                        "output length, prompts and stages (required)")
    g.add_argument("--model", metavar="NAME",
                   help="the catalogue model, when the run's model_id has no known name")
    g.add_argument("--gpu", metavar="NAME", default=None,
                   help="the GPU the run used (default: h100-sxm, as every published run)")
    g.add_argument("--measured", metavar="OUT",
                   help="also write the measured per-request TTFT and E2E here (JSONL)")
    g.add_argument("--ground-truth", metavar="FILE",
                   help="the run's measured latencies (default: RUN_ground_truth.json[.gz] "
                        "beside FILE)")

    p = sub.add_parser("generate", help="write a seeded synthetic workload",
                       description="Generate a synthetic trace; the same arguments always "
                                   "give the same trace.")
    p.add_argument("--seed", type=int, required=True, help="random seed")
    p.add_argument("--requests", type=int, required=True, help="number of requests")
    p.add_argument("--rate", type=float, default=1.0,
                   help="requests per time unit: per tick, or per second under --time-unit s "
                        "(default: 1)")
    p.add_argument("--time-unit", choices=("tick", "s"), default="tick",
                   help="the unit of the trace's times: tick (whole ticks) or s (seconds, "
                        "to the microsecond, as vllm bench serve's --request-rate) "
                        "(default: tick)")
    p.add_argument("--arrival", choices=("poisson", "gamma"), default=None,
                   help="inter-arrival distribution (default: poisson; gamma with --cv or "
                        "--burstiness)")
    p.add_argument("--cv", type=float, default=None,
                   help="coefficient of variation of gamma gaps (default: 1)")
    p.add_argument("--burstiness", type=float, default=None, metavar="B",
                   help="gamma gaps of shape B, as vllm bench serve --burstiness: 1 is "
                        "Poisson, smaller is burstier (cv = 1 / sqrt(B))")
    p.add_argument("--prompt-len", dest="prompt", default="uniform:16:512", metavar="LENGTH",
                   help="prompt lengths: fixed:N, uniform:A:B, lognormal:MEDIAN:SIGMA or "
                        "empirical:TRACE (default: uniform:16:512)")
    p.add_argument("--output-len", dest="output", default="uniform:16:256", metavar="LENGTH",
                   help="output lengths, same forms (default: uniform:16:256)")
    p.add_argument("--prefix-groups", type=int, default=0, metavar="G",
                   help="groups of requests sharing a system prompt (default: none)")
    p.add_argument("--prefix-tokens", type=int, default=0, metavar="L",
                   help="tokens of each group's shared system prompt")
    p.add_argument("--priorities", metavar="MIX", help="priority levels and weights: 0:3,1:1")
    p.add_argument("--cancel-rate", type=float, default=0.0,
                   help="fraction of requests the client cancels (default: 0)")
    p.add_argument("--cancel-after", type=float, default=50.0, metavar="TIME",
                   help="mean patience before a cancellation, in the time unit (default: "
                        "50)")
    p.add_argument("-o", "--out", metavar="OUT", help="write here (default: stdout)")

    _add_sweep_parsers(sub)
    _add_search_parser(sub)
    add_calibrate_parser(sub)

    p = sub.add_parser("cost", help="price one dispatch, or swap against recompute",
                       description="With --prefill and --decode: the seconds of one dispatch "
                                   "term by term, under the cost model and its calibration. "
                                   "With --seq: the analysis of a preempted request: recompute "
                                   "its prefill, or swap its KV to host memory and back.")
    p.add_argument("--model", required=True,
                   help="a catalogue name (scheduler-sim models) or the path of a config.json")
    p.add_argument("--gpu", required=True,
                   help="a catalogue name (scheduler-sim models) or the path of a GPU spec "
                        ".json")
    p.add_argument("--prefill", action="append", default=[], metavar="TOKENS[@CONTEXT]",
                   help="a prefill chunk of TOKENS after CONTEXT cached or computed tokens "
                        "(default 0); repeatable")
    p.add_argument("--decode", action="append", default=[], metavar="ROWS@CONTEXT",
                   help="ROWS decode rows, each after CONTEXT tokens; repeatable")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default: 1)")
    p.add_argument("--calibration", default=None,
                   help="a calibration file, a shipped GPU's name, or none (default: the "
                        "GPU's shipped calibration)")
    p.add_argument("--seq", type=int, help="tokens of a preempted request (swap against "
                                           "recompute)")
    p.add_argument("--mfu", type=float, default=400 / 989,
                   help="with --seq: achieved fraction of peak FLOP/s (default: 400 of 989 "
                        "TFLOP/s)")

    sub.add_parser("models", help="list the models and GPUs a cost model knows by name",
                   description="The model catalogue (parameters, layers, width, heads, "
                               "experts, dtype, KV bytes per token) and the GPU catalogue "
                               "(peak FLOP/s, HBM bandwidth, memory, interconnect).")
    parser.commands = sub.choices  # name -> its parser (`_parse` words a bad flag there)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The parsed command line. An argument the command does not know is reported by
    the command's own parser (its usage line, not the top level's), a misspelt flag
    with the command's flag it most likely meant."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = parser.commands[args.command]
        # (Compared without the leading dashes, which every long flag shares: with
        # them `--bogus` was close enough to `--gpu`.)
        flags = {flag[2:]: flag for action in command._actions
                 for flag in action.option_strings if flag.startswith("--")}
        first = next((word for word in unknown if word.startswith("--")), None)
        near = closest(first.partition("=")[0][2:], flags) if first else None
        hint = f" (did you mean {flags[near]!r}?)" if near else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def _add_grid_flags(p: argparse.ArgumentParser, verb: str) -> None:
    """--grid and --grid-file, as `sweep` and `search` take them."""
    p.add_argument("--grid", action="append", metavar="NAME=V1,V2,...",
                   help=f"{verb} an option's values (repeat for more axes; slo values are "
                        "separated by ';')")
    p.add_argument("--grid-file", metavar="FILE",
                   help='a JSON object of option names and lists of values, the axes in '
                        'order, e.g. {"num_blocks": [4096, 8192], "policy": ["vllm", '
                        '"sglang"]}')


def _add_search_parser(sub: Any) -> None:
    """`search TRACE --slo ... [--grid ...]`: the cheapest deployment meeting an SLO."""
    p = sub.add_parser("search", help="find the cheapest deployment that meets an SLO, or "
                                      "the most load one sustains",
                       description="For each point of a grid of options (--grid, "
                                   "--grid-file, --policy, as sweep takes them), find the "
                                   "fewest replicas whose replay meets --slo for "
                                   "--attainment of the requests, and what they cost; print "
                                   "the points cheapest first and the Pareto front of cost "
                                   "against goodput. With --capacity, find each point's "
                                   "highest load (rate_scale) within the SLO instead.")
    p.add_argument("trace", metavar="TRACE", help="trace file (JSONL)")
    _add_grid_flags(p, "search over")
    p.add_argument("--attainment", type=float, default=0.99, metavar="F",
                   help="the fraction of requests that must meet every objective of --slo "
                        "(default: 0.99)")
    p.add_argument("--max-replicas", type=int, default=64, metavar="N",
                   help="the most replicas tried for a point (default: 64)")
    p.add_argument("--price", action="append", metavar="GPU=USD",
                   help="dollars per GPU-hour of a GPU of the catalogue (repeat for "
                        "more): cost in $/h instead of GPUs")
    p.add_argument("--capacity", action="store_true",
                   help="find each point's highest load (x the trace's request rate) that "
                        "meets the SLO at its own replicas, instead of its fewest replicas")
    p.add_argument("--precision", type=float, default=0.01, metavar="F",
                   help="--capacity: the load found is within this fraction of the highest "
                        "one that meets the SLO (default: 0.01)")
    p.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                   help="search N points at once, in worker processes (default: 1)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on standard error (shown only on a terminal)")
    _add_allow_flag(p, "config or the --grid-file")
    _add_option_flags(p)


def _add_sweep_parsers(sub: Any) -> None:
    """`sweep TRACE --grid ...` and `sweep merge SHARD ...` (parsed as `sweep-merge`)."""
    p = sub.add_parser("sweep", help="replay a grid of options and policies, one row each",
                       description="Replay TRACE once per configuration: the cross product "
                                   "of the --grid lists (first slowest) and the policies "
                                   "(last); write one row per configuration as CSV or JSONL "
                                   "and print a table. 'sweep merge SHARD.jsonl ...' joins "
                                   "the outputs of --shard runs.")
    p.add_argument("trace", metavar="TRACE", help="trace file (JSONL), or - for stdin")
    _add_grid_flags(p, "sweep")
    p.add_argument("-j", "--jobs", type=int, default=1, metavar="N",
                   help="run configurations in N worker processes (default: 1, in process)")
    p.add_argument("--shard", metavar="K/N",
                   help="run only the configurations whose index is K modulo N (0 <= K < N)")
    p.add_argument("--csv", metavar="OUT", help="write the rows as CSV to OUT, or - for stdout")
    p.add_argument("--jsonl", metavar="OUT",
                   help="write a header and the rows as JSONL to OUT, or - for stdout "
                        "(what 'sweep merge' reads)")
    p.add_argument("--report", metavar="FILE",
                   help="write an HTML page plotting --metric against --x, one line per "
                        "policy (and per combination of the other swept values)")
    p.add_argument("--metric", default="ttft_p99", metavar="FIELD",
                   help="the summary field --report plots (default: ttft_p99)")
    p.add_argument("--x", metavar="NAME",
                   help="the swept option on --report's x axis (default: the first swept "
                        "option other than the policy)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on standard error (shown only on a terminal: a line "
                        "per finished configuration, with --metric, and the time left)")
    _add_allow_flag(p, "config or the --grid-file")
    _add_option_flags(p)

    p = sub.add_parser("sweep-merge", prog=f"{PROG} sweep merge",
                       help="join the JSONL shards of a sweep (also: sweep merge)",
                       description="Join the JSONL outputs of 'sweep --shard K/N' runs into "
                                   "the full table, refusing shards of another sweep, "
                                   "overlaps and gaps.")
    p.add_argument("shards", nargs="+", metavar="SHARD", help="JSONL outputs of sweep")
    p.add_argument("--csv", metavar="OUT", help="write the table as CSV to OUT, or - for stdout")
    p.add_argument("--jsonl", metavar="OUT",
                   help="write it as JSONL to OUT, or - (the default without --csv)")


def main(argv: list[str] | None = None, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run one command; return its exit status. Never raises for bad input, nor for an
    output that cannot be written."""
    out = GuardedStream(sys.stdout if out is None else out, "standard output")
    err = GuardedStream(sys.stderr if err is None else err, "standard error")
    with interrupts.watching():  # an interrupt a policy raises is not Ctrl-C
        status, message = _run(argv, out, err)
    if message:
        try:
            err.write(message + "\n")
            err.flush()
        except (SimError, OSError):
            pass  # standard error cannot be written either: the status says it
    interrupts.ended()
    return status


def _run(argv: list[str] | None, out: GuardedStream,
         err: GuardedStream) -> tuple[int, str]:
    """(exit status, the last message for standard error, if any)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["sweep", "merge"]:  # a trace named merge: ./merge
        argv[:2] = ["sweep-merge"]
    try:
        return _command(argv, out, err)
    finally:
        abort_unfinished()  # no temporary file outlives the command (io/outputs.py)


def _command(argv: list[str], out: GuardedStream, err: GuardedStream) -> tuple[int, str]:
    """`_run` for the parsed command line."""
    try:
        try:
            args = _parse(build_parser(out, err, asked_command(argv, COMMANDS)), argv)
        except SystemExit as exc:  # argparse has printed usage or help
            status = int(exc.code or 0)
        else:
            status = command(args.command)(args, out, err)
        out.flush()
        err.flush()
        return status, ""
    except TraceError as exc:
        return 2, "\n".join(printable(problem) for problem in exc.problems)
    except UsageError as exc:  # OutputError too
        return 2, f"{PROG}: error: {printable(str(exc))}"
    except PolicyError as exc:
        return 3, f"{PROG}: policy error: {printable(str(exc))}"
    except InvariantError as exc:
        return 3, f"{PROG}: internal invariant failed: {printable(str(exc))}"
    except WorkerDied as exc:
        return 3, f"{PROG}: error: {printable(str(exc))}"
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED, f"{PROG}: interrupted"
    except Terminated:
        return EXIT_TERMINATED, f"{PROG}: terminated"
    except (PipeClosed, BrokenPipeError):
        return EXIT_PIPE, ""
    except OSError as exc:  # any other I/O failure: one line, never a traceback
        name = f"{printable(str(exc.filename))}: " if exc.filename else ""
        return 2, f"{PROG}: error: {name}{exc.strerror or exc}"
