"""Peak memory and time of long generated traces, this checkout against another.

    python3 benchmarks/memory.py [--baseline DIR] [--sizes 100000,1000000]
        [--rates 1,0.5] [--runs validate,replay,report,perfetto,generate]
        [--out-dir benchmarks/out]

For each size and rate it writes `generate --seed 1 --requests N --rate R`
with this checkout, then, in a fresh child process per run, measures the
runs asked for (`--runs`, default `validate,replay`): wall seconds, CPU
seconds (the child's user + system time) and peak resident memory (the
child's own maximum RSS, from `os.wait4`):

- `validate`: `validate TRACE`;
- `replay`: a summary-only `replay TRACE --policy continuous`;
- `report`: the same with `--report FILE.html`;
- `perfetto`: the same with `--perfetto FILE.json`;
- `generate`: `generate --seed 1 --requests N --rate R -o FILE` (the trace
  itself, written again).

With `--baseline DIR` (another checkout, for example `git worktree add
/tmp/before <commit>`, or `git archive <commit> | tar -x -C /tmp/before`) the
same runs are made with its code on the same files, and the `same` column
says whether the two checkouts wrote the same bytes (`report`, `perfetto`,
`generate`). Output files are removed once compared. Rate 1 request per
tick overloads `continuous` with the generator's default lengths (the
waiting queue grows to most of the trace); rate 0.5 does not. Results also
go to `OUT_DIR/memory.md`.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ("validate", "replay", "report", "perfetto", "generate")


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


def argv_of(run: str, trace: Path, size: int, rate: str, output: Path) -> list[str]:
    """The command line of one run (`output`: where its file goes, if it writes one)."""
    if run == "validate":
        return ["validate", str(trace)]
    if run == "generate":
        return ["generate", "--seed", "1", "--requests", str(size), "--rate", rate,
                "-o", str(output)]
    flags = {"replay": [], "report": ["--report", str(output)],
             "perfetto": ["--perfetto", str(output)]}[run]
    return ["replay", str(trace), "--policy", "continuous", "--quiet", *flags]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--rates", default="1,0.5")
    parser.add_argument("--runs", default="validate,replay",
                        help=f"comma-separated, of {', '.join(RUNS)}")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "out")
    args = parser.parse_args()
    runs = args.runs.split(",")
    unknown = [run for run in runs if run not in RUNS]
    if unknown:
        parser.error(f"--runs: unknown {', '.join(unknown)} (known: {', '.join(RUNS)})")
    args.out_dir = args.out_dir.resolve()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    checkouts = [("this checkout", ROOT)]
    if args.baseline is not None:
        checkouts.insert(0, ("baseline", args.baseline.resolve()))
    rows = ["| requests | rate | run | code | wall s | CPU s | peak MB | same |",
            "|---:|---:|---|---|---:|---:|---:|---|"]
    for size in (int(s) for s in args.sizes.split(",")):
        for rate in args.rates.split(","):
            trace = args.out_dir / f"generated-{size}-{rate}.jsonl"
            if not trace.exists():
                subprocess.run([sys.executable, "-m", "scheduler_sim", "generate", "--seed", "1",
                                "--requests", str(size), "--rate", rate, "-o", str(trace)],
                               cwd=ROOT, check=True)
            for run in runs:
                suffix = {"report": ".html", "perfetto": ".json", "generate": ".jsonl"}
                written = []
                for i, (label, cwd) in enumerate(checkouts):
                    output = args.out_dir / f"{run}-{size}-{rate}-{i}{suffix.get(run, '')}"
                    wall, cpu, peak, _ = child(cwd, argv_of(run, trace, size, rate, output))
                    if output.exists():
                        written.append(output)
                    same = ""
                    if len(written) == 2:
                        same = "yes" if filecmp.cmp(*written, shallow=False) else "no"
                    row = (f"| {size:,} | {rate} | {run} | {label} | {wall:.1f} | {cpu:.1f} "
                           f"| {peak:,.0f} | {same} |")
                    print(row, flush=True)
                    rows.append(row)
                for path in written:
                    path.unlink()
    (args.out_dir / "memory.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
