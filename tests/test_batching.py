"""Padded static batching (`static`) and its size-or-window variant (`dynamic`), §6 and
README "static and dynamic"; and the side-by-side replay table of all six policies."""
from __future__ import annotations

import io

from conftest import req, simulate
from scheduler_sim.cli.main import main
from scheduler_sim.policies import POLICIES

QUICKSTART = "traces/quickstart.jsonl"


def blocked(s) -> list[tuple[int, str, str]]:
    """(tick, id, reason) of every `admission_blocked` event."""
    return [(e["tick"], e["id"], e["reason"]) for e in s.of("admission_blocked")]


def admitted(s) -> list[tuple[int, str]]:
    """(tick, id) of every `admitted` event."""
    return [(e["tick"], e["id"]) for e in s.of("admitted")]


def padded_run(num_blocks: int):
    """static, B=4, max_rows 2, release_delay 2: a (P=4, N=2) and b (P=4, N=4) form the
    batch at 0 (credits ceil(5/4) = 2 and ceil(7/4) = 2); c (P=4, N=1, credit 1) waits."""
    return simulate([req("a", 0, 4, 2), req("b", 0, 4, 4), req("c", 0, 4, 1)], policy="static",
                    block_size=4, num_blocks=num_blocks, max_rows=2, release_delay=2)


# --- static ----------------------------------------------------------------------------


def test_static_finished_members_pad_their_rows_and_keep_their_blocks():
    """5 blocks: t0 prefills a and b (c: batch_full); t1 decodes both (a's last output at
    2, b's second); t2, t3: a is a padding row (1 token, no output) beside b's decodes,
    c sees batch_running at 1, 2, 3. At 2 a still holds its 2 blocks (5 rows) and its
    credit: snapshot reserved 4, allocated 4 (a 2 + b 2), free 1, running 1. b ends at 4:
    the batch ends, both release their 4 blocks (draining until 4 + 2 = 6); c is admitted
    at 4 (draining 4 + needed 1 <= 5) and prefilled, done at 5; released 4 at 6, 1 at 7.
    Summary: padding_rows 2, 5 dispatches of 2, 2, 2, 2, 1 rows (mean 1.8) and 8, 2, 2, 2,
    4 tokens (mean 3.6)."""
    s = padded_run(5)
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, True), ("b", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (2, [("a", "padding", 1, False), ("b", "decode", 1, True)]),
        (3, [("a", "padding", 1, False), ("b", "decode", 1, True)]),
        (4, [("c", "prefill", 4, True)]),
    ]
    assert [e["tokens"] for e in s.of("dispatch")] == [8, 2, 2, 2, 4]
    assert blocked(s) == [(0, "c", "batch_full"), (1, "c", "batch_running"),
                          (2, "c", "batch_running"), (3, "c", "batch_running")]
    snap = s.at(2, "snapshot")[0]
    assert {k: snap[k] for k in ("waiting", "running", "reserved", "allocated", "draining",
                                 "free")} == {"waiting": 1, "running": 1, "reserved": 4,
                                              "allocated": 4, "draining": 0, "free": 1}
    snap = s.at(4, "snapshot")[0]
    assert (snap["reserved"], snap["allocated"], snap["draining"], snap["free"]) == (1, 0, 4, 1)
    assert admitted(s) == [(0, "a"), (0, "b"), (4, "c")]
    assert [(e["tick"], e["blocks"]) for e in s.of("released")] == [(6, 4), (7, 1)]
    got = {rid: (r.finished_at, r.useful_rows, r.outputs) for rid, r in s.req.items()}
    assert got == {"a": (2, 5, 2), "b": (4, 7, 4), "c": (5, 4, 1)}
    assert s.summary["padding_rows"] == 2
    assert s.summary["iterations"] == 5
    assert s.summary["mean_batch_rows"] == 1.8
    assert s.summary["mean_batch_tokens"] == 3.6
    assert s.summary["useful_rows"] == 16


