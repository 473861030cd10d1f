"""Host memory for KV on the public traces: recompute, swap and a write-through tier.

    python3 benchmarks/host_memory.py TRACES_DIR [--azure-blocks 1024]
        [--mooncake-blocks 12288] [--host-kv-gib 64] [--policies vllm,sglang]
        [--out-dir benchmarks/out] [--quick]

TRACES_DIR holds `mooncake/conversation_trace.jsonl` (kvcache-ai/Mooncake,
Apache-2.0) and `azure_llm_2023/AzureLLMInferenceTrace_conv.csv` (Azure
LLM inference trace 2023, CC-BY-4.0); benchmarks/README.md says where to
download them. Each is converted with this checkout's `convert` and
replayed, each run in a child process of its own, with Llama-3-8B on an
H100 SXM (`--cost-model llama-3-8b/h100-sxm`), blocks of 16 tokens, 8,192
tokens and 256 requests per dispatch, and a KV pool small enough that the
trace preempts (the pool a GPU would hold, 27,284 blocks, preempts neither):
1,024 blocks for Azure (where one engine keeps up with the load: TTFT p99
about 6 s), 12,288 for Mooncake (which needs several engines: one engine
falls behind whatever its pool, benchmarks/fleet.py). Under each policy of
`--policies`, five ways to get a preempted request's KV back:

- `recompute`: the default, shown with `--preemption-mode recompute` so that
  the summary says how resumed requests were rebuilt;
- `recompute, prefix cache`: the same with `--prefix-caching` (the GPU cache
  keeps what survives of a victim's blocks);
- `swap`: `--preemption-mode swap --host-kv-gib G --host-write off`;
- `tier`: `--prefix-caching --host-kv-gib G` (every full block written through
  to host memory; a hit there is copied back);
- `tier + swap`: both.

For each run the table gives what the replay printed (makespan, output
throughput, TTFT and E2EL p99, preemptions, recomputed tokens, the rows of
resumed requests rebuilt from the GPU cache, from host memory and by
recompute, the median surviving fraction, swap-outs and refusals, the busy
share of each direction of the host link, the mean load wait) and the CPU
seconds of the replay itself (user + system of the child), against the
`recompute` run of the same policy: what host memory costs the simulator.
`--quick` replays the first 2,000 requests of each trace. Results go to
stdout and to `OUT_DIR/host_memory.md`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ["--cost-model", "llama-3-8b/h100-sxm", "--block-size", "16",
          "--token-budget", "8192", "--max-rows", "256"]
SOURCES = {"mooncake": ("mooncake", Path("mooncake") / "conversation_trace.jsonl"),
           "azure": ("azure", Path("azure_llm_2023") / "AzureLLMInferenceTrace_conv.csv")}
QUICK_REQUESTS = 2000


def modes(gib: float) -> list[tuple[str, list[str]]]:
    """The five ways to get a victim's KV back, as replay flags."""
    host = ["--host-kv-gib", f"{gib:g}"]
    return [("recompute", ["--preemption-mode", "recompute"]),
            ("recompute, prefix cache", ["--preemption-mode", "recompute", "--prefix-caching"]),
            ("swap", ["--preemption-mode", "swap", *host, "--host-write", "off"]),
            ("tier", ["--preemption-mode", "recompute", "--prefix-caching", *host]),
            ("tier + swap", ["--preemption-mode", "swap", "--prefix-caching", *host])]


def child(argv: list[str]) -> tuple[float, dict]:
    """Run `python3 -m scheduler_sim ARGV --json` in the project root: (CPU s of the
    child, its summary)."""
    print("$ scheduler-sim " + " ".join(argv), flush=True)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "scheduler_sim", *argv, "--json"],
                                cwd=ROOT, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if code not in (0, 1):
            raise SystemExit(f"replay failed ({code}):\n{err.read()[-2000:]}")
        return usage.ru_utime + usage.ru_stime, json.load(out)["runs"][0]


def convert(traces_dir: Path, out_dir: Path, quick: bool) -> dict[str, Path]:
    """The converted traces (made once in `out_dir`; the first 2,000 requests with
    `quick`)."""
    out = {}
    for label, (kind, relative) in SOURCES.items():
        full = out_dir / f"{label}_conv.jsonl"
        if not full.exists():
            subprocess.run([sys.executable, "-m", "scheduler_sim", "convert", "--from", kind,
                            str(traces_dir / relative), "-o", str(full)], cwd=ROOT, check=True)
        target = full
        if quick:
            target = out_dir / f"{label}_conv_first{QUICK_REQUESTS}.jsonl"
            with open(full) as src, open(target, "w") as dst:
                for n, line in enumerate(src):
                    if n > QUICK_REQUESTS:  # (the config record and the requests)
                        break
                    dst.write(line)
        out[label] = target
    return out


def cell(value, digits: int = 0, percent: bool = False) -> str:
    """A number as the table shows it ('-' for none)."""
    if value is None:
        return "-"
    if percent:
        return f"{value * 100:.1f}%"
    return f"{value:,.{digits}f}"


def row(trace: str, policy: str, mode: str, cpu: float, base_cpu: float, r: dict) -> list[str]:
    """One run's line of the table."""
    return [trace, policy, mode, cell(r["makespan"], 1), cell(r["output_throughput"], 0),
            cell(r["ttft_p99"], 2), cell(r["e2el_p99"], 2), cell(r["preemptions"]),
            cell(r["recompute_tokens"]), cell(r["rebuilt_from_gpu"]),
            cell(r["rebuilt_from_host"]), cell(r["rebuilt_by_recompute"]),
            cell(r["survival_p50"], percent=True),
            f"{r['swap_outs']:,} / {r['swap_refused']:,}",
            f"{cell(r['link_out_utilisation'], percent=True)} / "
            f"{cell(r['link_in_utilisation'], percent=True)}",
            cell(None if r["load_wait_mean"] is None else r["load_wait_mean"] * 1000, 2),
            f"{cpu:.2f} ({cpu / base_cpu:.2f}x)"]


HEADS = ["trace", "policy", "mode", "makespan s", "output tok/s", "TTFT p99 s", "E2EL p99 s",
         "preempted", "recomputed tok", "rebuilt GPU", "rebuilt host", "rebuilt recompute",
         "survival p50", "swaps / refused", "link out / in", "load wait ms", "CPU s"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces_dir", type=Path)
    parser.add_argument("--azure-blocks", type=int, default=1024)
    parser.add_argument("--mooncake-blocks", type=int, default=12288)
    parser.add_argument("--host-kv-gib", type=float, default=64.0)
    parser.add_argument("--policies", default="vllm,sglang")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "out")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    out_dir = args.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    traces = convert(args.traces_dir, out_dir, args.quick)
    rows = []
    for label, trace in traces.items():
        for policy in args.policies.split(","):
            base = None
            for mode, flags in modes(args.host_kv_gib):
                blocks = args.azure_blocks if label == "azure" else args.mooncake_blocks
                cpu, run = child(["replay", str(trace), "--policy", policy, *ENGINE,
                                  "--num-blocks", str(blocks), *flags])
                base = base or cpu
                rows.append(row(label, policy, mode, cpu, base, run))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADS)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(HEADS, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    text = (f"Host memory: {args.azure_blocks:,} (Azure) and {args.mooncake_blocks:,} "
            f"(Mooncake) GPU blocks of 16 tokens, {args.host_kv_gib:g} GiB of host memory"
            + (f", first {QUICK_REQUESTS:,} requests" if args.quick else "") + "\n\n"
            + "\n".join(lines) + "\n")
    print(text)
    (out_dir / "host_memory.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
