"""Fleets on the Mooncake conversation trace: how many replicas, which router, at what cost.

    python3 benchmarks/fleet.py TRACES_DIR [--max-replicas 64] [--tps 2,4,8] [--max-gpus 64]
        [--out-dir benchmarks/out] [--quick]

TRACES_DIR holds `mooncake/conversation_trace.jsonl`, the Mooncake FAST'25
conversation trace (kvcache-ai/Mooncake, Apache-2.0; see benchmarks/README.md
for where to download it). The script converts it with this checkout's
`convert` (its `hash_ids` become `block_hashes` on 512-token blocks) and
replays it with prefix caching under `vllm`, each run in a child process of
its own, with the options of targets.py and public_traces.py: Llama-3-8B on
H100 SXMs (`--cost-model llama-3-8b/h100-sxm`), an engine of `--tp` GPUs
holding 20,480 x tp blocks of 16 tokens (40 GiB of KV per GPU, not the pool
sized from the GPU), 8,192 tokens and 256 requests per dispatch.

1. The fleet size at tp 1. Under `prefix-affinity` (default threshold and
   slack), N goes 1, 2, 4, 8, ... up to `--max-replicas` until the TTFT
   percentile `--metric` (ttft_p99) is under `--target` seconds (2), then
   bisects between the last N that missed and the first that met it.
   Doubling stops early when a run is identical to the one before it. If no
   N meets the target, the knee: the smallest N whose metric is within
   `--knee` (5%) of the best one seen, found by bisecting the same bracket
   (a heuristic: the metric need not be monotone in N).
2. The fleet size at each tp of `--tps`. First the prefix bound: every
   request alone on an idle engine of that tp, its prompt cut to the tokens
   no earlier request of the trace shares as a prefix, without prefix
   caching, so that no fleet of that tp can do better; a tp whose bound
   misses the target is not searched. Otherwise the same search, N up to
   `--max-gpus` / tp. The cheapest fleet meeting the target (fewest GPUs,
   N x tp) is taken, else the knee at tp 1.
3. At that N and tp: the routers side by side (TTFT, TPOT, ITL, E2EL,
   throughput, preemptions, cached tokens, requests per replica, dispatches,
   the simulator's wall and CPU seconds), `prefix-affinity` at the
   `--thresholds` (0: the router before the threshold) and `--slacks`
   given; then prefill/decode disaggregation on the same engines split as
   P prefill + D decode (every split up to 4 engines, else a quarter, a
   half and three quarters prefilling), `prefix-affinity`, default link.
4. The floor at every tp: each request replayed alone on an idle engine
   (arrivals 100 s apart, one output token, no prefix caching), the prefix
   bound, and the unshared prompt tokens' percentiles.
5. The simulator's cost: one replica taking the whole trace (tp 1 and the
   chosen tp) against the fleet under each router and the disaggregated
   fleets (per replica, per dispatch, per request, per computed token), and
   against N separate replays of the trace split as `round-robin` splits it
   (the same work without the fleet), whose results must equal the fleet's
   replicas'.

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

COMMON = ["--cost-model", "llama-3-8b/h100-sxm", "--block-size", "16",
          "--token-budget", "8192", "--max-rows", "256"]
BLOCKS_PER_GPU = 20480  # 40 GiB of KV per GPU: 20,480 blocks at tp=1, 20,480 x tp at tp
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


def engine_argv(tp: int) -> list[str]:
    """The per-engine options at `tp` GPUs: the KV pool grows with the GPUs (40 GiB each)."""
    return ["--num-blocks", str(BLOCKS_PER_GPU * tp)] + (["--tp", str(tp)] if tp > 1 else [])


def replay_argv(trace: Path, replicas: int, router: str | None, extra: list[str] = (),
                tp: int = 1, pd: tuple[int, int] | None = None) -> list:
    argv = ["-m", "scheduler_sim", "replay", str(trace), *POLICY, *COMMON, *engine_argv(tp)]
    if pd:
        argv += ["--prefill-replicas", str(pd[0]), "--decode-replicas", str(pd[1]),
                 "--router", router]
    elif replicas > 1:
        argv += ["--replicas", str(replicas), "--router", router]
    return argv + list(extra) + ["--json"]


def replay(trace: Path, replicas: int, router: str | None = None,
           extra: list[str] = (), tp: int = 1, pd: tuple[int, int] | None = None) -> dict:
    """One replay in a child: the run's summary, with `wall`, `cpu`, `replicas` (N engines,
    P + D with `pd`), `tp`, `gpus`, `per_replica` (requests routed to each replica) and
    `replica_summaries` added."""
    wall, cpu, out = child(replay_argv(trace, replicas, router, extra, tp, pd))
    run = json.loads(out)["runs"][0]
    run["replica_summaries"] = run.get("replicas", [])
    run["per_replica"] = ([r["requests"] for r in run["replica_summaries"]]
                          if "replicas" in run else [run["requests"]])
    run["replicas"] = sum(pd) if pd else replicas
    run["tp"], run["gpus"] = tp, run["replicas"] * tp
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


def unshared_trace(source: Path, target: Path, gap: float = 100.0) -> None:
    """The prefix bound as a trace: every request alone (arrivals `gap` seconds apart, one
    output token), its prompt cut to the tokens no earlier request shares as a prefix
    (`unshared_tokens`), without block hashes. Replayed without prefix caching, each
    request's TTFT is a lower bound of its TTFT under any router, fleet and cache: it
    computes no more tokens, none of them after a longer context, and never queues."""
    unshared = iter(unshared_tokens(source))
    index = 0
    with open(source) as src, open(target, "w") as dst:
        for line in src:
            record = json.loads(line)
            if record.get("type") == "request":
                record["arrival"] = index * gap
                record["output_tokens"] = 1
                record["prompt_tokens"] = next(unshared)
                record.pop("block_hashes", None)
                record.pop("max_tokens", None)
                record.pop("prompt_token_ids", None)
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


def ms(value) -> str:
    return "-" if value is None else f"{1e3 * value:,.1f}"


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


def cached_tokens(r: dict) -> int:
    """Prompt tokens found cached where the prompt is computed. A disaggregated fleet's
    own `cached_tokens` adds each request's hits on its prefill replica and on its decode
    replica (where a hit saves copying, not computing): take its prefill replicas' only."""
    prefill = [x for x in r.get("replica_summaries", []) if x.get("role") == "prefill"]
    return sum(x["cached_tokens"] for x in prefill) if prefill else r["cached_tokens"]


