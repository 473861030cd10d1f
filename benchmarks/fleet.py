"""Fleets on the Mooncake conversation trace: how many replicas, which router, at what cost.

    python3 benchmarks/fleet.py TRACES_DIR [--max-replicas 64] [--out-dir benchmarks/out] [--quick]

TRACES_DIR holds `mooncake/conversation_trace.jsonl`, the Mooncake FAST'25
conversation trace (kvcache-ai/Mooncake, Apache-2.0; see benchmarks/README.md
for where to download it). The script converts it with this checkout's
`convert` (its `hash_ids` become `block_hashes` on 512-token blocks) and
replays it with prefix caching under `vllm`, each run in a child process of
its own, with the options of targets.py and public_traces.py: Llama-3-8B on
an H100 SXM per replica (`--cost-model llama-3-8b/h100-sxm`), a KV pool of
20,480 blocks of 16 tokens per replica (40 GiB, not the pool sized from the
GPU), 8,192 tokens and 256 requests per dispatch.

1. The fleet size. Under `prefix-affinity` (default `affinity_slack`), N
   goes 1, 2, 4, 8, ... up to `--max-replicas` until the TTFT percentile
   `--metric` (ttft_p99) is under `--target` seconds (2), then bisects
   between the last N that missed and the first that met it. Doubling stops
   early when a run is identical to the one before it (more replicas no
   longer change a single routing decision). If no N meets the target, the
   script says so and takes the knee instead: the smallest N whose metric is
   within `--knee` (5%) of the best one seen, found by bisecting the same
   bracket (a heuristic: the metric need not be monotone in N).
2. The routers side by side at that N: TTFT p50/p99, E2EL p99, throughput,
   preemptions, cached (prefix hit) tokens, requests per replica, and the
   simulator's wall and CPU seconds; then `prefix-affinity` at the
   `--slacks` given.
3. Why the target can or cannot be met: each request replayed alone on an
   idle replica (arrivals 100 s apart, one output token, no prefix caching),
   and the prompt tokens no earlier request of the trace shares as a prefix
   (a bound for any router with any number of replicas, computed here).
4. The simulator's cost: one replica taking the whole trace against the
   fleet of N (per replica, per dispatch, per request), and against N
   separate replays of the trace split as `round-robin` splits it (the same
   work without the fleet), whose results must equal the fleet's replicas'.

`--quick` replays the first 3,000 requests only (a smoke run). Each child's
command line is printed before it runs; results go to stdout and to
`OUT_DIR/fleet.md`; CPU seconds are the child's own (user + system, from
os.wait4). The calibration loop of targets.py is timed too, so that figures
from another machine can be scaled by the ratio of its times.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from targets import CALIBRATION  # noqa: E402  (the same loop, so figures scale alike)

COMMON = ["--cost-model", "llama-3-8b/h100-sxm", "--block-size", "16", "--num-blocks", "20480",
          "--token-budget", "8192", "--max-rows", "256"]
POLICY = ["--policy", "vllm", "--prefix-caching"]
ROUTERS = ["round-robin", "least-loaded", "prefix-affinity", "power-of-two"]
QUICK_REQUESTS = 3000
HASH_BLOCK = 512  # tokens per Mooncake hash id (convert's hash_block_size)


def shown(argv: list[str]) -> str:
    """A child's command line as a reader can type it in the project root."""
    if argv[:1] == ["-c"] and argv[1:2] == [CALIBRATION]:
        return "python3 -c \"$CALIBRATION\"  # the loop CALIBRATION of benchmarks/targets.py"
    out = []
    for a in argv:
        p = Path(a)
        if p.is_absolute():
            try:
                a = str(p.relative_to(ROOT))
            except ValueError:
                pass
        out.append(a)
    return "python3 " + shlex.join(out)


def child(argv: list[str], echo: bool = True) -> tuple[float, float, str]:
    """Run `python3 ARGV` in the project root: (wall s, CPU s of the child, its stdout)."""
    if echo:
        print("$ " + shown(argv), flush=True)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=out, stderr=err,
                                text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if code not in (0, 1):
            raise SystemExit(f"{shown(argv)} failed ({code}):\n{err.read()[-2000:]}")
        return wall, usage.ru_utime + usage.ru_stime, out.read()


