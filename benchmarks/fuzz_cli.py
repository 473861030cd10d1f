#!/usr/bin/env python3
"""Fuzz the command line: random flag values and mutated input files (stdlib only).

    python3 benchmarks/fuzz_cli.py [--runs 3000] [--seed 1] [--timeout 10] [--jobs 2]
        [--commands convert,generate,cost,validate,replay] [--examples 2]

Each case is a command line of `convert` (every `--from` format), `generate`,
`cost`, `validate` or `replay`, with flag values drawn from a pool of awkward
ones (huge, tiny, negative, inf, nan, non-numeric, empty, other scripts'
digits, bytes that are not UTF-8) and inputs made from small valid files and
then mutated (truncated, nested deep, numbers swapped for huge or tiny ones,
wrong types, binary bytes, a BOM, CRLF or bare CR line ends, an unclosed
quote, a field past the CSV size limit, a line repeated thousands of times,
a file of another format). Every case runs in a child process of its own
(`python3 -m scheduler_sim`, from this checkout, with a 2 GiB address-space
limit) under a timeout, so a hang is counted, not waited for.

A case passes when the child exits 0 or 2 (`replay` also 1, a stalled run)
within the timeout, prints no traceback, and, when it wrote a trace
(`convert`, `generate`), the project's own parser accepts that trace: a
command must never write a trace that `validate` refuses. The report gives
the runs per command and exit status, then the tracebacks grouped by cause
(exception type and the innermost frame of the package), the hangs, other
exit statuses and refused traces, each with a count and example commands.
The exit status is 0 when every case passed, 1 otherwise.

`tests/test_edge_inputs.py` draws its in-process fuzz cases from `make_case`
here (`small=True`: inputs small enough to run a few hundred cases in a few
seconds).
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMANDS = ("convert", "generate", "cost", "validate", "replay")
WEIGHTS = (40, 25, 10, 10, 15)
FORMATS = ("mooncake", "azure", "vidur", "burstgpt")
STATUSES = {"replay": (0, 1, 2)}  # the documented statuses of bad or good input
DEFAULT_STATUSES = (0, 2)

# Flag values: ordinary, absurd and malformed.
WILD = [
    "0", "-0", "1", "-1", "2", "3", "0.5", "1e-7", "1e-160", "1e-200", "1e-320", "5e-324",
    "1e-999999999", "1e200", "1e308", "1.8e308", "1e400", "1e9999", "1e999999999", "inf",
    "-inf", "nan", "NaN", "Infinity", "", " ", "abc", "1_000", "0x10", "\u0661\u0662",
    "\u00b2", "1e", "+3", "1" + "0" * 154, "1" + "0" * 400, "9" * 5000, "1e15", "1e16",
    "999999999999", "3.14159", "1/2", "1,5", "\u00a05", "5 ", "true", "null", "\udcff",
    "\u2028", "\U0001f600", "-1e308", "4294967296", "18446744073709551617",
]
# JSON values to put where a JSON number was.
WILD_JSON = [
    "0", "-1", "1.5", "1e9999", "-1e9999", "1e308", "1e-999999999", "1e999999999",
    "1" + "0" * 400, "9" * 4400, "5e-324", "1e15", "1e16", "true", "false", "null", '"5"',
    '"abc"', '""', "[]", "[1]", "{}", '{"a":1}', "NaN", "Infinity", "-Infinity", "1.0",
    "[" * 900 + "]" * 900, "[" * 5000 + "]" * 5000, '"\\ud800"', '"\u2028"', "0.000001",
]


@dataclasses.dataclass
class Case:
    """One command line: `argv` with `{dir}` standing for the case's own folder,
    the files to create there, standard input, and the trace file it writes
    (relative to the folder; `-` when the trace goes to standard output)."""

    command: str
    argv: list[str]
    files: dict[str, bytes] = dataclasses.field(default_factory=dict)
    stdin: bytes = b""
    writes: str | None = None

    def materialise(self, directory: str) -> list[str]:
        """Write the files into `directory`; return argv with the folder filled in."""
        for name, data in self.files.items():
            with open(os.path.join(directory, name), "wb") as handle:
                handle.write(data)
        return [a.replace("{dir}", directory) for a in self.argv]

    def shown(self) -> str:
        """The command line, shortened for a report."""
        parts = []
        for a in self.argv:
            text = a if len(a) <= 40 else a[:30] + f"...({len(a)} chars)"
            parts.append(ascii(text)[1:-1] if not text.isprintable() or " " in text or not text
                         else text)
        extra = ", ".join(f"{n}: {len(d):,} B" for n, d in self.files.items())
        return " ".join(parts) + (f"   [{extra}]" if extra else "")


# --- inputs ------------------------------------------------------------------------

def _rows(rng: random.Random, small: bool) -> int:
    return rng.choice((0, 1, 2, 3, 5, 8, 20) if small else (0, 1, 2, 3, 5, 8, 20, 100, 2000))


def base_input(rng: random.Random, fmt: str, small: bool) -> str:
    """A valid file of `fmt` with a few random rows."""
    n = _rows(rng, small)
    lines = []
    t = rng.choice((0, 1_700_000_000, 5))
    if fmt == "mooncake":
        for _ in range(n):
            t += rng.choice((0, 0, 1, 17, 2500))
            p = rng.randint(1, 20000)
            hashes = list(range(rng.randint(0, -(-p // 512))))
            lines.append(json.dumps({"timestamp": t, "input_length": p,
                                     "output_length": rng.randint(1, 900), "hash_ids": hashes}))
        return "\n".join(lines) + ("\n" if lines and rng.random() < 0.8 else "")
    if fmt == "azure":
        lines.append("TIMESTAMP,ContextTokens,GeneratedTokens")
        for i in range(n):
            s = 46 + i
            lines.append(f"2023-11-16 18:{15 + s // 60:02d}:{s % 60:02d}."
                         f"{rng.randrange(10 ** 7):07d},{rng.randint(1, 9000)},"
                         f"{rng.randint(1, 900)}")
        return "\r\n".join(lines)
    if fmt == "vidur":
        lines.append("arrived_at,num_prefill_tokens,num_decode_tokens")
        for _ in range(n):
            t += rng.random() * 3
            lines.append(f"{t!r},{rng.randint(1, 9000)},{rng.randint(1, 900)}")
        return "\n".join(lines) + "\n"
    lines.append("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type")
    for _ in range(n):
        t += rng.choice((0, 1, 2.5, 40))
        p, o = rng.randint(1, 9000), rng.choice((0, rng.randint(1, 900)))
        lines.append(f"{t},{rng.choice(('ChatGPT', 'GPT-4'))},{p},{o},{p + o},"
                     f"{rng.choice(('Conversation log', 'API log'))}")
    return "\n".join(lines) + "\n"


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _replace_number(rng: random.Random, text: str, pool: list[str]) -> str:
    spots = list(_NUMBER.finditer(text))
    if not spots:
        return text
    for _ in range(rng.choice((1, 1, 2, 5))):
        m = rng.choice(spots)
        text = text[:m.start()] + rng.choice(pool) + text[m.end():]
        spots = list(_NUMBER.finditer(text))
        if not spots:
            break
    return text


def mutate(rng: random.Random, text: str, json_like: bool, small: bool) -> bytes:
    """Apply one to three random mutations to a file's text; return its bytes."""
    data = text
    raw: bytes | None = None
    for _ in range(rng.choice((1, 1, 2, 3))):
        kind = rng.choice((
            "number", "number", "number", "deep", "truncate", "binary", "bom", "crlf", "cr",
            "quote", "nul", "duplicate", "long_line", "empty", "header", "unicode", "none",
            "swap_columns", "blank_lines"))
        if kind == "number":
            pool = WILD_JSON if json_like and rng.random() < 0.7 else WILD
            data = _replace_number(rng, data, pool)
        elif kind == "deep":
            depth = rng.choice((100, 998, 999, 1000, 3000, 100 if small else 200_000))
            nest = "[" * depth + ("]" * depth if rng.random() < 0.7 else "")
            data = _replace_number(rng, data, [nest]) if rng.random() < 0.7 else nest + "\n" + data
        elif kind == "truncate" and data:
            data = data[:rng.randrange(len(data))]
        elif kind == "binary":
            at = rng.randrange(len(data) + 1)
            junk = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 64))))
            raw = (raw if raw is not None else data.encode("utf-8", "surrogatepass"))
            cut = len(data[:at].encode("utf-8", "surrogatepass"))
            raw = raw[:cut] + junk + raw[cut:]
            data = raw.decode("utf-8", "surrogateescape")
        elif kind == "bom":
            data = "\ufeff" + data
        elif kind == "crlf":
            data = data.replace("\r\n", "\n").replace("\n", "\r\n")
        elif kind == "cr":
            data = data.replace("\r\n", "\n").replace("\n", "\r")
        elif kind == "quote":
            at = rng.randrange(len(data) + 1)
            tail = "x" * (140_000 if rng.random() < 0.5 else 10)
            data = data[:at] + '"' + data[at:] + (tail if rng.random() < 0.5 else "")
        elif kind == "nul":
            at = rng.randrange(len(data) + 1)
            data = data[:at] + "\x00" + data[at:]
        elif kind == "duplicate":
            lines = data.split("\n")
            i = rng.randrange(len(lines))
            copies = rng.choice((2, 50, 200 if small else 5000))
            # at most ~4 MB more: a file of millions of rows is a long run, not a hang
            copies = min(copies, max(2, 4_000_000 // (len(lines[i]) + 1)))
            lines[i:i + 1] = [lines[i]] * copies
            data = "\n".join(lines)
        elif kind == "long_line":
            at = data.find("\n") + 1
            filler = rng.choice(("1" * 200_000, "[1," * 70_000 + "1" + "]" * 0, "a," * 100_000))
            data = data[:at] + filler + "\n" + data[at:]
        elif kind == "empty":
            data = rng.choice(("", "\n", " \n\n", "\r\n", data.split("\n")[0]))
        elif kind == "header":
            first, sep, rest = data.partition("\n")
            cells = first.split(",")
            op = rng.choice(("drop", "dup", "case", "space", "junk"))
            if op == "drop" and cells:
                cells.pop(rng.randrange(len(cells)))
            elif op == "dup" and cells:
                cells.append(rng.choice(cells))
            elif op == "case":
                cells = [c.lower() for c in cells]
            elif op == "space":
                cells = [f" {c} " for c in cells]
            else:
                cells.insert(0, rng.choice(WILD))
            data = ",".join(cells) + sep + rest
        elif kind == "unicode":
            at = rng.randrange(len(data) + 1)
            data = data[:at] + rng.choice(("\u2028", "\x85", "\x1c", "\u00e9", "\u0663",
                                           "\ufeff", "\U0001f600", "\udcff")) + data[at:]
        elif kind == "swap_columns":
            data = "\n".join(",".join(reversed(line.split(","))) for line in data.split("\n"))
        elif kind == "blank_lines":
            data = data.replace("\n", "\n\n \n")
        raw = None
    return data.encode("utf-8", "surrogateescape") if raw is None else raw


def _flag_value(rng: random.Random, ordinary: list[str], wild: float = 0.25) -> str:
    """An ordinary value, or with probability `wild` one of `WILD`."""
    return rng.choice(WILD) if rng.random() < wild else rng.choice(ordinary)


def _flag(rng: random.Random, argv: list[str], flag: str, value: str) -> None:
    if rng.random() < 0.5 or value.startswith("-"):
        argv.append(f"{flag}={value}")
    else:
        argv += [flag, value]


def _output(rng: random.Random, case: Case) -> None:
    r = rng.random()
    if r < 0.6:
        case.argv += ["-o", "{dir}/out.jsonl"]
        case.writes = "out.jsonl"
    elif r < 0.65:
        case.argv += ["-o", "{dir}"]  # a directory
    elif r < 0.68:
        case.argv += ["-o", "{dir}/missing/out.jsonl"]
    else:
        case.writes = "-"


# --- one case per command ----------------------------------------------------------

def convert_case(rng: random.Random, small: bool, stdin: bool = True,
                 fmt: str | None = None) -> Case:
    fmt = fmt or rng.choice(FORMATS)
    source = rng.choice(FORMATS) if rng.random() < 0.15 else fmt  # a file of another format
    text = base_input(rng, source, small)
    data = mutate(rng, text, source == "mooncake", small) if rng.random() < 0.9 else text.encode()
    case = Case("convert", ["convert", "--from", fmt])
    r = rng.random()
    if r < 0.04:
        case.argv.append("{dir}/no-such-file.csv")
    elif r < 0.06:
        case.argv.append("{dir}")
    elif r < 0.12 and stdin:
        case.argv.append("-")
        case.stdin = data
    else:
        case.argv.append("{dir}/in.txt")
        case.files["in.txt"] = data
    if rng.random() < 0.3:
        case.argv.append("--strict")
    _output(rng, case)
    if rng.random() < 0.03:
        case.argv += rng.choice((["--tick-ms", rng.choice(WILD)], ["--from", "bogus"], ["--x"]))
    return case


def _length(rng: random.Random, small: bool) -> str:
    kind = rng.choice(("fixed", "uniform", "lognormal", "empirical", "ok", "ok", "ok", "bogus"))
    # Small cases keep lengths small: with prefix groups every token id is written.
    small_ints = ["1", "16", "512", str(rng.randint(1, 3000))] + ([] if small else ["1000000"])
    if kind == "ok":
        return rng.choice(("fixed:16", "uniform:1:64", "lognormal:100:1", "uniform:16:512"))
    if kind == "fixed":
        return "fixed:" + _flag_value(rng, small_ints)
    if kind == "uniform":
        return f"uniform:{_flag_value(rng, small_ints)}:{_flag_value(rng, small_ints)}"
    if kind == "lognormal":
        medians, sigmas = ["100", "1", "0.5"], ["1", "0", "3"]
        if not small:
            medians, sigmas = medians + ["1e6"], sigmas + ["10"]
        return f"lognormal:{_flag_value(rng, medians)}:{_flag_value(rng, sigmas)}"
    if kind == "empirical":
        return rng.choice(("empirical:{dir}/lengths.jsonl", "empirical:{dir}/lengths.jsonl",
                           "empirical:", "empirical:{dir}/nope", "empirical:{dir}/bad.jsonl"))
    return rng.choice(("", ":", "fixed", "uniform:5", "lognormal:1:2:3", "normal:1:2",
                       "fixed:1:2", rng.choice(WILD)))


def generate_case(rng: random.Random, small: bool) -> Case:
    case = Case("generate", ["generate"])
    if rng.random() < 0.98:
        _flag(rng, case.argv, "--seed", _flag_value(rng, [str(rng.randint(0, 99)), "7"], 0.1))
    if rng.random() < 0.98:
        counts = [str(rng.randint(1, 60 if small else 300)), "1", "2"]
        value = _flag_value(rng, counts, 0.15)
        limit = 300 if small else 5000  # a run that is legitimately long is not a hang
        if value.isascii() and value.isdigit() and len(value) < 8 and int(value) > limit:
            value = str(limit)
        _flag(rng, case.argv, "--requests", value)
    options = {
        "--rate": ["1", "0.5", "10", "0.001", "1e-6", "1e9"],
        "--arrival": ["poisson", "gamma", "gamma", "gamma"],
        "--cv": ["1", "2", "0.5", "10", "0.01", "100"],
        "--prompt-len": None,
        "--output-len": None,
        "--prefix-groups": ["1", "2", "4", "1000000"],
        "--prefix-tokens": ["8", "64", "1000"] + ([] if small else ["1000000"]),
        "--priorities": ["0:3,1:1", "0:1", "-3:1,5:2", "1:0,2:1", "0:1e308,1:1e308", "1:0,2:0",
                         "a:b", "0:", ",", "0:-1", "0:nan", "99999999999999999999999:1",
                         "0:1e-320", "0:inf", ":1", "0:1:2"],
        "--cancel-rate": ["0", "0.5", "1", "0.1"],
        "--cancel-after": ["50", "1", "1e12", "0.001", "1e308"],
    }
    for flag, ordinary in options.items():
        if rng.random() < 0.35:
            value = _length(rng, small) if ordinary is None else _flag_value(rng, ordinary, 0.15)
            _flag(rng, case.argv, flag, value)
    if "--prefix-groups" in " ".join(case.argv) and rng.random() < 0.7:
        _flag(rng, case.argv, "--prefix-tokens", rng.choice(options["--prefix-tokens"]))
    if any("{dir}/lengths.jsonl" in a for a in case.argv):
        case.files["lengths.jsonl"] = (
            b'{"type":"request","id":"a","arrival":0,"prompt_tokens":5,"output_tokens":7}\n'
            b'{"type":"request","id":"b","arrival":1,"prompt_tokens":' +
            rng.choice((b"9", b"3000" if small else b"1000000", b"1" + b"0" * 30)) +
            b',"output_tokens":1}\n')
    if any("{dir}/bad.jsonl" in a for a in case.argv):
        case.files["bad.jsonl"] = mutate(rng, '{"type":"request","id":"a","arrival":0,'
                                         '"prompt_tokens":5,"output_tokens":7}\n', True, small)
    _output(rng, case)
    return case


def cost_case(rng: random.Random, small: bool) -> Case:
    case = Case("cost", ["cost"])
    for flag, ordinary in (("--model", ["llama-3-8b", "llama-3-70b"]),
                           ("--gpu", ["h100-sxm", "a100-80gb", "h200"]),
                           ("--seq", ["8192", "1", "131072", "1000000000", "1000000001",
                                      "1" + "0" * 154, "0"]),
                           ("--mfu", ["0.4", "1", "0.001", "1e-6", "1e-320"])):
        if rng.random() < (0.97 if flag != "--mfu" else 0.5):
            _flag(rng, case.argv, flag, _flag_value(rng, ordinary, 0.2))
    return case


def _trace_base(rng: random.Random) -> str:
    names = ["traces/quickstart.jsonl", "labs/01-trace-replay/lab.jsonl",
             "labs/02-recompute/part1.jsonl", "labs/05-fairness/hol.jsonl",
             "labs/04-prefix-survival/survival.jsonl", "labs/06-batching/mixed.jsonl"]
    with open(os.path.join(ROOT, rng.choice(names)), encoding="utf-8") as handle:
        return handle.read()


REPLAY_FLAGS = {
    "--policy": ["serial", "continuous", "vllm", "sglang", "static", "dynamic", "nope"],
    "--block-size": ["1", "4", "16"], "--num-blocks": ["1", "8", "100"],
    "--token-budget": ["1", "16", "64"], "--max-rows": ["1", "4"],
    "--prefill-chunk": ["1", "8"], "--release-delay": ["0", "2"],
    "--order": ["fcfs", "priority", "sjf", "edf", "lpm", "lof", "random"],
    "--seed": ["0", "3"], "--waiting-timeout": ["5", "null"],
    "--watermark": ["0.1", "0.5"], "--victim": ["lifo", "priority", "fewest-outputs"],
    "--max-preemptions": ["1", "3"], "--batch-window": ["2", "8"],
    "--tick-seconds": ["0.001", "1e-12", "3600"], "--clock-resolution": ["1e-6", "1e-15", "1"],
    "--max-concurrency": ["1", "2"], "--slo": ["ttft=0.2", "ttft=2,tpot=1", "x=1"],
    "--cost-model": ["llama-3-8b/h100-sxm", "llama-3-70b/a100-80gb", "x/y"],
    "--mfu": ["0.4", "1e-6"], "--step-overhead": ["0", "3600"], "--tp": ["1", "2", "8"],
    "--gpu-memory-utilization": ["0.9", "0.01"], "--activation-reserve": ["3", "1e6"],
    "--prefix-caching": None, "--lpm-threshold": ["1", "128"],
    "--schedule-conservativeness": ["1", "0.1"], "--prefill-interval": ["1", "3"],
}


def trace_case(rng: random.Random, small: bool, command: str) -> Case:
    text = _trace_base(rng)
    data = mutate(rng, text, True, small) if rng.random() < 0.6 else text.encode()
    case = Case(command, [command, "{dir}/trace.jsonl"], {"trace.jsonl": data})
    if command == "replay":
        for flag in rng.sample(list(REPLAY_FLAGS), rng.choice((0, 1, 2, 3, 4))):
            ordinary = REPLAY_FLAGS[flag]
            if ordinary is None:
                case.argv.append(flag)
            else:
                _flag(rng, case.argv, flag, _flag_value(rng, ordinary, 0.2))
        if rng.random() < 0.2:
            case.argv += rng.choice((["--json"], ["--requests"], ["--events", "{dir}/ev.jsonl"],
                                     ["--requests-csv", "{dir}/r.csv"]))
    return case


def make_case(rng: random.Random, command: str, small: bool = False,
              stdin: bool = True, fmt: str | None = None) -> Case:
    """A random case of `command`; `small` keeps inputs and workloads small (the
    in-process tests), `stdin` False never reads standard input, `fmt` fixes
    `convert`'s `--from`."""
    if command == "convert":
        return convert_case(rng, small, stdin, fmt)
    if command == "generate":
        return generate_case(rng, small)
    if command == "cost":
        return cost_case(rng, small)
    return trace_case(rng, small, command)


# --- running and judging -----------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    case: Case
    status: int | None          # None: it hung
    seconds: float
    problem: str | None = None  # the group a failure belongs to, None when it passed


_FRAME = re.compile(r'File "([^"]*)", line (\d+), in (\S+)')


def traceback_cause(stderr: str) -> str:
    """`ExceptionType at scheduler_sim/...py:LINE (function)` of the last traceback."""
    tail = stderr[stderr.rfind("Traceback (most recent call last)"):]
    lines = [line for line in tail.splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if re.match(r"^[\w.]+(: |$)", line)), "?")
    kind = last.split(":", 1)[0]
    where = "outside the package"
    for m in _FRAME.finditer(tail):
        path = m.group(1)
        if "scheduler_sim" in path:
            where = f"{path[path.rfind('scheduler_sim'):]}:{m.group(2)} ({m.group(3)})"
    return f"{kind} at {where}"


def judge(case: Case, status: int | None, stderr: str, written: bytes | None) -> str | None:
    """Why a finished case failed, or None when it passed."""
    if status is None:
        return "hang"
    if "Traceback (most recent call last)" in stderr:
        return "traceback: " + traceback_cause(stderr)
    if status not in STATUSES.get(case.command, DEFAULT_STATUSES):
        last = (stderr.strip().splitlines() or ["(no message)"])[-1]
        return f"exit status {status}: {last[:100]}"
    if status == 0 and written is not None:
        sys.path.insert(0, ROOT)
        from scheduler_sim.io.trace import parse_trace
        from scheduler_sim.records.errors import TraceError
        try:
            parse_trace(written, "written")
        except TraceError as exc:
            first = re.sub(r"\d+", "N", exc.problems[0].split(": ", 1)[-1])[:100]
            return f"wrote a trace validate refuses: {first}"
    return None


def _limit_memory() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def run_subprocess(case: Case, timeout: float) -> Outcome:
    """Run one case in a child process of its own session; kill the session on timeout."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as directory:
        argv = case.materialise(directory)
        env = dict(os.environ, PYTHONPATH=ROOT)
        out_path = os.path.join(directory, "stdout")
        start = time.monotonic()
        with open(out_path, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "scheduler_sim", *argv], cwd=directory,
                                    stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE,
                                    env=env, start_new_session=True, preexec_fn=_limit_memory)
            try:
                _, err = proc.communicate(case.stdin, timeout=timeout)
                status: int | None = proc.returncode
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                status, err = None, b""
        seconds = time.monotonic() - start
        written = None
        if status == 0 and case.writes:
            path = out_path if case.writes == "-" else os.path.join(directory, case.writes)
            with open(path, "rb") as handle:
                written = handle.read()
        stderr = err.decode("utf-8", "replace")
        return Outcome(case, status, seconds, judge(case, status, stderr, written))


def draw_cases(seed: int, runs: int, commands: tuple[str, ...]) -> list[Case]:
    """The cases of a run: the same seed and runs give the same cases."""
    rng = random.Random(seed)
    weights = [WEIGHTS[COMMANDS.index(c)] for c in commands]
    return [make_case(rng, rng.choices(commands, weights)[0]) for _ in range(runs)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3000, help="cases to run (default: 3000)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the cases (default: 1)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds before a case counts as a hang (default: 10)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="cases run at once (default: the CPUs)")
    parser.add_argument("--commands", default=",".join(COMMANDS),
                        help=f"commands to fuzz (default: {','.join(COMMANDS)})")
    parser.add_argument("--examples", type=int, default=2,
                        help="example command lines shown per failure group (default: 2)")
    args = parser.parse_args(argv)
    commands = tuple(c for c in args.commands.split(",") if c)
    unknown = [c for c in commands if c not in COMMANDS]
    if unknown:
        parser.error(f"unknown command(s) {', '.join(unknown)} (known: {', '.join(COMMANDS)})")
    cases = draw_cases(args.seed, args.runs, commands)
    started = time.monotonic()
    outcomes: list[Outcome] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_subprocess, c, args.timeout) for c in cases]
        for i, future in enumerate(concurrent.futures.as_completed(futures), start=1):
            outcomes.append(future.result())
            if i % 250 == 0:
                print(f"... {i}/{len(cases)} cases, {time.monotonic() - started:.0f} s",
                      file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    by_command: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for o in outcomes:
        by_command[o.case.command]["hang" if o.status is None else f"exit {o.status}"] += 1
    groups: dict[str, list[Outcome]] = collections.defaultdict(list)
    for o in outcomes:
        if o.problem:
            groups[o.problem].append(o)
    tracebacks = sum(len(v) for k, v in groups.items() if k.startswith("traceback"))
    hangs = len(groups.get("hang", []))
    others = sum(len(v) for k, v in groups.items()
                 if not k.startswith("traceback") and k != "hang")
    print(f"fuzz_cli: seed {args.seed}, {len(outcomes):,} runs in {elapsed:.0f} s "
          f"({args.jobs} at once, timeout {args.timeout:g} s)")
    for command in commands:
        counts = by_command.get(command, collections.Counter())
        detail = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
        print(f"  {command:9} {sum(counts.values()):6,} runs: {detail}")
    print(f"tracebacks: {tracebacks:,} ({sum(1 for k in groups if k.startswith('traceback'))} "
          f"causes)")
    print(f"hangs: {hangs:,}")
    print(f"other failures (exit status, refused trace): {others:,}")
    slowest = max(outcomes, key=lambda o: o.seconds, default=None)
    if slowest is not None:
        print(f"slowest case: {slowest.seconds:.1f} s: {slowest.case.shown()}")
    for key, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"\n{len(items):,} x {key}")
        for o in items[:args.examples]:
            print(f"    {o.case.shown()}")
    return 0 if not groups else 1


if __name__ == "__main__":
    sys.exit(main())
