"""Policies written outside the package: `--policy module:Class` or `--policy file.py:Class`.

A plugin is a subclass of `policies.base.Policy`, named the way Python
names an attribute of a module: `mypackage.greedy:Greedy` imports the module
`mypackage.greedy` (it must be importable, e.g. installed or on PYTHONPATH);
`path/to/greedy.py:Greedy` loads that file as a module of its own. The
policy's name in every output is the text given, so two plugins never
collide with each other or with a built-in policy.

Loaded classes are kept (files by their absolute path), so a replay of
several policies or a sweep loads each file once.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from .base import Policy

__all__ = ["is_plugin", "load_plugin", "PluginError"]

_LOADED: dict[str, type[Policy]] = {}


class PluginError(ValueError):
    """A plugin could not be loaded; the message says why."""


def is_plugin(name: str) -> bool:
    """True for a `module:Class` or `file.py:Class` spelling."""
    return ":" in name


def load_plugin(spec: str) -> type[Policy]:
    """The Policy subclass `spec` names; PluginError when it cannot be had."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr or not attr.isidentifier():
        raise PluginError(f"a plugin policy is MODULE:CLASS or FILE.py:CLASS, got {spec!r}")
    is_file = where.endswith(".py") or os.sep in where or "/" in where
    # A file is known by its absolute path: the same spelling from another folder
    # is another file.
    key = f"{os.path.abspath(where)}:{attr}" if is_file else spec
    cls = _LOADED.get(key)
    if cls is not None:
        return cls
    try:
        if is_file:
            module = _load_file(where)
        else:
            module = importlib.import_module(where)
    except PluginError:
        raise
    except Exception as exc:  # the user's module failed while importing
        raise PluginError(f"cannot load policy {spec!r}: {type(exc).__name__}: {exc}") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise PluginError(f"cannot load policy {spec!r}: {where} has no {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise PluginError(f"cannot load policy {spec!r}: {attr} is not a subclass of "
                          "scheduler_sim.Policy")
    _LOADED[key] = cls
    return cls


def _load_file(path: str):
    if not os.path.isfile(path):
        raise PluginError(f"cannot load policy from {path!r}: no such file")
    name = "scheduler_sim_plugin_" + "".join(
        c if c.isalnum() else "_" for c in os.path.abspath(path))
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
