"""The clock: trace times to clock steps, dispatch ends, and what outputs report."""
from __future__ import annotations

import io
import random
import json

import pytest

from conftest import req, simulate
from scheduler_sim.cli.main import main
from scheduler_sim.records.clock import Clock
from scheduler_sim.records.options import Options
from scheduler_sim.records.workload import Action, RequestSpec, Workload

COST = "llama-3-8b/h100-sxm"


def clock(**options) -> Clock:
    return Clock.of(Options.resolve(options))


def test_the_four_clocks():
    """tick trace, no cost model: steps are the trace's ticks, results in ticks; s trace, no
    cost model: 1 step = tick_seconds (1 ms) of trace time, results in ticks; tick trace
    with a cost model: steps of 1 us, a trace tick is 1 ms, results in seconds; s trace
    with a cost model: steps of 1 us, results in seconds."""
    assert clock() == Clock("tick", None, None, False)
    assert clock(time_unit="s") == Clock("s", 1.0, 0.001, False)
    assert clock(time_unit="ms", tick_seconds=0.01) == Clock("ms", 0.001, 0.01, False)
    assert clock(cost_model=COST) == Clock("tick", 0.001, 1e-6, True)
    assert clock(cost_model=COST, tick_seconds=0.002, clock_resolution=1e-4) == \
        Clock("tick", 0.002, 1e-4, True)
    assert clock(cost_model=COST, time_unit="s") == Clock("s", 1.0, 1e-6, True)
    assert (clock().label, clock(cost_model=COST).label) == ("ticks", "s")


def test_arrivals_round_up_and_limits_round_down():
    """On a 1-ms clock over a trace in seconds: 0.003 s is step 3 both ways (not 2 or 4
    from 0.003 / 0.001 = 2.9999999999999996); 0.0031 s is step 4 for an arrival (the first
    step at or after it) and step 3 for a deadline (the last step at or before it); a
    trace in ms at 1 us: 1.5 ms is step 1500; a tick trace needs no conversion."""
    c = clock(time_unit="s")
    assert (c.after(0.003), c.before(0.003)) == (3, 3)
    assert (c.after(0.0031), c.before(0.0031)) == (4, 3)
    assert (c.after(0), c.after(3504.123)) == (0, 3504123)
    ms = clock(time_unit="ms", cost_model=COST)
    assert (ms.after(1.5), ms.before(1.5), ms.after(0.0004)) == (1500, 1500, 1)
    ticks = clock()
    assert ticks.identity and (ticks.after(7), ticks.before(7)) == (7, 7)


def test_end_step_is_the_first_step_at_or_after_the_exact_end():
    """A dispatch started at step 0 that ends at exact step 85.17 completes at 86; one
    ending at 3.0000000000000004 (float noise) at 3; a dispatch started at 10 whose exact
    end 9.83 lies before its start lasts one step: 11."""
    c = clock(cost_model=COST)
    assert c.end_step(85.17, 0) == 86
    assert c.end_step(3.0000000000000004, 0) == 3
    assert c.end_step(9.83, 10) == 11
    assert c.steps(0.0065) == pytest.approx(6500)


def test_report_in_ticks_and_in_seconds():
    """In ticks, steps are reported as they are, fractions to 4 decimals. On a 1-us clock,
    step 12345 is 0.012345 s; a fraction of a step (a mean) keeps 4 more decimals: 6.5
    steps is 6.5e-06 s; None stays None."""
    assert clock().report(7) == 7 and clock().report(1.33333) == 1.3333
    c = clock(cost_model=COST)
    assert (c.report(12345), c.report(6.5), c.report(None), c.report(2_000_000)) == (
        0.012345, 6.5e-06, None, 2)
    assert c.text(12345) == "0.012345" and clock().text(12) == "12"
    assert c.rate(3, 1_500_000) == 2.0 and clock().rate(3, 4) == 0.75
    assert clock().rate(3, 0) is None


def test_a_workload_on_a_clock():
    """Converting a workload in seconds onto a 1-ms clock: arrivals and actions round up,
    deadlines round down, order is kept; a tick workload on the tick clock is itself."""
    w = Workload.build([RequestSpec("a", 1, 0.0004, 4, 1, 1, deadline=0.0109),
                        RequestSpec("b", 2, 0.002, 4, 1, 1)],
                       [Action("cancel", "a", 0.0051, 3)], [Action("preempt", "b", 0.004, 4)])
    on = w.on_clock(clock(time_unit="s"))
    assert [(s.id, s.arrival, s.deadline) for s in on.requests] == [("a", 1, 10), ("b", 2, None)]
    assert (on.cancels[0].at, on.preempts[0].at) == (6, 4)
    assert w.on_clock(clock()) is w


