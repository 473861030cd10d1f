"""Event records: one instance of every kind round-trips through its dict and JSON form."""
from __future__ import annotations

import dataclasses
import json

import pytest

from scheduler_sim.records.events import (EVENT_TYPES, Arrival, Dispatch, Event, Finished, Released,
                                          event_from_dict)

TICK = 7


def _value(kind: str, name: str, type_text: str, position: int):
    """A distinct sample value for one field, from its annotation (as text)."""
    base = type_text.replace(" | None", "").replace("Optional[", "").rstrip("]").strip()
    if base == "tuple":  # Dispatch.rows: (id, phase, tokens, emits, token_ids or None)
        return (("r1", "prefill", 3, False, None),
                ("r2", "decode", 1, True, [7]))
    if base == "int":
        return 100 + position  # distinct per field: a swapped field cannot round-trip
    if base == "str":
        return f"{kind}-{name}"
    if base == "bool":
        return True
    if base == "float":
        return 0.5 + position
    raise AssertionError(f"no sample value for {kind}.{name}: {type_text}")


def sample(cls: type[Event], none_for_optional: bool = False) -> Event:
    """One instance of an event class with a distinct value in every field."""
    values = {}
    for position, field in enumerate(dataclasses.fields(cls)):
        if field.name == "tick":
            values["tick"] = TICK
        elif none_for_optional and "None" in str(field.type):
            values[field.name] = None
        else:
            values[field.name] = _value(cls.kind, field.name, str(field.type), position)
    return cls(**values)


KINDS = sorted(EVENT_TYPES)


def test_registry_maps_each_kind_to_its_class():
    """EVENT_TYPES[k].kind == k for every kind, and every required kind of §11 exists."""
    for kind, cls in EVENT_TYPES.items():
        assert cls.kind == kind
        assert issubclass(cls, Event)
    required = {"arrival", "rejected", "admitted", "admission_blocked", "snapshot", "dispatch",
                "finished", "cancelled", "cancel_ignored", "preempted", "released"}
    assert required <= set(EVENT_TYPES)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_through_dict(kind):
    """event_from_dict(e.to_dict()) == e for one instance of each kind."""
    e = sample(EVENT_TYPES[kind])
    d = e.to_dict()
    assert d["tick"] == TICK
    assert d["event"] == kind
    back = event_from_dict(d)
    assert type(back) is type(e)
    assert back == e


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_through_json(kind):
    """event_from_dict(json.loads(e.to_json())) == e for one instance of each kind."""
    e = sample(EVENT_TYPES[kind])
    assert event_from_dict(json.loads(e.to_json())) == e


@pytest.mark.parametrize("kind", [k for k in KINDS if any(
    "None" in str(f.type) for f in dataclasses.fields(EVENT_TYPES[k]))])
def test_round_trip_with_optional_fields_null(kind):
    """Kinds with optional fields leave them out when None, and still round-trip."""
    cls = EVENT_TYPES[kind]
    e = sample(cls, none_for_optional=True)
    optional = [f.name for f in dataclasses.fields(cls) if "None" in str(f.type)]
    d = e.to_dict()
    assert all(name not in d for name in optional)
    assert event_from_dict(json.loads(e.to_json())) == e


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_ignores_the_policy_field(kind):
    """A record written with a policy field rebuilds to the same event."""
    e = sample(EVENT_TYPES[kind])
    assert event_from_dict(json.loads(e.to_json(policy="serial"))) == e


@pytest.mark.parametrize("kind", KINDS)
def test_field_order_starts_with_tick_event_and_policy(kind):
    """Keys are tick, event, (policy,) then the record's fields in declaration order."""
    cls = EVENT_TYPES[kind]
    e = sample(cls)
    rest = [f.name for f in dataclasses.fields(cls) if f.name != "tick"]
    assert list(e.to_dict()) == ["tick", "event", *rest]
    assert list(e.to_dict(policy="p")) == ["tick", "event", "policy", *rest]
    assert list(json.loads(e.to_json())) == ["tick", "event", *rest]
    assert list(json.loads(e.to_json(policy="p"))) == ["tick", "event", "policy", *rest]
    assert e.to_dict(policy="p")["policy"] == "p"
    assert "policy" not in e.to_dict()


@pytest.mark.parametrize("kind", KINDS)
def test_to_json_is_compact_and_one_line(kind):
    """No whitespace after separators and no newline: re-dumping compactly gives the same."""
    e = sample(EVENT_TYPES[kind])
    for line in (e.to_json(), e.to_json(policy="vllm")):
        assert "\n" not in line
        assert line == json.dumps(json.loads(line), separators=(",", ":"))
        assert ", " not in line and '": ' not in line


def test_exact_json_lines():
    """Pinned lines: Released(4, 2) and Arrival(0, 'r1'), with and without a policy."""
    assert Released(4, 2).to_json() == '{"tick":4,"event":"released","blocks":2}'
    assert Released(4, 2).to_json(policy="serial") == \
        '{"tick":4,"event":"released","policy":"serial","blocks":2}'
    assert Arrival(0, "r1").to_json() == '{"tick":0,"event":"arrival","id":"r1"}'


def test_dispatch_rows_survive_the_round_trip_as_a_tuple():
    """A Dispatch's rows come back as a tuple of row tuples equal to the original, and
    read as the row objects of §11 in JSON (token_ids only where given)."""
    e = sample(Dispatch)
    back = event_from_dict(json.loads(e.to_json()))
    assert isinstance(back.rows, tuple)
    assert back.rows == e.rows
    assert e.to_dict()["rows"] == [
        {"id": "r1", "phase": "prefill", "tokens": 3, "emits": False},
        {"id": "r2", "phase": "decode", "tokens": 1, "emits": True, "token_ids": [7]}]


