"""The Python API (docs/api.md): the documented example runs and prints what the page says;
each function agrees with the command line."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading

import pytest

import scheduler_sim as sim
from conftest import ROOT, req, run_cli, write_trace

PAGE = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
TINY = [{"type": "config", "block_size": 4, "num_blocks": 2},
        req("long", 0, 2, 6), req("short", 1, 3, 1)]


def test_the_documented_example_prints_what_the_page_says():
    """docs/api.md's Python block, run from the repository root, prints exactly the block
    that follows "It prints:"."""
    code = re.search(r"```python\n(.*?)```", PAGE, re.S).group(1)
    printed = re.search(r"It prints:\n\n```\n(.*?)```", PAGE, re.S).group(1)
    out = io.StringIO()
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/api.md", "exec"), {})
    finally:
        os.chdir(here)
    assert out.getvalue() == printed


def test_replay_gives_what_replay_json_prints(tmp_path):
    """The summaries and per-request records of `replay(...)` are those of
    `scheduler-sim replay --json --requests`."""
    path = write_trace(tmp_path, TINY)
    status, out, _ = run_cli(["replay", path, "--json", "--requests", "--policy", "serial",
                              "--policy", "continuous"])
    doc = json.loads(out)
    result = sim.replay(sim.load(path), policies=["serial", "continuous"])
    for run, printed in zip(result.runs, doc["runs"]):
        assert run.policy == printed["policy"]
        assert run.requests == printed.pop("per_request")
        assert {"policy": run.policy, **run.summary} == printed
    assert result.time_unit == doc["results_time_unit"] == "ticks"


def test_load_parse_and_build_make_the_same_trace(tmp_path):
    """A file, its text and its records give the same workload."""
    path = write_trace(tmp_path, TINY)
    text = open(path, encoding="utf-8").read()
    a, b, c = sim.load(path), sim.parse(text), sim.build(TINY)
    assert a.workload == b.workload == c.workload
    assert a.config == b.config == c.config


def test_events_stream_what_events_dash_writes(tmp_path):
    """`events(trace)` yields, as dicts, exactly the records `--events -` writes."""
    path = write_trace(tmp_path, TINY)
    status, out, _ = run_cli(["replay", path, "--events", "-"])
    assert [json.loads(line) for line in out.splitlines()] == list(sim.events(sim.load(path)))


def test_leaving_the_events_loop_stops_the_replay():
    """Stopping after the first record ends the replay thread: no thread named
    scheduler-sim-replay is left running."""
    trace = sim.load(str(ROOT / "labs" / "07-preemption-at-scale" / "chapter.jsonl"))
    stream = sim.events(trace, max_concurrency=4)
    first = next(stream)
    stream.close()
    assert first["event"] == "arrival"
    assert not [t for t in threading.enumerate() if t.name == "scheduler-sim-replay"]


def test_errors_carry_the_command_lines_messages(tmp_path):
    """A bad option is the UsageError the CLI prints after `error: `; a bad trace is the
    TraceError whose problems are the CLI's `file:line:` lines."""
    path = write_trace(tmp_path, TINY)
    _, _, err = run_cli(["replay", path, "--num-blocks", "0"])
    with pytest.raises(sim.UsageError) as usage:
        sim.replay(sim.load(path), num_blocks=0)
    assert err == f"scheduler-sim: error: {usage.value}\n"
    bad = write_trace(tmp_path, [req("x", -1, 4, 1)], "bad.jsonl")
    _, _, err = run_cli(["validate", bad])
    with pytest.raises(sim.TraceError) as trace_error:
        sim.load(bad)
    assert err == "".join(p + "\n" for p in trace_error.value.problems)


def test_check_returns_one_result_per_expectation_and_policy():
    """traces/four_8k_requests.jsonl holds 7 expectations over vllm and continuous: 7
    results, all ok, named as JUnit names them."""
    results = sim.check(sim.load(str(ROOT / "traces" / "four_8k_requests.jsonl")))
    assert len(results) == 7 and all(r.ok for r in results)
    assert results[0].name.startswith("line 6: ")
