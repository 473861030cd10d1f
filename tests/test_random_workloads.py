"""Sixty seeded random workloads under continuous and serial: conservation, lifecycle and
dispatch invariants that must hold for any trace (A3, E2, E5, E8, §11)."""
from __future__ import annotations

import random
from collections import Counter, defaultdict

import pytest

from conftest import slow_beyond, trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.records.options import Options
from scheduler_sim.io.trace import parse_trace

SEEDS = range(60)
POLICIES = ("continuous", "serial")
TERMINAL_EVENTS = {"finished", "rejected", "cancelled", "stalled", "timeout"}
BLOCK_SIZE = 4


def workload(seed: int) -> tuple[list[dict], dict]:
    """A random trace (request and cancel records) and its options, from `seed` alone."""
    rng = random.Random(seed)
    n = rng.randint(1, 25)
    records: list[dict] = []
    cancels: list[dict] = []
    for i in range(n):
        rid = f"r{i}"
        arrival = rng.randint(0, 30)
        output = rng.randint(1, 12)
        rec = {"type": "request", "id": rid, "arrival": arrival,
               "prompt_tokens": rng.randint(1, 20), "output_tokens": output}
        if rng.random() < 0.3:
            rec["max_tokens"] = output + rng.randint(1, 6)
        records.append(rec)
        roll = rng.random()
        if roll < 0.1:      # cancelled the moment it arrives (E2: before admission)
            cancels.append({"type": "cancel", "id": rid, "at": arrival})
        elif roll < 0.2:    # cancelled somewhere in its life
            cancels.append({"type": "cancel", "id": rid, "at": arrival + rng.randint(1, 15)})
        elif roll < 0.25:   # cancelled long after everything ended (E5: ignored)
            cancels.append({"type": "cancel", "id": rid, "at": 5000 + rng.randint(0, 9)})
        elif roll < 0.3:    # cancelled twice (E5: the second is ignored)
            at = arrival + rng.randint(0, 10)
            cancels.append({"type": "cancel", "id": rid, "at": at})
            cancels.append({"type": "cancel", "id": rid, "at": at + rng.randint(0, 3)})
    rng.shuffle(cancels)
    token_budget = rng.randint(1, 24)
    options = {
        "block_size": BLOCK_SIZE,
        "num_blocks": rng.randint(4, 20),
        "token_budget": token_budget,
        "max_rows": rng.randint(1, 6),
        "release_delay": rng.randint(0, 3),
    }
    if rng.random() < 0.5:
        options["prefill_chunk"] = rng.randint(1, token_budget)
    return records + cancels, options


