"""scheduler-sim: a discrete-tick simulator of the scheduler inside an LLM-serving engine.

It replays a JSONL trace of requests through admission, KV-block accounting,
batching, preemption and recompute, and reports every decision as an event
record and every run as a summary. Standard library only.

Layers, each importing only from those above it in this list:
  errors, options, states, events, workload      records and configuration
  request, allocator, prefix caches, queues,
  rotation, costmodel, models, gpus              state, accounting and cost
  policies/                                      decisions, no I/O
  engine, folding, summary                       clock, event order, lifecycle
  trace, expectations, junit, report, importers,
  generator, outputs, commands, cli, api         files, text, exit codes, the Python API

The names below (`load`, `replay`, `events`, `Policy`, ...) are the Python
API: see docs/api.md. Each is imported when it is first used (PEP 562), so
that `import scheduler_sim` loads nothing else, and the command line can set
up its signal handlers before the simulator loads.
"""
from __future__ import annotations

import importlib

# typing.TYPE_CHECKING without importing typing (type checkers know the name), so
# that nothing but this file runs before the command line sets itself up.
TYPE_CHECKING = False
__version__ = "0.1.0"

__all__ = ["__version__", "load", "parse", "build", "replay", "events", "check", "sweep",
           "search", "Replay", "Run", "Options", "Policy", "QueueAndListPolicy", "SchedulerView", "Plan",
           "Request", "POLICIES", "SimError", "TraceError", "UsageError", "InvariantError",
           "PolicyError"]

# Where each public name lives (a module of this package).
_HOMES = {
    **dict.fromkeys(("Replay", "Run", "build", "check", "events", "load", "parse", "replay",
                     "search", "sweep"), ".api"),
    **dict.fromkeys(("POLICIES", "Plan", "Policy", "QueueAndListPolicy", "SchedulerView"),
                    ".policies"),
    **dict.fromkeys(("InvariantError", "PolicyError", "SimError", "TraceError", "UsageError"),
                    ".records.errors"),
    "Options": ".records.options",
    "Request": ".requests.request",
}

if TYPE_CHECKING:  # for type checkers and editors; at run time `__getattr__` imports them
    from .api import Replay, Run, build, check, events, load, parse, replay, search, sweep
    from .policies import POLICIES, Plan, Policy, QueueAndListPolicy, SchedulerView
    from .records.errors import (InvariantError, PolicyError, SimError, TraceError,
                                 UsageError)
    from .records.options import Options
    from .requests.request import Request


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use and kept here after."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
