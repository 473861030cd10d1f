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
  trace, expectations, report, importers,
  generator, outputs, commands, cli              files, text, exit codes
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
