"""The SVG charts of the HTML reports, drawn by hand: a chart's geometry and
axes (`Axes`: x linear or log10, y linear, round ticks), and the charts of a
replay's page: counts over time with preemptions and retractions marked
(`time_chart`), one CDF line per policy (`cdf_chart`) and the per-request
timeline (`timeline_chart`).

What is drawn is reduced first: a series longer than a chart is wide keeps,
per pixel column, its first minimum and first maximum (`downsample`), and a
CDF at most about `CDF_POINTS` of its steps (`cdf_points`). Coordinates are
written with fixed formats (`coord`, `tick_label`), so a page is the same
byte for byte, and every text goes through `esc`.
"""
from __future__ import annotations

import html
import math
from bisect import bisect_left
from typing import Any, Sequence

from .terminal_text import printable
from .report_series import END, PHASES, RunSeries

__all__ = ["Axes", "svg", "legend_parts", "esc", "coord", "tick_label", "downsample",
           "cdf_points", "time_chart", "cdf_chart", "timeline_chart", "TimelineRow",
           "CDF_POINTS", "POLICY_COLORS", "KV_LINES"]

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


def esc(text: Any) -> str:
    """Text from anywhere (a trace's ids above all) safe in HTML and XML: shown as
    `terminal_text.printable` shows it, then escaped."""
    return html.escape(printable(str(text), backslashes=True), quote=True)


def coord(value: float) -> str:
    """A coordinate: one decimal, no negative zero."""
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def tick_label(value: float) -> str:
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


class Axes:
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
        """The pixel column of a data x."""
        if self.log_x:
            value = math.log10(value)
        return LEFT + (value - self.xlo) / (self.xhi - self.xlo) * PLOT_W

    def y(self, value: float) -> float:
        """The pixel row of a data y."""
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
            parts.append(f'<line x1="{coord(px)}" y1="{TOP + PLOT_H}" x2="{coord(px)}" '
                         f'y2="{TOP + PLOT_H + 4}" stroke="#999"/>'
                         f'<text x="{coord(px)}" y="{TOP + PLOT_H + 16}" text-anchor="middle">'
                         f'{esc(value) if categories is not None else tick_label(value)}</text>')
        for value in _ticks(self.ylo, self.yhi, 5):
            py = self.y(value)
            parts.append(f'<line x1="{LEFT}" y1="{coord(py)}" x2="{LEFT + PLOT_W}" '
                         f'y2="{coord(py)}" stroke="#eee"/>'
                         f'<text x="{LEFT - 6}" y="{coord(py + 4)}" '
                         f'text-anchor="end">{tick_label(value)}</text>')
        parts.append(f'<text x="{LEFT + PLOT_W / 2:.0f}" y="{HEIGHT - 4}" '
                     f'text-anchor="middle">{esc(xlabel)}</text>')
        parts.append(f'<text x="12" y="{TOP + PLOT_H / 2:.0f}" text-anchor="middle" '
                     f'transform="rotate(-90 12 {TOP + PLOT_H / 2:.0f})">{esc(ylabel)}</text>')
        return parts

    def polyline(self, points: list[tuple[float, float]], color: str, name: str,
                 dash: bool = False) -> str:
        """A line through data `points` (dashed if `dash`), named for its legend."""
        coords = " ".join(f"{coord(self.x(x))},{coord(self.y(y))}" for x, y in points)
        extra = ' stroke-dasharray="5,3"' if dash else ""
        return (f'<polyline class="series" data-series="{esc(name)}" fill="none" '
                f'stroke="{color}" stroke-width="1.2"{extra} points="{coords}"/>')


def legend_parts(items: list[tuple[str, str]]) -> list[str]:
    """A chart's legend at its right: a swatch and a name per (name, color)."""
    parts = []
    for i, (name, color) in enumerate(items):
        y = TOP + 8 + 16 * i
        parts.append(f'<rect x="{LEFT + PLOT_W + 12}" y="{y - 7}" width="12" height="8" '
                     f'fill="{color}"/><text x="{LEFT + PLOT_W + 28}" y="{y}">'
                     f'{esc(name)}</text>')
    return parts


def svg(kind: str, parts: list[str], height: int = HEIGHT) -> str:
    """A whole chart of `kind` (its `data-chart`) around the drawn `parts`."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{kind}" '
            f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">'
            + "".join(parts) + "</svg>\n")


def time_chart(kind: str, series: RunSeries, end: int, xunit: float, xlabel: str,
               lines: list[tuple[str, str, Sequence[int], Sequence[int], bool]],
               ylabel: str, marks: bool = False) -> str:
    """A chart of counts over time: each line (name, color, xs, ys, dashed) downsampled."""
    top = max((max(ys) for _, _, _, ys, _ in lines if len(ys)), default=1)
    axes = Axes(0, end, 0, top * 1.05 or 1, x_scale=xunit)
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
    parts += legend_parts(legend)
    return svg(kind, parts)


def cdf_chart(kind: str, label: str, unit: str,
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
    axes = Axes(floor if log_x else min(0, min(values)), hi, 0, 1, log_x=log_x)
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
    parts += legend_parts([(name, color) for name, color, _ in lines])
    return svg(kind, parts)


def timeline_chart(rows: list[TimelineRow], end: int, xunit: float, xlabel: str) -> str:
    """One row per request, a rectangle per phase."""
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
    frame = [f'<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{row * len(rows)}" '
             'fill="none" stroke="#999"/>']
    for value in _ticks(0, end * xunit):
        px = axes.x(value / xunit)
        base = TOP + row * len(rows)
        frame.append(f'<line x1="{coord(px)}" y1="{base}" x2="{coord(px)}" y2="{base + 4}" '
                     f'stroke="#999"/><text x="{coord(px)}" y="{base + 16}" '
                     f'text-anchor="middle">{tick_label(value)}</text>')
    frame.append(f'<text x="{LEFT + PLOT_W / 2:.0f}" y="{height - 4}" '
                 f'text-anchor="middle">{esc(xlabel)}</text>')
    legend = legend_parts([(name, PHASE_COLORS[name]) for name in PHASES[:-1]])
    return svg("timeline", frame + parts + legend, height)
