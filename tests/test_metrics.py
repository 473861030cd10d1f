"""The metrics of a run summary, each defined on one small replay worked out by hand.

The replay (continuous, block size 4, 16 blocks, 8 tokens per dispatch; one
tick per dispatch):

    tick 0: a (P=4, N=4) and b (P=4, N=2) arrive and prefill together (8 tokens):
            both emit output 1 at tick 1
    tick 1: c (P=8, N=2) arrives; a and b decode, c prefills a 6-token chunk:
            a and b emit at 2, b is done (2 outputs)
    tick 2: a is preempted (trace record); it recomputes its 5 committed rows
            while c prefills its last 2 tokens: c emits output 1 at 3
    tick 3: c and a decode: c emits output 2 at 4 (done), a output 3 at 4
    tick 4: a decodes: output 4 at 5, done

So a's outputs come at 1, 2, 4, 5; b's at 1, 2; c's at 3, 4. Makespan 5.
"""
from __future__ import annotations

import io
import json

import pytest

from conftest import req, simulate
from scheduler_sim.cli.main import main
from scheduler_sim.engine.summary import request_record

OPTIONS = dict(block_size=4, num_blocks=16, token_budget=8)
RECORDS = [
    req("a", 0, 4, 4, deadline=6),
    req("b", 0, 4, 2, deadline=1),
    req("c", 1, 8, 2),
    {"type": "preempt", "id": "a", "at": 2},
]


@pytest.fixture(scope="module")
def run():
    """The replay of the module docstring, with a TTFT <= 1 and TPOT <= 1 tick SLO."""
    return simulate(RECORDS, slo="ttft=1,tpot=1", **OPTIONS)


def test_the_replay_is_the_one_described(run):
    """Outputs at the ticks the module docstring derives, and one preemption of a."""
    assert run.dispatches() == [
        (0, [("a", "prefill", 4, True), ("b", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True), ("b", "decode", 1, True), ("c", "prefill", 6, False)]),
        (2, [("a", "recompute", 5, False), ("c", "prefill", 2, True)]),
        (3, [("c", "decode", 1, True), ("a", "decode", 1, True)]),
        (4, [("a", "decode", 1, True)]),
    ]
    assert [(r, run.req[r].first_token_at, run.req[r].finished_at) for r in "abc"] == [
        ("a", 1, 5), ("b", 1, 2), ("c", 3, 4)]
    assert run.summary["preemptions"] == 1


def test_ttft(run):
    """TTFT = first_token - sent: a 1 - 0 = 1, b 1 - 0 = 1, c 3 - 1 = 2. Mean 4/3 = 1.3333;
    nearest rank of [1, 1, 2]: p50 rank 2 -> 1, p90 and p99 rank 3 -> 2; max 2."""
    s = run.summary
    assert [s[f"ttft_{k}"] for k in ("mean", "p50", "p90", "p99", "max")] == [
        1.3333, 1, 2, 2, 2]


def test_tpot(run):
    """TPOT = (finished - first_token) / (N - 1): a (5 - 1) / 3 = 1.3333 (the preemption
    slowed it), b (2 - 1) / 1 = 1, c (4 - 3) / 1 = 1. Mean (4/3 + 2) / 3 = 1.1111; sorted
    [1, 1, 1.3333]: p50 rank 2 -> 1, p90 rank 3 -> 1.3333."""
    s = run.summary
    assert [s[f"tpot_{k}"] for k in ("mean", "p50", "p90", "p99", "max")] == [
        1.1111, 1, 1.3333, 1.3333, 1.3333]


def test_itl_counts_every_gap_between_consecutive_outputs(run):
    """ITL: a's outputs at 1, 2, 4, 5 give gaps 1, 2, 1 (the 2 is the preemption); b's at
    1, 2 give 1; c's at 3, 4 give 1. Five gaps [1, 1, 1, 1, 2]: mean 6/5 = 1.2, p50 rank 3
    -> 1, p90 rank ceil(4.5) = 5 -> 2, max 2. (TPOT averages a's gaps into 1.3333; ITL keeps
    the 2 visible.)"""
    s = run.summary
    assert [s[f"itl_{k}"] for k in ("mean", "p50", "p90", "p99", "max")] == [1.2, 1, 2, 2, 2]


def test_e2el_and_queue_delay(run):
    """E2EL = finished - sent: a 5, b 2, c 4 - 1 = 3: mean 10/3 = 3.3333, p50 rank 2 of
    [2, 3, 5] -> 3, p90 -> 5. Queue delay = admitted - sent: all admitted on arrival, 0."""
    s = run.summary
    assert [s[f"e2el_{k}"] for k in ("mean", "p50", "p90", "p99", "max")] == [
        3.3333, 3, 5, 5, 5]
    assert [s[f"queue_delay_{k}"] for k in ("mean", "p50", "max")] == [0, 0, 0]


def test_throughputs_divide_completed_work_by_the_duration(run):
    """Duration = last completion - first arrival = 5 - 0 = 5 ticks. Request throughput
    3 / 5 = 0.6; input tokens of completed requests 4 + 4 + 8 = 16 -> 3.2 per tick; output
    tokens 4 + 2 + 2 = 8 -> 1.6; total 24 -> 4.8."""
    s = run.summary
    assert (s["duration"], s["request_throughput"], s["input_throughput"],
            s["output_throughput"], s["total_token_throughput"]) == (5, 0.6, 3.2, 1.6, 4.8)


