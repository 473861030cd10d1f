"""The speed targets of the project, measured beside a fixed calibration loop.

    python3 benchmarks/targets.py TRACES_DIR [--repeat 3] [--out-dir benchmarks/out]

TRACES_DIR holds `azure_llm_2023/AzureLLMInferenceTrace_conv.csv` (Azure LLM
inference trace 2023, CC-BY-4.0; Patel et al., "Splitwise", ISCA 2024) and
`mooncake/conversation_trace.jsonl` (Mooncake FAST'25, Apache-2.0); see
benchmarks/README.md for where to download them. The script converts them
with this checkout's `convert` and runs, each in a child process of its own
(Llama-3-8B on an H100 SXM, 20,480 blocks of 16 tokens, 8,192 tokens and
256 requests per dispatch):

1. Azure conversation, `continuous` and `vllm`, summary only;
2. Azure conversation, `continuous`, `--events` to a file;
3. Mooncake conversation with prefix caching, `vllm`;
4. `generate --seed 1 --requests 1000000 --rate 0.46`, `continuous`, default
   options (no cost model).

Beside them it runs a calibration loop, a fixed pure-Python workload (integer
arithmetic, a dict and a list), in a child process too, so that a reader on
another machine can scale the figures by the ratio of the calibration times.
Each figure is the median of `--repeat` runs (CPU seconds of the child: user +
system, from os.wait4; and its wall seconds). Results also go to
`OUT_DIR/targets.md`.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["--cost-model", "llama-3-8b/h100-sxm", "--block-size", "16", "--num-blocks", "20480",
          "--token-budget", "8192", "--max-rows", "256"]
CALIBRATION = """
total = 0
table = {}
items = []
for i in range(3_000_000):
    total = (total * 31 + i) % 1_000_003
    if i % 3 == 0:
        table[i % 4096] = total
    items.append(total & 255)
    if len(items) > 1000:
        items.clear()
print(total)
"""


def child(argv: list[str]) -> tuple[float, float]:
    """Run `python3 ARGV` in the project root: (wall s, CPU s of the child)."""
    start = time.perf_counter()
    with open(os.devnull, "w") as sink, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=sink, stderr=err,
                                text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 1):
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed ({code}): {err.read()[-2000:]}")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def median_of(argv: list[str], repeat: int) -> tuple[float, float]:
    runs = [child(argv) for _ in range(repeat)]
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces_dir", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "out")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    sim = ["-m", "scheduler_sim"]
    azure = args.out_dir / "azure_conv.jsonl"
    mooncake = args.out_dir / "mooncake_conv.jsonl"
    generated = args.out_dir / "generated-1000000-0.46.jsonl"
    for target, argv in (
            (azure, ["convert", "--from", "azure",
                     str(args.traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")]),
            (mooncake, ["convert", "--from", "mooncake",
                        str(args.traces_dir / "mooncake" / "conversation_trace.jsonl")]),
            (generated, ["generate", "--seed", "1", "--requests", "1000000", "--rate", "0.46"])):
        if not target.exists():
            subprocess.run([sys.executable, *sim, *argv, "-o", str(target)], cwd=ROOT, check=True)
    events = args.out_dir / "targets-events.jsonl"
    cases = [
        ("calibration loop", ["-c", CALIBRATION]),
        ("Azure conversation, continuous", sim + ["replay", str(azure), "--policy", "continuous",
                                                  *COMMON]),
        ("Azure conversation, vllm", sim + ["replay", str(azure), "--policy", "vllm", *COMMON]),
        ("Azure conversation, continuous, --events", sim + [
            "replay", str(azure), "--policy", "continuous", *COMMON, "--events", str(events)]),
        ("Mooncake conversation, prefix caching, vllm", sim + [
            "replay", str(mooncake), "--policy", "vllm", "--prefix-caching", *COMMON]),
        ("1,000,000 generated requests (rate 0.46), continuous", sim + [
            "replay", str(generated), "--policy", "continuous"]),
    ]
    rows = ["| run | wall s | CPU s |", "|---|---:|---:|"]
    for label, argv in cases:
        wall, cpu = median_of(argv, args.repeat)
        rows.append(f"| {label} | {wall:.1f} | {cpu:.1f} |")
        print(rows[-1], flush=True)
    if events.exists():
        events.unlink()
    (args.out_dir / "targets.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
