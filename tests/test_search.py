"""`search` (issue 27): the fewest replicas meeting an SLO by doubling then bisection,
the highest load by doubling then bisection, the Pareto front, and the command on a
trace whose answers are worked out by hand."""
from __future__ import annotations

import io
import json

import pytest

from scheduler_sim.cli.main import main
from scheduler_sim.io.search import fewest_replicas, highest_load, pareto_front
from test_cli import write


def recorder(attainment):
    """An `evaluate` that notes each value tried; its summary's attainment is
    `attainment(value)`."""
    tried = []

    def evaluate(value):
        tried.append(value)
        return {"slo_attainment": attainment(value)}
    return evaluate, tried


def test_fewest_replicas_doubles_then_bisects():
    """Attainment R / 5 (capped at 1) against 0.99: 1, 2, 4 fail, 8 meets; between 4
    and 8, 6 meets, 5 meets: 5, after six replays."""
    evaluate, tried = recorder(lambda r: min(1.0, r / 5))
    found, probes = fewest_replicas(evaluate, 0.99, 64)
    assert (found, tried) == (5, [1, 2, 4, 8, 6, 5])
    assert [p.attainment for p in probes] == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


def test_the_most_replicas_caps_the_doubling():
    evaluate, tried = recorder(lambda r: 1.0 if r >= 6 else 0.0)
    assert fewest_replicas(evaluate, 0.99, 7)[0] == 6
    assert tried == [1, 2, 4, 7, 5, 6]


def test_no_fleet_within_the_most_meets_it():
    evaluate, tried = recorder(lambda r: 0.5)
    assert fewest_replicas(evaluate, 0.99, 6)[0] is None
    assert tried == [1, 2, 4, 6]


def test_one_replica_that_meets_it_is_the_answer_at_once():
    evaluate, tried = recorder(lambda r: 1.0)
    assert fewest_replicas(evaluate, 0.99, 64)[0] == 1 and tried == [1]


def test_highest_load_doubles_then_bisects_to_the_precision():
    """Met up to 3x: 1 and 2 meet, 4 fails; [2, 4] -> 3 meets; then 3.5, 3.25, 3.125,
    3.0625, 3.03125 fail, and 3.015625 too (the bracket 0.03125 > 1% of 3 is halved
    once more): 3."""
    evaluate, tried = recorder(lambda x: 1.0 if x <= 3 else 0.0)
    found, _ = highest_load(evaluate, 0.99, precision=0.01)
    assert found == 3
    assert tried == [1, 2, 4, 3, 3.5, 3.25, 3.125, 3.0625, 3.03125, 3.015625]


def test_highest_load_halves_when_the_trace_itself_is_too_much():
    """Met up to 0.3x: 1, 0.5 fail, 0.25 meets; [0.25, 0.5] bisected to 10%."""
    evaluate, tried = recorder(lambda x: 1.0 if x <= 0.3 else 0.0)
    found, _ = highest_load(evaluate, 0.99, precision=0.1)
    # [0.25, 0.5]: 0.375 fails, 0.3125 fails, 0.28125 meets; [0.28125, 0.3125] is
    # 0.03125 wide, more than 10% of 0.28125: 0.296875 meets; 0.015625 is less.
    assert tried == [1, 0.5, 0.25, 0.375, 0.3125, 0.28125, 0.296875]
    assert found == 0.296875


def test_highest_load_none_when_even_the_least_fails():
    evaluate, tried = recorder(lambda x: 0.0)
    assert highest_load(evaluate, 0.99, lowest=0.25)[0] is None
    assert tried == [1, 0.5, 0.25]


def test_pareto_front():
    points = [(4, 2.0, "a"), (1, 0.125, "b"), (2, 0.5, "c"), (2, 0.4, "d"), (3, 0.5, "e"),
              (5, 2.0, "f")]
    assert [p[2] for p in pareto_front(points)] == ["b", "c", "a"]


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    return main(argv, out=out, err=err), out.getvalue(), err.getvalue()


# Eight requests at tick 0, one row per dispatch: on a replica the k-th request it gets
# has its first token at 2k + 1 (each takes a prefill and a decode). TTFT <= 3 holds for
# the first two of each replica; round-robin gives 8/R each: R = 1, 2, 3, 4 meet 2, 4,
# 6, 8 of 8.
TRACE = ([{"type": "config", "block_size": 4, "num_blocks": 64, "max_rows": 1}]
         + [{"type": "request", "id": f"r{i}", "arrival": 0, "prompt_tokens": 4,
             "output_tokens": 2} for i in range(8)])


