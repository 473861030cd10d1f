"""`scheduler-sim sweep` and `scheduler_sim.sweep`: a grid of options and policies.

The trace (SMALL): six requests on 4-token blocks, enough that `vllm`
preempts on 6 blocks and nothing waits on 24, so that the swept values change
the rows. Every configuration's row must equal what `replay --json` prints for
the same options alone; shards must cover the grid once and merge back byte
for byte; every executor (in process, a process pool, Dask) gives the same rows.
"""
from __future__ import annotations

import io
import json
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

import scheduler_sim as sim
from conftest import req
from scheduler_sim.cli.main import main
from scheduler_sim.engine.summary import RUN_FIELDS
from scheduler_sim.io import sweep as sweep_module
from scheduler_sim.io import sweep_runs
from scheduler_sim.io.trace import read_trace

SMALL = [
    {"type": "config", "block_size": 4, "num_blocks": 12},
    req("a", 0, 9, 6), req("b", 0, 5, 7), req("c", 1, 12, 3),
    req("d", 2, 3, 9), req("e", 4, 7, 5), req("f", 6, 4, 4),
]
GRID = ["--grid", "num_blocks=6,24", "--grid", "watermark=0,0.1",
        "--policy", "vllm", "--policy", "sglang"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = main([str(a) for a in argv], out, err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def trace(tmp_path: Path) -> str:
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in SMALL))
    return str(path)


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def test_a_sweep_without_a_grid_replays_its_policies(trace, tmp_path):
    """`--grid` is optional (README's command table): with none, the policies are the
    only axis, one configuration each, in the order given."""
    status, out, err = run("sweep", trace, "--policy", "vllm", "--policy", "continuous",
                           "--jsonl", tmp_path / "s.jsonl")
    assert status == 0, err
    rows = rows_of(tmp_path / "s.jsonl")
    assert [(r["index"], r["policy"]) for r in rows] == [(0, "vllm"), (1, "continuous")]
    assert list(rows[0])[:3] == ["index", "policy", "time_unit"]  # no other axis


def test_rows_equal_replay_json_of_each_configuration(trace, tmp_path):
    status, out, err = run("sweep", trace, *GRID, "--jsonl", tmp_path / "s.jsonl")
    assert status == 0, err
    rows = rows_of(tmp_path / "s.jsonl")
    grid = [(b, w, p) for b in (6, 24) for w in (0.0, 0.1) for p in ("vllm", "sglang")]
    assert [(r["num_blocks"], r["watermark"], r["policy"]) for r in rows] == grid
    assert [r["index"] for r in rows] == list(range(8))
    for row, (blocks, watermark, policy) in zip(rows, grid):
        status, text, _ = run("replay", trace, "--json", "--num-blocks", blocks,
                              "--watermark", watermark, "--policy", policy)
        assert status == 0
        alone = json.loads(text)["runs"][0]
        assert {k: row[k] for k in RUN_FIELDS} == {k: alone[k] for k in RUN_FIELDS}
        assert row["time_unit"] == "ticks" and row["stalled"] is False
    assert any(r["preemptions"] for r in rows) and len({r["makespan"] for r in rows}) > 1
    # the table: one line per configuration under a line of headings and one of units
    lines = out.splitlines()
    assert lines[0].endswith("8 of 8 configurations")
    assert lines[1].split()[:4] == ["#", "num_blocks", "watermark", "policy"]
    assert "ticks" in lines[2] and "req/tick" in lines[2]
    assert len(lines) == 3 + 8 and lines[3].split()[:4] == ["0", "6", "0.0", "vllm"]
    assert len({len(line) for line in lines[1:]}) <= 2  # aligned (the last column may end)


def test_csv_has_one_row_per_configuration(trace, tmp_path):
    status, _, err = run("sweep", trace, *GRID, "--csv", tmp_path / "s.csv",
                         "--jsonl", tmp_path / "s.jsonl")
    assert status == 0, err
    lines = (tmp_path / "s.csv").read_text().splitlines()
    head = lines[0].split(",")
    assert head[:6] == ["index", "num_blocks", "watermark", "policy", "time_unit", "stalled"]
    assert tuple(head[6:]) == RUN_FIELDS
    assert len(lines) == 9
    rows = rows_of(tmp_path / "s.jsonl")
    assert lines[1].split(",")[head.index("makespan")] == str(rows[0]["makespan"])


