"""The HTML page of `replay --report FILE.html` (and, from `sweep_page`, of
`sweep --report`).

This module owns the replay's page: from the `RunSeries` of each policy
(`report_series.py`) and the runs' summaries it writes one HTML document with
inline SVG charts and a little CSS, no script and nothing fetched. It is laid
out to explain a latency, every policy on the same axes (a colour per policy):

- every request's TTFT and queue delay against its arrival time, as density
  (each policy's cells in its colour, darker where more requests fall; every
  request counted, in memory bounded by `density_grid`), with each policy's
  p99 and p50 per window of about `WINDOW_REQUESTS` arrivals; then, on the
  same time axis (same x range and plot width, so the charts line up), the
  preemptions and retractions per stretch of the run, the KV blocks in use
  (the pool less its free blocks, as a percentage), the waiting and the
  running requests and the tokens per dispatch: for each, per pixel column,
  the band between the minimum and the maximum and the mean inside it; with
  a cost model, the GPU's busy share, MFU and MBU (`utilisation_chart`).
  Radio buttons above them show every policy or one alone (`_chooser`: CSS
  hides the drawings tagged with another policy's index);
- TTFT, TPOT, ITL and end-to-end latency CDFs, one line per policy, on log
  axes, from the exact values, or from a histogram past
  `bounded_series.EXACT_VALUES` distinct values (the page says so under the
  chart); each line is drawn through at most `CDF_POINTS` of them;
- with host memory (or a preemption mode asked for), the CDF of resumed
  requests' surviving fraction and where their rows came back from;
- per policy, in a closed `details`, its KV blocks by state (allocated,
  reserved, cached, draining, free) and a timeline of at most
  `TIMELINE_ROWS` requests (waiting, prefill, decode, preempted, recompute):
  all of them when the trace is that small, else an evenly spaced sample by
  arrival (the same under every policy) and its slowest by end-to-end
  latency among the others (the page says which);
- the summary table and the options, as `report.format_table` prints them,
  at the top.

The page is deterministic (no timestamps; numbers written with fixed
formats), and every text from a trace goes through `svg_axes.esc`.
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
from .report_series import MEAN_FIELDS, SLOWEST, TIMELINE_ROWS, RunSeries
from .svg_axes import PAGE_STYLE, POLICY_COLORS, esc
from .svg_charts import (KV_LINES, WINDOW_REQUESTS, TimelineRow, band_chart, cdf_chart,
                         density_chart, lines_chart, marks_chart, timeline_chart)
from .sweep_page import sweep_lines, sweep_report
from .utilisation_chart import utilisation_chart

__all__ = ["html_report", "sweep_report", "sweep_lines", "select_requests", "TIMELINE_ROWS"]


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
    end = max((s.end for s in series), default=0) or 1
    names = [s.policy for s in series]
    colors = {s.policy: POLICY_COLORS[i % len(POLICY_COLORS)] for i, s in enumerate(series)}
    fleet = options.replicas > 1
    out = ["<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
           f"<title>scheduler-sim report: {esc(trace_name)}</title>\n",
           f"<style>{PAGE_STYLE}{_chooser_style(len(series))}</style>\n</head>\n<body>\n",
           f"<h1>scheduler-sim replay: {esc(trace_name)}</h1>\n",
           f"<p>Policies: {', '.join(esc(n) for n in names)}. Times in {esc(unit)}."
           + (f" A fleet of {options.replicas} replicas: the charts over time show "
              "the sums over its replicas." if fleet else "") + "</p>\n",
           "<h2>Summary</h2>\n<pre>",
           html.escape(format_table(trace_name, options, runs, clock, pool)),
           "</pre>\n"]
    out += _over_time(series, colors, end, xunit, unit)
    kinds = (("ttft", "TTFT", unit), ("tpot", "TPOT", f"{unit}/token"), ("itl", "ITL", unit),
             ("e2el", "E2EL", unit))
    binned = any(not getattr(s, kind).is_exact for s in series for kind, _, _ in kinds)
    out.append("<h2>Latency distributions</h2>\n<p class=\"note\">Empirical CDFs of "
               + ("the per-request values" if binned else "the exact per-request values")
               + " (ITL: every gap between two outputs of a request), one line per policy,"
               " on log axes." + (f" A policy's values are drawn exactly while they are at most "
                                  f"{bounded_series.EXACT_VALUES:,} "
                                  "distinct ones, else from a histogram (said under the chart)."
                                  if binned else "") + "</p>\n")
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
    out += _per_policy(series, end, xunit, unit)
    out.append("</body>\n</html>\n")
    return "".join(out)


def _over_time(series: list[RunSeries], colors: dict[str, str], end: int, xunit: float,
               unit: str) -> list[str]:
    """The charts on the run's time axis: every request's TTFT and queue delay at its
    arrival, then preemptions, KV blocks in use, waiting and running requests and
    tokens per dispatch, every policy on each."""
    xlabel = f"time ({unit})"
    arrival = f"arrival time ({unit})"
    out = ["<h2>Over time</h2>\n<p class=\"note\">Every chart below spans the run on the "
           "same time axis. The first two place every request at its arrival: each "
           "policy's requests are counted in cells (a stretch of arrival time by a band of "
           "the latency, each band about 9% wide or, on a wide range, a multiple of that), "
           "a cell the darker the more requests it holds; the lines are each policy's p99 "
           f"(solid) and median (dashed) over windows of about {WINDOW_REQUESTS} arrivals, "
           "to within a band. The others show, per pixel column, the range from the "
           "minimum to the maximum (light) and the mean (line)."
           + (" Where the policies overlap, choose one to see it alone." if len(series) > 1
              else "") + "</p>\n"]
    if len(series) > 1:
        out.append(_chooser(series))
    for kind, label, what in (("ttft", "TTFT", "ttft_grid"),
                              ("queue", "queue delay", "queue_grid")):
        grids = [(s.policy, colors[s.policy], getattr(s, what)) for s in series]
        out.append(f"<h3>{label[0].upper() + label[1:]} of every request, by arrival</h3>\n")
        out.append(density_chart(f"density-{kind}", label, unit, grids, end, xunit, arrival))
        counted = [f"{esc(s.policy)} {grid.total:,}" + (
            f" ({s.requests - grid.total:,} without one)" if s.requests > grid.total else "")
            for s, (_, _, grid) in zip(series, grids)]
        out.append(f'<p class="note">Requests drawn: {"; ".join(counted)}.</p>\n')
    out.append("<h3>Preemptions and retractions</h3>\n")
    out.append(marks_chart("marks", [(s.policy, colors[s.policy], s.preemptions,
                                      s.retractions) for s in series], end, xunit, xlabel,
                           unit))
    free, waiting, running = (MEAN_FIELDS.index(n) for n in ("free", "waiting", "running"))
    out.append("<h3>KV blocks in use (the pool less its free blocks)</h3>\n")
    out.append(band_chart("kv-used", [
        (s.policy, colors[s.policy], s.snap_t, s.snap["free"], s.snapshots.means.means(free),
         _in_use(s.num_blocks)) for s in series], end, xunit, xlabel, "% of the pool",
        top=100))
    for kind, label, column in (("waiting", "Waiting requests", waiting),
                                ("running", "Running requests", running)):
        out.append(f"<h3>{label}</h3>\n")
        out.append(band_chart(kind, [
            (s.policy, colors[s.policy], s.snap_t, s.snap[kind], s.snapshots.means.means(column),
             float) for s in series], end, xunit, xlabel, "requests"))
    out.append("<h3>Tokens per dispatch</h3>\n")
    out.append(band_chart("tokens", [
        (s.policy, colors[s.policy], s.disp_t, s.disp_tokens, s.dispatches.means.means(0), float)
        for s in series], end, xunit, xlabel, "tokens", log=True, hold=False))
    worked = [(s.policy, colors[s.policy], s.work.points()) for s in series
              if s.work is not None]
    if worked:
        out.append("<h3>GPU utilisation</h3>\n")
        out.append(utilisation_chart("utilisation", worked, end, xunit, xlabel))
        out.append('<p class="note">Per stretch of the run, over its whole length (idle '
                   "time included): the share of it the GPU was busy (dotted), the model "
                   "FLOPs done over the peak FLOP/s (MFU, solid) and the HBM bytes moved "
                   "over the peak bandwidth (MBU, dashed). The summary gives MFU and MBU "
                   "over busy time.</p>\n")
    return out


def _chooser(series: list[RunSeries]) -> str:
    """Radio buttons that show every policy, or one alone, on the charts that follow
    them (no script: `_chooser_style` hides the others' cells, bands and lines)."""
    buttons = ['<span class="chooser">Show:</span>\n<input type="radio" name="shown" '
               'id="shown-all" checked><label for="shown-all">every policy</label>\n']
    for i, s in enumerate(series):
        buttons.append(f'<input type="radio" name="shown" id="shown-{i}"><label '
                       f'for="shown-{i}">{esc(s.policy)}</label>\n')
    return "".join(buttons)


def _chooser_style(policies: int) -> str:
    """The CSS of `_chooser`: with policy i chosen, what belongs to another is hidden."""
    if policies < 2:
        return ""
    return "".join(f'#shown-{i}:checked ~ svg [data-policy]:not([data-policy="{i}"]) '
                   "{ display: none; }\n" for i in range(policies))


def _in_use(pool: int):
    """Free blocks to the percentage of the pool in use."""
    return lambda free: (pool - free) * 100 / (pool or 1)


def _per_policy(series: list[RunSeries], end: int, xunit: float, unit: str) -> list[str]:
    """Per policy, closed until opened: its KV blocks by state and its timeline."""
    xlabel = f"time ({unit})"
    rows, which = select_requests(series)
    out = ["<h2>Per policy</h2>\n<p class=\"note\">Each policy's KV blocks by state, and "
           f"a timeline of requests: {esc(which)} Hover over a row for its id.</p>\n"]
    for s, policy_rows in zip(series, rows):
        out.append(f"<details><summary>{esc(s.policy)}: KV blocks by state, "
                   "timeline</summary>\n")
        out.append(f"<h3>KV blocks under {esc(s.policy)}</h3>\n")
        lines = [(name, color, s.snap_t, s.snap[name]) for name, color in KV_LINES
                 if name != "cached" or any(s.snap["cached"])]
        out.append(lines_chart("kv", end, xunit, xlabel, "blocks", lines))
        out.append(f'<p class="note">Pool: {s.num_blocks:,} blocks. Counts as each '
                   "<code>snapshot</code> saw them (after admission, before the dispatch "
                   "allocates).</p>\n")
        out.append(f"<h3>Timeline under {esc(s.policy)}</h3>\n")
        out.append(timeline_chart(policy_rows, end, xunit, xlabel))
        out.append("</details>\n")
    return out


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
