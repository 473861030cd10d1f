"""Streamed validation keeps no digest of the ids of the file's first blocks while they
rise strictly (`Validator.run`): they cannot repeat one another. The first id digested
after them ends the run, and `finish` digests the run's ids from the lines read again,
so a repeat across the run's end is found and worded as the full checks word it."""
from __future__ import annotations

import pytest

from scheduler_sim.io import trace as trace_module
from scheduler_sim.io.trace_validator import Validator
from scheduler_sim.records.errors import TraceError
from test_trace_fast_path import W, both_ways


def line(rid: bytes, arrival: int) -> bytes:
    return W % (rid, b"%d" % arrival, b"4", b"2") + b"\n"


def lines_of(data: bytes):
    """`finish`'s `again`: (number, line without its newline) of `data`."""
    return lambda: enumerate(data[:-1].split(b"\n"), 1)


def test_rising_ids_keep_no_digest():
    """Two blocks, ids a1 < a2 < a3 < a4: the run holds both, no digest is kept."""
    checker = Validator("t", streamed=True)
    first, second = line(b"a1", 0) + line(b"a2", 1), line(b"a3", 1) + line(b"a4", 2)
    assert checker.feed_block(1, first) is not None
    assert checker.feed_block(3, second) is not None
    assert checker.run == [(1, 2), (3, 2)] and checker.run_open and checker.run_last == "a4"
    assert checker.digests.held == 0
    checker.finish(lines_of(first + second))
    assert checker.digests.held == 0 and checker.count == 4


@pytest.mark.parametrize("second, least, again", [
    (line(b"a3", 1) + line(b"a2", 2), "a2", True),   # falls to the run's last
    (line(b"a1", 1) + line(b"a5", 2), "a1", True),   # its first not above the run's last
    (line(b"a3", 1) + line(b"a3", 2), "a3", False),  # the same id twice, above the run
], ids=["falls", "below the run", "repeat above"])
def test_an_id_not_rising_ends_the_run_and_finish_digests_it_if_it_may_repeat(
        second, least, again):
    """`finish` digests the run's ids only when an id after it is not above its last."""
    checker = Validator("t", streamed=True)
    first = line(b"a1", 0) + line(b"a2", 1)
    checker.feed_block(1, first)
    checker.feed_block(3, second)
    assert checker.run == [(1, 2)] and not checker.run_open
    assert checker.after_least == least and checker.digests.held == 2  # (the second block's)
    try:
        checker.finish(lines_of(first + second))
    except TraceError:  # (the repeats: their wording is tested below)
        pass
    assert checker.digests.held == (4 if again else 2)


def test_requests_read_alone_stretch_the_run_over_other_records():
    """A block of requests with a cancel among them is read a line at a time; rising
    ids stretch the run's last pair to their lines (over the cancel's), and a last
    line without its newline too: nothing is digested, nothing read again."""
    checker = Validator("t", streamed=True)
    first = line(b"a1", 0) + line(b"a2", 1)
    cancel = b'{"type": "cancel", "id": "a1", "at": 1}\n'
    mixed = line(b"a3", 2) + cancel + line(b"a4", 3)
    checker.feed_block(1, first)
    assert checker.feed_block(3, mixed) is None  # (not all requests: read alone)
    assert checker.run == [(1, 5)] and checker.run_last == "a4"
    checker.feed(6, line(b"a5", 4)[:-1])
    assert checker.run == [(1, 6)] and checker.run_open and checker.digests.held == 0
    checker.finish(lines_of(first + mixed + line(b"a5", 4)))  # (read for the cancel's id)
    assert checker.digests.held == 0 and checker.count == 5


