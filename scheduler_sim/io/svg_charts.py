"""The SVG charts of a replay's HTML report, every policy on shared axes (one colour
per policy, named in the legend): a count over time as a min/max band per pixel
column with the mean drawn inside it (`band_chart`), preemptions and
retractions per stretch of time (`marks_chart`), a latency against arrival
time for every request, as density, with its p50 and p99 (`density_chart`),
one CDF line per policy on a log axis (`cdf_chart`), and the per-request
timeline (`timeline_chart`). The charts over time share their x axis (0 to the
run's end, the same plot width), so they line up one above the other.

What is drawn is reduced first: a series longer than a chart is wide keeps,
per pixel column, its minimum and maximum (`column_ranges`, `downsample`), and
a CDF at most about `CDF_POINTS` of its steps (`cdf_points`). The axes, ticks,
markers and the formats that keep a page the same byte for byte are
`svg_axes`'.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from typing import Callable, Sequence

from .density_grid import DensityGrid
from .report_series import END, PHASES
from .bounded_series import Marks
from .svg_axes import (BOTTOM, HEIGHT, LEFT, PLOT_W, POLICY_COLORS, TOP, Axes, coord, esc,
                       legend_parts, linear_ticks, svg, tick_label)

__all__ = ["downsample", "column_ranges", "cdf_points", "band_chart", "marks_chart",
           "density_chart", "percentile_steps", "lines_chart", "cdf_chart", "timeline_chart",
           "TimelineRow", "Band", "CDF_POINTS", "POLICY_COLORS", "KV_LINES", "MARK_BINS",
           "WINDOW_REQUESTS", "esc", "tick_label"]

CDF_POINTS = 400
MARK_BINS = PLOT_W // 6     # preemptions are counted per this many stretches of the run
WINDOW_REQUESTS = 200       # a p50/p99 step spans arrivals of about this many requests
DENSITY_HEIGHT = 250
KV_LINES = (("allocated", "#1f77b4"), ("reserved", "#ff7f0e"), ("cached", "#2ca02c"),
            ("draining", "#9467bd"), ("free", "#7f7f7f"))
PHASE_COLORS = {"waiting": "#c7c7c7", "prefill": "#1f77b4", "decode": "#2ca02c",
                "preempted": "#d62728", "recompute": "#ff7f0e"}
OPACITY = (0.14, 0.28, 0.46, 0.7)  # a density cell's, by its count's level


# --- reducing what is drawn --------------------------------------------------------


def downsample(xs: Sequence[int], ys: Sequence[int], lo: float, hi: float,
               buckets: int = PLOT_W) -> list[tuple[float, float]]:
    """The points of a series worth drawing on `buckets` pixel columns over [lo, hi]:
    in each column, the first minimum and the first maximum, in their order (both
    kept, so peaks and troughs survive), then the last point. `xs` ascend."""
    n = len(xs)
    if n <= 2 * buckets:
        return list(zip(xs, ys))
    span = (hi - lo) or 1
    out: list[tuple[float, float]] = []
    start = 0
    for b in range(1, buckets + 1):
        end = n if b == buckets else bisect_left(xs, lo + span * b / buckets, start)
        if end > start:
            part = ys[start:end]
            low, high = min(part), max(part)
            i, j = part.index(low), part.index(high)
            for k in sorted({i, j}):
                out.append((xs[start + k], part[k]))
            start = end
    if out[-1] != (xs[-1], ys[-1]):
        out.append((xs[-1], ys[-1]))
    return out


def column_ranges(xs: Sequence[int], ys: Sequence[int], lo: float, hi: float,
                  columns: int = PLOT_W) -> list[tuple[int, int, int, int]]:
    """(column, minimum, maximum, last value) of the values of each of `columns` equal
    stretches of [lo, hi] that holds any (the last column also takes what lies past
    hi). `xs` ascend."""
    span = (hi - lo) or 1
    out = []
    start, n = 0, len(xs)
    for c in range(columns):
        end = n if c == columns - 1 else bisect_left(xs, lo + span * (c + 1) / columns, start)
        if end > start:
            part = ys[start:end]
            out.append((c, min(part), max(part), part[-1]))
            start = end
    return out


def cdf_points(counts: Sequence[tuple[float, int]], limit: int = CDF_POINTS
               ) -> list[tuple[float, float]]:
    """The steps of an empirical CDF from sorted (value, count) pairs: (value, fraction
    of samples at most value), for at most about `limit` values, always the first
    and the last; the values are the samples' own."""
    total = sum(c for _, c in counts)
    out: list[tuple[float, float]] = []
    seen = 0
    level = -1
    for k, (value, count) in enumerate(counts):
        seen += count
        step = seen * limit // total
        if step != level or k == 0 or k == len(counts) - 1:
            out.append((value, seen / total))
            level = step
    return out


