"""Record classes made cheaply: dataclasses whose methods `dataclasses` does not write.

A record class is a dataclass for its fields, `__match_args__` and (under
`record_class`) slots, but `dataclasses` writes none of its methods: the bases
have the methods a dataclass would have, written once for every record, and
`make_inits` compiles the records' `__init__`s, several in one `exec`, from a
short source. `Record` is the base of a mutable record (equality, repr, no
hash, as `@dataclass`), `Frozen` of a frozen one (also a hash, field assignment
and deletion refused, pickling and copying field by field, as
`@dataclass(frozen=True)`). `record` makes a class (without slots) a record
class in one step; the event records (`events.py`) use `record_class` and
`make_inits`, to compile their 25 `__init__`s in one `exec`, and so do a
trace's request specs and actions (`workload.py`).

What a record's methods do, as a dataclass's: `__eq__` compares the fields
whose `compare` is true, of two records of the same class; `__hash__` hashes
the tuple of those whose `hash` is true (or, left None, `compare`); `__repr__`
shows those whose `repr` is true; `__init__` takes the fields whose `init` is
true, in order, positionally or by keyword, with their defaults and default
factories, sets every field (when frozen, by `object.__setattr__`, or by
the slot's own descriptor for a class with slots) and calls
`__post_init__` when the class has one. `dataclasses.fields`, `replace` and
`asdict` work as on a dataclass (a record has no `InitVar` and no keyword-only
field: `make_inits` refuses the latter). What differs: `__dataclass_params__` says
`init`, `repr` and `eq` false and not frozen, the `__init__` carries no
annotations, and a repr that reaches its own record again recurses (a
dataclass's prints `...`): no record here holds itself.

Speed (the start-up of every process): `dataclasses` writes each method's
source and compiles it by an `exec` of its own, with a type and a default
named per field (18,300 characters for the 60 fields of `Options` alone);
parsing and compiling those sources was about 0.1 billion instructions of a
six-request replay's 0.46 billion (callgrind; benchmarks/README.md,
"thirteenth steps: a process's fixed cost", helper st9; and "twelfth steps",
helper ev8, for the event records).
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any, Iterable

__all__ = ["Record", "Frozen", "record", "record_class", "make_inits", "field_names"]

# A record class with slots: fields and slots from `dataclasses`, its methods from
# `Record` or `Frozen`, its `__init__` from `make_inits`.
record_class = dataclasses.dataclass(slots=True, init=False, repr=False, eq=False)

# Per class: the names of (every field, the compared, the hashed, the shown).
_LAYOUTS: dict[type, tuple[tuple[str, ...], ...]] = {}


def _layout(cls: type) -> tuple[tuple[str, ...], ...]:
    """The names of `cls`'s fields, its compared, hashed and shown ones, computed once."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        fields = dataclasses.fields(cls)
        layout = _LAYOUTS[cls] = (
            tuple(f.name for f in fields),
            tuple(f.name for f in fields if f.compare),
            tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)),
            tuple(f.name for f in fields if f.repr))
    return layout


def field_names(cls: type) -> tuple[str, ...]:
    """The names of a record class's fields, in order, computed once per class."""
    return _layout(cls)[0]


class Record:
    """Base of mutable records: two records are equal when of the same class with
    equal compared fields; unhashable; shown as a dataclass is."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  (as a dataclass with eq, not frozen)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            names = _layout(self.__class__)[1]
            return (tuple([getattr(self, name) for name in names])
                    == tuple([getattr(other, name) for name in names]))
        return NotImplemented

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}"
                           for name in _layout(self.__class__)[3])
        return f"{self.__class__.__qualname__}({values})"


class Frozen(Record):
    """Base of frozen records: assigning or deleting a field raises
    `dataclasses.FrozenInstanceError`; hashed by the hashed fields' tuple; pickled and
    copied field by field."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(tuple([getattr(self, name) for name in _layout(self.__class__)[2]]))

    def __getstate__(self) -> list:
        return [getattr(self, name) for name in field_names(type(self))]

    def __setstate__(self, state: list) -> None:
        for name, value in zip(field_names(type(self)), state):
            object.__setattr__(self, name, value)


