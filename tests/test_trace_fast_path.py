"""The fast path of trace validation (`io/trace_fast_path.py`, issue 26): a common
well-formed request line gives the RequestSpec the full checks give; every other
line gives None and is read by the full checks, so that each problem, its wording,
its order, line numbers and exit status are those of the full checks alone.

Each case is checked three ways: what `common_request` returns, the `Trace` or the
problem list of the trace with the fast path, and the same without it (patched
out), read whole and streamed.
"""
from __future__ import annotations

import random

import pytest

from scheduler_sim.io import trace as trace_module
from scheduler_sim.io import trace_fast_path
from scheduler_sim.io import trace_validator
from scheduler_sim.io.problems import Problems
from scheduler_sim.io.trace import parse_trace, read_trace
from scheduler_sim.io.trace_fast_path import common_request
from scheduler_sim.io.trace_records import RecordChecker, parse_request
from scheduler_sim.records.errors import TraceError
from scheduler_sim.records.workload import RequestSpec
from test_fuzz_trace import BASES, SMALL, WILD, mutate

SECONDS = b'{"type":"config","time_unit":"s"}'
HASHED = b'{"type":"config","time_unit":"s","hash_block_size":4}'


def full_spec(raw: bytes, line: int, unit: str, hbs: int) -> RequestSpec | None:
    """What the full checks make of one request line (None: a problem)."""
    import json
    record = json.loads(raw)
    checker = RecordChecker(Problems("t"), line, "request", record, record.get("id"))
    return parse_request(checker, hbs, unit)


# --- lines the fast path accepts: the same RequestSpec as the full checks ------------

@pytest.mark.parametrize("raw, unit, hbs, expected", [
    (b'{"type":"request","id":"r1","arrival":3,"prompt_tokens":4,"output_tokens":2}',
     "tick", 16, RequestSpec("r1", 7, 3, 4, 2, 2)),
    (b'{"type":"request","id":"a-2","arrival":4.25,"prompt_tokens":9,"output_tokens":1}',
     "s", 16, RequestSpec("a-2", 7, 4.25, 9, 1, 1)),
    # keys in another order, spaces, a CR and trailing blanks: still one JSON object
    (b'{ "output_tokens": 5, "prompt_tokens": 1, "arrival": 0, "id": "x", "type": "request" }'
     b' \t\r', "ms", 16, RequestSpec("x", 7, 0, 1, 5, 5)),
    # block_hashes: ceil(9 / 4) = 3 at most, integers or strings, or none at all
    (b'{"type":"request","id":"m","arrival":0,"prompt_tokens":9,"output_tokens":2,'
     b'"block_hashes":[0,1,2]}', "s", 4,
     RequestSpec("m", 7, 0, 9, 2, 2, block_hashes=(0, 1, 2))),
    (b'{"type":"request","id":"m","arrival":1e15,"prompt_tokens":9,"output_tokens":2,'
     b'"block_hashes":["a",7]}', "s", 4,
     RequestSpec("m", 7, 1e15, 9, 2, 2, block_hashes=("a", 7))),
    (b'{"type":"request","id":"m","arrival":0,"prompt_tokens":1,"output_tokens":1,'
     b'"block_hashes":[]}', "tick", 4, RequestSpec("m", 7, 0, 1, 1, 1, block_hashes=())),
    ('{"type":"request","id":"\u00e9\U0001f600","arrival":0,"prompt_tokens":1,'
     '"output_tokens":1}'.encode(), "tick", 16, RequestSpec("\u00e9\U0001f600", 7, 0, 1, 1, 1)),
])
def test_a_common_line_gives_the_spec_of_the_full_checks(raw, unit, hbs, expected):
    spec = common_request(raw, 7, unit, hbs)
    assert spec == expected
    assert spec == full_spec(raw.rstrip(b"\r"), 7, unit, hbs)
    assert type(spec.arrival) is type(expected.arrival)


# --- lines the fast path refuses: the full checks read them --------------------------