def router_row(label: str, r: dict, prompt_total: int) -> list[str]:
    used = [x for x in r["per_replica"] if x]
    return [label, num(r["ttft_p50"], 3), num(r["ttft_p99"], 3), ms(r["tpot_p50"]),
            ms(r["tpot_p99"]), ms(r["itl_p99"]), num(r["e2el_p99"], 3),
            num(r["request_throughput"], 3), num(r["output_throughput"]),
            num(r["preemptions"]), num(cached_tokens(r)),
            num(100 * cached_tokens(r) / prompt_total, 1),
            f"{len(used)}/{r['replicas']}", num(min(r["per_replica"])),
            num(max(r["per_replica"])), num(r["iterations"]), num(r["wall"], 1),
            num(r["cpu"], 1)]


ROUTER_HEADS = ["run", "TTFT p50 s", "TTFT p99 s", "TPOT p50 ms", "TPOT p99 ms", "ITL p99 ms",
                "E2EL p99 s", "req/s", "output tok/s", "preemptions", "cached tokens",
                "cached %", "replicas used", "min req/replica", "max req/replica",
                "dispatches", "wall s", "CPU s"]


def pd_row(label: str, r: dict, prompt_total: int) -> list[str]:
    return [label, num(r["ttft_p50"], 3), num(r["ttft_p99"], 3), ms(r["tpot_p50"]),
            ms(r["tpot_p99"]), ms(r["itl_p99"]), num(r["e2el_p99"], 3),
            num(r["request_throughput"], 3), num(r["output_throughput"]),
            num(r["preemptions"]), num(100 * cached_tokens(r) / prompt_total, 1),
            num(r.get("transfers")), ms(r.get("transfer_time_mean")),
            ms(r.get("transfer_time_max")), num(r["iterations"]), num(r["wall"], 1),
            num(r["cpu"], 1)]


PD_HEADS = ["run", "TTFT p50 s", "TTFT p99 s", "TPOT p50 ms", "TPOT p99 ms", "ITL p99 ms",
            "E2EL p99 s", "req/s", "output tok/s", "preemptions", "cached %", "transfers",
            "transfer mean ms", "transfer max ms", "dispatches", "wall s", "CPU s"]


def cost_row(label: str, n: int, wall: float, cpu: float, dispatches: int,
             requests: int, computed: int) -> list[str]:
    return [label, num(n), num(requests), num(dispatches), num(wall, 1), num(cpu, 1),
            num(cpu / n, 2), num(1e6 * cpu / dispatches, 1), num(1e3 * cpu / requests, 2),
            num(1e6 * cpu / computed, 3)]


