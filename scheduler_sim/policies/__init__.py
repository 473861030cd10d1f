"""Scheduling policies, one module each, and the registry that names them.

Adding a policy to the package is adding a module with a `Policy` subclass
and one line in `POLICIES` below. A policy outside the package is named
`module:Class` or `file.py:Class` and loaded by `plugins.py`.
"""
from __future__ import annotations

from .base import PADDING, Plan, Policy, QueueAndListPolicy, SchedulerView
from .continuous import ContinuousPolicy
from .dynamic import DynamicPolicy
from .plugins import PluginError, is_plugin, load_plugin  # noqa: F401 (re-exported)
from .serial import SerialPolicy
from .sglang import SglangPolicy
from .static import StaticPolicy
from .vllm import VllmPolicy

__all__ = ["PADDING", "Plan", "Policy", "QueueAndListPolicy", "SchedulerView", "POLICIES", "make_policy",
           "policy_class", "is_builtin", "is_plugin", "PluginError"]

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (SerialPolicy, ContinuousPolicy, VllmPolicy, SglangPolicy, StaticPolicy,
                DynamicPolicy)
}


def policy_class(name: str) -> type[Policy]:
    """The class a policy name stands for: a built-in, or a plugin (`module:Class`,
    `file.py:Class`). Raises ValueError (PluginError for plugins) saying why not."""
    if is_plugin(name):
        return load_plugin(name)
    try:
        return POLICIES[name]
    except KeyError:
        known = ", ".join(POLICIES)
        raise ValueError(f"unknown policy {name!r} (known: {known}, or MODULE:CLASS or "
                         "FILE.py:CLASS for your own)") from None


def is_builtin(policy: Policy) -> bool:
    """True for an instance of one of the package's own policies (not a subclass)."""
    return type(policy) in _BUILTIN


def make_policy(name: str, options, view) -> Policy:
    """Build the named policy (see `policy_class`)."""
    return policy_class(name)(options, view)


_BUILTIN = frozenset(POLICIES.values())
