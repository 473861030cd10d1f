"""Hashed request lines read a block at a time (issue 26): `common_block` takes a
block of request lines written as `convert` writes a Mooncake request, with
`"block_hashes":[...]` last, in one pass, and refuses any other block, whose lines
are then read one at a time. A trace reads to the same Trace (its requests' hashes
too), or the same problems, as with every line through the full checks
(`both_ways`), read whole and streamed (the validated copy read back)."""
from __future__ import annotations

import random

import pytest

from scheduler_sim.io import trace as trace_module
from scheduler_sim.io import trace_fast_path
from scheduler_sim.io import trace_validator
from scheduler_sim.io.trace_fast_path import Columns, block_specs, common_block, common_request
from scheduler_sim.records.options import Options
from scheduler_sim.records.workload import RequestSpec
from test_trace_fast_path import both_ways, outcome

# A hashed request as `convert` writes it: id, arrival, prompt, output, hashes.
H = (b'{"type":"request","id":"%s","arrival":%s,"prompt_tokens":%s,"output_tokens":%s,'
     b'"block_hashes":[%s]}')
# Hashes of 4 tokens, times in seconds (what the Mooncake trace's config says, with 512).
CONFIG = b'{"type":"config","time_unit":"s","hash_block_size":4}'


def test_a_block_of_hashed_lines_gives_its_columns():
    """Three lines, hashes of 4 tokens: 9 tokens may have ceil(9 / 4) = 3 hashes (a has
    3), 4 tokens 1 (b), 5 tokens 2 (c); each line's hashes a tuple, as the full checks
    make them."""
    block = (H % (b"a", b"0", b"9", b"2", b"0,1,2") + b"\n"
             + H % (b"b", b"7.25", b"4", b"1", b"123456789012345678") + b"\n"
             + H % (b"c", b"8", b"5", b"3", b"0,10") + b"\n")
    columns = common_block(block, "s", 4)
    assert columns == Columns(["a", "b", "c"], [0, 7.25, 8], [9, 4, 5], [2, 1, 3],
                              [(0, 1, 2), (123456789012345678,), (0, 10)])
    assert block_specs(columns, 5) == [
        RequestSpec("a", 5, 0, 9, 2, 2, block_hashes=(0, 1, 2)),
        RequestSpec("b", 6, 7.25, 4, 1, 1, block_hashes=(123456789012345678,)),
        RequestSpec("c", 7, 8, 5, 3, 3, block_hashes=(0, 10))]
    assert block_specs(columns, 5) == [common_request(line, number, "s", 4) for number, line
                                       in enumerate(block.split(b"\n")[:3], 5)]
    assert common_block(block, "tick", 4) is None  # (7.25 ticks: the full checks word it)


@pytest.mark.parametrize("prompt, hashes, taken", [
    (b"8", b"1,2", True), (b"8", b"1,2,3", False),     # ceil(8 / 4) = 2
    (b"9", b"1,2,3", True), (b"9", b"1,2,3,4", False),  # ceil(9 / 4) = 3
    (b"1", b"5", True), (b"1", b"5,6", False),          # ceil(1 / 4) = 1
])
def test_at_most_one_hash_a_hash_block(prompt, hashes, taken):
    """`len(hashes) <= ceil(prompt / 4)` at each edge, as `common_request` checks it."""
    line = H % (b"a", b"1", prompt, b"2", hashes) + b"\n"
    assert (common_block(line, "s", 4) is not None) is taken
    assert (common_request(line[:-1], 1, "s", 4) is not None) is taken


GOOD = H % (b"a", b"1", b"9", b"2", b"0,1") + b"\n"
OTHERS = {
    "a leading zero": H % (b"b", b"1", b"9", b"2", b"0,01"),
    "a negative hash": H % (b"b", b"1", b"9", b"2", b"0,-1"),
    "a float hash": H % (b"b", b"1", b"9", b"2", b"0,1.5"),
    "an exponent": H % (b"b", b"1", b"9", b"2", b"0,1e3"),
    "a string hash": H % (b"b", b"1", b"9", b"2", b'0,"x"'),
    "a boolean hash": H % (b"b", b"1", b"9", b"2", b"true"),
    "too many hashes": H % (b"b", b"1", b"9", b"2", b"0,1,2,3"),
    "an empty list": H % (b"b", b"1", b"9", b"2", b""),
    "two commas": H % (b"b", b"1", b"9", b"2", b"0,,1"),
    "a comma last": H % (b"b", b"1", b"9", b"2", b"0,1,"),
    "a comma first": H % (b"b", b"1", b"9", b"2", b",0"),
    "a space": H % (b"b", b"1", b"9", b"2", b"0, 1"),
    "spaces": H.replace(b":", b": ") % (b"b", b"1", b"9", b"2", b"0,1"),
    "hashes before the counts": b'{"type":"request","id":"b","arrival":1,"block_hashes":[0,1],'
                                b'"prompt_tokens":9,"output_tokens":2}',
    "no hashes": b'{"type":"request","id":"b","arrival":1,"prompt_tokens":9,"output_tokens":2}',
    "hashes null": H.replace(b"[%s]", b"%s") % (b"b", b"1", b"9", b"2", b"null"),
    "a CR": H % (b"b", b"1", b"9", b"2", b"0,1") + b"\r",
    "a cancel": b'{"type":"cancel","id":"a","at":1}',
}


