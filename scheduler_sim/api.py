"""The Python API: load or build a trace, replay it, read summaries, requests and events.

For notebooks and scripts; the command line is built on the same pieces.

    import scheduler_sim as sim

    trace = sim.load("traces/quickstart.jsonl")
    result = sim.replay(trace, policies=["serial", "continuous"], num_blocks=16)
    for run in result.runs:
        print(run.policy, run.summary["ttft_p50"], run.requests[0]["ttft"])
    fleet = sim.replay(trace, "vllm", replicas=4, router="least-loaded")
    print(fleet.runs[0].replicas[0]["requests"])
    for event in sim.events(trace, "continuous"):
        ...
    rows = sim.sweep(trace, {"num_blocks": [8, 16]}, policies=["vllm", "sglang"])
    points = sim.search(trace, {"tp": [1, 2]}, policies="vllm", slo="ttft=2")

Options are keyword arguments with the names of the trace's config record
(`block_size=4`, `cost_model="llama-3-8b/h100-sxm"`); like command-line
flags they override the trace's config. Bad input raises the same errors,
with the same messages, as the command line prints: `TraceError` (its
`problems` are the `file:line: ...` lines), `UsageError`, and for a broken
rule `InvariantError` or, from a policy of your own, `PolicyError` (for
anything such a policy raises, SystemExit and KeyboardInterrupt included).

A trace is data: a plugin policy that only the trace's config names
(`"policy": "my_policy.py:Mine"`) is refused with a UsageError unless the
call passes `allow_trace_plugins=True` (its file is then taken from the
trace's folder); a policy named in `policies=` is the caller's choice.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
from concurrent.futures import Executor
from typing import Any, Iterator

from .engine.core import Engine
from .engine.summary import request_record
from .fleet import make_fleet
from .gpu.kv_pool import PoolSizing, fit_pool
from .gpu.run_cost import clock_for
from .io.expectations import CheckResult, check_trace
from .io.sweep import build_grid, check_axis, json_value_of, with_policies
from .io.search_runs import (check_bounds, check_unsearched, fleet_gpus, point_grid,
                              run_points)
from .io.sweep_runs import run_grid
from .io.trace import Trace, parse_trace, read_trace
from .io.trace_config import allow_trace_plugins, resolve_options
from .records import interrupts
from .records.clock import Clock
from .records.options import Options

_HOW = "pass allow_trace_plugins=True (or name it in policies=)"

__all__ = ["load", "parse", "build", "replay", "events", "check", "sweep", "search", "Replay",
           "Run", "resolve"]


def load(path: str) -> Trace:
    """Read and validate a trace file (`-` is standard input)."""
    return read_trace(path)


def parse(data: str | bytes, name: str = "<trace>") -> Trace:
    """Validate a trace given as JSONL text; `name` is what messages call it."""
    return parse_trace(data.encode("utf-8") if isinstance(data, str) else data, name)


def build(records: list[dict[str, Any]], name: str = "<records>") -> Trace:
    """Validate a trace given as a list of record dicts (the JSON objects of its lines);
    a record without `type` is a request."""
    import json
    lines = []
    for record in records:
        if "type" not in record:
            record = {"type": "request", **record}
        lines.append(json.dumps(record))
    return parse("\n".join(lines) + "\n", name)


def resolve(trace: Trace, policies: list[str] | str | None = None, *,
            allow_trace_plugins: bool = False,
            **options: Any) -> tuple[Options, PoolSizing | None]:
    """The options a replay of `trace` runs with: the trace's config, then `options`,
    then `policies`; the KV pool sized from the GPU under a cost model. A plugin
    only the trace names is refused unless `allow_trace_plugins`."""
    if policies is not None:
        options["policy"] = [policies] if isinstance(policies, str) else list(policies)
    resolved = resolve_options(trace.config, options, trace.directory)[0]
    return fit_pool(_allow(trace, resolved, allow_trace_plugins))


def _allow(trace: Trace, options: Options, allowed: bool) -> Options:
    return allow_trace_plugins(trace, options, allowed, _HOW)


@dataclasses.dataclass(frozen=True)
class Run:
    """One policy's replay: its summary, its per-request records, whether it stalled."""

    policy: str
    summary: dict[str, Any]
    requests: list[dict[str, Any]]
    stalled: bool
    replicas: list[dict[str, Any]] | None = None  # a fleet's per-replica summaries


