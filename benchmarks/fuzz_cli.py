#!/usr/bin/env python3
"""Fuzz the command line: wild flags, mutated inputs, hostile plugins, signals (stdlib only).

    python3 benchmarks/fuzz_cli.py [--runs 3000] [--seed 1] [--timeout 10] [--jobs 2]
        [--surfaces cli,trace-plugin,plugin-fault,output-path,signal,sweep-file,huge-time]
        [--commands convert,generate,cost,validate,replay] [--examples 2]

Every case runs in a child process of its own (`python3 -m scheduler_sim`, or
`python3 -m pytest` with only the package's plugin, from this checkout, with a
2 GiB address-space limit, no bytecode written and TMPDIR a folder of its own),
in a new session and a folder of its own, under a timeout, so a hang is
counted, not waited for. `--surfaces` picks what is fuzzed (default: all,
weighted); the same seed, runs, surfaces and commands give the same cases.

`cli` (the first version of this fuzzer; `--surfaces cli` draws exactly its
cases): a command line of `convert` (every `--from` format), `generate`,
`cost`, `validate` or `replay` (`--commands`), with flag values drawn from a
pool of awkward ones (huge, tiny, negative, inf, nan, non-numeric, empty,
other scripts' digits, bytes that are not UTF-8) and inputs made from small
valid files and then mutated (truncated, nested deep, numbers swapped for huge
or tiny ones, wrong types, binary bytes, a BOM, CRLF or bare CR line ends, an
unclosed quote, a field past the CSV size limit, a line repeated thousands of
times, a file of another format). It passes when the child exits 0 or 2
(`replay` also 1, a stalled run), and, when it wrote a trace (`convert`,
`generate`), the project's own parser accepts that trace.

The audit's surfaces:

- `trace-plugin`: a trace whose config record names a plugin policy that
  creates `PWNED` in the folder when imported (`evil.py:X`, in a list, last in
  a list, `evil:X` as MODULE:CLASS, `evil:system`, `os:system`, an absolute
  path, `sub/../evil.py:X`, `../FOLDER/evil.py:X`, `plugins/evil.py:X`, or
  only an `expect` record's `policy`), read by `validate`, `replay` (alone,
  with `--policy continuous`, with `--policy evil.py:X`), `check`, `sweep`,
  `pytest --collect-only -q DIR` and `pytest -q DIR`. Without the opt-in
  (`--allow-trace-plugins`, for pytest its option of that name) the marker
  must not exist afterwards; with it, or named by `--policy`, the plugin must
  run (marker written, exit 0; for a name that is no policy, exit 2, pytest 1
  or 2; collecting need not import it).
- `plugin-fault`: a plugin policy given by `--policy bad.py:P` (or `bad:P`)
  that at import, in `__init__`, in `add`, in every `schedule` or in the
  N-th one raises ValueError, SystemExit(0) or (1), KeyboardInterrupt,
  GeneratorExit or BaseException, raises an exception whose `__str__`
  raises or whose message has line breaks and escapes, calls `os._exit(0)`,
  sends itself SIGKILL, returns a garbage plan, or rewrites a request's
  `output_tokens`, `prompt_tokens`, `status` or `arrival`; run as a lone
  engine, with `--replicas 3`, `--dp-lockstep --replicas 2`,
  `--prefill-replicas 1 --decode-replicas 1`, `-j 2` beside `continuous`,
  `sweep` with and without `-j 2`, `check`, and `pytest --allow-trace-plugins`
  over a trace naming it. The plugin creates `FIRED` just before it
  misbehaves; then the run must exit 3 with one line on standard error,
  `scheduler-sim: policy error: ... policy 'SPEC' ...`, and no output file (for
  pytest: exit 1 or 2, naming the policy; `check` and pytest must never pass).
  A plugin that never misbehaved (its N-th call never came) must exit 0. A
  plugin that ends the tool's own process (`os._exit(0)`, SIGKILL to itself,
  outside `-j 2`, or at import, which happens before workers start) leaves
  it with the status it gave (0, killed by SIGKILL)
  and maybe a temporary output file: no code runs after that; in a `-j 2`
  worker it is exit 3 and one line naming the policy (`the worker replaying
  policy '...'`). A
  plugin that sleeps forever is not generated: it is the user's own loop.
- `output-path`: `replay`, `replay` with a plugin, `check`, `convert`,
  `generate` (its `empirical:` file), `sweep` (its grid file) and `sweep
  merge` with an output naming one of their inputs by any spelling (the same
  name, absolute, `./`, `sub/../`, `missing/../`, a double slash, a symlink, an
  absolute symlink, a chain of two, a hard link, a symlinked folder), the
  input given by such a spelling and the output by its name, two outputs
  naming one file, or an empty path. It must exit 2 and leave every file of
  the folder byte for byte as it was, and write nothing.
- `signal`: SIGINT or SIGTERM, to the process or to its group, 0 to 1.5 s after
  `replay` (two policies, `-j 1` or `-j 2`), `sweep -j 2`, `check` or
  `generate` started (Python's start-up included), or 0 to 0.8 s after its
  first temporary output file appeared; some outputs exist beforehand. It must
  end 130 / 143 (or be killed by the signal's default action, before or after
  the program ran) leaving every output as it was, or end normally having
  written them. A KeyboardInterrupt traceback with no frame of the package
  (the interpreter was still starting) is not counted.
- `sweep-file`: real `sweep --shard K/2 --jsonl` outputs of a small sweep,
  mutated (header fields removed, retyped, `"sweep": true`, `configurations`
  of 10**400, nested 100,000 deep, rows missing fields or with bad indices,
  lines truncated, dropped, doubled, swapped, a 3 MB line, text mutations),
  given to `sweep merge`; and grid files mutated likewise (wrong types,
  unknown options, empty, duplicated or 100,000-value lists, a grid of a
  million configurations of which `--shard K/1000000` runs one, not an
  object) given to `sweep --grid-file`. It must exit 0, 1 or 2 (the million
  configurations, each resolved before the shard runs, get 90 s).
- `huge-time`: traces in `tick`, `s` or `ms` whose arrivals, deadlines,
  cancellations and preemptions reach 1e15 in the trace's unit (and huge
  `waiting_timeout`, `release_delay`, `batch_window`), under every policy,
  with and without `--cost-model llama-3-8b/h100-sxm`, with one of
  `--report`, `--perfetto`, `--events`, `--requests-csv`, `--json --requests`.
  It must exit 0, 1 or 2, and `--perfetto`, `--events` and `--json` outputs
  of a run that exits 0 must be strict JSON (no NaN or Infinity).

Every case of every surface also fails when it prints a traceback (for
pytest, also pytest's own traceback through the package's code, or an
INTERNALERROR), hangs, leaves a process of its session alive 3 s after it
ended (an orphan, killed then), changes or removes a file that was there
before it ran and is not one of its outputs (an input replaced), or leaves a
temporary file (`.*.tmp` in its folder, anything in its TMPDIR) unless it
was killed by SIGKILL. The report gives the runs per command (`cli`) and per
surface by exit status, the totals (tracebacks, hangs, orphans, inputs
replaced, temporary files left, other failures), then the failures grouped:
tracebacks by cause (exception type and the innermost frame of the
package), the others by surface, what the case is about and what went
wrong, each with a count, a breakdown by variant (the mode, the spelling,
the unit) and example commands. The exit status is 0 when every case
passed, 1 otherwise.

`tests/test_edge_inputs.py` draws its in-process fuzz cases from `make_case`
here (`small=True`: inputs small enough to run a few hundred cases in a few
seconds); `tests/test_fuzz_cli.py` runs a few fixed cases of each audit
surface through `run_subprocess`.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import random
import re
import signal
import stat
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
    (relative to the folder; `-` when the trace goes to standard output).

    The surfaces other than `cli` say more about what must hold (`judge_surface`):
    `module` is what `python -m` runs (`scheduler_sim` or `pytest`); `templated`
    files have `{dir}` and `{base}` (the folder's name) filled in too; `links` are
    symbolic (`("symlink", target)`) or hard (`("hardlink", target)`) links and
    `dirs` folders made before it runs; `outputs` the files it may write (every
    other file is an input: its bytes must not change); `statuses` the exit
    statuses that pass; `marker` a file that must not exist afterwards (or must,
    with `marker_expected`); `fired` a file a misbehaving plugin creates just before
    it misbehaves, after which the run must end in a policy error naming
    `policy_spec`; `unchanged`: nothing may be written at all; `interrupt` (a signal,
    a delay in seconds, `process` or `group`) is sent while it runs, the delay
    counted from its start or, with `interrupt_started`, from the moment its first
    temporary output file appears; `json_outputs`
    must be strict JSON (`-`: standard output) or JSON lines (`.jsonl`) when it
    exits 0; `note` is shown with the command line in a report, `label` groups
    its failures, `variant` (a mode, a unit) breaks a group of failures down."""

    command: str
    argv: list[str]
    files: dict[str, bytes] = dataclasses.field(default_factory=dict)
    stdin: bytes = b""
    writes: str | None = None
    surface: str = "cli"
    module: str = "scheduler_sim"
    templated: tuple[str, ...] = ()
    links: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    dirs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    statuses: tuple[int, ...] | None = None
    marker: str | None = None
    marker_expected: bool | None = None
    fired: str | None = None
    policy_spec: str | None = None
    unchanged: bool = False
    interrupt: tuple[int, float, str] | None = None
    interrupt_started: bool = False
    json_outputs: tuple[str, ...] = ()
    label: str = ""
    note: str = ""
    variant: str = ""
    # A case whose work is bounded but long (a million configurations to resolve):
    # the seconds it is given before it counts as a hang, past --timeout.
    slow: float = 0.0

    def materialise(self, directory: str) -> list[str]:
        """Write the files into `directory`; return argv with the folder filled in."""
        base = os.path.basename(directory)
        for name in self.dirs:
            os.makedirs(os.path.join(directory, name), exist_ok=True)
        for name, data in self.files.items():
            if name in self.templated:
                data = data.replace(b"{dir}", directory.encode()).replace(b"{base}",
                                                                          base.encode())
            path = os.path.join(directory, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)
        for name, (kind, target) in self.links.items():
            path = os.path.join(directory, name)
            if kind == "symlink":
                os.symlink(target.replace("{dir}", directory), path)
            else:
                os.link(os.path.join(directory, target), path)
        return [a.replace("{dir}", directory).replace("{base}", base) for a in self.argv]

    def shown(self) -> str:
        """The command line, shortened for a report."""
        parts = [] if self.module == "scheduler_sim" else [f"python -m {self.module}"]
        for a in self.argv:
            text = a if len(a) <= 40 else a[:30] + f"...({len(a)} chars)"
            parts.append("''" if not text else ascii(text)[1:-1]
                         if not text.isprintable() or " " in text else text)
        extra = ", ".join(f"{n}: {len(d):,} B" for n, d in self.files.items())
        links = ", ".join(f"{n} -> {t}" if k == "symlink" else f"{n} = {t}"
                          for n, (k, t) in self.links.items())
        extra = "; ".join(x for x in (extra, links, self.note) if x)
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
    """`cost`: swap against recompute (--seq), or one dispatch priced term by term
    (--prefill, --decode, --tp, --calibration), or both (a usage error)."""
    case = Case("cost", ["cost"])
    for flag, ordinary in (("--model", ["llama-3-8b", "llama-3-70b", "mixtral-8x7b",
                                        "deepseek-v2-lite", "glm-5.2-fp8"]),
                           ("--gpu", ["h100-sxm", "a100-80gb", "h200", "b200"])):
        if rng.random() < 0.97:
            _flag(rng, case.argv, flag, _flag_value(rng, ordinary, 0.2))
    if rng.random() < 0.5:
        for flag, ordinary in (("--seq", ["8192", "1", "131072", "1000000000", "1000000001",
                                          "1" + "0" * 154, "0"]),
                               ("--mfu", ["0.4", "1", "0.001", "1e-6", "1e-320"])):
            if rng.random() < (0.97 if flag != "--mfu" else 0.5):
                _flag(rng, case.argv, flag, _flag_value(rng, ordinary, 0.2))
    if rng.random() < 0.6 or "--seq" not in case.argv:
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            _flag(rng, case.argv, "--prefill", _flag_value(
                rng, ["512", "1", "2048@4000", "10000000@10000000", "0", "3@", "@5", "1e3",
                      "-4", "5@-1"], 0.2))
        for _ in range(rng.choice((0, 1, 1, 2))):
            _flag(rng, case.argv, "--decode", _flag_value(
                rng, ["32@1024", "1@0", "256@4096", "3", "0@5", "10000001@1"], 0.2))
        for flag, ordinary in (("--tp", ["1", "2", "8", "9", "0"]),
                               ("--calibration", ["none", "h100-sxm", "a100-80gb",
                                                  "{dir}/missing.json"])):
            if rng.random() < 0.3:
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
    "--calibration": ["none", "h100-sxm", "a100-80gb", "{dir}/missing.json"],
    "--model": ["qwen3-30b-a3b", "llama-2-7b", "nope"], "--gpu": ["h100-sxm", "l40s", "nope"],
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


