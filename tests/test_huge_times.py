"""Every output of `replay` at the largest times a trace may give (1e15 in its unit).

A trace's times go up to 1e15 ticks, seconds or milliseconds (MAX_TIME). Under a cost
model the clock counts microseconds, so a trace in seconds reaches 1e21 clock steps,
past a signed 64-bit integer: `--report` kept such steps in 64-bit arrays and failed
with an OverflowError. Each unit, with and without a cost model, through every output
at once: exit 0, no traceback, every file whole.
"""
from __future__ import annotations

import csv
import json

import pytest

from conftest import req, run_cli, write_trace

BIG = 10 ** 15


@pytest.mark.parametrize("unit", ["s", "ms", "tick"])
@pytest.mark.parametrize("cost_model", [None, "llama-3-8b/h100-sxm"])
def test_every_output_at_1e15(tmp_path, unit, cost_model):
    """A request at 0 and one at 1e15 (with a deadline there), under three policies: the
    table with --requests, --json --requests, --report, --perfetto, --events and
    --requests-csv all come out, and the files parse."""
    trace = write_trace(tmp_path, [{"type": "config", "time_unit": unit},
                                   req("a", 0, 8, 4), req("b", BIG, 8, 4, deadline=BIG)])
    flags = ["--policy", "vllm", "--policy", "sglang", "--policy", "static"]
    flags += ["--cost-model", cost_model] if cost_model else []
    status, out, err = run_cli(["replay", trace, *flags, "--requests"])
    assert (status, err) == (0, "")
    assert "Traceback" not in out and len(out.splitlines()) > 10
    files = {name: str(tmp_path / name) for name in ("r.html", "p.json", "e.jsonl", "r.csv")}
    status, out, err = run_cli(["replay", trace, *flags, "--json", "--requests",
                                "--report", files["r.html"], "--perfetto", files["p.json"],
                                "--events", files["e.jsonl"], "--requests-csv", files["r.csv"]])
    assert (status, err) == (0, "")
    runs = json.loads(out)["runs"]
    assert [[r["id"] for r in run["per_request"]] for run in runs] == [["a", "b"]] * 3
    page = (tmp_path / "r.html").read_text()
    assert page.rstrip().endswith("</html>")
    assert not any(word in page for word in ("NaN", "Infinity", ">nan<", ">inf<"))
    assert len(json.loads((tmp_path / "p.json").read_text())["traceEvents"]) > 10
    events = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert {e["event"] for e in events} >= {"arrival", "dispatch", "finished"}
    with open(files["r.csv"], newline="") as handle:
        rows = list(csv.reader(handle))
    assert [(row[0], row[1]) for row in rows[1:]] == [
        (policy, rid) for policy in ("vllm", "sglang", "static") for rid in ("a", "b")]


def test_a_tick_trace_at_1e15_keeps_its_ticks_exactly(tmp_path):
    """Without a cost model a tick is a clock step: the request arriving at tick 1e15
    gets its first token one tick later (an 8-token prefill) and its fourth and last
    output at 1e15 + 4, exactly, in --json and in the CSV."""
    trace = write_trace(tmp_path, [req("a", 0, 8, 4), req("b", BIG, 8, 4)])
    status, out, err = run_cli(["replay", trace, "--policy", "vllm", "--json", "--requests",
                                "--requests-csv", str(tmp_path / "r.csv"),
                                "--report", str(tmp_path / "r.html")])
    assert (status, err) == (0, "")
    b = json.loads(out)["runs"][0]["per_request"][1]
    assert (b["arrival"], b["first_token"], b["finished"]) == (BIG, BIG + 1, BIG + 4)
    line = (tmp_path / "r.csv").read_text().splitlines()[2]
    assert line.startswith(f"vllm,b,{BIG},{BIG},{BIG},{BIG + 1},{BIG + 4},")
