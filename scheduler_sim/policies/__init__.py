"""Scheduling policies, one module each, and the registry that names them.

Adding a policy is adding a module with a `Policy` subclass and one line in
`POLICIES` below.
"""
from __future__ import annotations

from .base import PADDING, Plan, Policy, SchedulerView
from .continuous import ContinuousPolicy
from .dynamic import DynamicPolicy
from .serial import SerialPolicy
from .sglang import SglangPolicy
from .static import StaticPolicy
from .vllm import VllmPolicy

__all__ = ["PADDING", "Plan", "Policy", "SchedulerView", "POLICIES", "make_policy"]

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (SerialPolicy, ContinuousPolicy, VllmPolicy, SglangPolicy, StaticPolicy,
                DynamicPolicy)
}


def make_policy(name: str, options, view) -> Policy:
    """Build the named policy; raise ValueError naming the known policies."""
    try:
        cls = POLICIES[name]
    except KeyError:
        known = ", ".join(POLICIES)
        raise ValueError(f"unknown policy {name!r} (known: {known})") from None
    return cls(options, view)
