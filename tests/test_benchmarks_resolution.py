"""benchmarks/resolution.py's logic on a shipped trace: a replay at a clock resolution
through the engine as it runs (no patch), and the statistic furthest from the
reference's."""
from __future__ import annotations

import pytest
from conftest import ROOT, load_script

from scheduler_sim.io.trace import read_trace

bench = load_script(ROOT / "benchmarks" / "resolution.py", "bench_resolution")


def test_worst_is_the_statistic_furthest_from_the_reference():
    """ttft_p50 4 against 5 (0.2), queue_delay_max 3 against 2 (0.5): the queue delay's;
    a statistic the reference has as 0 counts 0 when equal, infinity when not."""
    reference = {key: 1.0 for key in bench.LATENCIES}
    run = dict(reference)
    reference.update(ttft_p50=5.0, queue_delay_max=2.0)
    run.update(ttft_p50=4.0, queue_delay_max=3.0)
    assert bench.worst(run, reference) == ("queue_delay_max", 0.5)
    reference["itl_p90"], run["itl_p90"] = 0, 0
    assert bench.worst(run, reference) == ("queue_delay_max", 0.5)
    run["itl_p90"] = 0.001
    assert bench.worst(run, reference) == ("itl_p90", float("inf"))


def test_a_replay_at_a_clock_and_at_the_reference():
    """The shipped Azure sample (200 requests) under continuous: on the 0.1 ns reference
    clock its median queue delay is 3.6784883 ms; on the 1 us clock 3.679 ms, the
    statistic furthest from the reference, 0.0005117 / 3.6784883 = 1.3911e-4 of it."""
    trace = read_trace(str(ROOT / "traces" / "azure_conv_sample.jsonl"))
    reference, _ = bench.replay(trace, "continuous", 1e-10)
    run, _ = bench.replay(trace, "continuous", 1e-6)
    assert (reference["queue_delay_p50"], run["queue_delay_p50"]) == (0.0036784883, 0.003679)
    assert (reference["iterations"], run["iterations"]) == (7781, 7781)
    key, rel = bench.worst(run, reference)
    assert key == "queue_delay_p50" and rel == pytest.approx(0.0005117 / 3.6784883, rel=1e-9)
