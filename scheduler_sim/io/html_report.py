"""The HTML pages of `replay --report FILE.html` and `sweep --report FILE.html`.

This module owns the pages: from the `RunSeries` of each policy
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
- with host memory (or a preemption mode asked for), the CDF of resumed
  requests' surviving fraction and where their rows came back from;
- the summary table and the options, as `report.format_table` prints them.

A sweep's page (`sweep_report`) draws one summary field against one swept
option, a line per policy (or per combination of the other swept values),
above the sweep's table.

Series longer than a chart is wide are downsampled (`downsample`): per pixel
column the minimum and the maximum are kept, so no peak is lost (a long
run's series come already thinned the same way, per time bucket). The page
is deterministic (no timestamps; numbers written with fixed formats), and
every text from a trace goes through `terminal_text.printable` and `html.escape`.
The charts themselves, and the reductions before them, are `svg_charts`'.
"""
from __future__ import annotations

import html
from typing import Any

from ..gpu.kv_pool import PoolSizing
from ..records.clock import Clock
from ..records.options import Options
from . import bounded_series
from .bounded_series import Distribution
from .report import format_table
from .report_series import SLOWEST, TIMELINE_ROWS, RunSeries
from .svg_charts import (KV_LINES, POLICY_COLORS, Axes, TimelineRow, cdf_chart, coord, esc,
                         svg, tick_label, time_chart, timeline_chart)

__all__ = ["html_report", "sweep_report", "sweep_lines", "select_requests", "TIMELINE_ROWS"]

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
        out.append(time_chart("kv", s, end, xunit, time_label, lines, "blocks", marks=True))
        out.append(f'<p class="note">Pool: {s.num_blocks:,} blocks. Counts as each '
                   "<code>snapshot</code> saw them (after admission, before the dispatch "
                   "allocates); marks at the top: preemptions and retractions.</p>\n")
        out.append(f"<h3>Waiting and running requests under {esc(s.policy)}</h3>\n")
        out.append(time_chart("queues", s, end, xunit, time_label,
                              [("waiting", "#d62728", s.snap_t, s.snap["waiting"], False),
                               ("running", "#1f77b4", s.snap_t, s.snap["running"], False)],
                              "requests"))
        out.append(f"<h3>Tokens per dispatch under {esc(s.policy)}</h3>\n")
        out.append(time_chart("tokens", s, end, xunit, time_label,
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
        out.append(cdf_chart(f"cdf-{kind}", label, unit_text, pairs))
        notes = [_binned_note(s.policy, getattr(s, kind)) for s in series
                 if not getattr(s, kind).is_exact]
        if notes:
            out.append(f'<p class="note">{" ".join(notes)}</p>\n')
    out += _survival_section(runs, series, colors)
    rows, which = select_requests(series)
    out.append(f"<h2>Requests</h2>\n<p class=\"note\">{esc(which)} Hover over a row for "
               "its id.</p>\n")
    for s, policy_rows in zip(series, rows):
        out.append(f"<h3>Timeline under {esc(s.policy)}</h3>\n")
        out.append(timeline_chart(policy_rows, end, xunit, time_label))
    out.append("</body>\n</html>\n")
    return "".join(out)


def _survival_section(runs: list[dict[str, Any]], series: list[RunSeries],
                      colors: dict[str, str]) -> list[str]:
    """With host memory, or a preemption mode asked for: where the rows of resumed
    requests came back from (README "Host memory"), as a CDF of each resume's
    surviving fraction and the three-way split of the rows; nothing otherwise."""
    if not any("resumes" in run for run in runs):
        return []
    out = ["<h2>Resumed requests: where their rows came back from</h2>\n"
           "<p class=\"note\">At each re-admission of a preempted request, the rows it "
           "had written are found in the GPU prefix cache, copied from host memory, or "
           "recomputed; a resume's surviving fraction is the first two over all.</p>\n"]
    lines = [(s.policy, colors[s.policy], s.survival) for s in series]
    out.append(cdf_chart("cdf-survival", "surviving fraction", "of the rows", lines))
    notes = []
    for run in runs:
        parts = (run["rebuilt_from_gpu"], run["rebuilt_from_host"],
                 run["rebuilt_by_recompute"])
        total = sum(parts)
        split = ", ".join(f"{label} {n:,} ({n / total * 100:.1f}%)" for label, n in zip(
            ("from the GPU cache", "from host memory", "recomputed"), parts)) if total else ""
        n = run["resumes"]
        notes.append(f"{esc(run['policy'])}: {n:,} resume{'' if n == 1 else 's'}"
                     + (f"; rows {split}" if split else "") + ".")
    out.append(f'<p class="note">{" ".join(notes)}</p>\n')
    return out


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
        axes_ = Axes(lo_x - pad, hi_x + pad, min(0.0, min(ys)), max(ys) * 1.08 or 1)
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
                parts.append(f'<circle cx="{coord(axes_.x(px))}" cy="{coord(axes_.y(py))}" r="3" '
                             f'fill="{color}"><title>{esc(name)}: {esc(x)}={esc(v)}, '
                             f'{esc(metric)}={tick_label(y)}</title></circle>')
        out.append(svg("sweep", parts))
        # The legend under the chart: a line's name can be long (the other swept values).
        out.append('<ul class="legend">' + "".join(
            f'<li><span style="background:{color}"></span>{esc(name)}</li>'
            for name, color in legend) + "</ul>\n")
    out += ["<h2>Configurations</h2>\n<pre>", html.escape(table), "</pre>\n",
            "</body>\n</html>\n"]
    return "".join(out)

