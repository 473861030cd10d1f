"""Folding steady decode stretches never changes a result (engine `_fast_forward`)."""
from __future__ import annotations

import random

import pytest

from conftest import random_engine_options, random_workload, slow_beyond, stir, trace_bytes
from scheduler_sim.engine.core import Engine
from scheduler_sim.records.options import Options
from scheduler_sim.policies import POLICIES
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io.trace import parse_trace


_workload = random_workload


def _replay(records, policy, fast, **options):
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    opts = Options.resolve(trace.config, options)
    result = Engine(trace.workload, opts, policy, fast_forward=fast).run()
    return result.summary, [request_record(r) for r in result.requests]


@pytest.mark.parametrize("seed", slow_beyond(range(24), 3))  # seed 0 with a cost model
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_folded_and_stepwise_replays_agree(seed, policy):
    """Every summary field and every request record is the same with and without folding."""
    rng = random.Random(1000 + seed)
    options = random_engine_options(rng, cost_model=seed % 3 == 0)
    records = _workload(seed)
    assert _replay(records, policy, True, **options) == _replay(records, policy, False, **options)


def test_folding_happens_and_saves_work():
    """A lone long decode is folded: far fewer scheduling calls, the same summary."""
    records = [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4,
                "output_tokens": 500}]
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    opts = Options.resolve({}, {"block_size": 4, "num_blocks": 200})
    calls = []
    engine = Engine(trace.workload, opts, "continuous", fast_forward=True)
    original = engine.policy.schedule
    engine.policy.schedule = lambda now: calls.append(now) or original(now)
    folded = engine.run()
    assert folded.summary["iterations"] == 500
    # The prefill only: nothing waits after it and the policy says it repeats its
    # decodes (`repeats_decodes`), so the engine starts the first decodes itself
    # (`next_decodes`, fast/arrivals.py's `after_admission`) and folds the rest
    # (fast/through.py).
    assert calls == [0]
    plain = Engine(trace.workload, opts, "continuous", fast_forward=False).run()
    assert plain.summary == folded.summary


def test_listeners_turn_folding_off():
    """With an event listener every dispatch is reported, so nothing is folded."""
    records = [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4,
                "output_tokens": 50}]
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    opts = Options.resolve({}, {"block_size": 4, "num_blocks": 20})
    events = []
    Engine(trace.workload, opts, "continuous", on_event=events.append).run()
    assert sum(1 for e in events if e.kind == "dispatch") == 50


@pytest.mark.slow  # with the sweep it speaks for: all 24 seeds under five policies
def test_random_workloads_do_fold():
    """The random workloads above exercise folding under serial, continuous, vllm,
    static and dynamic (sglang's ratio takes 600 decode steps to reach its floor:
    see the next test)."""
    # The exact counts: a change in where folding applies shows here, not only its
    # disappearing everywhere (the results themselves are pinned against stepping above).
    # (serial, continuous and vllm fold more since a first dispatch of decodes
    # after a prefill is folded at once when the policy is at a fixed point:
    # engine/fast/through.py, `_fold_fixed_point`; 8541, 4871 and 3537 before.)
    # (Then serial and continuous more with FOLD_AFTER 2 instead of 4, and vllm a
    # little less with its decoders counted, whose short stretches are not looked
    # at for folding: 8570, 4893 and 3538 before.)
    # (Then vllm a little less again, 3532 before, since the decodes after a
    # dispatch of whole prompts start without a call, counted: through.py's
    # `carries_on`.)
    # (Then vllm more, 3523 before, since a fold behind a blocked head goes on past
    # arrivals under first come, first served: fold_bounds.py's `past_arrivals`.)
    expected = {"serial": 8667, "continuous": 4976, "vllm": 3583, "static": 4070,
                "dynamic": 3856}
    for policy in ("serial", "continuous", "vllm", "static", "dynamic"):
        folded = 0
        for seed in range(24):
            rng = random.Random(1000 + seed)
            options = random_engine_options(rng)
            trace = parse_trace(trace_bytes(_workload(seed)), "ff.jsonl")
            engine = Engine(trace.workload, Options.resolve({}, options), policy,
                            fast_forward=True)
            engine.run()
            folded += engine.folded
        assert folded == expected[policy], policy


def test_sglang_folds_once_its_ratio_reaches_the_floor():
    """sglang's ratio decays for 600 decode steps; only then is a lone decode steady."""
    records = [{"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4,
                "output_tokens": 900}]
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    opts = Options.resolve({}, {"block_size": 4, "num_blocks": 300})
    engine = Engine(trace.workload, opts, "sglang", fast_forward=True)
    folded = engine.run()
    # Prefill, 600 decays, one decode at the floor folds the remaining 298.
    assert engine.folded == 900 - 1 - 600 - 1
    plain = Engine(trace.workload, opts, "sglang", fast_forward=False).run()
    assert plain.summary == folded.summary


def _events(records, policy, fast, **options):
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    opts = Options.resolve(trace.config, options)
    lines = []
    engine = Engine(trace.workload, opts, policy, on_event=lambda e: lines.append(e.to_json()),
                    fast_forward=fast)
    engine.run()
    return lines, engine.folded


