"""How fine must the clock be? Latency percentiles at several clock resolutions,
against a replay with exact (floating-point) dispatch durations.

    python3 benchmarks/resolution.py AZURE_CONV_CSV [--policies continuous vllm sglang]
        [--resolutions 1e-3 1e-4 1e-5 1e-6 1e-7] [--out-dir benchmarks/out]

AZURE_CONV_CSV is `AzureLLMInferenceTrace_conv.csv` of the Azure LLM inference
trace 2023 (Azure/AzurePublicDataset, CC-BY-4.0; cite Patel et al.,
"Splitwise", ISCA 2024). The script converts it with `scheduler-sim convert`
(times in seconds) and replays it with Llama-3-8B on an H100 SXM, 20,480
blocks of 16 tokens, 8,192 tokens and 256 requests per dispatch:

- at each clock resolution given, as `scheduler-sim replay --clock-resolution R`
  does (every completion at the first clock step at or after its exact time);
- once more with exact dispatch durations: in this process, with the clock's
  rounding of completions switched off, so that a dispatch ends at exactly
  start + modelled seconds (floating point); arrivals are placed on a 1 ns
  grid, far below any latency measured here.

For each resolution it reports the largest relative difference of any
latency statistic (queue delay, TTFT, TPOT, ITL, E2EL: mean, p50, p90, p99,
max) from the exact replay, which statistic that is, the number of dispatches
and the replay's CPU time; the exact replay's row gives its median TPOT. The figures land in `benchmarks/out/resolution.md`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler_sim.records import clock as clock_module  # noqa: E402
from scheduler_sim.engine import run_stats as run_stats_module  # noqa: E402
from scheduler_sim.engine.core import Engine  # noqa: E402
from scheduler_sim.records.options import Options  # noqa: E402
from scheduler_sim.engine.summary import METRICS, STATS  # noqa: E402
from scheduler_sim.io.trace import read_trace  # noqa: E402

SETUP = {"cost_model": "llama-3-8b/h100-sxm", "block_size": 16, "num_blocks": 20480,
         "token_budget": 8192, "max_rows": 256}
LATENCIES = [f"{m}_{s}" for m in METRICS if m != "client_wait" for s in STATS]


def replay(trace, policy: str, resolution: float, exact: bool) -> tuple[dict, float]:
    """One replay in this process; (summary, CPU seconds)."""
    options = Options.resolve(trace.config, dict(SETUP, clock_resolution=resolution))
    saved = clock_module.Clock.end_step
    saved_array = run_stats_module.array
    if exact:
        clock_module.Clock.end_step = lambda self, exact_end, start: exact_end
        # latencies are kept in integer arrays of steps; exact ends are floats
        run_stats_module.array = lambda typecode, *values: list(*values)
    try:
        start = time.process_time()
        result = Engine(trace.workload, options, policy).run()
        return result.summary, time.process_time() - start
    finally:
        clock_module.Clock.end_step = saved
        run_stats_module.array = saved_array


def worst(run: dict, reference: dict) -> tuple[str, float]:
    """The latency statistic furthest from the reference, and its relative difference."""
    def rel(key: str) -> float:
        a, b = run[key], reference[key]
        if a is None or b is None:
            return 0.0 if a == b else float("inf")
        return abs(a - b) / abs(b) if b else (0.0 if a == 0 else float("inf"))
    key = max(LATENCIES, key=rel)
    return key, rel(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("azure_csv", help="AzureLLMInferenceTrace_conv.csv")
    parser.add_argument("--policies", nargs="*", default=["continuous", "vllm", "sglang"])
    parser.add_argument("--resolutions", nargs="*", type=float,
                        default=[1e-3, 1e-4, 1e-5, 1e-6, 1e-7])
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out"))
    args = parser.parse_args()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    converted = out_dir / "azure-conv.jsonl"
    subprocess.run([sys.executable, "-m", "scheduler_sim", "convert", "--from", "azure",
                    args.azure_csv, "-o", str(converted)], check=True, cwd=ROOT,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    trace = read_trace(str(converted))
    lines = ["| policy | clock resolution | dispatches | worst statistic | its value s "
             "| exact s | relative difference | CPU s |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for policy in args.policies:
        reference, cpu = replay(trace, policy, 1e-9, exact=True)
        lines.append(f"| {policy} | exact | {reference['iterations']:,} | tpot_p50 | "
                     f"{reference['tpot_p50']} | | | {cpu:.1f} |")
        print(lines[-1], flush=True)
        for resolution in args.resolutions:
            run, cpu = replay(trace, policy, resolution, exact=False)
            key, rel = worst(run, reference)
            lines.append(f"| {policy} | {resolution:g} s | {run['iterations']:,} | {key} | "
                         f"{run[key]} | {reference[key]} | {rel:.2e} | {cpu:.1f} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    (out_dir / "resolution.md").write_text(text)


if __name__ == "__main__":
    main()
