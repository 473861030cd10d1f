"""Peak memory of fleets and of sharded sweeps, this checkout against another.

    python3 benchmarks/fleet_memory.py TRACES_DIR [--baseline DIR] [--replicas 1,4,16,64]
        [--routers round-robin,prefix-affinity] [--report 64] [--grid 1000x100]
        [--out-dir benchmarks/out]

TRACES_DIR holds `mooncake/conversation_trace.jsonl` (see benchmarks/README.md).
The script converts it with this checkout's `convert`, then, in a fresh
child process per run (`python3 -m scheduler_sim` in the checkout), replays
it with prefix caching under `vllm` on a fleet of N replicas of the pool
sized from the GPU (`--cost-model llama-3-8b/h100-sxm`: 27,284 blocks of 16 (27,313 before
issue 23's model catalogue, when the figures in benchmarks/README.md were measured)
tokens per replica) for each N of `--replicas` and each router, with
`--json`, and once with `--report` at N = `--report` (round-robin). Then it
sweeps `traces/quickstart.jsonl` over a grid of `--grid` A x B values
(`num_blocks` 12, 13, ... and `token_budget` 16, 17, ..., under
`continuous`: 100,000 configurations by default) running only `--shard
0/1000`. For each run: wall seconds, CPU seconds (the child's user + system
time) and peak resident memory (the child's maximum RSS, from `os.wait4`).
With `--baseline DIR` (another checkout, for example `git worktree add
/tmp/before <commit>`) every run is also made with its code, right before
this checkout's, and the outputs (`--json`, the report, the sweep's JSONL
and CSV) must be the same bytes. Results also go to `OUT_DIR/fleet_memory.md`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLEET = ["--policy", "vllm", "--prefix-caching", "--cost-model", "llama-3-8b/h100-sxm"]


def child(cwd: Path, argv: list[str], stdout: Path | None) -> tuple[float, float, float]:
    """Run `python3 -m scheduler_sim ARGV` in `cwd`, standard output to `stdout` (or
    discarded): (wall s, CPU s, peak MB)."""
    start = time.perf_counter()
    with open(stdout if stdout is not None else os.devnull, "w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "scheduler_sim", *argv], cwd=cwd,
                                stdout=sink, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        error = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"scheduler-sim {' '.join(argv)} (in {cwd}) failed: {error}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", type=Path)
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--replicas", default="1,4,16,64")
    parser.add_argument("--routers", default="round-robin,prefix-affinity")
    parser.add_argument("--report", type=int, default=64, help="replicas of the --report run "
                        "(0: none)")
    parser.add_argument("--grid", default="1000x100", help="num_blocks values x token_budget "
                        "values of the sweep")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "out")
    args = parser.parse_args()
    out = args.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "mooncake.jsonl"
    if not trace.exists():
        subprocess.run([sys.executable, "-m", "scheduler_sim", "convert", "--from", "mooncake",
                        str(args.traces / "mooncake" / "conversation_trace.jsonl"), "-o",
                        str(trace)], cwd=ROOT, check=True)
    blocks, budgets = (int(n) for n in args.grid.split("x"))
    grid = out / "fleet_memory_grid.json"
    grid.write_text(json.dumps({"num_blocks": list(range(12, 12 + blocks)),
                                "token_budget": list(range(16, 16 + budgets))}))
    runs: list[tuple[str, list[str], list[str]]] = []  # (label, argv, output flags)
    for router in args.routers.split(","):
        for n in (int(n) for n in args.replicas.split(",")):
            runs.append((f"replay, {router}, {n} replicas",
                         ["replay", str(trace), *FLEET, "--replicas", str(n), "--router",
                          router, "--json"], []))
    if args.report:
        runs.append((f"replay --report, round-robin, {args.report} replicas",
                     ["replay", str(trace), *FLEET, "--replicas", str(args.report),
                      "--router", "round-robin"], ["--report"]))
    runs.append((f"sweep --shard 0/1000 of {blocks * budgets:,} configurations",
                 ["sweep", str(ROOT / "traces" / "quickstart.jsonl"), "--grid-file", str(grid),
                  "--policy", "continuous", "--shard", "0/1000"], ["--jsonl", "--csv"]))
    checkouts = [("this checkout", ROOT)]
    if args.baseline is not None:
        checkouts.insert(0, ("baseline", args.baseline.resolve()))
    rows = ["| run | code | wall s | CPU s | peak MB |", "|---|---|---:|---:|---:|"]
    for number, (label, argv, flags) in enumerate(runs):
        outputs = []
        for name, cwd in checkouts:
            base = out / f"fleet_memory_{number}_{len(outputs)}"
            files = [base.with_suffix("." + flag.strip("-")) for flag in flags]
            extra = [item for flag, path in zip(flags, files) for item in (flag, str(path))]
            stdout = base.with_suffix(".out")
            wall, cpu, peak = child(cwd, argv + extra, stdout)
            outputs.append([stdout.read_bytes()] + [p.read_bytes() for p in files])
            row = f"| {label} | {name} | {wall:.1f} | {cpu:.1f} | {peak:,.0f} |"
            print(row, flush=True)
            rows.append(row)
        if len(outputs) == 2 and outputs[0] != outputs[1]:
            raise SystemExit(f"{label}: the outputs differ from the baseline's")
    (out / "fleet_memory.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
