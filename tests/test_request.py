"""Request: named transitions, phases, row accounting, preemption and recompute (L1-L3)."""
from __future__ import annotations

import pytest

from scheduler_sim.records.errors import InvariantError
from scheduler_sim.requests.request import DECODE, PREFILL, RECOMPUTE, Request
from scheduler_sim.records.states import RequestStatus

S = RequestStatus
TERMINAL = [S.FINISHED_STOPPED, S.FINISHED_LENGTH_CAPPED, S.FINISHED_ABORTED,
            S.FINISHED_IGNORED, S.FINISHED_TIMEOUT, S.FINISHED_ERROR]


def running(prompt: int = 4, output: int = 3, **kw) -> Request:
    """A request admitted at tick 0 with sequence 0 and a credit of 2 blocks."""
    r = Request("a", 0, 0, prompt, output, **kw)
    r.admit(0, 0, 2)
    return r


def step(r: Request, tokens: int, now: int) -> bool:
    """Write one chunk as the engine does (emits decided first); return whether it emitted."""
    emits = r.chunk_emits(tokens)
    r.record_rows(tokens)
    if emits and r.emit(now):
        r.finish(now)
    return emits


# --- states (L1) ---------------------------------------------------------------------


def test_live_states_order_before_terminal_ones():
    """WAITING < RUNNING < PREEMPTED < every terminal state, so 'finished' is one compare."""
    assert S.WAITING < S.RUNNING < S.PREEMPTED < S.WAITING_FOR_REMOTE_KV
    for s in TERMINAL:
        assert s > S.WAITING_FOR_REMOTE_KV
    assert set(S) == {S.WAITING, S.RUNNING, S.PREEMPTED, S.WAITING_FOR_REMOTE_KV, *TERMINAL}


def test_is_finished_exactly_for_terminal_states():
    """is_finished is False for WAITING, RUNNING, PREEMPTED, WAITING_FOR_REMOTE_KV and True
    for the six others."""
    assert [s.is_finished for s in (S.WAITING, S.RUNNING, S.PREEMPTED,
                                    S.WAITING_FOR_REMOTE_KV)] == [False] * 4
    assert [s.is_finished for s in TERMINAL] == [True] * 6


def test_labels_are_lower_case_names():
    """label is what events print: finished_length_capped, waiting, ..."""
    assert S.FINISHED_LENGTH_CAPPED.label == "finished_length_capped"
    assert S.WAITING.label == "waiting"
    assert [s.label for s in S] == [s.name.lower() for s in S]


# --- construction --------------------------------------------------------------------


def test_new_request_waits_with_nothing_written():
    """A fresh request: WAITING, 0 outputs, 0 resident, max_tokens defaults to N."""
    r = Request("a", 3, 7, 5, 2)
    assert (r.rid, r.index, r.arrival) == ("a", 3, 7)
    assert r.status is S.WAITING
    assert (r.outputs, r.resident, r.restore, r.high_water) == (0, 0, 0, 0)
    assert (r.useful_rows, r.replay_rows, r.preemptions) == (0, 0, 0)
    assert r.max_tokens == 2
    assert (r.admitted_at, r.first_token_at, r.finished_at) == (None, None, None)
    assert r.committed_rows == 0
    assert Request("b", 0, 0, 5, 2, max_tokens=9).max_tokens == 9


# --- named transitions assert their start state (L1) ---------------------------------


def _in_state(status: RequestStatus) -> Request:
    """A request brought to `status` through the named transitions only."""
    r = Request("a", 0, 0, 4, 1)
    if status is S.WAITING:
        return r
    if status is S.FINISHED_IGNORED:
        r.reject(0)
        return r
    if status is S.FINISHED_TIMEOUT:
        r.time_out(0)
        return r
    if status is S.FINISHED_ERROR:
        r.fail(0)
        return r
    if status is S.FINISHED_ABORTED:
        r.cancel(0)
        return r
    r.admit(0, 0, 1)
    if status is S.RUNNING:
        return r
    if status is S.PREEMPTED:
        r.preempt()
        return r
    if status is S.WAITING_FOR_REMOTE_KV:
        r.wait_for_remote_kv()
        return r
    r.record_rows(4)
    r.emit(1)
    if status is S.FINISHED_STOPPED:
        r.max_tokens = 2  # N=1 < M=2
    r.finish(1)
    return r


@pytest.mark.parametrize("status", list(S))
def test_helper_reaches_each_state(status):
    """The helper reaches every state through named methods only."""
    assert _in_state(status).status is status