@pytest.mark.parametrize("other", OTHERS.values(), ids=OTHERS.keys())
def test_a_block_with_any_other_line_is_refused(other):
    """Between two hashed lines as written, or first before one, each of these lines
    refuses the block (read a line at a time); alone (its own block) it is refused too,
    but for the line without hashes."""
    assert common_block(GOOD + GOOD, "s", 4) is not None
    assert common_block(GOOD + other + b"\n" + GOOD, "s", 4) is None
    if other != OTHERS["no hashes"]:  # (alone, a request as written without hashes)
        assert common_block(other + b"\n", "s", 4) is None
    assert common_block(other + b"\n" + GOOD, "s", 4) is None


def test_a_block_of_empty_lists_is_refused_and_read_a_line_at_a_time():
    """`[]` alone makes an array of no number, but a line has one hash more than its
    commas: refused; its line gives the full checks' spec, no hashes, `()`."""
    line = H % (b"a", b"1", b"9", b"2", b"")
    assert common_block(line + b"\n", "s", 4) is None
    assert common_request(line, 1, "s", 4) == RequestSpec("a", 1, 1, 9, 2, 2, block_hashes=())


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_hashed_block_with_a_bad_line_is_worded_as_before(tmp_path, monkeypatch, streamed):
    """A block of four hashed lines whose third (line 4 of the file) has 3 hashes for 8
    tokens (2 at most) and whose fourth has a hash `01` (its `1` at column 95): the
    block is read a line at a time, the problems are the full checks', on the file's
    line numbers."""
    data = b"\n".join([CONFIG, H % (b"a", b"0", b"9", b"2", b"0,1"),
                       H % (b"b", b"1", b"8", b"2", b"0,2"),
                       H % (b"c", b"2", b"8", b"2", b"0,2,3"),
                       H % (b"d", b"3", b"8", b"2", b"0,01"), b""])
    fast, full = both_ways(data, tmp_path, monkeypatch, streamed)
    name = "DIR/t.jsonl" if streamed else "t.jsonl"
    assert fast == full == [
        f"{name}:4: request 'c': block_hashes may have at most "
        "ceil(prompt_tokens / hash_block_size) = 2 entries, got 3",
        f"{name}:5: invalid JSON: Expecting ',' delimiter at column 95, got '1]}}'"]


def _count_blocks(monkeypatch) -> list[int]:
    """The lines of each block `common_block` takes (columns given), from now on."""
    taken: list[int] = []
    block = common_block

    def counting(*args):
        columns = block(*args)
        if columns is not None:
            taken.append(len(columns.ids))
        return columns

    monkeypatch.setattr(trace_validator, "common_block", counting)
    monkeypatch.setattr(trace_module, "common_block", counting)
    return taken


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_hashed_blocks_never_reach_a_line_at_a_time(tmp_path, monkeypatch, streamed):
    """A config, then five hashed lines of 95 bytes in blocks of about 200 bytes: read
    whole, blocks of 3 and 2 lines (each to the first newline 200 bytes or more past
    its start); streamed, of 1, 2 and 2 (200 bytes read at a time, the config its own
    block), the replay reading the columns back (no match again). No line reaches
    `common_request`; the specs are those every line through the full checks gives
    (`both_ways`): each line's hashes, the largest request (the most prompt +
    max_tokens: r4, 20 + 2) with its hashes."""
    monkeypatch.setattr(trace_module, "BLOCK", 200)
    data = CONFIG + b"\n" + b"".join(
        H % (b"r%d" % i, b"%d" % i, b"%d" % (4 + i * i), b"2", b"%d" % i) + b"\n"
        for i in range(5))

    def refuse(raw, *_):  # (the config's line is offered to it, and refused)
        assert b'"request"' not in raw, "a hashed line was read alone"

    taken = _count_blocks(monkeypatch)
    with monkeypatch.context() as patch:
        patch.setattr(trace_validator, "common_request", refuse)
        patch.setattr(trace_module, "common_request", refuse)
        patch.setattr(trace_module, "STREAM_ABOVE", 0 if streamed else 10 ** 12)
        fast = outcome(data, tmp_path, streamed)
        requests = list(fast[1] if streamed else fast.workload.requests)
    assert taken == ([1, 2, 2] if streamed else [3, 2])
    assert requests == [RequestSpec("r%d" % i, i + 2, i, 4 + i * i, 2, 2, block_hashes=(i,))
                        for i in range(5)]
    workload = (fast[0] if streamed else fast).workload
    assert workload.largest == RequestSpec("r4", 6, 4, 20, 2, 2, block_hashes=(4,))
    assert both_ways(data, tmp_path, monkeypatch, streamed)[1] == fast


