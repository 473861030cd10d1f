"""The gates of a chunk run's fold (engine/fast/chunk_run.py, `Policy.repeats_chunk`
in policies/vllm_fast.py): each, where it closes, leaves the replay to stepping, and
the results are the stepped ones. Hand-computed cases found by mutating each gate
(review of the twenty-sixth steps)."""
from __future__ import annotations

from conftest import trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.records.options import Options


def _run(records, fast, **options):
    trace = parse_trace(trace_bytes(records), "gates.jsonl")
    opts = Options.resolve(trace.config, {"block_size": 4, "num_blocks": 64,
                                          "prefix_caching": True, **options})
    engine = Engine(trace.workload, opts, "vllm", fast_forward=fast)
    calls = []
    schedule = engine.policy.schedule
    engine.policy.schedule = lambda now: calls.append(now) or schedule(now)
    result = engine.run()
    return (calls, engine.steadiness.chunks_folded, result.summary,
            [request_record(r) for r in result.requests])


def _request(rid, prompt, outputs, arrival=0):
    return {"type": "request", "id": rid, "arrival": arrival, "prompt_tokens": prompt,
            "output_tokens": outputs}


def test_a_chunk_cut_by_prefill_chunk_is_no_run():
    """A budget of 7, chunks of at most 5 (`prefill_chunk`). Tick 0: `d`'s prompt (2)
    and `c`'s first chunk (5 of 30) spend the budget, `w` is blocked for it. From tick
    1 `d` decodes, leaving 6 tokens, but `c`'s chunk is cut to 5: the last token of the
    budget admits `w` (a chunk of 1 of its 4) at tick 1. No chunk run: a call at every
    tick until `c`'s prompt ends (30 = 5 + 5 x 5, its last chunk at tick 5; `w`'s
    chunks of 1 at ticks 1-4), and `w` is admitted at 1, as stepped. From tick 6
    nothing waits and every row is a decode: `vllm` is at its fixed point under
    prefix caching too (`repeats_decodes`), so the decodes after the prompts start
    without a call: the calls are ticks 0-5 only."""
    records = [_request("d", 2, 20), _request("c", 30, 2), _request("w", 4, 1)]
    calls, chunks, summary, requests = _run(records, True, token_budget=7, prefill_chunk=5)
    assert chunks == 0
    assert calls == list(range(6))
    assert [(r["id"], r["admitted"]) for r in requests] == [("d", 0), ("c", 0), ("w", 1)]
    assert (summary, requests) == _run(records, False, token_budget=7, prefill_chunk=5)[2:]


def test_a_chunk_run_stops_before_a_decoder_ends():
    """A budget of 8: tick 0 takes `d`'s prompt (2) and `c`'s first chunk (6 of 30),
    `w` is blocked for the budget. `d` has 3 outputs, at ticks 1, 2 and 3: its last
    ends the run, so of the steps at ticks 1-3 (`c`'s rows 6-13, 13-20, 20-27) only
    the two at ticks 1 and 2 are folded, and the one started at 2, left in flight,
    completes with `d`'s end at tick 3. There `c` alone takes the budget (rows 20-28),
    `w` still blocked; at 4 `c`'s last 2 rows and `w`'s prompt (4); `w` ends at 5
    (its one output, its prompt's), `c` at 6. At 5 nothing waits and `c` alone
    decodes: its first decode after its prompt starts without a call (`vllm`'s
    `repeats_decodes` under prefix caching), so the calls are 0, 3 and 4. As
    stepped."""
    records = [_request("d", 2, 3), _request("c", 30, 2), _request("w", 4, 1)]
    calls, chunks, summary, requests = _run(records, True, token_budget=8)
    assert chunks == 2
    assert calls == [0, 3, 4]
    assert [(r["id"], r["admitted"], r["first_token"], r["finished"]) for r in requests] == [
        ("d", 0, 1, 3), ("c", 0, 5, 6), ("w", 4, 5, 5)]
    stepped = _run(records, False, token_budget=8)
    assert stepped[:2] == ([0, 1, 2, 3, 4, 5], 0)
    assert (summary, requests) == stepped[2:]