def test_dispatch_json_written_by_hand_matches_the_generic_encoder():
    """The hand-written dispatch line is byte for byte what json would write, escapes
    included."""
    e = Dispatch(3, (('q"1\\', "decode", 1, True, None), ("é", "prefill", 4, False, [1, 2])),
                 5, 4)
    generic = json.dumps(e.to_dict("p"), separators=(",", ":"))
    assert e.to_json("p") == generic
    assert e.to_json() == json.dumps(e.to_dict(), separators=(",", ":"))


@pytest.mark.parametrize("kind", KINDS)
def test_events_are_frozen(kind):
    """Assigning to a field of a record raises FrozenInstanceError."""
    e = sample(EVENT_TYPES[kind])
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.tick = 99


def test_in_seconds_tick_becomes_time_and_time_fields_convert():
    """With a clock that reports seconds (1-ms steps), `tick` becomes `time` and every time
    field is in seconds: an arrival at step 7 with a client wait of 3 steps, a timeout
    after 12 steps, a dispatch from 7 to 9 (hand-written writer and generic encoder agree)
    and a snapshot; counts stay counts."""
    from scheduler_sim.records.clock import Clock
    from scheduler_sim.records.events import Snapshot, Timeout
    c = Clock("s", 1.0, 0.001, True)
    assert Arrival(7, "a", 3).to_json(None, c) == \
        '{"time":0.007,"event":"arrival","id":"a","client_wait":0.003}'
    assert Timeout(7, "a", 12).to_json("vllm", c) == \
        '{"time":0.007,"event":"timeout","policy":"vllm","id":"a","waited":0.012}'
    d = Dispatch(7, (("a", "decode", 1, True, None),), 1, 9)
    assert d.to_json(None, c) == ('{"time":0.007,"event":"dispatch","rows":[{"id":"a",'
                                  '"phase":"decode","tokens":1,"emits":true}],"tokens":1,'
                                  '"done":0.009}')
    assert json.loads(d.to_json(None, c)) == d.to_dict(None, c)
    snap = Snapshot(7, 1, 2, 3, 4, 5, 6)
    assert snap.to_json(None, c) == ('{"time":0.007,"event":"snapshot","waiting":1,'
                                     '"running":2,"reserved":3,"allocated":4,"draining":5,'
                                     '"free":6}')
    assert Arrival(7, "a").to_json(None, Clock()) == '{"tick":7,"event":"arrival","id":"a"}'


def _generic(e: Event, policy, clock) -> str:
    return json.dumps(e.to_dict(policy, clock), separators=(",", ":"))


@pytest.mark.parametrize("kind", KINDS)
def test_every_line_written_field_by_field_is_what_json_writes(kind):
    """`to_json` of every kind, with and without its optional fields, a policy tag
    needing escapes, and a clock in ticks, in 1-ms and in 2.5-us steps, is byte for
    byte `json.dumps(to_dict())`."""
    from scheduler_sim.records.clock import Clock
    clocks = (None, Clock(), Clock("s", 1.0, 0.001, True), Clock("s", 1.0, 2.5e-6, True))
    for e in (sample(EVENT_TYPES[kind]), sample(EVENT_TYPES[kind], none_for_optional=True)):
        for policy in (None, "vllm", 'p"\\é'):
            for clock in clocks:
                assert e.to_json(policy, clock) == _generic(e, policy, clock)


def test_a_repeated_rows_tuple_is_written_once_and_a_new_one_afresh():
    """A folded stretch hands the same rows tuple to every dispatch line: the text is
    reused; an equal-looking new tuple, or one with other rows, is written afresh
    (a decode row of request 'a' is the same text either way)."""
    from scheduler_sim.records.event_lines import dispatch_line
    rows = (("a", "decode", 1, True, None), ("b", "prefill", 3, False, None))
    first = dispatch_line(1, rows, 4, 2, None, None)
    assert dispatch_line(2, rows, 4, 3, None, None) == first.replace(
        '"tick":1', '"tick":2').replace('"done":2', '"done":3')
    other = (("a", "decode", 1, True, None), ("b", "prefill", 2, False, None))
    assert '"tokens":2,"emits":false' in dispatch_line(3, other, 3, 4, None, None)
    assert dispatch_line(1, rows, 4, 2, None, None) == first


def test_a_dispatch_s_runs_of_plain_decodes_are_written_at_once_around_other_rows():
    """Rows a, b (plain decodes), c (a chunk), d (a plain decode), e (a decode
    naming its token ids), f, g (plain decodes): the runs (a, b), (d) and (f, g)
    are each one `decode_rows_text`, c and e written field by field; the line is
    what the generic encoder writes, in every arrangement of those rows."""
    import itertools
    from scheduler_sim.records.event_lines import decode_rows_text, rows_text
    rows = (("a", "decode", 1, True, None), ("b", "decode", 1, True, None),
            ("c", "prefill", 5, False, None), ("d", "decode", 1, True, None),
            ("e", "decode", 1, True, (7, 8)), ("f", "decode", 1, True, None),
            ("g", "decode", 1, True, None))
    assert rows_text(rows) == ",".join([
        decode_rows_text(["a", "b"]),
        '{"id":"c","phase":"prefill","tokens":5,"emits":false}',
        decode_rows_text(["d"]),
        '{"id":"e","phase":"decode","tokens":1,"emits":true,"token_ids":[7,8]}',
        decode_rows_text(["f", "g"])])
    for some in itertools.permutations(rows[1:6], 4):
        d = Dispatch(3, tuple(some), 4, 5)
        assert d.to_json(None, None) == _generic(d, None, None)