GOOD = b'"type":"request","id":"r1","arrival":1,"prompt_tokens":4,"output_tokens":2'
REFUSED = {
    "an escape (a valid one)": b'{"type":"request","id":"r\\u0031","arrival":1,'
                               b'"prompt_tokens":4,"output_tokens":2}',
    "a lone surrogate": b'{"type":"request","id":"\\ud800","arrival":1,"prompt_tokens":4,'
                        b'"output_tokens":2}',
    "not UTF-8": b'{"type":"request","id":"\xff","arrival":1,"prompt_tokens":4,'
                 b'"output_tokens":2}',
    "a byte-order mark": b"\xef\xbb\xbf{" + GOOD + b"}",
    "leading blanks": b"  {" + GOOD + b"}",
    "a blank line": b"",
    "a CR alone": b"\r",
    "more after the object": b"{" + GOOD + b"} {}",
    "a form feed after it": b"{" + GOOD + b"}\x0c",
    "cut short": b"{" + GOOD,
    "an array": b"[{" + GOOD + b"}]",
    "a number": b"42",
    "a key given twice": b'{"type":"request","id":"r0",' + GOOD + b"}",
    "the same key twice, same value": b"{" + GOOD + b',"arrival":1}',
    "NaN": b'{"type":"request","id":"r1","arrival":NaN,"prompt_tokens":4,"output_tokens":2}',
    "Infinity": b'{"type":"request","id":"r1","arrival":1,"prompt_tokens":Infinity,'
                b'"output_tokens":2}',
    "too deep": b'{"type":"request","id":' + b"[" * 5000 + b"]" * 5000 + b"}",
    "5,000 digits": b'{"type":"request","id":"r1","arrival":1,"prompt_tokens":'
                    + b"9" * 5000 + b',"output_tokens":2}',
    "a missing field": b'{"type":"request","id":"r1","arrival":1,"prompt_tokens":4}',
    "max_tokens": b"{" + GOOD + b',"max_tokens":3}',
    "an unknown field": b"{" + GOOD + b',"bogus":3}',
    "a cancel's shape": b'{"type":"cancel","id":"r1","at":1}',
    "another type": b'{"type":"cancel","id":"r1","arrival":1,"prompt_tokens":4,'
                    b'"output_tokens":2}',
    "an empty id": b'{"type":"request","id":"","arrival":1,"prompt_tokens":4,"output_tokens":2}',
    "a number id": b'{"type":"request","id":1,"arrival":1,"prompt_tokens":4,"output_tokens":2}',
    "prompt 0": b'{"type":"request","id":"r1","arrival":1,"prompt_tokens":0,"output_tokens":2}',
    "prompt true": b'{"type":"request","id":"r1","arrival":1,"prompt_tokens":true,'
                   b'"output_tokens":2}',
    "prompt 4.0": b'{"type":"request","id":"r1","arrival":1,"prompt_tokens":4.0,'
                  b'"output_tokens":2}',
    "output 0": b'{"type":"request","id":"r1","arrival":1,"prompt_tokens":4,"output_tokens":0}',
    "output a string": b'{"type":"request","id":"r1","arrival":1,"prompt_tokens":4,'
                       b'"output_tokens":"2"}',
    "arrival negative": b'{"type":"request","id":"r1","arrival":-1,"prompt_tokens":4,'
                        b'"output_tokens":2}',
    "arrival past 1e15": b'{"type":"request","id":"r1","arrival":1000000000000001,'
                         b'"prompt_tokens":4,"output_tokens":2}',
    "arrival 1e400": b'{"type":"request","id":"r1","arrival":1e400,"prompt_tokens":4,'
                     b'"output_tokens":2}',
    "arrival false": b'{"type":"request","id":"r1","arrival":false,"prompt_tokens":4,'
                     b'"output_tokens":2}',
    "arrival null": b'{"type":"request","id":"r1","arrival":null,"prompt_tokens":4,'
                    b'"output_tokens":2}',
    "hashes null": b"{" + GOOD + b',"block_hashes":null}',
    "hashes an object": b"{" + GOOD + b',"block_hashes":{"a":1}}',
    "a float hash": b"{" + GOOD + b',"block_hashes":[1,2.5]}',
    "a boolean hash": b"{" + GOOD + b',"block_hashes":[true]}',
    "a list hash": b"{" + GOOD + b',"block_hashes":[[1]]}',
    "a null hash": b"{" + GOOD + b',"block_hashes":[null]}',
    "more hashes than blocks": b"{" + GOOD + b',"block_hashes":[1,2]}',
}