class _Factory:
    """The default of a field made by a factory: the factory is called when the
    argument is left at it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def record(cls: type | None = None, *, compact: bool = True) -> Any:
    """Make `cls` (a subclass of `Record` or `Frozen`, with a docstring) a record class
    without slots: its fields by `dataclasses`, its `__init__` by `make_inits`, short
    (`compact`, for a class made a few times a process) unless asked otherwise.
    `@record` and `@record(compact=False)` both decorate."""
    if cls is None:
        return lambda cls: record(cls, compact=compact)
    if not issubclass(cls, Record) or cls.__doc__ is None:
        raise TypeError(f"{cls.__qualname__}: a record class derives from Record or "
                        "Frozen and has a docstring")
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    make_inits([cls], compact=compact)
    return cls


def _steps(cls: type) -> tuple[list[str], tuple, list[tuple]]:
    """What `cls`'s `__init__` takes and does: its parameters (the fields whose `init`
    is true, in order), their defaults, and one step per field it sets, in order:
    (name, taken as an argument, its factory or None, its default)."""
    slotted = "__slots__" in cls.__dict__
    params, defaults, steps = [], [], []
    for f in dataclasses.fields(cls):
        if f.kw_only:
            raise TypeError(f"{cls.__qualname__}: a record class has no kw_only field")
        if f.name in ("self", "locals") or f.name.startswith("_"):
            raise TypeError(f"{cls.__qualname__}: a record's field is not named "
                            f"{f.name!r} (its __init__ uses the name)")
        factory = None if f.default_factory is dataclasses.MISSING else f.default_factory
        if f.init:
            default = _FACTORY if factory is not None else f.default
            if default is not dataclasses.MISSING:
                defaults.append(default)
            elif defaults:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
            params.append(f.name)
        elif factory is None and not (slotted and f.default is not dataclasses.MISSING):
            continue  # not set by __init__: the class attribute holds its default
        steps.append((f.name, f.init, factory, f.default))
    return params, tuple(defaults), steps


def _fill(self: Any, plan: tuple, values: dict[str, Any]) -> None:
    """Set `self`'s fields as a compact `__init__`'s `plan` says ((frozen, steps), see
    `_steps`), from its arguments (`values`: its locals)."""
    frozen, steps = plan
    for name, given, factory, default in steps:
        if given:
            value = values[name]
            if factory is not None and value is _FACTORY:
                value = factory()
        else:
            value = factory() if factory is not None else default
        if frozen:
            object.__setattr__(self, name, value)
        else:
            setattr(self, name, value)


def _init_source(cls: type, scope: dict[str, Any], compact: bool) -> tuple[str, tuple]:
    """The source of `cls`'s `__init__`, named `_` + the class's name, and its
    parameters' defaults; what its body reads is put in `scope`."""
    frozen = issubclass(cls, Frozen)
    slotted = "__slots__" in cls.__dict__
    params, defaults, steps = _steps(cls)
    tag = f"_{cls.__name__}"
    if compact:
        scope[f"{tag}_plan"] = (frozen, tuple(steps))
        body = [f"    _fill(self, {tag}_plan, locals())\n"]
    else:
        body = []
        for name, given, factory, default in steps:
            if factory is not None:
                scope[f"{tag}_{name}"] = factory
                value = (f"{tag}_{name}() if {name} is _FACTORY else {name}" if given
                         else f"{tag}_{name}()")
            elif given:
                value = name
            else:
                scope[f"{tag}_{name}"] = default
                value = f"{tag}_{name}"
            if frozen and slotted:
                # Set through the slot's own descriptor: a slot's `__set__` skips the
                # look-up by name that `object.__setattr__` makes, about 0.7x the time
                # of a three-field event record (an arrival), of which the Azure trace
                # with `--events` builds 58,000 (benchmarks/README.md, "thirteenth
                # steps", helper ev9).
                slot = getattr(cls, name)  # (the slot's member descriptor)
                if not isinstance(slot, types.MemberDescriptorType):
                    raise TypeError(f"{cls.__name__}.{name} is not a slot")
                # (Named `{tag}__set_` + the field: fields never start with `_`,
                # so no field's factory or default, `{tag}_` + its name, can be it.)
                scope[f"{tag}__set_{name}"] = slot.__set__
                body.append(f"    {tag}__set_{name}(self, {value})\n")
            else:
                body.append(f"    _set(self, {name!r}, {value})\n" if frozen
                            else f"    self.{name} = {value}\n")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()\n")
    source = f"def {tag}({', '.join(['self', *params])}):\n{''.join(body) or '    pass'}\n"
    return source, defaults


def make_inits(classes: Iterable[type], compact: bool = False) -> None:
    """Give each of `classes` (record classes: `record_class`, or dataclasses made with
    `init=False, repr=False, eq=False`, deriving from `Record` or `Frozen`) its
    `__init__`, all compiled by one `exec`: the fields in order as parameters, with
    their defaults (kept as the function's `__defaults__`, not in its source), each
    set by `object.__setattr__` when frozen, as a dataclass's `__init__` does (by
    the slot's own descriptor when the class has slots and the body is not compact).

    The body sets each field by a statement of its own; `compact`, by one call that
    reads the arguments from `locals()` (`_fill`). Speed: a statement a field is
    about 4.5 us of compiling, and `_fill` about 0.45 us more a field at every call
    (timeit, `Options`: 60 fields); so the first pays for a class made more than
    about ten times a process (the event records, made by the thousand, and
    `OptionSpec`, 60 times), the second for the others. The 12 `__init__`s a replay
    made this way: 26.6 million instructions of compiling, 10.5 million with every
    body compact (callgrind, benchmarks/README.md, "thirteenth steps", helper st9)."""
    classes = list(classes)
    scope: dict[str, Any] = {"_set": object.__setattr__, "_FACTORY": _FACTORY, "_fill": _fill}
    sources, defaults = [], []
    for cls in classes:
        source, given = _init_source(cls, scope, compact)
        sources.append(source)
        defaults.append(given)
    exec("".join(sources), scope)
    for cls, given in zip(classes, defaults):
        init = scope[f"_{cls.__name__}"]
        init.__name__, init.__qualname__ = "__init__", f"{cls.__qualname__}.__init__"
        init.__module__, init.__defaults__ = cls.__module__, given or None
        cls.__init__ = init
