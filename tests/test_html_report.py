"""`replay --report FILE.html`: the page is well-formed, complete, escaped, deterministic,
keeps peaks when it downsamples, and draws its charts in a real browser."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from scheduler_sim.cli.main import main
from scheduler_sim.engine.core import Engine
from scheduler_sim.engine.summary import request_record
from scheduler_sim.io import bounded_series
from scheduler_sim.io.report_series import RunSeries
from scheduler_sim.io.html_report import sweep_report
from scheduler_sim.io.svg_axes import PLOT_W, log_ticks
from scheduler_sim.io.svg_charts import band_chart, cdf_points, downsample
from scheduler_sim.io.trace import read_trace
from scheduler_sim.io.trace_config import resolve_options
from scheduler_sim.records.clock import Clock

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = "<script>alert(1)</script>"


def _trace(tmp_path: Path, hostile: bool = True) -> str:
    """A small trace that preempts (vllm runs out of blocks) and has a hostile id."""
    records = [{"type": "config", "block_size": 4, "num_blocks": 14, "token_budget": 32,
                "max_rows": 8}]
    for i in range(24):
        rid = HOSTILE if hostile and i == 3 else f"r{i}"
        records.append({"type": "request", "id": rid, "arrival": i * 2,
                        "prompt_tokens": 6 + (i * 7) % 13, "output_tokens": 4 + (i * 5) % 11})
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _report(tmp_path: Path, trace: str, *flags: str, name: str = "r.html") -> str:
    out = tmp_path / name
    code = main(["replay", trace, "--policy", "continuous", "--policy", "vllm",
                 "--report", str(out), *flags], _Sink(), _Sink())
    assert code == 0
    return out.read_text(encoding="utf-8")


class _Sink:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class _Tags(HTMLParser):
    """Checks that every element closes in order, and keeps the text outside SVG titles."""

    VOID = {"meta", "br", "img", "input", "link", "hr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts += 1
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (tag, self.stack[-5:])
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def _svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", page, re.S)]


def test_page_is_well_formed_with_every_chart(tmp_path):
    page = _report(tmp_path, _trace(tmp_path))
    tags = _Tags()
    tags.feed(page)
    tags.close()
    assert tags.stack == [] and tags.scripts == 0
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # fetches nothing
    charts = {svg.get("data-chart"): svg for svg in _svgs(page)}
    assert set(charts) == {"density-ttft", "density-queue", "marks", "kv-used", "waiting",
                           "running", "tokens", "cdf-ttft", "cdf-tpot", "cdf-itl",
                           "cdf-e2el", "kv", "timeline"}
    kinds = [svg.get("data-chart") for svg in _svgs(page)]
    assert kinds.count("kv") == 2 and kinds.count("timeline") == 2  # per policy, in details
    assert kinds.count("kv-used") == 1 and kinds.count("cdf-ttft") == 1  # policies overlaid
    assert series(charts["kv"]) == {"allocated", "reserved", "draining", "free"}
    text = "".join(tags.text)
    for label in ("Summary", "KV blocks under vllm", "Tokens per dispatch", "TTFT", "TPOT",
                  "ITL", "E2EL", "Timeline under continuous", "All 24 requests",
                  "num_blocks 14", "Preemptions and retractions",
                  "Requests drawn: continuous 24; vllm 24."):
        assert label in text, label
    # vllm runs out of blocks on this trace: its preemptions are counted, continuous's not.
    marks = {p.get("data-series") for p in charts["marks"].iter(SVG + "polyline")}
    run = json.loads(_json(tmp_path, "vllm"))["runs"][0]
    assert marks == {"continuous (0)", f"vllm ({run['preemptions']})"} and run["preemptions"]
    # The timeline has one group per request, each titled with its id.
    timeline = charts["timeline"]
    titles = [g.find(SVG + "title").text for g in timeline.iter(SVG + "g")]
    assert len(titles) == 24


def series(svg, tag: str = "polyline", kind: str = "series"):
    """The names of the drawn series of a chart (`tag` elements of class `kind`)."""
    return {p.get("data-series") for p in svg.iter(SVG + tag) if p.get("class") == kind}


def _json(tmp_path: Path, policy: str) -> str:
    out = _Text()
    assert main(["replay", _trace(tmp_path), "--policy", policy, "--json"], out, _Sink()) == 0
    return out.text


def test_every_policy_is_on_one_chart_per_metric(tmp_path):
    """Each chart over time and each CDF holds every policy, by name, once: a band and a
    mean line per policy, a p99 and a p50 line and cells per policy on the densities,
    one CDF line per policy."""
    page = _report(tmp_path, _trace(tmp_path), "--policy", "sglang")
    charts = {svg.get("data-chart"): svg for svg in _svgs(page)}
    policies = ["continuous", "vllm", "sglang"]
    for kind in ("kv-used", "waiting", "running", "tokens"):
        for cls in ("band", "series"):
            names = [p.get("data-series") for p in charts[kind].iter(SVG + "path")
                     if p.get("class") == cls]
            assert names == policies, (kind, cls, names)
    for kind in ("density-ttft", "density-queue"):
        lines = [p.get("data-series") for p in charts[kind].iter(SVG + "path")
                 if p.get("class") == "series"]
        assert lines == [f"{p} {q}" for p in policies for q in ("p99", "p50")]
        assert series(charts[kind], "path", "cells") == set(policies)
    for kind in ("cdf-ttft", "cdf-tpot", "cdf-itl", "cdf-e2el"):
        assert [p.get("data-series") for p in charts[kind].iter(SVG + "polyline")] == policies
    legend = [t.text for t in charts["waiting"].iter(SVG + "text")][-3:]
    assert legend == policies
    # Each policy's drawings carry its index, for the radio buttons that show it alone.
    for kind in ("density-ttft", "kv-used", "tokens", "marks", "cdf-tpot"):
        tagged = [(p.get("data-series").split(" ")[0], p.get("data-policy"))
                  for p in charts[kind].iter() if p.get("data-policy") is not None]
        assert tagged and all(policies.index(name) == int(index) for name, index in tagged)
        assert {name for name, _ in tagged} == set(policies)
    assert page.count('<input type="radio" name="shown"') == 4
    for i in range(3):
        assert (f'#shown-{i}:checked ~ svg [data-policy]:not([data-policy="{i}"]) '
                "{ display: none; }") in page


def test_hostile_id_is_text(tmp_path):
    page = _report(tmp_path, _trace(tmp_path))
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    tags = _Tags()
    tags.feed(page)
    assert tags.scripts == 0
    titles = [t.text for svg in _svgs(page) for t in svg.iter(SVG + "title")]
    assert any(t and t.startswith(HOSTILE) for t in titles)  # shown, as text


def test_same_input_same_bytes(tmp_path):
    trace = _trace(tmp_path)
    first = (tmp_path / "a.html", _report(tmp_path, trace, name="a.html"))
    second = _report(tmp_path, trace, name="b.html")
    assert first[0].read_bytes() == (tmp_path / "b.html").read_bytes()
    assert first[1] == second


def test_seconds_and_fleet(tmp_path):
    trace = _trace(tmp_path, hostile=False)
    page = _report(tmp_path, trace, "--cost-model", "llama-3-8b/h100-sxm", "--replicas", "2",
                   "--num-blocks", "14")
    assert "Times in s." in page and "A fleet of 2 replicas" in page
    assert "time (s)" in page
    kv = [s for s in _svgs(page) if s.get("data-chart") == "kv"]
    assert len(kv) == 2


def test_itl_matches_the_summary(tmp_path):
    """The ITL the report draws is the one the summary counts: same largest gap."""
    trace = _trace(tmp_path, hostile=False)
    page = _report(tmp_path, trace, "--json")
    assert [s for s in _svgs(page) if s.get("data-chart") == "cdf-itl"]
    loaded = read_trace(trace)
    options, _ = resolve_options(loaded.config, {})
    for policy in ("continuous", "vllm"):
        seen = RunSeries(policy, Clock.of(options), options.num_blocks,
                         requests=len(loaded.workload))
        result = Engine(loaded.workload, options, policy, on_event=seen,
                        on_request_end=seen.ended).run()
        seen.finish()
        counts = seen.itl.pairs()
        assert seen.itl.is_exact and counts[-1][0] == result.summary["itl_max"]
        assert seen.itl.total == sum(r.outputs - 1 for r in result.requests if r.outputs)
        assert seen.e2el.pairs()[-1][0] == result.summary["e2el_max"]


def test_a_binned_distribution_says_so_on_the_page(tmp_path, monkeypatch):
    """Past EXACT_VALUES distinct values (3 here) a CDF is drawn from a histogram, and the
    page says so under the chart (values, buckets, how far above); with the default
    limit this small trace's page says its CDFs are exact and has no such note."""
    trace = _trace(tmp_path, hostile=False)
    page = _report(tmp_path, trace, name="exact.html")
    assert "Empirical CDFs of the exact per-request values" in page
    assert "from a histogram" not in page
    monkeypatch.setattr(bounded_series, "EXACT_VALUES", 3)
    page = _report(tmp_path, trace, name="binned.html")
    assert "Empirical CDFs of the per-request values" in page
    assert "drawn exactly while they are at most 3 distinct ones" in page
    notes = re.findall(r"vllm: from a histogram of ([0-9,]+) values in ([0-9,]+) buckets; "
                       r"each value is drawn at the largest value of its bucket, at most "
                       r"0.098% above it.", page)
    # E2EL, in whole ticks below 1,024: one bucket per distinct latency.
    loaded = read_trace(trace)
    options, _ = resolve_options(loaded.config, {})
    result = Engine(loaded.workload, options, "vllm").run()
    distinct = {request_record(r)["e2el"] for r in result.requests}
    assert notes[-1] == ("24", str(len(distinct))) and len(notes) == 4
    assert len(_svgs(page)) == 15


