"""Replay speed of this checkout against another one, measured in the same run.

    python3 benchmarks/before_after.py BASELINE_DIR AZURE_CONV_CSV [--repeat 3]
        [--policies continuous vllm]

BASELINE_DIR is another checkout of scheduler-sim (for example `git worktree
add /tmp/before <commit>`); AZURE_CONV_CSV is `AzureLLMInferenceTrace_conv.csv`
of the Azure LLM inference trace 2023 (Azure/AzurePublicDataset, CC-BY-4.0;
cite Patel et al., "Splitwise", ISCA 2024).

Each checkout converts the trace with its own `convert` and replays it with
its own code, Llama-3-8B on an H100 SXM, 20,480 blocks of 16 tokens, 8,192
tokens and 256 requests per dispatch, summary only. The runs alternate
(baseline, this checkout, this checkout on a 1 ms clock, baseline, ...) so
that a busy machine slows both alike, and the table gives the median CPU
seconds of each (the child's own user + system time, from os.wait4), with
the dispatches each replay ran. A 1 ms clock is this checkout doing the same
work as a baseline that rounded every dispatch up to 1 ms ticks; the default
1 us clock runs more, shorter dispatches. Results also go to
`benchmarks/out/before_after.md`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUP = ["--cost-model", "llama-3-8b/h100-sxm", "--block-size", "16", "--num-blocks", "20480",
         "--token-budget", "8192", "--max-rows", "256", "--json"]


def run(cwd: Path, argv: list[str]) -> tuple[float, str]:
    """`python3 -m scheduler_sim ARGV` in `cwd`: (CPU seconds of the child, stdout)."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, "-m", "scheduler_sim", *argv], cwd=cwd,
                                stdout=out, stderr=subprocess.DEVNULL, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            raise SystemExit(f"{cwd}: scheduler-sim {' '.join(argv)} failed")
        out.seek(0)
        return usage.ru_utime + usage.ru_stime, out.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", help="another checkout of scheduler-sim")
    parser.add_argument("azure_csv", help="AzureLLMInferenceTrace_conv.csv")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policies", nargs="*", default=["continuous", "vllm"])
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out"))
    args = parser.parse_args()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    baseline = Path(args.baseline).resolve()
    csv = str(Path(args.azure_csv).resolve())
    traces = {}
    for name, cwd in (("baseline", baseline), ("this", ROOT)):
        path = out_dir / f"azure-conv.{name}.jsonl"
        run(cwd, ["convert", "--from", "azure", csv, "-o", str(path)])
        traces[name] = path
    variants = [("baseline", baseline, traces["baseline"], []),
                ("this checkout, 1 us clock", ROOT, traces["this"], []),
                ("this checkout, 1 ms clock", ROOT, traces["this"],
                 ["--clock-resolution", "0.001"])]
    lines = ["| policy | version | dispatches | CPU s (median) | against baseline |",
             "|---|---|---:|---:|---:|"]
    for policy in args.policies:
        times: dict[str, list[float]] = {name: [] for name, *_ in variants}
        dispatches: dict[str, int] = {}
        for _ in range(args.repeat):
            for name, cwd, trace, extra in variants:
                cpu, text = run(cwd, ["replay", str(trace), "--policy", policy, *SETUP, *extra])
                times[name].append(cpu)
                dispatches[name] = json.loads(text)["runs"][0]["iterations"]
        base = statistics.median(times["baseline"])
        for name, *_ in variants:
            median = statistics.median(times[name])
            lines.append(f"| {policy} | {name} | {dispatches[name]:,} | {median:.2f} | "
                         f"{(median / base - 1) * 100:+.1f}% |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    (out_dir / "before_after.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
