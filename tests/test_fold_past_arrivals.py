"""A fold of written decodes behind a blocked head goes on past arrivals that only join
the queue behind it (`Policy.arrivals_wait`, engine/fast/fold_bounds.py's `past_arrivals`),
and the replay is the stepped one."""
from __future__ import annotations

import pytest

from conftest import trace_bytes
from scheduler_sim.engine.agenda import Agenda
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.fast import fold_bounds, folding
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.options import Options

# Blocks of 4 tokens, a pool of 8, one tick a dispatch. `a` (16 prompt tokens, 4
# blocks) runs alone: `b` (20 tokens, 5 blocks) never fits beside it, so it waits for
# blocks until `a` ends, and `c`, arriving at tick 5, waits behind it.
RECORDS = [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 16, "output_tokens": 12},
           {"type": "request", "id": "b", "arrival": 0, "prompt_tokens": 20, "output_tokens": 2},
           {"type": "request", "id": "c", "arrival": 5, "prompt_tokens": 4, "output_tokens": 1}]


def _run(order: str, fast: bool = True, policy: str = "vllm"):
    trace = parse_trace(trace_bytes(RECORDS), "arrivals.jsonl")
    options = Options.resolve(trace.config, dict(block_size=4, num_blocks=8, order=order,
                                                 prefix_caching=True))
    engine = Engine(trace.workload, options, policy, fast_forward=fast)
    calls = []
    schedule = engine.policy.schedule
    engine.policy.schedule = lambda now: calls.append(now) or schedule(now)
    result = engine.run()
    return calls, engine.folded, result.summary, [request_record(r) for r in result.requests]


def test_a_fold_behind_a_blocked_head_goes_past_an_arrival():
    """Tick 0: `a`'s prompt (4 blocks; `b` needs 5 of the 4 left). Tick 1: `a`'s first
    decode, started without a call (`b` still short of blocks: the policy's
    `decodes_behind`, engine/fast/behind.py) after a dispatch with prompt rows: a
    repeat, folded.
    `a`'s outputs 2 to 12 come from the dispatches started at ticks 1 to 11; the last
    finishes it at tick 12. So the fold applies the completions at ticks 2 to 11 (10
    dispatches) and the one started at tick 11 is left in flight; `c` joins the queue
    at tick 5 while it runs. Before, the fold stopped at `c`'s arrival: see the next
    test. At tick 12 `b` and then `c` are admitted (whole prompts: 20 + 4 tokens), `c`
    ends at 13 with its one output, `b` at 14. At 13 nothing waits and `b` decodes
    alone: `vllm` is at its fixed point under prefix caching too (`repeats_decodes`),
    so `b`'s decode after its prompt starts without a call: the calls are 0 and 12.
    (Stepped: a call at every tick, 0 to 13.)"""
    calls, folded, summary, records = _run("fcfs")
    assert calls == [0, 12]
    assert folded == 10
    assert [(r["id"], r["admitted"], r["finished"]) for r in records] == [
        ("a", 0, 12), ("b", 12, 14), ("c", 12, 13)]
    stepped = _run("fcfs", fast=False)
    assert stepped[0] == list(range(14)) and stepped[1] == 0
    assert (summary, records) == stepped[2:]


def test_without_the_promise_the_fold_stops_at_the_arrival():
    """Under the priority order an arrival may go ahead of the head, so `vllm` makes no
    promise: the first fold applies the completions at ticks 2 to 4 and leaves the
    dispatch started at tick 4 in flight, `c` arrives at 5, the call there plans
    `a`'s decode again, and a second fold applies the completions at ticks 6 to 11.
    The same replay, two calls more (at 1 and 5; `b`'s decode at 13 starts without
    one, as above)."""
    calls, folded, summary, records = _run("priority")
    assert calls == [0, 1, 5, 12]
    assert folded == 3 + 6
    assert (summary, records) == _run("priority", fast=False)[2:]
    assert (summary, records) == _run("fcfs")[2:]


def test_a_plugin_is_never_asked(tmp_path):
    """A plug-in built on `vllm` inherits its `arrivals_wait`, but the engine does not
    ask a plug-in (docs/policies.md): its fold stops at `c`'s arrival, as under the
    priority order above, and the replay is the stepped one."""
    path = tmp_path / "mine.py"
    path.write_text("from scheduler_sim.policies.vllm import VllmPolicy\n\n\n"
                    "class Mine(VllmPolicy):\n    pass\n")
    calls, folded, summary, records = _run("fcfs", policy=f"{path}:Mine")
    assert calls == [0, 1, 5, 12, 13] and folded == 3 + 6
    assert (summary, records) == _run("fcfs", fast=False)[2:]