def test_process_pool_gives_the_same_bytes(trace, tmp_path):
    run("sweep", trace, "--grid", "num_blocks=6,24", "--policy", "vllm",
        "--jsonl", tmp_path / "one.jsonl", "--csv", tmp_path / "one.csv")
    status, out, err = run("sweep", trace, "--grid", "num_blocks=6,24", "--policy", "vllm",
                           "-j", "2", "--jsonl", tmp_path / "two.jsonl",
                           "--csv", tmp_path / "two.csv")
    assert status == 0, err
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "two.csv").read_bytes()


def test_shards_cover_the_grid_once_and_merge_byte_for_byte(trace, tmp_path):
    run("sweep", trace, *GRID, "--jsonl", tmp_path / "full.jsonl", "--csv", tmp_path / "full.csv")
    full = rows_of(tmp_path / "full.jsonl")
    for n in (1, 3, 5, 9):
        seen = []
        for k in range(n):
            status, _, err = run("sweep", trace, *GRID, "--shard", f"{k}/{n}",
                                 "--jsonl", tmp_path / f"{k}of{n}.jsonl")
            assert status == 0, err
            rows = rows_of(tmp_path / f"{k}of{n}.jsonl")
            assert all(r["index"] % n == k for r in rows)
            assert rows == [full[r["index"]] for r in rows]
            seen += [r["index"] for r in rows]
        assert sorted(seen) == list(range(8))
    shards = [tmp_path / f"{k}of3.jsonl" for k in (2, 0, 1)]  # any order
    status, _, err = run("sweep", "merge", *shards, "--jsonl", tmp_path / "m.jsonl",
                         "--csv", tmp_path / "m.csv")
    assert status == 0, err
    assert "8 configurations from 3 file(s)" in err
    assert (tmp_path / "m.jsonl").read_bytes() == (tmp_path / "full.jsonl").read_bytes()
    assert (tmp_path / "m.csv").read_bytes() == (tmp_path / "full.csv").read_bytes()
    status, out, _ = run("sweep", "merge", *shards)  # JSONL on stdout by default
    assert out == (tmp_path / "full.jsonl").read_text()


def test_merge_refuses_overlaps_gaps_and_other_sweeps(trace, tmp_path):
    for k in range(2):
        run("sweep", trace, *GRID, "--shard", f"{k}/2", "--jsonl", tmp_path / f"{k}.jsonl")
    run("sweep", trace, "--grid", "num_blocks=6,25", "--grid", "watermark=0,0.1",
        "--policy", "vllm", "--policy", "sglang", "--shard", "1/2",
        "--jsonl", tmp_path / "other.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"type":"request"}\n')
    cases = {
        ("0.jsonl", "0.jsonl"): "configuration 0 is also in",
        ("0.jsonl", "1.jsonl", "1.jsonl"): "shards overlap",
        ("0.jsonl",): ("4 of 8 configurations are in no file (a shard is missing, or a sweep was "
                      "interrupted?): 1, 3, 5, 7"),
        ("0.jsonl", "other.jsonl"): "from another sweep than",
        ("bad.jsonl",): "not the JSONL output of a sweep",
    }
    for files, message in cases.items():
        status, out, err = run("sweep", "merge", *(tmp_path / f for f in files))
        assert status == 2 and message in err and out == "", (files, err)
        assert "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["--grid", "num_block=1,2"],
     "--grid: unknown option 'num_block' (did you mean 'num_blocks'?)"),
    (["--grid", "num_blocks=8,0"], "--grid: num_blocks must be an integer >= 1, got 0"),
    (["--grid", "watermark=0,1.5"], "--grid: watermark must be a number in [0.0, 1.0), got 1.5"),
    (["--grid", "prefix_caching=true,maybe"],
     "--grid: prefix_caching must be true or false, got 'maybe'"),
    (["--grid", "policy=vllm,nope"], "--grid: unknown policy 'nope'"),
    (["--grid", "num_blocks=8", "--grid", "num-blocks=16"],
     "the option num_blocks is swept twice"),
    (["--grid", "num_blocks="], "--grid: num_blocks needs at least one value, got 'num_blocks='"),
    (["--grid", "num_blocks"], "--grid must look like NAME=V1,V2,..., got 'num_blocks'"),
    (["--grid", "num_blocks=8,8"], "--grid: num_blocks lists the value 8 twice"),
    (["--grid", "time_unit=s"], "time_unit is a property of the trace file and cannot be swept"),
    (["--grid", "num_blocks=8", "--num-blocks", "8"],
     "num_blocks is both swept and fixed (--num-blocks)"),
    (["--grid", "policy=vllm", "--policy", "sglang"], "both give the policies"),
    (["--grid", "order=fcfs,lpm"],
     "configuration 1 (order=lpm, policy=continuous): order 'lpm' needs prefix_caching"),
    (["--shard", "2/2"], "--shard must be K/N with 0 <= K < N (K counts from 0), got '2/2'"),
    (["--shard", "a/b"], "--shard must be K/N with 0 <= K < N (K counts from 0), got 'a/b'"),
    # (Refused as K >= N before, which it is not.)
    (["--shard", "0/" + "9" * 19], "--shard's K and N have at most 18 digits each, got "
     "'0/9999999999999999999'"),
    (["-j", "0"], "-j must be an integer >= 1, got 0"),
])
def test_bad_grids_exit_2_with_what_is_wrong(trace, argv, message):
    status, out, err = run("sweep", trace, *argv)
    assert status == 2 and message in err, err
    assert out == "" and "Traceback" not in err


