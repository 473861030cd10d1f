"""`search`: the cheapest deployment that meets an SLO, or the most load one sustains.

Over a grid of options given as `sweep` takes them (`--grid`, `--grid-file`,
`--policy`; every configuration one point), `search` finds for each point the
fewest replicas whose replay meets the SLO (`--slo`, at `--attainment` of the
requests) and what they cost (GPUs, or dollars per hour with `--price`), then
prints the points cheapest first and the Pareto front of cost against goodput
over every replay made. With `--capacity` it finds instead, for each point at
its own replicas, the highest load (`rate_scale`) that meets the SLO. The
searches themselves (and what they assume) are `io/search.py`'s; points run in
`-j N` worker processes, and on a terminal each is shown as it finishes.
"""
from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..io.progress import SweepProgress, wanted
from ..io.search import Probe, pareto_front
from ..io.search_runs import (Point, check_bounds, check_unsearched, fleet_gpus, point_grid,
                               run_points, search_point)
from ..io.sweep import trace_and_digest
from ..io.terminal_text import printable
from ..io.trace import Trace
from ..io.trace_config import resolve_options as resolve_trace_options
from ..records.errors import UsageError
from ..records.option_values import show
from ..gpu.catalogue import cost_specs
from .entry import PROG
from .flags import check_outputs_and_jobs, load_plugins
from .sweep import _sweep_plugins, flag_axes
from .workers import Workers

__all__ = ["cmd_search"]


def _prices(texts: list[str] | None) -> dict[str, float]:
    """`--price h100-sxm=2.49` (dollars per GPU-hour), repeated: GPU name -> price. A
    GPU priced twice is refused (the last price counted, silently)."""
    prices: dict[str, float] = {}
    given: dict[str, str] = {}
    for text in texts or ():
        name, sep, value = text.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = -1.0
        if not sep or not name or not price >= 0 or price == float("inf"):
            raise UsageError(f"--price must look like GPU=DOLLARS_PER_GPU_HOUR with a finite "
                             f"price >= 0 (h100-sxm=2.49), got {show(text)}")
        if name in given:
            raise UsageError(f"--price prices {name} twice, got {show(given[name])} and "
                             f"{show(text)}")
        given[name] = text
        prices[name] = price + 0.0  # (-0 was shown as "-0 $/h")
    return prices


def _task(shared: tuple, position: int) -> tuple[float | None, list[Probe]]:
    """A point's search, in a worker process (`shared` is inherited)."""
    trace, points, capacity, target, precision = shared
    return search_point(trace, [c.options for c in points[position]], capacity, target,
                        precision)


def cmd_search(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Search the grid; print the points cheapest first (or by load sustained) and the
    Pareto front."""
    check_outputs_and_jobs((), args.jobs)  # (search writes no file: -j is all to check)
    check_bounds(args.attainment, args.precision, args.max_replicas)
    prices = _prices(args.price)
    from_file, axes, fixed = flag_axes(args)
    check_unsearched(axes, fixed, args.capacity)
    trace, digest = trace_and_digest(args.trace)
    if trace.name == "<stdin>":
        raise UsageError("search replays the trace many times: give a file, not -")
    plugin_dir, swept = _sweep_plugins(args, trace, axes, from_file, fixed)
    load_plugins(swept, plugin_dir)
    base = resolve_trace_options(trace.config, dict(fixed), trace.directory, specs=False,
                                 combined=False)[0]
    most = args.max_replicas
    points = point_grid(trace, axes, fixed, base, args.capacity, most,
                        digest, plugin_dir)
    progress = SweepProgress(err, wanted(err, args.quiet), len(points), args.jobs)
    found: list[Point | None] = [None] * len(points)

    def done(position: int, point: Point) -> None:
        found[position] = point
        progress.finished(_progress_text(point, args.capacity))

    try:
        if min(args.jobs, len(points)) <= 1:
            run_points(trace, points, args.capacity, args.attainment, args.precision,
                       on_point=done)
        else:
            shared = (trace, points, args.capacity, args.attainment, args.precision)

            def describe(position: int) -> str:
                return f"searching point {position} ({points[position][0].label()})"
            with Workers(_task, shared, list(range(len(points))), args.jobs,
                         describe) as workers:
                workers.on_result = lambda i, result: done(
                    i, Point(points[i][0], result[0], tuple(result[1])))
                for _ in workers.results():
                    pass
    finally:
        progress.close()
    results = [point for point in found if point is not None]
    text = (_capacity_text if args.capacity else _cost_text)(
        trace, results, prices, args,
        [name for name, _ in points[0][0].values if name != "replicas"] if points else [])
    out.write(text)
    return 0


def _values(point: Point, names: list[str]) -> list[str]:
    values = dict(point.configuration.values)
    return [printable(str(values[name])) for name in names]


def _cost(options: Any, replicas: int, prices: dict[str, float]) -> float:
    """GPUs, or with `prices` dollars per hour, of `options` at `replicas`."""
    gpus = fleet_gpus(options, replicas)
    specs = cost_specs(options)
    gpu = specs[1].name if specs is not None else None
    if not prices:
        return gpus
    if gpu not in prices:
        raise UsageError(f"--price gives no price for {gpu or 'a run without a cost model'} "
                         f"(priced: {', '.join(prices)})")
    return gpus * prices[gpu]


def _progress_text(point: Point, capacity: bool) -> str:
    label = printable(", ".join(f"{name}={value}" for name, value in
                                point.configuration.values if name != "replicas"))
    if point.found is None:
        return f"{label}: no {'load' if capacity else 'fleet'} tried meets the SLO"
    what = f"load x{point.found:.3g}" if capacity else _replicas(point.found)
    return f"{label}: {what} ({len(point.probes)} replays)"


def _replicas(count: float) -> str:
    return f"{count:g} replica{'' if count == 1 else 's'}"


def _numeric(cell: str) -> bool:
    return cell == "-" or cell.rstrip("%").replace(",", "").replace(".", "", 1).isdigit()


def _table(header: list[str], rows: list[list[str]], units: list[str]) -> str:
    """An aligned table: a header, a line of units, then the rows; a column of numbers
    (or '-') is right-aligned, any other left-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(header, units, *rows)]
    right = [bool(rows) and all(_numeric(row[i]) for row in rows) for i in range(len(header))]
    return "".join("  ".join(cell.rjust(w) if r else cell.ljust(w)
                             for cell, w, r in zip(line, widths, right)).rstrip() + "\n"
                   for line in [header, units] + rows)