# --- the surfaces of the audit -----------------------------------------------------
#
# Each generator below returns a Case whose fields say what must hold (see `Case`);
# `judge_surface` applies them. Keyword arguments fix a choice the generator would
# otherwise draw, so that a test can ask for one case it needs.

SURFACES = ("cli", "trace-plugin", "plugin-fault", "output-path", "signal", "sweep-file",
            "huge-time")
NEW_SURFACES = SURFACES[1:]
SURFACE_WEIGHTS = {"cli": 40, "trace-plugin": 12, "plugin-fault": 24, "output-path": 12,
                   "signal": 12, "sweep-file": 12, "huge-time": 10}
# pytest from this checkout with only the package's plugin (no other installed plugin,
# no cache folder written into the case's folder)
PYTEST = ["-p", "no:cacheprovider", "-p", "scheduler_sim.cli.pytest_plugin"]
INTERRUPTED = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _jsonl(records: list) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                   for r in records).encode()


def small_trace(rng: random.Random, config: dict | None = None, expect: bool = True,
                extra: list | None = None) -> bytes:
    """A trace of 3 to 8 small requests that any sane policy completes, ending with
    `{"type":"expect","completed":N}` (and `extra` records)."""
    n = rng.randint(3, 8)
    records: list = [{"type": "config", "block_size": 4, "num_blocks": 64, "token_budget": 32,
                      **(config or {})}]
    for i in range(n):
        records.append({"type": "request", "id": f"r{i}", "arrival": rng.randint(0, 6),
                        "prompt_tokens": rng.randint(1, 24), "output_tokens": rng.randint(1, 10)})
    if expect:
        records.append({"type": "expect", "completed": n})
    return _jsonl(records + (extra or []))


def workload_trace(rng: random.Random, requests: int, expect: bool = False) -> bytes:
    """A trace of `requests` requests, one every 0 to 3 ticks: a replay that takes a
    good fraction of a second per thousand requests."""
    records: list = [{"type": "config", "block_size": 16, "num_blocks": 2048}]
    t = 0
    for i in range(requests):
        t += rng.choice((0, 1, 1, 2, 3))
        records.append({"type": "request", "id": f"w{i}", "arrival": t,
                        "prompt_tokens": rng.randint(16, 600),
                        "output_tokens": rng.randint(8, 200)})
    if expect:
        records.append({"type": "expect", "completed": requests})
    return _jsonl(records)


# 1. Trace-borne plugins -------------------------------------------------------------

EVIL = b'''"""Importing this file is what a trace alone must never make happen."""
open("{dir}/PWNED", "w").close()

from scheduler_sim.policies.continuous import ContinuousPolicy


class X(ContinuousPolicy):
    """Continuous batching, from a file that leaves a marker when it is imported."""
'''

# how the trace's config names the plugin: (policy value, loadable with the opt-in)
TRACE_PLUGIN_SPELLINGS: dict[str, tuple[object, bool]] = {
    "FILE.py:CLASS": ("evil.py:X", True),
    "a list": (["evil.py:X", "continuous"], True),
    "last of a list": (["continuous", "evil.py:X"], True),
    "MODULE:CLASS": ("evil:X", True),
    "MODULE:not-a-policy": ("evil:system", False),
    "os:system": ("os:system", False),
    "an absolute path": ("{dir}/evil.py:X", True),
    "a path through ..": ("sub/../evil.py:X", True),
    "a path up and back": ("../{base}/evil.py:X", True),
    "a subfolder": ("plugins/evil.py:X", True),
    "an expect record only": (None, True),
}
TRACE_PLUGIN_RUNS = ("validate", "replay", "replay --policy continuous",
                     "replay --policy evil.py:X", "check", "sweep", "pytest --collect-only",
                     "pytest")


