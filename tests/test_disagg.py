"""Prefill/decode disaggregation (fleet/disagg.py): hand-computed copies, pins, aborts."""
from __future__ import annotations

import json
import math
import random

import pytest

from conftest import req, run_cli, slow_beyond, trace_bytes, write_trace
from scheduler_sim.engine.summary import request_record
from scheduler_sim.fleet import DisaggFleet
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.policies import POLICIES
from scheduler_sim.records.options import Options

TERMINAL = ("finished", "rejected", "cancelled", "timeout", "stalled")


def _pd(records, options):
    """The trace and options of a disaggregated replay: block size 4, one prefill and
    one decode replica unless `options` say otherwise (as the trace's config)."""
    config = dict(block_size=4, prefill_replicas=1, decode_replicas=1)
    config.update(options)
    full = [dict(config, type="config")] + [dict(r, type=r.get("type", "request"))
                                            for r in records]
    trace = parse_trace(trace_bytes(full), "pd.jsonl")
    return trace, Options.resolve(trace.config, {})


def _run(records, policy="continuous", audit=True, **options):
    """(result, events as dicts with their replica) of a disaggregated replay."""
    trace, opts = _pd(records, options)
    events = []
    result = DisaggFleet(
        trace.workload, opts, policy, audit=audit,
        on_event=lambda i: (lambda e: events.append(
            dict(e.to_dict(clock=opts_clock(trace, opts)), replica=i)))).run()
    return result, events


def opts_clock(trace, opts):
    from scheduler_sim.records.clock import Clock
    return Clock.of(opts)


def _of(events, kind, replica=None):
    return [e for e in events if e["event"] == kind
            and (replica is None or e["replica"] == replica)]


def _record(result, rid):
    from scheduler_sim.engine.summary import request_record
    (r,) = [r for r in result.requests if r.rid == rid]
    return request_record(r, result.clock, None)


# --- the life of one request, in ticks ----------------------------------------------


@pytest.mark.parametrize("policy", ["continuous", "vllm", "sglang", "serial"])
def test_one_request_prefills_copies_and_decodes(policy):
    """P=6, N=3, B=4. Prefill replica 0 computes 6 rows at 0 (done 1): `prefilled` with
    2 pinned blocks. Decode replica 1 receives it at 1, admits it, takes ceil(6/4) = 2
    blocks and copies 6 tokens for one tick (1 -> 2). At 2 it waits again with 5 rows,
    is admitted, writes row 6 emitting output 1 at 3 (the client's first token), decodes
    outputs 2 and 3 at 4 and 5. TTFT 3, E2EL 5; P + N - 1 = 8 useful rows."""
    result, events = _run([req("a", 0, 6, 3)], policy, num_blocks=8)
    assert [(e["tick"], e["pinned"]) for e in _of(events, "prefilled", 0)] == [(1, 2)]
    assert _of(events, "finished", 0) == []  # the prompt-only run is not an end
    (start,) = _of(events, "transfer_started")
    assert (start["tick"], start["replica"], start["prefill_replica"], start["decode_replica"],
            start["tokens"], start["blocks"], start["done"]) == (1, 1, 0, 1, 6, 2, 2)
    (done,) = _of(events, "transfer_done")
    assert (done["tick"], done["duration"], done["aborted"]) == (2, 1, False)
    rows = [(e["tick"], [(r["phase"], r["tokens"], r["emits"]) for r in e["rows"]])
            for e in _of(events, "dispatch", 1)]
    assert rows == [(2, [("prefill", 1, True)]), (3, [("decode", 1, True)]),
                    (4, [("decode", 1, True)])]
    (snap,) = [e for e in _of(events, "snapshot", 1) if e["tick"] == 2]
    assert (snap["allocated"], snap["free"]) == (2, 6)  # the copied prompt's blocks
    rec = _record(result, "a")
    assert (rec["first_token"], rec["ttft"], rec["e2el"], rec["transfer_time"],
            rec["useful_rows"], rec["outputs"], rec["status"]) == (
        3, 3, 5, 1, 8, 3, "finished_length_capped")
    s = result.summary
    assert (s["requests"], s["completed"], s["output_tokens"], s["transfers"],
            s["transfer_tokens"], s["transfer_time_mean"], s["ttft_mean"]) == (
        1, 1, 3, 1, 6, 1, 3)
    assert [r["role"] for r in result.replicas] == ["prefill", "decode"]
    assert [r["requests"] for r in result.replicas] == [1, 1]