@pytest.mark.parametrize("seed", slow_beyond(range(30), 3))
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_folded_and_stepwise_event_streams_are_identical(seed, policy):
    """With a listener, folding still produces every record, byte for byte: the blocked
    head reports, snapshots and dispatches of each folded step."""
    rng = random.Random(2000 + seed)
    options = dict(block_size=4, num_blocks=rng.randint(12, 48),
                   token_budget=rng.randint(4, 64), max_rows=rng.randint(1, 8),
                   release_delay=rng.choice([0, 0, 2]),
                   watermark=rng.choice([0.0, 0.0, 0.1, 0.3]))
    if seed % 3 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    records = _workload(seed)
    folded, count = _events(records, policy, True, **options)
    stepwise, none = _events(records, policy, False, **options)
    assert none == 0
    assert folded == stepwise


@pytest.mark.slow  # with the sweep it speaks for: all 30 seeds
def test_event_streams_fold_with_blocked_heads():
    """The random streams above include folds while a head is reported blocked, under
    continuous (reservation) and vllm (watermark and blocks)."""
    counts = {}
    for policy in ("continuous", "vllm"):
        total = 0
        for seed in range(30):
            rng = random.Random(2000 + seed)
            options = dict(block_size=4, num_blocks=rng.randint(12, 48),
                           token_budget=rng.randint(4, 64), max_rows=rng.randint(1, 8),
                           release_delay=rng.choice([0, 0, 2]),
                           watermark=rng.choice([0.0, 0.0, 0.1, 0.3]))
            lines, folded = _events(_workload(seed), policy, True, **options)
            if folded and any('"admission_blocked"' in line for line in lines):
                total += 1
        counts[policy] = total
    # Workloads (of 30) with a fold while a head was reported blocked, exactly.
    assert counts == {"continuous": 29, "vllm": 30}


def _cached_workload(seed: int) -> tuple[dict, list[dict]]:
    """Requests whose prompts share prefixes, as token ids or as block hashes (two
    hash entries per block of 4), some with output ids: prefix caching hits, and
    with a small pool, heads blocked for blocks while others decode."""
    rng = random.Random(seed)
    hashes = seed % 2 == 0
    config = {"type": "config", "hash_block_size": 2} if hashes else None
    groups = [[rng.randint(1, 9) for _ in range(rng.randint(4, 24))] for _ in range(3)]
    records = [config] if config else []
    t = 0
    for i in range(rng.randint(2, 24)):
        t += rng.choice([0, 0, 1, 3, 10])
        base = rng.choice(groups)
        ids = base[:rng.randint(1, len(base))] + [rng.randint(1, 9)
                                                  for _ in range(rng.randint(0, 12))]
        record = {"type": "request", "id": f"r{i}", "arrival": t,
                  "output_tokens": rng.randint(1, 40)}
        records.append(_with_prompt(record, ids, hashes, rng, 0.3, 9))
    return records


def _with_prompt(record: dict, ids: list[int], hashes: bool, rng: random.Random,
                 as_ids: float, top: int) -> dict:
    """`record` given its prompt `ids` as block hashes (two hash entries per block of
    4) or, with probability `as_ids`, its outputs as token ids too (1 to `top`)."""
    if hashes:
        record["prompt_tokens"] = len(ids)
        record["block_hashes"] = [hash(tuple(ids[:j + 2])) % 1000
                                  for j in range(0, len(ids), 2)]
    else:
        record["prompt_token_ids"] = ids
        if rng.random() < as_ids:
            record["output_token_ids"] = [rng.randint(1, top)
                                          for _ in range(record.pop("output_tokens"))]
    return record


def _cached_options(seed: int) -> dict:
    rng = random.Random(3000 + seed)
    options = dict(block_size=4, num_blocks=rng.randint(10, 40),
                   token_budget=rng.randint(4, 48), max_rows=rng.randint(1, 8),
                   release_delay=rng.choice([0, 0, 2]), prefix_caching=True,
                   watermark=rng.choice([0.0, 0.0, 0.1]))
    if seed % 3 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    return options


@pytest.mark.parametrize("seed", slow_beyond(range(30), 3))  # hashes on even seeds
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_folded_and_stepwise_replays_agree_with_prefix_caching(seed, policy):
    """With prefix caching (shared prefixes by token ids or block hashes, outputs as ids
    for some requests, a pool small enough to block heads), every summary field and
    request record is the same with and without folding."""
    records = _cached_workload(seed)
    options = _cached_options(seed)
    assert _replay(records, policy, True, **options) == _replay(records, policy, False,
                                                                 **options)


@pytest.mark.slow  # with the sweep it speaks for: all 30 seeds
def test_vllm_folds_with_a_head_blocked_for_blocks_under_prefix_caching(monkeypatch):
    """The workloads above include vllm folds whose head waits for blocks while the
    cache is on (the path that needs the decoded blocks to be unable to become hits),
    and steps where it declines because a running request's outputs are token ids."""
    from scheduler_sim.policies.vllm import VllmPolicy
    answers = []
    may_fold = VllmPolicy.may_fold

    def watching(self, blocked_reason):
        answer = may_fold(self, blocked_reason)
        if blocked_reason in ("blocks", "watermark"):
            answers.append(answer)
        return answer

    monkeypatch.setattr(VllmPolicy, "may_fold", watching)
    folded = 0
    for seed in range(30):
        trace = parse_trace(trace_bytes(_cached_workload(seed)), "ff.jsonl")
        opts = Options.resolve(trace.config, _cached_options(seed))
        engine = Engine(trace.workload, opts, "vllm", fast_forward=True)
        engine.run()
        folded += engine.folded
    assert True in answers and False in answers and folded > 0


