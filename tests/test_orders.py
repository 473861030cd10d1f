"""Waiting-queue orders (sjf, edf, lof, random, lpm) and waiting_timeout (§6, README
"Policies" and the `timeout` event), plus seeded random workloads under every policy."""
from __future__ import annotations

import io
import json
import random
from collections import Counter

import pytest

from conftest import req, simulate, slow_beyond, trace_bytes
from scheduler_sim.cli.main import main
from scheduler_sim.engine.core import Engine
from scheduler_sim.records.errors import UsageError
from scheduler_sim.records.options import Options
from scheduler_sim.policies import POLICIES
from scheduler_sim.kv.block_keys import BlockKeys
from scheduler_sim.requests.queues import QUEUE_ORDERS, LpmQueue, make_queue
from scheduler_sim.requests.request import Request
from scheduler_sim.io.trace import parse_trace

QUICKSTART = "traces/quickstart.jsonl"
TERMINAL_EVENTS = {"finished", "rejected", "cancelled", "timeout", "stalled"}


def admissions(s) -> list[tuple[int, str]]:
    """(tick, id) of every `admitted` event, in order."""
    return [(e["tick"], e["id"]) for e in s.of("admitted")]


# --- the factory ---------------------------------------------------------------------


def test_make_queue_rejects_an_unknown_order_naming_every_known_one():
    """make_queue('bogus') raises ValueError whose message lists all seven orders."""
    assert set(QUEUE_ORDERS) == {"fcfs", "priority", "sjf", "edf", "lpm", "lof", "random"}
    with pytest.raises(ValueError) as info:
        make_queue("bogus")
    message = str(info.value)
    assert "'bogus'" in message
    for name in ("fcfs", "priority", "sjf", "edf", "lpm", "lof", "random"):
        assert name in message


# --- sjf, edf, lof through a serial replay -------------------------------------------


def test_sjf_admits_smallest_prompt_plus_max_tokens_first_ties_by_trace_order():
    """Serial, all at tick 0 (B=4, 8 blocks): sizes P+M are a 4+4=8, b 2+2=4, c 3+1=4,
    d 1+5=6 (N=1, so ranking by N would put d first), e 2+2=4 (N=1). sjf: b, c, e (the 4s
    in trace order), d, a. Serial runs one at a time: b prefills at 0 and decodes at 1
    (done 2); c at 2 (done 3); e at 3 (done 4); d at 4 (done 5); a at 5 (done 5+4=9)."""
    s = simulate([req("a", 0, 4, 4), req("b", 0, 2, 2), req("c", 0, 3, 1),
                  req("d", 0, 1, 1, max_tokens=5), req("e", 0, 2, 1, max_tokens=2)],
                 policy="serial", block_size=4, num_blocks=8, token_budget=16, order="sjf")
    assert admissions(s) == [(0, "b"), (2, "c"), (3, "e"), (4, "d"), (5, "a")]
    assert {rid: r.finished_at for rid, r in s.req.items()} == {
        "a": 9, "b": 2, "c": 3, "d": 5, "e": 4}
    assert s.req["d"].status.label == "finished_stopped"


def test_edf_admits_earliest_deadline_first_none_last_ties_by_trace_order():
    """Serial, six one-token requests at tick 0 with deadlines a 10, b none, c 5, d 5,
    e 3, f none: edf gives e, c, d (5s in trace order), a, then b, f (no deadline, trace
    order); each takes one tick, so they are admitted at ticks 0..5."""
    recs = [req("a", 0, 1, 1, deadline=10), req("b", 0, 1, 1), req("c", 0, 1, 1, deadline=5),
            req("d", 0, 1, 1, deadline=5), req("e", 0, 1, 1, deadline=3), req("f", 0, 1, 1)]
    s = simulate(recs, policy="serial", block_size=4, num_blocks=4, order="edf")
    assert admissions(s) == [(0, "e"), (1, "c"), (2, "d"), (3, "a"), (4, "b"), (5, "f")]