def test_clock_text_of_whole_second_and_millisecond_steps():
    """`Clock.text` with 1-s steps (no point: 10 is "10", not "1" nor ".10") and 1-ms
    steps (under a second from the digits of steps + 1000: 0.05, 0.001; 10 s is
    "10"), the same when asked again (remembered); a tick clock's text is the count."""
    from scheduler_sim.records.clock import Clock
    whole = Clock("s", 1.0, 1.0, True)
    assert [whole.text(n) for n in (0, 10, 10, 1_000_000)] == ["0", "10", "10", "1000000"]
    ms = Clock("s", 1.0, 0.001, True)
    assert [ms.text(n) for n in (50, 1, 10_000, 10_250, 50)] == \
        ["0.05", "0.001", "10", "10.25", "0.05"]
    assert Clock().text(120) == "120"


def test_clock_text_is_repr_of_the_reported_seconds():
    """`Clock.text` writes a step count as `repr` of `report`: through the decimal
    digits of the integer when a step is 10^-d s (0.000123, 12, 1e-06 below 1e-4),
    through the float otherwise (2.5-us steps), asked again or not."""
    from scheduler_sim.records.clock import Clock
    import random
    us = Clock("s", 1.0, 1e-6, True)
    assert [us.text(n) for n in (123, 12_000_000, 1, 100, 1_234_567_890)] == \
        ["0.000123", "12", "1e-06", "0.0001", "1234.56789"]
    rng = random.Random(5)
    for clock in (us, Clock("s", 1.0, 0.001, True), Clock("s", 1.0, 2.5e-6, True),
                  Clock("s", 1.0, 1e-9, True)):
        for _ in range(20_000):
            steps = rng.randrange(10 ** rng.randrange(1, 17))
            value = clock.report(steps)
            assert clock.text(steps) == repr(value) == clock.text(steps)


def test_a_folded_stretch_is_one_text_of_the_lines_written_one_by_one():
    """Two folded dispatches of a and b at ticks 10 and 12 (done 15), 3 then 4 blocks
    of 10 held: four lines joined by newlines, each what `snapshot_line` and
    `dispatch_line` write; in seconds (1-us steps, a policy tag) the times are
    written once each (1.5, 1.50625, 1.5125)."""
    from scheduler_sim.records.clock import Clock
    from scheduler_sim.records.event_lines import (decode_rows_text, decodes_line,
                                                   dispatch_line, snapshot_line, steady_parts)

    def steady_text(*args):
        return "".join(steady_parts(*args))
    rows_ab = ('{"id":"a","phase":"decode","tokens":1,"emits":true},'
               '{"id":"b","phase":"decode","tokens":1,"emits":true}')
    assert decode_rows_text(["a", "b"]) == rows_ab
    assert decode_rows_text([]) == ""
    assert steady_text([10, 12], 15, [3, 4], ["a", "b"], 1, 2, 5, 0, 10, 2, None, None) == (
        '{"tick":10,"event":"snapshot","waiting":1,"running":2,"reserved":5,"allocated":3,'
        '"draining":0,"free":7}\n'
        '{"tick":10,"event":"dispatch","rows":[' + rows_ab + '],"tokens":2,"done":12}\n'
        '{"tick":12,"event":"snapshot","waiting":1,"running":2,"reserved":5,"allocated":4,'
        '"draining":0,"free":6}\n'
        '{"tick":12,"event":"dispatch","rows":[' + rows_ab + '],"tokens":2,"done":15}')
    assert steady_text([], 15, [], ["a"], 1, 2, 5, 0, 10, 1, None, None) == ""
    clock = Clock("s", 1.0, 1e-6, True)
    rows = tuple((rid, "decode", 1, True, None) for rid in ("a", "b"))
    text = steady_text([1_500_000, 1_506_250], 1_512_500, [3, 4], ["a", "b"], 1, 2, 5, 1, 10,
                       2, 'p"', clock)
    assert text.split("\n") == [
        snapshot_line(1_500_000, 1, 2, 5, 3, 1, 6, None, 'p"', clock),
        dispatch_line(1_500_000, rows, 2, 1_506_250, 'p"', clock),
        snapshot_line(1_506_250, 1, 2, 5, 4, 1, 5, None, 'p"', clock),
        decodes_line(1_506_250, ["a", "b"], 2, 1_512_500, 'p"', clock)]
    assert '"time":1.50625,' in text and text.endswith('"done":1.5125}')


def test_plain_decode_rows_quote_each_id_once_and_as_json_does(monkeypatch):
    """A plain decode row's id is its JSON string literal (a quote and a backslash
    escaped, a non-ASCII character as \\u), made when the id is first written
    and looked up after; past 2^14 ids the texts are dropped and made again."""
    from scheduler_sim.records import event_lines
    quoted = event_lines._QuotedIds()
    monkeypatch.setattr(event_lines, "_QUOTED", quoted)
    assert event_lines.decode_rows_text(['q"1', "\\", "\u00e9"]) == (
        '{"id":"q\\"1","phase":"decode","tokens":1,"emits":true},'
        '{"id":"\\\\","phase":"decode","tokens":1,"emits":true},'
        '{"id":"\\u00e9","phase":"decode","tokens":1,"emits":true}')
    assert quoted == {'q"1': '"q\\"1"', "\\": '"\\\\"', "\u00e9": '"\\u00e9"'}
    quoted.update((str(i), "x") for i in range(1 << 14))
    assert event_lines.decode_rows_text(["a"]) == (
        '{"id":"a","phase":"decode","tokens":1,"emits":true}')
    assert quoted == {"a": '"a"'}


def test_a_folded_snapshot_s_block_counts_are_one_text_by_blocks_held():
    """The block counts of a pool of 10 blocks, 1 draining, as a folded snapshot
    writes them up to the next line's key: 3 held leave 6 free; asked again, the
    same text (made once); another pool or key, other texts."""
    from scheduler_sim.records.event_lines import _block_counts
    counts = _block_counts(1, 10, '{"tick":')
    assert counts[3] == '3,"draining":1,"free":6}\n{"tick":'
    assert counts[3] is counts[3] and len(counts) == 1
    assert _block_counts(1, 10, '{"tick":') is counts
    assert _block_counts(0, 10, '{"time":')[3] == '3,"draining":0,"free":7}\n{"time":'