def test_pins_hold_the_prefill_blocks_until_the_copy_lands():
    """release_delay 3. Without a pin the prefill replica's 2 blocks would drain at 1 and
    come back at 4; pinned, they drain only when the copy lands at 2: `released` at 5."""
    _, events = _run([req("a", 0, 6, 3)], num_blocks=8, release_delay=3)
    assert [(e["tick"], e["blocks"]) for e in _of(events, "released", 0)] == [(5, 2)]


def test_pins_block_the_prefill_replica_while_the_decode_side_is_full():
    """Two blocks per replica. a (P=6, N=3) prefills at 0 and is copied 1 -> 2; b (P=8,
    N=1, 2 blocks) arrives at 0 behind a on the prefill replica and is admitted there only
    when a's pins go at 2. On the decode replica b waits until a finishes at 5 (a holds
    both blocks), and its pinned blocks on the prefill replica stay held meanwhile."""
    result, events = _run([req("a", 0, 6, 3), req("b", 0, 8, 1)], num_blocks=2)
    admitted = [(e["tick"], e["replica"], e["id"]) for e in _of(events, "admitted")]
    assert admitted[:3] == [(0, 0, "a"), (1, 1, "a"), (2, 0, "b")]
    assert ("b", 3) in [(e["id"], e["tick"]) for e in _of(events, "prefilled", 0)]
    starts = [(e["tick"], e["id"]) for e in _of(events, "transfer_started")]
    assert starts == [(1, "a"), (5, "b")]
    blocked = [e["tick"] for e in _of(events, "admission_blocked", 1) if e["id"] == "b"]
    assert blocked[0] == 3
    # b's blocks on the prefill replica: pinned from 3 until its copy lands at 6.
    assert [e["tick"] for e in _of(events, "transfer_done") if e["id"] == "b"] == [6]
    assert _record(result, "b")["first_token"] == 7
    assert result.summary["completed"] == 2


# --- the copy's duration under a cost model -----------------------------------------


def test_copy_duration_from_the_models_kv_bytes():
    """Llama-3-8B keeps 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B per token. Six
    tokens over 100 Gb/s: 786,432 B / 12.5e9 B/s = 62.91 us, so 63 steps of 1 us."""
    result, events = _run([req("a", 0, 6, 3)], num_blocks=8, kv_link_gbps=100,
                          cost_model="llama-3-8b/h100-sxm")
    seconds = 2 * 32 * 8 * 128 * 2 * 6 / (100e9 / 8)
    steps = math.ceil(seconds / 1e-6)
    assert steps == 63
    (start,) = _of(events, "transfer_started")
    (done,) = _of(events, "transfer_done")
    assert done["duration"] == pytest.approx(63e-6)
    assert done["time"] == pytest.approx(start["time"] + 63e-6)
    assert start["done"] == done["time"]
    assert _record(result, "a")["transfer_time"] == pytest.approx(63e-6)


# --- cancellations -----------------------------------------------------------------


def test_cancel_on_the_prefill_side():
    """Cancelled at 0 on the prefill replica: it ends there once, never reaches a decode
    replica, and nothing is copied."""
    result, events = _run([req("a", 0, 6, 3), {"type": "cancel", "id": "a", "at": 0}],
                          num_blocks=8)
    assert [(e["replica"], e["state"]) for e in _of(events, "cancelled")] == [(0, "waiting")]
    assert _of(events, "transfer_started") == [] and _of(events, "prefilled") == []
    rec = _record(result, "a")
    assert (rec["status"], rec["output_tokens"]) == ("finished_aborted", 3)
    assert result.summary["finished_aborted"] == 1 and result.summary["requests"] == 1


