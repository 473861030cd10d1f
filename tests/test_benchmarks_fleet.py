"""benchmarks/fleet.py's pieces on a tiny made-up trace, in-process (no child, no public trace):
the trace rewrites, the prefix bound, the search for N and the tables."""
from __future__ import annotations

import importlib.util
import json

from conftest import ROOT

from scheduler_sim.fleet import Fleet
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.options import Options

spec = importlib.util.spec_from_file_location("bench_fleet", ROOT / "benchmarks" / "fleet.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


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


def fleet_run(trace, n, router):
    """What bench.replay returns, computed in-process."""
    parsed = parse_trace(trace.read_bytes(), str(trace))
    options = Options.resolve(parsed.config, {"replicas": n, "router": router,
                                              "prefix_caching": True, "block_size": 4,
                                              "num_blocks": 64, "token_budget": 16})
    result = Fleet(parsed.workload, options, "vllm").run()
    run = dict(result.summary, replicas=n, wall=0.01, cpu=0.01,
               per_replica=[r["requests"] for r in result.replicas])
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
    lines = bench.table(bench.ROUTER_HEADS, [bench.router_row("x", runs[n])])
    assert len({len(line) for line in lines}) == 1  # aligned
    row = bench.cost_row("x", n, 1.0, 2.0, runs[n]["iterations"], 6,
                         bench.computed_tokens(runs[n]))
    assert len(row) == len(bench.COST_HEADS)


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