# --- counts over time --------------------------------------------------------------

# One policy's band: name, colour, times and values of its kept rows (ascending times),
# the (start step, rows, mean) of its buckets, and the value drawn for a stored one.
Band = tuple[str, str, Sequence[int], Sequence[int], list[tuple[int, int, float]],
             Callable[[float], float]]


def band_chart(kind: str, bands: list[Band], end: int, xunit: float, xlabel: str,
               ylabel: str, top: float | None = None, height: int = HEIGHT,
               log: bool = False, hold: bool = True) -> str:
    """Per policy, the band between each pixel column's minimum and maximum (light)
    and the mean of the column's rows inside it (a line), on one pair of axes.
    `hold`: the values are a state that holds until the next row changes it (a
    count of blocks or requests), so a column without rows holds the last value,
    and a column's range includes the value it began with; else (tokens per
    dispatch) a column without rows is a gap. `top`: the y axis's top (else the
    largest value, plus 5%). `log`: a log y axis from 1 (values below 1 drawn at
    1), for values that span decades."""
    drawn = []
    for name, color, xs, ys, means, shown in bands:
        columns: dict[int, list[float]] = {}
        for start, rows, mean in means:
            c = min(PLOT_W - 1, int(start / (end or 1) * PLOT_W))
            slot = columns.setdefault(c, [0, 0.0])
            slot[0] += rows
            slot[1] += mean * rows
        ranges, line = [], []
        last = None
        for c, low, high, final in column_ranges(xs, ys, 0, end):
            if hold and last is not None:  # (`last`: the previous column's, as stored)
                held = shown(last)
                for gap in range(ranges[-1][0] + 1, c):
                    ranges.append((gap, held, held))
                    line.append((gap, held))
                low, high = min(low, last), max(high, last)
            a, b = shown(low), shown(high)
            ranges.append((c, min(a, b), max(a, b)))
            if c in columns:
                rows, total = columns[c]
                line.append((c, shown(total / rows)))
            last = final
        drawn.append((name, color, ranges, line))
    most = max((high for *_, ranges, _ in drawn for _, _, high in ranges), default=1)
    if log:
        drawn = [(name, color, [(c, max(1, a), max(1, b)) for c, a, b in ranges],
                  [(c, max(1, v)) for c, v in line]) for name, color, ranges, line in drawn]
    axes = Axes(0, end, 1 if log else 0, top if top is not None else (most * 1.05 or 1),
                x_scale=xunit, height=height, log_y=log)
    parts = axes.frame(xlabel, ylabel + (", log scale" if log else ""))
    for i, (name, color, ranges, line) in enumerate(drawn):
        d = []
        for run in _runs(ranges):
            upper = "L".join(f"{LEFT + c}.5,{coord(axes.y(high))}" for c, _, high in run)
            lower = "L".join(f"{LEFT + c}.5,{coord(axes.y(low))}" for c, low, _ in reversed(run))
            d.append(f"M{upper}L{lower}Z")
        if d:
            parts.append(f'<path class="band" data-series="{esc(name)}" data-policy="{i}" '
                         f'fill="{color}" '
                         f'fill-opacity="0.2" stroke="{color}" stroke-opacity="0.2" '
                         f'stroke-width="0.5" d="{"".join(d)}"/>')
    for i, (name, color, ranges, line) in enumerate(drawn):
        d = ["M" + "L".join(f"{LEFT + c}.5,{coord(axes.y(v))}" for c, v in run)
             for run in _runs(line)]
        if d:
            parts.append(f'<path class="series" data-series="{esc(name)}" data-policy="{i}" '
                         f'fill="none" stroke="{color}" stroke-width="1.3" '
                         f'd="{"".join(d)}"/>')
    parts += legend_parts([(name, color) for name, color, *_ in drawn])
    return svg(kind, parts, height)


