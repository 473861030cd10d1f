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
    opts = Options.resolve(trace.config, dict(block_size=4, num_blocks=64,
                                              prefix_caching=True, **options))
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
    tick until `c`'s prompt ends (30 = 5 + 5 x 5, at tick 5) and `w`'s, and `w` is
    admitted at 1, as stepped."""
    records = [_request("d", 2, 20), _request("c", 30, 2), _request("w", 4, 1)]
    calls, chunks, summary, requests = _run(records, True, token_budget=7, prefill_chunk=5)
    assert chunks == 0
    assert calls[:8] == list(range(8))
    assert [(r["id"], r["admitted"]) for r in requests] == [("d", 0), ("c", 0), ("w", 1)]
    assert (summary, requests) == _run(records, False, token_budget=7, prefill_chunk=5)[2:]


def test_a_chunk_run_stops_before_a_decoder_ends():
    """A budget of 8: tick 0 takes `d`'s prompt (2) and `c`'s first chunk (6 of 30),
    `w` is blocked for the budget. `d` has 3 outputs, at ticks 1, 2 and 3: its last
    ends the run, so of the steps at ticks 1-3 (`c`'s rows 6-13, 13-20, 20-27) only
    the two at ticks 1 and 2 are folded, and the one started at 2, left in flight,
    completes with `d`'s end at tick 3. There `c` alone takes the budget (rows 20-28),
    `w` still blocked; at 4 `c`'s last 2 rows and `w`'s prompt (4); `w` ends at 5,
    `c` at 6. As stepped."""
    records = [_request("d", 2, 3), _request("c", 30, 2), _request("w", 4, 1)]
    calls, chunks, summary, requests = _run(records, True, token_budget=8)
    assert chunks == 2
    assert calls == [0, 3, 4, 5]
    assert [(r["id"], r["admitted"], r["first_token"], r["finished"]) for r in requests] == [
        ("d", 0, 1, 3), ("c", 0, 5, 6), ("w", 4, 5, 5)]
    stepped = _run(records, False, token_budget=8)
    assert stepped[:2] == ([0, 1, 2, 3, 4, 5], 0)
    assert (summary, requests) == stepped[2:]
