"""Peak memory and time of long generated traces, this checkout against another.

    python3 benchmarks/memory.py [--baseline DIR] [--sizes 100000,1000000]
        [--rates 1,0.5] [--out-dir benchmarks/out]

For each size and rate it writes `generate --seed 1 --requests N --rate R`
with this checkout, then, in a fresh child process per run, times `validate`
and a summary-only `replay --policy continuous` of it: wall seconds, CPU
seconds (the child's user + system time) and peak resident memory (the
child's own maximum RSS, from `os.wait4`). With `--baseline DIR` (another
checkout, for example `git worktree add /tmp/before <commit>`) the same runs
are made with its code on the same files. Rate 1 request per tick overloads
`continuous` with the generator's default lengths (the waiting queue grows
to most of the trace); rate 0.5 does not. Results also go to
`OUT_DIR/memory.md`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(cwd: Path, argv: list[str]) -> tuple[float, float, float, int]:
    """Run `python3 -m scheduler_sim ARGV` in `cwd`, output discarded: (wall s, CPU s,
    peak MB, exit status)."""
    start = time.perf_counter()
    with open(os.devnull, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "scheduler_sim", *argv], cwd=cwd,
                                stdout=sink, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        error = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"scheduler-sim {' '.join(argv)} (in {cwd}) failed: {error}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--rates", default="1,0.5")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "out")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    checkouts = [("this checkout", ROOT)]
    if args.baseline is not None:
        checkouts.insert(0, ("baseline", args.baseline.resolve()))
    rows = ["| requests | rate | run | code | wall s | CPU s | peak MB |",
            "|---:|---:|---|---|---:|---:|---:|"]
    for size in (int(s) for s in args.sizes.split(",")):
        for rate in args.rates.split(","):
            trace = args.out_dir / f"generated-{size}-{rate}.jsonl"
            if not trace.exists():
                subprocess.run([sys.executable, "-m", "scheduler_sim", "generate", "--seed", "1",
                                "--requests", str(size), "--rate", rate, "-o", str(trace)],
                               cwd=ROOT, check=True)
            for run, argv in (("validate", ["validate", str(trace)]),
                              ("replay", ["replay", str(trace), "--policy", "continuous"])):
                for label, cwd in checkouts:
                    wall, cpu, peak, _ = child(cwd, argv)
                    row = (f"| {size:,} | {rate} | {run} | {label} | {wall:.1f} | {cpu:.1f} "
                           f"| {peak:,.0f} |")
                    print(row, flush=True)
                    rows.append(row)
    (args.out_dir / "memory.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