def _label(point: Point, names: list[str]) -> str:
    """`tp=2, policy=vllm`: the point's values (not the replicas searched)."""
    values = dict(point.configuration.values)
    return printable(", ".join(f"{name}={values[name]}" for name in names))


def _cost_text(trace: Trace, points: list[Point], prices: dict[str, float],
               args: argparse.Namespace, names: list[str]) -> str:
    """The points cheapest first, then the Pareto front over every replay made."""
    unit = "$/h" if prices else "GPUs"
    slo = points[0].configuration.options.slo if points else ()
    objective = ", ".join(f"{name} <= {value:g}" for name, value in slo)
    head = (f"{PROG} search {printable(trace.name)}: the fewest replicas (at most "
            f"{args.max_replicas}) meeting {objective} for {args.attainment:.4g} of requests\n")
    rows, replays = [], []
    def at_found(point: Point) -> Probe | None:
        return next((p for p in point.probes if p.value == point.found), None)

    # Cheapest first; at one cost the most goodput first, then grid order.
    ranked = sorted(points, key=lambda p: (
        p.found is None, _cost(p.configuration.options, int(p.found or 0), prices),
        -((at_found(p).summary.get("request_goodput") or 0) if p.found else 0),
        p.configuration.index))
    for point in ranked:
        options = point.configuration.options
        for probe in point.probes:
            replays.append((_cost(options, int(probe.value), prices),
                            probe.summary.get("request_goodput") or 0.0,
                            (point, probe)))
        if point.found is None:
            rows.append(_values(point, names) + ["-", "-", "-", "-", "-"])
            continue
        probe = at_found(point)
        rows.append(_values(point, names) + [
            f"{point.found:g}", f"{_cost(options, int(point.found), prices):,.4g}",
            f"{probe.attainment:.2%}", _number(probe.summary.get("request_goodput")),
            _number(probe.summary.get("ttft_p99"))])
    in_seconds = points[0].configuration.options.has_cost_model if points else False
    seconds, rate = ("s", "req/s") if in_seconds else ("ticks", "req/tick")
    text = head + _table(names + ["replicas", "cost", "attainment", "goodput", "ttft p99"],
                         rows, [""] * len(names) + ["", unit, "", rate, seconds])
    if ranked and ranked[0].found is not None:
        best = ranked[0]
        cost = _cost(best.configuration.options, int(best.found), prices)
        text += (f"cheapest: {_label(best, names)} with {_replicas(best.found)}, "
                 f"{cost:,.4g} {'GPU' if cost == 1 and not prices else unit}\n")
    text += (f"{len(replays)} replays for {len(points)} point(s); trying every count "
             f"would take {len(points) * args.max_replicas}\n")
    front = pareto_front(replays)
    text += "\nPareto front of cost against goodput (every replay made):\n"
    text += _table(names + ["replicas", "cost", "goodput", "attainment"],
                   [_values(point, names) + [f"{probe.value:g}", f"{cost:,.4g}",
                                             _number(goodput), f"{probe.attainment:.2%}"]
                    for cost, goodput, (point, probe) in front],
                   [""] * len(names) + ["", unit, rate, ""])
    return text


def _capacity_text(trace: Trace, points: list[Point], prices: dict[str, float],
                   args: argparse.Namespace, names: list[str]) -> str:
    """The points by the load each sustains, highest first."""
    slo = points[0].configuration.options.slo if points else ()
    objective = ", ".join(f"{name} <= {value:g}" for name, value in slo)
    head = (f"{PROG} search --capacity {printable(trace.name)}: the highest load (x the "
            f"trace's rate, to {args.precision:.2%}) meeting {objective} for "
            f"{args.attainment:.4g} of requests\n")
    span = trace.workload.last_arrival - trace.workload.first_arrival \
        if len(trace.workload) > 1 else 0
    rows = []
    for point in sorted(points, key=lambda p: (-(p.found or 0), p.configuration.index)):
        if point.found is None:
            rows.append(_values(point, names) + ["-", "-", "-"])
            continue
        probe = next(p for p in point.probes if p.value == point.found)
        rate = (len(trace.workload) - 1) / span * point.found if span else None
        rows.append(_values(point, names) + [f"{point.found:.6g}", _number(rate),
                                             f"{probe.attainment:.2%}"])
    unit = trace.config.get("time_unit", "tick")
    head += (f"{sum(len(p.probes) for p in points)} replays for {len(points)} point(s)\n")
    return head + _table(names + ["load", "rate", "attainment"], rows,
                         [""] * len(names) + ["x", f"req/{unit}", ""])


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:,.4g}"