@pytest.mark.parametrize("raw", REFUSED.values(), ids=REFUSED.keys())
def test_every_other_line_is_refused(raw):
    """Each of these lines is refused (read by the full checks), in seconds with
    hashes of 4 tokens (a prompt of 4 tokens has one block)."""
    assert common_request(raw, 2, "s", 4) is None


def test_a_float_arrival_is_refused_in_ticks_only():
    raw = b'{"type":"request","id":"r1","arrival":1.5,"prompt_tokens":4,"output_tokens":2}'
    assert common_request(raw, 2, "tick", 16) is None
    assert common_request(raw, 2, "s", 16) == RequestSpec("r1", 2, 1.5, 4, 2, 2)


def outcome(data: bytes, tmp_path, streamed: bool):
    """The Trace read from `data`, or its problem list."""
    try:
        if not streamed:
            return parse_trace(data, "t.jsonl")
        path = tmp_path / "t.jsonl"
        path.write_bytes(data)
        trace = read_trace(str(path))
        return trace, trace.workload.requests
    except TraceError as error:
        return [line.replace(str(tmp_path), "DIR") for line in error.problems]


def both_ways(data: bytes, tmp_path, monkeypatch, streamed: bool):
    """(with the fast path, without it): each the Trace or the problem list."""
    monkeypatch.setattr(trace_module, "STREAM_ABOVE", 0 if streamed else 10 ** 12)
    fast = outcome(data, tmp_path, streamed)
    with monkeypatch.context() as patch:
        patch.setattr(trace_validator, "common_request", lambda *_: None)
        patch.setattr(trace_module, "common_request", lambda *_: None)
        # (the replay reads back a block as validation converted it: no other patch)
        patch.setattr(trace_validator, "common_block", lambda *_: None)
        full = outcome(data, tmp_path, streamed)
    return fast, full


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("raw", REFUSED.values(), ids=REFUSED.keys())
def test_a_refused_line_gives_the_messages_of_the_full_checks(raw, tmp_path, monkeypatch,
                                                              streamed):
    """Between two good lines, each refused line gives the same problems (or the same
    Trace) with the fast path as without it."""
    data = b"\n".join([HASHED, b"{" + GOOD.replace(b"r1", b"r0") + b"}", raw,
                       b"{" + GOOD.replace(b"r1", b"r9") + b"}", b""])
    fast, full = both_ways(data, tmp_path, monkeypatch, streamed)
    assert fast == full


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_duplicate_id_of_well_formed_lines_is_worded_by_the_full_checks(
        tmp_path, monkeypatch, streamed):
    """Both lines are well formed; the second, a duplicate, is reported as before."""
    data = b"\n".join([SECONDS, b"{" + GOOD + b"}", b"{" + GOOD + b"}", b""])
    fast, full = both_ways(data, tmp_path, monkeypatch, streamed)
    assert fast == full == [
        ("DIR/" if streamed else "") + "t.jsonl:3: request 'r1': duplicate request id 'r1' "
        "(first on line 2)"]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_cancels_and_expects_see_ids_of_well_formed_lines(tmp_path, monkeypatch, streamed):
    """A request taken by the fast path is known to the cancels and expects that name
    it (its arrival too), and suggested for the ids they misspell."""
    data = b"\n".join([b"{" + GOOD.replace(b'"r1"', b'"req-1"') + b"}",
                       b'{"type":"cancel","id":"req-2","at":0}',
                       b'{"type":"cancel","id":"req-1","at":0}',
                       b'{"type":"expect","id":"req-3","status":"finished_stopped"}',
                       b'{"type":"expect","id":"req-1","status":"finished_stopped"}', b""])
    fast, full = both_ways(data, tmp_path, monkeypatch, streamed)
    assert fast == full
    where = "DIR/t.jsonl" if streamed else "t.jsonl"
    assert fast == [
        f"{where}:2: cancel 'req-2': cancel of unknown request 'req-2' (did you mean 'req-1'?)",
        f"{where}:3: cancel 'req-1': at must be >= the request's arrival (1), got 0",
        f"{where}:4: expect: unknown request 'req-3' (did you mean 'req-1'?)"]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_mutated_traces_read_the_same_with_and_without_the_fast_path(
        tmp_path, monkeypatch, streamed):
    """40 random mutations of the fuzz tests' traces (some of them with hashes): the
    same Trace or the same problems either way."""
    rng = random.Random(26 + streamed)
    bases = [p.read_text().splitlines() for p in BASES]
    bases.append([HASHED.decode()] + [
        '{"type":"request","id":"h%d","arrival":%s,"prompt_tokens":%d,"output_tokens":2,'
        '"block_hashes":[%s]}' % (i, i * 0.5, 4 * i + 1, ",".join(map(str, range(i))))
        for i in range(1, 5)])
    for case in range(40):
        data = mutate(rng, bases[case % len(bases)], WILD if case % 2 else SMALL)
        fast, full = both_ways(data, tmp_path, monkeypatch, streamed)
        assert fast == full, (case, data)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_common_lines_never_reach_the_full_checks(tmp_path, monkeypatch, streamed):
    """A trace of the common shapes (Azure's and Mooncake's as `convert` writes them) is
    read without a single call of the full record checks, and gives the specs they give."""
    data = b"\n".join([HASHED] + [
        b'{"type":"request","id":"r%d","arrival":%d.5,"prompt_tokens":%d,"output_tokens":2%s}'
        % (i, i, 4 * i + 1, b',"block_hashes":[1,2]' if i % 2 else b"") for i in range(1, 5)]
        + [b""])

    def refuse(*_):
        raise AssertionError("a common line reached the full checks")

    monkeypatch.setattr(trace_module, "STREAM_ABOVE", 0 if streamed else 10 ** 12)
    with monkeypatch.context() as patch:
        patch.setattr(trace_validator, "parse_request", refuse)
        patch.setattr(trace_module, "parse_request", refuse)
        patch.setattr(trace_module, "checked_spec", refuse)
        fast = outcome(data, tmp_path, streamed)
    assert fast == both_ways(data, tmp_path, monkeypatch, streamed)[1]
    requests = (fast[1] if streamed else fast.workload.requests)
    assert [(r.id, r.index, r.arrival, r.prompt_tokens, r.block_hashes) for r in requests] == [
        ("r1", 2, 1.5, 5, (1, 2)), ("r2", 3, 2.5, 9, None), ("r3", 4, 3.5, 13, (1, 2)),
        ("r4", 5, 4.5, 17, None)]


