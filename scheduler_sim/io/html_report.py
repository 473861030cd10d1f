"""The HTML pages of `replay --report FILE.html` and `sweep --report FILE.html`.

This module owns the drawing: from the `RunSeries` of each policy
(`report_series.py`) and the runs' summaries it writes one HTML document
with inline SVG charts and a little CSS, no script and nothing fetched:

- per policy, KV blocks over time (allocated, reserved, cached, draining,
  free, and the pool), with preemptions and retractions marked; waiting and
  running requests over time; tokens per dispatch;
- TTFT, TPOT, ITL and end-to-end latency CDFs, one line per policy, from the
  exact values, or from a histogram past `bounded_series.EXACT_VALUES`
  distinct values (the page says so under the chart); each line is drawn
  through at most `CDF_POINTS` of them, always the smallest and the largest;
- a per-request timeline (waiting, prefill, decode, preempted, recompute) of
  at most `TIMELINE_ROWS` requests: all of them when the trace is that small,
  else an evenly spaced sample by arrival (the same under every policy) and,
  under each policy, its slowest by end-to-end latency among the others (the
  page says which);
- the summary table and the options, as `report.format_table` prints them.

A sweep's page (`sweep_report`) draws one summary field against one swept
option, a line per policy (or per combination of the other swept values),
above the sweep's table.

Series longer than a chart is wide are downsampled (`downsample`): per pixel
column the minimum and the maximum are kept, so no peak is lost (a long
run's series come already thinned the same way, per time bucket). The page
is deterministic (no timestamps; numbers written with fixed formats), and
every text from a trace goes through `report.printable` and `html.escape`.
"""
from __future__ import annotations

import html
import math
from bisect import bisect_left
from typing import Any, Sequence

from ..gpu.costmodel import PoolSizing
from ..records.clock import Clock
from ..records.options import Options
from . import bounded_series
from .bounded_series import Distribution
from .report import format_table, printable
from .report_series import END, PHASES, SLOWEST, TIMELINE_ROWS, RunSeries

__all__ = ["html_report", "sweep_report", "sweep_lines", "downsample", "cdf_points",
           "select_requests", "TIMELINE_ROWS", "CDF_POINTS"]

WIDTH, HEIGHT = 960, 230  # a chart, in CSS pixels
LEFT, RIGHT, TOP, BOTTOM = 70, 150, 24, 36  # its margins (the legend sits on the right)
PLOT_W = WIDTH - LEFT - RIGHT
PLOT_H = HEIGHT - TOP - BOTTOM
CDF_POINTS = 400
POLICY_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                 "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
KV_LINES = (("allocated", "#1f77b4"), ("reserved", "#ff7f0e"), ("cached", "#2ca02c"),
            ("draining", "#9467bd"), ("free", "#7f7f7f"))
PHASE_COLORS = {"waiting": "#c7c7c7", "prefill": "#1f77b4", "decode": "#2ca02c",
                "preempted": "#d62728", "recompute": "#ff7f0e"}
PREEMPT_COLOR, RETRACT_COLOR = "#d62728", "#8c564b"

