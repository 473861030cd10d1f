"""Running a sweep's configurations: one replay per configuration
(`run_configuration`, a module-level function so that a process pool or a
cluster can run it), its row (`configuration_row`: `index`, the swept values,
`time_unit`, `stalled`, then the run summary), and the rows of a list of
configurations in grid order, in process or on any
`concurrent.futures.Executor` (`run_grid`).
"""
from __future__ import annotations

from concurrent.futures import Executor
from typing import Any, Callable

from ..engine.core import Engine
from ..fleet import make_fleet
from ..records.clock import Clock
from ..records.options import Options
from .sweep import Configuration, json_value_of
from .trace import Trace

__all__ = ["run_configuration", "configuration_row", "run_grid"]


def run_configuration(trace: Trace, options: Options) -> tuple[dict[str, Any], bool]:
    """Replay one configuration (one policy): its run summary and whether it stalled.

    A module-level function, so that a process pool or a cluster can run it."""
    policy = options.policy[0]
    if options.fleet:
        result = make_fleet(trace.workload, options, policy, keep_requests=False).run()
    else:
        result = Engine(trace.workload, options, policy, keep_requests=False).run()
    return result.summary, result.stalled


def configuration_row(config: Configuration, summary: dict[str, Any],
                      stalled: bool) -> dict[str, Any]:
    """The row of one configuration from its run summary (`run_configuration`)."""
    row: dict[str, Any] = {"index": config.index}
    row.update((name, json_value_of(name, value)) for name, value in config.values)
    row["time_unit"] = Clock.of(config.options).label
    row["stalled"] = stalled
    row.update(summary)
    return row


def run_grid(trace: Trace, configurations: list[Configuration],
             executor: Executor | None = None,
             on_row: Callable[[Configuration, dict[str, Any]], None] | None = None,
             ) -> list[dict[str, Any]]:
    """One row per configuration, in the order given, whatever order they finish in.

    Without an executor each runs here in turn; with one, each is a task
    (`executor.submit`), and the rows are the same. `on_row(configuration,
    row)` is told of each row as it is made (without an executor)."""
    if executor is None:
        rows = []
        for c in configurations:
            rows.append(configuration_row(c, *run_configuration(trace, c.options)))
            if on_row is not None:
                on_row(c, rows[-1])
        return rows
    futures = [executor.submit(run_configuration, trace, c.options) for c in configurations]
    try:
        return [configuration_row(c, *future.result())
                for c, future in zip(configurations, futures)]
    except BaseException:
        for future in futures:
            future.cancel()
        raise