# --- the spelling `generate` and `convert` write, matched before the scanner ----------

def scanner_only(raw: bytes, line: int, unit: str, hbs: int) -> RequestSpec | None:
    """What `common_request` gives with the written spelling's match patched out."""
    saved = trace_fast_path._WRITTEN
    trace_fast_path._WRITTEN = lambda _raw: None
    try:
        return common_request(raw, line, unit, hbs)
    finally:
        trace_fast_path._WRITTEN = saved


W = b'{"type":"request","id":"%s","arrival":%s,"prompt_tokens":%s,"output_tokens":%s}'
WRITTEN_LINES = [
    # (line, unit, matched by `_WRITTEN`, the spec: the scanner's too)
    (W % (b"g000001", b"4", b"407", b"32"), "tick", True, RequestSpec("g000001", 3, 4, 407, 32, 32)),
    (W % (b"azure-3", b"4.314579", b"396", b"109"), "s", True,
     RequestSpec("azure-3", 3, 4.314579, 396, 109, 109)),
    (W % (b"a", b"0.0", b"1", b"1") + b" \t\r", "ms", True, RequestSpec("a", 3, 0.0, 1, 1, 1)),
    (W % (b"a", b"1000000000000000", b"1", b"1"), "tick", True,
     RequestSpec("a", 3, 10 ** 15, 1, 1, 1)),
    (W % (b"a", b"1000000000000000.01", b"1", b"1"), "s", True,  # rounds to 1e15: kept
     RequestSpec("a", 3, 1e15, 1, 1, 1)),
    (W % ("\u00e9\x7f".encode(), b"2", b"3", b"4"), "tick", True,
     RequestSpec("\u00e9\x7f", 3, 2, 3, 4, 4)),
    # matched, then refused as the scanner's path refuses them
    (W % (b"a", b"1.5", b"1", b"1"), "tick", True, None),  # a fraction of a tick
    (W % (b"a", b"1000000000000001", b"1", b"1"), "tick", True, None),  # past 1e15
    (W % (b"a", b"1000000000000000.5", b"1", b"1"), "s", True, None),
    (W % (b"\xff", b"1", b"1", b"1"), "tick", True, None),  # not UTF-8
    # not matched: the scanner decides
    (W % (b"a", b"1e5", b"1", b"1"), "s", False, RequestSpec("a", 3, 1e5, 1, 1, 1)),
    (W % (b"a", b"01", b"1", b"1"), "s", False, None),
    (W % (b"a", b"-0", b"1", b"1"), "s", False, RequestSpec("a", 3, 0, 1, 1, 1)),
    (W % (b"", b"1", b"1", b"1"), "s", False, None),
    (W % (b"a", b"1", b"0", b"1"), "s", False, None),
    (W % (b"a", b"1", b"1", b"1" * 19), "s", False, RequestSpec("a", 3, 1, 1, int("1" * 19),
                                                                 int("1" * 19))),
    (W % (b"a\x1f", b"1", b"1", b"1"), "s", False, None),
    (W.replace(b":", b": ") % (b"a", b"1", b"1", b"1"), "s", False, RequestSpec("a", 3, 1, 1, 1, 1)),
]