def test_a_counted_dispatch_s_snapshot_and_dispatch_are_one_text():
    """A counted dispatch of a and b at tick 10 (done 12): its snapshot (3 held, 7
    free of 10, its counts a tuple in `Snapshot`'s order) and its dispatch, two lines joined by a newline, each what
    `snapshot_line` and `decodes_line` write; without a snapshot the dispatch
    alone; with a prefix cache's count, and in seconds with a policy tag (the
    start's time, 1.5, written in both)."""
    from scheduler_sim.records.clock import Clock
    from scheduler_sim.records.event_lines import (counted_text, decode_rows_text,
                                                   decodes_line, snapshot_line)
    rows = decode_rows_text(["a", "b"])
    counts = (1, 2, 5, 3, 0, 7, None)  # (waiting, running, reserved, allocated, draining,
    # free, cached: `Snapshot`'s order)
    assert counted_text(10, counts, rows, 2, 12, None, None) == (
        '{"tick":10,"event":"snapshot","waiting":1,"running":2,"reserved":5,"allocated":3,'
        '"draining":0,"free":7}\n'
        '{"tick":10,"event":"dispatch","rows":[' + rows + '],"tokens":2,"done":12}')
    assert counted_text(10, None, rows, 2, 12, None, None) == (
        '{"tick":10,"event":"dispatch","rows":[' + rows + '],"tokens":2,"done":12}')
    clock = Clock("s", 1.0, 1e-6, True)
    counts = counts[:6] + (4,)
    assert counted_text(1_500_000, counts, rows, 2, 1_506_250, 'p"', clock).split("\n") == [
        snapshot_line(1_500_000, 1, 2, 5, 3, 0, 7, 4, 'p"', clock),
        decodes_line(1_500_000, ["a", "b"], 2, 1_506_250, 'p"', clock)]


def test_a_counted_batch_s_rows_are_the_last_text_when_its_requests_are_the_same():
    """`LineListener.members_rows`: the rows of requests a and b (plain decodes); the
    same requests in another list, the same text (kept, not made again); the batch
    gaining c between them, then losing it from its middle, each the rows of its
    requests in order; a list the caller changes after the call is not the one
    kept. Then a counted start of a and b at tick 10 (done 12), 3 of 10 blocks
    held, and a folded stretch of two dispatches after it (at 12 and 14, done 16,
    4 and 5 blocks held), every line by hand."""
    from scheduler_sim.records.event_lines import LineListener, counted_text, steady_parts

    class Req:
        def __init__(self, rid):
            self.rid = rid

    a, b, c = Req("a"), Req("b"), Req("c")
    row = '{{"id":"{}","phase":"decode","tokens":1,"emits":true}}'.format
    listener = LineListener(None, None)
    rows = listener.members_rows([a, b])
    assert rows == row("a") + "," + row("b")
    assert listener.members_rows([a, b]) is rows
    assert listener.members_rows([a, c, b]) == row("a") + "," + row("c") + "," + row("b")
    assert listener.members_rows([a, b]) == rows
    batch = [a]
    assert listener.members_rows(batch) == row("a")
    batch.append(b)
    assert listener.members_rows(batch) == rows
    assert listener.members_rows([]) == ""
    assert listener.members_rows([b]) == row("b")
    assert LineListener(None, None).members_rows([a, b]) == rows  # (each listener its own)
    rows = listener.members_rows([a, b])
    text = counted_text(10, (1, 2, 5, 3, 0, 7, None), rows, 2, 12, None, None) + "".join(
        ["\n"] + steady_parts([12, 14], 16, [4, 5], None, 1, 2, 5, 0, 10, 2, None, None, rows))
    assert text.split("\n") == [
        '{"tick":10,"event":"snapshot","waiting":1,"running":2,"reserved":5,"allocated":3,'
        '"draining":0,"free":7}',
        '{"tick":10,"event":"dispatch","rows":[{"id":"a","phase":"decode","tokens":1,'
        '"emits":true},{"id":"b","phase":"decode","tokens":1,"emits":true}],"tokens":2,'
        '"done":12}',
        '{"tick":12,"event":"snapshot","waiting":1,"running":2,"reserved":5,"allocated":4,'
        '"draining":0,"free":6}',
        '{"tick":12,"event":"dispatch","rows":[{"id":"a","phase":"decode","tokens":1,'
        '"emits":true},{"id":"b","phase":"decode","tokens":1,"emits":true}],"tokens":2,'
        '"done":14}',
        '{"tick":14,"event":"snapshot","waiting":1,"running":2,"reserved":5,"allocated":5,'
        '"draining":0,"free":5}',
        '{"tick":14,"event":"dispatch","rows":[{"id":"a","phase":"decode","tokens":1,'
        '"emits":true},{"id":"b","phase":"decode","tokens":1,"emits":true}],"tokens":2,'
        '"done":16}']


def test_a_counted_batch_s_rows_quote_each_request_s_own_id():
    """`members_rows` looks each id up by the request (`_BY_REQUEST`): two requests
    named alike (`x"1` and `x"1`, quoted `"x\\"1"`) are each their own id's row; a
    request named with a character past ASCII (`é`) is quoted as the encoder
    quotes it (`"\\u00e9"`); after the table is cleared, the same text."""
    from scheduler_sim.records import event_lines
    from scheduler_sim.records.event_lines import LineListener

    class Req:
        def __init__(self, rid):
            self.rid = rid

    p, q, e = Req('x"1'), Req('x"1'), Req("\u00e9")
    row = '{{"id":{},"phase":"decode","tokens":1,"emits":true}}'.format
    text = LineListener(None, None).members_rows([p, e, q])
    assert text == ",".join([row('"x\\"1"'), row('"\\u00e9"'), row('"x\\"1"')])
    event_lines._BY_REQUEST.clear()
    assert LineListener(None, None).members_rows([p, e, q]) == text
    assert event_lines._BY_REQUEST[p] == event_lines._BY_REQUEST[q] == '"x\\"1"'