def trace_plugin_case(rng: random.Random, spelling: str | None = None,
                      run: str | None = None, opt_in: bool | None = None) -> Case:
    """A trace whose config record names a plugin that leaves a marker when imported,
    read by one command: the marker must not appear unless the plugin was allowed
    (`--allow-trace-plugins`) or named on the command line."""
    spelling = spelling or rng.choice(list(TRACE_PLUGIN_SPELLINGS))
    run = run or rng.choice(TRACE_PLUGIN_RUNS)
    policy, loadable = TRACE_PLUGIN_SPELLINGS[spelling]
    extra = []
    if policy is None:  # the config replays continuous; an expectation names the plugin
        policy = "continuous"
        extra = [{"type": "expect", "policy": "evil.py:X", "completed": 1}]
    trace = small_trace(rng, {"policy": policy}, extra=extra)
    can_opt_in = run not in ("validate", "replay --policy evil.py:X")
    if opt_in is None:
        opt_in = can_opt_in and rng.random() < 0.4
    files = {"trace.jsonl": trace, "evil.py": EVIL}
    if spelling == "a subfolder":
        files["plugins/evil.py"] = EVIL
    case = Case(run.split()[0], [], files, surface="trace-plugin",
                templated=tuple(files), dirs=("sub",), marker="PWNED",
                label=run + (" --allow-trace-plugins" if opt_in else ""), variant=spelling,
                note=f"config policy {json.dumps(policy)}")
    flag = ["--allow-trace-plugins"] if opt_in else []
    pytest = run.startswith("pytest")
    if pytest:
        case.module = case.command = "pytest"
        case.argv = PYTEST + (["--collect-only"] if "collect" in run else []) + ["-q", "{dir}"]
    else:
        case.argv = [run.split()[0], "{dir}/trace.jsonl"]
        if run == "sweep":
            case.argv += ["--grid", "num_blocks=48,64"]
        if run.startswith("replay --policy"):
            case.argv += run.split()[1:]
    case.argv += flag
    if run == "validate":
        case.statuses, case.marker_expected = (0, 2), False
    elif run == "replay --policy continuous":  # the flag replaces the trace's policy
        case.statuses = (0,) if loadable else (0, 2)  # (a name of no policy may be refused)
        case.marker_expected = None if opt_in else False
    elif run == "replay --policy evil.py:X":  # named on the command line: it runs
        case.statuses = (0,) if loadable else (0, 2)
        case.marker_expected = True if loadable else None
    elif not opt_in:
        case.statuses, case.marker_expected = ((0, 1, 2, 5) if pytest else (0, 1, 2)), False
    elif run == "pytest --collect-only":  # collecting need not import the plugin
        case.statuses = (0,) if loadable else (0, 1, 2)
    elif extra:  # the trace replays continuous; only an expectation names the plugin
        case.statuses = (0, 1)
    elif loadable:
        case.statuses, case.marker_expected = (0,), True
    else:  # allowed, but not a policy
        case.statuses = (1, 2) if pytest else (2,)
    return case


# 2. Misbehaving plugins ---------------------------------------------------------------

PLUGIN_FAULT = '''"""A plugin policy that misbehaves: @LABEL@."""
import os
import signal

from scheduler_sim.policies.continuous import ContinuousPolicy

FIRED = "{dir}/FIRED"
CALLS = [0]


class Unprintable(Exception):
    """An exception that cannot be shown."""

    def __str__(self):
        raise RuntimeError("__str__ failed")

    __repr__ = __str__


class Unlistable(list):
    """A list whose iteration fails."""

    def __iter__(self):
        raise RuntimeError("no iterating")

    def __len__(self):
        raise RuntimeError("no length")


class Uncomparable:
    """A number that cannot be compared or converted."""

    def __index__(self):
        raise RuntimeError("no index")

    __int__ = __index__

    def __lt__(self, other):
        raise RuntimeError("no comparing")

    __le__ = __gt__ = __ge__ = __eq__ = __ne__ = __lt__
    __hash__ = object.__hash__


def misbehave(policy, req):
    """Leave the FIRED marker, then misbehave."""
    open(FIRED, "w").close()
    @ACTION@


def first_request(policy):
    """The earliest request given to `add` that has not ended yet, else None."""
    for req in policy.seen:
        if int(req.status) <= 4:  # waiting, running, preempted, waiting for KV
            return req
    return None

@IMPORT@

class P(ContinuousPolicy):
    """Continuous batching until it misbehaves."""

    def __init__(self, options, view):
        super().__init__(options, view)
        self.seen = []
        @INIT@

    def add(self, req):
        self.seen.append(req)
        @ADD@
        super().add(req)

    def schedule(self, now):
        CALLS[0] += 1
        @SCHEDULE@
        return super().schedule(now)
'''

FAULTS = {
    "ValueError": 'raise ValueError("plugin fault")',
    "SystemExit(0)": "raise SystemExit(0)",
    "SystemExit(1)": "raise SystemExit(1)",
    "KeyboardInterrupt": "raise KeyboardInterrupt",
    "GeneratorExit": "raise GeneratorExit",
    "BaseException": 'raise BaseException("plugin fault")',
    "an exception whose __str__ raises": "raise Unprintable()",
    "a message of several lines": r'raise ValueError("one\ntwo\r\x1b[31mthree")',
    "os._exit(0)": "os._exit(0)",
    "SIGKILL to itself": "os.kill(os.getpid(), signal.SIGKILL)",
}
GARBAGE_PLANS = [
    "None", "42", "'abc'", "[None]", "[(None, 1)]", "[(req, 0)]", "[(req, -1)]",
    "[(req, 10 ** 9)]", "[(req, 1.5)]", "[(req, float('nan'))]", "[(req, '1')]",
    "[(req, 10 ** 400)]", "[(req, 1, 2)]", "[(req,)]", "[(req, 1), (req, 1)]", "{req: 1}",
    "[(object(), 1)]", "Unlistable([(req, 1)])", "[(req, Uncomparable())]",
]
REWRITES = {
    "output_tokens": ["0", "-1", "10 ** 9", "None", "'7'", "req.output_tokens + 1"],
    "prompt_tokens": ["0", "-3", "10 ** 9", "None"],
    "status": ["'finished'", "None", "42"],
    "arrival": ["-1", "10 ** 18", "float('nan')", "None"],
}
FAULT_WHERE = ("import", "__init__", "add", "schedule", "after N calls")
FAULT_MODES = ("lone engine", "--replicas 3", "--dp-lockstep --replicas 2",
               "--prefill-replicas 1 --decode-replicas 1", "-j 2, two policies", "sweep",
               "sweep -j 2", "check", "pytest")
REPLAY_OUTPUTS = (("--events", "ev.jsonl"), ("--requests-csv", "r.csv"),
                  ("--perfetto", "p.json"), ("--report", "r.html"))


def plugin_source(action: str, where: str, after: int = 1, label: str = "") -> bytes:
    """The text of a plugin policy `P` that runs `action` (a statement in a function
    of `policy` and `req`) at `where`: at import, in `__init__`, in `add`, in every
    `schedule` or in the `after`-th one."""
    hooks = {"@IMPORT@": "", "@INIT@": "pass", "@ADD@": "pass", "@SCHEDULE@": "pass"}
    call = "misbehave(self, req)"
    plan = action.startswith("return ")
    if where == "import":
        hooks["@IMPORT@"] = "\nmisbehave(None, None)\n"
    elif where == "__init__":
        hooks["@INIT@"] = "misbehave(self, None)"
    elif where == "add":
        hooks["@ADD@"] = call
    else:
        test = "True" if where == "schedule" else f"CALLS[0] == {after}"
        body = (f"return {call}" if plan else
                call if not action.startswith("req.") else f"if req is not None:\n"
                f"                {call}")
        hooks["@SCHEDULE@"] = (f"if {test}:\n            req = first_request(self)\n"
                               f"            {body}")
    text = PLUGIN_FAULT.replace("@LABEL@", label).replace("@ACTION@", action)
    for key, value in hooks.items():
        text = text.replace(key, value)
    return text.encode()


def plugin_fault_case(rng: random.Random, fault: str | None = None, where: str | None = None,
                      mode: str | None = None) -> Case:
    """A plugin policy named on the command line (for pytest, by a trace whose reader
    opted in) that misbehaves once, in one mode: once it has, the run must end with
    exit 3 and one line naming the policy (pytest: a failed run naming it)."""
    where = where or rng.choice(FAULT_WHERE)
    if fault is None:
        kinds = ["fault"] * 3 + (["plan", "rewrite"] if where not in ("import", "__init__")
                                 else [])
        kind = rng.choice(kinds)
        if kind == "plan" and where == "add":
            kind = "rewrite"
        if kind == "fault":
            fault = rng.choice(list(FAULTS))
        elif kind == "plan":
            fault = "plan " + rng.choice(GARBAGE_PLANS)
        else:
            field = rng.choice(list(REWRITES))
            fault = f"req.{field} = {rng.choice(REWRITES[field])}"
    if fault in FAULTS:
        action = FAULTS[fault]
    elif fault.startswith("plan "):
        action = "return " + fault[5:]
    else:
        action = fault
    after = rng.randint(2, 30)
    mode = mode or rng.choice(FAULT_MODES)
    spec = rng.choice(("bad.py:P", "bad.py:P", "bad:P"))
    at = where if where != "after N calls" else f"schedule call {after}"
    if fault.startswith("plan "):
        label = "returns a garbage plan"
    elif fault.startswith("req."):
        label = "rewrites req." + fault[4:].split()[0]
    else:
        label = fault
    case = Case("replay", [], {"bad.py": plugin_source(action, where, after, fault)},
                surface="plugin-fault", templated=("bad.py", "trace.jsonl"), fired="FIRED",
                policy_spec=spec, label=label, note=f"{fault} in {at}; {mode}")
    case.variant = mode
    if mode == "pytest":
        case.files["trace.jsonl"] = small_trace(rng, {"policy": spec})
        case.module, case.command = "pytest", "pytest"
        case.argv = PYTEST + ["-q", "{dir}", "--allow-trace-plugins"]
        case.statuses = (0,)
        return case
    case.files["trace.jsonl"] = small_trace(rng)
    trace = "{dir}/trace.jsonl"
    if mode.startswith("sweep"):
        case.command = "sweep"
        case.argv = ["sweep", trace, "--grid", "num_blocks=48,64", "--policy", spec]
        case.argv += ["-j", "2"] if mode.endswith("-j 2") else []
        outputs = (("--csv", "s.csv"), ("--jsonl", "s.jsonl"))
    elif mode == "check":
        case.command = "check"
        case.argv = ["check", trace, "--policy", spec]
        outputs = (("--junit", "j.xml"),)
    else:
        policies = ["--policy", spec]
        if mode.startswith("-j 2"):
            pair = [spec, "continuous"]
            rng.shuffle(pair)
            policies = ["--policy", pair[0], "--policy", pair[1], "-j", "2"]
        elif mode != "lone engine":
            policies += mode.split()
        case.argv = ["replay", trace] + policies
        outputs = REPLAY_OUTPUTS
    if rng.random() < 0.3:
        flag, name = rng.choice(outputs)
        case.argv += [flag, "{dir}/" + name]
        case.outputs = (name,)
    case.statuses = (0,)
    return case