@dataclasses.dataclass(frozen=True)
class Replay:
    """The runs of one replay, with the options, clock and KV pool they shared."""

    trace: Trace
    options: Options
    clock: Clock
    pool: PoolSizing | None
    runs: list[Run]

    @property
    def time_unit(self) -> str:
        """The unit of every time in the runs: `ticks` or `s`."""
        return self.clock.label

    def run(self, policy: str) -> Run:
        """The run of one policy (KeyError if it was not replayed)."""
        for run in self.runs:
            if run.policy == policy:
                return run
        raise KeyError(policy)


def replay(trace: Trace, policies: list[str] | str | None = None, *,
           allow_trace_plugins: bool = False, **options: Any) -> Replay:
    """Replay `trace` under each policy (default: the trace's, else `continuous`)."""
    resolved, pool = resolve(trace, policies, allow_trace_plugins=allow_trace_plugins,
                             **options)
    clock = clock_for(resolved)
    runs = []
    for policy in resolved.policy:
        with interrupts.watching():  # an interrupt a policy raises is not Ctrl-C
            if resolved.fleet:
                result = make_fleet(trace.workload, resolved, policy).run()
            else:
                result = Engine(trace.workload, resolved, policy).run()
        records = [request_record(r, clock, resolved.slo)
                   for r in sorted(result.requests, key=lambda r: (r.arrival, r.index))]
        runs.append(Run(policy, result.summary, records, result.stalled,
                        result.replicas if resolved.fleet else None))
    return Replay(trace, resolved, clock, pool, runs)


class _Stop(BaseException):
    """Raised inside the replay thread when the reader stopped reading."""


def events(trace: Trace, policy: str | None = None, *, allow_trace_plugins: bool = False,
           **options: Any) -> Iterator[dict]:
    """The event records of one policy's replay, as dicts, as they happen.

    The replay runs in a thread beside the reader with a bounded buffer, so a
    long run is never held in memory; stopping early (leaving the loop)
    stops the replay. Times are in the run's unit, as `--events` writes them.
    A fleet's records carry the `replica` they happened on.
    """
    resolved, _ = resolve(trace, policy, allow_trace_plugins=allow_trace_plugins, **options)
    name = resolved.policy[0]
    clock = clock_for(resolved)
    seconds = clock if clock.in_seconds else None
    buffer: queue.Queue = queue.Queue(maxsize=4096)
    stop = threading.Event()
    done = object()

    def listen(event, replica: int | None = None) -> None:
        if stop.is_set():
            raise _Stop
        record = event.to_dict(None, seconds)
        if replica is not None:  # after its time and `event`, as --events writes it
            items = list(record.items())
            record = dict(items[:2] + [("replica", replica)] + items[2:])
        buffer.put(record)

    def on_replica(replica: int):
        return lambda event: listen(event, replica)

    def work() -> None:
        try:
            if resolved.fleet:
                make_fleet(trace.workload, resolved, name, on_event=on_replica).run()
            else:
                Engine(trace.workload, resolved, name, on_event=listen).run()
            buffer.put(done)
        except _Stop:
            pass
        except BaseException as exc:  # handed to the reader, raised there
            buffer.put(exc)

    thread = threading.Thread(target=work, name="scheduler-sim-replay", daemon=True)
    thread.start()
    try:
        while True:
            item = buffer.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a writer waiting on a full buffer
            try:
                buffer.get(timeout=0.01)
            except queue.Empty:
                pass
        thread.join()


def check(trace: Trace, policies: list[str] | str | None = None, *,
          allow_trace_plugins: bool = False, **options: Any) -> list[CheckResult]:
    """Check the trace's `expect` records; one result per expectation and policy."""
    resolved, _ = resolve(trace, policies, allow_trace_plugins=allow_trace_plugins,
                          **options)
    with interrupts.watching():
        return check_trace(trace, resolved)


