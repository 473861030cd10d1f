"""Policies written outside the package: `--policy module:Class` or `--policy file.py:Class`.

A plugin is a subclass of `policies.base.Policy`, named the way Python
names an attribute of a module: `mypackage.greedy:Greedy` imports the module
`mypackage.greedy` (it must be importable, e.g. installed or on PYTHONPATH);
`path/to/greedy.py:Greedy` loads that file as a module of its own, a
relative path taken from the folder `base` (the working directory when
none is given; the trace's folder for a plugin its config names). The
policy's name in every output is the text given, so two plugins never
collide with each other or with a built-in policy.

A plugin is code: nothing here runs until `load_plugin` is called, and
checking a spelling (`spelling_problem`) imports nothing. Who may call
`load_plugin` for a name read from a file is decided one layer up (a trace
is data; see `io/trace.py`, `plugins_from_trace`).

When loading fails, the fault is told apart: a name that leads nowhere (no
such file, module or class, or a class that is not a Policy) is the user's
spelling, a `PluginError` (exit status 2); a module whose own code raises
while it is imported, anything at all, SyntaxError and SystemExit included,
is the plugin's, a `PolicyError` naming the policy, the exception and the
plugin's file and line (exit status 3). `describe`, `where` and
`raised_outside` word and place such failures for the engine too.

Loaded classes are kept (files by their absolute path), so a replay of
several policies or a sweep loads each file once.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from ..records.errors import PolicyError
from ..records.interrupts import from_signal
from .base import Policy

__all__ = ["is_plugin", "load_plugin", "spelling_problem", "PluginError", "describe",
           "where", "raised_outside"]

_LOADED: dict[str, type[Policy]] = {}
# The package's own folder: frames below it are the simulator's, others a plugin's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# A plugin's exception text is shown up to this many characters.
MESSAGE_LIMIT = 500


class PluginError(ValueError):
    """A plugin could not be found by its name; the message says why."""


def is_plugin(name: str) -> bool:
    """True for a `module:Class` or `file.py:Class` spelling."""
    return ":" in name


def spelling_problem(spec: str) -> str | None:
    """Why `spec` is no plugin spelling (None when it is one); imports nothing."""
    where_, _, attr = spec.rpartition(":")
    if not where_ or not attr or not attr.isidentifier():
        return f"a plugin policy is MODULE:CLASS or FILE.py:CLASS, got {spec!r}"
    return None


def _is_file(where_: str) -> bool:
    return where_.endswith(".py") or os.sep in where_ or "/" in where_


def plugin_file(spec: str, base: str | None = None) -> str | None:
    """The absolute path of the file `spec` names (`FILE.py:CLASS`), from `base`; None
    for a module spelling."""
    where_ = spec.rpartition(":")[0]
    if not _is_file(where_):
        return None
    return os.path.abspath(os.path.join(base or os.getcwd(), where_))


def load_plugin(spec: str, base: str | None = None) -> type[Policy]:
    """The Policy subclass `spec` names, a relative file taken from `base`. PluginError
    when the name leads nowhere; PolicyError when the plugin's module raises."""
    problem = spelling_problem(spec)
    if problem:
        raise PluginError(problem)
    where_, _, attr = spec.rpartition(":")
    path = plugin_file(spec, base)
    # A file is known by its absolute path: the same spelling from another folder
    # is another file.
    key = f"{path}:{attr}" if path is not None else spec
    cls = _LOADED.get(key)
    if cls is not None:
        return cls
    try:
        module = _load_file(path) if path is not None else _import(where_, attr, base)
    except (PluginError, PolicyError):
        raise
    except BaseException as exc:  # noqa: B036 (whatever the module's code raised)
        if from_signal(exc):
            raise
        name, text = describe(exc)
        raise PolicyError(f"policy {spec!r} raised {name} while its module was imported"
                          f"{': ' + text if text else ''}{where(exc)}") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise PluginError(f"cannot load policy {spec!r}: {where_} has no {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise PluginError(f"cannot load policy {spec!r}: {attr} is not a subclass of "
                          "scheduler_sim.Policy")
    _LOADED[key] = cls
    return cls


def _import(name: str, attr: str, base: str | None):
    """Import module `name`; a module that does not exist is the spelling's fault (and
    a file `name`.py in `base`, else the working folder, is named: the user most
    likely meant it), a module that fails to import something of its own is the
    plugin's."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if name == missing or name.startswith(missing + "."):
            file = name.replace(".", "/") + ".py"
            hint = (f"; there is a file {file}: did you mean {file + ':' + attr!r}?"
                    if os.path.isfile(os.path.join(base or os.getcwd(), file)) else
                    "; a file of your own is named FILE.py:CLASS")
            raise PluginError(f"cannot load policy from module {name!r}: no such module "
                              f"(is it installed, or on PYTHONPATH?){hint}") from None
        raise


def _load_file(path: str):
    if not os.path.isfile(path):
        raise PluginError(f"cannot load policy from {path!r}: no such file")
    name = "scheduler_sim_plugin_" + "".join(c if c.isalnum() else "_" for c in path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot load policy from {path!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


# --- telling a plugin's failures apart -------------------------------------------------

def _frames(exc: BaseException) -> list:
    # Imported here, when a plugin failed: traceback (and textwrap and five regular
    # expressions behind it) is about 1 ms of every process's start-up otherwise
    # (-X importtime; benchmarks/README.md, "thirteenth steps", helper st9).
    import traceback
    try:
        return traceback.extract_tb(exc.__traceback__)
    except Exception:  # a traceback that cannot be read (a broken loader, say)
        return []


def raised_outside(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc`'s traceback is outside the package: a
    plugin's code raised it (C code it called counts as the caller's)."""
    frames = _frames(exc)
    return bool(frames) and not frames[-1].filename.startswith(_PACKAGE)


def where(exc: BaseException) -> str:
    """` (file.py:12 in schedule)`: the last frame of the traceback outside the
    package, or `''`; a SyntaxError names the line it found."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f" ({exc.filename}:{exc.lineno})"
    frames = [f for f in _frames(exc) if not f.filename.startswith(_PACKAGE)]
    if not frames:
        return ""
    frame = frames[-1]
    return f" ({frame.filename}:{frame.lineno} in {frame.name})"


def describe(exc: BaseException) -> tuple[str, str]:
    """(`ValueError`, its text), whatever the exception: a type whose name or an
    exception whose `str()` raises is still described, and a long text is cut."""
    try:
        name = type(exc).__name__
        if not isinstance(name, str):
            raise TypeError(name)
    except BaseException:  # noqa: B036 (a metaclass can make anything raise)
        name = "an exception"
    try:
        # A SyntaxError's text repeats the file and line `where` gives.
        text = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
        if not isinstance(text, str):
            raise TypeError(text)
    except BaseException as inner:  # noqa: B036
        text = f"(its str() raised {type(inner).__name__})"
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT] + f"... ({len(text):,} characters)"
    return name, text