ALLOWED = {
    "admit": {S.WAITING, S.PREEMPTED},
    "finish": {S.RUNNING},
    "preempt": {S.RUNNING},
    "cancel": {S.WAITING, S.RUNNING, S.PREEMPTED, S.WAITING_FOR_REMOTE_KV},
    "reject": {S.WAITING},
    "time_out": {S.WAITING, S.PREEMPTED},
    "fail": {S.WAITING, S.RUNNING, S.PREEMPTED, S.WAITING_FOR_REMOTE_KV},
    "wait_for_remote_kv": {S.RUNNING, S.WAITING, S.PREEMPTED},
    "load_remote_kv": {S.WAITING_FOR_REMOTE_KV},
}


DEST = {
    "admit": S.RUNNING,
    "finish": S.FINISHED_LENGTH_CAPPED,  # N == M in the helper's requests
    "preempt": S.PREEMPTED,
    "cancel": S.FINISHED_ABORTED,
    "reject": S.FINISHED_IGNORED,
    "time_out": S.FINISHED_TIMEOUT,
    "fail": S.FINISHED_ERROR,
    "wait_for_remote_kv": S.WAITING_FOR_REMOTE_KV,
    "load_remote_kv": S.WAITING,
}


def _call(r: Request, action: str) -> None:
    """Perform one named transition on `r` with fixed arguments."""
    if action == "admit":
        r.admit(5, 1, 1)
    elif action == "finish":
        r.outputs = r.output_tokens  # isolate the state check from the output check
        r.finish(5)
    elif action in ("preempt", "wait_for_remote_kv"):
        getattr(r, action)()
    elif action == "load_remote_kv":
        r.load_remote_kv(3)
    else:
        getattr(r, action)(5)


@pytest.mark.parametrize("action", sorted(ALLOWED))
@pytest.mark.parametrize("status", list(S))
def test_transitions_assert_their_start_state(action, status):
    """Each transition works from its allowed states (landing in its target state) and
    raises InvariantError from any other, naming the request and its current state."""
    r = _in_state(status)
    if status in ALLOWED[action]:
        _call(r, action)
        assert r.status is DEST[action]
    else:
        with pytest.raises(InvariantError) as info:
            _call(r, action)
        msg = str(info.value)
        assert status.label in msg
        assert "'a'" in msg
        assert r.status is status


def test_finish_from_waiting_raises_with_a_clear_message():
    """finish() on a WAITING request: 'cannot finish from waiting (allowed from running)'."""
    r = Request("a", 0, 0, 4, 1)
    with pytest.raises(InvariantError) as info:
        r.finish(3)
    assert "cannot finish from waiting" in str(info.value)
    assert "running" in str(info.value)
    assert r.status is S.WAITING
    assert r.finished_at is None


def test_admit_records_credit_sequence_and_first_admission_only():
    """Admitted at 2 (seq 0, credit 3), preempted, re-admitted at 6 (seq 4): admitted_at
    stays 2, admit_seq and credit follow the latest admission."""
    r = Request("a", 0, 0, 4, 2)
    r.admit(2, 0, 3)
    assert (r.status, r.admitted_at, r.admit_seq, r.credit) == (S.RUNNING, 2, 0, 3)
    r.preempt()
    assert r.credit == 0
    r.admit(6, 4, 2)
    assert (r.status, r.admitted_at, r.admit_seq, r.credit) == (S.RUNNING, 2, 4, 2)


def test_finish_requires_every_output():
    """finish() after 1 of 3 outputs raises, naming outputs(1) and output_tokens(3)."""
    r = running(4, 3)
    step(r, 4, 1)
    with pytest.raises(InvariantError) as info:
        r.finish(1)
    assert "outputs(1)" in str(info.value) and "output_tokens(3)" in str(info.value)
    assert r.status is S.RUNNING


def test_finish_status_length_capped_when_n_equals_m():
    """N = M = 1: the prefill's output is the last, status finished_length_capped."""
    r = running(4, 1)
    assert step(r, 4, 1) is True
    assert r.status is S.FINISHED_LENGTH_CAPPED
    assert (r.finished_at, r.credit, r.resident) == (1, 0, 0)


def test_finish_status_stopped_when_n_below_m():
    """N = 1 < M = 5: status finished_stopped."""
    r = running(4, 1, max_tokens=5)
    step(r, 4, 1)
    assert r.status is S.FINISHED_STOPPED


@pytest.mark.parametrize("status", [S.WAITING, S.RUNNING, S.PREEMPTED])
def test_cancel_returns_the_state_it_left(status):
    """cancel() from each live state ends FINISHED_ABORTED and returns where it was."""
    r = _in_state(status)
    assert r.cancel(9) is status
    assert r.status is S.FINISHED_ABORTED
    assert (r.finished_at, r.credit, r.resident) == (9, 0, 0)


# --- phases across prefill and decode ------------------------------------------------


