"""benchmarks/fleet.py's pieces on a tiny made-up trace, in-process (no child, no public trace):
the trace rewrites, the prefix bound, the search for N and the tables."""
from __future__ import annotations

import json

from conftest import ROOT, load_script

from scheduler_sim.fleet import Fleet
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.options import Options

bench = load_script(ROOT / "benchmarks" / "fleet.py", "bench_fleet")


def write(path, requests):
    records = [{"type": "config", "time_unit": "s", "hash_block_size": 4}]
    records += [{"type": "request", "id": f"r{i}", "arrival": a, "prompt_tokens": p,
                 "output_tokens": o, "block_hashes": h} for i, (a, p, o, h) in enumerate(requests)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


REQUESTS = [(0, 8, 3, [0, 1]), (0, 12, 2, [0, 1, 2]), (1, 8, 4, [0, 5]), (1, 5, 1, [7, 8]),
            (2, 12, 2, [0, 1, 9]), (3, 8, 3, [0, 5])]


def test_trace_rewrites(tmp_path):
    trace = write(tmp_path / "t.jsonl", REQUESTS)
    bench.head_of_trace(trace, tmp_path / "h.jsonl", 2)
    assert bench.prompt_lengths(tmp_path / "h.jsonl") == [8, 12]
    parts = bench.round_robin_split(trace, 4, tmp_path / "t")
    assert [bench.prompt_lengths(p) for p in parts] == [[8, 12], [12, 8], [8], [5]]
    assert all(p.read_text().startswith('{"type": "config"') for p in parts)
    bench.spaced_trace(trace, tmp_path / "s.jsonl", gap=10)
    spaced = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()][1:]
    assert [(r["arrival"], r["output_tokens"]) for r in spaced] == [(i * 10, 1) for i in range(6)]
    # Leading hash blocks seen before: r1 shares [0, 1], r2 [0], r4 [0, 1], r5 [0, 5].
    assert bench.unshared_tokens(trace) == [8, 4, 4, 5, 4, 1]
    assert bench.percentile([5, 1, 4], 50) == 4 and bench.percentile([5, 1, 4], 99) == 5
    bench.unshared_trace(trace, tmp_path / "u.jsonl", gap=10)
    cut = [json.loads(x) for x in (tmp_path / "u.jsonl").read_text().splitlines()]
    assert cut[0]["type"] == "config"
    assert [(r["arrival"], r["prompt_tokens"], r["output_tokens"]) for r in cut[1:]] == [
        (i * 10, p, 1) for i, p in enumerate([8, 4, 4, 5, 4, 1])]
    assert not any("block_hashes" in r for r in cut)


def test_argv_and_splits(tmp_path):
    argv = bench.replay_argv(tmp_path / "t.jsonl", 1, None)
    assert argv[argv.index("--num-blocks") + 1] == "20480" and "--tp" not in argv
    argv = bench.replay_argv(tmp_path / "t.jsonl", 3, "prefix-affinity", tp=8)
    assert argv[argv.index("--num-blocks") + 1] == str(8 * 20480)
    assert argv[argv.index("--tp") + 1] == "8" and argv[argv.index("--replicas") + 1] == "3"
    argv = bench.replay_argv(tmp_path / "t.jsonl", 1, "prefix-affinity", tp=2, pd=(1, 2))
    assert "--replicas" not in argv and argv[argv.index("--prefill-replicas") + 1] == "1"
    assert argv[argv.index("--decode-replicas") + 1] == "2"
    assert bench.pd_splits(1) == [] and bench.pd_splits(3) == [(1, 2), (2, 1)]
    assert bench.pd_splits(8) == [(2, 6), (4, 4), (6, 2)]
    assert bench.pd_splits(6) == [(2, 4), (3, 3), (4, 2)]
    runs = {1: {"ttft_p99": 3.0}, 3: {"ttft_p99": 1.9}, 2: {"ttft_p99": 1.5}}
    # GPUs: tp 8 x 3 = 24 against tp 4 x 8 = 32 (and tp 2 missed).
    results = {2: (4, False, runs), 8: (3, True, runs), 4: (8, True, {8: {"ttft_p99": 1.0}})}
    assert bench.cheapest(results, "ttft_p99") == (8, 3)
    assert bench.cheapest({2: (4, False, runs)}, "ttft_p99") is None
    pd = {"cached_tokens": 10, "replica_summaries": [
        {"role": "prefill", "cached_tokens": 3}, {"role": "decode", "cached_tokens": 7}]}
    assert bench.cached_tokens(pd) == 3 and bench.cached_tokens({"cached_tokens": 5}) == 5


