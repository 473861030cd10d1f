#!/usr/bin/env python3
"""Folded against stepped: a differential fuzzer of the engine's fast-forward (stdlib only).

    python3 benchmarks/fold_fuzz.py [--seeds 0-999] [--fleet-share 0.2] [--jobs 1]
        [--policies vllm,sglang] [--show-case]

The engine folds steady stretches of decode dispatches (and runs of chunk steps,
finishes, admissions behind a blocked head) instead of stepping each one; its
outputs must be those of the step-by-step replay, byte for byte. Each seed draws
one case, the same case whatever else runs: a workload (prompts as sizes, as token
ids from a few shared prefixes, or as block hashes of shared chains; some outputs as
token ids, `max_tokens`, priorities, deadlines, bursts of arrivals, long outputs,
cancellations and forced preemptions) and a policy with options from every class
`Options` accepts (queue and resume orders, watermarks, the gate, victims,
preemption caps, prefill intervals, chunks, release delays, waiting timeouts,
client slots, SGLang's latch and priorities, the batch window, prefix caching and
`hash_block_size`, blocks of 1-16 in small pools, a load scale; on about half a
cost model on its own clock, in ticks, ms or s, with host memory (swap or
recompute, written through or not, slow or fast links) on half of those; on
`--fleet-share` of the cases a fleet of 2-3 replicas under every router, with and
without `router_signal_delay`, ranks in lockstep, or prefill and decode replicas).

The case is validated and resolved by the Python API (`api.build`,
`api.resolve`: a combination it refuses is counted as refused), then
replayed as `api.replay` replays it, once with `fast_forward` False and
once True, and on a sixth of the cases once more each way with an event listener
(whose event records are compared as well). The comparison is of the JSON text of
the summary, the replicas' summaries, `stalled` and every request record; an
exception in either replay is a difference too. Each difference is printed with a
one-line reproduction (`--seeds N-N` with the same `--fleet-share`).

The engines' own counters say how often each folding path was reached (the
`Steadiness` counts: dispatches folded, completions carried through a counted
stretch, decodes started counted after an admission or behind a blocked head,
admissions behind a blocked head, chunk steps folded, finishes behind a blocked
head): a run prints them per policy, with the cases run, refused and folded
(any count above 0), so that a run shows it tested something. Exit status 1 when
a difference was found.

Run against another checkout with `PYTHONPATH=CHECKOUT python3 benchmarks/fold_fuzz.py`
(this checkout is used only when the package is not importable otherwise).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import weakref
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # (after PYTHONPATH)

from scheduler_sim import api  # noqa: E402
from scheduler_sim.engine.core import Engine  # noqa: E402
from scheduler_sim.engine.summary import request_record  # noqa: E402
from scheduler_sim.fleet import make_fleet  # noqa: E402
from scheduler_sim.gpu.run_cost import clock_for  # noqa: E402
from scheduler_sim.kv import block_keys  # noqa: E402
from scheduler_sim.records import interrupts  # noqa: E402
from scheduler_sim.records.errors import SimError  # noqa: E402

POLICIES = ("continuous", "dynamic", "serial", "sglang", "static", "vllm")
# The folding paths' counters on `Engine.steadiness`, as a run prints them.
COUNTERS = ("folded", "through_counted", "arrivals_counted", "blocked_counted",
            "blocked_admitted", "chunks_folded", "finishes_behind")
ORDERS = ("fcfs", "priority", "sjf", "edf", "lof", "random", "lpm")
VICTIMS = (None, "lifo", "priority", "fewest-outputs", "most-blocks", "most-reclaimable")
ROUTERS = ("round-robin", "least-loaded", "prefix-affinity", "power-of-two")
COST_MODELS = ("llama-3-8b/h100-sxm", "llama-3-8b/h100-sxm", "qwen2.5-7b/l40s",
               "deepseek-v2-lite/a100-80gb")


def draw_options(rng: random.Random, fleet_share: float) -> dict:
    """A policy and its options (keyword arguments of `api.resolve`, and
    `time_unit`, which the workload's config record carries)."""
    block = rng.choice([1, 2, 4, 4, 8, 16])
    o = dict(policy=rng.choice(POLICIES), block_size=block,
             num_blocks=max(2, rng.randint(48, 1024) // block),
             token_budget=rng.choice([4, 8, 16, 32, 64, 128, 512]),
             max_rows=rng.choice([1, 2, 3, 4, 6, 8, 16, 64]),
             release_delay=rng.choice([0, 0, 0, 1, 2, 5]),
             order=rng.choice(ORDERS), resume_order=rng.choice(["front", "arrival"]),
             watermark=rng.choice([0.0, 0.0, 0.05, 0.1, 0.3]),
             full_prompt_gate=rng.random() < 0.7, victim=rng.choice(VICTIMS),
             prefill_interval=rng.choice([1, 1, 1, 2, 3]),
             prefix_caching=rng.random() < 0.5, time_unit="tick")
    if rng.random() < 0.4:
        o["prefill_chunk"] = rng.randint(1, 48)
    if rng.random() < 0.3:
        o["max_preemptions"] = rng.choice([1, 2, 5])
    if o["order"] == "random":
        o["seed"] = rng.randint(0, 9)
    if o["order"] == "lpm":
        o["prefix_caching"] = True
        o["lpm_threshold"] = rng.choice([0, 2, 128])
    if o["prefix_caching"] and rng.random() < 0.3:
        o["hash_block_size"] = block * rng.choice([1, 2])
    if rng.random() < 0.2:
        o["waiting_timeout"] = rng.choice([20, 50, 200])
    if o["policy"] == "sglang":
        o.update(admission_latch=rng.random() < 0.5,
                 schedule_conservativeness=rng.choice([0.3, 1.0, 1.0, 2.0]))
        if o["order"] == "priority":
            o.update(priority_first=rng.choice(["low", "high"]),
                     priority_preemption=rng.random() < 0.5,
                     priority_preemption_threshold=rng.choice([0, 1, 10]))
    if o["policy"] == "dynamic":
        o["batch_window"] = rng.choice([0, 1, 3, 10])
    if rng.random() < 0.15:
        o["rate_scale"] = rng.choice([0.5, 2.0, 3.0])
    if rng.random() < 0.5:
        o["cost_model"] = rng.choice(COST_MODELS)
        o["time_unit"] = rng.choice(["tick", "tick", "ms", "s"])
        if o["time_unit"] == "tick":
            o["tick_seconds"] = rng.choice([0.0005, 0.002, 0.01])
        elif rng.random() < 0.7:
            o["clock_resolution"] = rng.choice([0.0005, 0.002, 0.01])
        if rng.random() < 0.5:
            o.update(host_kv_gib=rng.choice([0.001, 0.01, 0.05, 1.0]),
                     preemption_mode=rng.choice(["recompute", "swap"]),
                     host_write=rng.choice(["through", "off"]))
            if rng.random() < 0.5:
                o["host_link_gb_per_s"] = rng.choice([0.01, 1.0, 64.0])
            if rng.random() < 0.3:
                o["host_copy_latency_us"] = rng.choice([0.0, 50.0, 5000.0])
    if rng.random() < 0.25:  # the Mooncake target's shape: long shared prompts, a tight pool
        o.update(profile="long", policy=rng.choice(["vllm", "vllm", "vllm", "sglang",
                                                    "continuous"]),
                 prefix_caching=True, watermark=rng.choice([0.0, 0.0, 0.01]),
                 block_size=rng.choice([4, 8, 16]), max_rows=rng.choice([8, 16, 64, 256]),
                 token_budget=rng.choice([16, 32, 64, 128, 256]))
        o["num_blocks"] = rng.randint(200, 2000) // o["block_size"]
        if rng.random() < 0.7:  # (vllm's boundaries behind a blocked head: fcfs, no cadence)
            o.update(order="fcfs", prefill_interval=1)
        o.pop("hash_block_size", None)
        if rng.random() < 0.5:
            o["prefill_chunk"] = rng.randint(8, o["token_budget"])
        else:
            o.pop("prefill_chunk", None)
    if rng.random() < (0.8 if o.get("profile") else 0.35):  # plain, as the speed targets
        # run: what the counted paths, the chunk runs and the boundaries behind a blocked
        # head need
        for name in ("release_delay", "waiting_timeout", "host_kv_gib", "preemption_mode",
                     "host_write", "host_link_gb_per_s", "host_copy_latency_us"):
            o.pop(name, None)
        if not o.get("profile"):
            o["policy"] = rng.choice(["vllm", "vllm", "continuous", "continuous", "sglang",
                                      o["policy"]])
        if not o.get("profile") and rng.random() < 0.5:
            o["prefix_caching"] = o["order"] == "lpm"
            o["watermark"] = 0.0
    if rng.random() < fleet_share:
        kind = rng.random()
        if kind < 0.25 and "host_kv_gib" not in o:
            o.update(prefill_replicas=rng.randint(1, 2), decode_replicas=rng.randint(1, 2),
                     full_prompt_gate=True)
            if "cost_model" in o and rng.random() < 0.5:
                o["kv_link_gbps"] = rng.choice([1.0, 100.0])
        else:
            o.update(replicas=rng.randint(2, 3), router=rng.choice(ROUTERS))
            if o["router"] == "prefix-affinity":
                o.update(affinity_slack=rng.choice([0, 2, 8]),
                         affinity_threshold=rng.choice([0.0, 0.5, 1.0]))
            if kind < 0.45:
                o["dp_lockstep"] = True
            elif rng.random() < 0.5:
                o["router_signal_delay"] = rng.choice([1, 5, 20])
    elif rng.random() < 0.1:
        o["max_concurrency"] = rng.randint(1, 4)
    return o


def draw_workload(rng: random.Random, options: dict) -> list[dict]:
    """The case's records: a config record with its time unit and block sizes, then requests (prompts as
    sizes, token ids or block hashes), cancellations and forced preemptions."""
    unit = options["time_unit"]
    scale = {"tick": 1, "ms": rng.choice([0.5, 2.0, 7.5]), "s": rng.choice([0.002, 0.01])}[unit]
    long = options.get("profile") == "long"
    kind = rng.choice(["hashes", "hashes", "ids"] if long else ["sizes", "ids", "hashes"])
    hash_block = options.get("hash_block_size") or options["block_size"]
    prefixes = [[rng.randint(1, 9) for _ in range(rng.randint(2, 300 if long else 40))]
                for _ in range(3)]
    chains = [rng.randint(1, 5) for _ in range(3)]
    # (The parser checks block hashes against `hash_block_size`: the config record's.)
    records: list[dict] = [{"type": "config", "time_unit": unit,
                            "block_size": options["block_size"], "hash_block_size": hash_block}]
    t = 0
    for i in range(rng.randint(1, 40)):
        t += rng.choice([0, 0, 0, 1, 2, 3, 10, 40, 120])
        r: dict = {"type": "request", "id": f"r{i}",
                   "arrival": t if unit == "tick" else round(t * scale, 6)}
        roll = rng.random()
        output = (rng.randint(1, 8) if roll < 0.3 else rng.randint(9, 60) if roll < 0.8
                  else rng.randint(100, 900))
        if kind == "ids":
            base = rng.choice(prefixes)
            r["prompt_token_ids"] = base[:rng.randint(1, len(base))] + [
                rng.randint(1, 9) for _ in range(rng.randint(0, 12))]
        elif long:
            r["prompt_tokens"] = rng.randint(30, 700)
        else:
            r["prompt_tokens"] = rng.choice([rng.randint(1, 16), rng.randint(1, 80),
                                             rng.randint(60, 300)])
        if kind == "hashes":
            most = math.ceil(r["prompt_tokens"] / hash_block)
            chain = rng.randrange(3)
            shared = rng.randint(0, most)
            r["block_hashes"] = ([chains[chain] * 100 + k for k in range(shared)]
                                 + [1000 * (i + 1) + k for k in range(shared, most)])
            if rng.random() < 0.2:
                r["block_hashes"] = r["block_hashes"][:rng.randint(0, most)]
        if rng.random() < 0.2:
            r["output_token_ids"] = [rng.randint(1, 9) for _ in range(min(output, 60))]
        else:
            r["output_tokens"] = output
            if rng.random() < 0.1:
                r["max_tokens"] = output + rng.randint(0, 20)
        if rng.random() < 0.5:
            r["priority"] = rng.randint(-1, 3)
        if rng.random() < 0.3:
            r["deadline"] = r["arrival"] + (rng.randint(5, 400) if unit == "tick"
                                            else round(rng.randint(5, 400) * scale, 6))
        records.append(r)
        roll = rng.random()
        if roll < 0.16:
            at = t + rng.randint(0, 80)
            records.append({"type": "cancel" if roll < 0.08 else "preempt", "id": f"r{i}",
                            "at": at if unit == "tick" else round(at * scale, 6)})
    return records


def draw_case(seed: int, fleet_share: float) -> tuple[list[dict], dict, str]:
    """Seed -> (records, options, extra): the same case for the same two numbers. `extra`:
    `listened`, the case is replayed with a listener as well; `summary`, for a summary
    alone as well (`replay_once`'s `keep`); else nothing more."""
    rng = random.Random(seed)
    options = draw_options(rng, fleet_share)
    records = draw_workload(rng, options)
    roll = rng.random()
    return records, options, "listened" if roll < 1 / 6 else "summary" if roll < 0.4 else ""


def replay_once(trace, resolved, fast: bool, listen: bool,
                keep: bool = True) -> tuple[str, list, dict]:
    """One replay as `api.replay` makes it, with `fast_forward` given:
    (its outputs as JSON text, its event records, the engines' folding counts).
    `keep` False: as the command line replays for a summary alone (no request kept;
    a lone engine may then hold its waiting requests as a count), the summary only."""
    clock = clock_for(resolved)
    policy = resolved.policy[0]
    events: list = []
    if resolved.fleet:
        def on_replica(i):
            return lambda e: events.append((i, e.to_dict()))
        runner = make_fleet(trace.workload, resolved, policy, fast_forward=fast,
                            on_event=on_replica if listen else None, keep_requests=keep)
        engines = runner.engines
    else:
        runner = Engine(trace.workload, resolved, policy, fast_forward=fast, keep_requests=keep,
                        on_event=(lambda e: events.append(e.to_dict())) if listen else None)
        engines = [runner]
    with interrupts.watching():
        result = runner.run()
    records = [request_record(r, clock, resolved.slo)
               for r in sorted(result.requests, key=lambda r: (r.arrival, r.index))] if keep else []
    text = json.dumps([result.summary, result.replicas if resolved.fleet else None,
                       result.stalled, records], default=repr)
    counts = {name: sum(getattr(e.steadiness, name, 0) for e in engines) for name in COUNTERS}
    return text, events, counts


def _fresh_interning() -> None:
    """Each case interns its hash ids in a table of its own (as each test does), so that a
    case's replays do not depend on the cases run before it in the process."""
    if hasattr(block_keys, "_Entries"):
        block_keys._current_entries = weakref.ref(block_keys._Entries())


def _outcome(trace, resolved, fast: bool, listen: bool, keep: bool = True):
    try:
        return replay_once(trace, resolved, fast, listen, keep)
    except (Exception, SimError) as exc:  # an internal error is a difference too
        return f"error: {type(exc).__name__}: {exc}", [], dict.fromkeys(COUNTERS, 0)


def run_case(seed: int, fleet_share: float) -> dict:
    """Draw and run one case: {seed, policy, status (`refused`, `same` or `differs`),
    counts, classes, detail}."""
    records, options, extra = draw_case(seed, fleet_share)
    out = {"seed": seed, "policy": options["policy"], "status": "refused", "counts": {},
           "detail": "", "classes": _classes(options, extra)}
    options = {k: v for k, v in options.items() if k not in ("profile", "time_unit")}
    policy = options.pop("policy")
    _fresh_interning()
    try:
        trace = api.build(records, f"case{seed}.jsonl")
        resolved, _ = api.resolve(trace, policy, **options)
    except SimError as exc:
        out["detail"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return out
    out["status"] = "same"
    ways = [(False, True)] + [(extra == "listened", extra == "listened")] * bool(extra)
    for listen, keep in ways:
        stepped, stepped_events, _ = _outcome(trace, resolved, False, listen, keep)
        folded, folded_events, counts = _outcome(trace, resolved, True, listen, keep)
        for name, n in counts.items():
            out["counts"][name] = out["counts"].get(name, 0) + n
        if stepped != folded or stepped_events != folded_events:
            out["status"] = "differs"
            out["detail"] = _first_difference(stepped, folded, stepped_events,
                                              folded_events, listen, keep)
            break
    return out


def _classes(options: dict, extra: str) -> list[str]:
    """The option classes a case exercises, for the run's counts."""
    names = []
    for name, on in (("long shared prompts", options.get("profile") == "long"),
                     ("cost model", "cost_model" in options),
                     ("host memory", "host_kv_gib" in options),
                     ("prefix caching", options.get("prefix_caching")),
                     ("fleet", "replicas" in options or "prefill_replicas" in options),
                     ("disaggregated", "prefill_replicas" in options),
                     ("lockstep", options.get("dp_lockstep")),
                     ("signal delay", "router_signal_delay" in options),
                     ("listener", extra == "listened"),
                     ("summary alone", extra == "summary")):
        if on:
            names.append(name)
    return names


def _first_difference(stepped: str, folded: str, stepped_events: list, folded_events: list,
                      listen: bool, keep: bool) -> str:
    """Where the two replays part, in one line."""
    how = ("with a listener" if listen else "without a listener") + (
        "" if keep else ", summary alone")
    if stepped != folded:
        if stepped.startswith("error") or folded.startswith("error"):
            return f"{how}: stepped {stepped[:150]!r} / folded {folded[:150]!r}"
        a, b = json.loads(stepped), json.loads(folded)
        for part, x, y in (("summary", a[0], b[0]), ("replicas", a[1], b[1]),
                           ("stalled", a[2], b[2])):
            if x != y:
                if isinstance(x, dict) and isinstance(y, dict):
                    keys = [k for k in x if x.get(k) != y.get(k)] or ["(keys)"]
                    return (f"{how}: {part} {keys[0]}: stepped {x.get(keys[0])!r}, "
                            f"folded {y.get(keys[0])!r} ({len(keys)} fields differ)")
                return f"{how}: {part} differs"
        for x, y in zip(a[3], b[3]):
            if x != y:
                k = next(k for k in x if x.get(k) != y.get(k))
                return (f"{how}: request {x.get('id')} {k}: stepped {x.get(k)!r}, "
                        f"folded {y.get(k)!r}")
        return f"{how}: request records differ ({len(a[3])} against {len(b[3])})"
    for i, (x, y) in enumerate(zip(stepped_events, folded_events)):
        if x != y:
            return f"{how}: event {i}: stepped {str(x)[:120]} / folded {str(y)[:120]}"
    return f"{how}: events {len(stepped_events)} stepped against {len(folded_events)} folded"


def _run_range(args: tuple[int, int, float, set | None]) -> list[dict]:
    start, end, share, policies = args
    return [run_case(seed, share) for seed in range(start, end)
            if policies is None or draw_case(seed, share)[1]["policy"] in policies]


def run(seeds: range, fleet_share: float, jobs: int = 1, policies=None) -> list[dict]:
    """The cases of `seeds` (in seed order, whatever `jobs`); with `policies`, only the
    cases whose policy is one of them are run (the others are drawn, not run)."""
    if jobs > 1:
        import multiprocessing
        size = max(1, min(50, len(seeds) // (jobs * 4) or 1))
        parts = [(s, min(s + size, seeds.stop), fleet_share, policies)
                 for s in range(seeds.start, seeds.stop, size)]
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = [case for part in pool.imap(_run_range, parts) for case in part]
    else:
        results = _run_range((seeds.start, seeds.stop, fleet_share, policies))
    return results


def report(results: list[dict], fleet_share: float) -> list[str]:
    """The run's counts per policy and per option class, then each difference with its
    reproduction."""
    lines = ["policy       cases    run  refused  reached  " + "  ".join(COUNTERS)]
    rows = sorted({c["policy"] for c in results}) + ["all"]
    for policy in rows:
        cases = [c for c in results if policy in ("all", c["policy"])]
        ran = [c for c in cases if c["status"] != "refused"]
        folded = sum(any(c["counts"].values()) for c in ran)
        totals = [sum(c["counts"].get(name, 0) for c in ran) for name in COUNTERS]
        lines.append(f"{policy:<10} {len(cases):>7,} {len(ran):>6,} {len(cases) - len(ran):>8,}"
                     f" {folded:>8,}  " + "  ".join(
                         f"{n:>{len(name)},}" for n, name in zip(totals, COUNTERS)))
    lines.append("cases reaching each path: " + ", ".join(
        f"{name} {sum(bool(c['counts'].get(name)) for c in results):,}" for name in COUNTERS))
    classes = sorted({name for c in results for name in c["classes"]})
    for name in classes:
        ran = [c for c in results if name in c["classes"] and c["status"] != "refused"]
        folded = sum(any(c["counts"].values()) for c in ran)
        lines.append(f"  {name}: {len(ran):,} run, {folded:,} reached a folding path")
    differs = [c for c in results if c["status"] == "differs"]
    lines.append(f"differences: {len(differs)}")
    for c in differs:
        lines.append(f"  seed {c['seed']} ({c['policy']}): {c['detail']}")
        lines.append(f"    reproduce: python3 benchmarks/fold_fuzz.py --seeds {c['seed']}-"
                     f"{c['seed']} --fleet-share {fleet_share}")
    return lines


def _seeds(text: str) -> range:
    start, _, end = text.partition("-")
    return range(int(start), int(end or start) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=_seeds, default=_seeds("0-999"),
                        help="START-END, both included (default 0-999)")
    parser.add_argument("--fleet-share", type=float, default=0.2,
                        help="the share of cases drawn as fleets (default 0.2)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--policies", type=lambda s: set(s.split(",")), default=None,
                        help="only the cases of these policies (comma-separated)")
    parser.add_argument("--show-case", action="store_true",
                        help="print each seed's records and options as JSON, do not run")
    args = parser.parse_args(argv)
    if args.show_case:
        for seed in args.seeds:
            records, options, extra = draw_case(seed, args.fleet_share)
            print(json.dumps({"seed": seed, "options": options, "extra": extra,
                              "records": records}))
        return 0
    results = run(args.seeds, args.fleet_share, args.jobs, args.policies)
    print("\n".join(report(results, args.fleet_share)))
    return 1 if any(c["status"] == "differs" for c in results) else 0


if __name__ == "__main__":
    sys.exit(main())