def test_grid_file(trace, tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text('{"policy": ["vllm", "sglang"], "num_blocks": [6, 24]}')
    status, _, err = run("sweep", trace, "--grid-file", grid, "--jsonl", tmp_path / "g.jsonl")
    assert status == 0, err
    rows = rows_of(tmp_path / "g.jsonl")  # axes in the file's order: policy slowest
    assert [(r["policy"], r["num_blocks"]) for r in rows] == [
        ("vllm", 6), ("vllm", 24), ("sglang", 6), ("sglang", 24)]
    for text, message in [('{"num_blocks": [6], "num_blocks": [8]}', "swept twice"),
                          ('{"num_blocks": []}', "num_blocks needs a non-empty list"),
                          ('{"num_blocks": 6}', "num_blocks needs a non-empty list of values, "
                                                "got 6"),
                          ("[1]", "a grid file is a JSON object"),
                          ("{", "grid.json:1: invalid JSON")]:
        grid.write_text(text)
        status, _, err = run("sweep", trace, "--grid-file", grid)
        assert status == 2 and message in err, (text, err)


def test_slo_values_are_separated_by_semicolons(trace, tmp_path):
    status, _, err = run("sweep", trace, "--grid", "slo=ttft=2,tpot=1;ttft=5",
                         "--jsonl", tmp_path / "s.jsonl", "--csv", tmp_path / "s.csv")
    assert status == 0, err
    rows = rows_of(tmp_path / "s.jsonl")
    assert [r["slo"] for r in rows] == [{"ttft": 2.0, "tpot": 1.0}, {"ttft": 5.0}]
    assert (tmp_path / "s.csv").read_text().splitlines()[1].startswith('0,"ttft=2,tpot=1",')



# --- the grid, made lazily -------------------------------------------------------------


def test_a_shard_header_and_fingerprint_are_pinned(trace, tmp_path):
    """Shard 1/3 of GRID: the header's grid, configuration count and fingerprint are
    those the sweep wrote when it built every configuration up front (the trace's
    bytes, the axes and the fixed options; the rows 1, 4 and 7)."""
    status, _, err = run("sweep", trace, *GRID, "--shard", "1/3", "--jsonl", tmp_path / "s")
    assert status == 0, err
    lines = (tmp_path / "s").read_text().splitlines()
    head = json.loads(lines[0])
    assert (head["trace_sha256"], head["grid"], head["configurations"], head["shard"]) == (
        "3d32290560618fa3567d41500a0d40df4f2bf56212906d2a03af0aa3e0741d61",
        {"num_blocks": [6, 24], "watermark": [0.0, 0.1], "policy": ["vllm", "sglang"]},
        8, "1/3")
    assert head["fingerprint"] == (
        "3fc94011eed7f3e8a1a6acea8172ea4c996e570c5da298d0c646f31d44acd214")
    assert [json.loads(line)["index"] for line in lines[1:]] == [1, 4, 7]


def _grid(path: str, axes: dict, **fixed) -> sweep_module.Grid:
    parsed = read_trace(path)
    return sweep_module.build_grid(
        parsed, [sweep_module.check_axis(name, values) for name, values in axes.items()],
        fixed)


def test_configurations_are_made_from_their_number_in_grid_order(trace):
    """The 2 x 3 x 2 grid's configurations by number (also negative, and a slice) are
    those iteration makes, in the cross product's order, first axis slowest."""
    grid = _grid(trace, {"num_blocks": [6, 24], "max_rows": [1, 2, 3],
                         "policy": ["vllm", "sglang"]})
    every = list(grid.configurations)
    assert len(grid) == len(every) == 12
    assert [grid.configurations[i] for i in range(12)] == every
    assert (grid.configurations[-1], grid.configurations[3:5]) == (every[11], every[3:5])
    assert [c.values for c in every[:3]] == [
        (("num_blocks", 6), ("max_rows", 1), ("policy", "vllm")),
        (("num_blocks", 6), ("max_rows", 1), ("policy", "sglang")),
        (("num_blocks", 6), ("max_rows", 2), ("policy", "vllm"))]
    assert (every[7].index, every[7].label(), every[7].options.max_rows) == (
        7, "num_blocks=24, max_rows=1, policy=sglang", 1)
    with pytest.raises(IndexError):
        grid.configurations[12]


def test_a_shard_makes_only_its_own_configurations(trace, monkeypatch):
    """Building a grid of 40 x 25 x 2 = 2,000 configurations makes none (it resolves
    each and keeps nothing); shard 3/500 then makes its 4 (indices 3, 503, 1003,
    1503) and no other."""
    made = []

    class Counted(sweep_module.Configuration):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            made.append(self.index)

    monkeypatch.setattr(sweep_module, "Configuration", Counted)
    grid = _grid(trace, {"num_blocks": list(range(6, 46)), "max_rows": list(range(1, 26)),
                         "policy": ["vllm", "sglang"]})
    assert (len(grid), made) == (2000, [])
    shard = sweep_module.shard_of(grid, (3, 500))
    assert [c.index for c in shard] == made == [3, 503, 1003, 1503]
    assert shard[1].values == (("num_blocks", 16), ("max_rows", 2), ("policy", "sglang"))


def test_a_bad_combination_deep_in_the_grid_is_refused_before_anything_runs(trace, tmp_path,
                                                                          monkeypatch):
    """order lpm without prefix caching is configuration 60 of 120 (order slowest, then
    30 pool sizes, then 2 policies): shard 0/7, which does not hold it, is refused too,
    exit 2, before any configuration runs or any output is opened."""
    ran = []
    monkeypatch.setattr(sweep_runs, "run_configuration",
                        lambda *args: ran.append(args) or ({}, False))
    blocks = ",".join(str(b) for b in range(6, 36))
    status, out, err = run("sweep", trace, "--grid", "order=fcfs,lpm", "--grid",
                           f"num_blocks={blocks}", "--policy", "vllm", "--policy", "sglang",
                           "--shard", "0/7", "--jsonl", tmp_path / "s.jsonl")
    assert (status, out, ran) == (2, "", [])
    assert err == ("scheduler-sim: error: grid: configuration 60 (order=lpm, num_blocks=6, "
                   "policy=vllm): order 'lpm' needs prefix_caching: true (it sorts by cached "
                   "prefix)\n")
    assert not (tmp_path / "s.jsonl").exists()


def test_a_grid_past_the_most_configurations_is_refused_up_front(trace, monkeypatch):
    """With the limit set to 11, a grid of 3 x 2 x 2 = 12 configurations is refused,
    exit 2, naming the size of each axis; one of 11 pool sizes and one policy runs."""
    monkeypatch.setattr(sweep_module, "MAX_CONFIGURATIONS", 11)
    status, out, err = run("sweep", trace, "--grid", "num_blocks=6,12,24", *GRID[2:])
    assert (status, out) == (2, "")
    assert err == ("scheduler-sim: error: grid: 12 configurations (3 num_blocks x 2 watermark "
                   "x 2 policy), more than the 11 a sweep may have; sweep fewer values\n")
    status, out, err = run("sweep", trace, "--grid", "num_blocks=" + ",".join(
        str(b) for b in range(6, 17)), "--policy", "vllm")
    assert status == 0 and out.startswith(f"scheduler-sim sweep {trace}: 11 of 11 "), err

# --- the Python API and its executors ---------------------------------------------------

def api_rows(path: str, executor=None) -> list[dict]:
    return sim.sweep(sim.load(path), {"num_blocks": [6, 24]}, policies=["vllm", "continuous"],
                     executor=executor, watermark=0.1)


def test_api_rows_match_the_command_line(trace, tmp_path):
    run("sweep", trace, "--grid", "num_blocks=6,24", "--policy", "vllm", "--policy",
        "continuous", "--watermark", "0.1", "--jsonl", tmp_path / "s.jsonl")
    assert api_rows(trace) == rows_of(tmp_path / "s.jsonl")
    with ThreadPoolExecutor(2) as pool:
        assert api_rows(trace, pool) == api_rows(trace)
    with pytest.raises(sim.UsageError, match="num_blocks must be an integer >= 1, got 0"):
        sim.sweep(sim.load(trace), {"num_blocks": [0]})


def test_api_with_a_process_pool(trace):
    with ProcessPoolExecutor(2) as pool:
        assert api_rows(trace, pool) == api_rows(trace)


@pytest.mark.slow  # imports dask and starts a local cluster: 0.9 s of CPU
def test_dask_executor_gives_the_same_rows(trace):
    pytest.importorskip("distributed", reason="dask[distributed] is not installed "
                        "(pip install '.[dask]')")
    from distributed import Client, LocalCluster

    started = time.monotonic()
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        rows = api_rows(trace, client.get_executor())
    assert rows == api_rows(trace)
    assert time.monotonic() - started < 30


# --- the sweep's report -----------------------------------------------------------------


def _svg_points(page: str) -> list[tuple[str, str]]:
    """(series name, title) of every point of the sweep chart, in drawing order."""
    import xml.etree.ElementTree as ET
    start = page.index("<svg")
    svg = ET.fromstring(page[start:page.index("</svg>", start) + 6])
    ns = "{http://www.w3.org/2000/svg}"
    names = [line.get("data-series") for line in svg.iter(f"{ns}polyline")]
    titles = [c.find(f"{ns}title").text for c in svg.iter()
              if c.get("class") in ("point", "bar")]
    return names, titles


def test_the_report_plots_the_metric_against_the_swept_option_per_policy(trace, tmp_path):
    page_path = tmp_path / "sweep.html"
    code, out, err = run("sweep", trace, "--grid", "num_blocks=8,16,32", "--policy", "vllm",
                         "--policy", "continuous", "--jsonl", str(tmp_path / "rows.jsonl"),
                         "--report", str(page_path), "--metric", "ttft_p99")
    assert code == 0, err
    page = page_path.read_text()
    names, titles = _svg_points(page)
    assert names == ["vllm", "continuous"]
    rows = rows_of(tmp_path / "rows.jsonl")
    expected = [f"{r['policy']}: num_blocks={r['num_blocks']}, ttft_p99={r['ttft_p99']:g}"
                for policy in ("vllm", "continuous") for r in rows if r["policy"] == policy]
    assert titles == expected
    assert "ttft_p99 (ticks) against num_blocks, one line per policy." in page
    # The same bytes again.
    run("sweep", trace, "--grid", "num_blocks=8,16,32", "--policy", "vllm", "--policy",
        "continuous", "--report", str(tmp_path / "again.html"), "--metric", "ttft_p99")
    assert (tmp_path / "again.html").read_text() == page


def test_a_categorical_axis_and_the_other_swept_values_make_the_lines(trace, tmp_path):
    page_path = tmp_path / "sweep.html"
    code, out, err = run("sweep", trace, "--grid", "order=fcfs,sjf", "--grid",
                         "num_blocks=8,16", "--policy", "vllm", "--report", str(page_path),
                         "--x", "order", "--metric", "e2el_p99")
    assert code == 0, err
    page = page_path.read_text()
    names, titles = _svg_points(page)
    assert names == []  # an order is categorical: bars, no line joining fcfs and sjf
    assert [t.split(":")[0] for t in titles] == ["num_blocks=8, vllm"] * 2 + [
        "num_blocks=16, vllm"] * 2
    assert [t.split(":")[1].split(",")[0].strip() for t in titles] == [
        "order=fcfs", "order=sjf", "order=fcfs", "order=sjf"]
    assert ">fcfs</text>" in page and ">sjf</text>" in page


@pytest.mark.parametrize("argv, message", [
    (["--metric", "nope"], "--metric must be a field of the run summary"),
    (["--x", "watermark"], "--x must be one of the swept options (num_blocks, policy), "
                           "got 'watermark'"),
])
def test_a_bad_report_request_exits_2(trace, tmp_path, argv, message):
    code, out, err = run("sweep", trace, "--grid", "num_blocks=8,16", "--report",
                         str(tmp_path / "r.html"), *argv)
    assert code == 2 and message in err
    assert not (tmp_path / "r.html").exists()


def test_an_output_that_cannot_be_written_stops_the_sweep_before_it_runs(trace, tmp_path,
                                                                         monkeypatch):
    import scheduler_sim.cli.sweep as sweep_command
    ran = []
    monkeypatch.setattr(sweep_command, "run_grid", lambda *a, **k: ran.append(1) or [])
    code, out, err = run("sweep", trace, "--grid", "num_blocks=8,16", "--report",
                         str(tmp_path / "missing" / "r.html"))
    assert code == 2 and "cannot write the report" in err and not ran
    code, out, err = run("sweep", trace, "--grid", "num_blocks=8,16", "--report", "-",
                         "--csv", "-")
    assert code == 2 and "--csv - and --report - cannot both write" in err