# 3. Output paths ------------------------------------------------------------------

PLUGIN_OK = b'''"""A plugin policy that behaves: continuous batching."""
from scheduler_sim.policies.continuous import ContinuousPolicy


class P(ContinuousPolicy):
    """Continuous batching under another name."""
'''
GRID = b'{"num_blocks": [48, 64], "policy": ["serial", "continuous"]}\n'
MOONCAKE = (b'{"timestamp": 0, "input_length": 12, "output_length": 3, "hash_ids": [0]}\n'
            b'{"timestamp": 40, "input_length": 30, "output_length": 5, "hash_ids": [1]}\n')

_SHARDS: list[bytes] = []


def real_shards() -> list[bytes]:
    """The two JSONL shards (`--shard 0/2`, `1/2`) of a small real sweep, made once by
    the command line of this checkout (the trace named `trace.jsonl`)."""
    if not _SHARDS:
        with tempfile.TemporaryDirectory(prefix="fuzz-shards-") as directory:
            with open(os.path.join(directory, "trace.jsonl"), "wb") as handle:
                handle.write(small_trace(random.Random(0)))
            for k in (0, 1):
                subprocess.run([sys.executable, "-m", "scheduler_sim", "sweep", "trace.jsonl",
                                "--grid", "num_blocks=12,24", "--grid", "token_budget=16,64",
                                "--policy", "serial", "--policy", "continuous", "--shard",
                                f"{k}/2", "--jsonl", f"s{k}.jsonl"], cwd=directory,
                               env=dict(os.environ, PYTHONPATH=ROOT), check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                with open(os.path.join(directory, f"s{k}.jsonl"), "rb") as handle:
                    _SHARDS.append(handle.read())
    return _SHARDS


# command: (argv, <NAME> standing for the spelling of input NAME; its output flags)
OUTPUT_COMMANDS = {
    "replay": (["replay", "<trace.jsonl>"],
               ["--events", "--requests-csv", "--report", "--perfetto"]),
    "replay (plugin)": (["replay", "<trace.jsonl>", "--policy", "<p.py>:P"],
                        ["--events", "--requests-csv", "--report", "--perfetto"]),
    "check": (["check", "<trace.jsonl>"], ["--junit"]),
    "convert": (["convert", "--from", "mooncake", "<in.jsonl>"], ["-o"]),
    "generate": (["generate", "--seed", "1", "--requests", "5", "--prompt-len",
                  "empirical:<lens.jsonl>"], ["-o"]),
    "sweep": (["sweep", "<trace.jsonl>", "--grid-file", "<g.json>"],
              ["--csv", "--jsonl", "--report"]),
    "sweep merge": (["sweep", "merge", "<s0.jsonl>", "<s1.jsonl>"], ["--csv", "--jsonl"]),
}
_INPUT = re.compile(r"<([^<>]+)>")
ALIASES = ("the same name", "an absolute path", "./NAME", "sub/../NAME", "missing/../NAME",
           "a double slash", "a symlink", "a symlink to its absolute path", "a symlink chain",
           "a hard link", "a symlinked folder")


def _alias(rng: random.Random, case: Case, name: str, kind: str | None = None) -> str:
    """Another spelling of the file `name` in the case's folder (links made as needed)."""
    kind = kind or rng.choice(ALIASES)
    if kind == "an absolute path":
        return "{dir}/" + name
    if kind == "./NAME":
        return "./" + name
    if kind == "sub/../NAME":
        case.dirs += ("sub",)
        return "sub/../" + name
    if kind == "missing/../NAME":
        return "missing/../" + name
    if kind == "a double slash":
        return "{dir}//" + name
    if kind == "a symlink":
        case.links["ln-" + name] = ("symlink", name)
        return "ln-" + name
    if kind == "a symlink to its absolute path":
        case.links["abs-" + name] = ("symlink", "{dir}/" + name)
        return "abs-" + name
    if kind == "a symlink chain":
        case.links["ln-" + name] = ("symlink", name)
        case.links["ln2-" + name] = ("symlink", "ln-" + name)
        return "ln2-" + name
    if kind == "a hard link":
        if name not in case.files:  # a hard link needs the file: it is there, and stays
            case.files[name] = b"an older file of this name\n"
        case.links["hl-" + name] = ("hardlink", name)
        return "hl-" + name
    if kind == "a symlinked folder":
        case.links["here"] = ("symlink", ".")
        return "here/" + name
    return name


def output_path_case(rng: random.Random, command: str | None = None,
                     collision: str | None = None, alias: str | None = None) -> Case:
    """A command whose output names one of its inputs, another of its outputs, or
    nothing (an empty path): it must exit 2 and leave every file as it was."""
    command = command or rng.choice(list(OUTPUT_COMMANDS))
    argv, flags = OUTPUT_COMMANDS[command]
    inputs = [m.group(1) for a in argv for m in _INPUT.finditer(a)]
    collisions = ["an input", "an input", "an input named by an alias", "an empty path"]
    if len(flags) > 1:
        collisions.append("another output")
    collision = collision or rng.choice(collisions)
    files = {"trace.jsonl": small_trace(rng), "p.py": PLUGIN_OK, "g.json": GRID,
             "in.jsonl": MOONCAKE, "lens.jsonl": small_trace(rng, expect=False)}
    if command == "sweep merge":
        files["s0.jsonl"], files["s1.jsonl"] = real_shards()
    case = Case(command.split()[0], [], {n: files[n] for n in inputs}, surface="output-path",
                statuses=(2,), unchanged=True)
    spelled = {name: name for name in inputs}
    chosen = rng.choice(inputs)
    kind = alias or rng.choice(ALIASES)
    if collision == "an input named by an alias":  # the input by an alias, the output plainly
        spelled[chosen] = _alias(rng, case, chosen, kind)
    argv = [_INPUT.sub(lambda m: spelled[m.group(1)], a) for a in argv]
    out_flags = rng.sample(flags, 2 if collision == "another output" else 1)
    if collision == "an input":
        targets = [_alias(rng, case, chosen, kind)]
        case.label, case.variant = "an output names an input", kind
    elif collision == "an input named by an alias":
        targets = [chosen]
        case.label, case.variant = "an output names an input given by an alias", kind
    elif collision == "an empty path":
        targets = [""]
        case.label = "an empty output path"
    else:
        targets = ["out.x", _alias(rng, case, "out.x", kind)]
        case.label, case.variant = "two outputs name one file", kind
    for flag, target in zip(out_flags, targets):
        argv += [flag, target]
    case.argv = argv
    case.templated = tuple(case.files)
    case.label += f" ({command})"
    return case


# 4. Signals ---------------------------------------------------------------------------

SIGNAL_RUNS = ("replay", "replay -j 2", "sweep -j 2", "check", "generate")
# also `sweep -j 2, one configuration` when asked for (a test's), never drawn


def signal_case(rng: random.Random, run: str | None = None, signum: int | None = None,
                delay: float | None = None, started: bool | None = None,
                target: str | None = None, small: bool = False,
                size: int | None = None) -> Case:
    """A long enough command sent SIGINT or SIGTERM after a random delay (start-up
    included), or that delay after it opened its first output (`started`): it must end
    130 / 143 (or normally, if it finished first), leave no temporary file, no output
    it did not finish, and no process behind. `run` may also be `sweep -j 2, one
    configuration` (never drawn): one of the two workers waits idle all along."""
    run = run or rng.choice(SIGNAL_RUNS)
    signum = signum or rng.choice((signal.SIGINT, signal.SIGTERM))
    if started is None:
        started = rng.random() < 0.3
    if delay is None:
        delay = (rng.uniform(0, 0.15) if rng.random() < 0.2
                 else rng.uniform(0.15, 0.8 if small or started else 1.5))
    target = target or rng.choice(("process", "group"))
    size = size or rng.choice((300, 800) if small else (500, 1500, 3000))
    name = signal.Signals(signum).name
    case = Case(run.split()[0], [], surface="signal", interrupt=(signum, delay, target),
                interrupt_started=started, label=f"{name} to {run}",
                note=f"{name} to the {target} {delay:.2f} s after "
                     f"{'its first output opened' if started else 'it started'}")
    case.variant = target
    if run == "generate":
        count = rng.choice((30_000, 100_000) if small else (100_000, 300_000))
        case.argv = ["generate", "--seed", str(rng.randint(0, 99)), "--requests", str(count)]
        outputs: tuple = (("-o", "g.jsonl"),)
        case.statuses = (0,)
    else:
        case.files["trace.jsonl"] = workload_trace(rng, size, expect=run == "check")
        policies = rng.sample(["vllm", "continuous", "sglang"], 2)
        if run == "sweep -j 2, one configuration":  # a worker waits idle all along
            case.argv = ["sweep", "{dir}/trace.jsonl", "--grid", "num_blocks=2048",
                         "--policy", policies[0], "-j", "2"]
            outputs = (("--csv", "s.csv"), ("--jsonl", "s.jsonl"))
        elif run.startswith("sweep"):
            case.argv = ["sweep", "{dir}/trace.jsonl", "--grid", "num_blocks=512,1024,2048",
                         "--policy", policies[0], "--policy", policies[1], "-j", "2"]
            outputs = (("--csv", "s.csv"), ("--jsonl", "s.jsonl"))
        elif run == "check":
            case.argv = ["check", "{dir}/trace.jsonl", "--policy", policies[0], "--policy",
                         policies[1]]
            outputs = (("--junit", "j.xml"),)
        else:
            case.argv = ["replay", "{dir}/trace.jsonl", "--policy", policies[0], "--policy",
                         policies[1]] + (["-j", "2"] if "-j" in run else [])
            outputs = REPLAY_OUTPUTS
        case.statuses = (0, 1)
    chosen = rng.sample(outputs, rng.randint(1, len(outputs)))
    for flag, name in chosen:
        case.argv += [flag, "{dir}/" + name]
        if rng.random() < 0.3:  # an older file of that name, which must survive
            case.files[name] = b"an older file of this name\n"
    case.outputs = tuple(name for _, name in chosen)
    return case


# 5. Corrupted sweep shards and grid files -------------------------------------------------

def _raw(value: object, raw: str) -> str:
    """`value` as JSON, its placeholder string replaced by the raw JSON text `raw`."""
    return json.dumps(value).replace('"\\u0000RAW"', raw)


RAW_HUGE = ["1" + "0" * 18, "1e308", "1" + "0" * 400, "-1", "0", "1.5", "1e999", "true",
            "18446744073709551617", "999999999999", '"8"', "null", "[]", "{}"]


def mutate_shard(rng: random.Random, text: str) -> bytes:
    """One to three changes to a sweep's JSONL output: its header's fields removed,
    retyped or made huge (`"sweep": true`, `configurations` of 10**400), rows with
    fields missing or wrong, lines truncated, dropped, doubled or swapped, deep
    nesting, a huge line, and the text mutations of `mutate`."""
    lines = text.splitlines()
    for _ in range(rng.choice((1, 1, 2, 3))):
        if not lines:
            lines = [""]
        parsed = []
        for line in lines:
            try:
                value = json.loads(line)
            except (ValueError, RecursionError):  # mutated already
                value = None
            parsed.append(value)
        i = rng.randrange(len(lines))
        record = parsed[i] if isinstance(parsed[i], dict) else None
        kind = rng.choice(("drop-field", "retype", "retype", "sweep", "configurations",
                           "deep", "truncate", "drop-line", "dup-line", "swap", "header-only",
                           "rows-only", "index", "huge-line", "extra-field", "text", "text"))
        if kind in ("drop-field", "retype", "deep", "extra-field") and record:
            key = rng.choice(list(record))
            if kind == "drop-field":
                del record[key]
                lines[i] = json.dumps(record)
            elif kind == "extra-field":
                record["x" * rng.choice((1, 1000))] = 1
                lines[i] = json.dumps(record)
            else:
                depth = rng.choice((50, 1000, 100_000))
                raw = ("[" * depth + "]" * depth if kind == "deep"
                       else rng.choice(WILD_JSON + RAW_HUGE))
                record[key] = "\0RAW"
                lines[i] = _raw(record, raw)
        elif kind in ("sweep", "configurations") and isinstance(parsed[0], dict):
            header = dict(parsed[0])
            header[kind] = "\0RAW"
            pool = (["true", "2", '"1"', "1.0", "null", "0"] if kind == "sweep" else RAW_HUGE)
            lines[0] = _raw(header, rng.choice(pool))
        elif kind == "index" and record and "index" in record:
            record["index"] = "\0RAW"
            lines[i] = _raw(record, rng.choice(["-1", "8", "1" + "0" * 18, "1.5", '"0"', "0",
                                                "1e999", "null"]))
        elif kind == "truncate" and lines[i]:
            lines[i] = lines[i][:rng.randrange(len(lines[i]))]
        elif kind == "drop-line" and len(lines) > 1:
            del lines[i]
        elif kind == "dup-line":
            lines.insert(i, lines[i])
        elif kind == "swap" and len(lines) > 1:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "header-only":
            lines = lines[:1]
        elif kind == "rows-only":
            lines = lines[1:]
        elif kind == "huge-line":
            lines.insert(i, '{"index": 0, "x": "' + "a" * 3_000_000 + '"}')
        else:
            return mutate(rng, "\n".join(lines) + "\n", True, False)
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def mutate_grid(rng: random.Random, text: str) -> bytes:
    """A grid file changed: values of the wrong type, huge or deeply nested, unknown
    or unsweepable options, empty, duplicated or huge lists, not an object, or the
    text mutations of `mutate`."""
    grid = json.loads(text)
    kind = rng.choice(("retype", "retype", "unknown", "empty", "duplicates", "huge-list",
                       "huge-grid", "deep", "not-object", "text", "text"))
    key = rng.choice(list(grid))
    if kind == "retype":
        if rng.random() < 0.5:
            grid[key] = "\0RAW"
        else:
            grid[key] = list(grid[key])
            grid[key][rng.randrange(len(grid[key]))] = "\0RAW"
        return _raw(grid, rng.choice(WILD_JSON + RAW_HUGE)).encode()
    if kind == "unknown":
        grid[rng.choice(("nope", "time_unit", "", "policy ", "replicas", "slo", "\u2028"))] = (
            rng.choice(([1, 2], ["x"], [{"ttft": 1}], [True, False])))
    elif kind == "empty":
        grid[key] = []
    elif kind == "duplicates":
        grid[key] = grid[key] * rng.choice((2, 100_000))
    elif kind == "huge-list":  # many values, the last one refused
        grid["num_blocks"] = list(range(1, 100_000)) + [rng.choice((0, -1, "x", None))]
    elif kind == "huge-grid":  # a million configurations, of which one shard runs one
        grid = {"num_blocks": list(range(40, 240)), "token_budget": list(range(32, 232)),
                "max_rows": list(range(1, 26))}
    elif kind == "deep":
        depth = rng.choice((1000, 100_000))
        grid[key] = "\0RAW"
        return _raw(grid, "[" * depth + "]" * depth).encode()
    elif kind == "not-object":
        return rng.choice((b"[]", b"42", b'"num_blocks"', b"null", b"", b"\xff\xfe"))
    else:
        return mutate(rng, text, True, False)
    return json.dumps(grid).encode()


def sweep_file_case(rng: random.Random, what: str | None = None) -> Case:
    """`sweep merge` of real shards one or two of which are corrupted, or `sweep
    --grid-file` of a corrupted grid file: exit 0, 1 or 2, no traceback, no hang."""
    what = what or rng.choice(("shard", "grid"))
    if what == "shard":
        shards = [s.decode() for s in real_shards()]
        files = {f"s{k}.jsonl": s.encode() for k, s in enumerate(shards)}
        for k in rng.sample((0, 1), rng.choice((1, 1, 2))):
            files[f"s{k}.jsonl"] = mutate_shard(rng, shards[k])
        names = list(files)
        if rng.random() < 0.2:
            names = names[:1]
        elif rng.random() < 0.2:
            files["s2.jsonl"] = mutate_shard(rng, rng.choice(shards))
            names.append("s2.jsonl")
        case = Case("sweep", ["sweep", "merge"] + [f"{{dir}}/{n}" for n in names], files,
                    surface="sweep-file", statuses=(0, 2), label="sweep merge")
        out = rng.choice((None, ("--csv", "all.csv"), ("--jsonl", "all.jsonl"), ("--csv", "-")))
    else:
        files = {"trace.jsonl": small_trace(rng), "g.json": mutate_grid(rng, GRID.decode())}
        case = Case("sweep", ["sweep", "{dir}/trace.jsonl", "--grid-file", "{dir}/g.json"],
                    files, surface="sweep-file", statuses=(0, 1, 2), label="sweep --grid-file")
        if b"max_rows" in files["g.json"]:  # a million configurations: run one
            case.argv += ["--shard", f"{rng.randrange(1_000_000)}/1000000"]
            # Every configuration is resolved before the shard runs (about 12 us
            # each alone here, some 15 s on a loaded machine): bounded, not a hang.
            case.slow = 90.0
        elif rng.random() < 0.3:
            case.argv += ["--shard", rng.choice(("0/2", "1/2", "0/1"))]
        if rng.random() < 0.3:
            case.argv += ["--grid", rng.choice(("token_budget=16,32", "order=fcfs,sjf",
                                                "num_blocks=48"))]
        if rng.random() < 0.3:
            case.argv += ["-j", "2"]
        out = rng.choice((None, ("--csv", "all.csv"), ("--jsonl", "all.jsonl")))
    if out:
        case.argv += [out[0], out[1] if out[1] == "-" else "{dir}/" + out[1]]
        case.outputs = () if out[1] == "-" else (out[1],)
    return case


# 6. Huge times ------------------------------------------------------------------------------

TIME_UNITS = ("tick", "s", "ms")
TIME_OUTPUTS = ("--report", "--perfetto", "--events", "--requests-csv", "--json --requests",
                "none")


def _huge_time(rng: random.Random, unit: str) -> object:
    """A time near or at the format's limit, 1e15 in the trace's unit."""
    if unit == "tick":
        return rng.choice((0, 1, 10 ** 15, 10 ** 15 - 1, 5 * 10 ** 14, 2 ** 40,
                           rng.randint(0, 10 ** 15)))
    return rng.choice((0, 1e15, 999999999999999.9, 1e-15, 5e14, 123456789.123456,
                       rng.uniform(0, 1e15), 10 ** 15, 1e15 - 0.5))


def huge_time_case(rng: random.Random, unit: str | None = None, output: str | None = None,
                   cost_model: bool | None = None) -> Case:
    """A replay of requests arriving, due and cancelled as late as the format allows
    (1e15 in the trace's unit), with each output: exit 0, 1 or 2, no traceback, no
    hang, and outputs of strict JSON."""
    unit = unit or rng.choice(TIME_UNITS)
    output = output or rng.choice(TIME_OUTPUTS)
    cost_model = rng.random() < 0.5 if cost_model is None else cost_model
    config: dict = {"type": "config", "block_size": 4, "num_blocks": 64}
    if unit != "tick":
        config["time_unit"] = unit
    for option, values in (("waiting_timeout", (10 ** 15, 10 ** 14, 1)),
                           ("release_delay", (0, 10 ** 15, 10 ** 9)),
                           ("batch_window", (10 ** 15, 1))):
        if rng.random() < 0.15:
            config[option] = rng.choice(values)
    records: list = [config]
    n = rng.randint(1, 5)
    for i in range(n):
        record = {"type": "request", "id": f"h{i}", "arrival": _huge_time(rng, unit),
                  "prompt_tokens": rng.randint(1, 40), "output_tokens": rng.randint(1, 20)}
        if rng.random() < 0.3:
            record["deadline"] = _huge_time(rng, unit)
        if rng.random() < 0.2:
            record["priority"] = rng.randint(-2, 2)
        records.append(record)
    for i, record in enumerate(records[1:]):
        if rng.random() < 0.25:
            at = _huge_time(rng, unit)
            if rng.random() < 0.8:  # mostly a valid time: at or after the arrival
                at = max(at, record["arrival"]) if rng.random() < 0.5 else record["arrival"]
            records.append({"type": rng.choice(("cancel", "cancel", "preempt")), "id": f"h{i}",
                            "at": at})
    case = Case("replay", ["replay", "{dir}/trace.jsonl"], {"trace.jsonl": _jsonl(records)},
                surface="huge-time", statuses=(0, 1, 2),
                label=f"{unit} trace{' under a cost model' if cost_model else ''}, {output}")
    case.argv += ["--policy", rng.choice(("continuous", "vllm", "sglang", "serial", "static",
                                          "dynamic"))]
    if cost_model:
        case.argv += ["--cost-model", "llama-3-8b/h100-sxm"]
    if rng.random() < 0.15:
        case.argv += rng.choice((["--replicas", "2"], ["--order", "edf"],
                                 ["--prefill-replicas", "1", "--decode-replicas", "1"]))
    names = {"--report": "r.html", "--perfetto": "p.json", "--events": "ev.jsonl",
             "--requests-csv": "r.csv"}
    if output == "--json --requests":
        case.argv += ["--json", "--requests"]
        case.json_outputs = ("-",)
    elif output != "none":
        case.argv += [output, "{dir}/" + names[output]]
        case.outputs = (names[output],)
        if output in ("--perfetto", "--events"):
            case.json_outputs = (names[output],)
    case.variant = "cost model" if cost_model else unit
    return case


SURFACE_MAKERS = {"trace-plugin": trace_plugin_case, "plugin-fault": plugin_fault_case,
                  "output-path": output_path_case, "signal": signal_case,
                  "sweep-file": sweep_file_case, "huge-time": huge_time_case}


def make_surface_case(rng: random.Random, surface: str, small: bool = False) -> Case:
    """A random case of one of the audit's surfaces (`NEW_SURFACES`); `small` keeps
    the signal surface's workloads short."""
    if surface == "signal":
        return signal_case(rng, small=small)
    return SURFACE_MAKERS[surface](rng)


# --- running and judging -----------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    """What became of one case."""

    case: Case
    status: int | None          # None: it hung
    seconds: float
    problem: str | None = None  # the group a failure belongs to, None when it passed
    orphans: int = 0            # processes of its session alive a few seconds after it ended
    replaced: tuple[str, ...] = ()   # inputs whose bytes changed (or that went away)
    leftovers: tuple[str, ...] = ()  # temporary files left behind
    detail: str = ""            # what it printed last, for the report


_FRAME = re.compile(r'File "([^"]*)", line (\d+), in (\S+)')
_PYTEST_FRAME = re.compile(r"^(\S+\.py):(\d+):(?: in (\S+)| \w+| ?$)", re.M)
_PYTEST_ERROR = re.compile(r"^E\s+([\w.]+)(?::|$)", re.M)
_TEMPORARY = re.compile(r"(^|/)\.[^/]*\.tmp$")
_PACKAGE = re.compile(r"(^|/)scheduler_sim/")
STARTUP = "interpreter start-up"


def _exception_name(kind: str) -> str:
    """An exception's class name; one of a plugin file's (whose module is named after
    the file's path) as `plugin.NAME`."""
    return re.sub(r"^(scheduler_sim_plugin_\w*|bad|evil)\.", "plugin.", kind)


def traceback_cause(stderr: str) -> str:
    """`ExceptionType at scheduler_sim/...py:LINE (function)` of the last traceback."""
    tail = stderr[stderr.rfind("Traceback (most recent call last)"):]
    lines = [line for line in tail.splitlines() if line.strip()]
    # the exception is the first line after the frames (they are indented)
    last = next((line for line in lines[1:] if not line[:1].isspace()), "?")
    kind = _exception_name(last.split(":", 1)[0])
    where = "outside the package"
    frames = [m for m in _FRAME.finditer(tail) if _PACKAGE.search(m.group(1))]
    for m in frames:
        path = m.group(1)
        where = f"{path[path.rfind('scheduler_sim'):]}:{m.group(2)} ({m.group(3)})"
    if kind == "KeyboardInterrupt" and not frames:
        where = STARTUP  # Python itself was starting: nothing the package can do
    elif kind == "KeyboardInterrupt" and all(m.group(3) != "main_entry" for m in frames):
        where = "start-up, while importing the package"  # before the command line ran
    return f"{kind} at {where}"


def traceback_in(case: Case, stdout: str, stderr: str) -> str | None:
    """The cause of a traceback the case printed, or None. For pytest, whose report is
    on standard output, also an INTERNALERROR or a test failing with pytest's own
    traceback of the package's code (`file.py:LINE: in function` ... `E   Error`)."""
    if "Traceback (most recent call last)" in stderr:
        return traceback_cause(stderr)
    if case.module != "pytest":
        return None
    text = stdout + stderr
    if "Traceback (most recent call last)" in text:
        return traceback_cause(text)
    frames = [m for m in _PYTEST_FRAME.finditer(text) if _PACKAGE.search(m.group(1))]
    internal = "INTERNALERROR" in text
    if not frames and not internal:
        return None
    kinds = _PYTEST_ERROR.findall(text)
    where = "outside the package"
    if frames:
        m = frames[-1]
        path = m.group(1)
        where = f"{path[path.rfind('scheduler_sim'):]}:{m.group(2)} ({m.group(3) or '?'})"
    what = "pytest INTERNALERROR" if internal else "pytest traceback"
    return f"{what}: {_exception_name(kinds[-1]) if kinds else '?'} at {where}"


def judge(case: Case, status: int | None, stderr: str, written: bytes | None) -> str | None:
    """Why a finished case of the `cli` surface failed, or None when it passed."""
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


def status_text(status: int | None) -> str:
    """`exit 2`, `killed by SIGKILL`, `hang`."""
    if status is None:
        return "hang"
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit {status}"


@dataclasses.dataclass
class Run:
    """What a finished child left: status, output and the folder before and after."""

    status: int | None
    stdout: str
    stderr: str
    before: dict[str, tuple]
    after: dict[str, tuple]
    directory: str
    signalled: bool = False


def _strict_json(data: bytes, lines: bool) -> str | None:
    """Why `data` is not strict JSON (or JSON lines), or None."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    try:
        text = data.decode("utf-8")
        for chunk in (text.splitlines() if lines else [text]):
            if chunk.strip():
                json.loads(chunk, parse_constant=refuse)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError too
        return str(exc).splitlines()[0][:80]
    return None


# Faults that end the process the plugin runs in: no code of the tool runs after
# them, so only a plugin in a worker process (-j 2) can be reported.
SELF_ENDING = {"os._exit(0)": 0, "SIGKILL to itself": -signal.SIGKILL}


def ends_itself(case: Case) -> bool:
    """Whether the case's plugin ends the tool's own process (not a worker's): outside
    -j 2, or at import, which the command does itself before any worker starts (so
    that a plugin that cannot load fails at once, and the workers inherit it)."""
    return (case.surface == "plugin-fault" and case.label in SELF_ENDING
            and ("-j 2" not in (case.variant or "") or " in import" in case.note))


def _policy_error(case: Case, run: Run) -> str | None:
    """Why a run in which the plugin misbehaved did not end in a policy error."""
    spec = (case.policy_spec or "").replace("{dir}", run.directory)
    named = f"policy '{spec}'"
    if ends_itself(case):
        # The tool's process ends as the plugin ended it (the README says so); a
        # temporary output file may stay behind, as after any SIGKILL.
        if run.status == SELF_ENDING[case.label]:
            return None
        return (f"{status_text(run.status)}, expected the status the plugin ended the "
                "process with")
    if case.module == "pytest":
        if run.status == 0:
            return "pytest passed (exit 0) although the plugin misbehaved"
        if run.status not in (1, 2):
            return f"{status_text(run.status)}, expected pytest's 1 (a failed test)"
        if named not in run.stdout + run.stderr:
            return "pytest's report does not name the policy"
        return None
    if run.status == 0 and case.command == "check":
        return "check passed (exit 0) although the plugin misbehaved"
    if run.status != 3:
        return f"{status_text(run.status)}, expected 3 (a policy error)"
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    if len(lines) != 1:
        return f"exit 3 but {len(lines)} lines on standard error, expected 1"
    # A worker process that died (os._exit, a signal) is named by what it was running:
    # the cause may be the plugin or the system (the OOM killer), so it is no policy
    # error, but it names the policy all the same.
    prefixes = ("scheduler-sim: policy error: ", "scheduler-sim: error: the worker ")
    if not lines[0].startswith(prefixes) or (named not in lines[0]
                                              and f"policy={spec})" not in lines[0]):
        return "exit 3 but the message does not name the policy"
    left = [name for name in case.outputs if name in run.after]
    if left:
        return "an output written although the run failed"
    return None


def _signal(case: Case, run: Run) -> str | None:
    """Why an interrupted run did not end as an interrupted run (or a finished one)."""
    signum = case.interrupt[0]
    name = signal.Signals(signum).name
    if run.status == INTERRUPTED[signum] and run.signalled:
        changed = [o for o in case.outputs if run.after.get(o) != run.before.get(o)]
        # A signal that arrives while the outputs are put in place (held until they
        # all are) leaves every one of them written: never some.
        if changed and len(changed) < len(case.outputs):
            return (f"{name}: exit {run.status} but an output was written or replaced "
                    f"({', '.join(changed)})")
        return None
    if run.status == -signum and run.signalled:  # its default action, before or after main
        return None
    if run.signalled and "Fatal Python error: init_import_site" in run.stderr:
        return None  # Ctrl-C while Python imported its own site module: not ours to catch
    if run.status in (case.statuses or ()):
        if run.status == 0 and any(o not in run.after for o in case.outputs):
            return f"{name}: exit 0 but an output is missing"
        return None
    return f"{name}: {status_text(run.status)}, expected {INTERRUPTED[signum]} or a normal end"


def judge_surface(case: Case, run: Run) -> str | None:
    """Why a finished case of a surface other than `cli` failed, or None (the checks
    every case gets, hangs, tracebacks, orphans, inputs and temporary files, come
    first, in `run_subprocess`)."""
    if case.unchanged:
        if run.status != 2:
            return f"{status_text(run.status)}, expected 2"
        changed = sorted(k for k in set(run.before) | set(run.after)
                         if run.before.get(k) != run.after.get(k))
        if changed:
            return "exit 2 but a file was written or changed"
        return None
    if case.fired and case.fired in run.after:
        return _policy_error(case, run)
    if case.marker:
        present = case.marker in run.after
        if present and case.marker_expected is False:
            return "imported the trace's plugin (its marker was written)"
        if not present and case.marker_expected:
            return "did not run the plugin it was allowed to (no marker)"
    if case.interrupt:
        problem = _signal(case, run)
        if problem:
            return problem
    elif case.statuses is not None and run.status not in case.statuses:
        shown = " or ".join(str(s) for s in case.statuses)
        return f"{status_text(run.status)}, expected {shown}"
    allowed = set(case.outputs) | {case.marker, case.fired}
    new = [k for k in run.after if k not in run.before and k not in allowed
           and k.split("/")[0] not in allowed]
    if new:
        return "wrote a file that is not one of its outputs"
    if run.status in (2, 3):
        if any(run.after.get(o) != run.before.get(o) for o in case.outputs):
            return f"exit {run.status} but an output was written"
    if run.status == 0:
        for name in case.json_outputs:
            if name == "-":
                why = _strict_json(run.stdout.encode(), False)
            elif name in run.after:
                with open(os.path.join(run.directory, name), "rb") as handle:
                    why = _strict_json(handle.read(), name.endswith(".jsonl"))
            else:
                why = "missing"
            if why:
                return f"an output that is not strict JSON ({name})"
    return None


def _limit_memory() -> None:
    """The child's set-up: at most 2 GiB of address space, and SIGINT and SIGTERM at
    their default action, as an interactive shell starts a command (a fuzzer run in
    the background would otherwise pass SIGINT on ignored, and no Ctrl-C case would
    interrupt anything)."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def snapshot(directory: str) -> dict[str, tuple]:
    """Every entry under `directory`: a file by its SHA-256, a link by its target."""
    found: dict[str, tuple] = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            key = os.path.relpath(path, directory)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                found[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                found[key] = ("dir",)
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256()
                with open(path, "rb") as handle:
                    for block in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(block)
                found[key] = ("file", digest.hexdigest())
            else:
                found[key] = ("other", stat.S_IFMT(info.st_mode))
    return found


def session_members(leader: int) -> list[int]:
    """The live (not zombie) processes of the session or process group that `leader`
    started; where there is no /proc, one stands for any os.killpg can reach."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(leader, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [leader]
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        if fields[0] != b"Z" and leader in (int(fields[2]), int(fields[3])):
            members.append(int(entry))
    return members


def orphans_of(leader: int, grace: float = 3.0) -> int:
    """How many processes of the child's session outlive it by `grace` seconds; kill
    them (a fuzzer must not leave them either)."""
    deadline = time.monotonic() + grace
    members = session_members(leader)
    while members and time.monotonic() < deadline:
        time.sleep(0.05)
        members = session_members(leader)
    for pid in members:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(leader, signal.SIGKILL)
    except OSError:
        pass
    return len(members)


def _child_env(case: Case, tmp: str) -> dict[str, str]:
    """This checkout on the path, no bytecode written, temporary files in `tmp`; for
    pytest, no plugin but the package's."""
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1", TMPDIR=tmp)
    env.pop("PYTEST_ADDOPTS", None)
    if case.module == "pytest":
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def _started(directory: str, tmp: str) -> bool:
    """Whether the command has opened an output (a temporary file exists)."""
    return (any(_TEMPORARY.search(name) for name in os.listdir(directory))
            or bool(os.listdir(tmp)))


def _run_child(case: Case, argv: list[str], top: str,
               timeout: float) -> tuple[int | None, bool, int]:
    """Run the case's child, its output and errors into files in `top`; send its
    signal, if it has one; kill its session on timeout. Return its status (None: it
    hung), whether the signal was sent, and how many processes it left behind."""
    directory, tmp = os.path.join(top, "case"), os.path.join(top, "tmp")
    start = time.monotonic()
    with open(os.path.join(top, "stdout"), "wb") as out, \
            open(os.path.join(top, "stderr"), "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", case.module, *argv], cwd=directory,
                                stdin=subprocess.PIPE if case.stdin else subprocess.DEVNULL,
                                stdout=out, stderr=err, env=_child_env(case, tmp),
                                start_new_session=True, preexec_fn=_limit_memory)
        signalled = False
        try:
            if case.stdin:
                proc.communicate(case.stdin, timeout=timeout)
            elif case.interrupt is None:
                proc.wait(timeout=timeout)
            else:
                signum, delay, target = case.interrupt
                if case.interrupt_started:  # the delay counts from its first output file
                    while (proc.poll() is None and not _started(directory, tmp)
                           and time.monotonic() - start < timeout):
                        time.sleep(0.01)
                try:
                    proc.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    try:
                        (os.killpg if target == "group" else os.kill)(proc.pid, signum)
                        signalled = True
                    except ProcessLookupError:
                        pass
                    proc.wait(timeout=max(0.1, timeout - (time.monotonic() - start)))
            status: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = None
    return status, signalled, orphans_of(proc.pid)


def run_subprocess(case: Case, timeout: float) -> Outcome:
    """Run one case in a child process of its own session (sending its signal, if it
    has one); kill the session on timeout; judge what it left."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as top:
        directory, tmp = os.path.join(top, "case"), os.path.join(top, "tmp")
        os.mkdir(directory)
        os.mkdir(tmp)
        argv = case.materialise(directory)
        before = snapshot(directory)
        start = time.monotonic()
        status, signalled, orphans = _run_child(case, argv, top, max(timeout, case.slow))
        seconds = time.monotonic() - start
        after = snapshot(directory)
        out_path = os.path.join(top, "stdout")
        with open(out_path, "rb") as handle:
            stdout = handle.read().decode("utf-8", "replace")
        with open(os.path.join(top, "stderr"), "rb") as handle:
            stderr = handle.read().decode("utf-8", "replace")
        # Everything that was there before is an input, unless the case may write it.
        replaced = tuple(sorted(k for k, v in before.items()
                                if k not in case.outputs and after.get(k) != v))
        killed = status is None or status == -signal.SIGKILL
        leftovers: tuple[str, ...] = ()
        if not killed and not ends_itself(case):
            leftovers = tuple(sorted([k for k in after if _TEMPORARY.search(k)] +
                                     ["$TMPDIR/" + n for n in os.listdir(tmp)]))
        # the last line of standard error (or output) that names an error, else its last
        said = stderr.strip().splitlines() or stdout.strip().splitlines()[-1:] or [""]
        detail = next((line for line in reversed(said) if "error" in line.lower()), said[-1])
        cause = traceback_in(case, stdout, stderr) if status is not None else None
        if signalled and cause == f"KeyboardInterrupt at {STARTUP}":
            cause = None  # Ctrl-C while the interpreter started, before any of our code
        # Failures group by surface, then by the traceback's cause, or by what the
        # case is about (its label) and what went wrong.
        prefix = "" if case.surface == "cli" else f"{case.surface}: "
        about = f"{case.label}: " if case.label else ""
        if cause:
            problem: str | None = "traceback: " + cause
        elif status is None:
            problem = about + "hang"
        elif orphans:
            problem = about + "orphan processes left"
        elif replaced:
            problem = about + "an input file was replaced or changed"
        elif leftovers:
            problem = about + "a temporary file was left"
        elif case.surface == "cli":
            written = None
            if status == 0 and case.writes:
                path = out_path if case.writes == "-" else os.path.join(directory, case.writes)
                with open(path, "rb") as handle:
                    written = handle.read()
            problem = judge(case, status, stderr, written)
        else:
            problem = judge_surface(case, Run(status, stdout, stderr, before, after,
                                              directory, signalled))
            problem = problem and about + problem
        return Outcome(case, status, seconds, problem and prefix + problem, orphans, replaced,
                       leftovers, detail[:200])


def draw_cases(seed: int, runs: int, commands: tuple[str, ...] = COMMANDS,
               surfaces: tuple[str, ...] = ("cli",)) -> list[Case]:
    """The cases of a run: the same seed, runs, commands and surfaces give the same
    cases (with the `cli` surface alone, those of the first version of this fuzzer)."""
    rng = random.Random(seed)
    weights = [WEIGHTS[COMMANDS.index(c)] for c in commands]
    if surfaces == ("cli",):
        return [make_case(rng, rng.choices(commands, weights)[0]) for _ in range(runs)]
    cases = []
    for _ in range(runs):
        surface = rng.choices(surfaces, [SURFACE_WEIGHTS[s] for s in surfaces])[0]
        if surface == "cli":
            cases.append(make_case(rng, rng.choices(commands, weights)[0]))
        else:
            cases.append(make_surface_case(rng, surface))
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3000, help="cases to run (default: 3000)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the cases (default: 1)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds before a case counts as a hang (default: 10)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="cases run at once (default: the CPUs)")
    parser.add_argument("--surfaces", default=",".join(SURFACES),
                        help=f"surfaces to fuzz (default: all: {','.join(SURFACES)})")
    parser.add_argument("--commands", default=",".join(COMMANDS),
                        help=f"commands of the cli surface (default: {','.join(COMMANDS)})")
    parser.add_argument("--examples", type=int, default=2,
                        help="example command lines shown per failure group (default: 2)")
    args = parser.parse_args(argv)
    commands = tuple(c for c in args.commands.split(",") if c)
    unknown = [c for c in commands if c not in COMMANDS]
    if unknown:
        parser.error(f"unknown command(s) {', '.join(unknown)} (known: {', '.join(COMMANDS)})")
    surfaces = tuple(s for s in args.surfaces.split(",") if s)
    unknown = [s for s in surfaces if s not in SURFACES]
    if unknown or not surfaces:
        parser.error(f"unknown surface(s) {', '.join(unknown)} (known: {', '.join(SURFACES)})")
    cases = draw_cases(args.seed, args.runs, commands, surfaces)
    started = time.monotonic()
    outcomes: list[Outcome] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_subprocess, c, args.timeout) for c in cases]
        for i, future in enumerate(concurrent.futures.as_completed(futures), start=1):
            outcomes.append(future.result())
            if i % 250 == 0:
                print(f"... {i}/{len(cases)} cases, {time.monotonic() - started:.0f} s",
                      file=sys.stderr, flush=True)
    report(outcomes, args, commands, surfaces, time.monotonic() - started)
    return 0 if not any(o.problem for o in outcomes) else 1


def report(outcomes: list[Outcome], args: argparse.Namespace, commands: tuple[str, ...],
           surfaces: tuple[str, ...], elapsed: float) -> None:
    """Print the runs per command (cli) and surface, the totals and the failure groups."""
    by_row: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for o in outcomes:
        row = o.case.command if o.case.surface == "cli" else o.case.surface
        by_row[row][status_text(o.status)] += 1
    groups: dict[str, list[Outcome]] = collections.defaultdict(list)
    for o in outcomes:
        if o.problem:
            groups[o.problem].append(o)

    def is_traceback(key: str) -> bool:
        return key.split(": ", 1)[-1].startswith("traceback") or key.startswith("traceback")

    def is_hang(key: str) -> bool:
        return key == "hang" or key.endswith(": hang")

    tracebacks = sum(len(v) for k, v in groups.items() if is_traceback(k))
    hangs = sum(len(v) for k, v in groups.items() if is_hang(k))
    others = sum(len(v) for k, v in groups.items() if not is_traceback(k) and not is_hang(k))
    orphaned = [o for o in outcomes if o.orphans]
    print(f"fuzz_cli: seed {args.seed}, {len(outcomes):,} runs in {elapsed:.0f} s "
          f"({args.jobs} at once, timeout {args.timeout:g} s)")
    rows = [c for c in commands if "cli" in surfaces] + [s for s in surfaces if s != "cli"]
    for row in rows:
        counts = by_row.get(row, collections.Counter())
        detail = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
        print(f"  {row:12} {sum(counts.values()):6,} runs: {detail}")
    print(f"tracebacks: {tracebacks:,} "
          f"({sum(1 for k in groups if is_traceback(k))} causes)")
    print(f"hangs: {hangs:,}")
    print(f"orphans: {len(orphaned):,} cases ({sum(o.orphans for o in orphaned):,} processes)")
    print(f"inputs replaced: {sum(1 for o in outcomes if o.replaced):,}")
    print(f"temporary files left: {sum(1 for o in outcomes if o.leftovers):,}")
    print(f"other failures: {others:,}")
    slowest = max(outcomes, key=lambda o: o.seconds, default=None)
    if slowest is not None:
        print(f"slowest case: {slowest.seconds:.1f} s: {slowest.case.shown()}")
    for key, items in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"\n{len(items):,} x {key}")
        variants = collections.Counter(o.case.variant for o in items if o.case.variant)
        if len(variants) > 1 or (variants and len(items) > 1):
            print("    by variant: " + ", ".join(f"{v} {n}" for v, n in variants.most_common()))
        for o in items[:args.examples]:
            print(f"    {o.case.shown()}")
            if o.detail and o.case.surface != "cli":
                print(f"        -> {status_text(o.status)}: {ascii(o.detail)[1:-1][:150]}")


if __name__ == "__main__":
    sys.exit(main())
