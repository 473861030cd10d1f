"""Trace lines read a block at a time (issue 26): `common_block` takes a block of
request lines written as `generate` and `convert` write them in one pass, and
refuses any other block, whose lines are then read one at a time. Whatever the
blocks' size, a trace reads to the same Trace, or the same problems, as with
every line through the full checks (`both_ways`), read whole and streamed."""
from __future__ import annotations

import random

import pytest

from scheduler_sim.io import trace as trace_module
from scheduler_sim.io import trace_validator
from scheduler_sim.io.trace_fast_path import Columns, block_specs, common_block
from scheduler_sim.records.clock import Clock
from scheduler_sim.records.workload import RequestSpec
from test_trace_fast_path import SECONDS, W, both_ways


def test_a_block_of_written_lines_gives_its_columns():
    block = (W % (b"a", b"0", b"3", b"2") + b"\n" + W % (b"b", b"7", b"40", b"1") + b"\n"
             + W % ("\u00e9".encode(), b"7", b"5", b"900") + b"\n")
    columns = common_block(block, "tick", 16)
    assert columns == Columns(["a", "b", "\u00e9"], [0, 7, 7], [3, 40, 5], [2, 1, 900])
    assert block_specs(columns, 4) == [
        RequestSpec("a", 4, 0, 3, 2, 2), RequestSpec("b", 5, 7, 40, 1, 1),
        RequestSpec("\u00e9", 6, 7, 5, 900, 900)]


def test_in_seconds_a_fraction_is_a_float_and_a_whole_number_an_int():
    block = W % (b"a", b"0", b"3", b"2") + b"\n" + W % (b"b", b"2.50", b"4", b"1") + b"\n"
    columns = common_block(block, "s", 16)
    assert columns.arrivals == [0, 2.5]
    assert [type(a) for a in columns.arrivals] == [int, float]
    assert common_block(block, "tick", 16) is None  # a fraction of a tick: the full checks word it


GOOD_LINE = W % (b"a", b"1", b"3", b"2") + b"\n"


@pytest.mark.parametrize("other", [
    W % (b"b", b"1", b"3", b"2") + b" \n",         # a blank after it
    W % (b"b", b"1", b"3", b"2") + b"\r\n",        # a CR
    b"\n",                                           # a blank line
    W % (b"b", b"1000000000000001", b"3", b"2") + b"\n",  # past 1e15
    W % (b"\xff", b"1", b"3", b"2") + b"\n",        # not UTF-8
    W % (b"b\\u0031", b"1", b"3", b"2") + b"\n",    # an escape
    W % (b"b\x1f", b"1", b"3", b"2") + b"\n",       # a control character
    W % (b"", b"1", b"3", b"2") + b"\n",            # an empty id
    W % (b"b", b"01", b"3", b"2") + b"\n",          # a leading zero
    W % (b"b", b"1", b"0", b"2") + b"\n",           # no prompt
    W.replace(b":", b": ") % (b"b", b"1", b"3", b"2") + b"\n",  # spaces
    b'{"type":"cancel","id":"a","at":1}\n',
], ids=["blank", "CR", "blank line", "past 1e15", "not UTF-8", "escape", "control", "empty id",
        "leading zero", "no prompt", "spaces", "cancel"])
def test_a_block_with_any_other_line_is_refused(other):
    assert common_block(GOOD_LINE, "tick", 16) is not None
    assert common_block(GOOD_LINE + other + GOOD_LINE, "tick", 16) is None
    assert common_block(GOOD_LINE + other + GOOD_LINE, "s", 16) is None


def test_an_empty_block_is_refused():
    assert common_block(b"", "tick", 16) is None


def test_a_last_line_without_its_newline_is_refused():
    """The file's last line without a newline: its block is refused, whether the line
    is written well (read alone) or cut short (which a match of the lines before it
    would drop)."""
    assert common_block(GOOD_LINE + GOOD_LINE[:-1], "tick", 16) is None
    assert common_block(GOOD_LINE + b'{"type":"req', "tick", 16) is None