def test_a_counted_start_s_text_can_leave_its_end_open():
    """`counted_text` of no `done` ends at the dispatch's `"done":`, for the folded
    stretch after it to write that end (its first start): with a snapshot, the
    snapshot's line and the open dispatch; without, the open dispatch alone."""
    from scheduler_sim.records.event_lines import counted_text, decode_rows_text
    rows = decode_rows_text(["a", "b"])
    assert counted_text(10, (1, 2, 5, 3, 0, 7, None), rows, 2, None, None, None) == (
        '{"tick":10,"event":"snapshot","waiting":1,"running":2,"reserved":5,"allocated":3,'
        '"draining":0,"free":7}\n{"tick":10,"event":"dispatch","rows":[' + rows
        + '],"tokens":2,"done":')
    assert counted_text(10, None, rows, 2, None, None, None) == (
        '{"tick":10,"event":"dispatch","rows":[' + rows + '],"tokens":2,"done":')


def test_a_counted_start_given_by_its_counts_is_the_folded_stretch_s_first_dispatch():
    """A counted start of a and b at tick 10 and the folded stretch after it
    (dispatches at 12 and 14, done 16, 4 and 5 of 10 blocks held, 5 reserved;
    blocks of 4, one member at residue 0): with 3 blocks allocated and 7 free, as
    the stretch's pool would read, `counted_fold` lays it out as the stretch's
    first dispatch (one text of 3 dispatches, `steady_lines`' pieces), its lines
    by hand; counts the stretch's would not give (7 free of 10 with 4 allocated,
    6 reserved, a cached count) are written first, as `counted_text` writes
    them, by hand, and so does `steady_parts` given any start; in seconds with a
    policy's tag, the same lines as the start's closed text followed by the
    stretch's."""
    from types import SimpleNamespace

    from scheduler_sim.engine.fast.fold_records import counted_fold
    from scheduler_sim.records.clock import Clock
    from scheduler_sim.records.event_lines import (LineListener, counted_text,
                                                   decode_rows_text, steady_parts)

    class Collect(LineListener):
        def write(self, line):
            lines.append(line)

        def write_parts(self, parts):
            pieces.append(len(parts))
            super().write_parts(parts)

    def replay(times, counts, policy=None, clock=None):
        lines.clear()
        pieces.clear()
        pool = SimpleNamespace(num_blocks=10, reserved=5, draining=0, held=4, block_size=4)
        engine = SimpleNamespace(allocator=pool, _emit=Collect(policy, clock),
                                 steadiness=SimpleNamespace(blocked=None))
        reqs = [SimpleNamespace(rid="a"), SimpleNamespace(rid="b")]
        counted_fold(engine, reqs, times[:-1], times[-1], [1, 0, 1, 0], rows, counts)
        return "\n".join(lines)
    lines: list[str] = []
    pieces: list[int] = []
    rows = decode_rows_text(["a", "b"])
    row = '{{"id":"{}","phase":"decode","tokens":1,"emits":true}}'.format
    dispatch = '"event":"dispatch","rows":[' + row("a") + "," + row("b") + '],"tokens":2,'
    snapshot = '"event":"snapshot","waiting":1,"running":2,'
    stretch = [
        '{"tick":12,' + snapshot + '"reserved":5,"allocated":4,"draining":0,"free":6}',
        '{"tick":12,' + dispatch + '"done":14}',
        '{"tick":14,' + snapshot + '"reserved":5,"allocated":5,"draining":0,"free":5}',
        '{"tick":14,' + dispatch + '"done":16}']
    start = ['{"tick":10,' + snapshot + '"reserved":5,"allocated":3,"draining":0,"free":7}',
             '{"tick":10,' + dispatch + '"done":12}']
    assert replay([10, 12, 14, 16], (1, 2, 5, 3, 0, 7, None)).split("\n") == start + stretch
    assert pieces == [3 * 7 + 2]  # (laid out: the start is the first of three dispatches)
    assert "".join(steady_parts([12, 14], 16, [4, 5], None, 1, 2, 5, 0, 10, 2, None, None,
                                rows, (10, (1, 2, 5, 3, 0, 7, None)))).split("\n") == (
        start + stretch)
    for counts, first in (((1, 2, 5, 4, 0, 7, None), '"reserved":5,"allocated":4,"draining":0,'
                                                     '"free":7}'),
                          ((1, 2, 6, 3, 0, 7, None), '"reserved":6,"allocated":3,"draining":0,'
                                                     '"free":7}'),
                          ((1, 2, 5, 3, 0, 7, 4), '"reserved":5,"allocated":3,"draining":0,'
                                                  '"free":7,"cached":4}')):
        assert replay([10, 12, 14, 16], counts).split("\n") == [
            '{"tick":10,' + snapshot + first, '{"tick":10,' + dispatch + '"done":12}'] + stretch
        assert pieces == [2 * 7 + 2]  # (written first, its end the stretch's first piece)
    clock = Clock("s", 1.0, 1e-6, True)
    times = [1_506_250, 1_512_500]
    for counts in ((1, 2, 5, 3, 0, 7, None), (1, 2, 5, 3, 0, 7, 4)):  # laid out; written
        assert replay([999_990] + times + [1_518_750], counts, 'p"', clock) == (
            counted_text(999_990, counts, rows, 2, 1_506_250, 'p"', clock) + "\n"
            + "".join(steady_parts(times, 1_518_750, [4, 5], None, 1, 2, 5, 0, 10, 2, 'p"',
                                   clock, rows)))


