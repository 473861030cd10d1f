"""The HTML report's chart of GPU utilisation over time.

Per policy, three lines on the time axis the other charts over time share:
the share of time the GPU was busy (dotted), MFU (solid: the model FLOPs done
over the peak FLOP/s) and MBU (dashed: the HBM bytes moved over the peak
bandwidth), each over wall-clock time, idle time included. They come from the
run's `engine.work_series.WorkSeries` (a fleet's replicas pooled), whose
buckets are narrower than a pixel column or wider: a column shows the mean of
the buckets whose middle falls in it, weighted by their lengths (a share of
time averages so), and a column without a bucket is left out of the line.
The summary's MFU and MBU are over busy time instead; the page says so.
"""
from __future__ import annotations

from typing import Sequence

from .svg_axes import PLOT_W, Axes, legend_parts, svg

__all__ = ["utilisation_chart", "column_means", "LINES"]

# What each policy's three lines show: (name, index among a column's three means, dash).
LINES = (("busy", 0, "2,2"), ("MFU", 1, ""), ("MBU", 2, "6,3"))

Point = tuple[float, float, float, float, float]  # (start s, end s, busy, MFU, MBU)


def column_means(points: Sequence[Point], end: int, xunit: float
                 ) -> list[tuple[int, float, float, float]]:
    """(column, busy, MFU, MBU) for each pixel column of a run `end` clock steps long
    (`xunit` seconds each) that holds a bucket's middle: the means of those buckets
    weighted by their lengths, in column order."""
    sums: dict[int, list[float]] = {}
    for start, stop, busy, mfu, mbu in points:
        middle = (start + stop) / 2 / xunit
        column = min(PLOT_W - 1, max(0, int(middle / (end or 1) * PLOT_W)))
        length = stop - start
        total = sums.setdefault(column, [0.0, 0.0, 0.0, 0.0])
        total[0] += length
        total[1] += busy * length
        total[2] += mfu * length
        total[3] += mbu * length
    return [(c, b / w, f / w, m / w) for c, (w, b, f, m) in sorted(sums.items()) if w > 0]


def utilisation_chart(kind: str, lines: list[tuple[str, str, Sequence[Point]]], end: int,
                      xunit: float, xlabel: str) -> str:
    """Per (policy, colour, points of its WorkSeries), its busy share, MFU and MBU in
    percent, one point per pixel column (`column_means`)."""
    axes = Axes(0, end, 0, 100, x_scale=xunit)
    parts = axes.frame(xlabel, "% of time, of peak")
    for i, (name, color, points) in enumerate(lines):
        means = column_means(points, end, xunit)
        for label, field, dash in LINES:
            drawn = [((c + 0.5) * end / PLOT_W, 100 * values[field])
                     for c, *values in means]
            parts.append(axes.polyline(drawn, color, f"{name} {label}", dash, policy=i))
    parts += legend_parts([(name, color) for name, color, _ in lines])
    parts += legend_parts([(label, "#555") for label, _, _ in LINES],
                          [dash for _, _, dash in LINES], first=len(lines) + 1)
    return svg(kind, parts)