def written_trace(rng: random.Random, n: int, seconds: bool) -> list[bytes]:
    """`n` written request lines, arrivals mostly in order, in ticks or seconds."""
    lines, at = [], 0
    for i in range(n):
        at += rng.choice((0, 0, 1, 3))
        arrival = (b"%d" % at if not seconds or rng.random() < 0.5
                   else b"%d.%d" % (at, rng.randrange(100)))
        lines.append(W % (b"r%d" % i, arrival, b"%d" % rng.randint(1, 600),
                          b"%d" % rng.randint(1, 400)))
    return lines


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("block", [64, 300, 2 ** 17])
def test_blocks_of_any_size_read_as_the_full_checks(tmp_path, monkeypatch, streamed, block):
    """Random written traces, some with one line made wrong, a duplicate id, an
    arrival out of order, a config, or no last newline: the same Trace (its requests,
    count, span and largest request) or problems as the full checks alone."""
    monkeypatch.setattr(trace_module, "BLOCK", block)
    rng = random.Random(block + streamed)
    for case in range(12):
        seconds = case % 3 == 2
        lines = written_trace(rng, rng.randint(1, 40), seconds)
        kind = case % 6
        i = rng.randrange(len(lines))
        if kind == 1:
            lines[i] = lines[i].replace(b'"prompt_tokens":', b'"prompt_tokens":-')
        elif kind == 2:
            lines.append(lines[i])  # a duplicate id
        elif kind == 3:
            lines.insert(i, W % (b"early", b"0", b"5", b"5"))  # out of order, mostly
        elif kind == 4:
            lines[i] = lines[i] + b" "
        if seconds:
            lines.insert(0, SECONDS)
        data = b"\n".join(lines) + (b"\n" if case % 4 else b"")
        fast, full = both_ways(data, tmp_path, monkeypatch, streamed)
        assert fast == full, (case, data)
        if not isinstance(fast, list):
            assert shape(fast, streamed) == shape(full, streamed)


def shape(outcome, streamed: bool):
    """What validation notes of a trace's requests: how many, the span, the largest."""
    workload = (outcome[0] if streamed else outcome).workload
    return len(workload), workload.first_arrival, workload.last_arrival, workload.largest


def test_a_line_longer_than_a_block_and_no_last_newline(tmp_path, monkeypatch):
    """Streamed in blocks of 16 bytes: each line is longer, the last has no newline;
    the lines are numbered as the file's."""
    monkeypatch.setattr(trace_module, "BLOCK", 16)
    data = b"\n".join([W % (b"a", b"0", b"3", b"2"), W % (b"b", b"4", b"1", b"1"),
                       b'{"type":"cancel","id":"zz","at":5}'])
    fast, full = both_ways(data, tmp_path, monkeypatch, streamed=True)
    assert fast == full == ["DIR/t.jsonl:3: cancel 'zz': cancel of unknown request 'zz'"]
    data = b"\n".join([W % (b"a", b"0", b"3", b"2"), W % (b"b", b"4", b"1", b"1")])
    fast, full = both_ways(data, tmp_path, monkeypatch, streamed=True)
    assert fast == full
    assert [(r.id, r.index, r.arrival) for r in fast[1]] == [("a", 1, 0), ("b", 2, 4)]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_written_blocks_never_reach_a_line_at_a_time(tmp_path, monkeypatch, streamed):
    """Three blocks of written lines (blocks of about 100 bytes) are read without
    `common_request`: validated (and, streamed, read again) a block at a time."""
    monkeypatch.setattr(trace_module, "BLOCK", 100)
    monkeypatch.setattr(trace_module, "STREAM_ABOVE", 0 if streamed else 10 ** 12)
    data = b"".join(W % (b"r%d" % i, b"%d" % i, b"4", b"2") + b"\n" for i in range(3))

    def refuse(*_):
        raise AssertionError("a line of a written block was read alone")

    monkeypatch.setattr(trace_validator, "common_request", refuse)
    monkeypatch.setattr(trace_module, "common_request", refuse)
    from test_trace_fast_path import outcome
    fast = outcome(data, tmp_path, streamed)
    requests = fast[1] if streamed else fast.workload.requests
    assert requests == (RequestSpec("r0", 1, 0, 4, 2, 2), RequestSpec("r1", 2, 1, 4, 2, 2),
                        RequestSpec("r2", 3, 2, 4, 2, 2))


def test_a_request_spec_is_equal_and_hashed_by_every_field():
    """`RequestSpec` is a record class (records/frozen.py), hashed by its fields as a
    frozen one is: equal specs hash alike and are one in a set; a spec differing in
    any one field is another."""
    import dataclasses

    a = RequestSpec("a", 0, 1.5, 10, 4, 4, block_hashes=(1, 2))
    same = RequestSpec("a", 0, 1.5, 10, 4, 4, block_hashes=(1, 2))
    assert (a == same, hash(a) == hash(same), len({a, same})) == (True, True, 1)
    assert hash(a) == hash(("a", 0, 1.5, 10, 4, 4, 0, None, None, None, (1, 2)))
    others = [dataclasses.replace(a, **{name: value}) for name, value in (
        ("id", "b"), ("index", 1), ("arrival", 2.0), ("prompt_tokens", 11), ("output_tokens", 5),
        ("max_tokens", 5), ("priority", 1), ("deadline", 9.0),
        ("prompt_token_ids", (7,)), ("output_token_ids", (8,)), ("block_hashes", (1,)))]
    assert len({a, *others}) == 12 and all(o != a for o in others)