def replay_argv(trace: Path, replicas: int, router: str | None, extra: list[str] = ()) -> list:
    argv = ["-m", "scheduler_sim", "replay", str(trace), *POLICY, *COMMON]
    if replicas > 1:
        argv += ["--replicas", str(replicas), "--router", router]
    return argv + list(extra) + ["--json"]


def replay(trace: Path, replicas: int, router: str | None = None,
           extra: list[str] = ()) -> dict:
    """One replay in a child: the run's summary, with `wall`, `cpu`, `replicas` (N),
    `per_replica` (requests routed to each replica) and `replica_summaries` added."""
    wall, cpu, out = child(replay_argv(trace, replicas, router, extra))
    run = json.loads(out)["runs"][0]
    run["replica_summaries"] = run.get("replicas", [])
    run["per_replica"] = ([r["requests"] for r in run["replica_summaries"]]
                          if "replicas" in run else [run["requests"]])
    run["replicas"] = replicas
    run["wall"], run["cpu"] = wall, cpu
    return run


# ---------------------------------------------------------------------------
# Traces

def head_of_trace(source: Path, target: Path, requests: int) -> None:
    """Write the config record and the first `requests` requests of a converted trace."""
    taken = 0
    with open(source) as src, open(target, "w") as dst:
        for line in src:
            if '"type":"request"' in line.replace(" ", ""):
                if taken == requests:
                    break
                taken += 1
            dst.write(line)


def spaced_trace(source: Path, target: Path, gap: float = 100.0) -> None:
    """Every request alone: arrivals `gap` seconds apart, one output token each."""
    index = 0
    with open(source) as src, open(target, "w") as dst:
        for line in src:
            record = json.loads(line)
            if record.get("type") == "request":
                record["arrival"] = index * gap
                record["output_tokens"] = 1
                index += 1
            dst.write(json.dumps(record, separators=(",", ":")) + "\n")


def round_robin_split(source: Path, n: int, stem: Path) -> list[Path]:
    """The trace as `round-robin` splits it over n replicas: request i to file i mod n."""
    paths = [stem.with_name(f"{stem.name}-rr{i}of{n}.jsonl") for i in range(n)]
    files = [open(p, "w") for p in paths]
    try:
        index = 0
        with open(source) as src:
            for line in src:
                if '"type":"request"' in line.replace(" ", ""):
                    files[index % n].write(line)
                    index += 1
                else:
                    for f in files:
                        f.write(line)
    finally:
        for f in files:
            f.close()
    return paths


def unshared_tokens(trace: Path) -> list[int]:
    """Per request, the prompt tokens beyond the longest chain of leading hash blocks
    that some earlier request of the trace also began with (at least 1: the last
    prompt token is always computed). No router and no cache can hit more."""
    seen: set[tuple] = set()
    out = []
    block = HASH_BLOCK
    with open(trace) as src:
        for line in src:
            record = json.loads(line)
            if record.get("type") == "config":
                block = record.get("hash_block_size", block)
            if record.get("type") != "request":
                continue
            hashes = tuple(record.get("block_hashes") or ())
            k = 0
            while k < len(hashes) and hashes[:k + 1] in seen:
                k += 1
            for j in range(k, len(hashes)):
                seen.add(hashes[:j + 1])
            out.append(max(1, record["prompt_tokens"] - k * block))
    return out


