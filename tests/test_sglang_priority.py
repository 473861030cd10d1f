"""SGLang's priority scheduling under `sglang` with order `priority`: priority preemption
above, at and below the threshold, the victims' order, a need the victims do not cover,
the sign (`priority_first`), `priority_preemption false`, and the waiting order by queue
entry (README "sglang", spec §6)."""
from __future__ import annotations

import pytest

from conftest import req, simulate
from scheduler_sim.records.options import Options

# Blocks of one token and a pool of 100: memory never binds unless a test says so.
ROWS_OF_ONE = dict(policy="sglang", block_size=1, num_blocks=100, max_rows=1,
                   order="priority")


def preemptions(s) -> list[dict]:
    """The `preempted` events, without their tick's type field."""
    return [{k: v for k, v in e.items() if k != "event"} for e in s.of("preempted")]


def admitted_at(s, rid: str) -> list[int]:
    """The ticks at which request `rid` was admitted (a resumed request twice)."""
    return [e["tick"] for e in s.of("admitted") if e["id"] == rid]


def two_requests(hi_priority: int, **options):
    """lo (P=4, N=5, priority 20) runs alone from tick 0 (one row); hi (P=4, N=2)
    arrives at tick 2, when lo has 2 outputs and 5 rows."""
    return simulate([req("lo", 0, 4, 5, priority=20),
                     req("hi", 2, 4, 2, priority=hi_priority)],
                    **{**ROWS_OF_ONE, **options})


def test_a_request_more_important_by_more_than_the_threshold_preempts():
    """hi has priority 9, lo 20: 20 - 9 = 11 > 10, and the rows are full: lo is
    preempted at tick 2 (outputs 2, rows 5, 5 blocks freed, reason priority, trigger
    hi), hi is admitted at once and lo resumes at tick 4 when hi finishes, recomputing
    its 4 + 2 tokens in one pass."""
    s = two_requests(9)
    assert preemptions(s) == [{"tick": 2, "id": "lo", "outputs": 2, "rows": 5,
                               "blocks_freed": 5, "reason": "priority", "trigger": "hi"}]
    assert admitted_at(s, "hi") == [2]
    assert admitted_at(s, "lo") == [0, 4]
    assert [(t, rows) for t, rows in s.dispatches() if t == 4] == [
        (4, [("lo", "recompute", 6, True)])]


@pytest.mark.parametrize("hi_priority", [10, 15])
def test_a_difference_at_or_below_the_threshold_does_not_preempt(hi_priority):
    """hi's priority 10 (20 - 10 = 10, exactly the threshold) or 15 (5): nobody is
    preempted; hi waits for the row (max_rows) until lo finishes at tick 5."""
    s = two_requests(hi_priority)
    assert preemptions(s) == []
    assert admitted_at(s, "hi") == [5]
    assert {e["reason"] for e in s.of("admission_blocked") if e["id"] == "hi"} == {"max_rows"}


def test_the_threshold_is_an_option():
    """With priority_preemption_threshold 9, hi's priority 10 (a difference of 10)
    preempts lo at tick 2."""
    s = two_requests(10, priority_preemption_threshold=9)
    assert [(e["tick"], e["id"]) for e in s.of("preempted")] == [(2, "lo")]


def test_priority_preemption_false_never_preempts():
    """priority_preemption false (SGLang's disable_priority_preemption): hi (9) waits for
    lo (20) to finish at tick 5; the order by priority stays."""
    s = two_requests(9, priority_preemption=False)
    assert preemptions(s) == []
    assert admitted_at(s, "hi") == [5]


def test_priority_first_high_makes_larger_values_more_important():
    """priority_first high (SGLang's default sign): lo has priority 9 and hi 20, so hi is
    the more important by 11 > 10 and preempts lo at tick 2; under the default (low) the
    same trace preempts nobody."""
    trace = [req("lo", 0, 4, 5, priority=9), req("hi", 2, 4, 2, priority=20)]
    high = simulate(trace, **ROWS_OF_ONE, priority_first="high")
    assert [(e["tick"], e["id"], e["trigger"]) for e in high.of("preempted")] == [
        (2, "lo", "hi")]
    assert preemptions(simulate(trace, **ROWS_OF_ONE)) == []


def test_victims_least_important_first_then_latest_entry_and_requeued_by_entry():
    """Three rows: a (30), b (30) and c (25) are admitted at tick 0 in that order; d (30)
    arrives at 1 and waits (the rows are full; equal priorities never preempt); x (0)
    arrives at 2: the least important running requests are a and b (30), of which b
    entered the queue last: b is the victim (one covers x's need). b rejoins the queue
    after d (its entry is later), so when a row frees at tick 6 (c finishes) d is
    admitted, not b, although b arrived first."""
    s = simulate([req("a", 0, 4, 8, priority=30), req("b", 0, 4, 8, priority=30),
                  req("c", 0, 4, 5, priority=25), req("d", 1, 4, 3, priority=30),
                  req("x", 2, 4, 3, priority=0)],
                 **{**ROWS_OF_ONE, "max_rows": 3})
    assert [(e["tick"], e["id"], e["trigger"]) for e in s.of("preempted")] == [(2, "b", "x")]
    assert admitted_at(s, "x") == [2]
    assert admitted_at(s, "d")[0] < admitted_at(s, "b")[1]


@pytest.mark.parametrize("max_tokens, preempted", [(24, True), (26, False)])
def test_no_victim_when_the_victims_do_not_cover_the_need(max_tokens, preempted):
    """A pool of 30: lo (P=4, N=5, priority 20) holds 5 rows at tick 2 and is expected to
    need 0.698997 x 3 = 2.097 more, so 30 - 5 - 2.097 = 22.903 tokens are left; hi
    (P=1, priority 0, never looked at: SGLang counts its fill as 0) needs min(M, 4096)
    minus that: 24 - 22.903 = 1.097, covered by lo's 2.097 (lo is preempted, hi
    admitted); 26 - 22.903 = 3.097 is not: nobody is preempted and hi waits for lo."""
    s = simulate([req("lo", 0, 4, 5, priority=20),
                  req("hi", 2, 1, max_tokens, priority=0)],
                 **{**ROWS_OF_ONE, "num_blocks": 30})
    assert [e["id"] for e in s.of("preempted")] == (["lo"] if preempted else [])
    assert admitted_at(s, "hi") == ([2] if preempted else [5])


def test_priority_options_show_only_with_sglang_under_priority():
    """The three options appear in the JSON options (as_dict) only for an sglang run with
    order priority; set without it, each is noted as having no effect."""
    plain = Options.resolve({"priority_first": "high"}, {"policy": ["vllm"]})
    assert "priority_first" not in plain.as_dict()
    assert plain.unused() == ["priority_first has no effect without policy sglang and "
                              "order priority"]
    on = Options.resolve({"order": "priority"}, {"policy": ["sglang"]})
    assert [on.as_dict()[k] for k in ("priority_first", "priority_preemption",
                                      "priority_preemption_threshold")] == ["low", True, 10]
    assert on.unused() == []