def test_arrival_steps_of_a_column_are_arrival_step_of_each():
    """`arrival_steps` converts a column: on a 1-ms clock over seconds 0, 0.003, 0.0031
    and 3504.123 s are steps 0, 3, 4 and 3504123 (0.003 / 0.001 = 2.9999999999999996 is
    step 3, as `after` takes it); a trace in ms at 1 us: 1.5 and 0.0004 ms are steps
    1500 and 1; ticks stay; at twice the rate, 0.003 and 0.0031 s arrive at 1.5 and
    1.55 ms, both step 2."""
    assert clock(time_unit="s").arrival_steps([0, 0.003, 0.0031, 3504.123]) == [0, 3, 4, 3504123]
    assert clock(time_unit="ms", cost_model=COST).arrival_steps([1.5, 0.0004]) == [1500, 1]
    assert clock().arrival_steps([7, 0]) == [7, 0]
    assert clock(time_unit="s", rate_scale=2).arrival_steps([0.003, 0.0031]) == [2, 2]
    assert clock(rate_scale=2).arrival_steps([3, 4]) == [2, 2]
    assert [type(s) for s in clock(time_unit="s").arrival_steps([0, 0.5])] == [int, int]


def test_a_plain_workload_makes_each_spec_on_the_clock():
    """`Workload.plain`: columns in replay order; its requests, largest (the first of
    the most prompt + max_tokens: b, 10 + 6) and span in trace units, and on a 1-ms
    clock arrivals 0.0004 -> 1, 0.002 -> 2, 0.0031 -> 4 and the rest of each spec as
    it was; the same workload as the specs `build` would sort."""
    specs = [RequestSpec("a", 3, 0.0004, 4, 1, 1), RequestSpec("b", 1, 0.002, 10, 6, 6),
             RequestSpec("c", 2, 0.0031, 12, 4, 4)]
    w = Workload.plain(["a", "b", "c"], [3, 1, 2], [0.0004, 0.002, 0.0031], [4, 10, 12],
                       [1, 6, 4], [Action("cancel", "c", 0.0051, 4)])
    assert w.requests == tuple(specs) and w == Workload.build(specs[::-1], [
        Action("cancel", "c", 0.0051, 4)])
    assert (len(w), w.largest, w.first_arrival, w.last_arrival) == (3, specs[1], 0.0004, 0.0031)
    on = w.on_clock(clock(time_unit="s"))
    assert on.requests == (RequestSpec("a", 3, 1, 4, 1, 1), RequestSpec("b", 1, 2, 10, 6, 6),
                           RequestSpec("c", 2, 4, 12, 4, 4))
    assert (on.first_arrival, on.last_arrival, on.largest, on.cancels[0].at) == (1, 4, specs[1], 6)
    empty = Workload.plain([], [], [], [], [])
    assert (len(empty), empty.largest, empty.first_arrival, empty.requests) == (0, None, None, ())