COST_HEADS = ["run", "replicas", "requests", "dispatches", "wall s", "CPU s",
              "CPU s per replica", "CPU us per dispatch", "CPU ms per request",
              "CPU us per computed token"]


def computed_tokens(r: dict) -> int:
    """Rows the GPUs compute: the summary's `prompt_tokens` (prompt rows dispatched, the
    cached ones not among them), `recompute_tokens` and `decode_tokens`."""
    return r["prompt_tokens"] + r["recompute_tokens"] + r["decode_tokens"]


def run_cost_row(label: str, r: dict) -> list[str]:
    return cost_row(label, r["replicas"], r["wall"], r["cpu"], r["iterations"], r["requests"],
                    computed_tokens(r))


def pd_splits(n: int) -> list[tuple[int, int]]:
    """Prefill + decode splits of n engines: every one up to 4 engines; else a quarter,
    a half and three quarters of them prefilling (rounded, at least 1 of each)."""
    if n < 2:
        return []
    ps = range(1, n) if n <= 4 else sorted({max(1, min(n - 1, round(n * f)))
                                             for f in (0.25, 0.5, 0.75)})
    return [(p, n - p) for p in ps]


def cheapest(results: dict[int, tuple[int, bool, dict]], metric: str) -> tuple[int, int] | None:
    """Among the tp values whose search met the target, (tp, N) with the fewest GPUs
    (N x tp), then the lowest metric, then the smaller tp; None if none met it."""
    met = [(n * tp, runs[n][metric], tp, n) for tp, (n, ok, runs) in results.items() if ok]
    return min(met)[2:] if met else None


def metric_head(metric: str) -> str:
    return metric.replace("_", " ").upper().replace("TTFT P", "TTFT p").replace(
        "E2EL P", "E2EL p") + " s"