def test_cancel_during_the_prefill_acts_after_the_hand_off():
    """Cost model: the 6-token prefill runs from 0 to about 6.5 ms; a cancel at tick 1
    (1 ms) waits for its completion (E4). By then the request waits on the decode
    replica: cancelled there (state waiting) at the prefill's completion, before any
    copy; its pins go at once, so b, needing the whole prefill pool, is admitted then."""
    _, events = _run([req("a", 0, 6, 3), req("b", 1, 8, 1),
                      {"type": "cancel", "id": "a", "at": 1}], num_blocks=2,
                     cost_model="llama-3-8b/h100-sxm", tick_seconds=0.001)
    (prefilled,) = [e for e in _of(events, "prefilled", 0) if e["id"] == "a"]
    (cancel,) = _of(events, "cancelled")
    assert (cancel["replica"], cancel["state"], cancel["time"]) == (
        1, "waiting", prefilled["time"])
    assert prefilled["time"] > 0.001
    assert [e["id"] for e in _of(events, "transfer_started")] == ["b"]
    (b_admit,) = _of(events, "admitted", 0)[1:]
    assert (b_admit["id"], b_admit["time"]) == ("b", prefilled["time"])


def test_cancel_during_the_copy_aborts_it():
    """Cost model, a 0.001 Gb/s link: 6 tokens take 6.291456 s. Cancelled at tick 100
    (0.1 s) while copying: `cancelled` on the decode replica in state
    waiting_for_remote_kv, its blocks let go at once; the prefill replica's pins stay
    until the copy's drain is acknowledged at its end, `transfer_done` aborted: b (2
    blocks, the whole prefill pool) is admitted there exactly then."""
    result, events = _run([req("a", 0, 6, 3), req("b", 50, 8, 1),
                           {"type": "preempt", "id": "a", "at": 90},
                           {"type": "cancel", "id": "a", "at": 100}],
                          num_blocks=2, kv_link_gbps=0.001,
                          cost_model="llama-3-8b/h100-sxm", tick_seconds=0.001)
    (start,) = [e for e in _of(events, "transfer_started") if e["id"] == "a"]
    (cancel,) = _of(events, "cancelled")
    assert (cancel["replica"], cancel["state"], cancel["time"]) == (
        1, "waiting_for_remote_kv", 0.1)
    (ignored,) = _of(events, "preempt_ignored")  # copying: not running
    assert (ignored["replica"], ignored["status"], ignored["time"]) == (
        1, "waiting_for_remote_kv", 0.09)
    (done,) = [e for e in _of(events, "transfer_done") if e["id"] == "a"]
    assert done["aborted"] is True
    assert done["time"] == pytest.approx(start["time"] + 6.291456)
    (b_admit,) = [e for e in _of(events, "admitted", 0) if e["id"] == "b"]
    assert b_admit["time"] == done["time"]
    s = result.summary
    assert (s["transfers"], s["transfers_aborted"], s["finished_aborted"]) == (1, 1, 1)
    assert _record(result, "a")["status"] == "finished_aborted"
    # The decode replica's blocks came back at the cancel: its snapshot after shows them.
    assert result.replicas[1]["finished_aborted"] == 1


def test_cancel_on_the_decode_side_after_the_copy():
    """Cancelled at 3, after its first output at 3: on the decode replica, as usual."""
    result, events = _run([req("a", 0, 6, 3), {"type": "cancel", "id": "a", "at": 3}],
                          num_blocks=8)
    (cancel,) = _of(events, "cancelled")
    assert (cancel["tick"], cancel["replica"], cancel["state"]) == (3, 1, "running")
    rec = _record(result, "a")
    assert (rec["outputs"], rec["ttft"], rec["status"]) == (1, 3, "finished_aborted")


def test_forced_preemptions_act_where_the_request_is():
    """A preempt at 1 finds a on the decode replica's queue, just handed off: ignored
    (waiting). A preempt at 4 after 2 outputs: under vllm it recomputes P + 2 = 8 rows
    emitting output 3, on its decode replica (the copy is gone)."""
    result, events = _run([req("a", 0, 6, 3), {"type": "preempt", "id": "a", "at": 1},
                           {"type": "preempt", "id": "a", "at": 4}], "vllm", num_blocks=8)
    ignored = _of(events, "preempt_ignored")
    assert [(e["tick"], e["replica"], e["status"]) for e in ignored] == [(1, 1, "waiting")]
    (pre,) = _of(events, "preempted")
    assert (pre["tick"], pre["replica"], pre["outputs"]) == (4, 1, 2)
    rows = [(e["tick"], [(r["phase"], r["tokens"]) for r in e["rows"]])
            for e in _of(events, "dispatch", 1)]
    assert (4, [("recompute", 8)]) in rows
    assert _record(result, "a")["preemptions"] == 1


