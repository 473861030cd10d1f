"""Seeded random workloads with forced preemptions: lifecycle and accounting invariants.

Each seed builds a small trace (1-20 requests arriving at ticks 0-12 with
prompts of 1-16 and 1-12 outputs, half with token ids; block size 4, 4-12
blocks, token_budget 1-24, max_rows 1-6, prefill_chunk 1-8, release_delay 0-3;
cancellations; 0-6 manual preemptions at ticks 0-40 of requests already
arrived by then) and replays it under `continuous` and `serial`, with
`resume_order` front and arrival. An independent model, fed only by the event
stream, checks every dispatch row (phase, tokens, token ids, emits) and every
lifecycle event against the rules of §4, §5 and §7; the engine's own full
audit runs at every boundary and an `on_state` listener checks conservation.
"""
from __future__ import annotations

import functools
import json
import random

import pytest

from conftest import slow_beyond, trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.records.options import Options
from scheduler_sim.io.trace import parse_trace

B = 4
SEEDS = range(40)
POLICIES = ("continuous", "serial")
RESUME_ORDERS = ("front", "arrival")
TERMINAL_EVENTS = ("finished", "rejected", "cancelled", "timeout", "stalled")


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for positive b."""
    return -(-a // b)


def random_trace(seed: int) -> tuple[dict, list[dict]]:
    """(config, records) of one seeded workload; ids r0..r{n-1}; half carry token ids."""
    rng = random.Random(seed)
    budget = rng.randint(1, 24)
    config = {"block_size": B, "num_blocks": rng.randint(4, 12), "token_budget": budget,
              "max_rows": rng.randint(1, 6), "prefill_chunk": rng.randint(1, 8),
              "release_delay": rng.randint(0, 3)}
    records: list[dict] = []
    arrivals = {}
    for i in range(rng.randint(1, 20)):
        rid = f"r{i}"
        arrival = rng.randint(0, 12)
        prompt = rng.randint(1, 16)
        output = rng.randint(1, 12)
        record = {"type": "request", "id": rid, "arrival": arrival}
        if rng.random() < 0.5:
            record["prompt_token_ids"] = [1000 * (i + 1) + j for j in range(prompt)]
            record["output_token_ids"] = [1000 * (i + 1) + 500 + j for j in range(output)]
        else:
            record["prompt_tokens"] = prompt
            record["output_tokens"] = output
        if rng.random() < 0.3:
            record["max_tokens"] = output + rng.randint(0, 3)
        records.append(record)
        arrivals[rid] = arrival
    ids = list(arrivals)
    for rid in ids:
        if rng.random() < 0.2:
            records.append({"type": "cancel", "id": rid, "at": arrivals[rid] + rng.randint(0, 15)})
    for _ in range(rng.randint(0, 6)):
        at = rng.randint(0, 40)
        # A random request among those already arrived at `at` (any, if none has).
        arrived = [rid for rid in ids if arrivals[rid] <= at] or ids
        rid = rng.choice(arrived)
        records.append({"type": "preempt", "id": rid, "at": max(arrivals[rid], at)})
    return config, records


class Model:
    """What one request should look like, rebuilt from the event stream alone."""

    def __init__(self, record: dict) -> None:
        self.rid = record["id"]
        if "prompt_token_ids" in record:
            self.prompt = len(record["prompt_token_ids"])
            self.n = len(record["output_token_ids"])
            self.rows = record["prompt_token_ids"] + record["output_token_ids"]
        else:
            self.prompt = record["prompt_tokens"]
            self.n = record["output_tokens"]
            self.rows = None
        self.m = record.get("max_tokens", self.n)
        self.credit = ceil_div(self.prompt + self.m - 1, B)
        self.state = None          # None, waiting, running, preempted, or a terminal label
        self.cursor = 0            # resident rows
        self.high = 0              # most rows ever written
        self.restore = 0           # rows a recompute must rebuild
        self.emitted = 0           # outputs the client has seen
        self.preempted_outputs: list[int] = []
        self.terminal_events = 0


def check_events(config: dict, records: list[dict], events: list[dict],
                 resume_order: str) -> None:
    """Replay the event stream through the model; assert every lifecycle rule on the way.

    The model also keeps the FCFS waiting queue: arrivals join the tail, a victim
    goes to the head (`front`) or back to its (arrival, trace position) place
    (`arrival`); every admission and every `admission_blocked` names the head.
    """
    nb = config["num_blocks"]
    models = {r["id"]: Model(r) for r in records if r["type"] == "request"}
    requests = [r for r in records if r["type"] == "request"]
    key = {r["id"]: (r["arrival"], i) for i, r in enumerate(requests)}
    queue: list[str] = []
    last_tick = -1
    other_at_tick = False
    for e in events:
        kind, tick = e["event"], e["tick"]
        assert tick >= last_tick, f"ticks go backwards at {e}"
        if tick != last_tick:
            last_tick, other_at_tick = tick, False
        if kind == "finished":
            assert not other_at_tick, f"E1: finished after other events at tick {tick}: {e}"
        else:
            other_at_tick = True
        m = models.get(e.get("id")) if "id" in e else None
        if kind == "arrival":
            assert m.state is None
            m.state = "waiting"
            queue.append(m.rid)
        elif kind == "rejected":
            assert m.state == "waiting" and m.credit > nb, e
            assert queue[-1] == m.rid, e
            queue.pop()
            m.state = "finished_ignored"
            m.terminal_events += 1
        elif kind == "admitted":
            assert m.state in ("waiting", "preempted"), e
            assert e["resumed"] is (m.state == "preempted"), e
            assert e["reserved"] == m.credit, e
            assert queue and queue[0] == m.rid, (e, queue)
            queue.pop(0)
            m.state = "running"
        elif kind == "admission_blocked":
            assert m.state in ("waiting", "preempted"), e
            assert queue and queue[0] == m.rid, (e, queue)
        elif kind == "preempted":
            assert m.state == "running", e
            assert e["outputs"] == m.emitted, f"outputs kept {e} vs model {m.emitted}"
            assert e["rows"] == m.cursor, e
            assert e["blocks_freed"] == ceil_div(m.cursor, B), e
            assert e["reason"] == "manual", e
            if m.preempted_outputs:
                assert e["outputs"] >= m.preempted_outputs[-1], "outputs moved back"
            m.preempted_outputs.append(e["outputs"])
            m.restore = m.high
            m.cursor = 0
            m.state = "preempted"
            if resume_order == "front":
                queue.insert(0, m.rid)
            else:
                pos = next((i for i, q in enumerate(queue) if key[q] > key[m.rid]), len(queue))
                queue.insert(pos, m.rid)
        elif kind == "preempt_ignored":
            assert m.state not in (None, "running"), e
            assert e["status"] == m.state, e
        elif kind == "finished":
            assert m.state == "running", e
            assert m.emitted == m.n, e
            status = "finished_length_capped" if m.n == m.m else "finished_stopped"
            assert e["status"] == status, e
            m.state = status
            m.terminal_events += 1
        elif kind == "cancelled":
            assert m.state in ("waiting", "running", "preempted"), e
            assert e["state"] == m.state, e
            if m.state != "running":
                queue.remove(m.rid)
            m.state = "finished_aborted"
            m.terminal_events += 1
        elif kind == "cancel_ignored":
            assert m.state is not None and m.state.startswith("finished_"), e
            assert e["status"] == m.state, e
        elif kind in ("stalled", "timeout"):
            raise AssertionError(f"continuous/serial never stall or time out: {e}")
        elif kind == "snapshot":
            states = [x.state for x in models.values()]
            assert e["waiting"] == sum(s in ("waiting", "preempted") for s in states) == len(queue), e
            assert e["running"] == sum(s == "running" for s in states), e
            assert e["allocated"] + e["draining"] + e["free"] == nb, e
            assert e["reserved"] + e["draining"] <= nb, e
        elif kind == "dispatch":
            assert e["done"] == tick + 1, e
            rows = e["rows"]
            assert 1 <= len(rows) <= config["max_rows"], e
            assert len({r["id"] for r in rows}) == len(rows), e
            assert e["tokens"] == sum(r["tokens"] for r in rows) <= config["token_budget"], e
            for row in rows:
                check_row(models[row["id"]], row, config)
        elif kind == "released":
            assert e["blocks"] >= 1, e
        else:
            raise AssertionError(f"unexpected event {e}")
    for m in models.values():
        assert m.terminal_events == 1, f"{m.rid} ended {m.terminal_events} times"
    assert queue == []


def check_row(m: Model, row: dict, config: dict) -> None:
    """One dispatch row against the model: phase, size, token ids and emission (L3)."""
    assert m.state == "running", row
    tokens, start = row["tokens"], m.cursor
    assert tokens >= 1, row
    if start < m.restore:
        assert row["phase"] == "recompute", (row, start, m.restore)
        assert start + tokens <= m.restore and row["emits"] is False, row
        assert tokens <= config["prefill_chunk"], row
    elif start < m.prompt:
        assert row["phase"] == "prefill", (row, start)
        assert start + tokens <= m.prompt and tokens <= config["prefill_chunk"], row
        assert row["emits"] is (start + tokens == m.prompt), row
    else:
        assert row["phase"] == "decode" and tokens == 1 and row["emits"] is True, row
    if m.rows is not None:
        assert row["token_ids"] == m.rows[start:start + tokens], (row, start)
    else:
        assert "token_ids" not in row, row
    m.cursor = start + tokens
    m.high = max(m.high, m.cursor)
    if row["emits"]:
        m.emitted += 1
        assert m.emitted <= m.n, row


def run_once(config: dict, records: list[dict], policy: str, resume_order: str):
    """Replay once with the full audit and a conservation listener;
    return (result, event dicts, block counts seen by on_state)."""
    trace = parse_trace(trace_bytes([{"type": "config", **config}] + records), "random.jsonl")
    options = Options.resolve(trace.config, {"resume_order": resume_order})
    nb = config["num_blocks"]
    events: list[dict] = []
    states: list[tuple] = []

    def on_state(tick: int, state: dict, after_dispatch: bool) -> None:
        assert state["allocated"] + state["draining"] + state["free"] == nb, (tick, state)
        assert state["reserved"] + state["draining"] <= nb, (tick, state)
        # Under reservation every request's blocks lie within its credit (A3).
        assert state["allocated"] <= state["reserved"], (tick, state)
        assert min(state.values()) >= 0, (tick, state)
        states.append((tick, after_dispatch, tuple(sorted(state.items()))))

    result = Engine(trace.workload, options, policy,
                    on_event=lambda ev: events.append(ev.to_dict()), on_state=on_state,
                    audit=True).run()
    return result, events, states


@functools.lru_cache(maxsize=None)
def first_run(seed: int, policy: str, resume_order: str):
    """The first replay of a seed's workload, shared by the tests below."""
    config, records = random_trace(seed)
    return run_once(config, records, policy, resume_order)