# ---------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces_dir", type=Path)
    parser.add_argument("--max-replicas", type=int, default=64,
                        help="the largest N tried at tp 1 (default 64)")
    parser.add_argument("--tps", default="2,4,8",
                        help="GPUs per engine (tensor parallelism) to search beyond tp 1 "
                             "(default 2,4,8)")
    parser.add_argument("--max-gpus", type=int, default=64,
                        help="at tp > 1, N goes up to max_gpus // tp (default 64)")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "out")
    parser.add_argument("--quick", action="store_true",
                        help=f"the first {QUICK_REQUESTS:,} requests only (a smoke run)")
    parser.add_argument("--metric", default="ttft_p99",
                        choices=["ttft_p50", "ttft_p90", "ttft_p99", "e2el_p99"])
    parser.add_argument("--target", type=float, default=2.0, help="seconds (default 2)")
    parser.add_argument("--knee", type=float, default=0.05)
    parser.add_argument("--slacks", default="0,4",
                        help="affinity_slack values to compare at N (default 0,4)")
    parser.add_argument("--thresholds", default="0",
                        help="affinity_threshold values to compare at N (default 0: the "
                             "router before the threshold)")
    args = parser.parse_args(argv)
    if args.max_replicas < 1:
        parser.error("--max-replicas must be >= 1")
    try:
        tps = [int(x) for x in args.tps.split(",") if x.strip()]
    except ValueError:
        parser.error("--tps takes integers, e.g. 2,4,8")
    if any(tp < 2 or tp > 8 for tp in tps):
        parser.error("--tps values must be 2 to 8 (tp 1 is always searched)")
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
    prompts = prompt_lengths(trace)
    prompt_total = sum(prompts)
    metric, target = args.metric, args.target
    md: list[str] = []

    def say(*lines: str) -> None:
        for line in lines:
            print(line, flush=True)
        md.extend(lines)

    cal_wall, cal_cpu, _ = child(["-c", CALIBRATION])
    say("# Fleets on the Mooncake conversation trace", "",
        "Trace: Mooncake FAST'25 conversation trace (kvcache-ai/Mooncake, Apache-2.0)"
        + (f", first {QUICK_REQUESTS:,} requests (--quick)" if args.quick else "")
        + f": {len(prompts):,} requests, {prompt_total:,} prompt tokens.",
        "Each engine: vllm, prefix caching, Llama-3-8B on tp H100 SXM GPUs, "
        f"{BLOCKS_PER_GPU:,} x tp blocks of 16 tokens (40 GiB of KV per GPU), 8,192 tokens "
        "and 256 requests per dispatch.",
        f"Calibration loop (targets.py): {cal_wall:.2f} s wall, {cal_cpu:.2f} s CPU.", "")

    def size_rows(found: dict[int, dict], tp: int) -> list[list[str]]:
        return [[num(k), num(k * tp), num(r[metric], 3), num(r["ttft_p50"], 3),
                 num(r["e2el_p99"], 3), ms(r["tpot_p99"]), num(cached_tokens(r)),
                 f"{sum(1 for x in r['per_replica'] if x)}/{k}", num(r["wall"], 1),
                 num(r["cpu"], 1)] for k, r in sorted(found.items())]

    size_heads = ["N", "GPUs", metric_head(metric), "TTFT p50 s", "E2EL p99 s", "TPOT p99 ms",
                  "cached tokens", "replicas used", "wall s", "CPU s"]

    # 1. The fleet size at tp 1.
    print(f"## searching N: tp 1, prefix-affinity, {metric} < {target:g} s", flush=True)
    n1, met1, found1, how1 = search(lambda k: replay(trace, k, "prefix-affinity"), metric,
                                    target, args.max_replicas, args.knee)
    say("## The fleet size at tp 1 (prefix-affinity, default threshold and slack)", "",
        *table(size_heads, size_rows(found1, 1)), "", f"Search: {how1}.")
    if met1:
        say(f"Smallest N with {metric} < {target:g} s: **{n1}**.", "")
    else:
        best = min(r[metric] for r in found1.values())
        say(f"No N up to {max(found1):,} gets {metric} under {target:g} s "
            f"(best {best:.3f} s). The knee: the smallest N within "
            f"{100 * args.knee:g}% of the best, **{n1}**.", "")

    # 2. Tensor parallelism: the bound first, then the search where the bound allows.
    bound_trace = out_dir / (trace.stem + "-unshared-alone.jsonl")
    unshared_trace(trace, bound_trace)
    bounds: dict[int, dict] = {}
    results: dict[int, tuple[int, bool, dict]] = {1: (n1, met1, found1)}
    hows: dict[int, str] = {1: how1}
    for tp in [1] + tps:
        print(f"## the prefix bound at tp {tp}", flush=True)
        bounds[tp] = replay(bound_trace, 1, extra=["--no-prefix-caching"], tp=tp)
    for tp in tps:
        if bounds[tp][metric] >= target:
            continue
        cap = max(1, args.max_gpus // tp)
        print(f"## searching N: tp {tp}, prefix-affinity, {metric} < {target:g} s, N <= {cap}",
              flush=True)
        n, met, found, how = search(lambda k, tp=tp: replay(trace, k, "prefix-affinity", tp=tp),
                                    metric, target, cap, args.knee)
        results[tp], hows[tp] = (n, met, found), how
    tp_rows = []
    for tp in [1] + tps:
        b = bounds[tp]
        if tp not in results:
            tp_rows.append([num(tp), num(b[metric], 3), "none (bound)", "-", "-", "0", "0.0"])
            continue
        n, met, found = results[tp]
        tp_rows.append([num(tp), num(b[metric], 3),
                        num(n) if met else f"none up to {max(found):,} (knee {n:,})",
                        num(n * tp) if met else "-", num(found[n][metric], 3),
                        num(len(found)), num(sum(r["cpu"] for r in found.values()), 1)])
    say(f"## The fleet size at each tp ({metric} < {target:g} s, prefix-affinity)", "",
        *table(["tp", f"prefix bound {metric_head(metric)}", "smallest N", "GPUs",
                f"{metric_head(metric)} at N", "runs", "CPU s of runs"], tp_rows), "",
        f"The prefix bound: every request alone on an idle engine, its prompt cut to the "
        f"tokens no earlier request shares as a prefix, no prefix caching; no fleet of that "
        f"tp gets {metric} below it, so a tp whose bound misses the target is not searched. "
        f"At tp > 1 N goes up to {args.max_gpus} GPUs / tp.", "")
    for tp in tps:
        if tp in results:
            say(f"tp {tp}:", "", *table(size_heads, size_rows(results[tp][2], tp)), "",
                f"Search: {hows[tp]}.", "")
    choice = cheapest(results, metric)
    if choice:
        tp, n = choice
        say(f"Cheapest fleet with {metric} < {target:g} s: **{n} engines of tp {tp} = "
            f"{n * tp} GPUs** ({metric} {results[tp][2][n][metric]:.3f} s).", "")
    else:
        tp, n = 1, n1
        say(f"No tp meets the target; taken: the knee at tp 1, N = {n}.", "")
    at = f"N = {n}, tp {tp}"
    fleet_runs = results[tp][2]

    # 3. The routers at N, and disaggregation on the same GPUs.
    print(f"## the routers at {at}", flush=True)
    by_router = {"prefix-affinity": fleet_runs[n]}
    for router in ROUTERS:
        if router not in by_router:
            by_router[router] = replay(trace, n, router, tp=tp)
    variants = {}
    for th in [x for x in args.thresholds.split(",") if x.strip()]:
        variants[f"prefix-affinity, threshold {th}"] = replay(
            trace, n, "prefix-affinity", ["--affinity-threshold", th], tp=tp)
    for slack in [x for x in args.slacks.split(",") if x.strip()]:
        variants[f"prefix-affinity, slack {slack}"] = replay(
            trace, n, "prefix-affinity", ["--affinity-slack", slack], tp=tp)
    say(f"## The routers at {at}", "",
        *table(ROUTER_HEADS, [router_row(k, by_router[k], prompt_total) for k in ROUTERS]
               + [router_row(k, r, prompt_total) for k, r in variants.items()]), "")
    pd_runs = {}
    for p, d in pd_splits(n):
        print(f"## disaggregation {p}+{d} at tp {tp}", flush=True)
        pd_runs[(p, d)] = replay(trace, 1, "prefix-affinity", tp=tp, pd=(p, d))
    if pd_runs:
        say(f"## Prefill/decode disaggregation on the same {n * tp} GPUs (tp {tp}, "
            "prefix-affinity, default link)", "",
            *table(PD_HEADS, [pd_row(f"{n} co-located", by_router["prefix-affinity"],
                                     prompt_total)]
                   + [pd_row(f"{p} prefill + {d} decode", r, prompt_total)
                      for (p, d), r in pd_runs.items()]), "",
            "(`cached %`: prompt tokens found cached where prompts are computed, on the "
            "prefill replicas when disaggregated, over all prompt tokens.)", "")
    else:
        say(f"No disaggregation at N = {n}: it needs two engines at least.", "")

    # 4. The floor.
    print("## the floor: every request alone", flush=True)
    spaced = out_dir / (trace.stem + "-alone.jsonl")
    spaced_trace(trace, spaced)
    alone = {t: replay(spaced, 1, extra=["--no-prefix-caching"], tp=t) for t in [1] + tps}
    unshared = unshared_tokens(trace)
    say("## The floor", "",
        *table(["tp", "alone TTFT p50 s", "alone TTFT p90 s", "alone TTFT p99 s",
                "prefix bound TTFT p50 s", "prefix bound TTFT p99 s"],
               [[num(t), num(a["ttft_p50"], 3), num(a["ttft_p90"], 3), num(a["ttft_p99"], 3),
                 num(bounds[t]["ttft_p50"], 3), num(bounds[t]["ttft_p99"], 3)]
                for t, a in alone.items()]), "",
        "Alone: every request on an idle engine (arrivals 100 s apart, 1 output token, no "
        "prefix caching). Prefix bound: the same with each prompt cut to its unshared tokens.",
        f"Prompt tokens no earlier request shares as a prefix (512-token hash blocks; no router "
        f"can hit more): p50 {percentile(unshared, 50):,}, p90 {percentile(unshared, 90):,}, "
        f"p99 {percentile(unshared, 99):,} of prompts p99 {percentile(prompts, 99):,}.", "")

    # 5. The cost.
    print("## the cost: one replica, the fleet, the split", flush=True)
    start_wall, start_cpu, _ = child(["-m", "scheduler_sim", "--help"])
    one = found1.get(1) or replay(trace, 1)
    one_tp = fleet_runs.get(1) or (replay(trace, 1, tp=tp) if tp > 1 else one)
    rr = by_router["round-robin"]
    split_rows, split, mismatches = [], [], []
    if n > 1:
        parts = round_robin_split(trace, n, out_dir / trace.stem)
        for i, part in enumerate(parts):
            split.append(replay(part, 1, tp=tp))
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
    cost_rows = [run_cost_row("one replica, whole trace, tp 1", one)]
    if tp > 1:
        cost_rows.append(run_cost_row(f"one replica, whole trace, tp {tp}", one_tp))
    cost_rows += [run_cost_row(f"fleet of {n}, {k}", by_router[k]) for k in ROUTERS]
    cost_rows += [run_cost_row(f"{p} prefill + {d} decode", r) for (p, d), r in pd_runs.items()]
    say(f"## The simulator's cost ({at} for the fleets)", "",
        *table(COST_HEADS, cost_rows + split_rows), "",
        f"One replica at tp 1: {one['iterations']:,} dispatches of "
        f"{one['mean_batch_rows']:.1f} rows on average, TTFT p99 {one['ttft_p99']:,.1f} s. "
        f"Fleet (round-robin): {rr['iterations']:,} dispatches of "
        f"{rr['mean_batch_rows']:.2f} rows.")
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