def test_changing_the_resolution_never_moves_an_arrival_by_a_step():
    """A trace in seconds, a at 0 and b at 0.0104 s (P=16, N=2, Llama-3-8B on an H100,
    the uncalibrated physics `Coefficients()`, which refits do not move). a's prefill of
    16 tokens: linear sqrt(5.34200^2 + 0.301096^2) = 5.35048 ms (13,958,643,712 weight
    bytes at 3.35e12 x 0.78 B/s; 2 x 6,979,321,856 x 16 FLOPs at 989e12 x 0.75 FLOP/s),
    LM head 1,050,673,152 B / 2.613e12 = 0.402097 ms, attention 136 pairs x 524,288 /
    494.5e12 = 0.000144 ms, KV write 16 x 131,072 / 2.68e12 = 0.000783 ms, elementwise 16
    x 5,505,024 / 1.675e12 = 0.052585 ms, step 0.5 ms: 6.30609 ms. Its decode (context
    16): linear sqrt(5.34200^2 + 0.018819^2) = 5.34203 ms, LM head 0.402097, KV 18 x
    131,072 / 2.68e12 = 0.000880, elementwise 0.003287, step 0.5: 6.24830 ms, so it ends
    at 12.55438 ms. On a 1-ms clock b arrives at step 11 (0.011 s), on a 1-us clock at
    10400 (0.0104 s): never more than one step later than the trace says. a's prefill
    and decode end at steps 7 and 13 on the coarse clock (the decode starts from the
    exact 6.306 ms), ceil(6306.09) = 6307 and ceil(12554.38) = 12555 on the fine one;
    every reported time differs by less than one coarse step (1 ms)."""
    records = [{"type": "config", "time_unit": "s", "calibration": "none"}, req("a", 0, 16, 2),
               req("b", 0.0104, 16, 2)]
    coarse = simulate(records, cost_model=COST, block_size=4, num_blocks=64,
                      clock_resolution=0.001)
    fine = simulate(records, cost_model=COST, block_size=4, num_blocks=64)
    assert coarse.req["b"].arrival == 11 and fine.req["b"].arrival == 10400
    assert (coarse.req["a"].first_token_at, coarse.req["a"].finished_at) == (7, 13)
    assert (fine.req["a"].first_token_at, fine.req["a"].finished_at) == (6307, 12555)
    from scheduler_sim.engine.summary import request_record
    for rid in "ab":
        a = request_record(coarse.req[rid], coarse.result.clock)
        b = request_record(fine.req[rid], fine.result.clock)
        for field in ("arrival", "sent", "admitted", "first_token", "finished", "ttft", "e2el"):
            assert abs(a[field] - b[field]) < 0.001, (rid, field, a[field], b[field])


def test_tick_seconds_does_not_move_the_arrivals_of_a_trace_in_seconds(tmp_path):
    """`--tick-seconds 0.0001` on a trace in seconds under a cost model changes nothing
    (the clock steps by clock_resolution) and the header says so."""
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"type": "config", "time_unit": "s", "block_size": 4, "num_blocks": 64},
        req("a", 0, 16, 2), req("b", 0.0104, 16, 2)]))
    outs = []
    for extra in ([], ["--tick-seconds", "0.0001"]):
        out = io.StringIO()
        assert main(["replay", str(path), "--cost-model", COST, "--json", *extra], out=out,
                    err=io.StringIO()) == 0
        outs.append(json.loads(out.getvalue())["runs"][0])
    assert outs[0] == outs[1]
    out = io.StringIO()
    main(["replay", str(path), "--cost-model", COST, "--tick-seconds", "0.0001"], out=out,
         err=io.StringIO())
    assert ("note: tick_seconds has no effect: the trace's times are in s, and with a cost "
            "model the clock steps by clock_resolution") in out.getvalue()


def test_overriding_a_tick_traces_tick_length_warns(tmp_path):
    """A tick trace whose config says 1-ms ticks, replayed under a cost model with
    `--tick-seconds 0.0001`: every arrival moves, so stderr warns."""
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"type": "config", "tick_seconds": 0.001}, req("a", 0, 4, 2), req("b", 5, 4, 2)]))
    err = io.StringIO()
    assert main(["replay", str(path), "--cost-model", COST, "--tick-seconds", "0.0001"],
                out=io.StringIO(), err=err) == 0
    assert err.getvalue() == (
        "scheduler-sim: warning: --tick-seconds 0.0001 overrides the trace's tick of 0.001 "
        "s: every arrival and wait in the trace moves with it\n")


def test_without_a_cost_model_nothing_is_in_seconds(tmp_path):
    """A trace in seconds replayed without a cost model: the header says results are in
    ticks with 1 tick = 1 ms of trace time, the table's times are ticks, and the JSON says
    time_unit ticks: b at 0.0104 s arrives at tick 11 and finishes 2 ticks later."""
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"type": "config", "time_unit": "s"}, req("a", 0, 16, 2), req("b", 0.0104, 16, 2)]))
    out = io.StringIO()
    assert main(["replay", str(path)], out=out, err=io.StringIO()) == 0
    text = out.getvalue()
    assert ("time in ticks: no cost model, every dispatch lasts one tick; trace times in s "
            "mapped at 1 tick = 1 ms") in text
    table = text[text.index("\n\n"):]
    assert " s " not in table and "ticks" in table
    out = io.StringIO()
    assert main(["replay", str(path), "--json", "--requests"], out=out,
                err=io.StringIO()) == 0
    doc = json.loads(out.getvalue())
    assert doc["results_time_unit"] == "ticks"
    b = doc["runs"][0]["per_request"][1]
    assert (b["arrival"], b["finished"]) == (11, 13)


