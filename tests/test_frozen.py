"""records/frozen.py: record classes whose methods come from `Frozen` and whose
`__init__` `make_inits` compiles, on two tiny classes."""
from __future__ import annotations

import dataclasses
import pickle

import pytest

from scheduler_sim.records.frozen import (Frozen, Record, field_names, make_inits, record,
                                          record_class)


@record_class
class Point(Frozen):
    x: int
    y: int
    label: str | None = None


@record_class
class Empty(Frozen):
    pass


make_inits([Point, Empty])


def test_init_takes_the_fields_in_order_with_their_defaults():
    """Point(1, 2) has x 1, y 2 and label None; keywords work; a missing field is a
    TypeError naming the class's __init__."""
    p = Point(1, 2)
    assert (p.x, p.y, p.label) == (1, 2, None)
    assert Point(y=4, x=3, label="a").label == "a"
    assert field_names(Point) == ("x", "y", "label")
    assert Point.__init__.__qualname__ == "Point.__init__"
    with pytest.raises(TypeError, match=r"Point.__init__\(\) missing 1 required"):
        Point(1)
    assert repr(Empty()) == "Empty()" and Empty() == Empty()


def test_methods_are_those_of_a_frozen_dataclass():
    """Equal by class and fields, hashed as the tuple of fields, a dataclass's repr,
    assignment and deletion refused, pickled and replaced field by field."""
    p = Point(1, 2, "a")
    assert p == Point(1, 2, "a") and p != Point(1, 2) and p != (1, 2, "a")
    assert hash(p) == hash((1, 2, "a"))
    assert repr(p) == "Point(x=1, y=2, label='a')"
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        p.x = 5
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'y'"):
        del p.y
    assert pickle.loads(pickle.dumps(p)) == p
    assert dataclasses.replace(p, y=7) == Point(1, 7, "a")
    assert not hasattr(p, "__dict__")  # slots


def test_the_event_base_is_a_record_too():
    """`Event(3)` is a record of tick 3, as the frozen dataclass was (equal to another,
    assignment refused), and a record class of one's own derives from it under
    `record_class`: Ping(4, "a") has tick 4 and id "a"."""
    from scheduler_sim.records.events import Event

    assert Event(3) == Event(tick=3) and repr(Event(3)) == "Event(tick=3)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        Event(3).tick = 4

    @record_class
    class Ping(Event):
        id: str

    make_inits([Ping])
    assert (Ping(4, "a").tick, Ping(4, "a").id) == (4, "a")


# --- `record`: classes without slots, as @dataclass and @dataclass(frozen=True) --------

def _box_class(name: str, compact: bool) -> type:
    """A frozen record of `name`: `notes` neither compared nor shown, `size` set after
    (its __post_init__); its __init__ compact or a statement a field."""
    def post_init(self) -> None:
        object.__setattr__(self, "size", self.width * 10)

    return record(type(name, (Frozen,), {
        "__doc__": "A box.", "__post_init__": post_init,
        "__annotations__": {"name": "str", "width": "int", "notes": "dict", "size": "int"},
        "width": 2, "notes": dataclasses.field(default_factory=dict, compare=False, repr=False),
        "size": dataclasses.field(default=0, init=False)}), compact=compact)


Box = _box_class("Box", compact=True)
Crate = _box_class("Crate", compact=False)


@record
class Tally(Record):
    """A mutable record."""

    count: int
    seen: list = dataclasses.field(default_factory=list)


def test_a_frozen_record_is_a_frozen_dataclass():
    """Box("a") has width 2, a new empty notes dict, size 20 (its __post_init__); equal
    and hashed by name, width and size, notes left out; shown without notes."""
    box = Box("a")
    assert (box.name, box.width, box.notes, box.size) == ("a", 2, {}, 20)
    assert box.notes is not Box("a").notes
    assert Box("a", 3, {"x": 1}) == Box("a", 3) and Box("a", 3) != Box("a", 4)
    assert hash(Box("a", 3, {"x": 1})) == hash(("a", 3, 30))
    assert repr(Box("a", 3)) == "Box(name='a', width=3, size=30)"
    assert dataclasses.replace(box, width=5).size == 50
    assert dataclasses.asdict(Box("b", 1)) == {"name": "b", "width": 1, "notes": {}, "size": 10}
    assert [f.name for f in dataclasses.fields(Box)] == ["name", "width", "notes", "size"]
    assert Box.__match_args__ == ("name", "width", "notes")
    assert Box.__init__.__defaults__[0] == 2 and repr(Box.__init__.__defaults__[1]) == "<factory>"
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'name'"):
        box.name = "b"
    assert pickle.loads(pickle.dumps(Box("c", 4, {"k": 2}))).notes == {"k": 2}
    with pytest.raises(TypeError, match=r"Box.__init__\(\) got an unexpected keyword argument 'size'"):
        Box("a", size=3)


