"""Two commands timed against each other, run by run: the ratio that survives a busy machine.

    python3 benchmarks/paired.py [-n 5] [--warmup 1] --vs 'COMMAND B' -- COMMAND A ...

A shared machine's speed drifts by tens of percent within minutes, so two
medians measured one after the other compare the drift as much as the code.
This runs the two commands in turn (A B A B ..., after `--warmup` uncounted
runs of each), reads each finished child's own CPU seconds (user + system,
and each apart) and peak RSS from `os.wait4`, and prints, for A, for B and
for A/B pair by pair, the minimum, median and maximum. Quote the median of
the per-pair ratios: each pair ran at nearly the same moment, so the drift
cancels in it.

COMMAND B is one string split as a shell splits words (`shlex.split`), run
without a shell, as COMMAND A is. Their standard output and error are
discarded. This is how the benchmarks' "paired whole-process CPU" figures in
benchmarks/README.md and the README's Performance table were taken, e.g.

    cd /tmp && python3 CHECKOUT/benchmarks/paired.py -n 5 \\
        --vs 'env PYTHONPATH=BASE python3 -m scheduler_sim replay TRACE FLAGS' \\
        -- env PYTHONPATH=CHECKOUT python3 -m scheduler_sim replay TRACE FLAGS
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time


def run_once(argv: list[str]) -> tuple[float, float, float, float, float, int]:
    """Run ARGV to its end: (CPU seconds, user seconds, system seconds, wall seconds,
    peak RSS in MB, exit status)."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        child = subprocess.Popen(argv, stdout=sink, stderr=sink)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    return (usage.ru_utime + usage.ru_stime, usage.ru_utime, usage.ru_stime, wall,
            usage.ru_maxrss / 1024, child.returncode)


def spread(values: list[float]) -> str:
    """`min  median  max` of VALUES, aligned."""
    return f"{min(values):9.3f} {statistics.median(values):9.3f} {max(values):9.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=5, help="counted runs of each command")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted runs of each, first")
    parser.add_argument("--vs", required=True, help="the second command (B), as one string")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND A ...")
    args = parser.parse_args(argv)
    first = args.command[1:] if args.command[:1] == ["--"] else args.command
    second = shlex.split(args.vs)
    if not first or not second or args.runs < 1 or args.warmup < 0:
        parser.error("give -n >= 1, --warmup >= 0, --vs 'COMMAND B' and -- COMMAND A")
    for _ in range(args.warmup):
        run_once(first)
        run_once(second)
    runs: dict[str, list[tuple[float, float, float, float, float, int]]] = {"A": [], "B": []}
    for _ in range(args.runs):
        runs["A"].append(run_once(first))
        runs["B"].append(run_once(second))
    print(f"A: {shlex.join(first)}")
    print(f"B: {shlex.join(second)}")
    print(f"{args.runs} pairs, A B alternated, after {args.warmup} uncounted of each")
    print(f"{'figure':<18} {'min':>9} {'median':>9} {'max':>9}")
    for label in ("A", "B"):
        cpu, user, system, wall, rss, _ = zip(*runs[label])
        print(f"{label + ' CPU s':<18} {spread(list(cpu))}")
        print(f"{label + ' user s':<18} {spread(list(user))}")
        print(f"{label + ' system s':<18} {spread(list(system))}")
        print(f"{label + ' wall s':<18} {spread(list(wall))}")
        print(f"{label + ' peak RSS MB':<18} {spread(list(rss))}")
    ratios = [a[0] / b[0] for a, b in zip(runs["A"], runs["B"]) if b[0] > 0]
    if ratios:
        print(f"{'A/B CPU, per pair':<18} {spread(ratios)}")
    failed = sorted({r[-1] for label in runs for r in runs[label]} - {0})
    if failed:
        print(f"note: some runs exited with status {', '.join(map(str, failed))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
