"""The geometry of the reports' SVG charts, drawn by hand: a chart's size and margins,
its mapping from data to pixels (`Axes`: x and y each linear or log10, a log y
with a band for 0 below its smallest value), round ticks (`linear_ticks`,
`log_ticks`: decades, then 1-2-5 or every digit where a few decades leave
room), the markers that tell lines apart (`marker`), legends and the `svg`
element around it all.

Coordinates are written with fixed formats (`coord`, `tick_label`), so a page
is the same byte for byte, and every text goes through `esc`.
"""
from __future__ import annotations

import html
import math
from typing import Any

from .terminal_text import printable

__all__ = ["Axes", "svg", "legend_parts", "esc", "coord", "tick_label", "linear_ticks",
           "log_ticks", "marker", "MARKERS", "PAGE_STYLE", "DASHES", "WIDTH", "HEIGHT",
           "LEFT", "RIGHT", "TOP", "BOTTOM", "PLOT_W", "POLICY_COLORS"]

WIDTH, HEIGHT = 1280, 210  # a chart, in CSS pixels (it shrinks to a narrower window)
LEFT, RIGHT, TOP, BOTTOM = 80, 170, 16, 38  # its margins (the legend sits on the right)
PLOT_W = WIDTH - LEFT - RIGHT
ZERO_BAND = 14  # a log y axis with zeros: the band below its smallest value
POLICY_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                 "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
PAGE_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1300px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
h3 { font-size: 1em; margin: 1em 0 0.2em; }
pre { font-size: 12px; background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
svg.chart { display: block; margin: 0.3em 0; max-width: 100%; height: auto; }
svg text { font-size: 12px; fill: #333; }
p.note { font-size: 0.9em; color: #555; max-width: 1280px; }
ul.legend { list-style: none; padding: 0; font-size: 13px; }
ul.legend li { margin: 2px 0; } ul.legend svg { vertical-align: middle; margin-right: 6px; }
details { margin: 0.8em 0; } summary { cursor: pointer; font-weight: bold; }
span.chooser { font-weight: bold; margin-right: 0.4em; } label { margin-right: 1em; }
"""  # the pages' CSS
MARKERS = ("circle", "square", "triangle", "diamond", "down", "cross", "plus", "hexagon")
DASHES = ("", "6,3", "2,2", "8,3,2,3", "4,4", "1,3")


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


def linear_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round values between lo and hi for a linear axis (steps of 1, 2, 2.5 or 5
    times a power of ten, at most about `count` of them)."""
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


def log_ticks(lo: float, hi: float, most: int = 8) -> list[float]:
    """Round values between lo and hi (both > 0) for a log axis: the powers of ten,
    with 2 and 5 times them, or every digit times them, whichever is the richest
    that gives at most `most` ticks; past `most` decades, every second (third ...)
    power of ten; when fewer than two fit, linear round values instead."""
    if lo <= 0 or hi < lo:
        return []
    first, last = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1

    def within(mults: tuple[int, ...], every: int = 1) -> list[float]:
        values = (float(f"{m}e{k}") for k in range(first, last + 1) if k % every == 0
                  for m in mults)
        return [v for v in values if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
    best: list[float] | None = None
    for mults in ((1,), (1, 2, 5), tuple(range(1, 10))):
        ticks = within(mults)
        if len(ticks) > most:
            break
        best = ticks
    if best is None:
        every = 2
        while len(within((1,), every)) > most:
            every += 1
        best = within((1,), every)
    if len(best) < 2:
        return [v for v in linear_ticks(lo, hi, 4) if v > 0]
    return best


class Axes:
    """A chart's mapping from data to pixels. x and y each linear or log10 (`log_x`,
    `log_y`); a log y with `zero` keeps a band below its range where 0 is drawn.
    `x_scale`: data x times this is the labelled unit."""

    def __init__(self, xlo: float, xhi: float, ylo: float, yhi: float, log_x: bool = False,
                 x_scale: float = 1.0, log_y: bool = False, height: int = HEIGHT,
                 zero: bool = False) -> None:
        self.log_x, self.log_y = log_x, log_y
        if log_x:
            xlo, xhi = math.log10(xlo), math.log10(xhi)
        if log_y:
            ylo, yhi = math.log10(ylo), math.log10(yhi)
        self.xlo, self.xhi = xlo, (xhi if xhi > xlo else xlo + 1)
        self.ylo, self.yhi = ylo, (yhi if yhi > ylo else ylo + 1)
        self.x_scale = x_scale
        self.height = height
        self.plot_h = height - TOP - BOTTOM
        self.zero = zero and log_y
        self.span_h = self.plot_h - (ZERO_BAND if self.zero else 0)  # the values' rows

    def x(self, value: float) -> float:
        """The pixel column of a data x."""
        if self.log_x:
            value = math.log10(value)
        return LEFT + (value - self.xlo) / (self.xhi - self.xlo) * PLOT_W

    def y(self, value: float) -> float:
        """The pixel row of a data y (on a log axis with a zero band, 0 is its middle)."""
        if self.log_y:
            if value <= 0:
                return TOP + self.plot_h - ZERO_BAND / 2
            value = math.log10(value)
        return TOP + self.span_h - (value - self.ylo) / (self.yhi - self.ylo) * self.span_h

    def y_ticks(self) -> list[float]:
        """The values the y axis labels."""
        if self.log_y:
            return ([0.0] if self.zero else []) + log_ticks(10 ** self.ylo, 10 ** self.yhi, 6)
        return linear_ticks(self.ylo, self.yhi, 5)

    def frame(self, xlabel: str, ylabel: str,
              categories: list[tuple[float, str]] | None = None,
              x_ticks: list[float] | None = None) -> list[str]:
        """The axes, their ticks and labels (`categories`: x ticks at these data
        positions, labelled with these texts; `x_ticks`: at these values; else
        round numbers)."""
        bottom = TOP + self.plot_h
        parts = [f'<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{self.plot_h}" '
                 'fill="none" stroke="#999"/>']
        if categories is not None:
            xs = [(esc(text), self.x(at)) for at, text in categories]
        else:
            if x_ticks is None and self.log_x:
                x_ticks = log_ticks(10 ** self.xlo, 10 ** self.xhi, 10)
            if x_ticks is not None:
                xs = [(tick_label(v), self.x(v)) for v in x_ticks]
            else:
                lo, hi = self.xlo * self.x_scale, self.xhi * self.x_scale
                xs = [(tick_label(v), self.x(v / self.x_scale)) for v in linear_ticks(lo, hi)]
        for text, px in xs:
            parts.append(f'<line x1="{coord(px)}" y1="{bottom}" x2="{coord(px)}" '
                         f'y2="{bottom + 4}" stroke="#999"/>'
                         f'<text class="xtick" x="{coord(px)}" y="{bottom + 16}" '
                         f'text-anchor="middle">{text}</text>')
        zero_at = self.y(0) if self.zero else None
        for value in self.y_ticks():
            py = self.y(value)
            if zero_at is not None and value > 0 and py > zero_at - 12:
                continue  # its label would cover the 0's
            parts.append(f'<line x1="{LEFT}" y1="{coord(py)}" x2="{LEFT + PLOT_W}" '
                         f'y2="{coord(py)}" stroke="#e4e4e4"/>'
                         f'<text class="ytick" x="{LEFT - 6}" y="{coord(py + 4)}" '
                         f'text-anchor="end">{tick_label(value)}</text>')
        if self.zero:
            parts.append(f'<line x1="{LEFT}" y1="{bottom - ZERO_BAND}" x2="{LEFT + PLOT_W}" '
                         f'y2="{bottom - ZERO_BAND}" stroke="#999" stroke-dasharray="2,2"/>')
        parts.append(f'<text x="{LEFT + PLOT_W / 2:.0f}" y="{self.height - 6}" '
                     f'text-anchor="middle">{esc(xlabel)}</text>')
        middle = TOP + self.plot_h / 2
        parts.append(f'<text x="14" y="{middle:.0f}" text-anchor="middle" '
                     f'transform="rotate(-90 14 {middle:.0f})">{esc(ylabel)}</text>')
        return parts

    def polyline(self, points: list[tuple[float, float]], color: str, name: str,
                 dash: str = "", width: float = 1.2, policy: int | None = None) -> str:
        """A line through data `points` (`dash`: an SVG dash array), named for its legend
        (`policy`: the index of the policy it belongs to, for the page's chooser)."""
        coords = " ".join(f"{coord(self.x(x))},{coord(self.y(y))}" for x, y in points)
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        if policy is not None:
            extra += f' data-policy="{policy}"'
        return (f'<polyline class="series" data-series="{esc(name)}" fill="none" '
                f'stroke="{color}" stroke-width="{width}"{extra} points="{coords}"/>')


def marker(shape: str, cx: float, cy: float, color: str, name: str, title: str,
           kind: str = "point") -> str:
    """A point of a line, drawn as `shape` (one of MARKERS), hollow, so that points of
    several lines at one place each stay visible; `title` shows on hover."""
    r = 4.5
    if shape == "circle":
        body = (f'<circle cx="{coord(cx)}" cy="{coord(cy)}" r="{r}"')
    else:
        outline = {
            "square": [(-1, -1), (1, -1), (1, 1), (-1, 1)],
            "triangle": [(0, -1.25), (1.1, 0.9), (-1.1, 0.9)],
            "diamond": [(0, -1.35), (1.35, 0), (0, 1.35), (-1.35, 0)],
            "down": [(0, 1.25), (1.1, -0.9), (-1.1, -0.9)],
            "hexagon": [(math.cos(k * math.pi / 3) * 1.2, math.sin(k * math.pi / 3) * 1.2)
                        for k in range(6)],
        }.get(shape)
        if outline is not None:
            d = "M" + " L".join(f"{coord(cx + dx * r)},{coord(cy + dy * r)}"
                                for dx, dy in outline) + " Z"
        else:
            arms = ([(-1, -1, 1, 1), (-1, 1, 1, -1)] if shape == "cross"
                    else [(-1.3, 0, 1.3, 0), (0, -1.3, 0, 1.3)])
            d = " ".join(f"M{coord(cx + a * r)},{coord(cy + b * r)} "
                         f"L{coord(cx + c * r)},{coord(cy + e * r)}" for a, b, c, e in arms)
        body = f'<path d="{d}"'
    return (f'{body} class="{kind}" data-series="{esc(name)}" data-marker="{shape}" '
            f'fill="none" stroke="{color}" stroke-width="1.5"><title>{esc(title)}</title>'
            + ("</circle>" if shape == "circle" else "</path>"))


def legend_parts(items: list[tuple[str, str]], dashes: list[str] | None = None,
                 shapes: list[str] | None = None, first: int = 0) -> list[str]:
    """A chart's legend at its right: a swatch (a line, with its dash and marker when
    given) and a name per (name, color), from its `first` row on."""
    parts = []
    x0 = LEFT + PLOT_W + 12
    for i, (name, color) in enumerate(items):
        y = TOP + 8 + 16 * (i + first)
        if dashes is None and shapes is None:
            parts.append(f'<rect x="{x0}" y="{y - 7}" width="12" height="8" fill="{color}"/>')
        else:
            dash = dashes[i] if dashes else ""
            extra = f' stroke-dasharray="{dash}"' if dash else ""
            parts.append(f'<line x1="{x0 - 4}" y1="{y - 3}" x2="{x0 + 20}" y2="{y - 3}" '
                         f'stroke="{color}" stroke-width="1.5"{extra}/>')
            if shapes:
                parts.append(marker(shapes[i], x0 + 8, y - 3, color, name, name, "key"))
        parts.append(f'<text x="{x0 + 26}" y="{y}">{esc(name)}</text>')
    return parts


def svg(kind: str, parts: list[str], height: int = HEIGHT) -> str:
    """A whole chart of `kind` (its `data-chart`) around the drawn `parts`."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{kind}" '
            f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">'
            + "".join(parts) + "</svg>\n")