def test_no_chunk_run_into_a_cancellation_at_the_flights_end():
    """The first test's start (a budget of 8, `d` and `c`'s first chunk of 6 at tick 0,
    `w` blocked for the budget), `d` cancelled at tick 1, the very tick the dispatch
    in flight completes: nothing is folded at tick 0 (`d`'s first output at 1, then it
    ends). At 1 `c` alone takes the budget (rows 6-14, `w` still blocked) and the step
    after (rows 14-22, at tick 2) is folded; at 3 `c`'s last chunk (22-30), at 4 its
    first decode beside `w`'s prompt; both end at 5. As stepped."""
    records = [_request("d", 2, 20), _request("c", 30, 2), _request("w", 4, 1),
               {"type": "cancel", "id": "d", "at": 1}]
    calls, chunks, summary, requests = _run(records, True, token_budget=8)
    assert (calls, chunks) == ([0, 1, 3, 4], 1)
    assert [(r["id"], r["first_token"], r["finished"], r["status"]) for r in requests] == [
        ("d", 1, 1, "finished_aborted"), ("c", 4, 5, "finished_length_capped"),
        ("w", 5, 5, "finished_length_capped")]
    stepped = _run(records, False, token_budget=8)
    assert stepped[:2] == ([0, 1, 2, 3, 4], 0)
    assert (summary, requests) == stepped[2:]


def test_a_chunk_run_stops_before_the_pool_runs_short():
    """A pool of 8 blocks of 4 rows, no full-prompt gate, a budget of 8. Tick 0: `d`'s
    prompt (2 rows, block 1 of 8) and `c`'s first chunk (6 rows, 2 blocks): 5 free.
    The steps at ticks 1 and 2 take `c`'s rows to 13 and 20 (2 blocks, then 1): 2
    free. At tick 3 `d`'s row 4 opens a block and `c`'s rows to 27 need 2 more, one
    too many: that step would preempt (the last running, `c`). So two steps are
    folded, the call at 3 preempts `c` and the replay is the stepped one."""
    records = [_request("d", 2, 20), _request("c", 30, 2), _request("w", 4, 1)]
    options = {"token_budget": 8, "num_blocks": 8, "full_prompt_gate": False}
    calls, chunks, summary, requests = _run(records, True, **options)
    assert (calls[:2], chunks) == ([0, 3], 2)
    assert [(r["id"], r["preemptions"]) for r in requests] == [("d", 0), ("c", 1), ("w", 0)]
    stepped = _run(records, False, **options)
    assert stepped[0][:4] == [0, 1, 2, 3] and stepped[1] == 0
    assert (summary, requests) == stepped[2:]


def test_decoders_open_blocks_in_step_order_then_running_order():
    """Two decoders whose blocks fill at different steps, a budget of 9. Tick 0: `a`'s
    prompt (2 rows, block 0), `b`'s (4 rows, block 1), `c`'s first chunk (3 of 30,
    block 2); `w` blocked for the budget. The steps at ticks 1-3 (`c`'s chunks of 7:
    rows to 10, 17, 24) are folded, their blocks taken as the calls take them, never-
    used ids lowest first: at tick 1 `b`'s row 4 opens block 3, then `c` takes 4 and 5;
    at 2 `c` takes 6 and 7; at 3 `a`'s row 4 opens 8, then `c` takes 9. (`b`'s opening
    is the first step's though `a` runs first: the openings are taken step by step.)"""
    records = [_request("a", 2, 20), _request("b", 4, 20), _request("c", 30, 2),
               _request("w", 4, 1)]
    tables = []
    for fast in (True, False):
        trace = parse_trace(trace_bytes(records), "gates.jsonl")
        opts = Options.resolve(trace.config, {"block_size": 4, "num_blocks": 64,
                                              "prefix_caching": True, "token_budget": 9})
        engine = Engine(trace.workload, opts, "vllm", fast_forward=fast)
        seen = {}
        schedule = engine.policy.schedule

        def watching(now, engine=engine, seen=seen, schedule=schedule):
            seen.setdefault(now, [engine.allocator.table(rid)[:] for rid in "abc"])
            return schedule(now)

        engine.policy.schedule = watching
        result = engine.run()
        tables.append((seen[4], engine.steadiness.chunks_folded, result.summary,
                       [request_record(r) for r in result.requests]))
    assert tables[0][:2] == ([[0, 8], [1, 3], [2, 4, 5, 6, 7, 9]], 3)
    assert tables[1][1] == 0
    assert tables[0][0] == tables[1][0] and tables[0][2:] == tables[1][2:]


