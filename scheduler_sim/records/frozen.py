"""Frozen record classes made cheaply: what the event records (`events.py`) share.

A record class is a dataclass for its fields, slots and `__match_args__`
(`record_class`), but `dataclasses` writes none of its methods: the base
`Frozen` has the methods a frozen dataclass would have, written once for every
record (field assignment and deletion refused, equality, hash, repr, pickling),
and `make_inits` compiles every record's `__init__` in one `exec`.

Speed (the start-up of every replay, events or not): as frozen dataclasses,
the 25 event records had six methods each compiled by its own `exec`, 21-25 ms
of the 43-51 ms a plain replay spent making dataclasses (benchmarks/README.md,
"eleventh steps", helper az7); importing `events.py` now takes about half the
time (benchmarks/README.md, "twelfth steps", helper ev8).
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any, Iterable

__all__ = ["Frozen", "record_class", "make_inits", "field_names"]

# A record class: fields and slots from `dataclasses`, its methods from `Frozen`.
record_class = dataclasses.dataclass(slots=True, init=False, repr=False, eq=False)

_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(cls: type) -> tuple[str, ...]:
    """The names of a record class's fields, in order, computed once per class."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


class Frozen:
    """Base of frozen records: assigning or deleting a field raises
    `dataclasses.FrozenInstanceError`; two records are equal when of the same
    class with equal fields, hashed by their fields, shown as a dataclass is,
    and pickled and copied field by field."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple:
        """The record's field values, in order."""
        return tuple([getattr(self, name) for name in field_names(type(self))])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}"
                           for name in field_names(type(self)))
        return f"{type(self).__qualname__}({values})"

    def __getstate__(self) -> list:
        return list(self._values())

    def __setstate__(self, state: list) -> None:
        for name, value in zip(field_names(type(self)), state):
            object.__setattr__(self, name, value)


def make_inits(classes: Iterable[type]) -> None:
    """Give each of `classes` (made by `record_class`) its `__init__`, all compiled
    by one `exec`: the fields in order as parameters, with their defaults, each
    set through its slot's own descriptor (the records are frozen: their
    `__setattr__` refuses), as the `__init__` of a frozen dataclass does with
    `object.__setattr__`. Speed: a slot's `__set__` skips the attribute look-up
    by name that `object.__setattr__` makes: about 0.7x the time of a
    three-field record (an arrival), of which the Azure trace with `--events`
    builds 58,000 (benchmarks/README.md, "thirteenth steps", helper ev9)."""
    classes = list(classes)
    source = []
    scope: dict[str, Any] = {}
    for cls in classes:
        params = ["self"]
        body = []
        for f in dataclasses.fields(cls):
            name = f"_{cls.__name__}_{f.name}"
            if f.default is dataclasses.MISSING:
                params.append(f.name)
            else:
                scope[name] = f.default
                params.append(f"{f.name}={name}")
            slot = getattr(cls, f.name)  # (the slot's member descriptor, from its class)
            if not isinstance(slot, types.MemberDescriptorType):
                raise TypeError(f"{cls.__name__}.{f.name} is not a slot")
            scope[f"{name}_set"] = slot.__set__
            body.append(f"    {name}_set(self, {f.name})\n")
        source.append(f"def _{cls.__name__}({', '.join(params)}):\n{''.join(body) or '    pass'}\n")
    exec("".join(source), scope)
    for cls in classes:
        init = scope[f"_{cls.__name__}"]
        init.__name__, init.__qualname__ = "__init__", f"{cls.__qualname__}.__init__"
        cls.__init__ = init
