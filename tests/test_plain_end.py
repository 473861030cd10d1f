"""A request's arrival and end where nothing is shared or drained, in fewer calls:
`free_request`'s plain path (kv/freeing.py's `free_plain`), the engine's plain
loop of finished requests (`Dispatching._finish_ended`), the plain arrival
(engine/fast/plain_arrival.py) and the counted blocks taken inline
(`take_counted`). Each gives what the general path gives, and with an event
listener writes the records it writes."""
from __future__ import annotations

import random

import pytest

from conftest import trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.kv.allocator import BlockAllocator
from scheduler_sim.engine.spill import Spill
from scheduler_sim.records.options import Options
from scheduler_sim.requests.request import Request

B = 4


def _freed(shared: bool) -> tuple:
    """8 blocks of 4. 'a' holds a credit of 5 and 11 rows (blocks 0, 1, 2: 3 of its
    credit granted), 'b' 4 rows (block 3), both grown in this step (`step_growth`)."""
    a = BlockAllocator(8, B)
    a._shared = shared  # (True: the general path, block by block)
    assert a.frees_plainly is (not shared)
    a.reserve("a", 5)
    a.grow("a", 11)
    a.grow("b", 4)
    sent = a.free_request("a", now=3, delay=0)
    state = (sent, a.held, a.draining, a.free, a.reserved, a.granted,
             dict(a.step_growth), a.table("a"), a.credit("a"))
    a.grow("c", 20)  # 5 blocks: the top of the stack first, tail first, then fresh ids
    return state, a.table("c")


def test_a_plain_free_drops_the_credit_and_stacks_the_table_tail_first():
    """'a' freed: 3 blocks sent, held 1 ('b'), none draining, 7 free, no credit
    reserved or granted, its step growth gone ('b''s 1 left), no table. 'c' then takes 2, 1, 0 ('a''s
    tail first), then the never-used 4 and 5: the same as the general path."""
    plain = _freed(False)
    assert plain == ((3, 1, 0, 7, 0, 0, {"b": 1}, [], 0), [2, 1, 0, 4, 5])
    assert plain == _freed(True)


def test_a_plain_free_of_no_table_releases_the_credit_only():
    """A credit of 2 and no block: 0 sent, nothing reserved after."""
    a = BlockAllocator(4, B)
    a.reserve("a", 2)
    assert a.free_request("a", now=0, delay=0) == 0
    assert (a.reserved, a.granted, a.held, a.free) == (0, 0, 0, 4)


def test_counted_blocks_are_the_top_of_the_stack_then_fresh_ids():
    """10 blocks of 4: 'a' holds 12 rows (0, 1, 2) and 'b' 4 (3); 'a' freed leaves 2
    on top, and 'r' (a credit of 6) takes it for 4 rows. Five blocks taken by count:
    1, 0 (the rest of the stack, top first), then the never-used 4, 5 and 6 (as `grow`
    takes them): held 7 ('b', 'r' and the five), granted 6 of 'r''s credit. 'r' takes
    the last two of them for 12 rows: [2, 5, 6], and 1, 0 and 4 are still counted."""
    a = BlockAllocator(10, B)
    a.grow("a", 12)
    a.grow("b", 4)
    a.free_request("a", now=0, delay=0)
    a.reserve("r", 6)
    a.grow("r", 4)
    assert a.table("r") == [2]
    a.take_counted(5)
    assert a._counted == [1, 0, 4, 5, 6]
    assert (a.held, a.free, a.granted) == (7, 3, 6)
    a.give_counted("r", 12)
    assert (a.table("r"), a._counted) == ([2, 5, 6], [1, 0, 4])


def _workload(seed: int) -> bytes:
    rng = random.Random(seed)
    records, t = [], 0
    for i in range(rng.randint(5, 40)):
        t += rng.choice([0, 1, 1, 2, 3, 10])
        records.append({"type": "request", "id": f"r{i}", "arrival": t,
                        "prompt_tokens": rng.randint(1, 40),
                        "output_tokens": rng.randint(1, 30)})
    return trace_bytes(records)


