"""Closed-loop clients (`max_concurrency`): at most C requests in flight, pinned by hand.

A request is sent at its trace arrival or when a client slot frees (a sent
request finishes, is cancelled, rejected or times out), whichever is later, in
trace order. The server sees it only once sent: its `arrival` event is at the
send time, carrying `client_wait` = send - trace arrival only when that is > 0.
Latencies (queue delay, TTFT, E2EL) count from the send time.

Every scenario uses block_size 4, num_blocks 8, policy continuous and the default
token_budget 2048, so a prompt of P <= 2048 tokens is prefilled in one dispatch that
emits output 1, and each further output takes one decode dispatch; without a cost
model every dispatch lasts exactly one tick (E1: completion at t + 1).

The three requests used throughout (THREE), all arriving at 0 with P = 4:
  a: N = 3, credit ceil((4+3-1)/4) = 2 blocks; alone it prefills at 0 (output 1 at 1),
     decodes at 1 and 2 (outputs 2 and 3 at 2 and 3): finished 3 ticks after it starts.
  b: N = 1, credit ceil((4+1-1)/4) = 1 block; its prefill emits its only output: it
     finishes 1 tick after it starts.
  c: N = 2, credit ceil((4+2-1)/4) = 2 blocks; prefill then one decode: 2 ticks.
Together they need 5 <= 8 blocks, so admission is never blocked by the pool.
"""
from __future__ import annotations

import json

from conftest import req, simulate, run_cli as run, write_trace as write
from scheduler_sim.engine.summary import request_record

OPTS = {"block_size": 4, "num_blocks": 8}
THREE = [req("a", 0, 4, 3), req("b", 0, 4, 1), req("c", 0, 4, 2)]


def cancel(rid: str, at: int) -> dict:
    """A cancel record."""
    return {"type": "cancel", "id": rid, "at": at}


def times(s, rid: str) -> tuple:
    """(arrival, sent, admitted_at, first_token_at, finished_at) of one request."""
    r = s.req[rid]
    return (r.arrival, r.sent, r.admitted_at, r.first_token_at, r.finished_at)


def latencies(s, rid: str) -> tuple:
    """(client_wait, queue_delay, ttft, e2el) from the per-request summary record."""
    rec = request_record(s.req[rid])
    return (rec["client_wait"], rec["queue_delay"], rec["ttft"], rec["e2el"])


def arrivals(s) -> list[tuple]:
    """Each arrival event as (tick, id, client_wait or None when the field is absent)."""
    return [(e["tick"], e["id"], e.get("client_wait")) for e in s.of("arrival")]






# --- who is sent when ------------------------------------------------------------------

def test_one_client_sends_one_request_at_a_time():
    """C = 1, THREE. a is sent at 0 (client_wait 0), admitted at 0, prefills at 0 (first
    token 1), decodes at 1 and 2: finished at 3. Its slot frees at 3 (E1), so b is sent at
    3 (client_wait 3 - 0 = 3), admitted at 3, prefills at 3 emitting its only output:
    first token and finished at 4. c is then sent at 4 (client_wait 4), admitted at 4,
    prefills at 4 (first token 5), decodes at 5: finished at 6.
    Latencies from the send time: queue delay 0 for all; TTFT 1-0, 4-3, 5-4 = 1, 1, 1;
    E2EL 3-0, 4-3, 6-4 = 3, 1, 2. Arrival events at the send ticks 0, 3, 4, with a
    `client_wait` field only for b (3) and c (4). Dispatches each hold one request."""
    s = simulate(THREE, max_concurrency=1, **OPTS)
    assert times(s, "a") == (0, 0, 0, 1, 3)
    assert times(s, "b") == (0, 3, 3, 4, 4)
    assert times(s, "c") == (0, 4, 4, 5, 6)
    assert latencies(s, "a") == (0, 0, 1, 3)
    assert latencies(s, "b") == (3, 0, 1, 1)
    assert latencies(s, "c") == (4, 0, 1, 2)
    assert arrivals(s) == [(0, "a", None), (3, "b", 3), (4, "c", 4)]
    assert "client_wait" not in s.of("arrival")[0]
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True)]),
        (2, [("a", "decode", 1, True)]),
        (3, [("b", "prefill", 4, True)]),
        (4, [("c", "prefill", 4, True)]),
        (5, [("c", "decode", 1, True)]),
    ]
    assert s.summary["makespan"] == 6