def test_static_next_batch_waits_for_the_released_blocks():
    """The same run with 4 blocks: when the batch ends at 4, its 4 blocks drain until 6,
    so c (needed 1) is blocked at 4 (free 0, reserved 0, draining 4): reason draining, as
    0 + 1 <= 4 would fit once the drain ends; admitted at 6, when they are released; it
    finishes at 7."""
    s = padded_run(4)
    at4 = s.at(4, "admission_blocked")
    assert at4 == [{"tick": 4, "event": "admission_blocked", "id": "c", "reason": "draining",
                    "needed": 1, "free": 0, "reserved": 0, "draining": 4}]
    assert admitted(s)[-1] == (6, "c")
    assert [(e["tick"], e["event"]) for e in s.at(6)][:2] == [(6, "released"), (6, "admitted")]
    assert s.req["c"].finished_at == 7
    assert s.summary["padding_rows"] == 2


def test_static_batch_size_is_capped_by_the_token_budget_and_prefills_first():
    """max_rows 4 but token_budget 2: a batch holds min(4, 2) = 2 requests, a and b (P=2,
    N=2 each); c is batch_full. The budget of 2 prefills a at 0, then b at 1 (a's decode
    waits), then decodes both at 2: done at 3; c's batch forms at 3 (prefill 3, decode 4,
    done 5)."""
    s = simulate([req("a", 0, 2, 2), req("b", 0, 2, 2), req("c", 0, 2, 2)], policy="static",
                 block_size=4, num_blocks=8, max_rows=4, token_budget=2)
    assert s.dispatches() == [
        (0, [("a", "prefill", 2, True)]),
        (1, [("b", "prefill", 2, True)]),
        (2, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
        (3, [("c", "prefill", 2, True)]),
        (4, [("c", "decode", 1, True)]),
    ]
    assert blocked(s)[0] == (0, "c", "batch_full")
    assert admitted(s) == [(0, "a"), (0, "b"), (3, "c")]
    assert s.summary["padding_rows"] == 0


def test_static_chunks_prefills_and_decodes_only_after_every_member_prefilled():
    """prefill_chunk 2: a (P=5, N=2) and b (P=2, N=2) form a batch; t0 prefills a's first
    2 rows (no output) and all of b (output 1); t1 a's next 2 rows while b's decode waits;
    t2 a's last row (output 1); t3 decodes both; both finish at 4."""
    s = simulate([req("a", 0, 5, 2), req("b", 0, 2, 2)], policy="static", block_size=4,
                 num_blocks=8, max_rows=2, prefill_chunk=2)
    assert s.dispatches() == [
        (0, [("a", "prefill", 2, False), ("b", "prefill", 2, True)]),
        (1, [("a", "prefill", 2, False)]),
        (2, [("a", "prefill", 1, True)]),
        (3, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
    ]
    assert (s.req["a"].finished_at, s.req["b"].finished_at) == (4, 4)


def test_static_a_member_that_does_not_fit_closes_the_batch():
    """3 blocks, max_rows 4: a (P=4, N=4, credit ceil(7/4) = 2) is admitted; b (credit 2)
    does not fit (2 + 2 > 3): reservation, and the batch is closed, so c (credit 1, would
    fit) waits too. a runs alone 0..4 (b batch_running at 1..3); at 4 b and c form the
    next batch (2 + 1 = 3 blocks); c (N=1) is done at 5 and pads at 5, 6, 7 while b
    decodes; b ends at 8."""
    s = simulate([req("a", 0, 4, 4), req("b", 0, 4, 4), req("c", 0, 1, 1)], policy="static",
                 block_size=4, num_blocks=3, max_rows=4)
    assert s.of("admission_blocked")[0] == {
        "tick": 0, "event": "admission_blocked", "id": "b", "reason": "reservation",
        "needed": 2, "free": 3, "reserved": 2, "draining": 0}
    assert blocked(s) == [(0, "b", "reservation"), (1, "b", "batch_running"),
                          (2, "b", "batch_running"), (3, "b", "batch_running")]
    assert admitted(s) == [(0, "a"), (4, "b"), (4, "c")]
    assert s.dispatches()[4:] == [
        (4, [("b", "prefill", 4, True), ("c", "prefill", 1, True)]),
        (5, [("b", "decode", 1, True), ("c", "padding", 1, False)]),
        (6, [("b", "decode", 1, True), ("c", "padding", 1, False)]),
        (7, [("b", "decode", 1, True), ("c", "padding", 1, False)]),
    ]
    assert {rid: r.finished_at for rid, r in s.req.items()} == {"a": 4, "b": 8, "c": 5}
    assert s.summary["padding_rows"] == 3
    assert s.summary["peak_reserved"] == 3


def test_static_cancelling_the_longest_member_ends_the_batch():
    """4 blocks, max_rows 2: a (N=2) is done at 2 and pads at 2; b (N=5) is cancelled at
    3, so no member is left running: the batch ends at 3, a's blocks are released at once
    (release_delay 0) and c (P=4, N=1) is admitted at 3, done at 4; padding_rows 1."""
    s = simulate([req("a", 0, 4, 2), req("b", 0, 4, 5), req("c", 0, 4, 1),
                  {"type": "cancel", "id": "b", "at": 3}],
                 policy="static", block_size=4, num_blocks=4, max_rows=2)
    assert [(e["event"], e.get("id")) for e in s.at(3)][:2] == [("cancelled", "b"),
                                                                ("admitted", "c")]
    snap = s.at(3, "snapshot")[0]
    assert (snap["reserved"], snap["allocated"], snap["free"]) == (1, 0, 4)
    assert s.dispatches()[-1] == (3, [("c", "prefill", 4, True)])
    assert s.req["b"].status.label == "finished_aborted"
    assert s.req["c"].finished_at == 4
    assert s.summary["padding_rows"] == 1


# --- dynamic ---------------------------------------------------------------------------


def test_dynamic_starts_a_batch_when_max_rows_requests_wait():
    """max_rows 2, batch_window 8: a waits from 0 alone; b arrives at 3: two wait, the
    batch starts at 3 (not at 0 + 8); a and b (P=4, N=2) prefill at 3, decode at 4, done
    at 5. c arrives at 4 (batch_running) and, alone, starts when it has waited 8: at 12,
    done at 13; nothing happens between 5 and 12."""
    s = simulate([req("a", 0, 4, 2), req("b", 3, 4, 2), req("c", 4, 4, 1)], policy="dynamic",
                 block_size=4, num_blocks=8, max_rows=2, batch_window=8)
    assert admitted(s) == [(3, "a"), (3, "b"), (12, "c")]
    assert blocked(s) == [(4, "c", "batch_running")]
    assert [t for t, _ in s.dispatches()] == [3, 4, 12]
    assert [e for e in s.events if 5 < e["tick"] < 12] == []
    assert s.req["c"].finished_at == 13
    assert s.summary["queue_delay_max"] == 8


def test_dynamic_starts_a_partial_batch_when_the_oldest_has_waited_the_window():
    """max_rows 3, batch_window 5: a at 0 and b at 2 never make 3; at 5 a has waited
    5 - 0 = 5 >= 5, so both start at 5 (prefill 5, decode 6, done 7)."""
    s = simulate([req("a", 0, 4, 2), req("b", 2, 4, 2)], policy="dynamic", block_size=4,
                 num_blocks=8, max_rows=3, batch_window=5)
    assert admitted(s) == [(5, "a"), (5, "b")]
    assert s.dispatches() == [
        (5, [("a", "prefill", 4, True), ("b", "prefill", 4, True)]),
        (6, [("a", "decode", 1, True), ("b", "decode", 1, True)]),
    ]
    assert (s.req["a"].finished_at, s.req["b"].finished_at) == (7, 7)


def test_dynamic_wakes_at_the_window_tick_with_nothing_else_happening():
    """A lone request arriving at 100 with batch_window 5 is admitted at exactly 105 (the
    engine wakes for the window), done at 106; queue delay 5."""
    s = simulate([req("a", 100, 4, 1)], policy="dynamic", block_size=4, num_blocks=8,
                 max_rows=3, batch_window=5)
    assert [(e["tick"], e["event"]) for e in s.events] == [
        (100, "arrival"), (105, "admitted"), (105, "snapshot"), (105, "dispatch"),
        (106, "finished")]
    assert s.summary["queue_delay_mean"] == 5


def test_dynamic_a_request_that_outwaited_the_window_starts_when_the_batch_ends():
    """max_rows 2, window 8: a and b (N=10) run 0..10; c arrives at 1 and has waited
    10 - 1 = 9 >= 8 when the batch ends at 10: its batch starts at 10, done at 11."""
    s = simulate([req("a", 0, 4, 10), req("b", 0, 4, 10), req("c", 1, 4, 1)],
                 policy="dynamic", block_size=4, num_blocks=16, max_rows=2, batch_window=8)
    assert admitted(s) == [(0, "a"), (0, "b"), (10, "c")]
    assert s.req["c"].finished_at == 11


def test_dynamic_batch_size_trigger_is_capped_by_the_token_budget():
    """max_rows 4, token_budget 2: a full batch is min(4, 2) = 2, so a (at 0) and b (at 1)
    start at 1, not at the window (0 + 8); the budget prefills a at 1 and b at 2."""
    s = simulate([req("a", 0, 2, 1), req("b", 1, 2, 1)], policy="dynamic", block_size=4,
                 num_blocks=16, max_rows=4, token_budget=2, batch_window=8)
    assert admitted(s) == [(1, "a"), (1, "b")]
    assert s.dispatches() == [(1, [("a", "prefill", 2, True)]), (2, [("b", "prefill", 2, True)])]


def test_dynamic_with_window_zero_behaves_like_static():
    """batch_window 0: the oldest has always waited >= 0 ticks, so dynamic replays the
    padded run exactly as static does (same events)."""
    recs = [req("a", 0, 4, 2), req("b", 0, 4, 4), req("c", 1, 4, 1)]
    s = simulate(recs, policy="static", block_size=4, num_blocks=5, max_rows=2)
    d = simulate(recs, policy="dynamic", block_size=4, num_blocks=5, max_rows=2, batch_window=0)
    assert d.events == s.events
    assert d.summary == s.summary


# --- the side-by-side table -------------------------------------------------------------------


def test_replay_prints_one_table_with_six_aligned_policy_columns():
    """`replay quickstart --policy` x6 exits 0 and prints one table: the header names the
    six policies in order; every table line has the same length, and in every body line
    each policy's column ends at the same character as its name in the header."""
    names = ["serial", "continuous", "vllm", "sglang", "static", "dynamic"]
    assert set(names) == set(POLICIES)
    argv = ["replay", QUICKSTART]
    for name in names:
        argv += ["--policy", name]
    out, err = io.StringIO(), io.StringIO()
    assert main(argv, out=out, err=err) == 0
    assert err.getvalue() == ""
    lines = out.getvalue().splitlines()
    headers = [i for i, line in enumerate(lines)
               if all(f" {n}" in line for n in names) and line.startswith(" ")
               and "(flag)" not in line]  # not the header's list of options
    assert len(headers) == 1
    h = headers[0]
    header = lines[h]
    ends = []
    pos = 0
    for name in names:
        pos = header.index(" " + name, pos) + 1 + len(name)
        ends.append(pos)
    assert ends == sorted(ends) and ends[-1] == len(header)
    body = []
    for line in lines[h + 1:]:
        if not line.strip():
            break
        body.append(line)
    assert len(body) >= 20
    assert {len(line) for line in body} == {len(header)}
    for line in body:
        for end in ends:
            assert line[end - 1] != " ", line
            assert end == len(line) or line[end] == " ", line
        assert len(line.split()) >= len(names) + 1
    labels = [line.split("  ")[0] for line in body]
    assert "requests" in labels and "padding rows" in labels
    assert lines[h + 1 + len(body):] == [] or all(not x.strip() for x in lines[h + 1 + len(body):])


def test_a_cancelled_static_member_leaves_the_batch_without_padding():
    """static, 8 blocks: a (P=4 N=6) and b (P=4 N=2) form a batch at 0; b is cancelled at
    1 while running: it leaves the batch, so the dispatches at 1-5 carry only a (no
    padding rows) and a finishes at 6."""
    s = simulate([req("a", 0, 4, 6), req("b", 0, 4, 2), {"type": "cancel", "id": "b", "at": 1}],
                 policy="static", block_size=4, num_blocks=8, token_budget=16)
    assert [rows for _, rows in s.dispatches()[1:]] == [[("a", "decode", 1, True)]] * 5
    assert s.summary["padding_rows"] == 0
    assert s.req["a"].finished_at == 6