@pytest.mark.parametrize("raw, unit, matched, expected", WRITTEN_LINES)
def test_the_written_spelling_gives_the_scanners_spec(raw, unit, matched, expected):
    assert (trace_fast_path._WRITTEN(raw) is not None) is matched
    spec = common_request(raw, 3, unit, 16)
    assert spec == expected == scanner_only(raw, 3, unit, 16)
    if spec is not None:
        assert type(spec.arrival) is type(expected.arrival)
        assert type(spec.id) is str


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_how_often_the_written_spelling_is_taken(tmp_path, monkeypatch, streamed):
    """Three written lines and one with blanks: validated (and, streamed, read again for
    the replay) with three matches each time, the fourth read by the scanner."""
    data = b"\n".join([SECONDS, W % (b"r1", b"0.5", b"4", b"2"), W % (b"r2", b"1", b"4", b"2"),
                       W.replace(b",", b", ") % (b"r3", b"1.25", b"4", b"2"),
                       W % (b"r4", b"2", b"5", b"3"), b""])
    matched = []
    written = trace_fast_path._WRITTEN

    def counting(raw):
        found = written(raw)
        if found is not None:
            matched.append(found.group(1))
        return found

    monkeypatch.setattr(trace_fast_path, "_WRITTEN", counting)
    fast, full = both_ways(data, tmp_path, monkeypatch, streamed)
    # (counted before comparing: comparing streamed workloads reads the file again; the
    # full checks' run of `both_ways` has common_request patched out: no matches)
    assert matched == [b"r1", b"r2", b"r4"] * (2 if streamed else 1)
    assert fast == full
    requests = fast[1] if streamed else fast.workload.requests
    assert [(r.id, r.index, r.arrival, r.prompt_tokens, r.output_tokens) for r in requests] == [
        ("r1", 2, 0.5, 4, 2), ("r2", 3, 1, 4, 2), ("r3", 4, 1.25, 4, 2), ("r4", 5, 2, 5, 3)]
