"""scheduler-sim: a discrete-tick simulator of the scheduler inside an LLM-serving engine.

It replays a JSONL trace of requests through admission, KV-block accounting,
batching, preemption and recompute, and reports every decision as an event
record and every run as a summary. Standard library only.

Layers, each importing only from those above it in this list:
  errors, options, states, events, workload      records and configuration
  request, allocator, prefix_cache, queues,
  rotation, costmodel                            state, accounting and cost
  policies/                                      decisions, no I/O
  engine, folding, summary                       clock, event order, lifecycle
  trace, expectations, junit, report, importers,
  generator, outputs, commands, cli, api         files, text, exit codes, the Python API

The names below (`load`, `replay`, `events`, `Policy`, ...) are the Python
API: see docs/api.md.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .api import Replay, Run, build, check, events, load, parse, replay, sweep  # noqa: E402
from .policies import POLICIES, Plan, Policy, QueueAndListPolicy, SchedulerView  # noqa: E402
from .records.errors import InvariantError, PolicyError, SimError, TraceError, UsageError  # noqa: E402
from .records.options import Options  # noqa: E402
from .requests.request import Request  # noqa: E402

__all__ = ["__version__", "load", "parse", "build", "replay", "events", "check", "sweep",
           "Replay", "Run", "Options", "Policy", "QueueAndListPolicy", "SchedulerView", "Plan",
           "Request", "POLICIES", "SimError", "TraceError", "UsageError", "InvariantError",
           "PolicyError"]