def _engine(trace, opts, policy: str, general: bool, **kwargs) -> Engine:
    """An engine whose arrivals and ends take the plain paths, or (`general`) the
    general ones: registration (`_arrive`) and the loop of `_finish_ended` that
    `frees_plainly` False sends every end to."""
    engine = Engine(trace.workload, opts, policy, **kwargs)
    assert engine.roster.arrive.__name__ == "arrive"  # (plain_arrival's)
    if general:
        engine.roster.arrive = engine._arrive
        cls = type(engine.allocator)
        engine.allocator.__class__ = type("General", (cls,), {"frees_plainly": False})
    return engine


def _run(data: bytes, policy: str, general: bool, keep: bool = True, **options):
    """A run's results, and its event stream (as dictionaries)."""
    trace = parse_trace(data, "plain.jsonl")
    opts = Options.resolve(trace.config, options)
    ends, events = [], []
    engine = _engine(trace, opts, policy, general, keep_requests=keep,
                     on_event=lambda e: events.append(e.to_dict()),
                     on_request_end=lambda r: ends.append(r.rid))
    result = engine.run()
    a = engine.allocator
    return (result.summary, [request_record(r) for r in result.requests], ends,
            engine.roster.live, (a.held, a.reserved, a.granted, a.free),
            engine.steadiness.changes, events)  # (the change log: folding rests on it)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", ["continuous", "vllm", "sglang"])
def test_the_plain_end_gives_what_the_listened_end_gives(seed, policy):
    """Random workloads in small pools (preemptions) and large: every summary field,
    request record, the order requests end in, the live count (0), the pool at the
    end (all free) and every event record are the same on the plain paths as on the
    general ones (registration, and the general loop of finished requests)."""
    data = _workload(seed)
    options = {"num_blocks": 12 if seed % 2 else 400, "block_size": B}
    plain = _run(data, policy, False, **options)
    assert plain == _run(data, policy, True, **options)
    assert plain[3] == 0 and plain[4] == (0, 0, 0, options["num_blocks"])


def test_the_plain_arrival_spills_and_rejects_as_registration_does(monkeypatch):
    """5,000 requests at tick 0 (more than the 4,096 a queue holds before its tail
    is spilled), every seventh too big for the pool of 12 blocks of 4 (prompt 60:
    15 blocks, rejected), the rest a prompt of 1 and 2 outputs (one block each): the
    same summary, order of ends and records with the plain arrival as with
    registration, 715 rejected (1 + 4,999 // 7) and 4,285 completed; the 4,285 - 4,096
    = 189 accepted after the queue is full are spilled, in both runs."""
    spilled = []
    add = Spill.add
    monkeypatch.setattr(Spill, "add", lambda spill, number, make: (
        spilled.append(number), add(spill, number, make))[1])
    records = [{"type": "request", "id": f"r{i}", "arrival": 0,
                "prompt_tokens": 60 if i % 7 == 0 else 1, "output_tokens": 2}
               for i in range(5000)]
    data = trace_bytes(records)
    options = {"num_blocks": 12, "block_size": B}
    plain = _run(data, "continuous", False, keep=False, **options)
    assert plain == _run(data, "continuous", True, keep=False, **options)
    summary = plain[0]
    assert (summary["completed"], summary["finished_ignored"]) == (4285, 715)
    assert plain[1] == [] and len(plain[2]) == 5000
    assert len(spilled) == 2 * 189 and spilled[:189] == spilled[189:]


def _arrived(general: bool) -> dict:
    """Every slot of the requests two arrivals at tick 0 build (the plain arrival's
    own `Request(...)`, or `request_of` through `_register` when `general`)."""
    records = [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 40,
                "output_tokens": 5, "max_tokens": 9, "priority": 2, "deadline": 50,
                "prompt_token_ids": list(range(40)), "output_token_ids": [1, 2, 3, 4, 5]},
               {"type": "request", "id": "b", "arrival": 0, "prompt_tokens": 33,
                "output_tokens": 5, "block_hashes": [1, 2]}]
    trace = parse_trace(trace_bytes(records), "slots.jsonl")
    opts = Options.resolve(trace.config, {"block_size": 16})
    engine = _engine(trace, opts, "continuous", general)
    engine.agenda.begin()
    engine.agenda.take_arrivals(0, engine.roster.arrive)
    return {rid: {name: getattr(req, name, "unset") for name in Request.__slots__}
            for rid, req in engine.roster.requests.items()}


