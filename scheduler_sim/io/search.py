"""The searches of `search`: the fewest replicas a configuration needs to meet an SLO,
the highest load it sustains within it, and the Pareto front of cost and goodput.

Each search is told how to replay a candidate (`evaluate`, which returns the run
summary) and assumes what makes bisection sound:

- **More replicas never lower attainment** (the fraction of requests that
  meet every objective of `slo`): the fewest that meet a target are found by
  doubling from 1 until one meets it, then bisecting between the last that
  failed and the first that met. A count that meets the target is never
  raised further (a larger fleet of a configuration that already meets it is
  only dearer), so a configuration costs about 2 log2(R) replays, not R.
- **More load never raises attainment**: the highest `rate_scale` that meets
  the target is found by doubling (or halving) from 1, then bisecting until
  the bracket is within `precision` of its top (relative).

Neither is a law of every scheduler (a round-robin fleet with few replicas can
be lucky), so every replay made is kept with its result and reported; a
search says what it assumed, and the rows show what it measured.

Cost is GPUs (replicas x tp) or, with a price per GPU-hour, dollars per hour.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

__all__ = ["Probe", "fewest_replicas", "highest_load", "pareto_front"]


@dataclasses.dataclass(frozen=True)
class Probe:
    """One replay a search made: the value it tried (replicas, or a load scale), the
    attainment it measured and the run summary."""

    value: float
    attainment: float
    summary: dict[str, Any]


def _attainment(summary: dict[str, Any]) -> float:
    value = summary.get("slo_attainment")
    return 0.0 if value is None else float(value)


def fewest_replicas(evaluate: Callable[[int], dict[str, Any]], target: float,
                    most: int) -> tuple[int | None, list[Probe]]:
    """The fewest replicas from 1 to `most` whose replay's attainment is at least
    `target` (None if `most` does not), and the replays made, in the order made:
    doubling from 1 (1, 2, 4, ...; `most` last), then bisection."""
    probes: dict[int, Probe] = {}
    order: list[Probe] = []

    def meets(replicas: int) -> bool:
        if replicas not in probes:
            summary = evaluate(replicas)
            probes[replicas] = Probe(replicas, _attainment(summary), summary)
            order.append(probes[replicas])
        return probes[replicas].attainment >= target

    low, high = 0, 1  # `low` failed (0: nothing tried), `high` is the next to try
    while not meets(high):
        if high >= most:
            return None, order
        low, high = high, min(2 * high, most)
    while high - low > 1:
        middle = (low + high) // 2
        if meets(middle):
            high = middle
        else:
            low = middle
    return high, order


def highest_load(evaluate: Callable[[float], dict[str, Any]], target: float,
                 precision: float = 0.01, lowest: float = 1 / 1024,
                 highest: float = 1024.0) -> tuple[float | None, list[Probe]]:
    """The highest load scale whose replay's attainment is at least `target`, to within
    `precision` of itself (None if even `lowest` fails), and the replays made:
    from 1, doubling while it meets the target (or halving while it does not), then
    bisection until the bracket [met, failed] is narrower than `precision` x met.
    A load that meets it at `highest` is reported as `highest`."""
    order: list[Probe] = []

    def meets(scale: float) -> bool:
        summary = evaluate(scale)
        order.append(Probe(scale, _attainment(summary), summary))
        return order[-1].attainment >= target

    scale = 1.0
    if meets(scale):
        met = scale
        while met < highest:
            scale = min(2 * met, highest)
            if not meets(scale):
                break
            met = scale
        else:
            return met, order
        failed = scale
    else:
        failed = scale
        while True:
            scale = failed / 2
            if scale < lowest:
                return None, order
            if meets(scale):
                met = scale
                break
            failed = scale
    while failed - met > precision * met:
        middle = (met + failed) / 2
        if meets(middle):
            met = middle
        else:
            failed = middle
    return met, order


def pareto_front(points: list[tuple[float, float, Any]]) -> list[tuple[float, float, Any]]:
    """The points (cost, goodput, anything) that no other point beats on both: none
    costs as little or less and gives more goodput, or costs less and gives as
    much. Cheapest first; ties of cost and goodput keep the first given."""
    front: list[tuple[float, float, Any]] = []
    best = float("-inf")
    for point in sorted(points, key=lambda p: (p[0], -p[1])):
        if point[1] > best:
            front.append(point)
            best = point[1]
    return front