class _Running:
    """A running request as `may_fold` reads it: its admission number and its
    outputs as token ids (reads of them counted in `reads`)."""

    def __init__(self, admit_seq, ids, reads):
        self.admit_seq, self._ids, self._reads = admit_seq, ids, reads

    @property
    def output_token_ids(self):
        self._reads.append(self.admit_seq)
        return self._ids


def test_vllm_may_fold_scans_only_the_requests_admitted_since_it_found_no_output_ids():
    """`may_fold` under prefix caching, a head blocked for blocks (FCFS, no host
    memory): the running requests' outputs as token ids are read only for those admitted
    (numbered) after the last one of the last scan that found none. a (0) and b (1): both
    read, yes, known to 1; asked again: nothing read; a finished: nothing read; c (2,
    outputs as ids) admitted: c read, no, known still 1; again: c read, no; c gone, d (3)
    admitted: d read, yes, known to 3; nobody running: yes; b preempted and admitted
    again as 4 behind d: b read, yes, known to 4."""
    from types import SimpleNamespace
    from scheduler_sim.policies.vllm_fast import VllmFastPaths
    reads = []
    a, b, c, d = (_Running(0, None, reads), _Running(1, None, reads),
                  _Running(2, [7, 8], reads), _Running(3, None, reads))
    policy = SimpleNamespace(
        view=SimpleNamespace(allocator=SimpleNamespace(cache=object(), host=None)),
        options=SimpleNamespace(order="fcfs"), running=[a, b], plain_outputs_to=-2)
    steps = []

    def ask():
        reads.clear()
        answer = VllmFastPaths.may_fold(policy, "blocks")
        steps.append((answer, list(reads), policy.plain_outputs_to))

    ask()
    ask()
    policy.running.remove(a)
    ask()
    policy.running.append(c)
    ask()
    ask()
    policy.running.remove(c)
    policy.running.append(d)
    ask()
    policy.running.clear()
    ask()
    b.admit_seq = 4
    policy.running[:] = [d, b]
    ask()
    assert steps == [(True, [1, 0], 1), (True, [], 1), (True, [], 1), (False, [2], 1),
                     (False, [2], 1), (True, [3], 3), (True, [], 3), (True, [4], 4)]
    # The watermark likewise; other reasons are not asked about outputs at all.
    reads.clear()
    assert VllmFastPaths.may_fold(policy, "budget") and reads == []


def test_vllm_may_fold_answers_as_a_scan_of_every_running_request(monkeypatch):
    """Replaying the prefix-cached workloads above (seeds 0-9) folded, outputs as token
    ids for some requests, every answer of `may_fold` with a head blocked for blocks
    or the watermark is the scan of every running request's outputs, and each replay
    equals the stepped one; some answers read no request, and some are no."""
    from scheduler_sim.policies.vllm import VllmPolicy
    may_fold = VllmPolicy.may_fold
    seen = set()

    def checked(self, blocked_reason):
        known = self.plain_outputs_to
        answer = may_fold(self, blocked_reason)
        if (blocked_reason in ("blocks", "watermark") and self.view.allocator.cache is not None
                and self.options.order != "lpm" and self.view.allocator.host is None):
            assert answer == all(r.output_token_ids is None for r in self.running)
            seen.add((answer, bool(self.running) and self.running[-1].admit_seq == known))
        return answer

    monkeypatch.setattr(VllmPolicy, "may_fold", checked)
    for seed in range(10):
        records = _cached_workload(seed)
        options = _cached_options(seed)
        assert _replay(records, "vllm", True, **options) == _replay(records, "vllm", False,
                                                                    **options)
    assert (True, True) in seen and (False, False) in seen


# Each dispatch of these few tokens one 10 ms step; the host link moves one block of 4
# tokens (Llama-3-8B: 524,288 bytes) a step, and each copy adds one step.
_HOST_CLOCK = dict(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.01, clock_resolution=0.01,
                   block_size=4, host_link_gb_per_s=524_288 / 0.01 / 1e9,
                   host_copy_latency_us=10_000.0)


