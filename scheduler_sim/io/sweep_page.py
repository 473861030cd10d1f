"""The HTML page of `sweep --report FILE.html`: one summary field against one swept
option, a line per policy (or per combination of the other swept values), above
the sweep's table.

How the chart is chosen, as a reader of a sweep would want it:

- a numeric x (block counts, budgets, a rate) is placed by value, on a log
  axis when its values are all positive and the largest is at least 10 times
  the smallest (512, 2048, 8192), and it is ticked at each swept value when
  there are at most `VALUE_TICKS` of them (so each gets a tick), else at
  round values;
- the metric is on a log axis when its values are all positive and the
  largest is at least 10 times the smallest (a p99 that explodes past a
  knee), else on a linear axis from 0;
- each line has its own marker shape and dash (hollow markers: where lines
  coincide every one of them stays visible);
- an x that is not a number (a policy, an order, a router) is categorical:
  bars, grouped per value in the grid's order, one bar per line, instead of
  a line joining values that have no order.
"""
from __future__ import annotations

import html
from typing import Any

from .svg_axes import (DASHES, LEFT, MARKERS, PAGE_STYLE, PLOT_W, POLICY_COLORS, TOP, Axes,
                       coord, esc, legend_parts, marker, svg, tick_label)

__all__ = ["sweep_report", "sweep_lines", "VALUE_TICKS", "SPAN_FOR_LOG"]

VALUE_TICKS = 12    # a numeric x with at most this many values is ticked at each
SPAN_FOR_LOG = 10   # values spanning this factor or more are drawn on a log axis
HEIGHT = 300


def sweep_lines(rows: list[dict[str, Any]], axes: list[str], x: str,
                metric: str) -> list[tuple[str, list[tuple[Any, float]]]]:
    """One line per combination of the swept values other than `x` (the policy first
    among them, as the axes order), each the (x value, metric) points of its rows in
    grid order; rows without the metric (None: no sample) are left out."""
    others = [name for name in axes if name != x]
    lines: dict[str, list[tuple[Any, float]]] = {}
    for row in rows:
        name = ", ".join(str(row[o]) if o == "policy" else f"{o}={row[o]}" for o in others)
        value = row.get(metric)
        points = lines.setdefault(name or metric, [])
        if value is not None and not isinstance(value, bool):
            points.append((row[x], float(value)))
    return list(lines.items())


def spans_decades(values: list[float]) -> bool:
    """Whether `values` are all positive and the largest is at least SPAN_FOR_LOG times
    the smallest."""
    return bool(values) and min(values) > 0 and max(values) >= SPAN_FOR_LOG * min(values)


def sweep_report(trace_name: str, axes: list[str], rows: list[dict[str, Any]], x: str,
                 metric: str, unit: str, table: str) -> str:
    """The page of a sweep (see the module's docstring)."""
    lines = sweep_lines(rows, axes, x, metric)
    xs: list[Any] = []
    for row in rows:
        if row[x] not in xs:
            xs.append(row[x])
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in xs)
    ys = [y for _, points in lines for _, y in points]
    out = ["<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
           f"<title>scheduler-sim sweep: {esc(trace_name)}</title>\n",
           f"<style>{PAGE_STYLE}</style>\n</head>\n<body>\n",
           f"<h1>scheduler-sim sweep: {esc(trace_name)}</h1>\n",
           f"<p>{esc(metric)} ({esc(unit)}) against {esc(x)}, "
           + _drawn_as(axes, x, numeric) + ".</p>\n"]
    if not ys:
        out.append(f'<p class="note">No configuration has a value of {esc(metric)}.</p>\n')
    elif numeric:
        out.append(_line_chart(lines, xs, x, metric, unit))
    else:
        out.append(_bar_chart(lines, xs, x, metric, unit))
    out += ["<h2>Configurations</h2>\n<pre>", html.escape(table), "</pre>\n",
            "</body>\n</html>\n"]
    return "".join(out)


def _drawn_as(axes: list[str], x: str, numeric: bool) -> str:
    """What the chart draws, in words: `one line per policy`, `one bar per policy`..."""
    others = [name for name in axes if name != x]
    shape = "line" if numeric else "bar"
    if not others:
        return f"one {shape}" if numeric else f"one bar per value of {esc(x)}"
    if others == ["policy"]:
        return f"one {shape} per policy" + ("" if numeric else f" for each value of {esc(x)}")
    return (f"one {shape} per combination of the other swept values"
            + ("" if numeric else f" for each value of {esc(x)}"))


