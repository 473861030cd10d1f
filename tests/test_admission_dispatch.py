"""An admission's dispatch started and completed from its shape (engine/fast/admission.py):
the cohort's members beside fresh whole prompts, the results the stepped pipeline's."""
from __future__ import annotations

import pytest

from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.fast import admission, arrivals, blocked, counted
from scheduler_sim.records.event_lines import LineListener
from test_fold_arrivals import (THREE, TOGETHER, TWO, _arrivals_workload, _engine, _options,
                                _outcome, listened_lines)


@pytest.fixture
def taken(monkeypatch):
    """How often each path of admission.py ran: started from the shape, declined
    (the stepped `_start` instead), completed from the shape."""
    count = {"started": 0, "declined": 0, "completed": 0}
    start, complete = admission.start_admission, admission.complete_admission

    def start_admission(*args):
        flight = start(*args)
        count["started" if flight is not None else "declined"] += 1
        return flight

    def complete_admission(*args):
        count["completed"] += 1
        return complete(*args)
    monkeypatch.setattr(arrivals, "start_admission", start_admission)
    monkeypatch.setattr(blocked, "start_admission", start_admission)  # (at a finish behind a head)
    monkeypatch.setattr(counted, "complete_admission", complete_admission)  # (`complete_now`)
    monkeypatch.setattr(arrivals, "complete_admission", complete_admission)  # (`after_admission`)
    return count


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_an_arrival_into_counted_decodes_is_started_from_its_shape(policy, monkeypatch):
    """TWO (tick clock, blocks of 4): a decodes as the cohort's only member when b
    (P=4, N=3) arrives at 3; the dispatch at 3 is a's decode (a member) and b's
    whole prompt (a row): 2 outputs at 4, b's first. The run's tokens then: a's
    prompt and b's, 8; a's decodes at 1, 2 and 3. b ends at 6, a at 10."""
    engine = _engine(TWO, policy, block_size=4, num_blocks=16)
    starts = []
    start = admission.start_admission

    def spy(engine, *args):
        flight = start(engine, *args)
        stats = engine.ledger.stats
        starts.append((engine.now, [r.rid for r in flight.requests], len(flight.rows),
                       flight.members, flight.outputs, flight.done,
                       stats.prompt_tokens, stats.decode_tokens))
        return flight
    monkeypatch.setattr(arrivals, "start_admission", spy)
    result = engine.run()
    assert starts == [(3, ["a", "b"], 1, 1, 2, 4, 8, 3)]
    assert [(r.rid, r.first_token_at, r.finished_at) for r in result.requests] == [
        ("a", 1, 10), ("b", 4, 6)]
    assert _outcome(result) == _outcome(_engine(TWO, policy, False, block_size=4,
                                                num_blocks=16).run())


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
@pytest.mark.parametrize("records, started", [(TWO, 1), (THREE, 2), (TOGETHER, 1)])
def test_the_hand_worked_cases_take_the_path(policy, records, started, taken):
    """b at 3 (and c at 4, or with b at 3): every admission the engine makes itself
    there is one of members and fresh whole prompts, started and completed here."""
    result = _engine(records, policy, block_size=4, num_blocks=16).run()
    assert taken == {"started": started, "declined": 0, "completed": started}
    assert _outcome(result) == _outcome(_engine(records, policy, False, block_size=4,
                                                num_blocks=16).run())


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_the_random_workloads_take_the_path(policy, taken):
    """Over test_fold_arrivals.py's first 12 random workloads (compared there with the
    stepped replays, with and without a cost model and events), the admissions the
    engine makes itself (test_fold_arrivals.py counts 66 and 70 after arrivals;
    under `continuous` 5 more at a finish behind a blocked head, blocked.py):
    every one started from the shape and completed so (no listener, every
    prompt fresh); the results are the stepped replay's."""
    for seed in range(12):
        records, options = _arrivals_workload(seed), _options(seed)
        result = _engine(records, policy, **options).run()
        assert _outcome(result) == _outcome(_engine(records, policy, False, **options).run())
    assert taken == {"continuous": {"started": 71, "declined": 0, "completed": 71},
                     "vllm": {"started": 70, "declined": 0, "completed": 70}}[policy]