def test_a_replayed_decoder_row_closes_the_run(monkeypatch):
    """The run above, but `d`'s row looked at as if replayed (its `high_water` one
    above its `resident` while the run's look reads it): no run is folded, a call
    at every tick as stepped up to `c`'s last chunk and `w`'s prompt at tick 4
    (ticks 1 and 2 are the run's steps, called), and the results are the stepped
    ones. At 5 nothing waits: `c`'s first decode starts without a call
    (`repeats_decodes`), as in the test above."""
    from scheduler_sim.engine.fast import chunk_run

    look = chunk_run.steady_rows
    seen = []

    def replayed(decoders):
        first = decoders[0]
        first.high_water += 1
        answer = look(decoders)
        first.high_water -= 1
        seen.append((first.rid, first.resident, answer))
        return answer

    monkeypatch.setattr(chunk_run, "steady_rows", replayed)
    records = [_request("d", 2, 3), _request("c", 30, 2), _request("w", 4, 1)]
    calls, chunks, summary, requests = _run(records, True, token_budget=8)
    assert seen[0] == ("d", 2, None)
    assert chunks == 0
    assert calls == [0, 1, 2, 3, 4]
    assert (summary, requests) == _run(records, False, token_budget=8)[2:]


def test_a_folds_look_at_its_decoders():
    """`steady_rows`: the fewest outputs left (40 - 38 = 2 of `a`, 9 - 5 = 4 of `b`,
    7 - 2 = 5 of `c`) and the contexts 11 + 6 + 3 = 20; None once a row is below its
    `high_water` (replayed), whichever it is."""
    from scheduler_sim.engine.fast.fold_bounds import steady_rows
    from scheduler_sim.requests.request import Request

    reqs = []
    for rid, outputs, left, resident in (("a", 38, 2, 11), ("b", 5, 4, 6), ("c", 2, 5, 3)):
        req = Request(rid, len(reqs), 0, 4, outputs + left)
        req.outputs, req.resident, req.high_water = outputs, resident, resident
        reqs.append(req)
    assert steady_rows(reqs) == (2, 20)
    assert steady_rows(reqs[1:]) == (4, 9)
    for req in reqs:
        req.high_water += 1
        assert steady_rows(reqs) is None
        req.high_water -= 1
    assert steady_rows([]) == (1 << 62, 0)


def test_the_fewest_outputs_left_alone():
    """`fewest_left`, what a fold asks when its caller knows the contexts: 40 - 38 = 2
    of `a`, 9 - 5 = 4 of `b`; a replayed row (below its `high_water`) is not its
    question."""
    from scheduler_sim.engine.fast.fold_bounds import fewest_left
    from scheduler_sim.requests.request import Request

    reqs = []
    for rid, outputs, left in (("b", 5, 4), ("a", 38, 2)):
        req = Request(rid, len(reqs), 0, 4, outputs + left)
        req.outputs, req.resident, req.high_water = outputs, 9, 10
        reqs.append(req)
    assert fewest_left(reqs) == 2
    assert fewest_left(reqs[:1]) == 4
    assert fewest_left([]) == 1 << 62
