"""Running a search's points: the replays of one point, and every point of a grid on
whatever runs them.

A point is a configuration of a grid without the value the search finds (the
replicas, or the load scale with `capacity`). `search_point` runs one point's
search (`search.fewest_replicas` or `search.highest_load`) by replaying the trace
as each step asks; it is a module-level function of picklable arguments, so a
worker process, a `concurrent.futures` pool or a Dask cluster's executor can run
it. `run_points` runs every point: here in turn, or each as a task of an
`Executor`, and gives the same results whatever runs them, in the points' order.
The command line (`cli/search.py`) runs points in its own worker processes, and
`scheduler_sim.search` (api.py) through this module with an executor.
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import Executor
from typing import Any, Callable, Sequence

from ..records.errors import UsageError
from ..records.option_table import OPTIONS
from ..records.option_values import show
from ..records.options import Options
from .search import Probe, fewest_replicas, highest_load
from .sweep import Axis, Configuration, build_grid, check_axis
from .sweep_runs import run_configuration
from .trace import Trace

__all__ = ["Point", "check_bounds", "check_unsearched", "point_grid", "search_point", "run_points",
           "fleet_gpus"]


@dataclasses.dataclass(frozen=True)
class Point:
    """One point of the grid and what its search found: `found` is the fewest replicas
    (or the highest load scale), None when nothing tried met the SLO; `probes` are
    the replays made, in the order made."""

    configuration: Configuration
    found: float | None
    probes: tuple[Probe, ...]


def fleet_gpus(options: Options, replicas: int | None = None) -> int:
    """The GPUs a configuration runs on: its replicas (`replicas` when given, the
    options' otherwise; a disaggregated fleet's prefill and decode replicas) times
    `tp`."""
    if options.disagg:
        return (options.prefill_replicas + options.decode_replicas) * options.tp
    return (options.replicas if replicas is None else replicas) * options.tp


def check_bounds(attainment: float, precision: float, most: int) -> None:
    """The search's own numbers, refused with a UsageError when no search can use them."""
    if not 0 < attainment <= 1:
        raise UsageError(f"--attainment must be a fraction in (0, 1], got {show(attainment)}")
    if not 1e-4 <= precision < 1:  # (a bracket narrower than floats can split never ends)
        raise UsageError(f"--precision must be a fraction from 0.0001 to under 1, got "
                         f"{show(precision)}")
    # (Bounded before the replica counts are listed: 10**11 of them was a MemoryError.)
    if not 1 <= most <= OPTIONS["replicas"].maximum:
        raise UsageError(f"--max-replicas must be an integer from 1 to "
                         f"{OPTIONS['replicas'].maximum:,}, got {show(most)}")


def check_unsearched(axes: list[Axis], fixed: dict[str, Any], capacity: bool) -> None:
    """Refuse the value the search finds (replicas, or rate_scale with `capacity`) as an
    option or an axis."""
    searched = "rate_scale" if capacity else "replicas"
    if searched in fixed or any(axis.name == searched for axis in axes):
        raise UsageError(f"search finds {searched} itself: give it neither as a flag nor in "
                         "the grid" + ("" if capacity else " (--max-replicas bounds it)"))


def point_grid(trace: Trace, axes: list[Axis], fixed: dict[str, Any], base: Options,
               capacity: bool, most: int, trace_sha256: str | None = None,
               plugin_dir: str | None = None) -> list[list[Configuration]]:
    """The points of a search over `axes` (the policies last: `base`'s when no axis
    names them), each as its configurations: at 1 to `most` replicas, or with
    `capacity` the point alone. `base` is the options without the axes (the trace's
    config and `fixed`): it must set objectives to meet."""
    check_unsearched(axes, fixed, capacity)
    if not capacity and (base.disagg or any(axis.name in ("prefill_replicas", "decode_replicas")
                                            for axis in axes)):
        raise UsageError("search finds the fewest replicas behind one router; a "
                         "disaggregated fleet (prefill_replicas, decode_replicas) is not sized "
                         "that way: give --capacity, or sweep prefill_replicas and "
                         "decode_replicas")
    if base.slo is None:
        raise UsageError("search needs objectives to meet: give --slo (ttft=2,tpot=0.1, in "
                         "the results' time unit) or an slo in the trace's config")
    axes = list(axes)
    if not any(axis.name == "policy" for axis in axes):
        axes.append(Axis("policy", tuple(base.policy)))
    if not capacity:
        axes.append(check_axis("replicas", list(range(1, most + 1)), "--max-replicas"))
    configurations = build_grid(trace, axes, fixed, trace_sha256, plugin_dir).configurations
    per_point = 1 if capacity else most  # the grid's last axis is the replicas
    return [list(configurations[p * per_point:(p + 1) * per_point])
            for p in range(len(configurations) // per_point)]


def search_point(trace: Trace, options: Sequence[Options], capacity: bool, target: float,
                 precision: float) -> tuple[float | None, list[Probe]]:
    """One point's search. Without `capacity`, `options[R - 1]` is the point's
    configuration at R replicas (R from 1 to len(options)) and the fewest meeting
    `target` are found; with it, `options[0]` is the point and its highest load
    scale is found to within `precision`."""
    if capacity:
        return highest_load(lambda scale: run_configuration(
            trace, dataclasses.replace(options[0], rate_scale=scale))[0], target, precision)
    return fewest_replicas(lambda replicas: run_configuration(
        trace, options[replicas - 1])[0], target, len(options))


def run_points(trace: Trace, points: Sequence[Sequence[Configuration]], capacity: bool,
               target: float, precision: float, executor: Executor | None = None,
               on_point: Callable[[int, Point], None] | None = None) -> list[Point]:
    """Every point's search, in the order given, whatever order they finish in.

    `points[i]` is point i's configurations: one per replica count from 1 (or,
    with `capacity`, the point alone). Without an executor the points run here in
    turn; with one, each is a task (`executor.submit(search_point, ...)`).
    `on_point(i, point)` is told of each point as it is found (in the order
    given)."""
    def task_args(configurations: Sequence[Configuration]) -> tuple[Any, ...]:
        return (trace, [c.options for c in configurations], capacity, target, precision)

    def point(i: int, result: tuple[float | None, list[Probe]]) -> Point:
        found = Point(points[i][0], result[0], tuple(result[1]))
        if on_point is not None:
            on_point(i, found)
        return found

    if executor is None:
        return [point(i, search_point(*task_args(c))) for i, c in enumerate(points)]
    futures = [executor.submit(search_point, *task_args(c)) for c in points]
    try:
        return [point(i, future.result()) for i, future in enumerate(futures)]
    except BaseException:
        for future in futures:
            future.cancel()
        raise