def test_phases_across_chunked_prefill_and_decode():
    """P=6, N=3: prefill 6 remaining; a 4-row chunk emits nothing; the 2-row chunk that
    writes the last prompt row emits output 1; then decodes of 1 row each emit."""
    r = running(6, 3)
    assert (r.phase, r.phase_remaining) == (PREFILL, 6)
    assert r.chunk_emits(4) is False
    assert r.chunk_emits(6) is True
    assert step(r, 4, 1) is False
    assert (r.phase, r.phase_remaining, r.resident) == (PREFILL, 2, 4)
    assert r.chunk_emits(1) is False
    assert step(r, 2, 2) is True
    assert (r.outputs, r.first_token_at) == (1, 2)
    assert (r.phase, r.phase_remaining, r.resident) == (DECODE, 1, 6)
    assert r.committed_rows == 6
    assert step(r, 1, 3) is True
    assert (r.outputs, r.first_token_at, r.committed_rows) == (2, 2, 7)
    assert step(r, 1, 4) is True
    assert r.status is S.FINISHED_LENGTH_CAPPED
    # P + N - 1 = 8 rows written, all useful.
    assert (r.useful_rows, r.replay_rows, r.high_water) == (8, 0, 8)
    assert r.finished_at == 4


def test_emit_reports_the_last_output():
    """N=3: emit() returns False, False, True; first_token_at is the first emit's tick."""
    r = running(2, 3)
    assert [r.emit(t) for t in (5, 6, 7)] == [False, False, True]
    assert (r.outputs, r.first_token_at) == (3, 5)


def test_token_ids_l2_example():
    """L2: prompt [10, 11, 12], outputs [20, 21]: the rows are [10, 11, 12, 20]."""
    r = Request("a", 0, 0, 3, 2, prompt_token_ids=[10, 11, 12], output_token_ids=[20, 21])
    assert r.token_ids(0, r.prompt_tokens + r.output_tokens - 1) == [10, 11, 12, 20]
    assert r.token_ids(1, 3) == [11, 12]
    assert r.token_ids(3, 4) == [20]
    assert Request("b", 0, 0, 3, 2).token_ids(0, 2) is None


# --- record_rows: useful vs replayed rows --------------------------------------------


def test_record_rows_counts_useful_rows_above_the_high_water_mark():
    """Fresh request: writing 3 then 2 rows is 5 useful rows; high-water 5."""
    r = running(8, 2)
    r.record_rows(3)
    r.record_rows(2)
    assert (r.useful_rows, r.replay_rows, r.high_water, r.resident) == (5, 0, 5, 5)


def test_record_rows_splits_a_chunk_that_straddles_the_high_water_mark():
    """High-water 5, resident reset to 0: a 7-row chunk is 5 replayed + 2 useful rows."""
    r = running(8, 2)
    r.record_rows(5)
    r.preempt()
    r.admit(1, 1, 2)
    r.record_rows(7)
    assert (r.useful_rows, r.replay_rows, r.high_water, r.resident) == (7, 5, 7, 7)


# --- preemption and recompute (L2, L3) -----------------------------------------------


def test_preempt_after_k_outputs_restores_p_plus_k_minus_1():
    """P=4, N=3 after k=2 outputs (rows 0..4 written): preempt keeps outputs 2, drops
    residency, restore = P + k - 1 = 5; recompute of 5 rows is replay and emits nothing;
    the pending token is then decoded once (the 3rd output): useful 6 = P+N-1, replay 5."""
    r = running(4, 3)
    step(r, 4, 1)
    step(r, 1, 2)
    assert (r.outputs, r.resident, r.high_water) == (2, 5, 5)
    r.preempt()
    assert r.status is S.PREEMPTED
    assert (r.outputs, r.resident, r.credit, r.preemptions) == (2, 0, 0, 1)
    assert (r.restore, r.emit_on_restore) == (5, False)
    assert r.first_token_at == 1
    r.admit(3, 1, 2)
    assert (r.phase, r.phase_remaining) == (RECOMPUTE, 5)
    assert r.chunk_emits(5) is False
    assert step(r, 3, 4) is False
    assert (r.phase, r.phase_remaining) == (RECOMPUTE, 2)
    assert step(r, 2, 5) is False
    assert r.outputs == 2
    assert (r.phase, r.phase_remaining) == (DECODE, 1)
    assert (r.useful_rows, r.replay_rows) == (5, 5)
    assert step(r, 1, 6) is True
    assert r.status is S.FINISHED_LENGTH_CAPPED
    assert (r.outputs, r.useful_rows, r.replay_rows, r.preemptions) == (3, 6, 5, 1)