def test_a_plain_trace_in_memory_is_held_as_columns(tmp_path, monkeypatch):
    """Read in memory in blocks of 64 bytes: the config line (the head, `_head`), a, b,
    d and e a block each, c's line (a blank after it) a line at a time: the
    workload is plain (`Workload.plain`), its columns in replay order (by arrival, ties
    in line order: b 0.5, e 1, a 2, c 2, d 2), the largest the first with the most
    prompt + max_tokens (e, 9 + 9); on a 1-ms clock the arrivals are steps 500, 1000
    and 2000. With a priority on d's line the same requests are sorted by `build`."""
    monkeypatch.setattr(trace_module, "BLOCK", 64)
    lines = [SECONDS, W % (b"a", b"2", b"3", b"2"), W % (b"b", b"0.5", b"4", b"1"),
             W % (b"c", b"2", b"8", b"1") + b" ", W % (b"d", b"2.0", b"9", b"9"),
             W % (b"e", b"1", b"9", b"9")]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    workload = trace_module.read_trace(str(path)).workload
    order = [("b", 3, 0.5, 4, 1), ("e", 6, 1, 9, 9), ("a", 2, 2, 3, 2), ("c", 4, 2, 8, 1),
             ("d", 5, 2.0, 9, 9)]
    assert workload._columns is not None
    assert workload.requests == tuple(RequestSpec(*o, o[4]) for o in order)
    assert (workload.largest, workload.first_arrival, workload.last_arrival) == (
        RequestSpec("e", 6, 1, 9, 9, 9), 0.5, 2.0)
    assert [(s.id, s.arrival) for s in workload.on_clock(Clock("s", 1.0, 0.001)).arrivals()] == [
        ("b", 500), ("e", 1000), ("a", 2000), ("c", 2000), ("d", 2000)]
    lines[4] = lines[4][:-1] + b',"priority":1}'
    path.write_bytes(b"\n".join(lines) + b"\n")
    workload = trace_module.read_trace(str(path)).workload
    assert workload._columns is None
    assert [(s.id, s.priority) for s in workload.requests] == [
        ("b", 0), ("e", 0), ("a", 0), ("c", 0), ("d", 1)]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_the_lines_before_the_first_request_are_a_block_of_their_own(tmp_path, monkeypatch,
                                                                     streamed):
    """A config (line 1, 34 bytes) before three written requests in one block of 2 ** 17
    bytes: the head (`_head`) goes a line at a time, the requests (lines 2-4) as a
    block, never through `common_request`; a head is only lines before a request line
    as written (a cancel before the config: both the head)."""
    monkeypatch.setattr(trace_module, "STREAM_ABOVE", 0 if streamed else 10 ** 12)
    head = SECONDS + b"\n"
    data = head + b"".join(W % (b"r%d" % i, b"%d" % i, b"4", b"2") + b"\n" for i in range(3))
    assert (trace_module._head(data, len(data)), len(head)) == (34, 34)
    assert trace_module._head(data[len(head):], len(data) - len(head)) == 0
    assert trace_module._head(head, len(head)) == 0
    assert [b for _, b in trace_module._blocks(data)] == [head, data[len(head):]]

    def refuse(raw, *_):  # (the head's lines are offered to it, and refused)
        assert b'"request"' not in raw, "a request line was read alone"

    monkeypatch.setattr(trace_validator, "common_request", refuse)
    monkeypatch.setattr(trace_module, "common_request", refuse)
    from test_trace_fast_path import outcome
    fast = outcome(data, tmp_path, streamed)
    requests = fast[1] if streamed else fast.workload.requests
    assert requests == (RequestSpec("r0", 2, 0, 4, 2, 2), RequestSpec("r1", 3, 1, 4, 2, 2),
                        RequestSpec("r2", 4, 2, 4, 2, 2))
    cancel = b'{"type":"cancel","id":"r1","at":9}\n'
    assert trace_module._head(cancel + data, len(cancel + data)) == len(cancel) + 34