def replay(records: list[dict], options: dict, policy: str):
    """Run the engine with audit=True; return (result, event dicts, JSON lines, states)."""
    trace = parse_trace(trace_bytes(records), "random.jsonl")
    opts = Options.resolve(trace.config, options)
    events: list[dict] = []
    lines: list[str] = []
    states: list[tuple[int, dict, bool]] = []

    def on_event(e):
        events.append(e.to_dict())
        lines.append(e.to_json())

    def on_state(tick, state, after_dispatch):
        states.append((tick, dict(state), after_dispatch))

    result = Engine(trace.workload, opts, policy, on_event=on_event, on_state=on_state,
                    audit=True).run()
    return result, events, lines, states


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", slow_beyond(SEEDS, 15))
def test_random_workload_invariants(seed, policy):
    """For one seeded workload: A3 at every boundary, each request ends exactly once, no
    stall, uninterrupted requests write P+N-1 useful rows and emit N outputs, dispatches
    respect token_budget, max_rows and prefill_chunk, and two runs are byte-identical."""
    records, options = workload(seed)
    num_blocks = options["num_blocks"]
    budget = options["token_budget"]
    max_rows = options["max_rows"]
    chunk = options.get("prefill_chunk", budget)
    specs = {r["id"]: r for r in records if r["type"] == "request"}
    first_cancel: dict[str, int] = {}
    for r in records:
        if r["type"] == "cancel":
            first_cancel[r["id"]] = min(r["at"], first_cancel.get(r["id"], r["at"]))

    result, events, lines, states = replay(records, options, policy)
    where = f"seed {seed} {policy} {options}"

    # A3 at every boundary (before and after the dispatch allocates).
    assert states, where
    for tick, st, _after in states:
        assert st["reserved"] + st["draining"] <= num_blocks, (where, tick, st)
        assert st["allocated"] + st["draining"] + st["free"] == num_blocks, (where, tick, st)
        assert min(st.values()) >= 0, (where, tick, st)
    for e in events:
        if e["event"] == "snapshot":
            assert e["allocated"] + e["draining"] + e["free"] == num_blocks, (where, e)
            assert e["reserved"] + e["draining"] <= num_blocks, (where, e)

    # Every request ends exactly once; nothing stalls.
    assert not result.stalled, where
    assert not [e for e in events if e["event"] == "stalled"], where
    ends = Counter(e["id"] for e in events if e["event"] in TERMINAL_EVENTS)
    assert ends == Counter({rid: 1 for rid in specs}), where
    end_event = {e["id"]: e for e in events if e["event"] in TERMINAL_EVENTS}
    reqs = {r.rid: r for r in result.requests}
    assert set(reqs) == set(specs), where
    for rid, r in reqs.items():
        assert r.status.is_finished, (where, rid)
    assert result.summary["requests"] == len(specs), where

    # Admission: FCFS order, worst-case credits (A1), head-of-line blocking, reasons.
    admitted = [e for e in events if e["event"] == "admitted"]
    order = [(specs[e["id"]]["arrival"], int(e["id"][1:])) for e in admitted]
    assert order == sorted(order), (where, [e["id"] for e in admitted])
    for e in admitted:
        spec = specs[e["id"]]
        m = spec.get("max_tokens", spec["output_tokens"])
        assert e["reserved"] == -(-(spec["prompt_tokens"] + m - 1) // BLOCK_SIZE), (where, e)
    blocked_ticks = set()
    for e in events:
        if e["event"] == "admission_blocked":
            blocked_ticks.add(e["tick"])
            if e["reason"] != "serial":
                assert e["reserved"] + e["draining"] + e["needed"] > num_blocks, (where, e)
                fits_later = e["reserved"] + e["needed"] <= num_blocks
                assert e["reason"] == ("draining" if fits_later else "reservation"), (where, e)
        elif e["event"] == "admitted":
            # Nothing is admitted at a tick after the head was reported blocked.
            assert e["tick"] not in blocked_ticks, (where, e)
    if policy == "serial":
        assert all(st["running"] <= 1 for _, st, _ in states), where

    # Dispatch shape.
    emits: Counter[str] = Counter()
    dispatched_at: defaultdict[str, list[int]] = defaultdict(list)
    for e in events:
        if e["event"] != "dispatch":
            continue
        rows = e["rows"]
        assert 1 <= len(rows) <= max_rows, (where, e)
        assert e["tokens"] == sum(row["tokens"] for row in rows), (where, e)
        assert e["tokens"] <= budget, (where, e)
        assert e["done"] == e["tick"] + 1, (where, e)
        row_ids = [row["id"] for row in rows]
        assert len(row_ids) == len(set(row_ids)), (where, e)
        for row in rows:
            assert row["tokens"] >= 1, (where, e)
            if row["phase"] == "decode":
                assert row["tokens"] == 1 and row["emits"] is True, (where, e)
            else:
                assert row["phase"] == "prefill", (where, e)  # no preemption here
                assert row["tokens"] <= chunk, (where, e)
            emits[row["id"]] += row["emits"]
            dispatched_at[row["id"]].append(e["tick"])

    # Per request.
    for rid, spec in specs.items():
        r = reqs[rid]
        end = end_event[rid]
        p, n = spec["prompt_tokens"], spec["output_tokens"]
        m = spec.get("max_tokens", n)
        if end["event"] == "rejected":
            # E6: only when its reservation could never fit, and it never ran.
            assert -(-(p + m - 1) // BLOCK_SIZE) > num_blocks, (where, rid)
            assert rid not in dispatched_at, (where, rid)
            assert r.status.label == "finished_ignored", (where, rid)
        elif end["event"] == "cancelled":
            assert r.status.label == "finished_aborted", (where, rid)
            # Dispatches last one tick, so the first cancel's tick is always a boundary.
            assert end["tick"] == first_cancel[rid], (where, rid)
            # E5: a cancelled request never runs again.
            assert all(t < end["tick"] for t in dispatched_at.get(rid, [])), (where, rid)
            assert emits[rid] < n, (where, rid)
            if first_cancel[rid] == spec["arrival"]:
                # E2: a cancel at the arrival tick removes the request before admission.
                assert end["tick"] == spec["arrival"], (where, rid)
                assert end["state"] == "waiting", (where, rid)
                assert rid not in dispatched_at, (where, rid)
        else:
            assert end["event"] == "finished", (where, end)
            assert r.outputs == n, (where, rid)
            assert r.useful_rows == p + n - 1, (where, rid, r.useful_rows)
            assert r.replay_rows == 0, (where, rid)
            assert r.preemptions == 0, (where, rid)
            assert emits[rid] == n, (where, rid, emits[rid])
            expected = "finished_length_capped" if n == m else "finished_stopped"
            assert r.status.label == expected == end["status"], (where, rid)
            assert r.finished_at == end["tick"], (where, rid)
            assert spec["arrival"] <= r.admitted_at < r.first_token_at <= r.finished_at, \
                (where, rid)
            if rid in first_cancel:
                assert first_cancel[rid] >= r.finished_at, (where, rid)

    # E8: a second run is byte-identical.
    again = replay(records, options, policy)[2]
    assert again == lines, where


def test_generator_covers_the_cases_it_promises():
    """Across the 60 seeds: some rejections, cancels at arrival, ignored cancels, double
    cancels, max_tokens > output, small prefill chunks and every release delay 0-3."""
    seen = Counter()
    delays = set()
    for seed in SEEDS:
        records, options = workload(seed)
        delays.add(options["release_delay"])
        seen["chunk"] += "prefill_chunk" in options and \
            options["prefill_chunk"] < options["token_budget"]
        specs = {r["id"]: r for r in records if r["type"] == "request"}
        cancel_ids = Counter(r["id"] for r in records if r["type"] == "cancel")
        seen["double"] += any(c == 2 for c in cancel_ids.values())
        for r in records:
            if r["type"] == "request":
                seen["max_tokens"] += "max_tokens" in r
                m = r.get("max_tokens", r["output_tokens"])
                seen["rejected"] += -(-(r["prompt_tokens"] + m - 1) // 4) > options["num_blocks"]
            else:
                seen["at_arrival"] += r["at"] == specs[r["id"]]["arrival"]
                seen["late"] += r["at"] >= 5000
    assert delays == {0, 1, 2, 3}
    for key in ("chunk", "double", "max_tokens", "rejected", "at_arrival", "late"):
        assert seen[key] >= 3, (key, seen)