def test_downsampling_keeps_peaks():
    xs = list(range(100_000))
    ys = [(x * 7919) % 1000 for x in xs]
    ys[54_321] = 10_000
    ys[12_345] = -5
    points = downsample(xs, ys, 0, 99_999, 800)
    assert len(points) <= 2 * 800 + 1
    assert (54_321, 10_000) in points and (12_345, -5) in points
    assert points[-1] == (99_999, ys[-1])
    assert [p[0] for p in points] == sorted(p[0] for p in points)
    steps = cdf_points([(v, 1) for v in range(10_000)], 100)
    assert steps[0] == (0, 1 / 10_000) and steps[-1] == (9_999, 1.0)
    assert len(steps) <= 102


# --- in a browser --------------------------------------------------------------------

def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _png_pixels(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, rows) of an 8-bit RGB or RGBA PNG, unfiltered."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, []
    width = height = bpp = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


@pytest.mark.slow  # headless Chromium renders the page: 3.6 s of CPU
def test_browser_draws_the_charts(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium binary (chromium, chromium-browser, google-chrome) on PATH; "
                    ".ci/run installs Debian's chromium")
    page = tmp_path / "r.html"
    page.write_text(_report(tmp_path, _trace(tmp_path)), encoding="utf-8")
    shot = tmp_path / "shot.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=60).stdout
    # After load, the DOM holds every chart and its lines.
    # 7 over time, 4 CDFs, and per policy its KV blocks by state and its timeline.
    assert dom.count("<svg") == 15, dom[:300]
    # Per policy: p99 and p50 on each of 2 densities, a preemption line, a mean on each
    # of 4 bands, 4 CDFs and its 4 KV block states (no cached blocks here): 2 x 17.
    assert dom.count('class="series"') == 34 and "<script" not in dom
    subprocess.run([browser, *flags, "--window-size=1000,2600", "--force-device-scale-factor=0.3",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=60)
    width, height, bpp, rows = _png_pixels(shot.read_bytes())
    # Only the charts are in colour (the text is black on white): count coloured pixels
    # of each chart line colour (the allocated blue and the decode green).
    colored = 0
    for row in rows:
        for i in range(0, len(row), bpp):
            r, g, b = row[i], row[i + 1], row[i + 2]
            if max(r, g, b) - min(r, g, b) > 60:
                colored += 1
    assert colored > 500, (width, height, colored)


@pytest.mark.slow  # headless Chromium renders the page twice: 5 s of CPU
def test_choosing_a_policy_hides_the_others_in_a_browser(tmp_path):
    """With vllm chosen (the second radio button checked) the first policy's blue
    (#1f77b4) is gone from the charts: what stays is its legend swatches."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium binary on PATH; .ci/run installs Debian's chromium")
    page = _report(tmp_path, _trace(tmp_path, hostile=False))
    chosen = page.replace('id="shown-all" checked', 'id="shown-all"').replace(
        'id="shown-1">', 'id="shown-1" checked>')
    assert chosen.count(" checked") == 1 and 'id="shown-1" checked' in chosen
    blue = []
    for name, text in (("all.html", page), ("one.html", chosen)):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        shot = tmp_path / f"{name}.png"
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--no-first-run",
                        f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,2600",
                        f"--screenshot={shot}", path.as_uri()], capture_output=True, timeout=60)
        _, _, bpp, rows = _png_pixels(shot.read_bytes())
        blue.append(sum(1 for row in rows for i in range(0, len(row), bpp)
                        if row[i + 2] > 150 and row[i] < 120 and row[i + 2] - row[i] > 60))
    assert blue[1] * 4 < blue[0], blue


def test_a_preemption_mode_adds_where_resumed_rows_came_back_from(tmp_path):
    """With `--preemption-mode recompute` (no host memory, no prefix cache) every row of
    every resume is recomputed: the page draws the survival CDF (every resume at 0)
    and says how many resumes there were, as many as the summary's preemptions; without
    the option the section is absent."""
    trace = _trace(tmp_path, hostile=False)
    assert "Resumed requests" not in _report(tmp_path, trace)
    page = _report(tmp_path, trace, "--preemption-mode", "recompute", name="p.html")
    charts = {svg.get("data-chart"): svg for svg in _svgs(page)}
    assert {p.get("data-series") for p in charts["cdf-survival"].iter(SVG + "polyline")} == {
        "vllm"}  # continuous never preempts here: no line
    code = main(["replay", trace, "--policy", "vllm", "--preemption-mode", "recompute",
                 "--json"], out := _Text(), _Sink())
    run = json.loads(out.text)["runs"][0]
    assert run["resumes"] == run["preemptions"] > 0
    assert run["rebuilt_from_gpu"] == run["rebuilt_from_host"] == 0
    assert (run["survival_p10"], run["survival_p90"]) == (0.0, 0.0)
    assert (f"vllm: {run['resumes']:,} resumes; rows from the GPU cache 0 (0.0%), from host "
            f"memory 0 (0.0%), recomputed {run['rebuilt_by_recompute']:,} (100.0%)") in page
    assert code == 0


class _Text:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


# --- axes, bands and the sweep's page, by hand ------------------------------------------

def test_log_ticks_by_hand():
    """The richest of decades, 1-2-5 and every digit that gives at most `most` ticks;
    past `most` decades every second one; within one step, linear round values."""
    assert log_ticks(0.003, 0.2) == [0.005, 0.01, 0.02, 0.05, 0.1, 0.2]
    assert log_ticks(512, 8192) == [1000.0, 2000.0, 5000.0]
    assert log_ticks(0.08, 12.5, 6) == [0.1, 1.0, 10.0]
    assert log_ticks(1.5, 9.5) == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert log_ticks(1e-6, 1e4, 6) == [1e-6, 1e-4, 0.01, 1.0, 100.0, 1e4]
    assert log_ticks(1.1, 1.9) == [1.2, 1.4, 1.6, 1.8]


def test_every_latency_cdf_is_on_a_log_axis(tmp_path):
    """TPOT too (it was linear): each CDF's axis says log scale, and its ticks are the
    round values between its smallest positive and its largest value."""
    page = _report(tmp_path, _trace(tmp_path, hostile=False))
    charts = {svg.get("data-chart"): svg for svg in _svgs(page)}
    for kind, label in (("cdf-ttft", "TTFT (ticks, log scale)"),
                        ("cdf-tpot", "TPOT (ticks/token, log scale)"),
                        ("cdf-itl", "ITL (ticks, log scale)"),
                        ("cdf-e2el", "E2EL (ticks, log scale)")):
        texts = [t.text for t in charts[kind].iter(SVG + "text")]
        assert label in texts, (kind, texts)
    ticks = [t.text for t in charts["cdf-tpot"].iter(SVG + "text") if t.get("class") == "xtick"]
    values = [float(t) for t in ticks]
    assert values == sorted(values) and all(v > 0 for v in values) and len(values) >= 2


def test_a_band_holds_its_last_value_and_draws_the_mean_inside():
    """One pixel column a step (end = PLOT_W), the y axis 0 to 10 over 156 pixels: rows
    (0, 2), (0, 6), (5, 4). Column 0 ranges 2..6 with mean 4; columns 1-4 have no row
    and hold 6; column 5 ranges from the 6 it began with down to 4, mean 4."""
    means = bounded_series.BucketMeans(1)
    for t, value in ((0, 2), (0, 6), (5, 4)):
        means.add(t, (value,))
    chart = band_chart("k", [("p", "#123456", [0, 0, 5], [2, 6, 4], means.means(0), float)],
                       PLOT_W, 1, "time", "count", top=10)
    svg = ET.fromstring(chart)
    paths = {p.get("class"): p.get("d") for p in svg.iter(SVG + "path")}
    y = {2: "140.8", 4: "109.6", 6: "78.4"}
    assert paths["series"] == (f"M80.5,{y[4]}L81.5,{y[6]}L82.5,{y[6]}L83.5,{y[6]}"
                               f"L84.5,{y[6]}L85.5,{y[4]}")
    upper = "L".join(f"{80 + c}.5,{y[6]}" for c in range(6))
    lower = "L".join([f"85.5,{y[4]}"] + [f"{80 + c}.5,{y[6]}" for c in (4, 3, 2, 1)]
                     + [f"80.5,{y[2]}"])
    assert paths["band"] == f"M{upper}L{lower}Z"


def _sweep_svg(rows, axes, x):
    page = sweep_report("t.jsonl", axes, rows, x, "ttft_p99", "s", "table")
    start = page.index("<svg")
    return page, ET.fromstring(page[start:page.index("</svg>", start) + 6])


def test_the_sweep_ticks_each_swept_value_on_a_log_axis_with_distinct_markers():
    """num_blocks 512, 2048, 8192 span 16x: a log x axis ticked at each of them; the
    metric 0.1, 1, 10 spans 100x: a log y axis ticked 0.1, 1, 10. Two identical lines
    each keep their points, as a circle and a square, and their own dash."""
    rows = [{"num_blocks": n, "policy": p, "ttft_p99": v} for p in ("vllm", "sglang")
            for n, v in ((512, 0.1), (2048, 1.0), (8192, 10.0))]
    page, svg = _sweep_svg(rows, ["num_blocks", "policy"], "num_blocks")
    texts = lambda cls: [t.text for t in svg.iter(SVG + "text") if t.get("class") == cls]
    assert texts("xtick") == ["512", "2048", "8192"]
    assert texts("ytick") == ["0.1", "1", "10"]
    points = [(p.get("data-series"), p.get("data-marker")) for p in svg.iter()
              if p.get("class") == "point"]
    assert points == [("vllm", "circle")] * 3 + [("sglang", "square")] * 3
    lines = {p.get("data-series"): p.get("stroke-dasharray") for p in svg.iter(SVG + "polyline")}
    assert lines == {"vllm": None, "sglang": "6,3"}
    assert "ttft_p99 (s) against num_blocks, one line per policy." in page
    assert "num_blocks (log scale)" in texts(None)


def test_a_sweep_over_policies_alone_is_drawn_as_bars():
    """x = policy (categorical): a bar per policy, no line; 300 pixels tall, 246 of plot,
    the y axis 0 to 5 x 1.08: the bar of 5.0 is 227.8 pixels, that of 3.0 136.7."""
    rows = [{"policy": "vllm", "ttft_p99": 3.0}, {"policy": "sglang", "ttft_p99": 5.0}]
    page, svg = _sweep_svg(rows, ["policy"], "policy")
    bars = [(r.get("data-x"), r.get("height")) for r in svg.iter(SVG + "rect")
            if r.get("class") == "bar"]
    assert bars == [("vllm", "136.7"), ("sglang", "227.8")]
    assert list(svg.iter(SVG + "polyline")) == []
    assert "ttft_p99 (s) against policy, one bar per value of policy." in page


def test_a_band_of_blocks_in_use_holds_what_was_in_use():
    """Free blocks of a pool of 10, shown as the percentage in use: 10 free at step 0
    (0% in use), 4 free at step 3 (60%). Columns 1 and 2 hold 0%; column 3 ranges from
    the 0% it began with to 60%; the y axis is 0 to 100 over 156 pixels."""
    chart = band_chart("k", [("p", "#123456", [0, 3], [10, 4], [],
                              lambda free: (10 - free) * 100 / 10)],
                       PLOT_W, 1, "time", "% of the pool", top=100)
    svg = ET.fromstring(chart)
    band = next(p.get("d") for p in svg.iter(SVG + "path") if p.get("class") == "band")
    y0, y60 = "172.0", "78.4"
    assert band == (f"M80.5,{y0}L81.5,{y0}L82.5,{y0}L83.5,{y60}"
                    f"L83.5,{y0}L82.5,{y0}L81.5,{y0}L80.5,{y0}Z")


def test_the_charts_over_time_share_their_x_axis(tmp_path):
    """The densities (by arrival), preemptions, blocks in use, queues and tokens span the
    same plot (80 to 1,110 pixels) and tick the same times at the same places, so
    they line up one above the other; the timeline's rows are counted on its y axis."""
    page = _report(tmp_path, _trace(tmp_path, hostile=False))
    charts = {svg.get("data-chart"): svg for svg in _svgs(page)}
    frames = set()
    for kind in ("density-ttft", "density-queue", "marks", "kv-used", "waiting", "running",
                 "tokens"):
        svg = charts[kind]
        plot = next(svg.iter(SVG + "rect"))
        ticks = tuple((t.get("x"), t.text) for t in svg.iter(SVG + "text")
                      if t.get("class") == "xtick")
        frames.add((plot.get("x"), plot.get("width"), ticks))
    assert len(frames) == 1
    (x, width, ticks), = frames
    assert (x, width) == ("80", "1030") and ticks[0] == ("80.0", "0")
    timeline = [t.text for t in charts["timeline"].iter(SVG + "text")]
    assert "request (by arrival)" in timeline
    assert [t.text for t in charts["timeline"].iter(SVG + "text")
            if t.get("class") == "ytick"] == ["5", "10", "15", "20"]


def test_the_density_draws_one_cell_per_counted_cell(tmp_path, monkeypatch):
    """Every nonempty cell of a policy's grid is drawn once (a subpath of its cells),
    after the columns merged (COLUMNS 4), and the cells count all 24 requests."""
    from scheduler_sim.io import density_grid
    from scheduler_sim.io.svg_charts import density_chart
    monkeypatch.setattr(density_grid, "COLUMNS", 4)
    loaded = read_trace(_trace(tmp_path, hostile=False))
    options, _ = resolve_options(loaded.config, {})
    seen = RunSeries("vllm", Clock.of(options), options.num_blocks,
                     requests=len(loaded.workload))
    Engine(loaded.workload, options, "vllm", on_event=seen, on_request_end=seen.ended).run()
    seen.finish()
    grid = seen.ttft_grid
    assert grid.width > 1 and grid.total == 24
    assert sum(sum(cell.values()) for cell in grid.cells.values()) == 24
    svg = ET.fromstring(density_chart("d", "TTFT", "ticks", [("vllm", "#000", grid)],
                                      seen.end, 1, "arrival"))
    drawn = sum(p.get("d").count("M") for p in svg.iter(SVG + "path")
                if p.get("class") == "cells")
    assert drawn == sum(len(cell) for cell in grid.cells.values())


def test_utilisation_columns_are_length_weighted_means_by_hand():
    """A run of 10,000 steps of 1 ms on PLOT_W columns: buckets whose middles share a
    column average by their lengths; a bucket's middle alone in a column is its own."""
    from scheduler_sim.io.utilisation_chart import column_means
    end, xunit = 10_000, 0.001
    # Column of a middle m steps: int(m / 10,000 * PLOT_W).
    points = [(0.0, 0.002, 1.0, 0.5, 0.25),    # middle 1 step
              (0.002, 0.003, 0.0, 0.0, 0.0),   # middle 2.5 steps: the same column as 1
              (0.5, 0.6, 0.5, 0.1, 0.3)]       # middle 550 steps
    assert (int(1 / 10_000 * PLOT_W), int(2.5 / 10_000 * PLOT_W)) == (0, 0)
    means = column_means(points, end, xunit)
    assert [c for c, *_ in means] == [0, int(550 / 10_000 * PLOT_W)]
    # (2 ms x (1, 0.5, 0.25) + 1 ms x 0) / 3 ms
    assert means[0][1:] == pytest.approx((2 / 3, 1 / 3, 0.5 / 3), abs=1e-15)
    assert means[1][1:] == (0.5, 0.1, 0.3)


def test_a_cost_model_adds_the_utilisation_chart_for_every_policy(tmp_path):
    """With a cost model, the charts over time end with the GPU's busy share, MFU and MBU,
    three lines per policy, each tagged with its policy's index; in ticks there is none."""
    trace = _trace(tmp_path, hostile=False)
    page = _report(tmp_path, trace, "--cost-model", "llama-3-8b/h100-sxm", "--num-blocks",
                   "14")
    chart = next(s for s in _svgs(page) if s.get("data-chart") == "utilisation")
    lines = [(p.get("data-series"), p.get("data-policy"), p.get("stroke-dasharray"))
             for p in chart.iter(SVG + "polyline")]
    assert lines == [(f"{policy} {what}", str(i), dash)
                     for i, policy in enumerate(("continuous", "vllm"))
                     for what, dash in (("busy", "2,2"), ("MFU", None), ("MBU", "6,3"))]
    # Each line is drawn: the run's dispatches fall in at least one pixel column.
    for line in chart.iter(SVG + "polyline"):
        assert line.get("points")
    assert "GPU utilisation" in page and "over busy time" in page
    plain = _report(tmp_path, trace, name="plain.html")
    assert "GPU utilisation" not in plain
    assert all(s.get("data-chart") != "utilisation" for s in _svgs(plain))