def percentile(values: list, q: float) -> float:
    """The nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


# ---------------------------------------------------------------------------
# The search

def search(run: Callable[[int], dict], metric: str, target: float, max_replicas: int,
           knee: float = 0.05) -> tuple[int, bool, dict[int, dict], str]:
    """The smallest N with run(N)[metric] < target: (N, met, runs by N, how it was found).

    N doubles from 1 to max_replicas; then bisects between the last N that missed
    and the first that met. Doubling stops when a run equals the one before it
    (same metric and the same requests per used replica). If nothing meets the
    target, N is the smallest one within `knee` of the best metric seen, by
    bisecting the bracket of the first doubling step that reached it."""
    runs: dict[int, dict] = {}

    def get(n: int) -> dict:
        if n not in runs:
            runs[n] = run(n)
        return runs[n]

    def same(a: dict, b: dict) -> bool:
        return (a[metric] == b[metric]
                and [x for x in a["per_replica"] if x] == [x for x in b["per_replica"] if x])

    n, doubled, plateau = 1, [], False
    while True:
        r = get(n)
        doubled.append(n)
        if r[metric] < target:
            break
        if len(doubled) > 1 and same(r, runs[doubled[-2]]):
            plateau = True
            break
        if n >= max_replicas:
            break
        n = min(2 * n, max_replicas)
    met = runs[doubled[-1]][metric] < target
    if met:
        good = lambda r: r[metric] < target  # noqa: E731
    else:
        best = min(runs[m][metric] for m in doubled)
        good = lambda r: r[metric] <= best * (1 + knee)  # noqa: E731
    hi = next(m for m in doubled if good(runs[m]))
    lower = [m for m in doubled if m < hi]
    lo = lower[-1] if lower else 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if good(get(mid)):
            hi = mid
        else:
            lo = mid
    how = (f"doubling {', '.join(map(str, doubled))}"
           + (" (stopped: the last run equals the one before)" if plateau else "")
           + (f"; bisection {', '.join(str(m) for m in sorted(runs) if m not in doubled)}"
              if len(runs) > len(doubled) else ""))
    return hi, met, runs, how


# ---------------------------------------------------------------------------
# Tables

def num(value, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def table(heads: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    """An aligned Markdown table: columns after the first are right-aligned."""
    right = set(range(1, len(heads))) if right is None else right
    widths = [max(len(str(x)) for x in col) for col in zip(heads, *rows)]

    def line(cells):
        return "| " + " | ".join(
            str(c).rjust(w) if i in right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if i in right else ("-" * (w + 2))
                          for i, w in enumerate(widths)) + "|"
    return [line(heads), rule, *map(line, rows)]


def router_row(label: str, r: dict) -> list[str]:
    used = [x for x in r["per_replica"] if x]
    return [label, num(r["ttft_p50"], 3), num(r["ttft_p99"], 3), num(r["e2el_p99"], 3),
            num(r["request_throughput"], 3), num(r["output_throughput"]),
            num(r["preemptions"]), num(r["cached_tokens"]),
            num(100 * r["cached_tokens"] / r["prompt_tokens"], 1),
            f"{len(used)}/{r['replicas']}", num(min(r["per_replica"])),
            num(max(r["per_replica"])), num(r["iterations"]), num(r["wall"], 1),
            num(r["cpu"], 1)]


ROUTER_HEADS = ["run", "TTFT p50 s", "TTFT p99 s", "E2EL p99 s", "req/s", "output tok/s",
                "preemptions", "cached tokens", "cached %", "replicas used",
                "min req/replica", "max req/replica", "dispatches", "wall s", "CPU s"]


def cost_row(label: str, n: int, wall: float, cpu: float, dispatches: int,
             requests: int, computed: int) -> list[str]:
    return [label, num(n), num(requests), num(dispatches), num(wall, 1), num(cpu, 1),
            num(cpu / n, 2), num(1e6 * cpu / dispatches, 1), num(1e3 * cpu / requests, 2),
            num(1e6 * cpu / computed, 3)]


COST_HEADS = ["run", "replicas", "requests", "dispatches", "wall s", "CPU s",
              "CPU s per replica", "CPU us per dispatch", "CPU ms per request",
              "CPU us per computed token"]


def computed_tokens(r: dict) -> int:
    """Rows the GPU computes: prompt tokens not found cached, recomputed ones, decodes."""
    return r["prompt_tokens"] - r["cached_tokens"] + r["recompute_tokens"] + r["decode_tokens"]


# ---------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces_dir", type=Path)
    parser.add_argument("--max-replicas", type=int, default=64)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "out")
    parser.add_argument("--quick", action="store_true",
                        help=f"the first {QUICK_REQUESTS:,} requests only (a smoke run)")
    parser.add_argument("--metric", default="ttft_p99",
                        choices=["ttft_p50", "ttft_p90", "ttft_p99", "e2el_p99"])
    parser.add_argument("--target", type=float, default=2.0, help="seconds (default 2)")
    parser.add_argument("--knee", type=float, default=0.05)
    parser.add_argument("--slacks", default="0,4",
                        help="affinity_slack values to compare at N (default 0,4)")
    args = parser.parse_args(argv)
    if args.max_replicas < 1:
        parser.error("--max-replicas must be >= 1")
    out_dir = args.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    source = args.traces_dir / "mooncake" / "conversation_trace.jsonl"
    trace = out_dir / "mooncake_conv.jsonl"
    if not trace.exists():
        subprocess.run([sys.executable, "-m", "scheduler_sim", "convert", "--from", "mooncake",
                        str(source), "-o", str(trace)], cwd=ROOT, check=True)
    if args.quick:
        full, trace = trace, out_dir / f"mooncake_conv-first{QUICK_REQUESTS}.jsonl"
        head_of_trace(full, trace, QUICK_REQUESTS)
    md: list[str] = []

    def say(*lines: str) -> None:
        for line in lines:
            print(line, flush=True)
        md.extend(lines)

    cal_wall, cal_cpu, _ = child(["-c", CALIBRATION])
    say("# Fleets on the Mooncake conversation trace", "",
        "Trace: Mooncake FAST'25 conversation trace (kvcache-ai/Mooncake, Apache-2.0)"
        + (f", first {QUICK_REQUESTS:,} requests (--quick)" if args.quick else "") + ".",
        "Each replica: vllm, prefix caching, Llama-3-8B on an H100 SXM, 20,480 blocks of 16 "
        "tokens, 8,192 tokens and 256 requests per dispatch.",
        f"Calibration loop (targets.py): {cal_wall:.2f} s wall, {cal_cpu:.2f} s CPU.", "")

    # 1. The fleet size.
    print(f"## searching N: prefix-affinity, {args.metric} < {args.target:g} s", flush=True)
    n, met, found, how = search(lambda k: replay(trace, k, "prefix-affinity"), args.metric,
                                args.target, args.max_replicas, args.knee)
    rows = [[num(k), num(r[args.metric], 3), num(r["ttft_p50"], 3), num(r["e2el_p99"], 3),
             num(r["cached_tokens"]), f"{sum(1 for x in r['per_replica'] if x)}/{k}",
             num(r["wall"], 1), num(r["cpu"], 1)] for k, r in sorted(found.items())]
    metric_head = args.metric.replace("_", " ").upper().replace("TTFT P", "TTFT p").replace(
        "E2EL P", "E2EL p") + " s"
    say("## The fleet size (prefix-affinity, default affinity_slack)", "",
        *table(["N", metric_head, "TTFT p50 s", "E2EL p99 s", "cached tokens",
                "replicas used", "wall s", "CPU s"], rows), "", f"Search: {how}.")
    if met:
        say(f"Smallest N with {args.metric} < {args.target:g} s: **{n}**.", "")
    else:
        best = min(r[args.metric] for r in found.values())
        say(f"No N up to {max(found):,} gets {args.metric} under {args.target:g} s "
            f"(best {best:.3f} s). Taken instead: the smallest N within "
            f"{100 * args.knee:g}% of the best, **{n}**.", "")

    # 2. The routers at N.
    print(f"## the routers at N = {n}", flush=True)
    by_router = {"prefix-affinity": found[n]}
    for router in ROUTERS:
        if router not in by_router:
            by_router[router] = replay(trace, n, router)
    slack_runs = {}
    for slack in [s for s in args.slacks.split(",") if s.strip()]:
        slack_runs[slack] = replay(trace, n, "prefix-affinity", ["--affinity-slack", slack])
    say(f"## The routers at N = {n}", "",
        *table(ROUTER_HEADS, [router_row(k, by_router[k]) for k in ROUTERS]
               + [router_row(f"prefix-affinity, slack {s}", r) for s, r in slack_runs.items()],
               right=set(range(1, len(ROUTER_HEADS)))), "")

    # 3. The floor.
    print("## the floor: every request alone", flush=True)
    spaced = out_dir / (trace.stem + "-alone.jsonl")
    spaced_trace(trace, spaced)
    alone = replay(spaced, 1, extra=["--no-prefix-caching"])
    unshared = unshared_tokens(trace)
    say("## The floor", "",
        f"Every request alone on an idle replica (arrivals 100 s apart, 1 output token, no "
        f"prefix caching): TTFT p50 {alone['ttft_p50']:.3f} s, p90 {alone['ttft_p90']:.3f} s, "
        f"p99 {alone['ttft_p99']:.3f} s.",
        f"Prompt tokens no earlier request shares as a prefix (512-token hash blocks; no router "
        f"can hit more): p50 {percentile(unshared, 50):,}, p90 {percentile(unshared, 90):,}, "
        f"p99 {percentile(unshared, 99):,} of prompts p99 "
        f"{percentile([r for r in prompt_lengths(trace)], 99):,}.", "")

    # 4. The cost.
    print("## the cost: one replica, the fleet, the split", flush=True)
    start_wall, start_cpu, _ = child(["-m", "scheduler_sim", "--help"])
    one = found.get(1) or replay(trace, 1)
    rr = by_router["round-robin"]
    split_rows, split, mismatches = [], [], []
    if n > 1:
        parts = round_robin_split(trace, n, out_dir / trace.stem)
        for i, part in enumerate(parts):
            split.append(replay(part, 1))
            part.unlink()
        for i, (mine, theirs) in enumerate(zip(split, rr["replica_summaries"])):
            for key in ("requests", "completed", "iterations", "ttft_p50", "ttft_p99",
                        "e2el_p99", "cached_tokens", "preemptions", "output_tokens"):
                if mine[key] != theirs[key]:
                    mismatches.append(f"replica {i}: {key} {theirs[key]} in the fleet, "
                                      f"{mine[key]} alone")
        split_rows = [cost_row(f"{n} separate replays of the round-robin split", n,
                               sum(s["wall"] for s in split), sum(s["cpu"] for s in split),
                               sum(s["iterations"] for s in split),
                               sum(s["requests"] for s in split),
                               sum(computed_tokens(s) for s in split))]
    cost_rows = [cost_row("one replica, whole trace", 1, one["wall"], one["cpu"],
                          one["iterations"], one["requests"], computed_tokens(one))]
    cost_rows += [cost_row(f"fleet, {k}", n, by_router[k]["wall"], by_router[k]["cpu"],
                           by_router[k]["iterations"], by_router[k]["requests"],
                           computed_tokens(by_router[k])) for k in ROUTERS]
    say("## The simulator's cost", "", *table(COST_HEADS, cost_rows + split_rows), "",
        f"One replica: {one['iterations']:,} dispatches of {one['mean_batch_rows']:.1f} rows "
        f"on average, TTFT p99 {one['ttft_p99']:,.1f} s. Fleet (round-robin): "
        f"{rr['iterations']:,} dispatches of {rr['mean_batch_rows']:.2f} rows.")
    if n > 1:
        say(f"Starting a child (`python3 -m scheduler_sim --help`) costs {start_cpu:.2f} s CPU "
            f"({start_wall:.2f} s wall): once per run, {n} times in the split.")
        say("The split replays give the fleet's per-replica results exactly."
            if not mismatches else
            "The split replays differ from the fleet's replicas: " + "; ".join(mismatches[:8]))
    say("")
    (out_dir / "fleet.md").write_text("\n".join(md) + "\n")
    print(f"written: {out_dir / 'fleet.md'}")
    return 0


def prompt_lengths(trace: Path) -> list[int]:
    with open(trace) as src:
        return [json.loads(line)["prompt_tokens"] for line in src
                if '"type":"request"' in line.replace(" ", "")]


if __name__ == "__main__":
    sys.exit(main())