def test_admissions_take_the_last_start_s_rows_in_a_listened_replay():
    """Twelve requests arriving into and finishing inside counted stretches under a
    cost model, events to a line listener: the admissions' decodes and the counted
    starts take their rows' text through `members_rows`, which gives the last text
    back at 8 of its 28 calls, and 11 counted starts with a folded stretch after
    them write their lines with the stretch's, their end left open (counted: a
    change in when these paths apply shows here); the lines are those of the
    stepped replay (no fast-forward)."""
    from conftest import twelve_arrivals_stepped
    from scheduler_sim.engine.core import Engine
    from scheduler_sim.records.event_lines import LineListener

    trace, options, clock, stepped = twelve_arrivals_stepped()
    lines: list[str] = []
    calls = []

    class Collect(LineListener):
        def write(self, line):
            lines.extend(line.split("\n"))

        def members_rows(self, reqs):
            calls.append(reqs == self.rows_of)
            return super().members_rows(reqs)

    from scheduler_sim.engine.fast import fold_records
    made, written = fold_records.steady_lines, fold_records.steady_parts
    heads = []

    def counting(*args):
        heads.append(len(args))  # (laid out: `counted_fold`'s times, no head)
        return made(*args)

    def writing(*args):
        if len(args) > 13 and args[13] is not None:  # (a counted start written first)
            heads.append("written")
        return written(*args)

    fold_records.steady_lines, fold_records.steady_parts = counting, writing
    try:
        Engine(trace.workload, options, "continuous", on_event=Collect("p", clock)).run()
    finally:
        fold_records.steady_lines, fold_records.steady_parts = made, written
    assert (len(calls), calls.count(True)) == (28, 8)
    assert heads == [11] * 11  # (each laid out as its stretch's first dispatch)
    assert lines == stepped


def test_the_events_file_writes_a_text_of_lines_as_its_lines(tmp_path):
    """A line, a folded stretch's text of two lines and a list of one reach the file
    as four lines, in order; a fleet replica's listener tags each line of the text."""
    import io

    from scheduler_sim.io.event_file import EventFile
    target = tmp_path / "events.jsonl"
    events = EventFile(str(target), io.StringIO(), False)
    lines = events.listener("continuous")
    lines.write('{"tick":1,"event":"x"}')
    lines.write_text('{"tick":2,"event":"y"}\n{"tick":3,"event":"z"}')
    lines.write_all(['{"tick":4,"event":"w"}'])
    replica = events.listener("continuous", replica=2)
    replica.write_text('{"tick":5,"event":"y","a":1}\n{"tick":6,"event":"z"}')
    events.commit()
    assert target.read_text() == (
        '{"tick":1,"event":"x"}\n{"tick":2,"event":"y"}\n{"tick":3,"event":"z"}\n'
        '{"tick":4,"event":"w"}\n{"tick":5,"event":"y","replica":2,"a":1}\n'
        '{"tick":6,"event":"z","replica":2}\n')


def test_the_events_file_writes_a_record_handed_to_it_as_its_line(tmp_path):
    """A record handed to a policy's listener (its `__call__`, the lines written
    without a call of `write`) is the record's `to_json` with the policy's tag and
    the file's clock, in order with the lines written."""
    import io

    from scheduler_sim.io.event_file import EventFile
    from scheduler_sim.records.clock import Clock
    target = tmp_path / "events.jsonl"
    events = EventFile(str(target), io.StringIO(), True, Clock("s", 1.0, 1e-6, True))
    lines = events.listener("vllm")
    lines(Arrival(1_500_000, "a"))
    lines.write('{"time":2,"event":"x"}')
    lines(Finished(2_000_250, "a", "finished"))
    events.commit()
    assert target.read_text() == (
        '{"time":1.5,"event":"arrival","policy":"vllm","id":"a"}\n'
        '{"time":2,"event":"x"}\n'
        '{"time":2.00025,"event":"finished","policy":"vllm","id":"a","status":"finished"}\n')


def test_the_events_file_writes_records_out_a_batch_at_a_time(tmp_path):
    """`BATCH` records handed to a listener (its `__call__`) are written to the handle
    at once, the buffer emptied; one fewer stays buffered."""
    import io

    from scheduler_sim.io.event_file import BATCH, EventFile
    events = EventFile("-", io.StringIO(), False)
    lines = events.listener("continuous")
    for tick in range(BATCH - 1):
        lines(Arrival(tick, "a"))
    # (each line two pieces of the buffer: its text and a newline)
    assert (len(events._lines), events.handle.getvalue()) == (2 * BATCH - 2, "")
    lines(Arrival(BATCH - 1, "a"))
    written = events.handle.getvalue().splitlines()
    assert (len(events._lines), len(written), written[-1]) == (
        0, BATCH, '{"tick":4095,"event":"arrival","id":"a"}')


def test_records_compare_hash_repr_and_pickle_by_their_fields():
    """The base's methods, which every record uses (no per-class methods are generated):
    equal when of the same class with the same fields, a hash of the field values, a
    dataclass-style repr, pickling and copying, defaults, deletion refused."""
    import copy
    import pickle
    from scheduler_sim.records.events import Finished, Snapshot
    a = Arrival(3, "x")
    assert a == Arrival(3, "x") and a != Arrival(3, "x", 2) and a != Finished(3, "x", "ok")
    assert a.__eq__(Finished(3, "x", "ok")) is NotImplemented
    assert hash(a) == hash((3, "x", None))
    assert repr(a) == "Arrival(tick=3, id='x', client_wait=None)"
    assert repr(Released(1, 4)) == "Released(tick=1, blocks=4)"
    assert Arrival(tick=1, id="q", client_wait=5).client_wait == 5
    snap = Snapshot(1, 2, 3, 4, 5, 6, 7)
    assert snap.cached is None and snap.free == 7
    for record in (a, snap, Dispatch(1, (("a", "decode", 1, True, None),), 1, 2)):
        assert pickle.loads(pickle.dumps(record)) == record
        assert copy.copy(record) == record and copy.deepcopy(record) == record
    assert dataclasses.replace(a, tick=4) == Arrival(4, "x")
    assert Arrival.__init__.__qualname__ == "Arrival.__init__"
    with pytest.raises(dataclasses.FrozenInstanceError):
        del a.id
    with pytest.raises(TypeError):
        Arrival(1)