def test_a_newcomers_credit_is_read_off_the_request(monkeypatch):
    """`complete_admission` lets a newcomer join when it holds a credit (under
    `continuous`, which reserves) and reads it off the request, not the
    allocator. TWO (blocks of 4): b (P=4, N=3) is admitted at 3 with a credit of
    2 blocks (its 6 rows) and joins at 4, its credit the same on both sides.
    Over the 12 random workloads every newcomer's `Request.credit` is its
    allocator's, and positive (77 newcomers in 71 admissions, 5 of them at a
    finish behind a blocked head)."""
    seen = []
    complete = admission.complete_admission

    def spy(engine, flight):
        credits = engine.allocator.credit
        seen.extend((req.rid, req.credit, credits(req.rid)) for req, _ in flight.rows)
        complete(engine, flight)
        assert all(req in engine.cohort.members for req, _ in flight.rows
                   if req.output_tokens > 1)
    monkeypatch.setattr(counted, "complete_admission", spy)
    monkeypatch.setattr(arrivals, "complete_admission", spy)
    _engine(TWO, "continuous", block_size=4, num_blocks=16).run()
    assert seen == [("b", 2, 2)]
    seen.clear()
    for seed in range(12):
        _engine(_arrivals_workload(seed), "continuous", **_options(seed)).run()
    assert all(mine == theirs and mine > 0 for _, mine, theirs in seen)
    assert len(seen) == 77


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_with_a_listener_the_admission_writes_the_stepped_lines(policy, taken):
    """With an event listener the admission at 3 is started and completed from its
    shape too, and writes the stepped start's snapshot and dispatch
    (`Counting._write_admission`): a line listener the two lines as one text,
    another listener the records. Blocks of 4, 16 of them: a (P=4) holds 2 after
    its decodes at 1 and 2, its decode at 3 opens none, b's prompt of 4 takes
    one at the start (14 free before it); continuous reserves a's 13 rows' 4
    blocks and b's 6 rows' 2, vllm none. The dispatch: a's decode, b's whole
    prompt, 5 tokens, done at 4. Both streams are the stepped replay's."""
    events, lines, stepped = [], [], []

    class Lines(LineListener):
        def write(self, line):
            lines.append(line)

        def write_text(self, text):  # (kept whole: one entry)
            lines.append(text)
    result = _engine(TWO, policy, on_event=events.append, block_size=4,
                     num_blocks=16).run()
    _engine(TWO, policy, on_event=Lines(None, None), block_size=4, num_blocks=16).run()
    assert taken == {"started": 2, "declined": 0, "completed": 2}
    expected = _engine(TWO, policy, False, on_event=stepped.append, block_size=4,
                       num_blocks=16).run()
    assert _outcome(result) == _outcome(expected)
    assert events == stepped
    reserved = 6 if policy == "continuous" else 0
    assert [line for line in lines if line.startswith('{"tick":3,"event":"')][2:] == [
        f'{{"tick":3,"event":"snapshot","waiting":0,"running":2,"reserved":{reserved},'
        '"allocated":2,"draining":0,"free":14}\n'
        '{"tick":3,"event":"dispatch","rows":[{"id":"a","phase":"decode","tokens":1,'
        '"emits":true},{"id":"b","phase":"prefill","tokens":4,"emits":true}],'
        '"tokens":5,"done":4}']
    assert "\n".join(lines).split("\n") == [event.to_json(None, None) for event in stepped]


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_with_a_listener_token_ids_go_the_stepped_way(policy, taken):
    """With a listener, b's prompt given as token ids is written in its row, from
    the shape; b's outputs given as token ids decline the shape (the stepped
    completion does not let b join the cohort: its rows' records name them).
    Both streams are the stepped replay's."""
    for field, ids, declined in (("prompt_token_ids", [7, 8, 9, 6], 0),
                                 ("output_token_ids", [5, 4, 3], 1)):
        records = [dict(TWO[0]), dict(TWO[1])]
        records[1][field] = ids
        if field == "output_token_ids":
            del records[1]["output_tokens"]
        events, stepped = [], []
        _engine(records, policy, on_event=events.append, block_size=4, num_blocks=16).run()
        _engine(records, policy, False, on_event=stepped.append, block_size=4,
                num_blocks=16).run()
        assert events == stepped
        dispatch = [e for e in events if e.tick == 3 and type(e).__name__ == "Dispatch"]
        assert dispatch[0].rows[1] == ("b", "prefill", 4, True,
                                       [7, 8, 9, 6] if not declined else None)
        assert taken["declined"] == declined
        taken.update(started=0, declined=0, completed=0)


@pytest.mark.parametrize("policy", ["continuous", "vllm"])
def test_the_random_workloads_take_the_path_with_a_listener(policy, taken):
    """The same 12 workloads with a line listener (the events file's kind, tagged with
    a policy, in ticks or seconds): the streams are the stepped replay's byte for
    byte, and the admissions the engine makes itself are started from the shape
    as without a listener (66 and 70; none of these prompts or outputs is given
    as token ids)."""
    for seed in range(12):
        lines, stepped = listened_lines(seed, policy)
        assert lines == stepped
    assert taken == {"continuous": {"started": 66, "declined": 0, "completed": 66},
                     "vllm": {"started": 70, "declined": 0, "completed": 70}}[policy]


def test_vllm_asks_the_blocks_of_members_decodes_by_count(monkeypatch):
    """vllm's `admit_arrivals` asks the engine which decodes open a block
    (`Counting.decodes_opening`): when every decode is a member the answer is the
    cohort's count and no request to grow, without a pass over the rows; the
    same answer as the pass gives. Over the 12 random workloads: 118 asks (70
    admissions; the others declined), every one with every decode a member."""
    asked = []
    answer = Engine.decodes_opening

    def spy(engine, decodes):
        cohort = engine.cohort
        members = cohort.members if cohort is not None else ()
        size = engine.allocator.block_size
        opening = [r for r in decodes if r not in members and not r.resident % size]
        grow = engine.allocator.blocks_to_grow
        expected = sum(grow(r.rid, r.resident + 1) for r in opening)
        expected += cohort.opening() if members else 0
        got = answer(engine, decodes)
        asked.append(bool(members) and all(r in members for r in decodes))
        assert got == (expected, opening)
        return got
    monkeypatch.setattr(Engine, "decodes_opening", spy)
    for seed in range(12):
        records, options = _arrivals_workload(seed), _options(seed)
        result = _engine(records, "vllm", **options).run()
        assert _outcome(result) == _outcome(_engine(records, "vllm", False, **options).run())
    assert (len(asked), asked.count(True)) == (118, 118)