def test_a_head_loaded_from_host_memory_never_widens_a_fold():
    """vllm, prefix caching, host memory written through, a watermark of int(0.34 * 12)
    = 4 blocks, no full-prompt gate, chunks of 4. a (ids 1-16) runs at 0: its 4 blocks are
    written through. b (48 other ids) at 10 takes all 12 blocks, evicting a's. c (a's 16
    ids and 12 more) at 20 finds them in host memory only: it takes blocks for its 28
    rows (7) and loads 16 rows, 20 -> 25 (1 + 4 steps). d (10 tokens, 30 outputs)
    prefills 20-22 (4 rows, then 6) and decodes. From 25 c's first chunk (rows 16-19)
    needs 5 blocks, 2 fewer than it holds: needed -2, which fits any free count, and
    -2 + 4 > free (1, then 0 once d opens its fifth block at 28): blocked by the
    watermark, while d decodes alone. A fold once took that -2 as room for 2 blocks
    more than were free (d's grow then failed: an internal invariant). Stepped, d needs
    a sixth block at 32 (row 20) and preempts itself with 11 outputs; c is admitted at
    33 (3 chunks, 1 decode) and finishes at 37; d is loaded back (16 rows still cached,
    4 from host memory, 37 -> 39) and decodes its last 19 outputs, 39 -> 58."""
    a = list(range(1, 17))

    def request(rid, arrival, ids, outputs):
        return {"type": "request", "id": rid, "arrival": arrival, "prompt_tokens": len(ids),
                "output_tokens": outputs, "prompt_token_ids": ids}

    records = [request("a", 0, a, 1), request("b", 10, list(range(101, 149)), 1),
               request("c", 20, a + list(range(201, 213)), 2),
               request("d", 20, list(range(301, 311)), 30)]
    options = dict(_HOST_CLOCK, num_blocks=12, token_budget=64, prefill_chunk=4,
                   watermark=0.34, full_prompt_gate=False, prefix_caching=True,
                   host_kv_gib=64 * 524_288 / 2 ** 30)
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    events = []
    Engine(trace.workload, Options.resolve(trace.config, options), "vllm",
           on_event=lambda e: events.append(e.to_dict())).run()
    of = [e for e in events if e["event"] == "admission_blocked" and e["id"] == "c"]
    assert [(e["tick"], e["reason"], e["needed"], e["free"]) for e in of] == [
        (25, "watermark", -2, 1), (26, "watermark", -2, 1), (27, "watermark", -2, 1),
        (28, "watermark", -2, 0), (29, "watermark", -2, 0), (30, "watermark", -2, 0),
        (31, "watermark", -2, 0), (32, "preemption", 0, 5)]
    assert [(e["tick"], e["id"], e["outputs"], e["rows"]) for e in events
            if e["event"] == "preempted"] == [(32, "d", 11, 20)]
    assert [(e["tick"], e["id"]) for e in events if e["event"] == "finished"] == [
        (1, "a"), (11, "b"), (37, "c"), (58, "d")]
    engine = Engine(trace.workload, Options.resolve(trace.config, options), "vllm",
                    fast_forward=True)
    folded = engine.run()  # (no InvariantError)
    assert engine.folded > 0
    stepped = _replay(records, "vllm", False, **options)
    assert (folded.summary, [request_record(r) for r in folded.requests]) == stepped


def test_a_head_whose_gpu_hit_leads_to_host_memory_is_not_folded_past():
    """vllm, prefix caching, a pool of 6 blocks, host memory of 6 blocks written through
    (a block's copy one step, no latency), no full-prompt gate, a budget of 4 tokens. x
    (ids 1-12, 1 output) prefills 4 a step at 0-2 (blocks K0-K2, each written through as
    it fills) and ends at 3; z (4 ids, 1 output) at 4 fills a fourth block and ends at 5.
    y (13 ids, 12 outputs) prefills at 6-9 (4, 4, 4, 1) in 4 blocks: the 2 never used,
    then the least recently freed, K2 (8) and K1 (9); its third full block is the seventh
    stored, and host memory evicts its least recently used, K0. h (ids 1-12 and 4 more)
    at 10 hits K0 on the GPU and K1, K2 after it in host memory: a load, which takes
    blocks for its whole 16 rows, 4 - 1 + 1 (K0 sits free) = 4 > 2 free (K0 and z's):
    blocked at 10, 11 and 12 while y decodes rows 13-15. At 13 y's row 16 opens a block,
    evicting K0: h has no GPU hit, host memory (matched from its first block) lacks K0,
    and its first chunk (3 tokens beside y's decode) needs 1 block, as free: admitted in
    the same call. A fold from 11 took the head's need for one that only grows and went
    on past 13 with h waiting; the policy declines it now (`may_fold`)."""
    x = list(range(1, 13))

    def request(rid, arrival, ids, outputs):
        return {"type": "request", "id": rid, "arrival": arrival, "prompt_tokens": len(ids),
                "output_tokens": outputs, "prompt_token_ids": ids}

    records = [request("x", 0, x, 1), request("z", 4, [101, 102, 103, 104], 1),
               request("y", 6, list(range(201, 214)), 12),
               request("h", 10, x + [301, 302, 303, 304], 2)]
    options = dict(_HOST_CLOCK, host_copy_latency_us=0.0, num_blocks=6, token_budget=4,
                   full_prompt_gate=False, prefix_caching=True,
                   host_kv_gib=6 * 524_288 / 2 ** 30)
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    events = []
    Engine(trace.workload, Options.resolve(trace.config, options), "vllm",
           on_event=lambda e: events.append(e.to_dict())).run()
    h = [e for e in events if e.get("id") == "h" and e["tick"] <= 13]
    assert [(e["tick"], e["event"], e.get("needed"), e.get("free"), e.get("cached_tokens"))
            for e in h if e["event"] != "evicted"] == [
        (10, "arrival", None, None, None), (10, "admission_blocked", 4, 2, None),
        (11, "admission_blocked", 4, 2, None), (12, "admission_blocked", 4, 2, None),
        (13, "admitted", None, None, 0)]
    assert [(e["tick"], e["id"], e["written_by"], e["block"]) for e in events
            if e["event"] == "evicted" and e["tick"] <= 13] == [
        (8, "y", "x", 2), (9, "y", "x", 1), (13, "y", "x", 0), (13, "h", "z", 0)]
    assert not [e for e in events if e["event"] == "kv_load_started"]
    assert _replay(records, "vllm", True, **options) == _replay(records, "vllm", False,
                                                                **options)