def test_two_clients_third_request_waits_for_the_first_to_end():
    """C = 2, THREE. a and b are sent and admitted at 0 and prefilled together at 0
    (outputs at 1). b (N = 1) is the first to end, at 1: its slot goes to c, sent at 1
    (client_wait 1). At 1 the dispatch is a's decode then c's prefill (first token 2);
    at 2 both decode, a's 3rd output and c's 2nd, both finished at 3 (decodes rotate
    round-robin by admission order after the last one decoded, a: so c comes first).
    a: sent 0, admitted 0, first 1, finished 3: TTFT 1, E2EL 3.
    b: sent 0, admitted 0, first 1, finished 1: TTFT 1, E2EL 1.
    c: sent 1, admitted 1, first 2, finished 3: client wait 1, TTFT 2-1 = 1, E2EL 3-1 = 2.
    Arrival events: a and b at 0 without client_wait, c at 1 with client_wait 1."""
    s = simulate(THREE, max_concurrency=2, **OPTS)
    assert times(s, "a") == (0, 0, 0, 1, 3)
    assert times(s, "b") == (0, 0, 0, 1, 1)
    assert times(s, "c") == (0, 1, 1, 2, 3)
    assert latencies(s, "a") == (0, 0, 1, 3)
    assert latencies(s, "b") == (0, 0, 1, 1)
    assert latencies(s, "c") == (1, 0, 1, 2)
    assert arrivals(s) == [(0, "a", None), (0, "b", None), (1, "c", 1)]
    assert s.dispatches() == [
        (0, [("a", "prefill", 4, True), ("b", "prefill", 4, True)]),
        (1, [("a", "decode", 1, True), ("c", "prefill", 4, True)]),
        (2, [("c", "decode", 1, True), ("a", "decode", 1, True)]),
    ]


def test_request_arriving_after_a_slot_freed_is_sent_at_its_own_arrival():
    """C = 1. a: arrival 0, P = 4, N = 2: sent 0, first token 1, finished 2 (its slot is
    free from 2). b: arrival 5, P = 4, N = 1, so the slot is already free when it
    arrives: sent = max(5, 2) = 5, client_wait 0, admitted 5, first token and finished
    at 6; TTFT 1, E2EL 1. Its arrival event (tick 5) has no `client_wait` field."""
    s = simulate([req("a", 0, 4, 2), req("b", 5, 4, 1)], max_concurrency=1, **OPTS)
    assert times(s, "a") == (0, 0, 0, 1, 2)
    assert times(s, "b") == (5, 5, 5, 6, 6)
    assert latencies(s, "b") == (0, 0, 1, 1)
    assert arrivals(s) == [(0, "a", None), (5, "b", None)]
    assert "client_wait" not in s.of("arrival")[1]


def test_request_arriving_while_the_slot_is_busy_waits_from_its_own_arrival():
    """C = 1. a: arrival 0, P = 4, N = 3: finished at 3. b: arrival 1, P = 4, N = 1: the
    slot is busy until 3, so sent = max(1, 3) = 3 and client_wait = 3 - 1 = 2 (counted
    from b's own trace time, not from 0); admitted 3, first token and finished 4: TTFT
    4 - 3 = 1, E2EL 1. The arrival event of b is at tick 3 with client_wait 2."""
    s = simulate([req("a", 0, 4, 3), req("b", 1, 4, 1)], max_concurrency=1, **OPTS)
    assert times(s, "b") == (1, 3, 3, 4, 4)
    assert latencies(s, "b") == (2, 0, 1, 1)
    assert arrivals(s) == [(0, "a", None), (3, "b", 2)]


# --- requests that end without finishing -----------------------------------------------

def test_cancel_of_an_unsent_request_frees_no_slot():
    """C = 1, THREE with b cancelled at 1. a is sent at 0, its prefill completes at 1
    (E1), so the cancellation at 1 is applied at once: b has not been sent, so it ends
    with a `cancelled` event in state "unsent", status finished_aborted, finished_at 1,
    and is never sent nor admitted (sent, admitted, first token None; no arrival event;
    client_wait None). It held no slot, so it frees none: c still waits for a, which
    finishes at 3. c is sent at 3 (client_wait 3), admitted 3, first token 4, finished
    5 (TTFT 1, E2EL 2)."""
    s = simulate(THREE + [cancel("b", 1)], max_concurrency=1, **OPTS)
    assert [(e["tick"], e["id"], e["state"]) for e in s.of("cancelled")] == [(1, "b", "unsent")]
    b = s.req["b"]
    assert (b.sent, b.admitted_at, b.first_token_at, b.finished_at) == (None, None, None, 1)
    assert b.status.label == "finished_aborted"
    assert latencies(s, "b") == (None, None, None, None)
    assert [e["id"] for e in s.of("admitted")] == ["a", "c"]
    assert times(s, "c") == (0, 3, 3, 4, 5)
    assert latencies(s, "c") == (3, 0, 1, 2)
    assert arrivals(s) == [(0, "a", None), (3, "c", 3)]
    assert (s.summary["finished_aborted"], s.summary["completed"]) == (1, 2)