# --- L5 at the allocator: four blocks --------------------------------------------------


def test_l5_four_blocks_pinned_producer_and_aborted_copy():
    """4 blocks. A producer holds 2; a copy pins them and fills the other 2. Preempting the
    producer frees nothing (pinned); aborting the copy drains its 2 (release_delay 5):
    no block is free until the copy's drain is acknowledged (unpin) and the delays pass."""
    a = BlockAllocator(4, 4)
    a.grow("producer", 8)
    handle = a.pin(a.table("producer"))
    a.grow("copy", 8)
    assert (a.held, a.free) == (4, 0)
    assert a.free_request("producer", 1, 5) == 0     # preempted: pinned blocks stay held
    assert (a.held, a.draining, a.free) == (4, 0, 0)
    assert a.free_request("copy", 1, 5) == 2         # the aborted copy's blocks drain
    assert (a.held, a.draining, a.free) == (2, 2, 0)
    a.check()
    assert a.unpin(handle, 3, 5) == 2                # the drain acknowledged at 3
    assert (a.held, a.draining, a.free) == (0, 4, 0)
    assert a.release_expired(6) == 2 and a.free == 2
    assert a.release_expired(8) == 2 and a.free == 4


# --- random workloads ---------------------------------------------------------------


def _workload(seed: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    t = 0
    for i in range(rng.randint(1, 25)):
        t += rng.choice([0, 0, 1, 3, 10])
        prompt = rng.randint(1, 30)
        record = {"id": f"r{i}", "arrival": t, "prompt_tokens": prompt,
                  "output_tokens": rng.randint(1, 30)}
        if seed % 4 == 1:
            record["prompt_token_ids"] = [rng.randint(0, 2) * 100 + k if k < 8
                                          else rng.randint(0, 99) for k in range(prompt)]
        records.append(record)
        if rng.random() < 0.15:
            records.append({"type": "cancel", "id": f"r{i}", "at": t + rng.randint(0, 12)})
        if rng.random() < 0.15:
            records.append({"type": "preempt", "id": f"r{i}", "at": t + rng.randint(0, 12)})
    return records


def _random_options(seed: int) -> dict:
    rng = random.Random(1000 + seed)
    options = dict(num_blocks=rng.randint(8, 40), token_budget=rng.randint(4, 48),
                   max_rows=rng.randint(1, 6), release_delay=rng.choice([0, 0, 2]),
                   prefill_replicas=rng.randint(1, 3), decode_replicas=rng.randint(1, 3),
                   router=rng.choice(["round-robin", "least-loaded", "power-of-two",
                                      "prefix-affinity"]))
    if seed % 3 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002,
                       kv_link_gbps=rng.choice([0.01, 1, 100]))
    if seed % 4 == 1:
        options.update(prefix_caching=True)
    if seed % 5 == 2:
        options.update(waiting_timeout=rng.randint(3, 20))
    return options


@pytest.mark.parametrize("seed", slow_beyond(range(12), 3))  # 0-2: a cost model, prefixes, timeouts
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_random_workloads_end_each_request_once(seed, policy):
    """Every request ends exactly once over all replicas (one terminal record, one final
    record), conservation holds at every boundary (audit), and two runs are identical."""
    records = _workload(seed)
    options = _random_options(seed)
    first, events = _run(records, policy, **options)
    second, again = _run(records, policy, **options)
    assert events == again and first.summary == second.summary
    assert first.replicas == second.replicas
    ids = [r["id"] for r in records if r.get("type", "request") == "request"]
    ends = sorted(e["id"] for e in events if e["event"] in TERMINAL)
    assert ends == sorted(ids)
    assert sorted(r.rid for r in first.requests) == sorted(ids)
    assert all(r.status.is_finished for r in first.requests)
    s = first.summary
    assert s["requests"] == len(ids)
    statuses = sum(s[k] for k in ("finished_stopped", "finished_length_capped",
                                  "finished_aborted", "finished_ignored",
                                  "finished_timeout", "finished_error"))
    assert statuses == len(ids)
    assert s["output_tokens"] == sum(r.outputs for r in first.requests)
    # Each copy started ends once: landed or aborted.
    assert len(_of(events, "transfer_started")) == len(_of(events, "transfer_done"))
    assert s["transfers"] + s["transfers_aborted"] == len(_of(events, "transfer_started"))
    # Completed requests wrote P + N - 1 useful rows on their decode replica.
    for r in first.requests:
        if r.status.label in ("finished_stopped", "finished_length_capped"):
            assert r.useful_rows == r.prompt_tokens + r.output_tokens - 1