def _runs(items: list[tuple]) -> list[list[tuple]]:
    """`items` (each led by its pixel column, ascending) cut where a column is missing."""
    out: list[list[tuple]] = []
    for item in items:
        if out and out[-1][-1][0] == item[0] - 1:
            out[-1].append(item)
        else:
            out.append([item])
    return out


def marks_chart(kind: str, marks: list[tuple[str, str, Marks, Marks]], end: int,
                xunit: float, xlabel: str, unit: str, height: int = 150) -> str:
    """Per policy, its preemptions (a line) and retractions (dashed) counted in each
    of `MARK_BINS` equal stretches of the run, on one pair of axes."""
    width = (end or 1) / MARK_BINS

    def binned(m: Marks) -> list[int]:
        counts = [0] * MARK_BINS
        for t, count in zip(m.times, m.counts):
            counts[min(MARK_BINS - 1, max(0, int(t / width)))] += count
        return counts
    lines = []
    for i, (name, color, preempted, retracted) in enumerate(marks):
        for what, m, dash in (("preemptions", preempted, ""), ("retractions", retracted,
                                                               "4,2")):
            if m.total or what == "preemptions":
                label = f"{name} ({m.total:,})" if what == "preemptions" else (
                    f"{name} retractions ({m.total:,})")
                lines.append((label, color, binned(m), dash, i))
    most = max((max(c) for _, _, c, _, _ in lines), default=0)
    axes = Axes(0, end, 0, max(1, most * 1.1), x_scale=xunit, height=height)
    parts = axes.frame(xlabel, f"per {tick_label(width * xunit)} {unit}")
    for name, color, counts, dash, i in lines:
        steps = []
        for b, count in enumerate(counts):
            steps += [(b * width, count), ((b + 1) * width, count)]
        parts.append(axes.polyline(steps, color, name, dash, policy=i))
    parts += legend_parts([(name, color) for name, color, *_ in lines],
                          dashes=[dash for _, _, _, dash, _ in lines])
    return svg(kind, parts, height)


# --- every request against its arrival -------------------------------------------