def test_rejected_request_frees_its_slot_at_the_same_tick():
    """C = 1, num_blocks 2. a: P = 4, N = 2, credit ceil((4+2-1)/4) = 2 <= 2: sent 0,
    finished 2. b: P = 12, N = 1 needs ceil((12+1-1)/4) = 3 > 2 blocks; it waits for a's
    slot, is sent at 2 (client_wait 2) and rejected at once (needed 3, capacity 2),
    which frees the slot at 2, so c (P = 4, N = 1, 1 block) is sent at 2 as well
    (client_wait 2), admitted 2, first token and finished 3 (TTFT 1, E2EL 1).
    b: sent 2, finished_at 2, status finished_ignored, never admitted (queue delay,
    TTFT and E2EL None)."""
    s = simulate([req("a", 0, 4, 2), req("b", 0, 12, 1), req("c", 0, 4, 1)],
                 max_concurrency=1, block_size=4, num_blocks=2)
    assert [(e["tick"], e["id"], e["needed"], e["capacity"]) for e in s.of("rejected")] == [
        (2, "b", 3, 2)]
    b = s.req["b"]
    assert (b.sent, b.admitted_at, b.finished_at, b.status.label) == (2, None, 2,
                                                                        "finished_ignored")
    assert latencies(s, "b") == (2, None, None, None)
    assert times(s, "c") == (0, 2, 2, 3, 3)
    assert latencies(s, "c") == (2, 0, 1, 1)
    assert arrivals(s) == [(0, "a", None), (2, "b", 2), (2, "c", 2)]


def test_a_request_sent_on_a_cancels_freed_slot_arrives_after_the_cancel():
    """C = 1: a (P = 4, N = 6) runs from 0 and is cancelled at 2, which frees its slot;
    b, waiting for it since 0, is sent at 2, and its `arrival` (client_wait 2) comes
    after the `cancelled` record at 2 (README "Event records": the further arrivals of
    requests sent because a slot freed), then its admission and the dispatch."""
    s = simulate([req("a", 0, 4, 6), req("b", 0, 4, 1), cancel("a", 2)],
                 max_concurrency=1, **OPTS)
    assert [(e["event"], e.get("id"), e.get("client_wait")) for e in s.at(2)] == [
        ("cancelled", "a", None), ("arrival", "b", 2), ("admitted", "b", None),
        ("snapshot", None, None), ("dispatch", None, None)]


# --- the run summary -------------------------------------------------------------------

def test_summary_client_wait_statistics():
    """C = 1, THREE: client waits a 0, b 3, c 4 (see the first test). Sorted [0, 3, 4]:
    mean 7/3 = 2.3333 (ticks, 4 decimals); nearest rank p50 = rank ceil(1.5) = 2 -> 3;
    p90 = rank ceil(2.7) = 3 -> 4; p99 = rank ceil(2.97) = 3 -> 4; max 4.
    TTFT is 1 for each, E2EL [3, 1, 2]: mean 2, max 3; queue delay all 0."""
    s = simulate(THREE, max_concurrency=1, **OPTS)
    m = s.summary
    assert [m[f"client_wait_{k}"] for k in ("mean", "p50", "p90", "p99", "max")] == [
        2.3333, 3, 4, 4, 4]
    assert (m["ttft_mean"], m["ttft_max"], m["e2el_mean"], m["e2el_max"]) == (1, 1, 2, 3)
    assert (m["queue_delay_mean"], m["queue_delay_max"]) == (0, 0)


def test_summary_client_wait_leaves_out_unsent_requests():
    """C = 1, THREE with b cancelled at 1 before it was sent: only a (wait 0) and c
    (wait 3) were sent, so the sample is [0, 3]: mean 1.5, p50 = rank ceil(1.0) = 1 -> 0,
    p90 = rank ceil(1.8) = 2 -> 3, p99 -> 3, max 3."""
    s = simulate(THREE + [cancel("b", 1)], max_concurrency=1, **OPTS)
    m = s.summary
    assert [m[f"client_wait_{k}"] for k in ("mean", "p50", "p90", "p99", "max")] == [
        1.5, 0, 3, 3, 3]


