"""Replay the full public traces under every policy, with the cost model on.

    python3 benchmarks/public_traces.py TRACES_DIR [--policies ...] [--traces ...]

Converts the Azure LLM inference conversation trace (2023, 19,366 requests;
CC-BY-4.0, Patel et al., "Splitwise", ISCA'24) and the Mooncake FAST'25
conversation trace (12,031 requests; Apache-2.0, kvcache-ai/Mooncake) with
`scheduler-sim convert` (times in seconds), then replays each under every policy in
a child process of its own: Llama-3-8B on an H100 SXM (`--cost-model
llama-3-8b/h100-sxm`), a 40 GiB KV pool (20,480 blocks of 16 tokens at 128 KiB
per token), 8,192 tokens and 256 requests per dispatch, and prefix caching
for Mooncake (its `hash_ids` become `block_hashes`). For each run it reports
the simulated TTFT, TPOT, ITL and end-to-end percentiles in seconds, the
output throughput and the preemptions, and the simulator's own wall time,
CPU time and peak memory; then the cost of `--events` for `continuous`.

Results go to stdout as Markdown and to benchmarks/out/public_traces.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ["serial", "continuous", "vllm", "sglang", "static", "dynamic"]
COMMON = ["--cost-model", "llama-3-8b/h100-sxm", "--block-size", "16",
          "--num-blocks", "20480", "--token-budget", "8192", "--max-rows", "256"]
TRACES = {
    "azure-conv": ("azure", "azure_llm_2023/AzureLLMInferenceTrace_conv.csv", []),
    "mooncake-conv": ("mooncake", "mooncake/conversation_trace.jsonl", ["--prefix-caching"]),
}


def child(argv: list[str]) -> tuple[float, float, float, str]:
    """Run `python3 -m scheduler_sim ARGV`; return (wall s, CPU s, peak MB, stdout).

    CPU time and peak memory are this child's own (os.wait4), never a sum.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "scheduler_sim", *argv], cwd=ROOT,
                                stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"scheduler-sim {' '.join(argv)} failed "
                             f"({proc.returncode}):\n{err.read()}")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read()


def cell(value, digits: int = 3) -> str:
    """A number for the Markdown table ('-' for None)."""
    return "-" if value is None else f"{value:,.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces_dir", help="folder with azure_llm_2023/ and mooncake/ "
                                           "(see the README for where to download them)")
    parser.add_argument("--policies", nargs="*", default=POLICIES, choices=POLICIES)
    parser.add_argument("--traces", nargs="*", default=list(TRACES), choices=list(TRACES))
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out"))
    args = parser.parse_args()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = ["| trace | policy | completed | preemptions | TTFT p50 s | TTFT p99 s "
             "| TPOT p50 s | TPOT p99 s | ITL p99 s | E2EL p50 s | E2EL p99 s | output tok/s "
             "| dispatches | wall s | CPU s | peak MB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in args.traces:
        fmt, rel, extra = TRACES[name]
        converted = out_dir / f"{name}.jsonl"
        child(["convert", "--from", fmt, str(Path(args.traces_dir) / rel), "-o", str(converted)])
        for policy in args.policies:
            wall, cpu, peak, text = child(["replay", str(converted), "--policy", policy,
                                           "--json", *COMMON, *extra])
            run = json.loads(text)["runs"][0]
            lines.append(
                f"| {name} | {policy} | {run['completed']:,} | {run['preemptions']:,} | "
                f"{cell(run['ttft_p50'])} | {cell(run['ttft_p99'])} | "
                f"{cell(run['tpot_p50'], 4)} | {cell(run['tpot_p99'], 4)} | "
                f"{cell(run['itl_p99'], 4)} | {cell(run['e2el_p50'])} | "
                f"{cell(run['e2el_p99'])} | {cell(run['output_throughput'], 0)} | "
                f"{run['iterations']:,} | {wall:.1f} | {cpu:.1f} | {peak:.0f} |")
            print(lines[-1], flush=True)
    events_lines = ["", "| trace | policy | mode | wall s | events file MB |", "|---|---|---|---:|---:|"]
    converted = out_dir / "azure-conv.jsonl"
    if converted.exists():
        for mode in ("summary", "events"):
            argv = ["replay", str(converted), "--policy", "continuous", "--json", *COMMON]
            events = out_dir / "azure-conv.events.jsonl"
            if mode == "events":
                argv += ["--events", str(events)]
            wall, _, _, _ = child(argv)
            size = events.stat().st_size / 1e6 if mode == "events" else 0
            events_lines.append(f"| azure-conv | continuous | {mode} | {wall:.1f} | "
                                f"{size:,.0f} |")
            if events.exists():
                events.unlink()
    text = "\n".join(lines + events_lines) + "\n"
    (out_dir / "public_traces.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