_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1000px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
h3 { font-size: 1em; margin: 1em 0 0.2em; }
pre { font-size: 12px; background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
svg { display: block; margin: 0.3em 0; }
svg text { font-size: 11px; fill: #333; }
p.note { font-size: 0.9em; color: #555; }
ul.legend { list-style: none; padding: 0; font-size: 12px; }
ul.legend span { display: inline-block; width: 12px; height: 8px; margin-right: 6px; }
"""


def esc(text: Any) -> str:
    """Text from anywhere (a trace's ids above all) safe in HTML and XML: shown as
    `report.printable` shows it, then escaped."""
    return html.escape(printable(str(text), backslashes=True), quote=True)


def _f(value: float) -> str:
    """A coordinate: one decimal, no negative zero."""
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def _num(value: float) -> str:
    """An axis label: four significant figures."""
    if value == 0:
        return "0"
    if abs(value) >= 1e4 and float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.4g}"


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


TimelineRow = tuple[str, "list[int] | None", "float | None"]  # id, phases, E2EL


def select_requests(series: list[RunSeries]) -> tuple[list[list[TimelineRow]], str]:
    """The rows of each policy's timeline, in arrival order, and a sentence saying
    which: every request when the trace has at most `TIMELINE_ROWS` (the same
    rows under every policy, in the first policy's order), else the `SPACED`
    evenly spaced by arrival that every policy keeps and, under each policy,
    the `SLOWEST` slowest by end-to-end latency among the others (`RunSeries`
    chose them as the run went)."""
    first = series[0]
    if first.every:
        kept = first.timeline()
        order = sorted(kept, key=lambda rid: kept[rid][0])
        rows = []
        for s in series:
            lines = s.timeline()
            rows.append([(rid, *lines[rid][1:]) if rid in lines else (rid, None, None)
                         for rid in order])
        return rows, f"All {len(order):,} requests, by arrival."
    rows = []
    for s in series:
        kept = s.timeline()
        order = sorted(kept, key=lambda rid: kept[rid][0])
        rows.append([(rid, *kept[rid][1:]) for rid in order])
    shown = _count({len(r) for r in rows})
    slow = _count({len(s.slowest) for s in series})
    spaced = _count({len(s.kept) for s in series})
    return rows, (f"{shown} of {first.requests:,} requests, by arrival: {spaced} evenly "
                  f"spaced by arrival (the same under every policy) and, under each policy, "
                  f"the {slow} slowest by end-to-end latency among the others (so each of "
                  f"its {SLOWEST:,} slowest is shown).")


def _count(counts: set[int]) -> str:
    """A count the policies share (`300`), or the largest of them (`up to 300`)."""
    return f"{max(counts):,}" if len(counts) == 1 else f"up to {max(counts):,}"


# --- drawing ------------------------------------------------------------------------


def _ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round values between lo and hi for an axis."""
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / count
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        step = m * mag
        if span / step <= count:
            break
    first = math.ceil(lo / step - 1e-9)
    out = []
    k = first
    while k * step <= hi + step * 1e-9:
        out.append(round(k * step, 12))
        k += 1
    return out


class _Axes:
    """A chart's mapping from data to pixels (x linear or log10, y linear)."""

    def __init__(self, xlo: float, xhi: float, ylo: float, yhi: float, log_x: bool = False,
                 x_scale: float = 1.0) -> None:
        self.log_x = log_x
        if log_x:
            xlo, xhi = math.log10(xlo), math.log10(xhi)
        self.xlo, self.xhi = xlo, (xhi if xhi > xlo else xlo + 1)
        self.ylo, self.yhi = ylo, (yhi if yhi > ylo else ylo + 1)
        self.x_scale = x_scale  # data x times this is the labelled unit

    def x(self, value: float) -> float:
        if self.log_x:
            value = math.log10(value)
        return LEFT + (value - self.xlo) / (self.xhi - self.xlo) * PLOT_W

    def y(self, value: float) -> float:
        return TOP + PLOT_H - (value - self.ylo) / (self.yhi - self.ylo) * PLOT_H

    def frame(self, xlabel: str, ylabel: str,
              categories: list[tuple[float, str]] | None = None) -> list[str]:
        """The axes, their ticks and labels (`categories`: x ticks at these data
        positions, labelled with these texts, instead of round numbers)."""
        parts = [f'<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" '
                 'fill="none" stroke="#999"/>']
        if categories is not None:
            xs = [(text, self.x(at)) for at, text in categories]
        elif self.log_x:
            xt = [10.0 ** k for k in range(math.ceil(self.xlo - 1e-9),
                                           math.floor(self.xhi + 1e-9) + 1)]
            xs = [(v, self.x(v)) for v in xt]
        else:
            lo, hi = self.xlo * self.x_scale, self.xhi * self.x_scale
            xs = [(v, self.x(v / self.x_scale)) for v in _ticks(lo, hi)]
        for value, px in xs:
            parts.append(f'<line x1="{_f(px)}" y1="{TOP + PLOT_H}" x2="{_f(px)}" '
                         f'y2="{TOP + PLOT_H + 4}" stroke="#999"/>'
                         f'<text x="{_f(px)}" y="{TOP + PLOT_H + 16}" text-anchor="middle">'
                         f'{esc(value) if categories is not None else _num(value)}</text>')
        for value in _ticks(self.ylo, self.yhi, 5):
            py = self.y(value)
            parts.append(f'<line x1="{LEFT}" y1="{_f(py)}" x2="{LEFT + PLOT_W}" '
                         f'y2="{_f(py)}" stroke="#eee"/>'
                         f'<text x="{LEFT - 6}" y="{_f(py + 4)}" '
                         f'text-anchor="end">{_num(value)}</text>')
        parts.append(f'<text x="{LEFT + PLOT_W / 2:.0f}" y="{HEIGHT - 4}" '
                     f'text-anchor="middle">{esc(xlabel)}</text>')
        parts.append(f'<text x="12" y="{TOP + PLOT_H / 2:.0f}" text-anchor="middle" '
                     f'transform="rotate(-90 12 {TOP + PLOT_H / 2:.0f})">{esc(ylabel)}</text>')
        return parts

    def polyline(self, points: list[tuple[float, float]], color: str, name: str,
                 dash: bool = False) -> str:
        coords = " ".join(f"{_f(self.x(x))},{_f(self.y(y))}" for x, y in points)
        extra = ' stroke-dasharray="5,3"' if dash else ""
        return (f'<polyline class="series" data-series="{esc(name)}" fill="none" '
                f'stroke="{color}" stroke-width="1.2"{extra} points="{coords}"/>')


def _legend(items: list[tuple[str, str]]) -> list[str]:
    parts = []
    for i, (name, color) in enumerate(items):
        y = TOP + 8 + 16 * i
        parts.append(f'<rect x="{LEFT + PLOT_W + 12}" y="{y - 7}" width="12" height="8" '
                     f'fill="{color}"/><text x="{LEFT + PLOT_W + 28}" y="{y}">'
                     f'{esc(name)}</text>')
    return parts


def _svg(kind: str, parts: list[str], height: int = HEIGHT) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{kind}" '
            f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">'
            + "".join(parts) + "</svg>\n")


def _time_chart(kind: str, series: RunSeries, end: int, xunit: float, xlabel: str,
                lines: list[tuple[str, str, Sequence[int], Sequence[int], bool]],
                ylabel: str, marks: bool = False) -> str:
    """A chart of counts over time: each line (name, color, xs, ys, dashed) downsampled."""
    top = max((max(ys) for _, _, _, ys, _ in lines if len(ys)), default=1)
    axes = _Axes(0, end, 0, top * 1.05 or 1, x_scale=xunit)
    parts = axes.frame(xlabel, ylabel)
    for name, color, xs, ys, dash in lines:
        if len(xs):
            points = downsample(xs, ys, 0, end)
            steps = points[:1]  # a count holds until the next record changes it
            for (_, y0), (x1, y1) in zip(points, points[1:]):
                steps += [(x1, y0), (x1, y1)]
            parts.append(axes.polyline(steps, color, name, dash))
    legend = [(name, color) for name, color, *_ in lines]
    if marks:
        for marked, color, what in ((series.preemptions, PREEMPT_COLOR, "preemption"),
                                    (series.retractions, RETRACT_COLOR, "retraction")):
            if not marked.total:
                continue
            legend.append((f"{what}s ({marked.total:,})", color))
            columns: dict[int, int] = {}
            for t, count in zip(marked.times, marked.counts):
                column = int(axes.x(t))
                columns[column] = columns.get(column, 0) + count
            for column in sorted(columns):
                count = columns[column]
                parts.append(f'<line class="{what}" x1="{column}" y1="{TOP}" x2="{column}" '
                             f'y2="{TOP + 10}" stroke="{color}" stroke-width="1.5">'
                             f'<title>{count:,} {what}{"s" if count > 1 else ""}</title></line>')
    parts += _legend(legend)
    return _svg(kind, parts)


def _cdf_chart(kind: str, label: str, unit: str,
               lines: list[tuple[str, str, list[tuple[float, int]]]]) -> str:
    """One CDF line per policy from sorted (value, count) pairs."""
    values = [v for _, _, counts in lines for v, _ in (counts[:1] + counts[-1:])]
    if not values:
        return f'<p class="note">No {esc(label)} values.</p>\n'
    hi = max(values)
    lows = [next((v for v, _ in counts if v > 0), None) for _, _, counts in lines]
    low_pos = min((v for v in lows if v is not None), default=None)
    log_x = low_pos is not None and hi / low_pos > 100
    floor = low_pos if log_x else 0
    axes = _Axes(floor if log_x else min(0, min(values)), hi, 0, 1, log_x=log_x)
    xlabel = f"{label} ({unit}{', log scale' if log_x else ''})"
    parts = axes.frame(xlabel, "fraction of samples")
    for name, color, counts in lines:
        if not counts:
            continue
        points = cdf_points(counts)
        steps = []
        below = 0.0
        for value, frac in points:
            x = max(value, floor) if log_x else value
            steps += [(x, below), (x, frac)]
            below = frac
        parts.append(axes.polyline(steps, color, name))
    parts += _legend([(name, color) for name, color, _ in lines])
    return _svg(kind, parts)


def _timeline(rows: list[TimelineRow], end: int, xunit: float, xlabel: str) -> str:
    """One row per request, a rectangle per phase."""
    row = max(2, min(10, 600 // max(1, len(rows))))
    height = TOP + row * len(rows) + BOTTOM
    axes = _Axes(0, end, 0, 1, x_scale=xunit)
    parts = []
    for i, (rid, line, e2el) in enumerate(rows):
        if not line:
            continue
        y = TOP + i * row
        tip = esc(rid) + ("" if e2el is None else f" · E2EL {_num(e2el)}")
        rects = []
        for k in range(0, len(line) - 2, 2):
            start, code, stop = line[k], line[k + 1], line[k + 2]
            if stop <= start or code == END:  # between a prefill and a decode replica
                continue
            x0, x1 = axes.x(start), axes.x(stop)
            rects.append(f'<rect x="{_f(x0)}" y="{y}" width="{_f(max(0.5, x1 - x0))}" '
                         f'height="{row - 1 if row > 2 else row}" '
                         f'fill="{PHASE_COLORS[PHASES[code]]}"/>')
        parts.append(f'<g class="request"><title>{tip}</title>{"".join(rects)}</g>')
    frame = [f'<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{row * len(rows)}" '
             'fill="none" stroke="#999"/>']
    for value in _ticks(0, end * xunit):
        px = axes.x(value / xunit)
        base = TOP + row * len(rows)
        frame.append(f'<line x1="{_f(px)}" y1="{base}" x2="{_f(px)}" y2="{base + 4}" '
                     f'stroke="#999"/><text x="{_f(px)}" y="{base + 16}" '
                     f'text-anchor="middle">{_num(value)}</text>')
    frame.append(f'<text x="{LEFT + PLOT_W / 2:.0f}" y="{height - 4}" '
                 f'text-anchor="middle">{esc(xlabel)}</text>')
    legend = _legend([(name, PHASE_COLORS[name]) for name in PHASES[:-1]])
    return _svg("timeline", frame + parts + legend, height)


def _binned_note(policy: str, values: Distribution) -> str:
    """What a CDF drawn from a histogram is: how many values, in how many buckets,
    and how far a value may be drawn from itself."""
    return (f"{esc(policy)}: from a histogram of {values.total:,} values in "
            f"{values.buckets:,} buckets; each value is drawn at the largest value of its "
            f"bucket, at most {100 / values.per_doubling:.2g}% above it.")


def html_report(trace_name: str, options: Options, runs: list[dict[str, Any]],
                series: list[RunSeries], clock: Clock, pool: PoolSizing | None = None) -> str:
    """The whole page (see the module's docstring)."""
    unit = clock.label
    xunit = clock.step_seconds if clock.in_seconds else 1
    time_label = f"time ({unit})"
    end = max((s.end for s in series), default=0) or 1
    names = [s.policy for s in series]
    colors = {s.policy: POLICY_COLORS[i % len(POLICY_COLORS)] for i, s in enumerate(series)}
    fleet = options.replicas > 1
    out = ["<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
           f"<title>scheduler-sim report: {esc(trace_name)}</title>\n",
           f"<style>{_STYLE}</style>\n</head>\n<body>\n",
           f"<h1>scheduler-sim replay: {esc(trace_name)}</h1>\n",
           f"<p>Policies: {', '.join(esc(n) for n in names)}. Times in {esc(unit)}."
           + (f" A fleet of {options.replicas} replicas: the charts over time show "
              "the sums over its replicas." if fleet else "") + "</p>\n",
           "<h2>Summary</h2>\n<pre>",
           html.escape(format_table(trace_name, options, runs, clock, pool)),
           "</pre>\n"]
    out.append("<h2>Over time</h2>\n")
    for s in series:
        out.append(f"<h3>KV blocks under {esc(s.policy)}</h3>\n")
        lines = [(name, color, s.snap_t, s.snap[name], False) for name, color in KV_LINES
                 if name != "cached" or any(s.snap["cached"])]
        out.append(_time_chart("kv", s, end, xunit, time_label, lines, "blocks", marks=True))
        out.append(f'<p class="note">Pool: {s.num_blocks:,} blocks. Counts as each '
                   "<code>snapshot</code> saw them (after admission, before the dispatch "
                   "allocates); marks at the top: preemptions and retractions.</p>\n")
        out.append(f"<h3>Waiting and running requests under {esc(s.policy)}</h3>\n")
        out.append(_time_chart("queues", s, end, xunit, time_label,
                               [("waiting", "#d62728", s.snap_t, s.snap["waiting"], False),
                                ("running", "#1f77b4", s.snap_t, s.snap["running"], False)],
                               "requests"))
        out.append(f"<h3>Tokens per dispatch under {esc(s.policy)}</h3>\n")
        out.append(_time_chart("tokens", s, end, xunit, time_label,
                               [("tokens", "#2ca02c", s.disp_t, s.disp_tokens, False)],
                               "tokens", marks=True))
    kinds = (("ttft", "TTFT", unit), ("tpot", "TPOT", f"{unit}/token"), ("itl", "ITL", unit),
             ("e2el", "E2EL", unit))
    binned = any(not getattr(s, kind).is_exact for s in series for kind, _, _ in kinds)
    out.append("<h2>Latency distributions</h2>\n<p class=\"note\">Empirical CDFs of "
               + ("the per-request values" if binned else "the exact per-request values")
               + " (ITL: every gap between two outputs of a request), one line per policy."
               + (f" A policy's values are drawn exactly while they are at most "
                  f"{bounded_series.EXACT_VALUES:,} "
                  "distinct ones, else from a histogram (said under the chart)." if binned
                  else "") + "</p>\n")
    for kind, label, unit_text in kinds:
        out.append(f"<h3>{label}</h3>\n")
        pairs = [(s.policy, colors[s.policy], getattr(s, kind).pairs()) for s in series]
        if kind == "itl" and clock.in_seconds:
            pairs = [(name, color, [(clock.report(gap), count) for gap, count in counts])
                     for name, color, counts in pairs]
        out.append(_cdf_chart(f"cdf-{kind}", label, unit_text, pairs))
        notes = [_binned_note(s.policy, getattr(s, kind)) for s in series
                 if not getattr(s, kind).is_exact]
        if notes:
            out.append(f'<p class="note">{" ".join(notes)}</p>\n')
    rows, which = select_requests(series)
    out.append(f"<h2>Requests</h2>\n<p class=\"note\">{esc(which)} Hover over a row for "
               "its id.</p>\n")
    for s, policy_rows in zip(series, rows):
        out.append(f"<h3>Timeline under {esc(s.policy)}</h3>\n")
        out.append(_timeline(policy_rows, end, xunit, time_label))
    out.append("</body>\n</html>\n")
    return "".join(out)


# --- a sweep's report ------------------------------------------------------------------


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


def sweep_report(trace_name: str, axes: list[str], rows: list[dict[str, Any]], x: str,
                 metric: str, unit: str, table: str) -> str:
    """The page of a sweep: `metric` against the swept option `x`, one line per
    policy (and per combination of the other swept values), then the sweep's table.
    Numeric x values are placed by value; others (an order, a router) evenly, in the
    order the grid gives them."""
    lines = sweep_lines(rows, axes, x, metric)
    xs: list[Any] = []
    for row in rows:
        if row[x] not in xs:
            xs.append(row[x])
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in xs)
    place = (lambda v: float(v)) if numeric else (lambda v: float(xs.index(v)))
    ys = [y for _, points in lines for _, y in points]
    out = ["<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
           f"<title>scheduler-sim sweep: {esc(trace_name)}</title>\n",
           f"<style>{_STYLE}</style>\n</head>\n<body>\n",
           f"<h1>scheduler-sim sweep: {esc(trace_name)}</h1>\n",
           f"<p>{esc(metric)} ({esc(unit)}) against {esc(x)}, one line per "
           + ("policy" if axes == [x, "policy"] or axes == ["policy", x]
              else "combination of the other swept values") + ".</p>\n"]
    if not ys:
        out.append(f'<p class="note">No configuration has a value of {esc(metric)}.</p>\n')
    else:
        lo_x, hi_x = min(map(place, xs)), max(map(place, xs))
        pad = (hi_x - lo_x) * 0.05 or 0.5
        axes_ = _Axes(lo_x - pad, hi_x + pad, min(0.0, min(ys)), max(ys) * 1.08 or 1)
        parts = axes_.frame(x, f"{metric} ({unit})",
                            None if numeric else [(place(v), str(v)) for v in xs])
        legend = []
        for i, (name, points) in enumerate(lines):
            color = POLICY_COLORS[i % len(POLICY_COLORS)]
            legend.append((name, color))
            placed = [(place(v), y) for v, y in points]
            if placed:
                parts.append(axes_.polyline(placed, color, name))
            for (px, py), (v, y) in zip(placed, points):
                parts.append(f'<circle cx="{_f(axes_.x(px))}" cy="{_f(axes_.y(py))}" r="3" '
                             f'fill="{color}"><title>{esc(name)}: {esc(x)}={esc(v)}, '
                             f'{esc(metric)}={_num(y)}</title></circle>')
        out.append(_svg("sweep", parts))
        # The legend under the chart: a line's name can be long (the other swept values).
        out.append('<ul class="legend">' + "".join(
            f'<li><span style="background:{color}"></span>{esc(name)}</li>'
            for name, color in legend) + "</ul>\n")
    out += ["<h2>Configurations</h2>\n<pre>", html.escape(table), "</pre>\n",
            "</body>\n</html>\n"]
    return "".join(out)