def test_vllm_promises_only_under_first_come_first_served():
    """`arrivals_wait`: true under `fcfs` (an arrival joins the tail), false under any
    order that may put an arrival ahead of the head."""
    promises = {}
    for order in ("fcfs", "priority", "sjf", "edf"):
        trace = parse_trace(trace_bytes(RECORDS), "arrivals.jsonl")
        options = Options.resolve(trace.config, dict(block_size=4, num_blocks=8, order=order))
        promises[order] = Engine(trace.workload, options, "vllm").policy.arrivals_wait("blocks")
    assert promises == {"fcfs": True, "priority": False, "sjf": False, "edf": False}
    trace = parse_trace(trace_bytes(RECORDS), "arrivals.jsonl")
    options = Options.resolve(trace.config, dict(block_size=4, num_blocks=8))
    assert Engine(trace.workload, options, "continuous").policy.arrivals_wait("blocks") is False


def test_the_agenda_peeks_past_arrivals_when_asked():
    """`peek(..., arrivals=False)` leaves out the next arrival and nothing else."""
    trace = parse_trace(trace_bytes(RECORDS), "arrivals.jsonl")
    options = Options.resolve(trace.config, dict(block_size=4, num_blocks=8))
    engine = Engine(trace.workload, options, "vllm")
    agenda: Agenda = engine.agenda
    agenda.begin()
    assert agenda.peek(0) == 0  # a and b arrive at 0
    assert agenda.peek(0, arrivals=False) == float("inf")


@pytest.mark.slow
def test_random_prefix_cached_workloads_fold_past_arrivals(monkeypatch):
    """The folded-against-stepped sweeps with prefix caching include folds that went on
    past an arrival (test_fast_forward.py compares their results with stepped ones)."""
    from test_fast_forward import _cached_options, _cached_workload, _replay

    past = []
    bound = fold_bounds.past_arrivals

    def watching(engine, until, reason):
        later = bound(engine, until, reason)
        spec = engine.agenda.next_arrival
        past.append(later > until and spec is not None and spec.arrival < later)
        return later

    monkeypatch.setattr(folding, "past_arrivals", watching)
    for seed in range(30):
        records, options = _cached_workload(seed), _cached_options(seed)
        assert _replay(records, "vllm", True, **options) == _replay(records, "vllm", False,
                                                                     **options)
    assert True in past


def test_a_chunk_run_goes_on_past_an_arrival(monkeypatch):
    """vllm with prefix caching, a budget of 8 tokens (tests/test_fast_forward.py's
    chunk run, with `x` arriving at tick 2): `d` decodes while `c`'s 30-token prompt
    is chunked, rows 6-13, 13-20 and 20-27 at ticks 1-3, the head `w` blocked for the
    budget. `x` only joins the queue behind `w`, so the run's three steps are folded
    at tick 0 and the next call is at tick 4 (`c`'s last chunk, 3 rows, and `w`'s
    prompt), then 5 (`x`'s prompt), the last: at 6 `x` and `c` end and nothing
    waits, `d`'s decodes start without a call (`repeats_decodes`). Without the
    promise the fold stops at `x`'s arrival: the step at tick 1 folded, a call at
    tick 2, the step at 3 folded."""
    records = [{"type": "request", "id": "d", "arrival": 0, "prompt_tokens": 2,
                "output_tokens": 20},
               {"type": "request", "id": "c", "arrival": 0, "prompt_tokens": 30,
                "output_tokens": 2},
               {"type": "request", "id": "w", "arrival": 0, "prompt_tokens": 4,
                "output_tokens": 1},
               {"type": "request", "id": "x", "arrival": 2, "prompt_tokens": 4,
                "output_tokens": 1}]

    def run(fast):
        trace = parse_trace(trace_bytes(records), "chunks.jsonl")
        options = Options.resolve({}, {"block_size": 4, "num_blocks": 64, "token_budget": 8,
                                       "prefix_caching": True})
        engine = Engine(trace.workload, options, "vllm", fast_forward=fast)
        calls = []
        schedule = engine.policy.schedule
        engine.policy.schedule = lambda now: calls.append(now) or schedule(now)
        result = engine.run()
        return (calls[:6], engine.steadiness.chunks_folded,
                [(r["id"], r["admitted"], r["first_token"], r["finished"])
                 for r in map(request_record, result.requests)])

    outcome = [("d", 0, 1, 20), ("c", 0, 5, 6), ("w", 4, 5, 5), ("x", 5, 6, 6)]
    assert run(True) == ([0, 4, 5], 3, outcome)
    assert run(False) == ([0, 1, 2, 3, 4, 5], 0, outcome)
    from scheduler_sim.policies.vllm import VllmPolicy
    monkeypatch.setattr(VllmPolicy, "arrivals_wait", lambda self, reason: False)
    assert run(True) == ([0, 2, 4, 5], 2, outcome)
