"""`vllm` at its fixed point under prefix caching (`VllmFastPaths.repeats_decodes`,
policies/vllm_fast.py): with nothing waiting, the decodes after a prompt and after
each finish are started by the engine without a `schedule` call
(engine/fast/through.py, arrivals.py's `after_admission`), the blocks they fill
keyed by the engine's start as the call's walk keys them; with an event listener
the policy makes no such promise (the walk's `evicted` records come before the
step's snapshot). Each replay is the stepped one."""
from __future__ import annotations

from conftest import trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace
from scheduler_sim.policies.vllm import VllmPolicy
from scheduler_sim.records.options import Options

# Blocks of 4 rows. `a`: 7 prompt ids, 8 outputs as ids; its blocks are 0 (ids 1-4) and
# 1 (ids 5-7 and its first output, 11). `b` arrives at tick 6 with a's 8 ids and one
# of its own.
KEYED = [{"type": "request", "id": "a", "arrival": 0, "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7],
          "output_tokens": 8, "output_token_ids": [11, 12, 13, 14, 15, 16, 17, 18]},
         {"type": "request", "id": "b", "arrival": 6,
          "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 11, 99], "output_tokens": 2}]

# A pool of 2 blocks of 4: `a` (4 prompt tokens, 1 output) takes block 0, `b` (3
# prompt tokens, 5 outputs) block 1.
EVICTING = [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4, "output_tokens": 1},
            {"type": "request", "id": "b", "arrival": 0, "prompt_tokens": 3, "output_tokens": 5}]


def _run(records, fast, listen=False, keys_decoded=True, **more):
    """(schedule calls' ticks, dispatches folded, request records, (tick, kind) of each
    event record, or None without a listener)."""
    trace = parse_trace(trace_bytes(records), "fixed.jsonl")
    options = Options.resolve(trace.config, dict(dict(block_size=4, num_blocks=16,
                                                      prefix_caching=True), **more))
    events: list = []
    engine = Engine(trace.workload, options, "vllm", fast_forward=fast,
                    on_event=events.append if listen else None)
    engine.allocator.keys_decoded = keys_decoded
    calls = []
    schedule = engine.policy.schedule
    engine.policy.schedule = lambda now: calls.append(now) or schedule(now)
    result = engine.run()
    return (calls, engine.folded, [request_record(r) for r in result.requests],
            [(e.tick, e.kind) for e in events] if listen else None)


def _answer(listen=False, **more) -> bool:
    """`repeats_decodes` of a fresh `vllm` (nothing waits or runs)."""
    trace = parse_trace(trace_bytes(KEYED), "fixed.jsonl")
    options = Options.resolve(trace.config, dict(dict(block_size=4, num_blocks=16), **more))
    engine = Engine(trace.workload, options, "vllm",
                    on_event=(lambda e: None) if listen else None)
    return engine.policy.repeats_decodes()


def test_vllm_promises_its_fixed_point_under_prefix_caching():
    """Nothing waits and no cadence: a fixed point without a cache and with one; not
    with blocks of one row (a guard kept as first written: no case found needs it,
    policies/vllm_fast.py), host memory (its write-through queues keys at openings;
    the engine carries nothing with it), an event listener, or a prefill cadence."""
    assert _answer() is True
    assert _answer(prefix_caching=True) is True
    assert _answer(prefix_caching=True, block_size=1, num_blocks=64) is False
    assert _answer(block_size=1, num_blocks=64) is True  # (no cache: nothing keyed)
    assert _answer(prefix_caching=True, host_kv_gib=1.0,
                   cost_model="llama-3-8b/h100-sxm") is False
    assert _answer(prefix_caching=True, listen=True) is False
    assert _answer(listen=True) is True  # (no cache: nothing evicted)
    assert _answer(prefix_caching=True, prefill_interval=2) is False


def test_the_decodes_after_a_prompt_start_without_a_call_and_key_what_they_fill():
    """Tick 0: `a`'s prompt (rows 0-6: block 0 full, keyed; block 1 opened). Its
    completion at 1 emits 11; nothing waits, so `a`'s first decode (row 7, id 11)
    starts without a call: it fills block 1, which the engine's start keys as the
    call's walk would (`register_decoded`), and the stretch is folded (the
    completions at 2 to 5) to `b`'s arrival at 6. The call there admits `b`: 8 of its
    9 ids are blocks 0 and 1, cached; it prefills 1. At 7 nothing waits: `a`'s and
    `b`'s decodes start without a call, `b` ends at 8 (2 outputs), `a` too (its 8th).
    Stepped: a call at every tick, 0 to 7, and the same records. With the engine's
    start keying nothing it keys (`keys_decoded` off, a deliberately broken start),
    the folded replay finds block 1 uncached (`b` hits 4 tokens): the stepped call's
    walk keys it itself."""
    calls, folded, records, _ = _run(KEYED, True)
    assert calls == [0, 6]
    assert folded == 4
    assert [(r["id"], r["admitted"], r["cached_tokens"], r["finished"]) for r in records] == [
        ("a", 0, 0, 8), ("b", 6, 8, 8)]
    stepped = _run(KEYED, False)
    assert stepped[0] == list(range(8)) and stepped[1] == 0
    assert stepped[2] == records
    broken = _run(KEYED, True, keys_decoded=False)
    assert broken[0] == [0, 6]
    assert [r["cached_tokens"] for r in broken[2]] == [0, 4]
    assert _run(KEYED, False, keys_decoded=False)[2] == records


def test_with_a_listener_the_evicted_record_comes_before_the_snapshot():
    """A pool of 2 blocks. Tick 0: both prompts (`a` block 0, keyed; `b` block 1); at 1
    `a` ends (its one output), block 0 cached and free. At 2 `b`'s decode writes row 4
    and opens a block: the only free one is block 0, evicted. The stepped call's walk
    opens it: the `evicted` record, then the step's snapshot and dispatch. With a
    listener `vllm` promises no fixed point, so the folded replay calls at every
    tick too and writes the same records in the same order. A `vllm` that promised
    it anyway (deliberately broken) starts `b`'s decodes itself from tick 1 (one
    call, at 0): the engine's start opens the block after writing the snapshot."""
    calls, _, records, events = _run(EVICTING, True, listen=True, num_blocks=2)
    stepped = _run(EVICTING, False, listen=True, num_blocks=2)
    assert calls == stepped[0] == [0, 1, 2, 3, 4]
    at_two = [(2, "evicted"), (2, "snapshot"), (2, "dispatch")]
    assert [e for e in events if e[0] == 2] == at_two
    assert (records, events) == stepped[2:]
    promise = VllmPolicy.repeats_decodes
    VllmPolicy.repeats_decodes = lambda self: not self.waiting
    try:
        broken = _run(EVICTING, True, listen=True, num_blocks=2)
    finally:
        VllmPolicy.repeats_decodes = promise
    assert broken[0] == [0]
    assert [e for e in broken[3] if e[0] == 2] == [(2, "snapshot"), (2, "evicted"),
                                                  (2, "dispatch")]
    assert broken[2] == records  # (only the records' order differs)
    # Without a listener the same replay takes the promise: one call.
    quiet = _run(EVICTING, True, num_blocks=2)
    assert quiet[0] == [0] and quiet[2] == records
