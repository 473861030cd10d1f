"""How fine must the clock be? Latency percentiles at several clock resolutions,
against a replay on a clock a thousand times finer than the finest of them.

    python3 benchmarks/resolution.py AZURE_CONV_CSV [--policies continuous vllm sglang]
        [--resolutions 1e-3 1e-4 1e-5 1e-6 1e-7] [--reference 1e-10]
        [--out-dir benchmarks/out]

AZURE_CONV_CSV is `AzureLLMInferenceTrace_conv.csv` of the Azure LLM inference
trace 2023 (Azure/AzurePublicDataset, CC-BY-4.0; cite Patel et al.,
"Splitwise", ISCA 2024). The script converts it with `scheduler-sim convert`
(times in seconds) and replays it with Llama-3-8B on an H100 SXM, 20,480
blocks of 16 tokens, 8,192 tokens and 256 requests per dispatch, as
`scheduler-sim replay --clock-resolution R` does (every completion at the
first clock step at or after its modelled end), at each resolution given and
once at `--reference` (0.1 ns by default), which stands for exact durations:
every completion and arrival lands within one step (0.1 ns) of its exact time,
and a decision can differ from the exact replay's only where two of them fall
within that step of each other.

(The reference was once a replay with the clock's rounding switched off, by
patching `Clock.end_step`; the engine now times folded stretches with that
rounding inlined, so a patch no longer reaches every completion, and a fine
clock measures the same thing with the engine as it runs.)

For each resolution it reports the largest relative difference of any
latency statistic (queue delay, TTFT, TPOT, ITL, E2EL: mean, p50, p90, p99,
max) from the reference replay, which statistic that is, the number of
dispatches and the replay's CPU time; the reference's row gives its median
TPOT. The figures land in `benchmarks/out/resolution.md`.
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

from scheduler_sim.engine.core import Engine  # noqa: E402
from scheduler_sim.records.options import Options  # noqa: E402
from scheduler_sim.engine.summary import METRICS, STATS  # noqa: E402
from scheduler_sim.io.trace import read_trace  # noqa: E402

SETUP = {"cost_model": "llama-3-8b/h100-sxm", "block_size": 16, "num_blocks": 20480,
         "token_budget": 8192, "max_rows": 256}
LATENCIES = [f"{m}_{s}" for m in METRICS if m != "client_wait" for s in STATS]


def replay(trace, policy: str, resolution: float) -> tuple[dict, float]:
    """One replay in this process at a clock of `resolution` seconds; (summary, CPU
    seconds)."""
    options = Options.resolve(trace.config, dict(SETUP, clock_resolution=resolution))
    start = time.process_time()
    result = Engine(trace.workload, options, policy).run()
    return result.summary, time.process_time() - start


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
    parser.add_argument("--reference", type=float, default=1e-10,
                        help="the reference replay's clock resolution, in seconds")
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
             "| reference s | relative difference | CPU s |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for policy in args.policies:
        reference, cpu = replay(trace, policy, args.reference)
        lines.append(f"| {policy} | {args.reference:g} s (reference) | "
                     f"{reference['iterations']:,} | tpot_p50 | "
                     f"{reference['tpot_p50']} | | | {cpu:.1f} |")
        print(lines[-1], flush=True)
        for resolution in args.resolutions:
            run, cpu = replay(trace, policy, resolution)
            key, rel = worst(run, reference)
            lines.append(f"| {policy} | {resolution:g} s | {run['iterations']:,} | {key} | "
                         f"{run[key]} | {reference[key]} | {rel:.2e} | {cpu:.1f} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    (out_dir / "resolution.md").write_text(text)


if __name__ == "__main__":
    main()