class _Lines:
    """A listener that takes lines, as the events file does (folded stretches hand it
    lines written without records)."""

    def __init__(self, clock):
        from scheduler_sim.records.event_lines import LineListener

        class Collect(LineListener):
            def write(inner, line):
                self.lines.append(line)

        self.lines = []
        self.listener = Collect("p", clock)


@pytest.mark.parametrize("seed", slow_beyond(range(12), 3))
@pytest.mark.parametrize("policy", ["continuous", "vllm", "sglang"])
def test_folded_lines_equal_the_stepwise_records_lines(seed, policy):
    """Folded stretches written as lines directly (the events file's path, tagged with
    a policy, in ticks or seconds) give the same bytes as every record written in a
    stepwise replay."""
    from scheduler_sim.records.clock import Clock
    rng = random.Random(2000 + seed)
    options = dict(block_size=4, num_blocks=rng.randint(12, 48),
                   token_budget=rng.randint(4, 64), max_rows=rng.randint(1, 8),
                   release_delay=rng.choice([0, 0, 2]))
    if seed % 2 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    trace = parse_trace(trace_bytes(_workload(seed)), "ff.jsonl")
    opts = Options.resolve(trace.config, options)
    clock = Clock.of(opts)
    sink = _Lines(clock)
    folded = Engine(trace.workload, opts, policy, on_event=sink.listener, fast_forward=True)
    folded.run()
    stepwise = []
    Engine(trace.workload, opts, policy, fast_forward=False,
           on_event=lambda e: stepwise.append(e.to_json("p", clock))).run()
    assert sink.lines == stepwise


def test_sglang_folds_stop_where_its_decode_would_evict_ahead():
    """sglang, prefix caching, blocks of 8, a pool of 48 blocks, 4 rows, everything at
    0 (a fuzzed case, reduced). Each SGLang decode step first evicts cached free blocks
    until every row could open an uncached one (policies/sglang_decode.py); a fold
    must stop before the uncached free blocks fall below its rows, else it keeps a
    cached block stepping evicts ahead. Here r12's block (ids 9 9 1 5 1 8 3 3) is so
    evicted before r26 (the same 8 ids and one more) looks it up: stepped, r26 hits
    nothing; the fold used to keep the block and give r26 8 cached tokens."""
    ones = [("r2", 366, [9]), ("r9", 156, [3]), ("r11", 316, [4]),
            ("r12", 1, [9, 9, 1, 5, 1, 8, 3, 3]), ("r13", 76, [3]), ("r14", 13, [4]),
            ("r18", 83, [3]), ("r19", 50, [9]), ("r23", 22, [3, 3, 1, 2, 4]),
            ("r24", 8, [4, 9, 4]), ("r26", 1, [9, 9, 1, 5, 1, 8, 3, 3, 6])]
    records = [{"type": "request", "id": rid, "arrival": 0, "output_tokens": n,
                "prompt_token_ids": ids} for rid, n, ids in ones]
    options = dict(block_size=8, num_blocks=48, max_rows=4, prefix_caching=True)
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    engine = Engine(trace.workload, Options.resolve(trace.config, options), "sglang",
                    fast_forward=True)
    folded = engine.run()
    assert engine.folded > 0
    assert {r.rid: r.cached_tokens for r in folded.requests}["r26"] == 0
    assert folded.summary["cached_tokens"] == 0 and folded.summary["iterations"] == 843
    stepped = _replay(records, "sglang", False, **options)
    assert (folded.summary, [request_record(r) for r in folded.requests]) == stepped


def test_the_fold_asks_sglang_for_the_blocks_its_decode_leaves_uncached():
    """`Policy.fold_room`: a (17 token ids, 1 output) ends alone in a pool of 48 and
    leaves its 2 full blocks of 8 cached among the 48 free. An SGLang decode step of 4
    rows first evicts until 4 free blocks carry no key, so a fold of 4 rows may take
    48 - 2 - 4 = 42 blocks: the engine's 48 is capped, its 40 kept. With blocks of 1
    (17 cached) the step evicts nothing ahead: room as given. vllm: the default.
    Without prefix caching (blocks of 8, none cached) nothing is evicted ahead either:
    room as given, not 48 - 0 - 4 = 44."""
    records = [{"type": "request", "id": "a", "arrival": 0, "output_tokens": 1,
                "prompt_token_ids": list(range(1, 18))}]
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    answers = {}
    for policy, size, cached in (("sglang", 8, True), ("sglang", 1, True), ("vllm", 8, True),
                                 ("sglang", 8, False)):
        options = Options.resolve(trace.config, dict(block_size=size, num_blocks=48,
                                                     prefix_caching=cached))
        engine = Engine(trace.workload, options, policy, fast_forward=False)
        engine.run()
        answers[policy, size, cached] = (
            engine.allocator.free, engine.allocator.cached_free,
            engine.policy.fold_room(4, 48), engine.policy.fold_room(4, 40))
    assert answers == {("sglang", 8, True): (48, 2, 42, 40), ("sglang", 1, True): (48, 17, 48, 40),
                       ("vllm", 8, True): (48, 2, 48, 40), ("sglang", 8, False): (48, 0, 48, 40)}