def fleet_run(trace, n, router):
    """What bench.replay returns, computed in-process."""
    parsed = parse_trace(trace.read_bytes(), str(trace))
    options = Options.resolve(parsed.config, {"replicas": n, "router": router,
                                              "prefix_caching": True, "block_size": 4,
                                              "num_blocks": 64, "token_budget": 16})
    result = Fleet(parsed.workload, options, "vllm").run()
    run = dict(result.summary, replicas=n, wall=0.01, cpu=0.01,
               per_replica=[r["requests"] for r in result.replicas] or [result.summary["requests"]])
    return run


def test_search_and_tables(tmp_path):
    trace = write(tmp_path / "t.jsonl", REQUESTS)
    calls = []

    def run(n):
        calls.append(n)
        return fleet_run(trace, n, "prefix-affinity")

    n, met, runs, how = bench.search(run, "ttft_p99", 1e9, 8)
    assert (n, met, calls) == (1, True, [1])
    calls.clear()
    n, met, runs, how = bench.search(run, "ttft_p99", -1, 8)  # never met: the knee
    assert not met and calls[:2] == [1, 2] and n in runs
    best = min(r["ttft_p99"] for r in runs.values())
    assert runs[n]["ttft_p99"] <= best * 1.05
    lines = bench.table(bench.ROUTER_HEADS, [bench.router_row("x", runs[n], 53)])
    assert len({len(line) for line in lines}) == 1  # aligned
    assert len(bench.router_row("x", runs[n], 53)) == len(bench.ROUTER_HEADS)
    assert len(bench.pd_row("x", runs[n], 53)) == len(bench.PD_HEADS)
    row = bench.cost_row("x", n, 1.0, 2.0, runs[n]["iterations"], 6,
                         bench.computed_tokens(runs[n]))
    assert len(row) == len(bench.COST_HEADS)
    # The summary's prompt_tokens are the prompt rows computed: cached ones are not in it.
    one = runs[1]
    assert one["prompt_tokens"] + one["cached_tokens"] == sum(p for _, p, _, _ in REQUESTS)
    assert bench.computed_tokens(one) == (one["prompt_tokens"] + one["recompute_tokens"]
                                          + one["decode_tokens"])


def test_search_bisects_and_stops_on_a_plateau():
    ttft = {1: 50.0, 2: 9.0, 4: 3.0, 8: 1.5, 5: 2.5, 6: 1.9, 7: 1.8}

    def run(n):
        return {"ttft_p99": ttft[n], "per_replica": [1] * n}

    n, met, runs, how = bench.search(run, "ttft_p99", 2.0, 64)
    assert (n, met) == (6, True) and sorted(runs) == [1, 2, 4, 5, 6, 8]
    assert how == "doubling 1, 2, 4, 8; bisection 5, 6"
    flat = {1: 9.0, 2: 5.0, 4: 4.0, 8: 4.0, 3: 4.1}

    def run2(n):
        return {"ttft_p99": flat[n], "per_replica": [1, 1, 1, 1] + [0] * (n - 4)}

    n, met, runs, how = bench.search(run2, "ttft_p99", 2.0, 64)
    assert (n, met) == (3, False) and sorted(runs) == [1, 2, 3, 4, 8]
    assert "stopped" in how