def test_a_fresh_prompt_s_row_is_the_rows_text_of_its_tuple():
    """An admission's newcomer's row from its parts: `rows_text` of the row tuple
    (rid, "prefill", tokens, True, ids), with and without token ids, and an id that
    JSON must escape."""
    from scheduler_sim.records.event_lines import prompt_row_text, rows_text
    assert prompt_row_text("r1", 7, None) == (
        '{"id":"r1","phase":"prefill","tokens":7,"emits":true}')
    assert prompt_row_text('q"2', 3, [5, 0, 11]) == (
        '{"id":"q\\"2","phase":"prefill","tokens":3,"emits":true,"token_ids":[5,0,11]}')
    for row in (("r1", "prefill", 7, True, None), ('q"2', "prefill", 3, True, [5, 0, 11])):
        assert prompt_row_text(row[0], row[2], row[4]) == rows_text((row,))


def test_the_events_file_writes_a_text_s_pieces_as_its_lines(tmp_path):
    """A folded stretch's pieces (`write_parts`) reach the file as the lines of their
    joined text, in order with a line before and after and a batch written out
    between; a fleet replica's listener tags each line of the joined text."""
    import io

    from scheduler_sim.io.event_file import BATCH, EventFile
    target = tmp_path / "events.jsonl"
    events = EventFile(str(target), io.StringIO(), False)
    lines = events.listener("continuous")
    lines.write('{"tick":1,"event":"x"}')
    lines.write_parts(['{"tick":2', ',"event":"y"}\n{"tick":', "3", ',"event":"z"}'])
    assert len(events._lines) == 2 + 4 + 1  # (the pieces kept unjoined, then a newline)
    for tick in range(4, 4 + BATCH):  # (a batch's worth of lines: written out)
        lines.write(f'{{"tick":{tick},"event":"w"}}')
    lines.write_parts([])  # (no lines: nothing, not an empty line)
    replica = events.listener("continuous", replica=2)
    replica.write_parts(['{"tick":5,"event":"y",', '"a":1}\n{"tick":6,"event":"z"}'])
    events.commit()
    assert target.read_text().splitlines() == (
        ['{"tick":1,"event":"x"}', '{"tick":2,"event":"y"}', '{"tick":3,"event":"z"}']
        + [f'{{"tick":{tick},"event":"w"}}' for tick in range(4, 4 + BATCH)]
        + ['{"tick":5,"event":"y","replica":2,"a":1}', '{"tick":6,"event":"z","replica":2}'])


def test_folded_stretches_with_long_rows_are_written_out_by_the_megabyte(tmp_path):
    """A folded stretch's rows' text counts toward the events file's megabyte: stretches
    of two dispatches whose rows' text is 100,000 characters (200,000 a stretch) stay
    in the batch for five writes (1,000,000 < 2**20) and go out at the sixth, long
    before 8,192 pieces (16 a stretch)."""
    import io

    from scheduler_sim.io.event_file import EventFile
    from scheduler_sim.records.event_lines import steady_parts
    events = EventFile(str(tmp_path / "events.jsonl"), io.StringIO(), False)
    lines = events.listener("continuous")
    rows = "x" * 100_000
    for n in range(1, 7):
        parts = steady_parts([10 * n, 10 * n + 2], 10 * n + 4, [1, 1], ["a"], 0, 1, 0, 0,
                             10, 1, None, None, rows)
        assert len(parts) == 16
        lines.write_parts(parts)
        assert len(events._lines) == (17 * n if n < 6 else 0)
    assert lines.text_size == 0


@pytest.mark.parametrize("caching", [False, True])
def test_a_counted_start_s_snapshot_counts_are_those_of_the_state(caching):
    """`Counting._counts` is `_state`'s counts in `Snapshot`'s order (cached None
    without a prefix cache, else 0 here): on an engine with nothing run (nothing
    arrived, 16 blocks free); with 3 blocks of a's grown this step,
    `_state(plan)`'s counts from before them (the plan's blocks still free), and
    without a plan as they are (3 allocated, 13 free)."""
    from conftest import trace_bytes
    from scheduler_sim.engine.core import Engine
    from scheduler_sim.io.trace import parse_trace
    from scheduler_sim.records.events import Snapshot
    from scheduler_sim.records.options import Options
    trace = parse_trace(trace_bytes([
        {"type": "request", "id": "a", "arrival": 0, "prompt_tokens": 4, "output_tokens": 3},
        {"type": "request", "id": "b", "arrival": 0, "prompt_tokens": 4, "output_tokens": 2}]),
        "counts.jsonl")
    opts = Options.resolve(trace.config, {"block_size": 4, "num_blocks": 16,
                                          "prefix_caching": caching})
    engine = Engine(trace.workload, opts, "vllm")

    def expected(plan=()):
        state = engine._state(plan)
        return tuple(getattr(Snapshot(0, **state), name) for name in
                     ("waiting", "running", "reserved", "allocated", "draining", "free",
                      "cached"))
    cached = 0 if caching else None
    assert engine._counts() == expected() == (0, 0, 0, 0, 0, 16, cached)
    allocator = engine.allocator
    allocator.grow("a", 12)  # (3 blocks of a's, grown in this step)
    assert allocator.step_growth == {"a": 3}
    assert engine._counts(["a"]) == expected(["a"]) == (0, 0, 0, 0, 0, 16, cached)
    assert engine._counts() == expected() == (0, 0, 0, 3, 0, 13, cached)