def percentile_steps(grid: DensityGrid, fraction: float, per_window: int = WINDOW_REQUESTS
                     ) -> list[tuple[int, int, float | None]]:
    """(first step, last step, latency at `fraction`) per window of arrival time: the
    grid's columns in equal windows, as many as hold about `per_window` requests each
    on average (at least one; at most one a column); None where none arrived."""
    used = grid.column_count()
    if used == 0:
        return []
    windows = max(1, min(used, grid.total // per_window))
    size = math.ceil(used / windows)
    out = []
    for first in range(0, used, size):
        columns = range(first, min(used, first + size))
        out.append((first * grid.width, columns.stop * grid.width,
                    grid.percentile(columns, fraction)))
    return out


def density_chart(kind: str, label: str, unit: str,
                  grids: list[tuple[str, str, DensityGrid]], end: int, xunit: float,
                  xlabel: str) -> str:
    """Every request at its arrival time and latency: each policy's cells in its
    colour, darker where more requests fall in them, with its p99 (solid) and p50
    (dashed) per window of arrivals; a log y axis, 0 in a band of its own."""
    rows = [(grid, row) for _, _, grid in grids for row in grid.rows if grid.rows[row]]
    positive = [grid.row_range(row) for grid, row in rows if row]
    if not rows:
        return f'<p class="note">No {esc(label)} values.</p>\n'
    zero = any(row == 0 for _, row in rows)
    lo = min((low for low, _ in positive), default=1.0)
    hi = max((high for _, high in positive), default=lo * 10) * 1.2  # (headroom)
    axes = Axes(0, end, lo, hi, x_scale=xunit, log_y=True, height=DENSITY_HEIGHT, zero=zero)
    parts = axes.frame(xlabel, f"{label} ({unit}, log scale)")
    most = max(count for _, _, grid in grids for cell in grid.cells.values()
               for count in cell.values())
    right = LEFT + PLOT_W
    for i, (name, color, grid) in enumerate(grids):
        paths: list[list[str]] = [[] for _ in OPACITY]
        for column in sorted(grid.cells):
            # Whole pixels: neighbouring cells share their edges, and the path is short.
            x0 = min(right - 1, round(axes.x(column * grid.width)))
            x1 = max(x0 + 1, min(right, round(axes.x((column + 1) * grid.width))))
            for row, count in sorted(grid.cells[column].items()):
                if row == 0:
                    y0, y1 = round(axes.y(0)) - 5, round(axes.y(0)) + 5
                else:  # (at least 3 pixels tall, so that a lone band shows)
                    low, high = grid.row_range(row)
                    y0, y1 = round(axes.y(high)), round(axes.y(low))
                    if y1 - y0 < 3:
                        y0 = (y0 + y1) // 2 - 1
                        y1 = y0 + 3
                level = min(len(OPACITY) - 1,
                            int(math.log1p(count) / math.log1p(most) * len(OPACITY)))
                paths[level].append(f"M{x0},{y0}h{x1 - x0}v{y1 - y0}h{x0 - x1}z")
        for level, cells in enumerate(paths):
            if cells:
                parts.append(f'<path class="cells" data-series="{esc(name)}" '
                             f'data-policy="{i}" data-level="{level}" fill="{color}" '
                             f'fill-opacity="{OPACITY[level]}" d="{"".join(cells)}"/>')
    for i, (name, color, grid) in enumerate(grids):
        for fraction, dash, what in ((0.99, "", "p99"), (0.5, "5,3", "p50")):
            d = []
            pen = False
            for first, last, value in percentile_steps(grid, fraction):
                if value is None:
                    pen = False
                    continue
                y = coord(axes.y(value))
                x0, x1 = coord(axes.x(first)), coord(min(right, axes.x(last)))
                d.append(f"{'L' if pen else 'M'}{x0},{y}L{x1},{y}")
                pen = True
            extra = f' stroke-dasharray="{dash}"' if dash else ""
            parts.append(f'<path class="series" data-series="{esc(name)} {what}" '
                         f'data-policy="{i}" fill="none" stroke="{color}" stroke-width="1.6"'
                         f'{extra} d="{"".join(d)}"/>')
    parts += legend_parts([(name, color) for name, color, _ in grids])
    parts += legend_parts([("p99", "#555"), ("p50", "#555")], ["", "5,3"],
                          first=len(grids) + 1)
    return svg(kind, parts, DENSITY_HEIGHT)


def lines_chart(kind: str, end: int, xunit: float, xlabel: str, ylabel: str,
                lines: list[tuple[str, str, Sequence[int], Sequence[int]]]) -> str:
    """Counts over time, a step line each (name, colour, times, counts), each
    downsampled to its first minimum and maximum per pixel column."""
    top = max((max(ys) for _, _, _, ys in lines if len(ys)), default=1)
    axes = Axes(0, end, 0, top * 1.05 or 1, x_scale=xunit)
    parts = axes.frame(xlabel, ylabel)
    for name, color, xs, ys in lines:
        if len(xs):
            points = downsample(xs, ys, 0, end)
            steps = points[:1]  # a count holds until the next record changes it
            for (_, y0), (x1, y1) in zip(points, points[1:]):
                steps += [(x1, y0), (x1, y1)]
            parts.append(axes.polyline(steps, color, name))
    parts += legend_parts([(name, color) for name, color, *_ in lines])
    return svg(kind, parts)


# --- distributions -----------------------------------------------------------------


def cdf_chart(kind: str, label: str, unit: str,
              lines: list[tuple[str, str, list[tuple[float, int]]]],
              log: bool = True) -> str:
    """One CDF line per policy from sorted (value, count) pairs, on a log x axis when
    `log` and the values include a positive one (a value of 0 is drawn at the
    smallest positive one)."""
    values = [v for _, _, counts in lines for v, _ in (counts[:1] + counts[-1:])]
    if not values:
        return f'<p class="note">No {esc(label)} values.</p>\n'
    hi = max(values)
    lows = [next((v for v, _ in counts if v > 0), None) for _, _, counts in lines]
    low_pos = min((v for v in lows if v is not None), default=None)
    log_x = log and low_pos is not None and hi > 0
    floor = low_pos if log_x else 0
    axes = Axes(floor if log_x else min(0, min(values)), hi if hi > floor else floor * 10,
                0, 1, log_x=log_x)
    xlabel = f"{label} ({unit}{', log scale' if log_x else ''})"
    parts = axes.frame(xlabel, "fraction of samples")
    for i, (name, color, counts) in enumerate(lines):
        if not counts:
            continue
        points = cdf_points(counts)
        steps = []
        below = 0.0
        for value, frac in points:
            x = max(value, floor) if log_x else value
            steps += [(x, below), (x, frac)]
            below = frac
        parts.append(axes.polyline(steps, color, name, policy=i))
    parts += legend_parts([(name, color) for name, color, _ in lines])
    return svg(kind, parts)


# --- the timeline ------------------------------------------------------------------

TimelineRow = tuple[str, "list[int] | None", "float | None"]  # id, phases, E2EL


def timeline_chart(rows: list[TimelineRow], end: int, xunit: float, xlabel: str) -> str:
    """One row per request, a rectangle per phase; the y axis counts the rows."""
    row = max(2, min(10, 600 // max(1, len(rows))))
    height = TOP + row * len(rows) + BOTTOM
    axes = Axes(0, end, 0, 1, x_scale=xunit)
    parts = []
    for i, (rid, line, e2el) in enumerate(rows):
        if not line:
            continue
        y = TOP + i * row
        tip = esc(rid) + ("" if e2el is None else f" · E2EL {tick_label(e2el)}")
        rects = []
        for k in range(0, len(line) - 2, 2):
            start, code, stop = line[k], line[k + 1], line[k + 2]
            if stop <= start or code == END:  # between a prefill and a decode replica
                continue
            x0, x1 = axes.x(start), axes.x(stop)
            rects.append(f'<rect x="{coord(x0)}" y="{y}" width="{coord(max(0.5, x1 - x0))}" '
                         f'height="{row - 1 if row > 2 else row}" '
                         f'fill="{PHASE_COLORS[PHASES[code]]}"/>')
        parts.append(f'<g class="request"><title>{tip}</title>{"".join(rects)}</g>')
    base = TOP + row * len(rows)
    frame = [f'<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{row * len(rows)}" '
             'fill="none" stroke="#999"/>']
    for value in linear_ticks(0, end * xunit):
        px = axes.x(value / xunit)
        frame.append(f'<line x1="{coord(px)}" y1="{base}" x2="{coord(px)}" y2="{base + 4}" '
                     f'stroke="#999"/><text class="xtick" x="{coord(px)}" y="{base + 16}" '
                     f'text-anchor="middle">{tick_label(value)}</text>')
    for value in linear_ticks(1, max(1, len(rows)), 5):
        if value >= 1 and float(value).is_integer():
            py = TOP + (value - 0.5) * row
            frame.append(f'<text class="ytick" x="{LEFT - 6}" y="{coord(py + 4)}" '
                         f'text-anchor="end">{int(value):,}</text>')
    frame.append(f'<text x="{LEFT + PLOT_W / 2:.0f}" y="{height - 6}" '
                 f'text-anchor="middle">{esc(xlabel)}</text>')
    middle = TOP + row * len(rows) / 2
    frame.append(f'<text x="14" y="{middle:.0f}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {middle:.0f})">request (by arrival)</text>')
    legend = legend_parts([(name, PHASE_COLORS[name]) for name in PHASES[:-1]])
    return svg("timeline", frame + parts + legend, height)