def test_the_command_finds_four_replicas_by_hand(tmp_path):
    status, out, err = run(["search", write(tmp_path, TRACE), "--slo", "ttft=3",
                            "--attainment", "1", "--max-replicas", "8", "--policy",
                            "continuous"])
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[1:4] == [
        "policy      replicas  cost  attainment   goodput  ttft p99",
        "                      GPUs              req/tick     ticks",
        "continuous         4     4     100.00%         2         3"]
    assert lines[4] == "cheapest: policy=continuous with 4 replicas, 4 GPUs"
    assert lines[5] == "4 replays for 1 point(s); trying every count would take 8"
    # Replays 1, 2, 4, then 3; goodput = requests met / 16, 8, 6 and 4 ticks.
    assert [line.split()[1:4] for line in lines[10:]] == [
        ["1", "1", "0.125"], ["2", "2", "0.5"], ["3", "3", "1"], ["4", "4", "2"]]


def test_the_traces_slo_serves_when_no_slo_flag_is_given(tmp_path):
    """`--slo` is optional when the trace's config has an `slo` (the command tables show
    it in brackets): the same four replicas as with `--slo ttft=3`."""
    config = dict(TRACE[0], slo="ttft=3")
    status, out, err = run(["search", write(tmp_path, [config] + TRACE[1:]), "--attainment",
                            "1", "--max-replicas", "8", "--policy", "continuous"])
    assert (status, err) == (0, "")
    assert out.splitlines()[4] == "cheapest: policy=continuous with 4 replicas, 4 GPUs"


def test_one_replica_costs_one_gpu(tmp_path):
    """An objective one replica meets (a TTFT of at most 100 ticks): `1 replica, 1 GPU`."""
    status, out, err = run(["search", write(tmp_path, TRACE), "--slo", "ttft=100",
                            "--attainment", "1", "--max-replicas", "8", "--policy",
                            "continuous"])
    assert (status, err) == (0, "")
    assert out.splitlines()[4] == "cheapest: policy=continuous with 1 replica, 1 GPU"