def test_durations_in_a_tick_trace_must_be_whole(tmp_path):
    """`--release-delay 0.5` on a tick trace exits 2: a tick trace counts whole ticks."""
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(req("a", 0, 4, 2)) + "\n")
    err = io.StringIO()
    assert main(["replay", str(path), "--release-delay", "0.5"], out=io.StringIO(),
                err=err) == 2
    assert err.getvalue() == ("scheduler-sim: error: release_delay must be a whole number "
                              "of ticks (the trace's time_unit is tick), got 0.5\n")


def test_durations_in_a_trace_in_ms_are_converted():
    """A trace in ms on a 1-ms clock (no cost model): waiting_timeout 2.5 ms means a request
    that has waited longer than 2.5 ms is aborted: limits round down to step 2, so b
    (arrived at 0, blocked behind a on a 1-block pool) times out at step 3."""
    s = simulate([{"type": "config", "time_unit": "ms"}, req("a", 0, 4, 4), req("b", 0, 4, 1)],
                 tick_seconds=0.001, block_size=4, num_blocks=2, waiting_timeout=2.5)
    assert [(e["tick"], e["id"], e["waited"]) for e in s.of("timeout")] == [(3, "b", 3)]


def test_a_fraction_in_a_tick_trace_says_how_to_declare_seconds(tmp_path):
    """An arrival of 1.5 in a trace without a time_unit: exit 2, and the message says the
    trace counts whole ticks and how a trace in seconds declares itself."""
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(req("a", 1.5, 4, 2)) + "\n")
    err = io.StringIO()
    assert main(["validate", str(path)], out=io.StringIO(), err=err) == 2
    assert err.getvalue() == (
        f"{path}:1: request 'a': arrival must be a whole number of ticks (the trace's "
        'time_unit is tick; a trace in seconds starts with {"type":"config",'
        '"time_unit":"s"}), got 1.5\n')


