"""`rate_scale` (issue 27): a trace replayed at X times its request rate. Arrivals at
their time / X (the first step at or after it), order kept; a deadline, cancellation
or forced preemption keeps its distance from its request's arrival; the options'
own durations are unchanged; X = 1 changes nothing."""
from __future__ import annotations

import io
import json

import pytest

from scheduler_sim.cli.main import main
from scheduler_sim.records.clock import Clock
from test_cli import write

TRACE = [{"type": "config", "block_size": 4, "num_blocks": 40},
         {"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4, "output_tokens": 2},
         {"type": "request", "id": "b", "arrival": 3, "prompt_tokens": 4, "output_tokens": 2,
          "deadline": 9},
         {"type": "request", "id": "c", "arrival": 5, "prompt_tokens": 4, "output_tokens": 6},
         {"type": "cancel", "id": "c", "at": 7}]


def per_request(path, *flags) -> dict[str, dict]:
    out = io.StringIO()
    assert main(["replay", path, "--json", "--requests", "--quiet", *flags], out=out,
                err=io.StringIO()) == 0
    run = json.loads(out.getvalue())["runs"][0]
    return {r["id"]: r for r in run["per_request"]}


def test_twice_the_rate_by_hand(tmp_path):
    """X = 2: a at 0, b at ceil(1.5) = 2, c at ceil(2.5) = 3. b's deadline keeps its 6
    ticks: 1.5 + 6 = 7.5, the last step at or before it 7. c's cancellation keeps its
    2 ticks: 2.5 + 2 = 4.5, the first step at or after it 5; c, admitted at 3 with 6
    outputs to go, is still running then."""
    rows = per_request(write(tmp_path, TRACE), "--rate-scale", "2")
    assert [(r["arrival"], r["deadline"], r["finished"], r["status"]) for r in rows.values()] \
        == [(0, None, 2, "finished_length_capped"), (2, 7, 4, "finished_length_capped"),
            (3, None, 5, "finished_aborted")]


def test_one_changes_nothing(tmp_path):
    path = write(tmp_path, TRACE)
    assert per_request(path, "--rate-scale", "1") == per_request(path)
    assert [(r["arrival"], r["deadline"], r["finished"]) for r in per_request(path).values()] \
        == [(0, None, 2), (3, 9, 5), (5, None, 7)]


def test_half_the_rate_spreads_the_arrivals(tmp_path):
    """X = 0.5: a at 0, b at 6 (deadline 6 + 6 = 12), c at 10 (cancelled at 12)."""
    rows = per_request(write(tmp_path, TRACE), "--rate-scale", "0.5")
    assert [(r["arrival"], r["deadline"], r["finished"]) for r in rows.values()] \
        == [(0, None, 2), (6, 12, 8), (10, None, 12)]


@pytest.mark.parametrize("scale, steps", [(1, [0, 3, 5]), (2, [0, 2, 3]), (3, [0, 1, 2]),
                                          (0.5, [0, 6, 10])])
def test_arrival_steps_on_a_tick_clock(scale, steps):
    clock = Clock(rate_scale=scale)
    assert [clock.arrival_step(t) for t in (0, 3, 5)] == steps


def test_arrival_steps_on_a_seconds_clock():
    """A trace in s on 1 ms steps: 0.003 s at X = 2 is 0.0015 s, the first step at or
    after it 2; 0.004 s is exactly step 2."""
    clock = Clock("s", 1.0, 0.001, False, rate_scale=2)
    assert [clock.arrival_step(t) for t in (0.003, 0.004, 1.0)] == [2, 2, 500]


def test_a_sweep_over_the_rate(tmp_path):
    """rate_scale is an option like any: swept, its rows differ by their arrivals."""
    out = io.StringIO()
    assert main(["sweep", write(tmp_path, TRACE), "--grid", "rate_scale=1,2",
                 "--jsonl", "-", "--quiet"], out=out, err=io.StringIO()) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()][1:]  # (a header)
    assert [(r["rate_scale"], r["makespan"]) for r in rows] == [(1.0, 7), (2.0, 5)]