def test_vllm_folds_no_block_opening_while_a_running_request_waits_for_a_drain():
    """`VllmFastPaths.fold_room` with a release delay. 8 blocks of 4, budget 16, chunk 8,
    release_delay 6; f (P=2, N=8) at 0, a (P=21, N=1) and b (P=1, N=1) at 1. t0: f's
    prefill (1 block, 7 free). t1: f decodes (rows 2->3), a's chunk 8 (2 blocks), b's
    prefill (1): 4 free. t2: b finished, its block draining until 8; f 3->4, a 8->16
    (2 blocks): 2 free. t3: f 4->5 opens a block (1 free); a's last 5 rows (16->21) need 2
    blocks, more than the 1 free but not than 1 free + 1 draining: a sits the step out
    (`schedule`), as at t4, t5, t6 (f 5->8, no block). t7: f 8->9 opens the last free
    block, and a's 2 are more than 0 + 1: a is preempted (LIFO, itself; 16 rows, its 4
    blocks drain until 13). t8: f finished (8 outputs), blocks draining until 14; a waits
    for 6 blocks (free 1, 5 at 13) and is admitted at 14: 16 rows recomputed at 14, its 5
    at 15 (out 1), finished at 16. The fold from t3 may not take t7's step: it opens a
    block while a waits (it did: a was never preempted and finished at 15)."""
    records = [{"type": "request", "id": "f", "arrival": 0, "prompt_tokens": 2, "output_tokens": 8},
               {"type": "request", "id": "a", "arrival": 1, "prompt_tokens": 21, "output_tokens": 1},
               {"type": "request", "id": "b", "arrival": 1, "prompt_tokens": 1, "output_tokens": 1}]
    options = dict(block_size=4, num_blocks=8, token_budget=16, prefill_chunk=8, release_delay=6)
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    engine = Engine(trace.workload, Options.resolve(trace.config, options), "vllm")
    folded = engine.run()
    assert engine.folded > 0  # (t4 to t6 folded: they open no block)
    assert [(r.rid, r.finished_at, r.preemptions, r.replay_rows) for r in folded.requests] == [
        ("f", 8, 0, 0), ("a", 16, 1, 16), ("b", 2, 0, 0)]
    assert (folded.summary, [request_record(r) for r in folded.requests]) == _replay(
        records, "vllm", False, **options)


def _wide_options(seed: int) -> dict:
    """The engine of `random_engine_options` and, drawn after it, more of the options:
    blocks of 1-8 (the pool drawn times 16 / block size), chunks, a queue
    order, a resume order, a watermark, the gate, a victim, preemption caps, a prefill
    interval (1 half the time: vllm folds only then), a waiting timeout, prefix
    caching, SGLang's latch and priorities, and with a cost model host memory (swap or
    recompute, written through or not) on a clock of its own resolution."""
    rng = random.Random(4000 + seed)
    options = random_engine_options(rng, cost_model=seed % 2 == 0)
    options.update(block_size=rng.choice([1, 2, 4, 8]), prefill_chunk=rng.randint(1, 32),
                   order=rng.choice(["fcfs", "priority", "sjf", "edf"]),
                   resume_order=rng.choice(["front", "arrival"]),
                   watermark=rng.choice([0.0, 0.1]), full_prompt_gate=rng.random() < 0.5,
                   victim=rng.choice([None, "lifo", "priority", "most-blocks"]),
                   max_preemptions=rng.choice([None, 1]),
                   prefill_interval=rng.choice([1, 1, 2, 3]),
                   waiting_timeout=rng.choice([None, 50]), prefix_caching=rng.random() < 0.5,
                   admission_latch=rng.random() < 0.5,
                   priority_first=rng.choice(["low", "high"]))
    # A pool of 256-1024 tokens whatever the block size: room for the long outputs.
    options["num_blocks"] = options["num_blocks"] * 16 // options["block_size"]
    if "cost_model" in options:
        options.update(clock_resolution=rng.choice([0.0005, 0.002]),
                       host_kv_gib=rng.choice([0.0, 0.001, 0.05]))
        if options["host_kv_gib"]:
            options.update(preemption_mode=rng.choice(["recompute", "swap"]),
                           host_write=rng.choice(["through", "off"]))
    return options


def _wide_workload(seed: int) -> list[dict]:
    """`random_workload` with token ids from a few shared prefixes, priorities, a fifth
    of the outputs 300-900 tokens long, and `stir`'s cancellations and forced
    preemptions."""
    rng = random.Random(5000 + seed)
    groups = [[rng.randint(1, 9) for _ in range(rng.randint(4, 16))] for _ in range(2)]

    def each(request):
        base = rng.choice(groups)
        request["prompt_token_ids"] = base[:rng.randint(1, len(base))] + [
            rng.randint(1, 9) for _ in range(request.pop("prompt_tokens") % 8)]
        request["priority"] = rng.randint(0, 3)
        if rng.random() < 0.2:  # (sglang folds only after its ratio's 600-step decay)
            request["output_tokens"] = rng.randint(300, 900)

    requests = [r for r in random_workload(seed) if r["type"] == "request"]
    return stir(requests, rng, 60, each)