def test_without_max_concurrency_nothing_waits():
    """No max_concurrency (open loop), THREE: every request is sent at its arrival 0, all
    three are admitted at 0 (5 <= 8 blocks) and prefilled together at 0 (first tokens at
    1); b finishes at 1, c at 2 (one decode at 1), a at 3 (decodes at 1 and 2). client
    wait 0 for all; no arrival event has a `client_wait` field; the summary's client
    waits are all 0 (three samples of 0)."""
    s = simulate(THREE, **OPTS)
    assert times(s, "a") == (0, 0, 0, 1, 3)
    assert times(s, "b") == (0, 0, 0, 1, 1)
    assert times(s, "c") == (0, 0, 0, 1, 2)
    assert [latencies(s, r)[0] for r in "abc"] == [0, 0, 0]
    assert arrivals(s) == [(0, "a", None), (0, "b", None), (0, "c", None)]
    assert all("client_wait" not in e for e in s.of("arrival"))
    m = s.summary
    assert [m[f"client_wait_{k}"] for k in ("mean", "p50", "p90", "p99", "max")] == [
        0, 0, 0, 0, 0]


# --- the command line --------------------------------------------------------------------

CONFIG = {"type": "config", "block_size": 4, "num_blocks": 8, "policy": "continuous"}


def test_max_concurrency_from_the_trace_config(tmp_path):
    """`max_concurrency: 1` in the trace config with THREE: `replay --json` reports the
    waits of the first test (client_wait_max 4, mean 2.3333), makespan 6, the option as
    1 and its origin `trace`."""
    path = write(tmp_path, [dict(CONFIG, max_concurrency=1)] + THREE)
    status, out, err = run(["replay", path, "--json"])
    assert status == 0, err
    doc = json.loads(out)
    r = doc["runs"][0]
    assert (r["client_wait_mean"], r["client_wait_max"], r["makespan"]) == (2.3333, 4, 6)
    assert doc["options"]["max_concurrency"] == 1
    assert doc["origin"]["max_concurrency"] == "trace"


def test_max_concurrency_flag_overrides_the_trace_config(tmp_path):
    """Config says 1, `--max-concurrency 2` wins: the C = 2 run of THREE, where only c
    waits (1 tick): client waits [0, 0, 1], mean 1/3 = 0.3333, p50 0, max 1; makespan 3.
    With `--requests` the per_request list gives c sent 1, client_wait 1, ttft 1,
    e2el 2 (arrival 0)."""
    path = write(tmp_path, [dict(CONFIG, max_concurrency=1)] + THREE)
    status, out, err = run(["replay", path, "--json", "--requests", "--max-concurrency", "2"])
    assert status == 0, err
    doc = json.loads(out)
    r = doc["runs"][0]
    assert (r["client_wait_mean"], r["client_wait_p50"], r["client_wait_max"],
            r["makespan"]) == (0.3333, 0, 1, 3)
    assert doc["options"]["max_concurrency"] == 2
    assert doc["origin"]["max_concurrency"] == "flag"
    c = {rec["id"]: rec for rec in r["per_request"]}["c"]
    assert (c["arrival"], c["sent"], c["client_wait"], c["ttft"], c["e2el"]) == (0, 1, 1, 1, 2)


def test_requests_table_has_a_sent_column_only_with_max_concurrency(tmp_path):
    """`replay --requests` with `--max-concurrency 1` over THREE lists a `sent` column
    after `arrival`: a 0/0 admitted 0 first 1 finished 3, b 0/3 admitted 3 first 4
    finished 4, c 0/4 admitted 4 first 5 finished 6; all finished_length_capped (N = M),
    P 4, cached 0, no preemption, useful rows P + N - 1 = 6, 4, 5, replayed 0. Without
    the flag the same table has no `sent` column."""
    path = write(tmp_path, [CONFIG] + THREE)
    status, out, err = run(["replay", path, "--requests", "--max-concurrency", "1"])
    assert status == 0, err
    lines = out.splitlines()
    i = lines.index("requests under continuous (times in ticks)")
    assert lines[i + 1].split() == ["id", "arrival", "sent", "admitted", "first", "token",
                                    "finished", "status", "P", "N", "cached", "preempt",
                                    "useful", "rows", "replayed"]
    assert [line.split() for line in lines[i + 2:i + 5]] == [
        ["a", "0", "0", "0", "1", "3", "finished_length_capped", "4", "3", "0", "0", "6", "0"],
        ["b", "0", "3", "3", "4", "4", "finished_length_capped", "4", "1", "0", "0", "4", "0"],
        ["c", "0", "4", "4", "5", "6", "finished_length_capped", "4", "2", "0", "0", "5", "0"],
    ]
    status, out, err = run(["replay", path, "--requests"])
    assert status == 0, err
    lines = out.splitlines()
    i = lines.index("requests under continuous (times in ticks)")
    assert lines[i + 1].split() == ["id", "arrival", "admitted", "first", "token",
                                    "finished", "status", "P", "N", "cached", "preempt",
                                    "useful", "rows", "replayed"]
    assert lines[i + 3].split() == ["b", "0", "0", "1", "1", "finished_length_capped", "4",
                                    "1", "0", "0", "4", "0"]