def _y_axis(ys: list[float]) -> tuple[float, float, bool]:
    """The metric's range and whether it is drawn on a log axis."""
    if spans_decades(ys):
        return min(ys) / 1.25, max(ys) * 1.25, True
    return min(0.0, min(ys)), (max(ys) * 1.08 or 1), False


def _line_chart(lines: list[tuple[str, list[tuple[Any, float]]]], xs: list[Any], x: str,
                metric: str, unit: str) -> str:
    """A line per series over a numeric x, each with its own marker and dash."""
    values = sorted(float(v) for v in xs)
    ys = [y for _, points in lines for _, y in points]
    ylo, yhi, log_y = _y_axis(ys)
    log_x = spans_decades(values)
    if log_x:
        lo, hi = values[0] / 1.25, values[-1] * 1.25
    else:
        pad = (values[-1] - values[0]) * 0.05 or 0.5
        lo, hi = values[0] - pad, values[-1] + pad
    axes = Axes(lo, hi, ylo, yhi, log_x=log_x, log_y=log_y, height=HEIGHT)
    ticks = values if len(values) <= VALUE_TICKS else None
    parts = axes.frame(x + (" (log scale)" if log_x else ""),
                       f"{metric} ({unit}{', log scale' if log_y else ''})", x_ticks=ticks)
    names, colors, dashes, shapes = [], [], [], []
    for i, (name, points) in enumerate(lines):
        color, dash = POLICY_COLORS[i % len(POLICY_COLORS)], DASHES[i % len(DASHES)]
        shape = MARKERS[i % len(MARKERS)]
        names.append(name), colors.append(color), dashes.append(dash), shapes.append(shape)
        if points:
            parts.append(axes.polyline([(float(v), y) for v, y in points], color, name,
                                       dash, width=1.5))
        for v, y in points:
            parts.append(marker(shape, axes.x(float(v)), axes.y(y), color, name,
                                f"{name}: {x}={v}, {metric}={y:g}"))
    return _with_legend(parts, list(zip(names, colors)), dashes, shapes)


def _bar_chart(lines: list[tuple[str, list[tuple[Any, float]]]], xs: list[Any], x: str,
               metric: str, unit: str) -> str:
    """Bars grouped per value of a categorical x, one bar per series in each group."""
    ys = [y for _, points in lines for _, y in points]
    ylo, yhi, log_y = _y_axis(ys)
    axes = Axes(-0.5, len(xs) - 0.5, ylo, yhi, log_y=log_y, height=HEIGHT)
    parts = axes.frame(x, f"{metric} ({unit}{', log scale' if log_y else ''})",
                       categories=[(float(i), str(v)) for i, v in enumerate(xs)])
    group = PLOT_W / len(xs) * 0.8
    bar = group / max(1, len(lines))
    base = axes.y(ylo if log_y else max(ylo, 0.0))
    for i, (name, points) in enumerate(lines):
        color = POLICY_COLORS[i % len(POLICY_COLORS)]
        for v, y in points:
            left = axes.x(float(xs.index(v))) - group / 2 + i * bar
            top = axes.y(y)
            parts.append(f'<rect class="bar" data-series="{esc(name)}" data-x="{esc(v)}" '
                         f'x="{coord(left)}" y="{coord(min(top, base))}" '
                         f'width="{coord(bar * 0.9)}" height="{coord(abs(base - top))}" '
                         f'fill="{color}"><title>{esc(f"{name}: {x}={v}, {metric}={y:g}")}'
                         f'</title></rect>')
            parts.append(f'<text x="{coord(left + bar * 0.45)}" y="{coord(min(top, base) - 3)}" '
                         f'text-anchor="middle">{tick_label(y)}</text>')
    names = [(name, POLICY_COLORS[i % len(POLICY_COLORS)]) for i, (name, _) in enumerate(lines)]
    return _with_legend(parts, names, None, None)


def _with_legend(parts: list[str], items: list[tuple[str, str]], dashes: list[str] | None,
                 shapes: list[str] | None) -> str:
    """The chart, and its legend under it (a line's name can be long: the other swept
    values), each item drawn as the chart draws it."""
    out = svg("sweep", parts, HEIGHT)
    key = []
    for i, (name, color) in enumerate(items):
        swatch = legend_parts([(name, color)], [dashes[i]] if dashes else None,
                              [shapes[i]] if shapes else None)
        drawn = "".join(s for s in swatch if not s.startswith("<text"))
        key.append(f'<li><svg xmlns="http://www.w3.org/2000/svg" width="36" height="12" '
                   f'viewBox="{LEFT + PLOT_W + 6} {TOP - 1} 36 12">{drawn}</svg>'
                   f'{esc(name)}</li>')
    return out + '<ul class="legend">' + "".join(key) + "</ul>\n"