def sweep(trace: Trace, grid: dict[str, Any], policies: list[str] | str | None = None,
          executor: Executor | None = None, *, allow_trace_plugins: bool = False,
          **options: Any) -> list[dict[str, Any]]:
    """Replay `trace` once per configuration of `grid` (option name -> list of values,
    the first varying slowest) crossed with `policies` (the last axis; default: a
    `policy` list in `grid`, else the trace's policies); `options` apply to every one.

    One row per configuration in grid order, as `sweep --jsonl` writes them:
    `index`, the swept values, `time_unit`, `stalled` and every summary field.
    `executor` is any `concurrent.futures.Executor` (a process pool, a Dask or
    Ray client's executor); without one the configurations run here in turn.
    The rows are the same whatever runs them.
    """
    axes = with_policies([check_axis(name, values) for name, values in grid.items()],
                         policies, "policies")
    plugin_dir = None
    if not any(axis.name == "policy" for axis in axes) and "policy" not in options:
        base = resolve_options(trace.config, dict(options), specs=False)[0]  # its policies
        plugin_dir = _allow(trace, base, allow_trace_plugins).plugin_dir
    built = build_grid(trace, axes, options, plugin_dir=plugin_dir)
    with interrupts.watching():
        return run_grid(trace, list(built.configurations), executor)


def search(trace: Trace, grid: dict[str, Any] | None = None,
           policies: list[str] | str | None = None, executor: Executor | None = None, *,
           attainment: float = 0.99, max_replicas: int = 64, capacity: bool = False,
           precision: float = 0.01, allow_trace_plugins: bool = False,
           **options: Any) -> list[dict[str, Any]]:
    """For each point of `grid` (option name -> list of values, as `sweep` takes it)
    crossed with `policies`, the fewest replicas (1 to `max_replicas`) whose replay
    meets the SLO (the `slo` option, or the trace's) for `attainment` of the
    requests, as `scheduler-sim search` finds them; with `capacity`, the highest
    load scale (`rate_scale`) the point sustains at its own replicas, to within
    `precision`.

    One dict per point, in grid order: `index`, the swept values, `replicas` (or
    `rate_scale`): what was found, None when nothing tried meets the SLO; `gpus`:
    the replicas (a disaggregated fleet's prefill and decode replicas) x tp at what
    was found (None when nothing was); and `replays`, every
    replay the search made, in the order made, each `{"replicas" (or "rate_scale"):
    value tried, **its run summary}` (the summary's `slo_attainment` and
    `request_goodput` are what the search read). `executor` is any
    `concurrent.futures.Executor`: each point is one task; the results are the same
    whatever runs them."""
    check_bounds(attainment, precision, max_replicas)
    axes = with_policies([check_axis(name, values) for name, values in (grid or {}).items()],
                         policies, "policies")
    check_unsearched(axes, options, capacity)
    base = resolve_options(trace.config, dict(options), trace.directory, specs=False,
                           combined=False)[0]
    plugin_dir = None
    if not any(axis.name == "policy" for axis in axes):
        plugin_dir = _allow(trace, base, allow_trace_plugins).plugin_dir
    points = point_grid(trace, axes, options, base, capacity, max_replicas,
                        plugin_dir=plugin_dir)
    with interrupts.watching():
        found = run_points(trace, points, capacity, attainment, precision, executor)
    searched = "rate_scale" if capacity else "replicas"
    results = []
    for point in found:
        configuration = point.configuration
        row: dict[str, Any] = {"index": configuration.index // (1 if capacity else max_replicas)}
        row.update((name, json_value_of(name, value)) for name, value in configuration.values
                   if name != "replicas")
        row[searched] = point.found
        row["gpus"] = (None if point.found is None else fleet_gpus(
            configuration.options, None if capacity else int(point.found)))
        row["replays"] = [{searched: probe.value, **probe.summary} for probe in point.probes]
        results.append(row)
    return results
