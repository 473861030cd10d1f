#!/usr/bin/env python3
"""Large synthetic benchmark of `scheduler_sim replay` (stdlib only).

1. Generates a deterministic synthetic trace (random.Random(seed)):
   Poisson arrivals, lognormal prompt lengths clipped to [1, 4096], lognormal
   output lengths clipped to [1, 1024], a small fraction of cancellations, and
   a config record (block_size 16, num_blocks 2048, token_budget 2048,
   max_rows 256). The arrival rate is derived from the sampled lengths so that
   the offered load is `--load` (default 0.85) of what the continuous policy
   can serve under full reservation (see `estimate_capacity`).
2. Replays it with `python3 -m scheduler_sim replay TRACE --policy P --json`
   [--events FILE] in a fresh child process per run (cwd = the project root),
   measuring wall time, the child's own peak RSS (`os.wait4` rusage, so one
   run's peak is never mixed with another's) and dispatches per second
   (`iterations` from the JSON summary).
3. Prints a Markdown table, and writes it and the raw numbers to the out dir.

Requests are drawn one at a time from a single random stream, so the trace of
n requests is exactly the first n requests of any larger trace with the same
seed (`--serial-requests` and `--serial-events-requests` rely on this to run
`serial` on a prefix when the full trace would take too long).

    python3 benchmarks/large_synthetic.py [--requests 100000] [--seed 1]
        [--out-dir benchmarks/out] [--policies serial,continuous]
        [--serial-requests N] [--serial-events-requests N]
        [--modes summary,events] [--load 0.85] [--timeout S] [--keep-events]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = {"block_size": 16, "num_blocks": 2048, "token_budget": 2048, "max_rows": 256}

# Length distributions (tokens): lognormal with these medians and log-sigmas.
PROMPT_MEDIAN, PROMPT_SIGMA, PROMPT_MAX = 256, 1.0, 4096
OUTPUT_MEDIAN, OUTPUT_SIGMA, OUTPUT_MAX = 96, 1.0, 1024
# serial makes one dispatch per output token and, with --events, writes ~375 bytes
# per dispatch: at 100k requests that is ~13 min and ~5.7 GB, so by default the
# events run of serial replays the first 20k requests (a prefix of the trace).
SERIAL_EVENTS_DEFAULT = 20_000
CANCEL_FRACTION = 0.02      # of requests get a client cancellation ...
CANCEL_MEAN_DELAY = 300     # ... this many ticks (exponential mean) after arrival


def _lognormal(rng: random.Random, median: float, sigma: float, hi: int) -> int:
    return min(hi, max(1, int(round(rng.lognormvariate(math.log(median), sigma)))))


def draw_lengths(rng: random.Random) -> tuple[int, int]:
    """One request's (prompt_tokens, output_tokens)."""
    return (_lognormal(rng, PROMPT_MEDIAN, PROMPT_SIGMA, PROMPT_MAX),
            _lognormal(rng, OUTPUT_MEDIAN, OUTPUT_SIGMA, OUTPUT_MAX))