# The wider draw's 40 seeds, 9 and 12 first: the default tier runs those two, and
# both fold under every policy.
WIDE_SEEDS = [9, 12] + [seed for seed in range(40) if seed not in (9, 12)]
# How many of the other 38 fold under each policy: a floor, so that the draw fails
# when folding silently stops (sglang's and vllm's were 0 and 7 of 40 with outputs
# of at most 60 tokens and a prefill interval of 1 a third of the time).
WIDE_FOLDS = {"continuous": 38, "dynamic": 35, "serial": 38, "sglang": 13, "static": 37,
              "vllm": 15}


@pytest.mark.parametrize("seeds", [pytest.param(WIDE_SEEDS[:2], id="2"),
                                   pytest.param(WIDE_SEEDS[2:], id="38",
                                                marks=pytest.mark.slow)])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_folded_and_stepwise_replays_agree_over_more_options(seeds, policy):
    """Every summary field and request record is the same with and without folding,
    over the wider draw of options above; and folds happen: in both seeds of the
    default tier under every policy, in at least `WIDE_FOLDS` of the others."""
    folding = 0
    for seed in seeds:
        records, options = _wide_workload(seed), _wide_options(seed)
        trace = parse_trace(trace_bytes(records), "ff.jsonl")
        engine = Engine(trace.workload, Options.resolve(trace.config, options), policy,
                        fast_forward=True)
        result = engine.run()
        folded = result.summary, [request_record(r) for r in result.requests]
        assert folded == _replay(records, policy, False, **options), f"seed {seed}"
        folding += engine.folded > 0
    assert folding >= (WIDE_FOLDS[policy] if len(seeds) > 2 else 2)


def test_vllm_under_lpm_does_not_fold_past_a_head_blocked_for_blocks():
    """vllm, prefix caching, order lpm, blocks of 4, a pool of 21, 5 rows, victims by
    most blocks, a cost model (a fuzzed case, reduced). Behind a head blocked for
    blocks, the decodes' openings evict cached blocks; under lpm that reorders the
    queue (by cached prefix), and the new head may fit: stepped, r11 (a 4-token hit)
    is admitted at 113,167 us, while r0, r5, r6 and r12 still decode; the fold used to
    run past it to their finishes at 119,417 us."""
    ones = [("r0", 0, 19, [3]), ("r2", 0, 1, [6, 9, 6, 3, 4, 8, 1, 6]), ("r3", 44, 8, [3]),
            ("r5", 44, 11, [3]), ("r6", 44, 11, [6]), ("r8", 44, 1, [2, 3, 6, 7, 4, 7, 9, 7]),
            ("r11", 44, 1, [2, 3, 6, 7, 4]),
            ("r12", 44, 10, [2, 3, 6, 7, 4, 7, 9, 7, 5, 7, 8, 3, 1, 2, 2, 6, 6, 1, 3, 3]),
            ("r15", 51, 1, [6, 9, 6, 3, 4, 8, 1, 6, 4, 6, 1, 6, 5])]
    records = [{"type": "request", "id": rid, "arrival": t, "output_tokens": n,
                "prompt_token_ids": ids} for rid, t, n, ids in ones]
    options = dict(block_size=4, num_blocks=21, max_rows=5, order="lpm",
                   victim="most-blocks", prefix_caching=True,
                   cost_model="llama-3-8b/h100-sxm")
    trace = parse_trace(trace_bytes(records), "ff.jsonl")
    engine = Engine(trace.workload, Options.resolve(trace.config, options), "vllm",
                    fast_forward=True)
    folded = engine.run()
    assert engine.folded > 0
    record = {r.rid: request_record(r) for r in folded.requests}["r11"]
    assert (record["admitted"], record["cached_tokens"]) == (113167, 4)
    stepped = _replay(records, "vllm", False, **options)
    assert (folded.summary, [request_record(r) for r in folded.requests]) == stepped