def test_the_plain_arrival_builds_the_request_registration_builds():
    """Every field of the request, from its trace record (token ids, hashes, limits,
    priority, deadline) to its send and wait times, is the same as `request_of` and
    `_register` give it: a field added to one and not the other fails here."""
    plain = _arrived(False)
    assert list(plain) == ["a", "b"]
    assert plain["a"]["max_tokens"] == 9 and plain["b"]["sent"] == 0
    assert plain == _arrived(True)


def _two_late_arrivals():
    """'a' (a prompt of 3, 2 outputs) arriving at tick 2, 'b' (a prompt of 1, 1
    output) at 5: the trace and its options."""
    records = [{"type": "request", "id": "a", "arrival": 2, "prompt_tokens": 3,
                "output_tokens": 2},
               {"type": "request", "id": "b", "arrival": 5, "prompt_tokens": 1,
                "output_tokens": 1}]
    trace = parse_trace(trace_bytes(records), "late.jsonl")
    return trace, Options.resolve(trace.config, {"block_size": B})


def test_a_listened_plain_arrival_and_end_write_their_records():
    """With a listener the plain paths are taken too and write what registration and
    the general loop write. 'a' (a prompt of 3, 2 outputs) arrives at tick 2, 'b' (a
    prompt of 1, 1 output) at tick 5 (waited since its trace time 5: no
    `client_wait`); each dispatch lasts one step. 'a''s prompt runs 2-3 (its first
    output), its decode 3-4 (its last: finished at 4); 'b''s prompt 5-6 (finished at
    6)."""
    trace, opts = _two_late_arrivals()
    streams = []
    for general in (False, True):
        events = []
        _engine(trace, opts, "continuous", general,
                on_event=lambda e: events.append(e.to_dict())).run()
        streams.append([(e["tick"], e["event"], e["id"], e.get("status")) for e in events
                        if e["event"] in ("arrival", "finished")])
        assert all("client_wait" not in e for e in events if e["event"] == "arrival")
    capped = "finished_length_capped"  # (its outputs all produced: vLLM's length stop)
    assert streams[0] == [(2, "arrival", "a", None), (4, "finished", "a", capped),
                          (5, "arrival", "b", None), (6, "finished", "b", capped)]
    assert streams[0] == streams[1]


def test_a_line_listener_s_plain_arrival_admission_and_end_are_its_lines(monkeypatch):
    """With the events file's line listener the plain arrival, the admission and the
    plain end write their lines without records: the lines a record listener's
    records give (the general paths, `to_json`), and by hand for the workload of
    the test above ('a' arrives at 2 with a credit of 1 block, finished at 4; 'b'
    at 5, a credit of 1, finished at 6)."""
    import io

    from scheduler_sim.io.event_file import EventFile
    trace, opts = _two_late_arrivals()
    events = EventFile("-", io.StringIO(), False)
    listener = events.listener("continuous")
    calls = []
    for name in ("arrived", "admitted", "finished"):  # (each taken, twice)
        method = getattr(listener, name)
        monkeypatch.setattr(listener, name, lambda *fields, name=name, method=method: (
            calls.append(name), method(*fields)))
    _engine(trace, opts, "continuous", False, on_event=listener).run()
    assert sorted(calls) == ["admitted"] * 2 + ["arrived"] * 2 + ["finished"] * 2
    events.flush()
    lines = events.handle.getvalue().splitlines()
    written = []
    _engine(trace, opts, "continuous", True,
            on_event=lambda e: written.append(e.to_json(None, None))).run()
    assert lines == written
    capped = '"status":"finished_length_capped"}'
    assert [line for line in lines if '"snapshot"' not in line and '"dispatch"' not in line] == [
        '{"tick":2,"event":"arrival","id":"a"}',
        '{"tick":2,"event":"admitted","id":"a","reserved":1,"resumed":false,"cached_tokens":0}',
        '{"tick":4,"event":"finished","id":"a",' + capped,
        '{"tick":5,"event":"arrival","id":"b"}',
        '{"tick":5,"event":"admitted","id":"b","reserved":1,"resumed":false,"cached_tokens":0}',
        '{"tick":6,"event":"finished","id":"b",' + capped]