def test_a_mutable_record_is_a_dataclass():
    """Tally(1) has count 1 and a new empty list; fields assignable; equal by fields;
    unhashable, as a dataclass with eq."""
    tally = Tally(1)
    tally.count += 1
    tally.seen.append("x")
    assert tally == Tally(2, ["x"]) and tally != Tally(2)
    assert repr(tally) == "Tally(count=2, seen=['x'])"
    assert Tally.__hash__ is None
    with pytest.raises(TypeError, match="unhashable"):
        hash(tally)


def test_record_refuses_what_it_does_not_make():
    """A class with no Record base or no docstring, a field without a default after
    one with, and a keyword-only field are refused when the class is made."""
    with pytest.raises(TypeError, match="derives from Record or Frozen"):
        record(type("Plain", (), {"__doc__": "plain"}))
    with pytest.raises(TypeError, match="has a docstring"):
        record(type("Bare", (Record,), {"__annotations__": {"a": "int"}}))
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        record(type("Late", (Record,), {"__doc__": "x", "__annotations__": {"a": "int", "b": "int"},
                                        "a": 1}))
    with pytest.raises(TypeError, match="no kw_only field"):
        record(type("Kw", (Record,), {"__doc__": "x", "__annotations__": {"a": "int"},
                                      "a": dataclasses.field(kw_only=True)}))


def test_options_keep_their_dataclass_methods():
    """Options made by `record`: its defaults, prefill_chunk from token_budget, equal
    and hashed without `origin`, a repr without it, `replace` and `fields` as before."""
    from scheduler_sim.records.options import Options

    options = Options(token_budget=64)
    assert options.prefill_chunk == 64 and options.hash_block_size == 16
    assert options == Options.resolve({"token_budget": 64}) and options != Options()
    assert hash(options) == hash(Options.resolve({"token_budget": 64}))
    assert "origin" not in repr(options) and repr(options).startswith("Options(block_size=16, ")
    assert dataclasses.replace(options, block_size=4).block_size == 4
    assert len(dataclasses.fields(Options)) == 60
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.block_size = 4


def test_both_forms_of_init_make_the_same_record():
    """Crate (each field a statement) and Box (one `_fill` call) take the same
    arguments and set the same fields: ("a"), ("a", 3, {"x": 1}), (name="b", width=0)."""
    for args, kwargs in ((("a",), {}), (("a", 3, {"x": 1}), {}), ((), {"name": "b", "width": 0})):
        box, crate = Box(*args, **kwargs), Crate(*args, **kwargs)
        assert vars(box) == vars(crate)
    assert "_fill" in Box.__init__.__code__.co_names
    assert "_fill" not in Crate.__init__.__code__.co_names
    with pytest.raises(TypeError, match=r"Crate.__init__\(\) missing 1 required"):
        Crate()


def test_record_inits_set_each_field_through_its_slot():
    """`make_inits` sets each field through its slot's own descriptor: a record of
    three fields (one defaulted) holds what it was given, keyword or not, and its
    class's `__init__` names no `object.__setattr__`."""
    from scheduler_sim.records.events import Arrival
    a = Arrival(3, "x")
    b = Arrival(tick=4, id="y", client_wait=2)
    assert (a.tick, a.id, a.client_wait) == (3, "x", None)
    assert (b.tick, b.id, b.client_wait) == (4, "y", 2)
    assert "_set" not in Arrival.__init__.__code__.co_names


def test_a_field_named_after_another_fields_setter_keeps_its_own_value():
    """Fields `x` and `x_set` (not set by __init__, default 7) of a frozen record with
    slots: K(1) has x 1 and x_set 7 (the setter of `x` and the default of `x_set`
    once shared a name in the compiled __init__)."""
    from scheduler_sim.records.events import Event

    @record_class
    class K(Event):
        x: int
        x_set: int = dataclasses.field(default=7, init=False)

    make_inits([K])
    k = K(3, 1)
    assert (k.tick, k.x, k.x_set) == (3, 1, 7)