# --- options and the command line ---------------------------------------------------


@pytest.mark.parametrize("given, message", [
    (dict(prefill_replicas=1), "both >= 1 or both 0"),
    (dict(prefill_replicas=1, decode_replicas=1, replicas=2), "replicas must stay 1"),
    (dict(prefill_replicas=1, decode_replicas=1, max_concurrency=2), "max_concurrency"),
    (dict(prefill_replicas=1, decode_replicas=1, full_prompt_gate=False),
     "full_prompt_gate false is not modelled with disaggregated replicas"),
])
def test_bad_combinations_are_refused(tmp_path, given, message):
    path = write_trace(tmp_path, [dict({"type": "config"}, **given), req("a", 0, 4, 2)])
    code, out, err = run_cli(["replay", path])
    assert code == 2 and message in err


def test_options_make_a_fleet_and_show_only_when_used():
    opts = Options.resolve({}, {"prefill_replicas": 1, "decode_replicas": 2})
    assert opts.fleet and opts.disagg and opts.problems() == []
    assert "kv_link_gbps" in opts.as_dict()
    assert "kv_link_gbps" not in Options().as_dict() and not Options().disagg


def test_cli_replay_with_events_json_requests_and_table(tmp_path):
    path = write_trace(tmp_path, [{"type": "config", "block_size": 4, "num_blocks": 8},
                                  req("a", 0, 6, 3), req("b", 1, 5, 2)])
    events_path = tmp_path / "events.jsonl"
    code, out, err = run_cli(["replay", path, "--prefill-replicas", "1", "--decode-replicas",
                              "1", "--kv-link-gbps", "100", "--events", str(events_path),
                              "--requests"])
    assert code == 0, err
    assert "0 prefill" in out and "1 decode" in out and "KV transfers" in out
    assert "kv_link_gbps has no effect without a cost model" in out
    lines = [json.loads(line) for line in events_path.read_text().splitlines()]
    assert all("replica" in line for line in lines)
    assert {"prefilled", "transfer_started", "transfer_done"} <= {e["event"] for e in lines}
    code, out, err = run_cli(["replay", path, "--prefill-replicas", "1", "--decode-replicas",
                              "1", "--json", "--requests"])
    assert code == 0, err
    run = json.loads(out)["runs"][0]
    assert (run["requests"], run["completed"], run["transfers"]) == (2, 2, 2)
    assert [r["role"] for r in run["replicas"]] == ["prefill", "decode"]
    assert [r["transfer_time"] for r in run["per_request"]] == [1, 1]
    assert run["per_request"][0]["ttft"] == 3


def test_check_compares_a_disaggregated_fleets_requests(tmp_path):
    """`check` replays the disaggregated fleet: prefill 0 -> 1, copy 1 -> 2, the last
    prompt row 2 -> 3 (output 1), a decode 3 -> 4 (output 2)."""
    path = write_trace(tmp_path, [{"type": "config", "prefill_replicas": 1,
                                   "decode_replicas": 1}, req("a", 0, 4, 2),
                                  {"type": "expect", "id": "a", "outputs": 2, "ttft": 3,
                                   "finished": 4, "transfer_time": 1, "replica": 1},
                                  {"type": "expect", "transfers": 1, "requests": 1}])
    code, out, err = run_cli(["check", path])
    assert code == 0, out + err