def test_times_beyond_1e15_are_refused(tmp_path):
    """An arrival of 1e305 s would overflow the microsecond clock: the trace is refused
    (exit 2) naming the bound; so is a tick arrival of 10**20, and a release_delay of 1e16."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"type":"config","time_unit":"s"}\n'
                    '{"type":"request","id":"a","arrival":1e305,"prompt_tokens":4,'
                    '"output_tokens":2}\n')
    err = io.StringIO()
    assert main(["replay", str(path), "--cost-model", COST], out=io.StringIO(), err=err) == 2
    assert err.getvalue() == (f"{path}:2: request 'a': arrival must be at most 1e15 (in the "
                              "trace's time unit), got 1e+305\n")
    path.write_text(json.dumps(req("a", 10**20, 4, 2)) + "\n")
    err = io.StringIO()
    assert main(["validate", str(path)], out=io.StringIO(), err=err) == 2
    assert "arrival must be at most 1e15" in err.getvalue()
    err = io.StringIO()
    path.write_text(json.dumps(req("a", 0, 4, 2)) + "\n")
    assert main(["replay", str(path), "--release-delay", "1e16"], out=io.StringIO(),
                err=err) == 2
    assert err.getvalue() == ("scheduler-sim: error: release_delay must be a number >= 0 and "
                              "<= 1e15, got 1e+16\n")


def test_texts_of_many_times_are_text_of_each():
    """A 1 us clock in seconds: 12,345 steps read 0.012345, 1,000,000 read 1 and
    1,500,000 read 1.5 (formatted all at once); 50 steps (5e-05 s) is below the
    plain digits' range, so that list is written one `text` at a time, and reads as
    repr does. A tick clock writes the integers."""
    us = Clock("s", 1.0, 1e-6, True)
    assert us.texts([12_345, 1_000_000, 1_500_000]) == ["0.012345", "1", "1.5"]
    assert us.texts([12_345, 1_000_000, 50, 0]) == ["0.012345", "1", "5e-05", "0"]
    assert [us.text(t) for t in (12_345, 1_000_000, 50, 0)] == ["0.012345", "1", "5e-05", "0"]
    assert Clock("tick", None, None, False).texts([3, 10]) == ["3", "10"]
    assert us.texts([]) == []


def test_texts_drop_trailing_zeros_and_point_of_each_time():
    """`texts` drops each time's own trailing zeros (one of 6, one of none, a whole
    second, a whole 10 s whose integer zeros stay) and agrees with `text`, whose
    digits are made another way, on edge values of several steps; both agree with
    repr of the time rounded to the step's digits."""
    us = Clock("s", 1.0, 1e-6, True)
    assert us.texts([10_000_000, 1_234_500, 1_234_567, 20_000_010]) == [
        "10", "1.2345", "1.234567", "20.00001"]
    assert Clock("s", 1.0, 1e-3, True).texts([100, 1_000, 1_230, 7]) == [
        "0.1", "1", "1.23", "0.007"]
    assert Clock("s", 1.0, 1.0, True).texts([1, 10, 300]) == ["1", "10", "300"]
    values = [100, 999, 1_000, 1_001, 10 ** 6, 10 ** 6 + 1, 999_999_999, 2 ** 30, 2 ** 31 + 10,
              3_600_000_000, 10 ** 12, 10 ** 15 - 1, 123_456_789_012_340]
    rng = random.Random(7)
    values += [rng.randrange(100, 10 ** 15) for _ in range(2_000)]
    values += [rng.randrange(100, 10 ** 7) * 10 ** rng.randrange(0, 7) for _ in range(500)]
    for step in (1e-6, 1e-3, 1e-9, 1e-4, 1.0):
        clock = Clock("s", 1.0, step, True)
        fresh = Clock("s", 1.0, step, True)  # (its `text` memo empty)
        within = [v for v in values if clock._scale // 10_000 <= v < 10 ** 15]
        assert clock.texts(within) == [fresh.text(v) for v in within], step
        # ...and both are the slow rule's: repr of the time rounded to the step's
        # digits, an integer when whole (the path `text` takes outside the range).
        slow = [round(v * step, fresh.digits) for v in within]
        assert [fresh.text(v) for v in within] == [
            repr(int(x) if x.is_integer() else x) for x in slow], step


def test_texts_remember_the_last_time_for_text():
    """The last of a stretch's times is asked again by the records at its end: `texts`
    leaves its text in `text`'s memo (the others are not kept)."""
    us = Clock("s", 1.0, 1e-6, True)
    assert us.texts([12_345, 20_000, 31_000]) == ["0.012345", "0.02", "0.031"]
    assert us._texts == {31_000: "0.031"}
    assert us.text(31_000) == "0.031"


def test_texts_of_a_rising_stretch_by_its_whole_seconds():
    """Times the caller knows in rising order (`rising=True`, a folded stretch's):
    within one whole second they share one format (3.0001, 3.0002); across whole
    seconds each takes its second's (0.999998, then 1 and 1.00025, then 2.000001);
    a first time under 100 steps (5e-05 s) sends them all to `text`. Unsorted
    times read the same without the flag."""
    us = Clock("s", 1.0, 1e-6, True)
    assert us.texts([3_000_100, 3_000_200], True) == ["3.0001", "3.0002"]
    assert us.texts([999_998, 1_000_000, 1_000_250, 2_000_001], True) == [
        "0.999998", "1", "1.00025", "2.000001"]
    assert us.texts([2_000_001, 999_998, 1_000_250]) == ["2.000001", "0.999998", "1.00025"]
    assert us.texts([50, 1_000], True) == ["5e-05", "0.001"]
    ms = Clock("s", 1.0, 1e-3, True)
    assert ms.texts([1_999, 2_000, 2_010], True) == ["1.999", "2", "2.01"]


def test_texts_of_a_rising_stretch_over_whole_seconds_run_by_run():
    """A rising stretch from a whole second S > 0 over several is written run by run,
    each second's times as a stretch within it is (the point after S's digits, the
    trailing zeros dropped): 1.99999, then 2 (a whole second, no point) and 2.0005,
    no time in second 3, 4.000001 and 4.999999, 5.1; a 1 ms clock. No second's own
    format is made (the unsorted path's), only the heads of the seconds that have
    times. Random rising stretches over several seconds read as `text` does."""
    us = Clock("s", 1.0, 1e-6, True)
    times = [1_999_990, 2_000_000, 2_000_500, 4_000_001, 4_999_999, 5_100_000]
    assert us.texts(times, True) == [
        "1.99999", "2", "2.0005", "4.000001", "4.999999", "5.1"]
    assert len(us._fast[2]) == 0
    assert sorted(us._fast[3]) == [1, 2, 4, 5]
    assert us.texts(times) == us.texts(times, True)  # (unsorted: each its own format)
    assert sorted(us._fast[2]) == [1, 2, 4, 5]
    ms = Clock("s", 1.0, 1e-3, True)
    assert ms.texts([1_990, 2_000, 2_010, 12_345], True) == ["1.99", "2", "2.01", "12.345"]
    rng = random.Random(12)
    for step in (1e-6, 1e-3):
        clock = Clock("s", 1.0, step, True)
        fresh = Clock("s", 1.0, step, True)
        scale = clock._scale
        for _ in range(300):
            start = rng.choice([1, 9, 99, 3_600]) * scale + rng.randrange(scale)
            times = sorted(start + rng.randrange(3 * scale) // 10 ** rng.randrange(4)
                           * 10 ** rng.randrange(4) for _ in range(rng.randint(2, 12)))
            assert clock.texts(times, True) == [fresh.text(t) for t in times], times


def test_texts_keep_at_most_4096_formats_by_second():
    """The formats by whole second (unsorted times over several seconds) are made when
    first asked and cleared past 4,096: 5,000 seconds of one time each (5,000 down to
    1) leave 5,000 - 4,096 of them, and still read right."""
    us = Clock("s", 1.0, 1e-6, True)
    times = [s * 1_000_000 + 7 for s in range(5_000, 0, -1)]
    assert us.texts(times)[:2] == ["5000.000007", "4999.000007"]
    assert len(us._fast[2]) == 5_000 - 4_096
    assert us._fast[2][5_000] == "5000.%06d\n"


def test_texts_within_one_whole_second_from_the_times_digits():
    """A rising stretch within one whole second S > 0 is written from the times'
    own digits, the point put in after S's: a whole second (7, and 10, whose own
    zeros stay), trailing zeros dropped (7.00001, 7.12), a second of three digits,
    a 1 ms clock; the first whole second (S = 0) keeps its format. Random
    stretches within one second read as `text` does, on three clocks."""
    us = Clock("s", 1.0, 1e-6, True)
    assert us.texts([7_000_000, 7_000_010, 7_120_000, 7_999_999], True) == [
        "7", "7.00001", "7.12", "7.999999"]
    assert us.texts([10_000_000, 10_500_000], True) == ["10", "10.5"]
    assert us.texts([123_000_500, 123_000_501], True) == ["123.0005", "123.000501"]
    assert us.texts([999_000, 999_999], True) == ["0.999", "0.999999"]
    assert Clock("s", 1.0, 1e-3, True).texts([5_000, 5_100, 5_123], True) == [
        "5", "5.1", "5.123"]
    rng = random.Random(11)
    for step in (1e-6, 1e-3, 1e-9):
        clock = Clock("s", 1.0, step, True)
        fresh = Clock("s", 1.0, step, True)
        scale = clock._scale
        for _ in range(300):
            second = rng.choice([1, 9, 10, 99, 100, 3_600, 10 ** 5])
            times = sorted(second * scale + rng.randrange(scale) // 10 ** rng.randrange(4)
                           * 10 ** rng.randrange(4) % scale for _ in range(rng.randint(1, 9)))
            assert clock.texts(times, True) == [fresh.text(t) for t in times], times


def test_texts_keep_at_most_4096_heads_and_256_formats(monkeypatch):
    """The pieces of the one-second path are made when first asked and cleared past
    their bounds: 5,000 one-time stretches, one a second, leave 5,000 - 4,096 heads
    (a newline and the second's digits, without and with the point); stretches of
    1 to 300 times leave 300 - 256 formats (`\\n%d` n times and a newline)."""
    from scheduler_sim.records import clock as clock_module
    assert clock_module._IN_ONE_SECOND.bound == 256
    monkeypatch.setattr(clock_module, "_IN_ONE_SECOND",
                        clock_module._Made(clock_module._IN_ONE_SECOND.make,
                                           clock_module._IN_ONE_SECOND.bound))
    us = Clock("s", 1.0, 1e-6, True)
    for s in range(1, 5_001):
        assert us.texts([s * 1_000_000 + 70], True) == [f"{s}.00007"]
    heads = us._fast[3]
    assert len(heads) == 5_000 - 4_096
    assert heads[5_000] == ("\n5000", "\n5000.")
    for n in range(1, 301):
        last = f"2.{n - 1:06d}".rstrip("0").rstrip(".")
        assert us.texts(list(range(2_000_000, 2_000_000 + n)), True)[-1] == last
    formats = clock_module._IN_ONE_SECOND
    assert len(formats) == 300 - 256
    assert formats[2] == "\n%d\n%d\n"