def test_a_chunk_run_behind_a_decode_is_folded_at_once():
    """vllm with prefix caching, a budget of 8 tokens: `d` (2 prompt tokens) and the
    first 6 of `c`'s 30 are admitted at tick 0, `w` waits for the budget. From tick 1
    `d` decodes and `c`'s chunk takes the other 7 tokens, rows 6-13, 13-20, 20-27:
    three steps folded at tick 0 (fast/chunk_run.py), the next call at tick 4, where
    `c`'s last chunk (3 rows) leaves room for `w`, and the last: from tick 5 nothing
    waits and every row decodes (`w` ends there with its one output), so `vllm` is at
    its fixed point under prefix caching too and the decodes of `d` and `c` start
    without a call to `d`'s end at 20 (`repeats_decodes`). The blocks are taken as the
    calls take them, never-used ids lowest first: `d` 0, `c` 1-2 at tick 0; `c` 3-4,
    then 5; at tick 3 `d`'s row 4 opens block 6 before `c` takes 7-8."""
    records = [{"type": "request", "id": "d", "arrival": 0, "prompt_tokens": 2,
                "output_tokens": 20},
               {"type": "request", "id": "c", "arrival": 0, "prompt_tokens": 30,
                "output_tokens": 2},
               {"type": "request", "id": "w", "arrival": 0, "prompt_tokens": 4,
                "output_tokens": 1}]
    trace = parse_trace(trace_bytes(records), "chunks.jsonl")
    opts = Options.resolve({}, {"block_size": 4, "num_blocks": 64, "token_budget": 8,
                                "prefix_caching": True})
    results = []
    for fast in (True, False):
        engine = Engine(trace.workload, opts, "vllm", fast_forward=fast)
        calls = []
        schedule = engine.policy.schedule

        def watching(now, engine=engine, calls=calls, schedule=schedule):
            calls.append((now, engine.allocator.table("d")[:], engine.allocator.table("c")[:],
                          {r.rid: (r.resident, r.outputs) for r in engine.policy.running}))
            return schedule(now)

        engine.policy.schedule = watching
        result = engine.run()
        results.append((result.summary, [request_record(r) for r in result.requests]))
        if fast:
            assert engine.steadiness.chunks_folded == 3
            assert [call[0] for call in calls] == [0, 4]
            # At tick 4: `d` wrote rows 2-4 and emitted at ticks 1-4, `c` has 27 rows.
            assert calls[1][1:] == ([0, 6], [1, 2, 3, 4, 5, 7, 8],
                                    {"d": (5, 4), "c": (27, 0)})
        else:
            assert [call[0] for call in calls[:5]] == [0, 1, 2, 3, 4]
            assert calls[4][1:3] == ([0, 6], [1, 2, 3, 4, 5, 7, 8])
    assert results[0] == results[1]
    summary, requests = results[0]
    assert summary["iterations"] == 20 and summary["makespan"] == 20
    assert [(r["id"], r["first_token"], r["finished"]) for r in requests] == [
        ("d", 1, 20), ("c", 5, 6), ("w", 5, 5)]


def _chunked_workload(seed: int) -> list[dict]:
    """Decoders (prompts of 1-8 tokens, 10-80 outputs) and long prompts (40-160 tokens,
    1-10 outputs) arriving among them, as block hashes on even seeds, as token ids on
    odd ones (some outputs as ids), a tenth cancelled: under a budget of 8-24 tokens a
    long prompt is chunked behind the decodes with the queue head blocked for the
    budget (runs that fast/chunk_run.py folds), and a small pool blocks heads too."""
    rng = random.Random(seed)
    hashes = seed % 2 == 0
    records = [{"type": "config", "hash_block_size": 2}] if hashes else []
    t = 0
    for i in range(rng.randint(3, 14)):
        t += rng.choice([0, 0, 1, 5, 20])
        long = rng.random() < 0.5
        ids = [rng.randint(1, 5) for _ in range(rng.randint(40, 160) if long
                                                 else rng.randint(1, 8))]
        record = {"type": "request", "id": f"r{i}", "arrival": t,
                  "output_tokens": rng.randint(1, 10) if long else rng.randint(10, 80)}
        records.append(_with_prompt(record, ids, hashes, rng, 0.2, 5))
        if rng.random() < 0.1:
            records.append({"type": "cancel", "id": f"r{i}", "at": t + rng.randint(0, 60)})
    return records


def _chunked_options(seed: int) -> dict:
    rng = random.Random(4000 + seed)
    options = dict(block_size=4, num_blocks=rng.randint(24, 120),
                   token_budget=rng.randint(8, 24), max_rows=rng.randint(2, 8),
                   release_delay=rng.choice([0, 0, 0, 2]), prefix_caching=True)
    if seed % 3 == 0:
        options.update(cost_model="llama-3-8b/h100-sxm", tick_seconds=0.002)
    if seed % 5 == 4:
        options["prefill_chunk"] = rng.randint(4, 16)
    return options


@pytest.mark.parametrize("seed", slow_beyond(range(30), 3))  # a cost model on seed 0
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_folded_and_stepwise_replays_agree_over_chunk_runs(seed, policy):
    """Long prompts chunked behind decodes with the head blocked for the budget (and
    for blocks), with prefix caching: every summary field and request record is the
    same with and without folding."""
    records = _chunked_workload(seed)
    options = _chunked_options(seed)
    assert _replay(records, policy, True, **options) == _replay(records, policy, False,
                                                                 **options)


@pytest.mark.slow  # with the sweep it speaks for: all 30 seeds
def test_chunk_runs_fold_in_the_chunked_workloads():
    """The workloads above fold chunk runs under vllm, with and without a cost model
    (the exact count: a change in where they fold shows here)."""
    folded = {}
    for seed in range(30):
        trace = parse_trace(trace_bytes(_chunked_workload(seed)), "ff.jsonl")
        options = _chunked_options(seed)
        engine = Engine(trace.workload, Options.resolve(trace.config, options), "vllm",
                        fast_forward=True)
        engine.run()
        key = "cost" if "cost_model" in options else "ticks"
        folded[key] = folded.get(key, 0) + engine.steadiness.chunks_folded
    # (80 and 92 before chunk runs' folds went on past arrivals: fold_bounds.py; 89 and
    # 97 before a run with nothing waiting was folded too: chunk_run.py.)
    assert folded == {"cost": 97, "ticks": 148}