def estimate_capacity(seed: int, samples: int = 20000) -> dict[str, float]:
    """Requests per tick the continuous policy can sustain, from the length model.

    Two limits, whichever binds first:
    - KV reservation: a request holds ceil((P+N-1)/B) blocks of credit for
      about ceil(P/token_budget) + N - 1 dispatches (prefill, then one decode per
      later output), so by Little's law num_blocks / E[credit * residence];
    - compute: every tick writes at most token_budget rows, so
      token_budget / E[P + N - 1].
    Head-of-line blocking and fragmentation make the real capacity somewhat
    lower; the load factor leaves room for that.
    """
    rng = random.Random(seed * 7919 + 17)  # independent of the trace's own stream
    B, budget = CONFIG["block_size"], CONFIG["token_budget"]
    block_ticks = rows = 0.0
    for _ in range(samples):
        p, n = draw_lengths(rng)
        credit = -(-(p + n - 1) // B)
        residence = -(-p // budget) + n - 1
        block_ticks += credit * residence
        rows += p + n - 1
    kv = CONFIG["num_blocks"] / (block_ticks / samples)
    compute = budget / (rows / samples)
    return {"kv": kv, "compute": compute, "capacity": min(kv, compute)}


def generate(path: str, requests: int, seed: int, rate: float) -> dict[str, int]:
    """Write the trace; return counts. Request i is the same for any `requests`."""
    rng = random.Random(seed)
    t = 0.0
    cancels = []
    prompt_total = output_total = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps({"type": "config", **CONFIG}, separators=(",", ":")) + "\n")
        for i in range(requests):
            t += rng.expovariate(rate)
            arrival = int(t)
            prompt, output = draw_lengths(rng)
            rid = f"r{i:06d}"
            f.write(f'{{"type":"request","id":"{rid}","arrival":{arrival},'
                    f'"prompt_tokens":{prompt},"output_tokens":{output}}}\n')
            prompt_total += prompt
            output_total += output
            if rng.random() < CANCEL_FRACTION:
                cancels.append((arrival + int(rng.expovariate(1 / CANCEL_MEAN_DELAY)), rid))
        for at, rid in cancels:
            f.write(f'{{"type":"cancel","id":"{rid}","at":{at}}}\n')
    return {"requests": requests, "cancels": len(cancels), "last_arrival": int(t),
            "prompt_tokens": prompt_total, "output_tokens": output_total}


def run_child(cmd: list[str], stdout_path: str, timeout: float | None) -> dict:
    """Run one command in a fresh child; return wall time, exit status, peak RSS."""
    with open(stdout_path, "wb") as out, open(stdout_path + ".err", "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=err)
        timer = None
        if timeout:
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
        # wait4 reaps exactly this child and returns its own rusage.
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if timer:
            timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    # Linux reports ru_maxrss in KiB, macOS in bytes.
    kib = usage.ru_maxrss / 1024 if sys.platform == "darwin" else usage.ru_maxrss
    return {"exit": proc.returncode, "wall_s": wall, "peak_mb": kib / 1024,
            "user_s": usage.ru_utime, "sys_s": usage.ru_stime}


def replay(trace: str, policy: str, events: str | None, out_dir: str,
           timeout: float | None, keep_events: bool = False) -> dict:
    """One measured replay; the summary JSON is parsed from the child's stdout."""
    tag = f"{policy}-{'events' if events else 'summary'}"
    cmd = [sys.executable, "-m", "scheduler_sim", "replay", trace, "--policy", policy, "--json"]
    if events:
        cmd += ["--events", events]
    stdout_path = os.path.join(out_dir, f"{tag}.json")
    before = set(os.listdir(out_dir))
    result = run_child(cmd, stdout_path, timeout)
    if result["exit"] != 0:
        # A killed replay cannot remove its half-written `.events-*.tmp`.
        for name in set(os.listdir(out_dir)) - before:
            if name.startswith(".events-") and name.endswith(".tmp"):
                os.unlink(os.path.join(out_dir, name))
    result.update({"policy": policy, "mode": "events" if events else "summary",
                   "cmd": " ".join(["python3"] + cmd[1:])})
    if result["exit"] == 0:
        with open(stdout_path, encoding="utf-8") as f:
            run = json.load(f)["runs"][0]
        result["summary"] = run
        result["requests"] = run["requests"]
        result["iterations"] = run["iterations"]
        result["rows"] = round(run["mean_batch_rows"] * run["iterations"])
    else:
        with open(stdout_path + ".err", encoding="utf-8", errors="replace") as f:
            result["error"] = f.read()[-2000:]
    if events:
        result["events_bytes"] = os.path.getsize(events) if os.path.exists(events) else None
        if os.path.exists(events) and not keep_events:
            os.unlink(events)  # keep the out dir small; its size is recorded
    return result


def _show(path: str) -> str:
    """A path relative to the project root when it lies inside it."""
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def code_version() -> str:
    """The commit replayed, and whether scheduler_sim/ had uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "scheduler_sim"],
                               cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    changed = len([line for line in dirty.splitlines() if line.strip()])
    return head + (f" + {changed} uncommitted file(s) in scheduler_sim/" if changed else "")


def _cpu(r: dict) -> float:
    """The child's CPU seconds (user + system): steadier than wall time on a busy box."""
    return r["user_s"] + r["sys_s"]


def _fmt_int(v) -> str:
    return "-" if v is None else f"{v:,}"


def table(results: list[dict], full: int) -> str:
    head = ("| policy | mode | requests | iterations | wall s | CPU s | dispatches/s | rows/s "
            "| peak MB | events file |")
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if r["exit"] != 0:
            reason = "timed out" if r["exit"] == -9 else f"exit {r['exit']}"
            lines.append(f"| {r['policy']} | {r['mode']} | {_fmt_int(r.get('n'))} | - "
                         f"| {r['wall_s']:.1f} ({reason}) | {_cpu(r):.1f} | - | - "
                         f"| {r['peak_mb']:.0f} | - |")
            continue
        if not r["iterations"]:
            lines.append(f"| {r['policy']} | {r['mode']} | {r['requests']:,} | - "
                         f"| {r['wall_s']:.1f} | {_cpu(r):.1f} | - | - | {r['peak_mb']:.0f} | - |")
            continue
        reqs = f"{r['requests']:,}"
        if r["requests"] < full:
            reqs += f" (prefix; not {full:,})"
        ev = r.get("events_bytes")
        ev_text = "-" if ev is None else f"{ev / 1e6:,.0f} MB"
        lines.append(
            f"| {r['policy']} | {r['mode']} | {reqs} | {r['iterations']:,} | {r['wall_s']:.1f} "
            f"| {_cpu(r):.1f} "
            f"| {r['iterations'] / r['wall_s']:,.0f} | {r['rows'] / r['wall_s']:,.0f} "
            f"| {r['peak_mb']:.0f} | {ev_text} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out-dir", default=os.path.join("benchmarks", "out"))
    ap.add_argument("--policies", default="serial,continuous",
                    help="comma-separated policies (default: serial,continuous)")
    ap.add_argument("--modes", default="summary,events",
                    help="comma-separated: summary (no events), events (--events FILE)")
    ap.add_argument("--serial-requests", type=int, default=None,
                    help="replay serial on the first N requests only (serial is ~1 "
                         "dispatch per output token; default: --requests)")
    ap.add_argument("--serial-events-requests", type=int, default=None,
                    help="replay serial with --events on the first N requests only (serial "
                         "writes ~3 event records per dispatch, ~1.1 GB and ~2-3 min per "
                         "20k requests; default: min(20000, --serial-requests))")
    ap.add_argument("--no-validate", action="store_true",
                    help="skip the parse-only baseline (`validate TRACE`)")
    ap.add_argument("--load", type=float, default=0.85,
                    help="offered load as a fraction of the estimated continuous capacity")
    ap.add_argument("--timeout", type=float, default=None,
                    help="kill a replay after this many seconds")
    ap.add_argument("--keep-events", action="store_true", help="keep the events files")
    args = ap.parse_args(argv)

    out_dir = os.path.abspath(args.out_dir)
    os.makedirs(out_dir, exist_ok=True)
    policies = [p for p in args.policies.split(",") if p]
    modes = [m for m in args.modes.split(",") if m]
    cap = estimate_capacity(args.seed)
    rate = args.load * cap["capacity"]

    traces = {}
    counts = {args.requests}
    serial_n = args.serial_requests or args.requests
    serial_events_n = args.serial_events_requests or min(SERIAL_EVENTS_DEFAULT, serial_n)
    if "serial" in policies:
        counts.add(serial_n if "summary" in modes else serial_events_n)
        if "events" in modes:
            counts.add(serial_events_n)
    for n in sorted(counts):
        path = os.path.join(out_dir, f"synthetic-{n}-seed{args.seed}.jsonl")
        start = time.perf_counter()
        info = generate(path, n, args.seed, rate)
        info["gen_s"] = time.perf_counter() - start
        info["bytes"] = os.path.getsize(path)
        traces[n] = (path, info)
        print(f"trace {_show(path)}: {n:,} requests, {info['cancels']:,} "
              f"cancels, arrivals 0..{info['last_arrival']:,} ticks, "
              f"{info['bytes'] / 1e6:.1f} MB, generated in {info['gen_s']:.1f} s", flush=True)
    print(f"capacity estimate {cap['capacity']:.4f} req/tick (kv {cap['kv']:.4f}, compute "
          f"{cap['compute']:.4f}); arrival rate {rate:.4f} req/tick (load {args.load})",
          flush=True)

    version = code_version()
    print(f"code: {version}", flush=True)
    results = []
    if not args.no_validate:
        # The parse-only baseline: read and validate the trace, replay nothing.
        trace = traces[args.requests][0]
        cmd = [sys.executable, "-m", "scheduler_sim", "validate", os.path.relpath(trace, ROOT)]
        r = run_child(cmd, os.path.join(out_dir, "validate.txt"), args.timeout)
        r.update({"policy": "(validate)", "mode": "parse only", "n": args.requests,
                  "requests": args.requests, "iterations": 0, "rows": 0,
                  "cmd": " ".join(["python3"] + cmd[1:])})
        results.append(r)
        print(f"  validate   {r['wall_s']:7.1f} s  peak {r['peak_mb']:.0f} MB", flush=True)
    for policy in policies:
        for mode in modes:
            if policy == "serial":
                n = serial_events_n if mode == "events" else serial_n
            else:
                n = args.requests
            trace = traces[n][0]
            events = (os.path.join(out_dir, f"{policy}-{n}.events.jsonl")
                      if mode == "events" else None)
            r = replay(os.path.relpath(trace, ROOT), policy, events, out_dir, args.timeout,
                       args.keep_events)
            r["n"] = n
            results.append(r)
            if r["exit"] == 0:
                print(f"  {policy:10s} {mode:7s} {r['wall_s']:7.1f} s  {r['iterations']:,} "
                      f"dispatches  peak {r['peak_mb']:.0f} MB", flush=True)
            else:
                print(f"  {policy:10s} {mode:7s} FAILED exit {r['exit']} after "
                      f"{r['wall_s']:.1f} s: {r.get('error', '')[-300:]}", flush=True)

    md = table(results, args.requests)
    machine = (f"{platform.python_implementation()} {platform.python_version()}, "
               f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs")
    print()
    print(f"Machine: {machine}; code: {version}")
    print(md)
    with open(os.path.join(out_dir, "results.md"), "w", encoding="utf-8") as f:
        f.write(f"Machine: {machine}; code: {version}\n\n{md}")
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"machine": machine, "code": version, "seed": args.seed, "load": args.load,
                   "rate": rate, "capacity": cap,
                   "traces": {str(k): v[1] for k, v in traces.items()},
                   "results": results}, f, indent=2)
    return 0 if all(r["exit"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
