"""records/frozen.py: record classes whose methods come from `Frozen` and whose
`__init__` `make_inits` compiles, on two tiny classes."""
from __future__ import annotations

import dataclasses
import pickle

import pytest

from scheduler_sim.records.frozen import Frozen, field_names, make_inits, record_class


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