@pytest.mark.parametrize("resume_order", RESUME_ORDERS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", slow_beyond(SEEDS, 5))
def test_random_workload_with_preemptions_keeps_lifecycle_invariants(seed, policy, resume_order):
    """One seeded workload: conservation at every boundary, each request ends once, finished
    requests have useful rows P+N-1, N emitting rows and replay equal to the rows of their
    preemptions, outputs never move back, each preempt record yields exactly one event at its
    tick, and a second replay gives identical events."""
    config, records = random_trace(seed)
    result, events, states = first_run(seed, policy, resume_order)
    context = json.dumps({"config": config, "records": records})
    assert not result.stalled, context
    check_events(config, records, events, resume_order)

    preempt_records = sorted(
        ((r["at"], i, r["id"]) for i, r in enumerate(records) if r["type"] == "preempt"))
    answered = [(e["tick"], e["id"]) for e in events
                if e["event"] in ("preempted", "preempt_ignored")]
    assert answered == [(at, rid) for at, _, rid in preempt_records], context
    cancel_records = sorted(
        ((r["at"], i, r["id"]) for i, r in enumerate(records) if r["type"] == "cancel"))
    answered = [(e["tick"], e["id"]) for e in events
                if e["event"] in ("cancelled", "cancel_ignored")]
    assert answered == [(at, rid) for at, _, rid in cancel_records], context

    by_id = {r.rid: r for r in result.requests}
    models = {r["id"]: r for r in records if r["type"] == "request"}
    own: dict[str, list[dict]] = {rid: [] for rid in models}
    own_rows: dict[str, list[dict]] = {rid: [] for rid in models}
    for e in events:
        if "id" in e:
            own[e["id"]].append(e)
        elif e["event"] == "dispatch":
            for row in e["rows"]:
                own_rows[row["id"]].append(row)
    for rid in models:
        r = by_id[rid]
        p, n = r.prompt_tokens, r.output_tokens
        mine = own[rid]
        preempts = [e for e in mine if e["event"] == "preempted"]
        rows = own_rows[rid]
        assert r.status.is_finished, (rid, context)
        assert sum(e["event"] in TERMINAL_EVENTS for e in mine) == 1, (rid, context)
        assert r.preemptions == len(preempts), (rid, context)
        outs = [e["outputs"] for e in preempts] + [r.outputs]
        assert outs == sorted(outs), (rid, outs, context)
        assert r.useful_rows + r.replay_rows == sum(row["tokens"] for row in rows), (rid, context)
        assert r.outputs == sum(1 for row in rows if row["emits"]), (rid, context)
        if r.status.label in ("finished_stopped", "finished_length_capped"):
            assert r.useful_rows == p + n - 1, (rid, context)
            assert r.outputs == n, (rid, context)
            assert r.replay_rows == sum(e["rows"] for e in preempts), (rid, context)
            assert r.finished_at is not None and r.first_token_at is not None, (rid, context)
            assert r.admitted_at <= r.first_token_at <= r.finished_at, (rid, context)

    summary = result.summary
    dispatch_rows = [row for e in events if e["event"] == "dispatch" for row in e["rows"]]
    assert summary["iterations"] == sum(1 for e in events if e["event"] == "dispatch")
    assert summary["preemptions"] == sum(1 for e in events if e["event"] == "preempted")
    assert summary["replay_rows"] == sum(r.replay_rows for r in result.requests)
    assert summary["useful_rows"] == sum(r.useful_rows for r in result.requests)
    assert summary["recompute_tokens"] == sum(row["tokens"] for row in dispatch_rows
                                              if row["phase"] == "recompute")
    assert summary["output_tokens"] == sum(1 for row in dispatch_rows if row["emits"])
    assert summary["requests"] == len(models)

    # E8: the same input gives the same events, states and summary.
    again, events2, states2 = run_once(config, records, policy, resume_order)
    assert events2 == events
    assert states2 == states
    assert again.summary == summary


def test_random_workloads_exercise_preemption():
    """The generator is not vacuous: across the seeds, under continuous with front resume,
    there are real preemptions (some with outputs > 0, some mid-prefill with 0), ignored
    ones, recompute rows, cancellations, releases, blocked admissions and finished requests."""
    kinds: dict[str, int] = {}
    with_outputs = without_outputs = recompute = 0
    for seed in SEEDS:
        _, events, _ = first_run(seed, "continuous", "front")
        for e in events:
            kinds[e["event"]] = kinds.get(e["event"], 0) + 1
            if e["event"] == "preempted":
                if e["outputs"]:
                    with_outputs += 1
                elif e["rows"]:
                    without_outputs += 1
            if e["event"] == "dispatch":
                recompute += sum(1 for r in e["rows"] if r["phase"] == "recompute")
    assert with_outputs >= 5 and without_outputs >= 1 and recompute >= 5, (
        with_outputs, without_outputs, recompute)
    for kind in ("preempted", "preempt_ignored", "cancelled", "finished", "released",
                 "admission_blocked"):
        assert kinds.get(kind, 0) >= 3, (kind, kinds)