def test_goodput_counts_requests_that_meet_every_slo(run):
    """SLO TTFT <= 1 and TPOT <= 1: a meets TTFT (1) but misses TPOT (1.3333); b meets
    both (1, 1); c misses TTFT (2). So 1 request meets the SLO: attainment 1 / 3 = 0.3333,
    goodput 1 / 5 ticks = 0.2 requests per tick. Per request, slo_met is false, true,
    false."""
    s = run.summary
    assert (s["slo_met"], s["slo_attainment"], s["request_goodput"]) == (1, 0.3333, 0.2)
    slo = (("ttft", 1), ("tpot", 1))
    assert [request_record(run.req[r], slo=slo)["slo_met"] for r in "abc"] == [
        False, True, False]


def test_deadline_misses(run):
    """a's deadline 6 is met (finished at 5); b's deadline 1 is missed (finished at 2); c
    has none. 2 deadlines, 1 miss; per request deadline_missed false, true, null."""
    s = run.summary
    assert (s["deadlines"], s["deadline_misses"]) == (2, 1)
    assert [request_record(run.req[r])["deadline_missed"] for r in "abc"] == [
        False, True, None]


def test_a_request_that_never_completes_misses_its_deadline_and_every_slo():
    """b is cancelled at 1 before it finishes: its deadline (10) counts as missed and it
    cannot meet an SLO; it enters TTFT (first token at 1) but not TPOT or E2EL, which
    cover completed requests only. a completes: SLO met (TTFT 1 <= 5). Attainment 1/2."""
    s = simulate([req("a", 0, 4, 2), req("b", 0, 4, 4, deadline=10),
                  {"type": "cancel", "id": "b", "at": 1}], slo="ttft=5", **OPTIONS)
    sm = s.summary
    assert (sm["deadlines"], sm["deadline_misses"]) == (1, 1)
    assert (sm["slo_met"], sm["slo_attainment"]) == (1, 0.5)
    assert (sm["ttft_max"], sm["e2el_max"], sm["tpot_max"]) == (1, 2, 1)
    assert sm["finished_aborted"] == 1 and sm["completed"] == 1


def test_without_slo_the_goodput_fields_are_null(run):
    """No SLO given: slo_met, slo_attainment and request_goodput are null (not 0)."""
    s = simulate(RECORDS, **OPTIONS).summary
    assert (s["slo_met"], s["slo_attainment"], s["request_goodput"]) == (None, None, None)


def test_per_request_latencies(run):
    """The per-request record carries each latency: c (arrival 1) has client_wait 0,
    queue_delay 0, ttft 2, tpot 1, e2el 3; a has tpot 1.3333 and e2el 5."""
    c = request_record(run.req["c"])
    assert {k: c[k] for k in ("arrival", "sent", "client_wait", "queue_delay", "ttft",
                              "tpot", "e2el")} == {
        "arrival": 1, "sent": 1, "client_wait": 0, "queue_delay": 0, "ttft": 2, "tpot": 1,
        "e2el": 3}
    a = request_record(run.req["a"])
    assert (a["tpot"], a["e2el"], a["preemptions"]) == (1.3333, 5, 1)


def test_slo_flag_and_table_rows(tmp_path):
    """`replay --slo ttft=1,tpot=1` prints the goodput rows: SLO met 1 (requests),
    attainment 33.33 (%), goodput 0.20 req/tick, and the deadlines row."""
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"type": "config", **OPTIONS}, *RECORDS]))
    out = io.StringIO()
    assert main(["replay", str(path), "--slo", "ttft=1,tpot=1"], out=out,
                err=io.StringIO()) == 0
    rows = {line[:22].strip(): line.split() for line in out.getvalue().splitlines()}
    assert rows["SLO met"][-2:] == ["requests", "1"]
    assert rows["SLO attainment"][-2:] == ["%", "33.33"]
    assert rows["goodput"][-2:] == ["req/tick", "0.20"]
    assert rows["deadline misses"][-2:] == ["requests", "1"]


@pytest.mark.parametrize("text", ["ttft=0", "ttft", "tpot=-1", "foo=1", "ttft=1,ttft=2",
                                  "ttft=nan", ""])
def test_bad_slo_is_a_usage_error(tmp_path, text):
    """An SLO with a zero, negative, repeated, unknown or non-numeric objective exits 2
    naming the option, without a traceback."""
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(req("a", 0, 4, 2)) + "\n")
    err = io.StringIO()
    assert main(["replay", str(path), "--slo", text], out=io.StringIO(), err=err) == 2
    assert "slo must be objectives like" in err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_e2e_is_accepted_for_e2el():
    """`e2e=5` in an SLO means E2EL: a completes at 2 (<= 5), b at 4 (> 3 with e2e=3)."""
    s = simulate([req("a", 0, 4, 2), req("b", 0, 4, 4)], slo={"e2e": 3}, **OPTIONS)
    assert s.result.options.slo == (("e2el", 3),)
    assert s.summary["slo_met"] == 1