def test_a_price_of_minus_zero_is_shown_as_zero(tmp_path):
    """`--price h100-sxm=-0` (a finite price >= 0) was shown as `-0 $/h`."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"type":"config","cost_model":"llama-3-8b/h100-sxm"}\n'
                     '{"type":"request","id":"a","arrival":0,"prompt_tokens":4,'
                     '"output_tokens":2}\n')
    status, out, err = run(["search", str(trace), "--slo", "ttft=5", "--price",
                            "h100-sxm=-0", "--max-replicas", "1", "--quiet"])
    assert (status, err) == (0, "")
    assert "cheapest: policy=continuous with 1 replica, 0 $/h" in out.splitlines()


def test_the_command_prices_gpus(tmp_path):
    """Without a cost model there is no GPU to price: said, exit 2."""
    status, _, err = run(["search", write(tmp_path, TRACE), "--slo", "ttft=3",
                          "--price", "h100-sxm=2.5", "--max-replicas", "2"])
    assert status == 2
    assert "--price gives no price for a run without a cost model" in err


@pytest.mark.parametrize("flags, message", [
    ([], "search needs objectives to meet: give --slo"),
    (["--slo", "ttft=3", "--prefill-replicas", "1", "--decode-replicas", "1"],
     "a disaggregated fleet (prefill_replicas, decode_replicas) is not sized that way"),
    (["--slo", "ttft=3", "--replicas", "2"], "search finds replicas itself"),
    (["--slo", "ttft=3", "--capacity", "--rate-scale", "2"], "search finds rate_scale itself"),
    (["--slo", "ttft=3", "--attainment", "1.5"], "--attainment must be a fraction in (0, 1]"),
    (["--slo", "ttft=3", "--price", "h100"], "--price must look like GPU=DOLLARS_PER_GPU_HOUR"),
    (["--slo", "ttft=3", "--capacity", "--precision", "0"],
     "--precision must be a fraction from 0.0001 to under 1, got 0.0"),
    # (A MemoryError traceback before: the replica counts 1 to N were listed first.)
    (["--slo", "ttft=3", "--max-replicas", "99999999999"],
     "scheduler-sim: error: --max-replicas must be an integer from 1 to 1,024, "
     "got 99999999999\n"),
    # (The last price counted before, silently.)
    (["--slo", "ttft=3", "--price", "h100-sxm=1", "--price", "h100-sxm=2"],
     "scheduler-sim: error: --price prices h100-sxm twice, got 'h100-sxm=1' and "
     "'h100-sxm=2'\n"),
    (["--slo", "ttft=3", "--max-replicas", "0"],
     "scheduler-sim: error: --max-replicas must be an integer from 1 to 1,024, got 0\n"),
])
def test_what_the_command_refuses(tmp_path, flags, message):
    status, out, err = run(["search", write(tmp_path, TRACE), *flags])
    assert (status, out) == (2, "")
    assert message in err


def test_capacity_by_hand(tmp_path):
    """One replica, requests at 0, 2, ..., 10 (a prefill and a decode each, one row per
    dispatch): at load X request i arrives at ceil(2i / X); every TTFT is 1 while no two
    overlap, that is while the last, at ceil(10 / X), comes after 8 + 1: X < 10 / 9.
    1 meets, 2 fails; 1.5, 1.25, 1.125 fail (1.125: r5 at ceil(8.89) = 9 waits), 1.0625
    meets; [1.0625, 1.125] is within 10%: 1.0625, at 5 requests / 10 ticks x 1.0625."""
    trace = ([{"type": "config", "block_size": 4, "num_blocks": 64, "max_rows": 1}]
             + [{"type": "request", "id": f"r{i}", "arrival": 2 * i, "prompt_tokens": 4,
                 "output_tokens": 2} for i in range(6)])
    status, out, _ = run(["search", write(tmp_path, trace), "--slo", "ttft=1",
                          "--attainment", "1", "--capacity", "--precision", "0.1"])
    assert status == 0
    assert out.splitlines()[1:] == [
        "6 replays for 1 point(s)",
        "policy        load      rate  attainment",
        "                 x  req/tick",
        "continuous  1.0625    0.5312     100.00%"]


def test_capacity_equals_a_brute_force_sweep_of_the_load(tmp_path):
    """The capacity bisection finds (to its precision) the load a brute-force sweep of
    rate_scale over the same trace finds: the highest of 1.00, 1.01, ..., 1.20 that
    meets the SLO is 1.11 (below 10 / 9, see above); bisection to 1% gives a load
    within 1% of it, and itself meets the SLO."""
    trace = ([{"type": "config", "block_size": 4, "num_blocks": 64, "max_rows": 1}]
             + [{"type": "request", "id": f"r{i}", "arrival": 2 * i, "prompt_tokens": 4,
                 "output_tokens": 2} for i in range(6)])
    path = write(tmp_path, trace)
    scales = [round(1 + k / 100, 2) for k in range(21)]
    status, out, _ = run(["sweep", path, "--slo", "ttft=1", "--grid",
                          "rate_scale=" + ",".join(map(str, scales)), "--jsonl", "-",
                          "--quiet"])
    rows = [json.loads(line) for line in out.splitlines()][1:]
    brute = max(row["rate_scale"] for row in rows if row["slo_attainment"] == 1)
    assert brute == 1.11
    status, out, _ = run(["search", path, "--slo", "ttft=1", "--attainment", "1",
                          "--capacity"])
    found = float(out.splitlines()[4].split()[1])
    assert found <= brute < found * 1.01
    status, out, _ = run(["replay", path, "--slo", "ttft=1", "--rate-scale", str(found),
                          "--json", "--quiet"])
    assert json.loads(out)["runs"][0]["slo_attainment"] == 1


def test_the_fewest_replicas_skip_what_cannot_be_cheaper(tmp_path):
    """Of the eight fleets a brute force would replay, the search replays four (1, 2, 4,
    then 3): none above 4, the first count that met the SLO."""
    status, out, _ = run(["search", write(tmp_path, TRACE), "--slo", "ttft=3",
                          "--attainment", "1", "--max-replicas", "8", "--policy",
                          "continuous"])
    front = out.split("every replay made):\n")[1].splitlines()[2:]
    assert sorted(int(line.split()[1]) for line in front) == [1, 2, 3, 4]


def test_no_fleet_meets_it_exit_0_and_the_row_says_so(tmp_path):
    """docs/spec.md §10: exit 0 even when no point meets the SLO. TTFT <= 0.5 ticks is met
    by no request (the first token comes a dispatch, a tick, after admission): 1, 2 and
    3 replicas (the most) are tried, and the row is dashes."""
    status, out, err = run(["search", write(tmp_path, TRACE), "--slo", "ttft=0.5",
                            "--max-replicas", "3", "--policy", "continuous"])
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[3].split() == ["continuous", "-", "-", "-", "-", "-"]
    assert lines[4] == "3 replays for 1 point(s); trying every count would take 3"


# --- the Python API and its executors ---------------------------------------------------

def api_points(path, executor=None, **extra):
    import scheduler_sim as sim
    return sim.search(sim.load(path), {"max_rows": [1, 2]}, policies="continuous",
                      slo="ttft=3", attainment=1, max_replicas=8, executor=executor, **extra)


def test_the_api_finds_what_the_command_finds(tmp_path):
    """max_rows 1 is the hand-worked case above: 4 replicas after replays 1, 2, 4, 3 (2,
    4, 6, 8 of 8 met). At max_rows 2 a replica prefills two requests in one dispatch
    and decodes both in the next, so its k-th pair has its first token at 2k + 1 too:
    2 replicas hold pairs 1 and 2 (TTFT 1 and 3) for all 8; 1 replica meets 4 of 8."""
    path = write(tmp_path, TRACE)
    points = api_points(path)
    assert [{k: v for k, v in p.items() if k != "replays"} for p in points] == [
        {"index": 0, "max_rows": 1, "policy": "continuous", "replicas": 4, "gpus": 4},
        {"index": 1, "max_rows": 2, "policy": "continuous", "replicas": 2, "gpus": 2}]
    assert [[(r["replicas"], r["slo_attainment"]) for r in p["replays"]] for p in points] == [
        [(1, 0.25), (2, 0.5), (4, 1.0), (3, 0.75)], [(1, 0.5), (2, 1.0)]]
    status, out, _ = run(["search", path, "--slo", "ttft=3", "--attainment", "1",
                          "--max-replicas", "8", "--grid", "max_rows=1,2", "--policy",
                          "continuous"])
    assert status == 0
    # Cheapest first; both finish their 8 requests at tick 4: goodput 2 per tick.
    assert [line.split() for line in out.splitlines()[3:5]] == [
        ["2", "continuous", "2", "2", "100.00%", "2", "3"],
        ["1", "continuous", "4", "4", "100.00%", "2", "3"]]


def test_the_api_gives_the_same_points_on_any_executor(tmp_path):
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
    path = write(tmp_path, TRACE)
    alone = api_points(path)
    with ThreadPoolExecutor(2) as pool:
        assert api_points(path, pool) == alone
    with ProcessPoolExecutor(2) as pool:
        assert api_points(path, pool) == alone


def test_the_api_capacity_and_its_errors(tmp_path):
    """Capacity at max_rows 1 on one replica: the 8 requests all arrive at tick 0, so no
    load scale moves an arrival and each meets 2 of 8: none meets 100%, and the search
    halves from 1 down to its lowest scale, 1/1024 (11 replays)."""
    import scheduler_sim as sim
    path = write(tmp_path, TRACE)
    points = sim.search(sim.load(path), policies="continuous", slo="ttft=3", attainment=1,
                        capacity=True, max_rows=1)
    assert points[0]["rate_scale"] is None and points[0]["gpus"] is None
    assert [(r["rate_scale"], r["slo_attainment"]) for r in points[0]["replays"]] == [
        (2.0 ** -k, 0.25) for k in range(11)]
    with pytest.raises(sim.UsageError, match="search needs objectives to meet"):
        sim.search(sim.load(path), policies="continuous")
    with pytest.raises(sim.UsageError, match="search finds replicas itself"):
        sim.search(sim.load(path), policies="continuous", slo="ttft=3", replicas=2)
    with pytest.raises(sim.UsageError, match=r"--attainment must be a fraction in \(0, 1\]"):
        sim.search(sim.load(path), policies="continuous", slo="ttft=3", attainment=0)


@pytest.mark.slow  # imports dask and starts a local cluster
def test_a_dask_executor_gives_the_same_points(tmp_path):
    pytest.importorskip("distributed", reason="dask[distributed] is not installed "
                        "(pip install '.[dask]')")
    from distributed import Client, LocalCluster
    path = write(tmp_path, TRACE)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        points = api_points(path, client.get_executor())
    assert points == api_points(path)


def test_a_fleet_counts_its_gpus_disaggregated_or_not():
    """GPUs are replicas x tp; a disaggregated fleet's replicas are its prefill and
    decode replicas (1 + 2 at tp 2: 6), whatever `replicas` says (it stays 1)."""
    from scheduler_sim.io.search_runs import fleet_gpus
    from scheduler_sim.records.options import Options
    assert fleet_gpus(Options.resolve({}, {"tp": 2, "replicas": 4})) == 8
    assert fleet_gpus(Options.resolve({}, {"tp": 2, "replicas": 4}), 3) == 6
    disagg = Options.resolve({}, {"tp": 2, "prefill_replicas": 1, "decode_replicas": 2})
    assert (disagg.replicas, fleet_gpus(disagg), fleet_gpus(disagg, 1)) == (1, 6, 6)