def test_cached_tokens_count_the_prompt_not_computed_and_a_decode_hit_shortens_the_copy(
        tmp_path):
    """b resends a's 32-token prompt (8 hash blocks of 4): its prefill replica finds 7
    blocks (28 rows; the last token is always computed), and so does its decode
    replica, which then copies only 32 - 28 = 4 tokens. cached_tokens counts the 28
    rows b did not compute, once."""
    hashes = [1, 2, 3, 4, 5, 6, 7, 8]
    path = write_trace(tmp_path, [
        {"type": "config", "hash_block_size": 4},
        req("a", 0, 32, 2, block_hashes=hashes), req("b", 10, 32, 2, block_hashes=hashes)])
    code, out, err = run_cli(["replay", path, "--policy", "vllm", "--prefix-caching",
                              "--block-size", "4", "--num-blocks", "64", "--prefill-replicas",
                              "1", "--decode-replicas", "1", "--json", "--requests"])
    assert code == 0, err
    run = json.loads(out)["runs"][0]
    b = [r for r in run["per_request"] if r["id"] == "b"][0]
    assert b["cached_tokens"] == 28
    assert run["cached_tokens"] == 28
    assert run["transfer_tokens"] == 32 + 4


def _quiet(records, policy, fast, listen=False, **options):
    """A disaggregated replay without the audit (so that folding may run), with or
    without folding, and with or without an event listener."""
    trace, opts = _pd(records, options)
    events = []
    on_event = ((lambda i: (lambda e: events.append((i, e.to_dict())))) if listen else None)
    fleet = DisaggFleet(trace.workload, opts, policy, fast_forward=fast, on_event=on_event)
    result = fleet.run()
    records_out = sorted((request_record(r) for r in result.requests), key=lambda r: r["id"])
    folded = sum(e.folded for e in fleet.engines)
    return (result.summary, result.replicas, records_out, events), folded


@pytest.mark.parametrize("seed", slow_beyond(range(16), 3))  # 0-2: a cost model, prefixes, timeouts
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_folding_on_disaggregated_replicas_changes_nothing(seed, policy):
    """Decode replicas fold steady stretches up to the next hand-off, copy landing,
    arrival or action anywhere: summaries, per-replica summaries, request records and
    event records are those of stepping one dispatch at a time."""
    records = _workload(seed)
    for r in records:  # longer decodes, so that there are stretches to fold
        if r.get("type", "request") == "request":
            r["output_tokens"] *= 3
    options = _random_options(seed)
    stepped, _ = _quiet(records, policy, False, **options)
    folded, _ = _quiet(records, policy, True, **options)
    assert folded == stepped
    # With a listener the replicas step (a folded stretch would write one replica's
    # records ahead of the others'): the same records as without folding.
    stepped_events, _ = _quiet(records, policy, False, listen=True, **options)
    folded_events, folds = _quiet(records, policy, True, listen=True, **options)
    assert folded_events == stepped_events and folds == 0
    assert folded_events[:3] == stepped[:3]


def test_decode_replicas_do_fold():
    records = [req("a", 0, 8, 200), req("b", 0, 8, 200)]
    _, folded = _quiet(records, "continuous", True, num_blocks=64)
    assert folded > 300
    _, stepped = _quiet(records, "continuous", False, num_blocks=64)
    assert stepped == 0


def test_a_landed_request_goes_before_every_request_that_holds_no_blocks():
    from scheduler_sim.requests.queues import FcfsQueue, HoldingFirst
    from scheduler_sim.requests.request import Request
    a, b, c, d = (Request(name, i, 0, 4, 2) for i, name in enumerate("abcd"))
    queue = HoldingFirst(FcfsQueue())
    queue.add(a)
    queue.hold(c)
    queue.prepend(b)  # a preempted victim: front of the others, behind the held
    queue.hold(d)
    assert list(queue) == [c, d, b, a] and len(queue) == 4 and d in queue
    assert queue.peek() is c and queue.pop() is c
    queue.remove(d)
    assert [queue.pop(), queue.pop()] == [b, a] and not queue


def _stress(seed: int):
    """The kind of workload that used to stall decode replicas: tiny pools, many
    copies landing while requests run."""
    rng = random.Random(seed)
    records, t = [], 0
    for i in range(rng.randint(5, 30)):
        t += rng.choice([0, 0, 1, 2])
        records.append({"id": f"r{i}", "arrival": t, "prompt_tokens": rng.randint(1, 24),
                        "output_tokens": rng.randint(1, 40)})
    options = dict(num_blocks=rng.randint(8, 20), token_budget=rng.randint(8, 32),
                   max_rows=rng.randint(2, 6), prefill_replicas=rng.randint(1, 2),
                   decode_replicas=rng.randint(1, 2), release_delay=rng.choice([0, 0, 2]))
    return records, options