def test_lof_admits_largest_max_tokens_first_ties_by_trace_order():
    """Serial, one-output requests at tick 0 with max_tokens a 4, b 2, c 1, d 5, e 2:
    lof gives d, a, b, e (the 2s in trace order), c, one per tick."""
    recs = [req("a", 0, 1, 1, max_tokens=4), req("b", 0, 1, 1, max_tokens=2),
            req("c", 0, 1, 1), req("d", 0, 1, 1, max_tokens=5),
            req("e", 0, 1, 1, max_tokens=2)]
    s = simulate(recs, policy="serial", block_size=4, num_blocks=4, order="lof")
    assert admissions(s) == [(0, "d"), (1, "a"), (2, "b"), (3, "e"), (4, "c")]


def test_fcfs_is_trace_order_for_the_same_workload():
    """The lof workload under fcfs is admitted in trace order a, b, c, d, e: the orders
    above are the queue's doing, not the serial policy's."""
    recs = [req("a", 0, 1, 1, max_tokens=4), req("b", 0, 1, 1, max_tokens=2),
            req("c", 0, 1, 1), req("d", 0, 1, 1, max_tokens=5),
            req("e", 0, 1, 1, max_tokens=2)]
    s = simulate(recs, policy="serial", block_size=4, num_blocks=4)
    assert admissions(s) == [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e")]


# --- random ---------------------------------------------------------------------------


def random_admission_order(seed: int) -> list[str]:
    """Serial admission order of six one-token requests at tick 0 under order random."""
    recs = [req(f"r{i}", 0, 1, 1) for i in range(6)]
    s = simulate(recs, policy="serial", block_size=4, num_blocks=4, order="random", seed=seed)
    return [rid for _, rid in admissions(s)]


def test_random_order_is_reproducible_for_a_seed_and_differs_between_seeds():
    """Under order random, seed 0 gives the same admission order on two runs, the same
    order as make_queue('random', seed=0) fed the same requests, and a permutation of all
    six; seed 1 gives a different order for these six requests."""
    first = random_admission_order(0)
    assert random_admission_order(0) == first
    assert sorted(first) == [f"r{i}" for i in range(6)]
    q = make_queue("random", seed=0)
    for i in range(6):
        q.add(Request(f"r{i}", i, 0, 1, 1))
    assert [r.rid for r in q] == first
    assert random_admission_order(1) != first


# --- lpm ------------------------------------------------------------------------------


def lpm_queue_with(n: int, threshold: int = 128) -> tuple[LpmQueue, list[Request]]:
    """An lpm queue holding n requests (trace order) where only the last one scores 1."""
    reqs = [Request(f"r{i}", i, 0, 4, 1) for i in range(n)]
    last = reqs[-1]
    q = make_queue("lpm", lpm_threshold=threshold, scorer=lambda r: 1 if r is last else 0)
    for r in reqs:
        q.add(r)
    return q, reqs


def test_lpm_queue_sorts_at_128_waiting_and_falls_back_to_fcfs_at_129():
    """With the default threshold 128: 128 waiting, the last (the only one with a cached
    prefix) moves to the head at refresh, the rest keep trace order; 129 waiting, refresh
    leaves plain fcfs (r0 first) and reports the fallback."""
    q, reqs = lpm_queue_with(128)
    q.refresh()
    assert q.fallback is False
    assert list(q) == [reqs[-1]] + reqs[:-1]
    assert q.peek() is reqs[127]
    q, reqs = lpm_queue_with(129)
    q.refresh()
    assert q.fallback is True
    assert list(q) == reqs
    assert q.peek() is reqs[0]


def lpm_run(fillers: int, **options):
    """Serial + prefix caching + lpm: 's' (ids 1..8, two full blocks of B=4) runs at 0 and
    leaves its blocks cached; at tick 5 `fillers` plain P=4 requests arrive, then 'h'
    (ids 1..8, 99), which matches both cached blocks."""
    recs = [req("s", 0, 8, 1, prompt_token_ids=list(range(1, 9)))]
    recs += [req(f"f{i}", 5, 4, 1) for i in range(fillers)]
    recs.append(req("h", 5, 9, 1, prompt_token_ids=list(range(1, 9)) + [99]))
    return simulate(recs, policy="serial", block_size=4, num_blocks=8, order="lpm",
                    prefix_caching=True, **options)


def test_lpm_replay_prefers_the_cached_prefix_with_128_waiting_not_with_129():
    """127 fillers + h = 128 waiting at tick 5: h (8 cached tokens) is admitted first at 5,
    f0 at 6. 128 fillers + h = 129 waiting: fcfs admits f0 at 5; at 6 only 128 wait, so
    the sort puts h next (admitted at 6 with its 8 cached tokens)."""
    s = lpm_run(127)
    adm = s.of("admitted")
    assert [(e["tick"], e["id"], e["cached_tokens"]) for e in adm[:3]] == [
        (0, "s", 0), (5, "h", 8), (6, "f0", 0)]
    s = lpm_run(128)
    adm = s.of("admitted")
    assert [(e["tick"], e["id"], e["cached_tokens"]) for e in adm[:3]] == [
        (0, "s", 0), (5, "f0", 0), (6, "h", 8)]


def test_lpm_threshold_option_moves_the_fallback():
    """With lpm_threshold 1, two waiting (f0, h) exceed it: f0 first at 5; with
    lpm_threshold 2 they do not: h first at 5, f0 at 6."""
    assert admissions(lpm_run(1, lpm_threshold=1))[1:] == [(5, "f0"), (6, "h")]
    assert admissions(lpm_run(1, lpm_threshold=2))[1:] == [(5, "h"), (6, "f0")]


def test_lpm_ties_keep_the_order_the_last_sort_left():
    """Queue a, b, c (trace order). First refresh with b scoring 1: b, a, c. The cache
    changes and every score becomes 0: the sort is stable over the list as SGLang keeps
    it, so the ties stay b, a, c (not arrival order); d, arriving now, joins the tail."""
    a, b, c, d = (Request(rid, i, 0, 4, 1) for i, rid in enumerate("abcd"))
    scores = {a: 0, b: 1, c: 0, d: 0}
    q = make_queue("lpm", scorer=lambda r: scores[r])
    for r in (a, b, c):
        q.add(r)
    q.refresh()
    assert [r.rid for r in q] == ["b", "a", "c"]
    scores[b] = 0
    q.add(d)
    q.refresh()
    assert [r.rid for r in q] == ["b", "a", "c", "d"]


def test_lpm_ranks_at_most_the_blocks_a_lookup_could_reuse():
    """B=1. a (P=2) matches its whole prompt, 2 blocks, but a lookup reuses at most
    P + 0 - 1 = 1 of them; b (P=4) matches 1. Both rank 1: a stays first."""
    a, b = Request("a", 0, 0, 2, 1), Request("b", 1, 0, 4, 1)
    q = make_queue("lpm", scorer=lambda r: 2 if r is a else 1)
    for r in (b, a):
        q.add(r)
    q.refresh()
    assert [r.rid for r in q] == ["b", "a"]


def keyed(rid: str, index: int, ids: list[int], size: int = 4) -> Request:
    r = Request(rid, index, 0, len(ids), 1)
    r.block_keys = BlockKeys(index, len(ids), size, size, prompt_ids=ids)
    return r


def test_lpm_puts_a_request_sharing_32_uncached_tokens_with_an_earlier_one_last():
    """B=4, nothing cached. x, y, z wait with 40-token prompts; y shares its first 32
    tokens (8 blocks) with x, z shares 28 (7 blocks). SGLang's in-batch check: a
    request that found at most 32 tokens cached and shares at least 32 with one before
    it goes last, so that x computes the prefix and y then finds it: x, z, y. If y had
    found 9 blocks (36 tokens) cached it would not be checked, and would lead."""
    shared = list(range(1, 29))
    x = keyed("x", 0, shared + [29, 30, 31, 32] + list(range(200, 208)))
    y = keyed("y", 1, shared + [29, 30, 31, 32] + list(range(300, 308)))
    z = keyed("z", 2, shared + list(range(400, 412)))
    found = {x: 0, y: 0, z: 0}
    q = make_queue("lpm", scorer=found.__getitem__, block_size=4)
    for r in (x, y, z):
        q.add(r)
    q.refresh()
    assert [r.rid for r in q] == ["x", "z", "y"]
    found[y] = 9
    q.refresh()
    assert [r.rid for r in q] == ["y", "x", "z"]


def test_lpm_fallback_above_threshold_leaves_the_list_as_it_is():
    """Threshold 2: a, b waiting with b scoring 1 sort to b, a; then c arrives (3 > 2
    waiting) and scores 2: the list is not sorted while more than 2 wait (SGLang skips
    the matching), so it stays b, a, c."""
    a, b, c = (Request(rid, i, i, 4, 1) for i, rid in enumerate("abc"))
    scores = {a: 0, b: 1, c: 2}
    q = make_queue("lpm", lpm_threshold=2, scorer=lambda r: scores[r])
    q.add(a)
    q.add(b)
    q.refresh()
    assert [r.rid for r in q] == ["b", "a"]
    q.add(c)
    q.refresh()
    assert q.fallback is True
    assert [r.rid for r in q] == ["b", "a", "c"]


def test_lpm_without_prefix_caching_is_a_usage_error():
    """order lpm without prefix_caching: Options.problems() names it, Engine raises
    UsageError, `replay --order lpm` exits 2 with the message; with --prefix-caching it
    exits 0."""
    opts = Options.resolve({"order": "lpm"})
    problems = opts.problems()
    assert len(problems) == 1 and "lpm" in problems[0] and "prefix_caching" in problems[0]
    assert Options.resolve({"order": "lpm", "prefix_caching": True}).problems() == []
    trace = parse_trace(trace_bytes([req("a", 0, 4, 1)]), "t.jsonl")
    with pytest.raises(UsageError):
        Engine(trace.workload, opts, "continuous")
    out, err = io.StringIO(), io.StringIO()
    assert main(["replay", QUICKSTART, "--order", "lpm"], out=out, err=err) == 2
    assert "prefix_caching" in err.getvalue()
    assert out.getvalue() == ""
    out, err = io.StringIO(), io.StringIO()
    assert main(["replay", QUICKSTART, "--order", "lpm", "--prefix-caching"],
                out=out, err=err) == 0


def test_unknown_order_on_the_command_line_exits_2_listing_the_orders():
    """`replay --order bogus` exits 2 and the message names the known orders."""
    out, err = io.StringIO(), io.StringIO()
    assert main(["replay", QUICKSTART, "--order", "bogus"], out=out, err=err) == 2
    assert "bogus" in err.getvalue() and "sjf" in err.getvalue() and "lof" in err.getvalue()


# --- waiting_timeout -------------------------------------------------------------------


def test_a_waiting_request_times_out_one_tick_after_waiting_exactly_the_timeout():
    """Serial, T=2: a (P=1, N=3) runs 0..3 (prefill at 0, decodes at 1 and 2, finished at
    3); b waits from 0, has waited 2 = T at tick 2 (kept) and 3 > T at tick 3: at tick 3,
    after a's `finished` and the cancellation of c (also due at 3), b ends with
    `timeout` {waited 3}, status finished_timeout, and is never admitted."""
    s = simulate([req("a", 0, 1, 3), req("b", 0, 4, 1), req("c", 0, 4, 1),
                  {"type": "cancel", "id": "c", "at": 3}],
                 policy="serial", block_size=4, num_blocks=8, waiting_timeout=2)
    tick3 = [(e["event"], e.get("id")) for e in s.at(3)]
    assert tick3 == [("finished", "a"), ("cancelled", "c"), ("timeout", "b")]
    assert s.of("timeout") == [{"tick": 3, "event": "timeout", "id": "b", "waited": 3}]
    b = s.req["b"]
    assert (b.status.label, b.finished_at, b.admitted_at) == ("finished_timeout", 3, None)
    assert s.summary["finished_timeout"] == 1
    assert s.summary["finished_aborted"] == 1
    assert s.summary["completed"] == 1
    assert [rid for _, rid in admissions(s)] == ["a"]


def test_a_request_admitted_after_waiting_exactly_the_timeout_is_never_timed_out():
    """Serial, T=3: a (P=1, N=3) finishes at 3; b has waited 3 = T then and is admitted
    at 3; it is still running at its would-be expiry tick 4 and finishes normally at 5
    (prefill at 3, decode at 4)."""
    s = simulate([req("a", 0, 1, 3), req("b", 0, 4, 2)],
                 policy="serial", block_size=4, num_blocks=8, waiting_timeout=3)
    assert s.of("timeout") == []
    b = s.req["b"]
    assert (b.admitted_at, b.finished_at, b.status.label) == (3, 5, "finished_length_capped")
    assert s.summary["finished_timeout"] == 0


def test_a_preempted_request_times_out_counting_from_its_preemption():
    """Continuous, order priority, 4 blocks of 4, T=3: a (priority 5, P=4, N=10, credit
    ceil(13/4)=4) runs from 0; b (priority 0, P=4, N=8, credit 3) is blocked at 1. The
    manual preemption of a at 2 frees its credit: b (better priority) is admitted at 2 and
    a waits (reservation) from 2. It has waited 4 > 3 at tick 6 (not 4, as it would be
    counted from its arrival): `timeout` {a, waited 4}, state preempted -> finished_timeout."""
    s = simulate([req("a", 0, 4, 10, priority=5), req("b", 1, 4, 8),
                  {"type": "preempt", "id": "a", "at": 2}],
                 policy="continuous", block_size=4, num_blocks=4, waiting_timeout=3,
                 order="priority")
    assert admissions(s) == [(0, "a"), (2, "b")]
    assert s.of("timeout") == [{"tick": 6, "event": "timeout", "id": "a", "waited": 4}]
    a = s.req["a"]
    assert (a.status.label, a.finished_at, a.preemptions, a.outputs) == (
        "finished_timeout", 6, 1, 2)
    assert s.req["b"].finished_at == 10
    assert s.summary["finished_timeout"] == 1


def test_a_timeout_at_a_far_tick_happens_exactly_then_with_idle_time_skipped():
    """Dynamic with batch_window 10**9 and max_rows 3 never starts a batch for a lone
    request; with T=10**6 it times out at exactly 10**6 + 1 (waited 10**6 + 1), with no
    dispatch, and the run returns at once."""
    s = simulate([req("a", 0, 4, 1)], policy="dynamic", block_size=4, num_blocks=8,
                 max_rows=3, batch_window=10**9, waiting_timeout=10**6)
    assert [(e["tick"], e["event"]) for e in s.events] == [(0, "arrival"), (10**6 + 1, "timeout")]
    assert s.of("timeout")[0]["waited"] == 10**6 + 1
    assert s.req["a"].status.label == "finished_timeout"
    assert s.summary["iterations"] == 0


# --- random workloads under every policy -----------------------------------------------

SEEDS = range(30)
ORDERS = ("fcfs", "priority", "sjf", "edf", "lof", "random")


def random_workload(seed: int) -> tuple[list[dict], dict]:
    """A random small trace (requests, and for some seeds cancels and manual preempts)
    and its options, from `seed` alone."""
    rng = random.Random(seed)
    records: list[dict] = []
    extra: list[dict] = []
    for i in range(rng.randint(1, 14)):
        arrival = rng.randint(0, 20)
        output = rng.randint(1, 10)
        rec = {"type": "request", "id": f"r{i}", "arrival": arrival,
               "prompt_tokens": rng.randint(1, 16), "output_tokens": output,
               "priority": rng.randint(0, 3)}
        if rng.random() < 0.3:
            rec["max_tokens"] = output + rng.randint(1, 6)
        if rng.random() < 0.6:
            rec["deadline"] = arrival + rng.randint(0, 30)
        records.append(rec)
        if seed % 3 == 0 and rng.random() < 0.25:
            extra.append({"type": "cancel", "id": rec["id"], "at": arrival + rng.randint(0, 12)})
        if seed % 2 == 0 and rng.random() < 0.3:
            extra.append({"type": "preempt", "id": rec["id"], "at": arrival + rng.randint(0, 12)})
    budget = rng.randint(2, 24)
    options = {"block_size": 4, "num_blocks": rng.randint(4, 20), "token_budget": budget,
               "max_rows": rng.randint(1, 6), "release_delay": rng.randint(0, 2),
               "order": ORDERS[seed % len(ORDERS)], "seed": rng.randint(0, 5),
               "batch_window": rng.randint(0, 6),
               "schedule_conservativeness": rng.choice([0.3, 1.0, 1.5])}
    if rng.random() < 0.5:
        options["prefill_chunk"] = rng.randint(1, budget)
    if rng.random() < 0.4:
        options["waiting_timeout"] = rng.randint(2, 15)
    return records + extra, options


def replay_lines(records: list[dict], options: dict, policy: str):
    """Replay with the full audit; return the result and the JSON lines of its events."""
    trace = parse_trace(trace_bytes(records), "random.jsonl")
    opts = Options.resolve(trace.config, options)
    lines: list[str] = []
    result = Engine(trace.workload, opts, policy, on_event=lambda e: lines.append(e.to_json()),
                    audit=True).run()
    return result, lines


@pytest.mark.parametrize("seed", slow_beyond(SEEDS, 6))  # each order once
def test_random_workloads_under_every_policy(seed):
    """For one seeded workload and every registered policy: the audit holds at every
    boundary (A3), each request ends with exactly one terminal event, nothing stalls,
    completed requests wrote P+N-1 useful rows and emitted N outputs (no replay without a
    preemption), snapshots conserve blocks, and a second run is byte-identical (E8), also
    in its summary when nobody listens to the events."""
    records, options = random_workload(seed)
    specs = {r["id"]: r for r in records if r["type"] == "request"}
    assert set(POLICIES) == {"serial", "continuous", "vllm", "sglang", "static", "dynamic"}
    for policy in POLICIES:
        where = (seed, policy, options)
        result, lines = replay_lines(records, options, policy)
        events = [json.loads(line) for line in lines]
        assert not result.stalled, where
        ends = Counter(e["id"] for e in events if e["event"] in TERMINAL_EVENTS)
        assert ends == Counter({rid: 1 for rid in specs}), where
        emitted = Counter(row["id"] for e in events if e["event"] == "dispatch"
                          for row in e["rows"] if row["emits"])
        for r in result.requests:
            if r.status.label in ("finished_stopped", "finished_length_capped"):
                assert r.useful_rows == r.prompt_tokens + r.output_tokens - 1, (where, r)
                assert emitted[r.rid] == r.output_tokens == r.outputs, (where, r)
                if r.preemptions == 0:
                    assert r.replay_rows == 0, (where, r)
        for e in events:
            if e["event"] == "snapshot":
                assert e["allocated"] + e["draining"] + e["free"] == options["num_blocks"], where
                assert e["reserved"] + e["draining"] <= options["num_blocks"], where
        again, lines_again = replay_lines(records, options, policy)
        assert lines_again == lines, where
        assert again.summary == result.summary, where
        trace = parse_trace(trace_bytes(records), "random.jsonl")
        quiet = Engine(trace.workload, Options.resolve(trace.config, options), policy).run()
        assert quiet.summary == result.summary, where


def test_a_timeout_that_can_no_longer_fire_makes_no_boundary():
    """2 blocks, release_delay 10, waiting_timeout 8: a (admitted at 0) had a timeout check
    due at 9 that can never fire; b (arrived 1, blocked) times out at 1 + 8 + 1 = 10.
    Nothing happens at 9, so there is no record at tick 9."""
    s = simulate([req("a", 0, 4, 2), req("b", 1, 8, 1)], block_size=4, num_blocks=2,
                 release_delay=10, waiting_timeout=8)
    assert [e for e in s.events if e["tick"] == 9] == []
    assert [(e["tick"], e["event"]) for e in s.events if e["tick"] >= 2] == [
        (2, "finished"), (2, "admission_blocked"), (10, "timeout"), (12, "released")]