def test_an_id_read_alone_below_the_run_ends_it_and_finish_digests_the_run():
    """The run a1, a2 (a block), a3 (alone); then a2 again, alone: digested, the least
    after the run, so `finish` digests the run's three ids and finds the repeat. The
    cancel naming a1 is a request's id in the run's lines that is not digested."""
    checker = Validator("t", streamed=True)
    cancel = b'{"type": "cancel", "id": "a1", "at": 1}\n'
    data = line(b"a1", 0) + line(b"a2", 1) + line(b"a3", 2) + cancel + line(b"a2", 3)
    checker.feed_block(1, line(b"a1", 0) + line(b"a2", 1))
    checker.feed_block(3, line(b"a3", 2) + cancel + line(b"a2", 3))
    assert checker.run == [(1, 3)] and not checker.run_open
    assert checker.after_least == "a2" and checker.digests.held == 1
    with pytest.raises(TraceError) as caught:
        checker.finish(lines_of(data))
    assert checker.digests.held == 4  # (a1, a2, a3 of the run; the cancel's line skipped)
    assert "duplicate request id 'a2' (first on line 2)" in str(caught.value)


def test_finish_after_the_run_ended_needs_the_lines():
    checker = Validator("t", streamed=True)
    checker.feed_block(1, line(b"a1", 0) + line(b"a2", 1))
    checker.feed_block(3, line(b"a0", 1))
    with pytest.raises(ValueError):
        checker.finish()


@pytest.mark.parametrize("repeat, rid, first", [
    (line(b"g002", 9), "g002", 3),                             # a written line
    (line(b"g002", 9).replace(b"}\n", b"} \n"), "g002", 3),    # read alone (a blank)
    (W.replace(b'"arrival"', b'"arrival" ') % (b"g002", b"9", b"4", b"2") + b"\n",
     "g002", 3),                                                 # by the full checks
    (line(b"g000", 9), "g000", 1),                             # the run's first id
], ids=["block", "line", "full checks", "first"])
def test_a_repeat_of_a_run_id_after_it_is_worded_as_the_full_checks(
        tmp_path, monkeypatch, repeat, rid, first):
    """Blocks of about 150 bytes: ids g000..g007 rising over several blocks, then a
    line below the run's last id repeating one of them: the same problems as every
    line through the full checks."""
    monkeypatch.setattr(trace_module, "BLOCK", 150)
    data = b"".join(line(b"g%03d" % i, i) for i in range(8)) + repeat
    fast, full = both_ways(data, tmp_path, monkeypatch, streamed=True)
    assert fast == full
    assert fast == [f"DIR/t.jsonl:9: request {rid!r}: duplicate request id {rid!r} "
                    f"(first on line {first})"]


def test_rising_ids_read_as_the_full_checks(tmp_path, monkeypatch):
    """No repeat: the same Trace and requests as the full checks, in blocks of 150 bytes."""
    monkeypatch.setattr(trace_module, "BLOCK", 150)
    data = b"".join(line(b"g%03d" % i, i) for i in range(20)) + line(b"a", 30)
    fast, full = both_ways(data, tmp_path, monkeypatch, streamed=True)
    assert fast == full and len(fast[1]) == 21


@pytest.mark.parametrize("tail, problems", [
    (line(b"g008", 10)[:-1], []),
    (line(b"g008", 10) + line(b"g002", 11)[:-1],
     ["DIR/t.jsonl:11: request 'g002': duplicate request id 'g002' (first on line 3)"]),
], ids=["rising to the end", "a repeat at the end"])
def test_cancels_and_a_last_line_without_newline_read_as_the_full_checks(
        tmp_path, monkeypatch, tail, problems):
    """Rising ids in blocks of 150 bytes, a cancel (its block read a line at a time),
    then the tail, its last line without a newline: the same as the full checks."""
    monkeypatch.setattr(trace_module, "BLOCK", 150)
    data = (b"".join(line(b"g%03d" % i, i) for i in range(8))
            + b'{"type": "cancel", "id": "g003", "at": 9}\n' + tail)
    fast, full = both_ways(data, tmp_path, monkeypatch, streamed=True)
    assert fast == full
    if problems:
        assert fast == problems
    else:
        assert len(fast[1]) == 9