def test_a_request_s_lines_are_written_without_their_records(tmp_path):
    """A line listener takes a request's arrival, admission and finish as their fields
    (`arrived`, `admitted`, `finished`) and writes the lines the records' `to_json`
    write: in seconds with the policy's tag and without, in ticks, and tagged with
    the replica by a fleet's listener (the base class's methods, through `write`)."""
    import io

    from scheduler_sim.io.event_file import EventFile
    from scheduler_sim.records.clock import Clock
    from scheduler_sim.records.events import Admitted
    target = tmp_path / "events.jsonl"
    events = EventFile(str(target), io.StringIO(), True, Clock("s", 1.0, 1e-6, True))
    lines = events.listener("vllm")
    lines.arrived(1_500_000, "a")
    lines.admitted(1_500_000, "a", 3, False, 0)
    lines.finished(2_000_250, "a", "finished")
    replica = events.listener("vllm", replica=1)
    replica.admitted(12_000_001, 'q"1', 0, True, 32)
    events.commit()
    assert target.read_text() == (
        '{"time":1.5,"event":"arrival","policy":"vllm","id":"a"}\n'
        '{"time":1.5,"event":"admitted","policy":"vllm","id":"a","reserved":3,'
        '"resumed":false,"cached_tokens":0}\n'
        '{"time":2.00025,"event":"finished","policy":"vllm","id":"a","status":"finished"}\n'
        '{"time":12.000001,"event":"admitted","policy":"vllm","replica":1,"id":"q\\"1",'
        '"reserved":0,"resumed":true,"cached_tokens":32}\n')
    assert target.read_text().splitlines()[:3] == [
        record.to_json("vllm", Clock("s", 1.0, 1e-6, True))
        for record in (Arrival(1_500_000, "a"), Admitted(1_500_000, "a", 3, False, 0),
                       Finished(2_000_250, "a", "finished"))]
    seconds = EventFile("-", io.StringIO(), False, Clock("s", 1.0, 1e-6, True))
    lines = seconds.listener("vllm")  # (no tag: one policy)
    lines.arrived(1_500_000, "a")
    lines.admitted(1_500_000, "a", 3, True, 16)
    lines.finished(2_000_250, "a", "finished")
    seconds.flush()
    assert seconds.handle.getvalue() == (
        '{"time":1.5,"event":"arrival","id":"a"}\n'
        '{"time":1.5,"event":"admitted","id":"a","reserved":3,"resumed":true,'
        '"cached_tokens":16}\n'
        '{"time":2.00025,"event":"finished","id":"a","status":"finished"}\n')
    ticks = EventFile("-", io.StringIO(), False)
    lines = ticks.listener("continuous")
    lines.arrived(4, "b")
    lines.finished(9, "b", "finished_length_capped")
    ticks.flush()
    assert ticks.handle.getvalue() == (
        '{"tick":4,"event":"arrival","id":"b"}\n'
        '{"tick":9,"event":"finished","id":"b","status":"finished_length_capped"}\n')


def test_a_request_s_lines_are_one_format_each_made_once_per_listener():
    """`request_formats`: a line listener's formats of a request's lines, made once,
    with the policy's tag; a `%` in the tag is written as it is (escaped in the
    format), in ticks and in seconds; and the records' own lines are the same."""
    import io

    from scheduler_sim.io.event_file import EventFile
    from scheduler_sim.records.clock import Clock
    from scheduler_sim.records.event_lines import request_formats
    from scheduler_sim.records.events import Admitted
    arrival, admission, finish, when = request_formats("p%s", None)
    assert arrival == '{"tick":%s,"event":"arrival","policy":"p%%s","id":%s}'
    assert admission == ('{"tick":%s,"event":"admitted","policy":"p%%s","id":%s,'
                         '"reserved":%s,"resumed":%s,"cached_tokens":%s}')
    assert finish == '{"tick":%s,"event":"finished","policy":"p%%s","id":%s,"status":%s}'
    assert when is str
    clock = Clock("s", 1.0, 1e-6, True)
    assert request_formats(None, clock)[0] == '{"time":%s,"event":"arrival","id":%s}'
    assert request_formats(None, clock)[3] == clock.text
    events = EventFile("-", io.StringIO(), True, clock)
    lines = events.listener("100%")
    lines.arrived(250, "r%d")
    lines.admitted(3_000_000, "r%d", 7, False, 0)
    lines.finished(3_000_010, "r%d", "finished")
    events.flush()
    assert events.handle.getvalue() == (
        '{"time":0.00025,"event":"arrival","policy":"100%","id":"r%d"}\n'
        '{"time":3,"event":"admitted","policy":"100%","id":"r%d","reserved":7,'
        '"resumed":false,"cached_tokens":0}\n'
        '{"time":3.00001,"event":"finished","policy":"100%","id":"r%d",'
        '"status":"finished"}\n')
    assert events.handle.getvalue().splitlines() == [
        record.to_json("100%", clock)
        for record in (Arrival(250, "r%d"), Admitted(3_000_000, "r%d", 7, False, 0),
                       Finished(3_000_010, "r%d", "finished"))]


def test_an_admission_is_handed_as_a_record_to_a_listener_that_takes_records():
    """`report_admitted`: a listener that is not a line listener gets the record."""
    from scheduler_sim.records.events import Admitted, report_admitted
    got = []
    report_admitted(got.append, 5, "a", 2, True, 16)
    assert got == [Admitted(5, "a", 2, True, 16)]