@pytest.mark.parametrize("seed", slow_beyond([0, 1, 3, 5, 15, 17, 19, 40], 3))
@pytest.mark.parametrize("policy", ["vllm", "sglang", "continuous"])
def test_landed_copies_never_deadlock_a_decode_replica(seed, policy):
    """Requests waiting with a landed copy hold blocks: they go first, SGLang's
    decode side lets them join past its NO_TOKEN reservation and latch, and may
    retract its last running request for them; no request ends in a stall (these
    seeds stalled before), and conservation holds throughout (audit)."""
    records, options = _stress(seed)
    result, events = _run(records, policy, **options)
    assert result.summary["finished_error"] == 0
    assert not _of(events, "stalled")


def _stress_wide(seed: int):
    """As `_stress`, with prefixes, cancellations, preemptions, timeouts, a cost model
    and slow links, and pools down to 6 blocks."""
    rng = random.Random(seed)
    records, t = [], 0
    for i in range(rng.randint(5, 40)):
        t += rng.choice([0, 0, 1, 2, 5])
        p = rng.randint(1, 30)
        r = {"id": f"r{i}", "arrival": t, "prompt_tokens": p,
             "output_tokens": rng.randint(1, 40)}
        if seed % 3 == 0:
            r["prompt_token_ids"] = [rng.randint(0, 2) * 100 + k if k < 8 else rng.randint(0, 99)
                                     for k in range(p)]
        records.append(r)
        if rng.random() < 0.1:
            records.append({"type": "cancel", "id": f"r{i}", "at": t + rng.randint(0, 15)})
        if rng.random() < 0.1:
            records.append({"type": "preempt", "id": f"r{i}", "at": t + rng.randint(0, 15)})
    options = dict(num_blocks=rng.randint(6, 24), token_budget=rng.randint(4, 32),
                   max_rows=rng.randint(1, 6), prefill_replicas=rng.randint(1, 3),
                   decode_replicas=rng.randint(1, 3), release_delay=rng.choice([0, 0, 2]),
                   router=rng.choice(["round-robin", "least-loaded", "power-of-two",
                                      "prefix-affinity"]))
    if seed % 3 == 0:
        options["prefix_caching"] = True
    if seed % 5 == 1:
        options["waiting_timeout"] = rng.randint(3, 30)
    if seed % 4 == 2:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002,
                       kv_link_gbps=rng.choice([0.01, 1, 100]))
    return records, options


@pytest.mark.parametrize("seed", [42, 70, 90, 314])
def test_sglang_decode_replicas_let_landed_copies_in(seed):
    """SGLang's decode side: a landed copy joins past the latch (seed 42), and with
    one row (max_rows 1) the last running request is retracted for the copies
    holding the pool (70, 90, 314); these stalled before."""
    records, options = _stress_wide(seed)
    result, events = _run(records, "sglang", **options)
    assert result.summary["finished_error"] == 0


def test_order_at_one_step_completions_landings_handoffs_arrivals_then_steps():
    """D7 at tick 2: b's prefill completes on replica 0 (prefilled), a's copy lands on
    replica 1, b is handed off to replica 1, c arrives on replica 0; then replica 0
    steps (c), then replica 1 (a admitted again, b admitted and its copy started)."""
    result, events = _run([req("a", 0, 4, 3), req("b", 1, 4, 2), req("c", 2, 4, 2)],
                          num_blocks=16)
    at2 = [(e["replica"], e["event"], e.get("id")) for e in events
           if e["tick"] == 2 and e["event"] != "snapshot"]
    assert at2 == [(0, "prefilled", "b"), (1, "transfer_done", "a"), (1, "arrival", "b"),
                   (0, "arrival", "c"), (0, "admitted", "c"), (0, "dispatch", None),
                   (1, "admitted", "a"), (1, "admitted", "b"), (1, "transfer_started", "b"),
                   (1, "dispatch", None)]