def test_preempt_with_no_output_restores_the_prefill_rows_written():
    """P=8, 5 prompt rows written, k=0: restore = 5 (recompute), then prefill 3 rows that
    emit output 1: replay 5, useful 8."""
    r = running(8, 1)
    step(r, 5, 1)
    r.preempt()
    assert (r.restore, r.emit_on_restore, r.outputs) == (5, False, 0)
    r.admit(2, 1, 2)
    assert (r.phase, r.phase_remaining) == (RECOMPUTE, 5)
    assert step(r, 5, 3) is False
    assert (r.phase, r.phase_remaining) == (PREFILL, 3)
    assert step(r, 3, 4) is True
    assert r.status is S.FINISHED_LENGTH_CAPPED
    assert (r.useful_rows, r.replay_rows) == (8, 5)


def test_preempt_before_any_row_needs_no_recompute():
    """Preempted before writing anything: restore 0, the next phase is plain prefill."""
    r = running(4, 1)
    r.preempt()
    assert (r.restore, r.resident) == (0, 0)
    r.admit(1, 1, 1)
    assert (r.phase, r.phase_remaining) == (PREFILL, 4)


def test_preempt_include_pending_restores_p_plus_k_and_emits_at_the_end():
    """vllm fold: P=4, N=3 after k=2 outputs: restore = P + k = 6 and the 6th row emits
    output 3. Rows: 5 replayed (below high-water 5) + 1 useful, total useful 6 = P+N-1."""
    r = running(4, 3)
    step(r, 4, 1)
    step(r, 1, 2)
    r.preempt(include_pending=True)
    assert (r.restore, r.emit_on_restore, r.outputs) == (6, True, 2)
    r.admit(3, 1, 2)
    assert (r.phase, r.phase_remaining) == (RECOMPUTE, 6)
    assert r.chunk_emits(5) is False
    assert r.chunk_emits(6) is True
    assert step(r, 4, 4) is False
    assert r.chunk_emits(1) is False
    assert r.chunk_emits(2) is True
    assert step(r, 2, 5) is True
    assert r.status is S.FINISHED_LENGTH_CAPPED
    assert (r.outputs, r.useful_rows, r.replay_rows) == (3, 6, 5)


def test_preempt_include_pending_with_no_output_restores_the_whole_prompt():
    """include_pending with k=0 (3 of P=6 rows written): restore = P + 0 = 6 and the last
    row emits output 1, as a fresh prefill would; rows: 3 replayed + 3 useful."""
    r = running(6, 2)
    step(r, 3, 1)
    r.preempt(include_pending=True)
    assert (r.restore, r.emit_on_restore, r.outputs) == (6, True, 0)
    r.admit(2, 1, 2)
    assert (r.phase, r.phase_remaining) == (RECOMPUTE, 6)
    assert r.chunk_emits(3) is False
    assert r.chunk_emits(6) is True
    assert step(r, 6, 3) is True
    assert (r.outputs, r.first_token_at) == (1, 3)
    assert (r.useful_rows, r.replay_rows) == (6, 3)
    assert (r.phase, r.phase_remaining) == (DECODE, 1)


def test_two_preemptions_count_and_replay_accumulates():
    """P=4, N=2: preempted after output 1 twice; each recompute replays P+1-1 = 4 rows."""
    r = running(4, 2)
    step(r, 4, 1)
    for n in (1, 2):
        r.preempt()
        assert (r.preemptions, r.restore) == (n, 4)
        r.admit(1 + n, n, 2)
        step(r, 4, 2 + n)
        assert r.replay_rows == 4 * n
        assert r.outputs == 1
    step(r, 1, 9)
    assert r.status is S.FINISHED_LENGTH_CAPPED
    assert (r.useful_rows, r.replay_rows, r.preemptions) == (5, 8, 2)


def test_plain_decode_needs_the_prompt_and_every_restored_row_resident():
    """Prompt 4: not before the 4 prompt rows are written; after a preemption that
    restores P + k rows (include_pending, vllm), not until all 6 are back, although
    the last of them (the pending output's row, never written) is already `decode`
    by phase."""
    r = running(prompt=4, output=4)
    assert not r.plain_decode
    step(r, 3, 1)
    assert not r.plain_decode
    step(r, 1, 2)          # the prompt's last row emits output 1
    assert r.plain_decode
    step(r, 1, 3)          # output 2: 5 rows written
    r.preempt(include_pending=True)
    assert (r.restore, r.high_water) == (6, 5)
    r.admit(4, 1, 2)
    step(r, 5, 5)          # the 5 rows written before: recompute
    assert (r.resident, r.phase) == (5, DECODE) and not r.plain_decode
    step(r, 1, 6)          # the pending row: output 3 is emitted, every row back
    assert (r.resident, r.outputs) == (6, 3) and r.plain_decode