def hashed_trace(rng: random.Random, n: int) -> list[bytes]:
    """`n` hashed request lines in seconds, arrivals mostly in order, each with up to
    ceil(prompt / 4) hashes (at least one)."""
    lines, at = [], 0
    for i in range(n):
        at += rng.choice((0, 0, 1, 3))
        arrival = b"%d" % at if rng.random() < 0.5 else b"%d.%d" % (at, rng.randrange(100))
        prompt = rng.randint(1, 40)
        count = rng.randint(1, -(-prompt // 4))
        hashes = b",".join(b"%d" % rng.randrange(10 ** rng.randint(1, 19)) for _ in range(count))
        lines.append(H % (b"r%d" % i, arrival, b"%d" % prompt, b"%d" % rng.randint(1, 9), hashes))
    return lines


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("block", [64, 300, 2 ** 17])
def test_hashed_blocks_of_any_size_read_as_the_full_checks(tmp_path, monkeypatch, streamed,
                                                            block):
    """Random hashed traces, some with a line made wrong, a duplicate id, a line without
    hashes, one hash too many, or no last newline: the same Trace (the requests with
    their hashes, count, span, largest) or problems as the full checks alone."""
    monkeypatch.setattr(trace_module, "BLOCK", block)
    rng = random.Random(block + streamed)
    for case in range(12):
        lines = hashed_trace(rng, rng.randint(1, 40))
        kind = case % 6
        i = rng.randrange(len(lines))
        if kind == 1:
            lines[i] = lines[i].replace(b'"block_hashes":[', b'"block_hashes":[-')
        elif kind == 2:
            lines.append(lines[i])  # a duplicate id
        elif kind == 3:
            lines[i] = lines[i].split(b',"block_hashes"')[0] + b"}"
        elif kind == 4:
            lines[i] = lines[i].replace(b"]}", b",7" * 11 + b"]}")  # more than 40 / 4
        data = b"\n".join([CONFIG] + lines) + (b"\n" if case % 4 else b"")
        fast, full = both_ways(data, tmp_path, monkeypatch, streamed)
        assert fast == full, (case, data)
        if not isinstance(fast, list):
            workload = (fast[0] if streamed else fast).workload
            other = (full[0] if streamed else full).workload
            assert (len(workload), workload.first_arrival, workload.last_arrival,
                    workload.largest) == (len(other), other.first_arrival,
                                          other.last_arrival, other.largest)


def test_the_hashed_spelling_is_read_whole_or_not_at_all():
    """The pattern for hashed lines takes digits and commas for the hashes, which the
    scanner then reads; a line of the other spelling in its block is not matched."""
    find = trace_fast_path._lines(False, True)
    assert find((H % (b"a", b"1.5", b"9", b"2", b"0,1,22") + b"\n").decode()) == [
        ("a", "1.5", "9", "2", "0,1,22")]
    assert find(OTHERS["no hashes"].decode() + "\n") == []


def test_block_hashes_without_prefix_caching_are_noted():
    """A trace that gives hash_block_size (a converted Mooncake trace) replayed without
    prefix caching: its hashes are never looked up, and the header says so; with
    prefix caching, or without a hash_block_size, no such note."""
    note = ("hash_block_size has no effect without prefix_caching: the trace's block hashes "
            "are not looked up, so no prompt reuses cached blocks")
    assert Options.resolve({"hash_block_size": 512, "time_unit": "s"}, {}).unused() == [note]
    assert Options.resolve({"hash_block_size": 512}, {"prefix_caching": True}).unused() == []
    assert Options.resolve({}, {"hash_block_size": 32}).unused() == [note]
    assert Options.resolve({}, {}).unused() == []
