"""Scheduling policies, one module each, and the registry that names them.

Adding a policy to the package is adding a module with a `Policy` subclass
and one line in `POLICIES` below. A policy outside the package is named
`module:Class` or `file.py:Class` and loaded by `plugins.py`.
"""
from __future__ import annotations

from ..records.spelling import did_you_mean
from .base import PADDING, Plan, Policy, QueueAndListPolicy, SchedulerView
from .continuous import ContinuousPolicy
from .dynamic import DynamicPolicy
from .plugins import (PluginError, is_plugin, load_plugin,  # noqa: F401 (re-exported)
                      plugin_file, spelling_problem)
from .serial import SerialPolicy
from .sglang import SglangPolicy
from .static import StaticPolicy
from .vllm import VllmPolicy

__all__ = ["PADDING", "Plan", "Policy", "QueueAndListPolicy", "SchedulerView", "POLICIES", "make_policy",
           "policy_class", "is_builtin", "is_builtin_name", "is_plugin", "PluginError",
           "spelling_problem", "plugin_file"]

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (SerialPolicy, ContinuousPolicy, VllmPolicy, SglangPolicy, StaticPolicy,
                DynamicPolicy)
}


def policy_class(name: str, base: str | None = None) -> type[Policy]:
    """The class a policy name stands for: a built-in, or a plugin (`module:Class`,
    `file.py:Class`, a relative file taken from the folder `base`). Raises ValueError
    (PluginError for plugins) saying why not, or PolicyError when a plugin's module
    raises while it is imported."""
    if is_plugin(name):
        return load_plugin(name, base)
    try:
        return POLICIES[name]
    except KeyError:
        known = ", ".join(POLICIES)
        raise ValueError(f"unknown policy {name!r}{did_you_mean(name, POLICIES)} (known: "
                         f"{known}, or MODULE:CLASS or FILE.py:CLASS for your own)") from None


def is_builtin(policy: Policy) -> bool:
    """True for an instance of one of the package's own policies (not a subclass)."""
    return type(policy) in _BUILTIN


def is_builtin_name(name: str) -> bool:
    """True for the name of one of the package's own policies."""
    return name in POLICIES


def make_policy(name: str, options, view) -> Policy:
    """Build the named policy (see `policy_class`; a relative plugin file is taken from
    `options.plugin_dir`)."""
    return policy_class(name, options.plugin_dir)(options, view)


_BUILTIN = frozenset(POLICIES.values())
